"""The `art-adp` command line: help, errors, and train-score / train-classifier on digits; the installed script and
``python -m art_adp`` in interpreters of their own (marked ``e2e``: CI runs it after the suite)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from art_adp.apps.cli import main
from art_adp.models import load_classifier
from art_adp.score import load_score_model


@pytest.mark.parametrize("command", ["demo", "train-score", "train-classifier"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "--run-dir" in capsys.readouterr().out


@pytest.mark.e2e  # two interpreters run the installed program (CI: python -m pytest -m e2e)
def test_the_installed_script_and_python_m_art_adp_are_one_command_line(capsys):
    script = shutil.which("art-adp", path=str(Path(sys.executable).parent))
    assert script is not None, "art-adp is not installed beside this Python (pip install -e .)"
    module = subprocess.run([sys.executable, "-m", "art_adp", "--help"], capture_output=True, text=True, check=True)
    installed = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    assert module.stdout.replace("__main__.py", "art-adp") == installed.stdout
    assert all(c in installed.stdout for c in ("demo", "train-score", "evaluate", "certify", "corruptions"))
    # what both run is main(): its exit status and error line, in this process (a third interpreter adds nothing)
    assert main(["evaluate", "--n-examples", "0"]) == 2
    assert "art-adp evaluate: error:" in capsys.readouterr().err


def test_importing_the_library_loads_no_harness_plot_or_command_line_module():
    code = ("import sys, art_adp; print(' '.join(m for m in sys.modules if m.startswith(('art_adp.apps', 'art_adp.runs', "
            "'matplotlib'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []


def test_missing_data_root_is_a_clear_error(capsys):
    assert main(["train-score", "--dataset", "mnist", "--quiet"]) == 2
    assert "art-adp train-score: error:" in capsys.readouterr().err


def test_train_score_and_classifier_on_digits(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train-score", "--run-dir", str(run), "--iterations", "3", "--ngf", "4", "--batch-size", "8",
                 "--sigma-begin", "1", "--num-sigmas", "3", "--quiet"]) == 0
    score = load_score_model(run / "score.safetensors")
    assert score.training_info["step"] == 3 and score.config["ngf"] == 4
    assert len(score.training_info["sigmas"]) == 3
    # Re-running with more iterations resumes from the checkpoint.
    assert main(["train-score", "--run-dir", str(run), "--iterations", "5", "--ngf", "4", "--batch-size", "8",
                 "--sigma-begin", "1", "--num-sigmas", "3", "--quiet"]) == 0
    assert load_score_model(run / "score.safetensors").training_info["step"] == 5
    assert main(["train-classifier", "--run-dir", str(run), "--epochs", "1", "--quiet"]) == 0
    assert load_classifier(run / "classifier.safetensors").config["nb_classes"] == 10
    acc = json.loads((run / "classifier.json").read_text())["test_accuracy"]
    assert 0.3 < acc <= 1.0  # one epoch of a small CNN on digits is far above chance
    assert "classifier:" in capsys.readouterr().out
