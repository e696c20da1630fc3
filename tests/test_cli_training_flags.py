"""The score trainer's levers on the command line (train-score and reproduce mnist: --precision, --channels-last,
--compile, --lr-warmup, --lr auto) and evaluate's --memory-budget: each flag reaches the library with its value."""

import json
import math
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch

import art_adp.score
from art_adp import _hardware as hardware
from art_adp.apps import commands, reproduce, snapshots, train_score
from art_adp.apps.cli import main, parse
from art_adp.apps.evaluation import EvalConfig
from art_adp.apps.evaluation.run import plan, unit_settings
from art_adp.apps.reproduce import MnistRecipe
from art_adp.data import load_dataset
from art_adp.score import large_batch_lr
from art_adp.score.train import _COMPILE_MODES


@pytest.fixture(name="trainer")
def fixture_trainer(monkeypatch):
    """train-score's call of train_score_model, captured (its keywords) instead of run."""
    seen = {}

    def fake(model, x_train, sigmas, iterations, **kwargs):  # pylint: disable=unused-argument
        seen.update(kwargs)
        return SimpleNamespace(training_info={"step": iterations})

    monkeypatch.setattr(art_adp.score, "train_score_model", fake)
    return seen


def test_train_score_flags_reach_the_trainer(trainer, tmp_path):
    argv = ["train-score", "--run-dir", str(tmp_path), "--iterations", "1", "--batch-size", "512", "--quiet"]
    assert main([*argv, "--precision", "bf16", "--channels-last", "--compile", "reduce-overhead", "--lr-warmup", "7",
                 "--lr", "auto"]) == 0
    expected = {"precision": "bf16", "channels_last": True, "compile": "reduce-overhead", "lr_warmup": 7}
    assert {k: trainer[k] for k in expected} == expected
    assert trainer["lr"] == pytest.approx(2e-3, rel=1e-12) == large_batch_lr(512)  # 1e-3 * sqrt(512 / 128)
    assert main([*argv, "--compile", "--lr", "3e-4"]) == 0
    assert (trainer["compile"], trainer["lr"]) == (True, 3e-4)  # the bare flag: torch.compile's default mode


@pytest.mark.parametrize("native, precision", [(False, "fp32"), (True, "bf16")])
def test_train_score_defaults_are_the_libraries_and_fp32_on_any_cpu(native, precision, trainer, tmp_path, monkeypatch,
                                                                    capsys):
    features = {"AVX2": True, "AVX-512": native, "AVX-512-BF16": native, "AMX": False}
    monkeypatch.setattr(hardware, "cpu_features", lambda: features)
    argv = ["train-score", "--iterations", "1", "--device", "cpu", "--quiet"]
    assert main([*argv, "--run-dir", str(tmp_path / "default")]) == 0
    library = train_score.TRAINER
    for name in ("lr", "channels_last", "compile", "lr_warmup"):
        assert trainer[name] == library[name].default, name
    # the default may not depend on the hardware: fp32 on a CPU with native bf16 too
    assert (trainer["lr"], trainer["precision"], trainer["compile"]) == (1e-3, "fp32", False)
    assert train_score.ScoreTraining().precision == "fp32" and reproduce.MnistRecipe().precision == "fp32"
    assert capsys.readouterr().out.splitlines()[0].startswith("precision: fp32 (as given)")
    assert main([*argv, "--run-dir", str(tmp_path / "auto"), "--precision", "auto"]) == 0  # auto: explicit
    assert trainer["precision"] == precision
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"precision: {precision} (auto: this CPU has {'' if native else 'no '}native bf16")


def test_the_compile_modes_are_the_libraries():
    assert commands.COMPILE_MODES == _COMPILE_MODES


@pytest.mark.parametrize("device, autotune", [("cuda", True), ("cpu", False)])
def test_train_score_lets_cudnn_autotune_on_cuda(device, autotune, trainer, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)  # restored after the test
    assert main(["train-score", "--run-dir", str(tmp_path), "--iterations", "1", "--device", device, "--quiet"]) == 0
    assert str(trainer["device"]) == device and torch.backends.cudnn.benchmark is autotune


@pytest.mark.parametrize("argv, message", [
    (["--precision", "fp16"], "argument --precision: invalid choice: 'fp16' (choose from 'auto', 'fp32', 'bf16')"),
    (["--lr", "fast"], "argument --lr: invalid learning_rate value: 'fast'"),
    (["--compile", "fastest"], "argument --compile: invalid choice: 'fastest'"),
    (["--lr-warmup", "1.5"], "argument --lr-warmup: invalid int value: '1.5'"),
])
@pytest.mark.parametrize("command", [["train-score"], ["reproduce", "mnist", "--data-root", "D"]])
def test_bad_values_are_refused_by_the_parser(command, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_resume_in_another_precision_is_an_error_of_the_command(tmp_path, capsys):
    argv = ["train-score", "--run-dir", str(tmp_path), "--ngf", "4", "--batch-size", "8", "--sigma-begin", "1",
            "--num-sigmas", "2", "--quiet"]
    # fp32 named: "auto" is bf16 on a CPU with native bf16, where resuming in bf16 is no change
    assert main([*argv, "--iterations", "2", "--precision", "fp32"]) == 0
    assert main([*argv, "--iterations", "3", "--precision", "bf16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"art-adp train-score: error: Cannot resume from {tmp_path / 'score.safetensors'}: it was "
                          "trained with precision='fp32', not 'bf16';")


class _Reached(Exception):
    """Raised by the fake trainer with the keywords it was given."""


def test_reproduce_flags_reach_the_trainer_through_the_recipe(tmp_path, monkeypatch):
    digits = load_dataset("digits")
    monkeypatch.setattr("art_adp.data.load_mnist", lambda root: digits)

    def fake(model, x_train, sigmas, iterations, **kwargs):  # pylint: disable=unused-argument
        raise _Reached(kwargs)

    monkeypatch.setattr(snapshots, "train_score_model", fake)
    with pytest.raises(_Reached) as reached:
        main(["reproduce", "mnist", "--data-root", "D", "--run-dir", str(tmp_path), "--clf-epochs", "1", "--hidden",
              "8", "--quiet", "--stages", "classifier", "score", "--precision", "bf16", "--channels-last",
              "--compile", "--lr-warmup", "5", "--lr", "auto", "--batch-size", "512"])
    kwargs = reached.value.args[0]
    expected = {"precision": "bf16", "channels_last": True, "compile": True, "lr_warmup": 5, "batch_size": 512}
    assert {k: kwargs[k] for k in expected} == expected
    assert kwargs["lr"] == pytest.approx(2e-3, rel=1e-12)
    saved = json.loads((tmp_path / "settings.json").read_text())  # the recipe holds what changes the model
    assert (saved["lr"], saved["precision"], saved["lr_warmup"]) == (kwargs["lr"], "bf16", 5)
    assert "channels_last" not in saved and "compile" not in saved  # speed only: a resume may switch them


def test_reproduce_reads_a_recipe_from_before_the_levers_as_their_defaults(tmp_path):
    digits = load_dataset("digits")
    recipe = MnistRecipe(hidden=(8,), clf_epochs=1)
    old = {k: v for k, v in asdict(recipe).items() if k not in ("precision", "lr_warmup")}
    (tmp_path / "settings.json").write_text(json.dumps(old))
    assert reproduce.reproduce_mnist("D", tmp_path, recipe, data=digits, stages=(), progress=False,
                                     log=lambda s: None) is None
    with pytest.raises(ValueError, match=r"other settings: precision fp32 \(now bf16\)"):
        reproduce.reproduce_mnist("D", tmp_path, MnistRecipe(hidden=(8,), clf_epochs=1, precision="bf16"),
                                  data=digits, stages=(), progress=False)


def _evaluation(*flags) -> EvalConfig:
    return parse(["evaluate", "--preset", "smoke", *flags])[1]


def test_memory_budget_stays_out_of_the_settings():
    common = {"data_sha256": "d", "ensemble_size": 2}

    def digests(config: EvalConfig) -> dict:
        return {(s.name, a): unit_settings(s, a, config, common)
                for s in plan(config, randomized=True) for a in s.attacks}

    plain, budgeted = _evaluation(), _evaluation("--memory-budget", "1")
    assert budgeted.memory_budget == 1 and plain.memory_budget is None
    assert digests(budgeted) == digests(plain) and len(digests(plain)) > 10
    more_eot = _evaluation("--eot-samples", "3")  # a setting that changes results does change them
    assert digests(more_eot)[("main", "bpda-eot")] != digests(plain)[("main", "bpda-eot")]


def test_memory_budget_is_one_field_of_the_config_in_mib():
    with pytest.raises(ValueError, match=r"memory_budget must be a number of MiB > 0 or None, got 0\."):
        EvalConfig(memory_budget=0).check()
    EvalConfig(memory_budget=0.5).check()  # half a MiB is a budget
    assert math.isclose(_evaluation("--memory-budget", "512").memory_budget, 512)
