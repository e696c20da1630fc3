"""The `art-adp` command line: help, errors, and train-score / train-classifier on digits."""

import json
import subprocess
import sys

import pytest

from art_adp.cli import main
from art_adp.models import load_classifier
from art_adp.score import load_score_model


@pytest.mark.parametrize("command", ["demo", "train-score", "train-classifier"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "--run-dir" in capsys.readouterr().out


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "art_adp.cli", "--help"], capture_output=True, text=True, check=True)
    assert "train-score" in out.stdout and "demo" in out.stdout


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
