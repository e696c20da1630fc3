"""The models shipped inside the package (art_adp.pretrained): the files are the ones recorded, with the command that
made them, and load by name; a name that is neither a file nor a bundled model is refused with the names."""

import hashlib
import re
from pathlib import Path

import pytest
import torch

from art_adp import load_score_model
from art_adp.apps.bundle import COMMAND
from art_adp.data import load_digits
from art_adp.models import load_classifier
from art_adp.pretrained import BUNDLED, HERE, RECORD, bundled_file
from art_adp.runs.records import weights_sha256


@pytest.mark.parametrize("name, kind, most", [("digits", "score", 600_000), ("digits", "classifier", 600_000),
                                              ("cifar10", "score", 10_000_000)])  # fmt: skip
def test_the_bundled_files_are_the_recorded_ones(name, kind, most):
    entry = RECORD["models"][name][kind]
    path = HERE / entry["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
    assert weights_sha256(path) == entry["weights_sha256"]  # what result files' provenance records
    assert path.stat().st_size < most  # small enough to ship: weights only, no training state
    assert RECORD["command"] == COMMAND and COMMAND.startswith("art-adp demo ")


def test_the_cifar10_denoiser_loads_by_name_and_purifies_at_adps_sigma():
    from art_adp import ADPPurifier, EDMScore

    score = load_score_model("cifar10")
    assert type(score).__name__ == "DenoiserUNet" and sum(p.numel() for p in score.parameters()) == 999_523
    made = RECORD["made"]["cifar10"]
    assert made["training"]["settings"]["n_train"] == 50_000 and "--data-root DIR" in made["command"]
    final, linear = made["training"]["final"]["mse"], made["training"]["linear_mse"]
    assert all(final[k] < linear[k] for k in final)  # it beats the best linear denoiser at every level recorded
    purifier = ADPPurifier(score, sigma=0.25, generator=torch.Generator().manual_seed(0), device_type="cpu")
    assert isinstance(purifier.score_model, EDMScore)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out = purifier.forward(x)[0]
    assert out.shape == x.shape and 0 <= float(out.min()) and float(out.max()) <= 1


def test_the_digits_models_load_by_name_and_work_together():
    score, classifier = load_score_model("digits"), load_classifier("digits")
    assert type(score).__name__ == "NCSNv2" and len(score.training_info["sigmas"]) == 12
    digits = load_digits()
    with torch.no_grad():
        predicted = classifier(torch.from_numpy(digits.x_test)).argmax(1).numpy()
    assert (predicted == digits.y_test).mean() > 0.9  # the held-out digits: a trained classifier, not random weights
    assert bundled_file("digits", "score") == HERE / BUNDLED["digits"]["score"]


def test_a_path_wins_over_a_name_and_an_unknown_name_lists_the_bundled_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits").write_text("a file the user named digits")
    assert bundled_file("digits", "score") == Path("digits")  # the relative path as given, not the bundled file
    message = "No checkpoint at mnist, and no bundled score model of that name: give a checkpoint file, or one of the "
    with pytest.raises(FileNotFoundError, match=re.escape(message + "bundled names ['cifar10', 'digits'].")):
        load_score_model("mnist")
    with pytest.raises(FileNotFoundError, match=re.escape("no bundled classifier model of that name")):
        load_classifier("runs/demo/classifier.safetensors")


def test_the_command_lines_loaders_take_the_bundled_names():
    """`--classifier digits` and `--score digits` load the shipped models (a path of that name would win)."""
    from art_adp.apps.loading import load_classifier_arg, load_score_arg
    from art_adp.runs.provenance import weights_sha256

    classifier, what = load_classifier_arg("digits")
    score, _ = load_score_arg("digits")
    assert weights_sha256(classifier) == weights_sha256(load_classifier("digits"))
    assert weights_sha256(score) == weights_sha256(load_score_model("digits"))
    assert what.startswith("digits (DigitsCNN, sha256 ")  # by its name, not the package folder on this machine


def test_the_bundle_records_the_code_that_trained_the_models_not_its_own_writes(tmp_path, monkeypatch):
    """Re-saving the files into the package dirties the tree; the record keeps the demo run's clean code version."""
    from art_adp.apps import bundle
    from art_adp.models import save_classifier
    from art_adp.score import save_score_model

    run = tmp_path / "run"
    run.mkdir()
    save_score_model(load_score_model("digits"), run / "score.safetensors")
    save_classifier(load_classifier("digits"), run / "classifier.safetensors")
    (run / "results.json").write_text('{"provenance": {"code_version": "art-adp 9.9 (abc1234)", "wall_time_s": 1.5}}')
    monkeypatch.setattr(bundle, "code_version", lambda: "art-adp 9.9 (abc1234-dirty)")  # what the writes would make
    record = bundle.bundle_digits(run, tmp_path / "out")
    assert record["code_version"] == "art-adp 9.9 (abc1234)"
    assert record["demo_run"] == {"wall_time_s": 1.5}
    assert weights_sha256(tmp_path / "out" / "digits_classifier.safetensors") == weights_sha256(HERE / "digits_classifier.safetensors")


def test_a_cifar10_denoiser_is_bundled_beside_the_digits_models(tmp_path, one_thread):
    """bundle_cifar10 re-saves a train-denoiser run's weights and records them with the training's provenance; the
    digits' record stays, and bundling the digits again keeps the cifar10 entry."""
    import json

    import numpy as np

    from art_adp.apps import bundle
    from art_adp.apps.train_denoiser import train_denoiser
    from art_adp.models import save_classifier
    from art_adp.score import save_score_model

    x = np.random.default_rng(0).random((16, 3, 8, 8)).astype(np.float32)
    train_denoiser(x, x, tmp_path / "den", minutes=0.001, milestone=2, batch_size=4, channels=(4, 8), n_test=4,
                   progress=False)  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    (out / "bundled.json").write_text(json.dumps(RECORD))
    record = bundle.bundle_cifar10(tmp_path / "den", out)
    entry = record["models"]["cifar10"]["score"]
    assert record["models"]["digits"] == RECORD["models"]["digits"] and record["command"] == COMMAND
    assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert record["made"]["cifar10"]["command"].endswith("&& python -m art_adp.apps.bundle --cifar10 DIR")
    assert set(record["made"]["cifar10"]["training"]["linear_mse"]) == {"0.05", "0.1", "0.25", "0.5"}
    assert type(load_score_model(out / entry["file"])).__name__ == "DenoiserUNet"
    run = tmp_path / "demo"
    run.mkdir()
    save_score_model(load_score_model("digits"), run / "score.safetensors")
    save_classifier(load_classifier("digits"), run / "classifier.safetensors")
    again = bundle.bundle_digits(run, out)
    assert again["models"]["cifar10"] == record["models"]["cifar10"] and "cifar10" in again["made"]
