"""Inputs placed where the model lives (the helper every entry point uses), and ``--device`` on every command.

A CPU-only machine cannot see a CUDA mismatch, so these tests put the model on PyTorch's ``meta`` device: the
helper must move inputs there, and a function that leaves them on the CPU is caught.
"""

import numpy as np
import pytest
import torch

from art_adp._device import model_device, model_dtype, resolve_device, to_model
from art_adp.apps.cli import build_parser, main


def _meta_model(dtype=torch.float32):
    return torch.nn.Linear(4, 3).to(device="meta", dtype=dtype)


def test_to_model_moves_images_to_the_models_device_and_dtype():
    model = _meta_model(torch.float16)
    assert model_device(model) == torch.device("meta") and model_dtype(model) == torch.float16
    t = to_model(np.zeros((2, 4), dtype=np.float64), model)
    assert t.device.type == "meta" and t.dtype == torch.float16 and t.shape == (2, 4)
    labels = to_model(np.array([1, 2]), model)
    assert labels.device.type == "meta" and labels.dtype == torch.int64  # labels keep their integer dtype


def test_to_model_leaves_a_tensor_already_in_place_untouched():
    model = torch.nn.Linear(4, 3)
    x = torch.rand(2, 4)
    assert to_model(x, model) is x


def test_a_module_without_parameters_lives_on_the_cpu():
    assert model_device(torch.nn.ReLU()) == torch.device("cpu") and model_dtype(torch.nn.ReLU()) == torch.float32


def test_to_model_refuses_a_list_with_the_fix():
    with pytest.raises(ValueError, match="numpy array or a torch tensor, got list; wrap it in np.asarray"):
        to_model([0.0, 1.0], torch.nn.Linear(2, 2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_resolve_device_refuses_cuda_without_a_gpu():
    assert resolve_device(None) == torch.device("cpu")
    with pytest.raises(ValueError, match="torch sees no CUDA device; pass --device cpu"):
        resolve_device("cuda")


def test_denoising_ratio_purifies_on_the_score_models_device(monkeypatch):
    """The crash of ``reproduce --stages curve`` on CUDA: numpy images must reach the score model's device."""
    from art_adp.apps import reproduce

    seen = []

    def fake_purify(score_model, x, **kwargs):
        seen.append(x.device.type)
        raise RuntimeError("stop")

    monkeypatch.setattr(reproduce, "purify", fake_purify)
    with pytest.raises(RuntimeError, match="stop"):
        reproduce.denoising_ratio(_meta_model(), np.zeros((2, 4), dtype=np.float32))
    assert seen == ["meta"]


def test_diagnostics_run_the_classifier_on_its_device():
    from art_adp.apps.diagnostics import ensemble_correct

    seen = []

    def transform(xb, g):
        seen.append(xb.device.type)
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        ensemble_correct(_meta_model(), transform, np.zeros((2, 4), np.float32), np.zeros(2), ensemble_size=1, seed=0)
    assert seen == ["meta"]


def _subcommands():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    return action.choices


REQUIRED = {
    "reproduce": ["mnist", "--data-root", "D"],
    "corruptions": ["--classifier", "C", "--score", "S"],
    "levers": ["--data-root", "D"],
    "train-levers": ["--data-root", "D"],
    "rejudge": ["RUN_DIR"],
    "check": ["R.json", "--data-root", "D"],
}


@pytest.mark.parametrize("command", sorted(set(_subcommands()) - {"import-ncsnv2", "prepare-cifar10", "plans", "migrate"}))
def test_every_command_takes_device(command):
    """Every command that runs a network takes ``--device`` (import-ncsnv2 only converts a file, prepare-cifar10 only
    writes data, on the CPU; plans only lists the named plans, migrate only rewrites records)."""
    args = build_parser().parse_args([command, *REQUIRED.get(command, []), "--device", "cuda"])
    assert args.device == "cuda"
    assert build_parser().parse_args([command, *REQUIRED.get(command, [])]).device is None  # default: CUDA if any


@pytest.mark.parametrize(
    "command, target, argv",
    [
        ("demo", "art_adp.apps.cli.run_demo", []),
        ("reproduce", "art_adp.apps.reproduce.reproduce_mnist", ["mnist", "--data-root", "D"]),
    ],
)
def test_device_reaches_the_library(command, target, argv, monkeypatch, tmp_path):
    module, name = target.rsplit(".", 1)
    seen = {}

    def fake(*args, run_dir="runs", **kwargs):  # pylint: disable=unused-argument
        seen.update(kwargs)

    monkeypatch.setattr(__import__(module, fromlist=[name]), name, fake)
    assert main([command, *argv, "--run-dir", str(tmp_path), "--device", "cuda"]) == 0
    assert seen["device"] == "cuda"
