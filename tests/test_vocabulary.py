"""One name per concept: every renamed argument, attribute, class and module still works under its old name for a
release, warns DeprecationWarning with the exact message, and gives the same result as the new name (same seeds).
Plus the one checks module's exact messages, the ADP defaults declared once, ADPPurifier.describe() and the one
classifier constructor signature. Tiny untrained models (MLP on 1×8×8, NCSNv2(1, 8, ngf=4))."""

import inspect
import re
import warnings

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2, purify
from art_adp import _checks
from art_adp.models import MLP, DigitsCNN, SmallCNN, WideResNet, load_classifier, save_classifier
from art_adp.purify import DEFAULTS
from art_adp.serialization import write_checkpoint


def _deprecated(old: str, new: str) -> str:
    return f"{old} is deprecated, use {new}; the old name will be removed in 0.3."


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


_Y = np.array([0, 1, 2, 3])


def _attack(cls, **kwargs):
    x = _x().numpy()
    return cls(_estimator(), eps=0.1, eps_step=0.05, max_iter=2, **kwargs).generate(x, y=_Y)


def _eot_gradient(**kwargs):
    return EOTClassifier(_estimator(), nb_samples=2, **kwargs).loss_gradient(_x().numpy(), _Y)


def _set_param(obj, **kwargs):
    obj.set_params(**kwargs)
    return obj


def _set_attr(obj, name, value):
    setattr(obj, name, value)
    return obj


# (case id, old call, new call, the exact warning, what to compare)
CASES = [
    ("purify(checkpoint=)",
     lambda: purify(_score(), _x(), steps=2, generator=torch.Generator().manual_seed(0), checkpoint=True),
     lambda: purify(_score(), _x(), steps=2, generator=torch.Generator().manual_seed(0), gradient_checkpointing=True),
     _deprecated("purify(checkpoint=...)", "gradient_checkpointing=..."), None),
    ("ADPPurifier(checkpoint=)",
     lambda: _purifier(checkpoint=True), lambda: _purifier(gradient_checkpointing=True),
     _deprecated("ADPPurifier(checkpoint=...)", "gradient_checkpointing=..."),
     lambda p: (p.gradient_checkpointing, p.forward(_x())[0])),
    ("ADPPurifier.set_params(checkpoint=)",
     lambda: _set_param(_purifier(), checkpoint=True), lambda: _set_param(_purifier(), gradient_checkpointing=True),
     _deprecated("ADPPurifier.set_params(checkpoint=...)", "gradient_checkpointing=..."),
     lambda p: p.gradient_checkpointing),
    ("ADPPurifier.checkpoint",
     lambda: _purifier(gradient_checkpointing=True).checkpoint,
     lambda: _purifier(gradient_checkpointing=True).gradient_checkpointing,
     _deprecated("ADPPurifier.checkpoint", "ADPPurifier.gradient_checkpointing"), None),
    ("DefendedModel(runs=)",
     lambda: DefendedModel(_mlp(), _purifier(), runs=3), lambda: DefendedModel(_mlp(), _purifier(), nb_samples=3),
     _deprecated("DefendedModel(runs=...)", "nb_samples=..."), lambda m: (m.nb_samples, m(_x()))),
    ("DefendedModel.from_estimator(runs=)",
     lambda: DefendedModel.from_estimator(_estimator(), runs=2),
     lambda: DefendedModel.from_estimator(_estimator(), nb_samples=2),
     _deprecated("DefendedModel.from_estimator(runs=...)", "nb_samples=..."), lambda m: (m.nb_samples, m(_x()))),
    ("DefendedModel.runs",
     lambda: DefendedModel(_mlp(), _purifier(), nb_samples=3).runs,
     lambda: DefendedModel(_mlp(), _purifier(), nb_samples=3).nb_samples,
     _deprecated("DefendedModel.runs", "DefendedModel.nb_samples"), None),
    ("DefendedModel.runs = ",
     lambda: _set_attr(DefendedModel(_mlp(), _purifier()), "runs", 2),
     lambda: _set_attr(DefendedModel(_mlp(), _purifier()), "nb_samples", 2),
     _deprecated("DefendedModel.runs", "DefendedModel.nb_samples"), lambda m: (m.nb_samples, m(_x()))),
    ("EOTClassifier(nb_grad_samples=)",
     lambda: _eot_gradient(nb_grad_samples=3), lambda: _eot_gradient(eot_samples=3),
     _deprecated("EOTClassifier(nb_grad_samples=...)", "eot_samples=..."), None),
    ("EOTClassifier.set_params(nb_grad_samples=)",
     lambda: _set_param(EOTClassifier(_estimator()), nb_grad_samples=3),
     lambda: _set_param(EOTClassifier(_estimator()), eot_samples=3),
     _deprecated("EOTClassifier.set_params(nb_grad_samples=...)", "eot_samples=..."),
     lambda e: (e.eot_samples, e.model.nb_samples)),
    ("EOTClassifier.nb_grad_samples",
     lambda: EOTClassifier(_estimator(), eot_samples=3).nb_grad_samples,
     lambda: EOTClassifier(_estimator(), eot_samples=3).eot_samples,
     _deprecated("EOTClassifier.nb_grad_samples", "EOTClassifier.eot_samples"), None),
    ("BPDAEOT",
     lambda: _attack(A.BPDAEOT, eot_samples=2), lambda: _attack(A.PGDEOT, gradient="bpda", eot_samples=2),
     _deprecated("BPDAEOT(...)", 'PGDEOT(..., gradient="bpda")'), None),
    ("FullGradientPGDEOT",
     lambda: _attack(A.FullGradientPGDEOT, eot_samples=2), lambda: _attack(A.PGDEOT, gradient="full", eot_samples=2),
     _deprecated("FullGradientPGDEOT(...)", 'PGDEOT(..., gradient="full")'), None),
    ("SPSA",
     lambda: _attack(A.SPSA, samples_per_step=4), lambda: _attack(A.BlackBoxSPSA, samples_per_step=4),
     _deprecated("art_adp.attacks.SPSA", "art_adp.attacks.BlackBoxSPSA"), None),
    ("BlackBoxSPSA(nb_sample=)",
     lambda: _attack(A.BlackBoxSPSA, nb_sample=4), lambda: _attack(A.BlackBoxSPSA, samples_per_step=4),
     _deprecated("BlackBoxSPSA(nb_sample=...)", "samples_per_step=..."), None),
    ("BlackBoxSPSA.nb_sample",
     lambda: A.BlackBoxSPSA(_estimator(), samples_per_step=4).nb_sample,
     lambda: A.BlackBoxSPSA(_estimator(), samples_per_step=4).samples_per_step,
     _deprecated("BlackBoxSPSA.nb_sample", "BlackBoxSPSA.samples_per_step"), None),
    ("MLP(num_classes=)",
     lambda: (torch.manual_seed(0), MLP(num_classes=3))[1], lambda: (torch.manual_seed(0), MLP(nb_classes=3))[1],
     _deprecated("MLP(num_classes=...)", "nb_classes=..."), lambda m: (m.config, m(torch.ones(1, 1, 28, 28)))),
    ("SmallCNN(num_classes=)",
     lambda: (torch.manual_seed(0), SmallCNN(num_classes=3, width=2, fc_width=4))[1],
     lambda: (torch.manual_seed(0), SmallCNN(nb_classes=3, width=2, fc_width=4))[1],
     _deprecated("SmallCNN(num_classes=...)", "nb_classes=..."), lambda m: (m.config, m(torch.ones(1, 1, 28, 28)))),
    ("DigitsCNN(num_classes=)",
     lambda: (torch.manual_seed(0), DigitsCNN(num_classes=3, width=2))[1],
     lambda: (torch.manual_seed(0), DigitsCNN(nb_classes=3, width=2))[1],
     _deprecated("DigitsCNN(num_classes=...)", "nb_classes=..."), lambda m: (m.config, m(_x()))),
    ("DigitsCNN(positional)",
     lambda: (torch.manual_seed(0), DigitsCNN(3, width=2))[1],
     lambda: (torch.manual_seed(0), DigitsCNN(nb_classes=3, width=2))[1],
     "DigitsCNN() with positional arguments (nb_classes) is deprecated, use keywords: DigitsCNN(nb_classes=...); "
     "positional arguments will be removed in 0.3.", lambda m: (m.config, m(_x()))),
    ("WideResNet(positional)",
     lambda: (torch.manual_seed(0), WideResNet(10, 1, 5, 1))[1],
     lambda: (torch.manual_seed(0), WideResNet(depth=10, widen_factor=1, nb_classes=5, in_channels=1))[1],
     "WideResNet() with positional arguments (depth, widen_factor, nb_classes, in_channels) is deprecated, use "
     "keywords: WideResNet(depth=..., widen_factor=..., nb_classes=..., in_channels=...); positional arguments will "
     "be removed in 0.3.", lambda m: (m.config, m.eval()(torch.ones(1, 1, 8, 8)))),
    ("WideResNet(num_classes=)",
     lambda: (torch.manual_seed(0), WideResNet(depth=10, widen_factor=1, num_classes=5))[1],
     lambda: (torch.manual_seed(0), WideResNet(depth=10, widen_factor=1, nb_classes=5))[1],
     _deprecated("WideResNet(num_classes=...)", "nb_classes=..."),
     lambda m: (m.config, m.eval()(torch.ones(1, 3, 8, 8)))),
    ("art_adp.checkpoint",
     lambda: __import__("art_adp.checkpoint", fromlist=["read_checkpoint"]).read_checkpoint,
     lambda: __import__("art_adp.serialization", fromlist=["read_checkpoint"]).read_checkpoint,
     _deprecated("art_adp.checkpoint.read_checkpoint", "art_adp.serialization.read_checkpoint"), None),
]


def _same(a, b) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        np.testing.assert_array_equal(torch.as_tensor(a).detach().numpy(), torch.as_tensor(b).detach().numpy())
    else:
        assert a == b


def _ours(record) -> list[str]:
    return [str(w.message) for w in record if "will be removed in 0.3" in str(w.message)]


@pytest.mark.parametrize("name, old, new, message, compare", CASES, ids=[c[0] for c in CASES])
def test_old_name_warns_and_matches_the_new_one(name, old, new, message, compare):
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as record:
        old_result = old()
    assert len(_ours(record)) == 1, _ours(record)  # one warning, not one per layer
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        new_result = new()
    assert _ours(record) == []
    compare = compare or (lambda r: r)
    _same(compare(old_result), compare(new_result))


def test_old_and_new_name_together_are_refused():
    with pytest.raises(TypeError, match=re.escape("DefendedModel() got both runs= (deprecated) and nb_samples=; "
                                                  "pass nb_samples= only.")):
        DefendedModel(_mlp(), _purifier(), runs=2, nb_samples=3)


def test_the_deprecation_points_at_the_callers_line():
    with pytest.warns(DeprecationWarning) as record:
        DefendedModel(_mlp(), _purifier(), runs=2)
    assert record[0].filename == __file__


def test_old_model_shims_stay_silent():
    from art_adp.models._checks import positive_int

    assert positive_int is _checks.positive_int


def test_classifier_files_written_before_the_rename_still_load(tmp_path):
    torch.manual_seed(0)
    model = DigitsCNN(nb_classes=3, width=2).eval()
    old_header = {"architecture": "DigitsCNN", "config": {"num_classes": 3, "width": 2}}  # the 0.1 header
    write_checkpoint(tmp_path / "old.safetensors", model.state_dict(), old_header)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loaded = load_classifier(tmp_path / "old.safetensors")
    assert _ours(record) == []  # a file is not the caller's code: nothing to fix there
    assert loaded.config == model.config == {"in_channels": 1, "image_size": 8, "nb_classes": 3, "width": 2}
    x = _x()
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


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
    for field in ("sigma", "steps", "step_size", "lam", "delta", "step_clamp", "tau", "clip_values"):
        expected = getattr(DEFAULTS, field)
        assert inspect.signature(purify).parameters[field].default == expected, field
        assert inspect.signature(ADPPurifier.__init__).parameters[field].default == expected, field
    assert (DEFAULTS.sigma, DEFAULTS.steps, DEFAULTS.lam, DEFAULTS.delta, DEFAULTS.tau) == (0.25, 10, 0.05, 1e-3, 1e-3)


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
])
def test_checks_return_the_value(check, args, kwargs, expected):
    out = check(*args, **kwargs)
    assert out == expected and type(out) is type(expected)
