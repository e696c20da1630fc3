"""One name per concept: the names 0.1.0 had before its (never published) release are gone, with no alias; the
ensemble size S and the EOT draws keep one name each; plus the one checks module's exact messages, the ADP defaults
declared once, ADPPurifier.describe() and the one classifier constructor signature. Tiny untrained models (MLP on
1×8×8, NCSNv2(1, 8, ngf=4))."""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

import art_adp
import art_adp.attacks as A
from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2, purify
from art_adp import _checks
from art_adp.models import MLP, DigitsCNN, SmallCNN, WideResNet, load_classifier, save_classifier
from art_adp.purification import DEFAULTS, HYPERPARAMETERS
from art_adp.serialization import write_checkpoint


def _score() -> NCSNv2:
    torch.manual_seed(0)
    return NCSNv2(1, 8, ngf=4).eval()


def _mlp() -> MLP:
    torch.manual_seed(1)
    return MLP(1, 8, 10, hidden=(16,)).eval()


def _x(n: int = 4) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))


def _purifier(**kwargs) -> ADPPurifier:
    return ADPPurifier(_score(), sigma=0.1, steps=2, tau=0.0, generator=torch.Generator().manual_seed(3),
                       device_type="cpu", **kwargs)


def _estimator(**kwargs) -> PyTorchClassifier:
    return PyTorchClassifier(_mlp(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                             clip_values=(0.0, 1.0), preprocessing_defences=[_purifier(**kwargs)], device_type="cpu")


def test_classifier_files_with_the_pre_release_class_count_key_are_refused(tmp_path):
    torch.manual_seed(0)
    model = DigitsCNN(nb_classes=3, width=2).eval()
    header = {"architecture": "DigitsCNN", "config": {"num_classes": 3, "width": 2}}  # never released: no alias
    write_checkpoint(tmp_path / "old.safetensors", model.state_dict(), header)
    with pytest.raises(ValueError, match=re.escape("has an invalid DigitsCNN config {'num_classes': 3, 'width': 2}")):
        load_classifier(tmp_path / "old.safetensors")


@pytest.mark.parametrize("old_name", [
    "art_adp.cli", "art_adp.demo", "art_adp.detect_demo", "art_adp.plots", "art_adp.checkpoint",
    "art_adp.evaluation", "art_adp.experiments", "art_adp.attacks.bpda_eot", "art_adp.attacks.full_pgd_eot",
    "art_adp.models._checks",
])
def test_the_pre_release_module_paths_are_gone(old_name):
    path = Path(art_adp.__file__).parent.joinpath(*old_name.split(".")[1:])
    assert not path.with_suffix(".py").exists() and not path.is_dir()


@pytest.mark.parametrize("owner, old", [
    (A, "SPSA"), (A, "BPDAEOT"), (A, "FullGradientPGDEOT"), (_checks, "warn_deprecated"), (_checks, "renamed_kwargs"),
])
def test_the_pre_release_names_are_gone(owner, old):
    assert not hasattr(owner, old)


@pytest.mark.parametrize("call, old", [
    (lambda: purify(_score(), _x(), steps=1, checkpoint=True), "checkpoint"),
    (lambda: ADPPurifier(_score(), checkpoint=True), "checkpoint"),
    (lambda: DefendedModel(_mlp(), _purifier(), runs=2), "runs"),
    (lambda: DefendedModel(_mlp(), _purifier(), nb_samples=2), "nb_samples"),
    (lambda: EOTClassifier(_estimator(), nb_grad_samples=2), "nb_grad_samples"),
    (lambda: EOTClassifier(_estimator(), nb_samples=2), "nb_samples"),
    (lambda: A.BlackBoxSPSA(_estimator(), nb_sample=2), "nb_sample"),
    (lambda: MLP(num_classes=3), "num_classes"),
    (lambda: DigitsCNN(3), "positional"),
    (lambda: WideResNet(10, 1), "positional"),
])
def test_the_pre_release_keywords_are_refused(call, old):
    with pytest.raises(TypeError, match=old):
        call()


def test_the_ensemble_size_and_the_eot_draws_keep_their_names():
    eot = EOTClassifier(_estimator(), ensemble_size=3, eot_samples=2)
    assert (eot.ensemble_size, eot.eot_samples, eot.model.ensemble_size) == (3, 2, 2)
    eot.set_params(ensemble_size=4, eot_samples=5)
    assert (eot.ensemble_size, eot.eot_samples) == (4, 5)
    assert DefendedModel(_mlp(), _purifier(), ensemble_size=2).ensemble_size == 2


# -- one constructor signature for the classifiers ---------------------------------------------------------------

@pytest.mark.parametrize("cls, extra", [
    (MLP, dict(hidden=(8,))), (SmallCNN, dict(width=2, fc_width=8)), (DigitsCNN, dict(width=2)),
    (WideResNet, dict(depth=10, widen_factor=1)),
])
def test_one_constructor_signature_and_round_trip(cls, extra, tmp_path):
    model = cls(in_channels=3, image_size=12, nb_classes=4, **extra).eval()
    x = torch.rand(2, 3, 12, 12)
    assert model(x).shape == (2, 4)
    assert {"in_channels": 3, "image_size": 12, "nb_classes": 4}.items() <= model.config.items()
    save_classifier(model, tmp_path / "m.safetensors")
    loaded = load_classifier(tmp_path / "m.safetensors")
    assert type(loaded) is cls and loaded.config == model.config
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


# -- the ADP defaults, declared once, and the report text generated from the parameters ----------------------------

def test_purify_and_adppurifier_share_the_defaults():
    assert HYPERPARAMETERS == ("sigma", "steps", "step_size", "lam", "delta", "step_clamp", "tau", "clip_values",
                               "clip_noise")  # fmt: skip
    assert set(HYPERPARAMETERS) <= set(ADPPurifier.params)  # so ART's set_params reaches every one
    for field in HYPERPARAMETERS:
        expected = getattr(DEFAULTS, field)
        assert inspect.signature(purify).parameters[field].default == expected, field
        assert inspect.signature(ADPPurifier.__init__).parameters[field].default == expected, field
    assert (DEFAULTS.sigma, DEFAULTS.steps, DEFAULTS.lam, DEFAULTS.delta, DEFAULTS.tau) == (0.25, 10, 0.05, 1e-3, 1e-3)
    assert DEFAULTS.clip_noise is True  # the paper's noise injection clips


@pytest.mark.parametrize("kwargs, expected", [
    ({}, "ADP sigma = 0.25, T = 10 adaptive steps (lambda = 0.05, delta = 1e-3, tau = 1e-3)"),
    ({"sigma": 0.1, "steps": 5, "lam": 0.1, "delta": 2.5e-4, "tau": 0.0},
     "ADP sigma = 0.1, T = 5 adaptive steps (lambda = 0.1, delta = 2.5e-4, tau = 0)"),
    ({"sigma": 0.0, "steps": 3, "step_size": [0.1, 0.05, 0.01, 0.5]},
     "ADP sigma = 0, T = 3 steps of alpha = 0.1, 0.05, 0.01"),
    ({"steps": 4, "step_size": 0.02}, "ADP sigma = 0.25, T = 4 steps of alpha = 0.02"),
    ({"step_size": "adaptive-jvp"}, "ADP sigma = 0.25, T = 10 adaptive steps, exact JVP (lambda = 0.05, tau = 1e-3)"),
])
def test_describe(kwargs, expected):
    assert ADPPurifier(torch.nn.Identity(), device_type="cpu", **kwargs).describe() == expected


# -- one checks module, one message dialect --------------------------------------------------------------------------

@pytest.mark.parametrize("check, args, kwargs, message", [
    (_checks.positive_int, ("steps", 0), {}, "steps must be an integer >= 1, got 0."),
    (_checks.positive_int, ("steps", True), {}, "steps must be an integer >= 1, got True."),
    (_checks.positive_int, ("steps", 2.0), {}, "steps must be an integer >= 1, got 2.0."),
    (_checks.positive_int, ("batch_size", "8"), {"optional": True},
     "batch_size must be an integer >= 1 or None, got '8'."),
    (_checks.non_negative_int, ("steps", -1), {}, "steps must be an integer >= 0, got -1."),
    (_checks.integer, ("seed", 2**32), {"low": 0, "high": 2**32 - 1},
     "seed must be an integer in [0, 4294967295], got 4294967296."),
    (_checks.integer, ("ngf", "4"), {}, "ngf must be an integer, got '4'."),
    (_checks.number, ("eps", 0), {"low": 0, "low_open": True}, "eps must be a number > 0, got 0."),
    (_checks.number, ("tau", -1), {"low": 0}, "tau must be a number >= 0, got -1."),
    (_checks.number, ("dropout", 1.0), {"low": 0, "high": 1, "high_open": True},
     "dropout must be a number in [0, 1), got 1.0."),
    (_checks.number, ("beta", float("nan")), {"low": 0, "high": 1}, "beta must be a number in [0, 1], got nan."),
    (_checks.number, ("x", True), {}, "x must be a finite number, got True."),
    (_checks.number, ("threshold", float("inf")), {"optional": True},
     "threshold must be a finite number or None, got inf."),
    (_checks.number, ("step", 2), {"high": 1}, "step must be a number <= 1, got 2."),
    (_checks.probability, ("alpha", 1.0), {}, "alpha must be a number in (0, 1), got 1.0."),
    (_checks.one_of, ("gradient", "exact", ("bpda", "full")), {},
     "gradient must be one of 'bpda', 'full', got 'exact'."),
    (_checks.one_of, ("gradient", ["bpda"], ("bpda", "full")), {},
     "gradient must be one of 'bpda', 'full', got ['bpda']."),
    (_checks.boolean, ("compact", 1), {}, "compact must be True or False, got 1."),
    (_checks.memory_budget, (0,), {}, "memory_budget must be a number of MiB > 0 or None, got 0."),
    (_checks.memory_budget, ("64",), {}, "memory_budget must be a number of MiB > 0 or None, got '64'."),
])
def test_check_messages(check, args, kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check(*args, **kwargs)


@pytest.mark.parametrize("check, args, kwargs, expected", [
    (_checks.positive_int, ("n", np.int64(3)), {}, 3),
    (_checks.non_negative_int, ("n", 0), {}, 0),
    (_checks.positive_int, ("n", None), {"optional": True}, None),
    (_checks.number, ("eps", np.float32(0.5)), {"low": 0, "low_open": True}, 0.5),
    (_checks.number, ("beta", 1), {"low": 0, "high": 1}, 1.0),
    (_checks.probability, ("fpr", 0.05), {}, 0.05),
    (_checks.one_of, ("aggregate", "sign", ("mean", "sign")), {}, "sign"),
    (_checks.boolean, ("compact", False), {}, False),
    (_checks.memory_budget, (64,), {}, 64.0),
    (_checks.memory_budget, (None,), {}, None),
])
def test_checks_return_the_value(check, args, kwargs, expected):
    out = check(*args, **kwargs)
    assert out == expected and type(out) is type(expected)
