"""Docs that cannot drift from the code and the result files behind them: every dotted ``art_adp....`` path the docs
name imports; every recorded ``art-adp`` command parses with today's command line (a removed or renamed flag fails
here); no committed result or page holds a development machine's path; the extras the install docs name are
setup.cfg's; every "same models" claim matches the SHA-256 its result files record."""

import argparse
import configparser
import contextlib
import functools
import importlib
import io
import json
import re
import shlex
import tarfile
from pathlib import Path

import pytest

from art_adp.apps import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


# -- dotted paths ---------------------------------------------------------------------------------------------------

DOTTED = re.compile(r"(?<![\w/.-])art_adp(?:\.[A-Za-z_]\w*)+")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute reached from the longest importable module in it."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        source = ROOT.joinpath(*parts[:i])  # this checkout's module (not another copy an editable install may find)
        if not (source.with_suffix(".py").is_file() or (source / "__init__.py").is_file()):
            continue
        obj = importlib.import_module(".".join(parts[:i]))
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_dotted_path_the_docs_name_imports():
    named = {(m[0], p.relative_to(ROOT).as_posix()) for p in PAGES[:-1] for m in DOTTED.finditer(p.read_text())}
    assert len(named) > 30
    assert sorted((path, page) for path, page in named if not resolves(path)) == []


def test_the_path_check_sees_a_function_hiding_its_module():
    assert resolves("art_adp.purification.ADPParams") and resolves("art_adp.purify")
    assert not resolves("art_adp.purify.ADPParams")  # a function named like a module has no module's names
    assert not resolves("art_adp.no_such_module")


# -- recorded commands ----------------------------------------------------------------------------------------------

_ENDS = ("&&", "||", "|", ";", "#")


@functools.lru_cache(maxsize=1)
def build_parser() -> argparse.ArgumentParser:
    """Today's command line (built once: parsing leaves it unchanged)."""
    return cli.build_parser()


_PLACEHOLDER = re.compile(r"invalid (int|float|count_or_all|learning_rate) value: '[A-Z]+'")


def argv_of(command: str) -> list[str] | None:
    """The arguments an ``art-adp`` / ``python -m art_adp`` / ``torchrun ... -m art_adp`` command line gives the CLI
    (up to a shell operator or a parenthesised note), or None for a command of another program."""
    try:
        tokens = shlex.split(command)
    except ValueError:  # an unbalanced quote: the line is not a command
        return None
    for i, token in enumerate(tokens):
        if token == "art-adp" or (token == "art_adp" and i and tokens[i - 1] == "-m"):
            argv = []
            for t in tokens[i + 1 :]:
                if t in _ENDS or t.startswith("("):
                    break
                argv.append(t)
            return argv
    return None


def parse_error(argv: list[str]) -> str | None:
    """Why today's CLI refuses ``argv`` (None: it parses). ``...`` stands for arguments left out (then a missing
    required argument is no error) and an upper-case word for a value (``--eot-samples K``); a flag must be spelt
    out in full, never abbreviated."""
    parser: argparse.ArgumentParser = build_parser()
    for a in argv:  # find the sub-command's own parser (and a sub-sub-command's) to check the flags' spelling
        subs = [x for x in parser._actions if isinstance(x, argparse._SubParsersAction)]
        if subs and a in subs[0].choices:
            parser = subs[0].choices[a]
    flags = parser._option_string_actions
    takes_value = [i > 0 and argv[i - 1] in flags and flags[argv[i - 1]].nargs != 0 for i in range(len(argv))]
    elided = any(a in ("...", "…") and not value for a, value in zip(argv, takes_value))
    argv = [a for a, value in zip(argv, takes_value) if a not in ("...", "…") or value]  # "--score ...": a value
    unknown = [a.split("=")[0] for a in argv if a.startswith("--") and a.split("=")[0] not in flags]
    if unknown:
        return f"no flag {unknown}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as stop:
        message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else str(stop.code)
        if stop.code and not _PLACEHOLDER.search(message) and not (elided and "are required" in message):
            return message
    return None


def _strings(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, key)
    elif isinstance(value, str):
        yield key, value


def recorded_commands() -> list[tuple[str, str]]:
    """(where, command) for every command a committed result file records and every command a page shows: its
    rendered blocks (the provenance lines) and its shell blocks."""
    found = []
    results = [*sorted((ROOT / "docs").glob("**/*.json")), *sorted((ROOT / "benchmarks" / "results").glob("*.json"))]
    for path in results:
        for key, text in _strings(json.loads(path.read_text("utf-8"))):
            if key in ("command", "cmd"):
                found.append((path.relative_to(ROOT).as_posix(), text))
    for page in PAGES:
        text = page.read_text("utf-8")
        rendered = re.findall(r"<!-- render: [^>]*-->(.*?)<!-- end render -->", text, re.S)
        shell = [b.replace("\\\n", " ") for b in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S)]
        for block in rendered:
            found += [(page.relative_to(ROOT).as_posix(), c) for c in re.findall(r"`([^`\n]+)`", block)]
        for block in shell:
            found += [(page.relative_to(ROOT).as_posix(), line) for line in block.splitlines()]
    return [(where, c) for where, c in found if argv_of(c) is not None]


def test_every_recorded_command_parses_with_todays_cli():
    commands = recorded_commands()
    assert len(commands) > 40
    refused = [f"{where}: {c[:120]}: {parse_error(argv_of(c) or [])}" for where, c in commands
               if parse_error(argv_of(c) or [])]  # fmt: skip
    assert refused == []


def test_the_command_check_refuses_removed_flags_and_accepts_placeholders():
    assert parse_error(argv_of("art-adp demo --quiet") or []) is None
    assert "no flag ['--runs']" == parse_error(argv_of("OMP_NUM_THREADS=1 python -m art_adp demo --runs 2") or [])
    assert "no flag ['--eot']" == parse_error(argv_of("art-adp evaluate --eot 4 (one thread)") or [])  # abbreviated
    assert "invalid choice" in parse_error(argv_of("art-adp evaluate --preset strongest-ever") or [])
    assert parse_error(argv_of("art-adp evaluate --eot-samples K --max-iter 1 && echo done") or []) is None
    assert parse_error(argv_of("torchrun --nproc_per_node=N -m art_adp train-score ...") or []) is None
    assert "required" in parse_error(argv_of("art-adp levers --quiet") or [])
    assert argv_of("python benchmarks/gpu.py out.json") is None


# -- development paths ----------------------------------------------------------------------------------------------

DEVELOPMENT_PATHS = ("../shared", "/work/", "/root/", "/opt/")


def committed_texts():
    """(name, text) of every committed result and page a user reads: result files (JSON, logs, the text inside a
    results archive), the pages, the results READMEs."""
    results = [*(ROOT / "docs").glob("**/*.json"), *(ROOT / "benchmarks" / "results").glob("*"),
               *(ROOT / "upstream" / "results").glob("*")]  # fmt: skip
    for path in sorted(results) + PAGES + [ROOT / "upstream" / "PR_DESCRIPTION.md"]:
        name = path.relative_to(ROOT).as_posix()
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as archive:
                for member in archive.getmembers():
                    if member.isfile() and not member.name.endswith(".png"):
                        yield f"{name}:{member.name}", archive.extractfile(member).read().decode("utf-8", "replace")
        elif path.suffix in (".json", ".jsonl", ".txt", ".md"):
            yield name, path.read_text("utf-8")


def test_no_committed_result_or_page_holds_a_development_path():
    found = [f"{name}: {s}" for name, text in committed_texts() for s in DEVELOPMENT_PATHS if s in text]
    assert found == []


# -- extras ---------------------------------------------------------------------------------------------------------


def setup_extras() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options.extras_require"])


def test_the_extras_the_install_docs_name_are_setup_cfgs():
    for page in (ROOT / "README.md", ROOT / "docs" / "usage.md"):
        text = page.read_text("utf-8")
        installed = {e for group in re.findall(r"\.\[([\w,-]+)\]", text) for e in group.split(",")}
        assert installed <= setup_extras(), (page.name, installed - setup_extras())
        listed = re.findall(r"Extras: (.*?)\.(?:\s|$)", text, re.S)
        assert listed, f"{page.name} lists no extras"
        for sentence in listed:  # a list of the extras is all of them
            assert set(re.findall(r"`([\w-]+)`", sentence)) == setup_extras(), (page.name, sentence)


# -- "same models" claims -------------------------------------------------------------------------------------------


def _models(path: str) -> dict[str, str]:
    return json.loads((ROOT / path).read_text("utf-8"))["provenance"]["models"]


def test_the_eot_table_says_truly_whether_it_used_the_demo_tables_models():
    """docs/threat_models.md's EOT table and the README's demo table: the page's words follow the recorded hashes."""
    demo, eot = _models("docs/results/demo.json"), json.loads((ROOT / "docs/eot_digits_cpu.json").read_text())
    eot_models = eot["provenance"]["models"]
    same = eot_models == demo
    text = (ROOT / "docs" / "threat_models.md").read_text("utf-8")
    assert ("the same weights' SHA-256" in text) == same
    if not same:
        assert "not the demo table's models" in text


def test_the_fp32_denoiser_differs_from_the_tables_bf16_one_only_by_its_precision():
    """docs/mnist.md: the fp32 DenoiserUNet was trained with the bf16 table model's settings but is another model."""
    bf16, fp32 = (json.loads((ROOT / "docs" / "results" / f).read_text("utf-8"))
                  for f in ("denoiser_mnist.json", "denoiser_mnist_fp32.json"))  # fmt: skip
    differ = {k for k in bf16["settings"] if bf16["settings"][k] != fp32["settings"].get(k)}
    assert differ == {"precision"}
    assert bf16["provenance"]["models"] != fp32["provenance"]["models"]
    assert "but in fp32: another model" in (ROOT / "docs" / "mnist.md").read_text("utf-8")


# -- words about where the project was developed ----------------------------------------------------------------------

DEVELOPMENT_WORDS = ("this machine", "this session", "the machines this ran on", "no network", "lent session")


def test_user_pages_say_nothing_of_the_development_machines_or_sessions():
    found = [
        f"{p.relative_to(ROOT)}: {w}" for p in PAGES for w in DEVELOPMENT_WORDS if w in p.read_text("utf-8").lower()
    ]
    assert found == []


def test_the_readme_says_truly_whether_the_demo_table_measured_the_bundled_models():
    bundled = json.loads((ROOT / "art_adp" / "pretrained" / "bundled.json").read_text("utf-8"))["models"]["digits"]
    same = {k: v["weights_sha256"] for k, v in bundled.items()} == _models("docs/results/demo.json")
    assert ("so the table is not a measurement of them" in (ROOT / "README.md").read_text("utf-8")) == (not same)
