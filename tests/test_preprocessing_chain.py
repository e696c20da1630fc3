"""ART's standardisation is part of the attacked function everywhere: ``PyTorchClassifier(net,
preprocessing=(mean, std))`` and the same network with the standardisation folded into the model give the same
adversarial examples, predictions, gradients and evaluation records, seed for seed, for every attack of
art_adp.attacks, EOTClassifier, DefendedModel and art_adp.apps.evaluation.evaluate. Tiny models (an MLP trained on digits,
NCSNv2(1, 8, ngf=4))."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, DefendedModel, EOTClassifier
from art_adp.apps.evaluation import EvalConfig, evaluate
from art_adp.apps.evaluation.config import ATTACKS as EVALUATED
from art_adp.attacks.registry import REGISTRY, Budget
from art_adp.ensemble import blocks, eot_gradient, logits, stack_draws
from evalsuite_models import tiny_models

MEAN, STD = 0.3, 0.4
EPS, STEP = 0.2, 0.05


class Folded(torch.nn.Module):
    """``net((x - mean) / std)``: the standardisation inside the model, computed as ART computes it."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net((x - torch.tensor(MEAN)) / torch.tensor(STD))


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    mlp, score, x, y = tiny_models()
    return mlp, score, x[:8], y[:8]


def purifier(score, **kwargs):
    kwargs = {"sigma": 0.1, "steps": 2, **kwargs}
    return ADPPurifier(score, generator=torch.Generator().manual_seed(0), device_type="cpu", **kwargs)


def pair(setup, **kwargs):
    """(standardised estimator, folded estimator), each with its own purifier seeded alike."""
    mlp, score, _, _ = setup
    kw = dict(input_shape=(1, 8, 8), nb_classes=10, clip_values=(0.0, 1.0), device_type="cpu")
    return (PyTorchClassifier(mlp, torch.nn.CrossEntropyLoss(), preprocessing=(MEAN, STD),
                              preprocessing_defences=[purifier(score, **kwargs)], **kw),
            PyTorchClassifier(Folded(mlp), torch.nn.CrossEntropyLoss(), preprocessing=None,
                              preprocessing_defences=[purifier(score, **kwargs)], **kw))


def the_purifier(estimator):
    return estimator.preprocessing_defences[0]


def test_the_two_networks_differ_without_the_standardisation(setup):
    """The raw model (what ignoring ``preprocessing`` attacks) is far from the estimator's function."""
    mlp, _, x, y = setup
    standardised, folded = pair(setup)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        assert (mlp(xt) - folded.model(xt)).abs().max() > 1.0
        torch.testing.assert_close(logits(standardised, xt, defended=False), folded.model(xt), rtol=0, atol=1e-5)
    # ART's own gradient of the standardised estimator is not the raw model's
    raw = torch.from_numpy(x).requires_grad_(True)
    torch.nn.functional.cross_entropy(mlp(raw), torch.from_numpy(y), reduction="sum").backward()
    bare = PyTorchClassifier(mlp, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                             clip_values=(0.0, 1.0), preprocessing=(MEAN, STD), device_type="cpu")
    art = bare.loss_gradient(x, np.eye(10, dtype=np.float32)[y]) * len(x)
    assert np.abs(art - raw.grad.numpy()).max() > 0.1


@pytest.mark.parametrize("defended", [True, False])
def test_logits_follow_arts_chain(setup, defended):
    _, _, x, _ = setup
    standardised, folded = pair(setup)
    for est in (standardised, folded):
        the_purifier(est).generator.manual_seed(3)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        a, b = logits(standardised, xt, defended=defended), logits(folded, xt, defended=defended)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    the_purifier(standardised).generator.manual_seed(3)
    if defended:  # ART's own prediction is the whole chain too
        np.testing.assert_allclose(standardised.predict(x), a.numpy(), atol=1e-5)


BUDGET = Budget(eps=EPS, eps_step=STEP, max_iter=3, eot_samples=2, samples_per_step=8)
ATTACKS = {  # every attack of the registry, and the variants of its budget worth a case of their own
    **{name: BUDGET for name in REGISTRY},
    "bpda-eot/sign": replace(BUDGET, eot_aggregate="sign"),
    "joint-score/eot0": replace(BUDGET, eot_samples=0),  # the score direction alone
    "spsa": replace(BUDGET, max_iter=2),
}


def build(name: str, estimator):
    """The registry's attack ``name`` (before a ``/``) on ``estimator`` with the case's budget, seed 0."""
    return REGISTRY[name.split("/")[0]].build(estimator, ATTACKS[name], 0)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attacks_see_the_standardisation(setup, name):
    _, _, x, y = setup
    outs = []
    for est in pair(setup):
        np.random.seed(0)
        torch.manual_seed(0)
        outs.append(build(name, est).generate(x, y=y))
    assert np.abs(outs[0] - x).max() > 1e-3  # the attack moved
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("gradient, batch_size", [("bpda", 5), ("full", 64)])  # blocks splitting a copy; whole copies
def test_eot_classifier_sees_the_standardisation(setup, gradient, batch_size):
    _, _, x, y = setup
    results = []
    for est in pair(setup, gradient=gradient):
        eot, p = EOTClassifier(est, ensemble_size=3, batch_size=batch_size), the_purifier(est)
        p.generator.manual_seed(1)
        predicted = eot.predict(x)
        p.generator.manual_seed(2)
        loss_gradient = eot.loss_gradient(x, np.eye(10, dtype=np.float32)[y])
        p.generator.manual_seed(3)
        class_gradient = eot.class_gradient(x, label=y)
        results.append((predicted, loss_gradient, class_gradient))
    assert np.abs(results[0][1]).max() > 1e-4
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_defended_model_from_estimator_sees_the_standardisation(setup):
    mlp, score, x, _ = setup
    standardised, folded = pair(setup, gradient="full")
    models = [DefendedModel.from_estimator(standardised, ensemble_size=3, batch_size=10),
              DefendedModel(Folded(mlp), the_purifier(folded), ensemble_size=3)]
    outs = []
    for model, p in zip(models, (the_purifier(standardised), the_purifier(folded))):
        p.generator.manual_seed(4)
        xg = torch.from_numpy(x).requires_grad_(True)
        out = model(xg)
        out[:, 0].sum().backward()
        outs.append((out.detach(), xg.grad))
    assert outs[0][1].abs().max() > 1e-4
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_stacked_draws_equal_consecutive_draws_whatever_the_blocks(setup):
    _, score, x, y = setup
    standardised, _ = pair(setup, gradient="full")
    p, xt, yt = the_purifier(standardised), torch.from_numpy(x), torch.from_numpy(y)
    assert blocks(8, 3, 20) == [(2, slice(0, 8)), (1, slice(0, 8))]
    assert blocks(8, 2, 5) == [(1, slice(0, 5)), (1, slice(5, 8))] * 2
    p.generator.manual_seed(5)
    with torch.no_grad():
        one_by_one = torch.stack([logits(standardised, xt) for _ in range(3)])
    for batch_size in (None, 3, 8, 20):
        p.generator.manual_seed(5)
        with torch.no_grad():
            stacked = stack_draws(lambda z: logits(standardised, z), xt, 3, batch_size=batch_size)
        torch.testing.assert_close(stacked, one_by_one, rtol=1e-5, atol=1e-5)
    p.generator.manual_seed(6)
    singles = []
    for _ in range(3):
        xg = xt.clone().requires_grad_(True)
        torch.nn.functional.cross_entropy(logits(standardised, xg), yt, reduction="sum").backward()
        singles.append(xg.grad)
    for batch_size in (3, 20):
        p.generator.manual_seed(6)
        grad, _ = eot_gradient(lambda z: logits(standardised, z), xt, yt,
                               lambda z, t: torch.nn.functional.cross_entropy(z, t, reduction="none"), 3,
                               batch_size=batch_size)
        torch.testing.assert_close(grad, torch.stack(singles).mean(0), rtol=1e-4, atol=1e-6)


@pytest.mark.e2e  # the whole evaluation, every attack, twice (35 s): CI runs it right after the suite
def test_evaluation_records_see_the_standardisation(setup, tmp_path, monkeypatch):
    """evaluate builds its estimator inside; a PyTorchClassifier that always standardises stands in."""
    import art_adp.runs.engine as engine

    mlp, score, x, y = setup

    class Standardised(PyTorchClassifier):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "preprocessing": (MEAN, STD)})

    config = EvalConfig(attacks=EVALUATED, eps=EPS, eps_step=STEP, max_iter=2, eot_samples=2, spsa_max_iter=1,
                        spsa_samples_per_step=4, apgd_max_iter=2, apgd_eot_samples=1, selective_max_iter=2,
                        selective_eot_samples=2, lowfreq_max_iter=2, ensemble_size=2, repeats=1, chunk_size=4,
                        batch_size=64, sanity=False)  # every attack's own budget tiny too (their papers': minutes)
    records = []
    for name, net in (("standardised", mlp), ("folded", Folded(mlp))):
        with monkeypatch.context() as m:
            if name == "standardised":
                m.setattr(engine, "PyTorchClassifier", Standardised)
            evaluate(net, purifier(score, steps=1), x[:4], y[:4], config=config, run_dir=tmp_path / name,
                     progress=False, log=lambda line: None)
        rows = [json.loads(line) for f in sorted((tmp_path / name / "records").glob("*.jsonl"))
                for line in f.read_text().splitlines()]
        rows = [{k: v for k, v in r.items() if k != "settings"} for r in rows]  # the digest names the weights' hash
        records.append(sorted(rows, key=lambda r: (r["setting"], r["attack"], r["index"])))
    attacked = {r["attack"] for r in records[0] if r["setting"] == "main"}
    assert attacked == {"clean", *config.attacks} and len(records[0]) == len(records[1])
    assert records[0] == records[1]
    assert any(r["pred"][0] != r["label"] for r in records[0] if r["attack"] == "clf-pgd")  # attacks bite
