"""Every shell recipe printed in README.md and docs/ works as printed: each ``art-adp`` / ``python -m art_adp`` /
``torchrun -m art_adp`` command parses with the real command-line parser (flags, choices, types), each script it
runs exists and takes the flags it is given, and the cheap recipes run exactly as printed."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from art_adp.apps.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
FENCE = re.compile(r"```bash\n(.*?)```", re.S)
# Placeholders a reader substitutes (a data folder, the demo's score model and classifier in docs/detect_certify.md).
PLACEHOLDERS = {"DIR", "S", "C", "NOTEBOOK.ipynb", "../NOTEBOOK.ipynb"}


def commands(text: str):
    """The commands of a page's bash blocks, as ``(folder, command)``: continuations joined, comments cut, ``&&``
    chains split, a ``cd`` applying to the rest of its chain."""
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line, cwd = re.sub(r"(^|\s)#.*$", "", line).strip(), ""
            for part in (p.strip() for p in line.split("&&") if p.strip() and not line.startswith("$")):
                if part.startswith("cd "):
                    cwd = part[3:].strip()
                else:
                    yield cwd, part


def recipes():
    return [(page, cwd, cmd) for page in PAGES for cwd, cmd in commands((ROOT / page).read_text(encoding="utf-8"))]


def cli_argv(cmd: str) -> list[str] | None:
    tokens = [t for t in shlex.split(cmd) if not re.fullmatch(r"[A-Z_]+=\S*", t) and t != "time"]
    if "art-adp" in tokens:
        return tokens[tokens.index("art-adp") + 1 :]
    if "art_adp" in tokens and tokens[tokens.index("art_adp") - 1] == "-m":
        return tokens[tokens.index("art_adp") + 1 :]
    return None


CLI = [(page, cmd) for page, _, cmd in recipes() if cli_argv(cmd) is not None]
SCRIPTS = [(page, cwd, cmd) for page, cwd, cmd in recipes() if cli_argv(cmd) is None and re.search(r"\b(python3?|bash) \S+\.(py|sh)\b", cmd)]


def test_the_pages_have_recipes():
    assert len(CLI) >= 15 and len(SCRIPTS) >= 5, (len(CLI), len(SCRIPTS))


@pytest.mark.parametrize("page,cmd", CLI, ids=[f"{p}:{c[:60]}" for p, c in CLI])
def test_every_cli_recipe_parses(page, cmd, capsys):
    argv = cli_argv(cmd)
    parser = build_parser()
    if "..." in argv:  # "art-adp evaluate ... --estimate-only": the named flags must exist for that command
        sub = parser._subparsers._group_actions[0].choices[argv[0]]  # pylint: disable=protected-access
        unknown = [t for t in argv if t.startswith("--") and t.split("=")[0] not in sub._option_string_actions]
        assert not unknown, f"{page}: `{cmd}` names flags `art-adp {argv[0]}` does not have: {unknown}"
        return
    try:
        parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{page}: `{cmd}` does not parse: {capsys.readouterr().err.strip()}")


@pytest.mark.parametrize("page,cwd,cmd", SCRIPTS, ids=[f"{p}:{c[:60]}" for p, _, c in SCRIPTS])
def test_every_script_recipe_names_a_script_that_takes_its_flags(page, cwd, cmd):
    tokens = shlex.split(cmd)
    i = next(i for i, t in enumerate(tokens) if re.fullmatch(r"\S+\.(py|sh)", t))
    script = (ROOT / cwd / tokens[i]).resolve()
    assert script.is_file(), f"{page}: `{cmd}` runs {tokens[i]}, which does not exist"
    source = script.read_text(encoding="utf-8")
    missing = [t.split("=")[0] for t in tokens[i + 1 :] if t.startswith("--") and t.split("=")[0] not in source]
    assert not missing, f"{page}: `{cmd}`: {script.name} has no flag {missing}"
    for t in tokens[i + 1 :]:  # repository files it reads must exist
        if re.fullmatch(r"(docs|examples|benchmarks)/\S+\.\w+", t) and t not in PLACEHOLDERS and "runs/" not in t:
            assert (ROOT / t).exists(), f"{page}: `{cmd}` reads {t}, which does not exist"


def test_an_unknown_flag_is_caught(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(cli_argv("art-adp evaluate --dataset digits --no-such-flag"))
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.e2e  # a whole program in its own interpreter; tests/test_rendered.py checks the same pages in the suite
@pytest.mark.parametrize("cmd", ["python docs/render.py --check"])
def test_cheap_recipes_run_as_printed(cmd):
    assert any(cmd == c for _, _, c in recipes()), f"`{cmd}` is no longer printed in README or docs"
    run = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def run_dir(cmd: str) -> str:
    argv = cli_argv(cmd)
    return argv[argv.index("--run-dir") + 1] if "--run-dir" in argv else build_parser().parse_args(argv).run_dir


@pytest.mark.parametrize("page", PAGES)
def test_an_evaluation_with_the_baseline_finds_the_baseline_its_page_trained(page):
    """`evaluate --baseline adversarial-training` loads <run-dir>/adv_classifier.safetensors and trains a new one when
    it is missing: a page that trains the baseline must train it into the run folder its evaluation reads."""
    trained = [run_dir(c) for p, _, c in recipes() if p == page and "--adversarial-training" in c]
    for _, _, cmd in (r for r in recipes() if r[0] == page):
        if "--baseline adversarial-training" in cmd and trained and "..." not in cmd:
            assert run_dir(cmd) in trained, f"{page}: `{cmd}` reads its baseline from {run_dir(cmd)}, trained into {trained}"
