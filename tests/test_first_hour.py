"""benchmarks/first_hour.py reads the README's set-up commands as tests/test_readme.py does, splits them into the
phases it times, and reads its own timing marks back."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

from test_readme import setup_commands

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("first_hour", ROOT / "benchmarks" / "first_hour.py")
first_hour = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_hour)


def test_it_reads_the_two_commands_the_readme_test_reads():
    assert first_hour.setup_commands((ROOT / "README.md").read_text(encoding="utf-8")) == setup_commands()


@pytest.mark.parametrize(
    "command, expected",
    [
        ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && art-adp demo",
         [("install", ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e ."]),
          ("demo", ["art-adp demo"])]),
        ('python3 -m venv .venv && pip install -e ".[test]" && pip install --no-deps t==1 && python -m pytest',
         [("install", ["python3 -m venv .venv", 'pip install -e ".[test]"', "pip install --no-deps t==1"]),
          ("pytest", ["python -m pytest"])]),
        ("python3 -m venv v && art-adp demo --quiet && pip install x && python3 -m pytest -x",
         [("install", ["python3 -m venv v"]), ("demo", ["art-adp demo --quiet"]), ("install", ["pip install x"]),
          ("pytest", ["python3 -m pytest -x"])]),
    ],
)  # fmt: skip
def test_phases_split_install_from_what_is_timed(command, expected):
    assert first_hour.phases(command) == expected


def test_the_cpu_torch_step_goes_right_after_the_activation():
    command = first_hour.with_cpu_torch("python3 -m venv .venv && . .venv/bin/activate && pip install -e .", "pip T")
    assert command == "python3 -m venv .venv && . .venv/bin/activate && pip T && pip install -e ."


def test_the_script_marks_each_phase_and_stops_at_a_failing_step():
    steps = [("install", ["x=1", "sleep 0.2"]), ("demo", ["test $x = 1"]), ("pytest", ["false"]), ("late", ["true"])]
    done = subprocess.run(["bash", "-c", first_hour.script(steps, smoke=False)], capture_output=True, text=True)
    seconds = first_hour.timings(done.stdout)
    assert done.returncode == 1 and list(seconds) == ["0:install", "1:demo"]  # pytest failed: it has no end mark
    assert 0.2 <= seconds["0:install"] < 5 and seconds["1:demo"] < 5
    smoke = subprocess.run(["bash", "-c", first_hour.script(steps, smoke=True)], capture_output=True, text=True)
    assert smoke.returncode == 0
    assert list(first_hour.timings(smoke.stdout)) == ["0:install", "1:demo", "2:pytest", "3:late"]
