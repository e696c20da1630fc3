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
