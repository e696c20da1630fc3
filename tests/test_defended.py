"""DefendedModel: the S-run ensemble as an nn.Module, exact against hand computation, usable by torchattacks."""

import re

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, DefendedModel, NCSNv2, purify
from art_adp.data import load_digits
from art_adp.models import MLP, evaluate_accuracy, train_classifier


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    data = load_digits()
    clf = train_classifier(MLP(1, 8, 10, hidden=(64,)), data.x_train, data.y_train, epochs=5, seed=0, progress=False)
    score = NCSNv2(1, 8, ngf=4)
    x, y = torch.from_numpy(data.x_test[:40]), torch.from_numpy(data.y_test[:40])
    return clf, score, x, y


def make(score, seed, **kwargs):
    kwargs.setdefault("tau", 0.0)
    return ADPPurifier(score, generator=torch.Generator().manual_seed(seed), device_type="cpu", **kwargs)


@pytest.mark.parametrize("aggregate", ["softmax", "logits"])
def test_output_is_the_ensemble_of_the_stacked_runs(setup, aggregate):
    clf, score, x, _ = setup
    runs = 3
    with torch.no_grad():
        out = DefendedModel(clf, make(score, 1), ensemble_size=runs, aggregate=aggregate)(x[:5])
        purified = purify(score, x[:5].repeat(runs, 1, 1, 1), tau=0.0, generator=torch.Generator().manual_seed(1))
        logits = clf(purified).view(runs, 5, 10)
    if aggregate == "softmax":
        expected = torch.log(torch.softmax(logits, -1).mean(0))
        assert torch.allclose(out.exp().sum(1), torch.ones(5), atol=1e-5)  # log of a probability vector
    else:
        expected = logits.mean(0)
    assert torch.allclose(out, expected, atol=1e-5)


def test_bpda_gradient_matches_art_for_the_same_seed(setup):
    clf, score, x, y = setup
    xs, ys = x[:6], y[:6]
    xg = xs.clone().requires_grad_(True)
    model = DefendedModel(clf, make(score, 9, gradient="bpda"), ensemble_size=1)
    torch.nn.functional.cross_entropy(model(xg), ys).backward()
    art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                            clip_values=(0.0, 1.0), device_type="cpu", preprocessing_defences=[make(score, 9, gradient="bpda")])
    expected = art.loss_gradient(xs.numpy(), np.eye(10, dtype=np.float32)[ys.numpy()])
    assert np.allclose(xg.grad.numpy(), expected, atol=1e-6)
    assert np.abs(expected).sum() > 0


def test_torchattacks_pgd_runs_unchanged_and_stays_in_the_ball(setup):
    torchattacks = pytest.importorskip("torchattacks")
    clf, score, x, y = setup
    eps = 0.2
    clean = evaluate_accuracy(clf, x, y)
    adv_plain = torchattacks.PGD(clf, eps=eps, alpha=0.05, steps=10)(x, y)
    assert evaluate_accuracy(clf, adv_plain, y) < clean - 0.3  # the attack is not a no-op
    model = DefendedModel(clf, make(score, 0, steps=2), ensemble_size=2).eval()
    adv = torchattacks.PGD(model, eps=eps, alpha=0.05, steps=3)(x, y)
    assert (adv - x).abs().max() <= eps + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert (adv - x).abs().max() > eps / 2


def test_log_of_mean_probabilities_is_stable_for_confident_logits():
    class Confident(torch.nn.Module):
        def forward(self, z):
            return torch.cat([z.flatten(1)[:, :1] * 0 + 1000.0, z.flatten(1)[:, 1:10] * 0 - 1000.0], 1)

    out = DefendedModel(Confident(), make(NCSNv2(1, 8, ngf=4), 0, steps=1), ensemble_size=4)(torch.rand(2, 1, 8, 8))
    assert torch.isfinite(out[:, 0]).all() and out[:, 0].abs().max() < 1e-5
    assert out[0, 1].item() == pytest.approx(-2000.0, abs=1e-3)  # log(mean(softmax)) would be -inf here


@pytest.mark.parametrize("kwargs, message", [
    ({"ensemble_size": 0}, "ensemble_size must be an integer >= 1, got 0."),
    ({"aggregate": "mean"}, "aggregate must be one of 'softmax', 'logits', 'vote', got 'mean'."),
])
def test_errors(setup, kwargs, message):
    clf, score, _, _ = setup
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        DefendedModel(clf, make(score, 0), **kwargs)


def test_purifier_type_is_checked(setup):
    clf = setup[0]
    with pytest.raises(ValueError, match=re.escape("purifier must be an ADPPurifier or a callable x -> x', got int.")):
        DefendedModel(clf, 3)
