"""The README's two fresh-machine commands: .ci/run runs exactly the test one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands():
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(python3 -m venv .*)\n```", readme)


def test_readme_has_exactly_two_setup_commands():
    commands = setup_commands()
    assert len(commands) == 2, commands
    assert commands[0].endswith("art-adp demo")
    assert commands[1].endswith("python -m pytest")


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_commands()[1] in ci_lines


def quickstart() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quickstart") :]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_quickstart_runs_on_a_fresh_install_with_the_bundled_models(capsys, monkeypatch, tmp_path, one_thread):
    """The README's quickstart, with no earlier command (no runs/demo: run from an empty folder), at a smaller size:
    2 digits, 1 PGD step, S = 2."""
    code = quickstart()
    assert "runs/" not in code and 'load_classifier("digits")' in code and 'load_score_model("digits")' in code
    small = code
    for full, cut in (("[:20]", "[:2]"), ("max_iter=10", "max_iter=1"), ("ensemble_size=10", "ensemble_size=2")):
        assert full in small, f"the quickstart changed: update this test's cut ({full})"
        small = small.replace(full, cut)
    monkeypatch.chdir(tmp_path)
    exec(compile(small, "README.md quickstart", "exec"), {})
    assert re.fullmatch(r"clean \d+%, BPDA PGD \d+%\n", capsys.readouterr().out)
