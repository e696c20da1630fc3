"""The best-iterate rule and restarts in the attacks (IterativeAttack, APGD-EOT): a planted classifier on which PGD
overshoots (broken at step 3 and 5, robust at the last step) and the attack returns the broken iterate -- not with
check_every=0; a planted two-bump classifier on which a run from x₀ climbs the robust bump and restarts from random
points find the broken one -- not with num_random_init=1, and restarts attack only the unbroken images; the judgement's
draws leave the purifier's generator and torch's as the attack without judging leaves them; APGD-EOT's choice between
its runs by the same rule; the one default gradient mode; messages. Tiny planted models only."""

import inspect

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, DenoisedSmoothingPurifier, NCSNv2, ReverseDiffusionPurifier
from art_adp.preprocessor import DEFAULT_GRADIENT

STEP, PEAK, WIDTH = 0.01, 0.032, 0.003  # sign steps move the mean offset u by STEP; broken for |u − PEAK| < WIDTH


class Overshoot(torch.nn.Module):
    """Two classes on 1×8×8 images of base value 0.3: class 1 wins only in a narrow band of the mean offset u around
    PEAK (logit 1 − |u − PEAK|/WIDTH: never saturated on the way). Sign-PGD from u = 0 in steps of 0.01 reaches 0.03
    (inside the band: broken) at step 3, then the loss gradient points back and forth: 0.04 (robust), 0.03, 0.04,
    ... -- robust at every even step, the last of six included."""

    def forward(self, x):
        u = x.flatten(1).mean(1) - 0.3
        return torch.stack([torch.zeros_like(u), 1 - (u - PEAK).abs() / WIDTH], 1)


class TwoBumps(torch.nn.Module):
    """Class 1's logit is a soft maximum of two bumps in the first pixel's offset v: a wide one at +0.04 that never
    wins (peak −1) and a narrow one at −0.04 that does (peak 1, width 0.01). From v = 0 the gradient climbs the wide
    bump (robust wherever it goes); from a random start below about −0.01 it climbs the narrow one (broken)."""

    def forward(self, x):
        v = x[:, 0, 0, 0] - 0.3
        wide = -1 - 100 * (v - 0.04) ** 2
        narrow = 1 - 10_000 * (v + 0.04) ** 2
        return torch.stack([torch.zeros_like(v), torch.logsumexp(torch.stack([wide, narrow]), 0)], 1)


class Jitter(PreprocessorPyTorch):
    """A random defence: adds N(0, s²) from its own generator."""

    def __init__(self, s: float = 0.02, seed: int = 7) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.s, self.generator = s, torch.Generator().manual_seed(seed)

    def forward(self, x, y=None):
        return x + self.s * torch.randn(x.shape, generator=self.generator), y


def estimator(model, defences=None):
    return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=2,
                             clip_values=(0, 1), preprocessing_defences=defences, device_type="cpu")  # fmt: skip


def identity_adp():
    """ADP at σ 0 and no steps: the identity, so the ADP-specific attacks run on the planted classifier."""
    return ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), sigma=0.0, steps=0, device_type="cpu")


def predicted(est, x):
    return est.predict(x.astype(np.float32)).argmax(1)


ATTACKS = {
    "clf-pgd": lambda est, **kw: A.ClassifierPGD(est, **kw),
    "full-pgd-eot": lambda est, **kw: A.PGDEOT(est, eot_samples=1, **kw),
    "fixed-noise-pgd": lambda est, **kw: A.FixedNoisePGD(est, **kw),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_earlier_broken_iterate_is_returned_not_the_robust_last_one(one_thread, name):
    est = estimator(Overshoot(), [identity_adp()] if name == "fixed-noise-pgd" else None)
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    kw = dict(eps=0.05, eps_step=STEP, max_iter=6)
    # the planted path: the last iterate (check_every=0, the ablation) is robust at u = 0.04
    last = ATTACKS[name](est, check_every=0, **kw).generate(x, y)
    np.testing.assert_allclose((last - x).reshape(2, -1).mean(1), [0.04, 0.04], atol=1e-6)
    assert predicted(est, last).tolist() == [0, 0]
    # with the rule (default: every 5 iterations and the last), step 5's broken iterate at u = 0.03 is kept
    best = ATTACKS[name](est, **kw).generate(x, y)
    np.testing.assert_allclose((best - x).reshape(2, -1).mean(1), [0.03, 0.03], atol=1e-6)
    assert predicted(est, best).tolist() == [1, 1]
    # judged at every iterate: the first broken one, step 3's (lower score ties are not taken)
    every = ATTACKS[name](est, check_every=1, **kw).generate(x, y)
    assert predicted(est, every).tolist() == [1, 1]


def test_restarts_break_what_one_run_misses_and_attack_only_the_unbroken(one_thread):
    est = estimator(TwoBumps())
    x = np.full((3, 1, 8, 8), 0.3, np.float32)
    x[2, 0, 0, 0] = 0.26  # image 2 starts broken (v = −0.04): no restart needs to attack it
    y = np.zeros(3, np.int64)
    kw = dict(eps=0.05, eps_step=STEP, max_iter=10, generator=torch.Generator().manual_seed(0))
    assert predicted(est, x).tolist() == [0, 0, 1]
    one = A.ClassifierPGD(est, num_random_init=1, **kw).generate(x, y)  # the ablation: one run from x₀
    assert predicted(est, one).tolist() == [0, 0, 1]
    assert (one[:2, 0, 0, 0] - 0.3 > 0.03).all()  # it climbed the wide, robust bump

    rows = []

    class Counting(A.ClassifierPGD):
        def _direction(self, x_adv, yb):
            rows.append(len(x_adv))
            return super()._direction(x_adv, yb)

    many = Counting(est, num_random_init=8, **kw).generate(x, y)
    assert predicted(est, many).tolist() == [1, 1, 1]
    assert np.abs(many - x).max() <= 0.05 + 1e-6
    assert rows[:10] == [3] * 10 and set(rows[10:]) <= {1, 2} and len(rows) < 80  # restarts: the unbroken only


def test_judging_draws_its_own_noise(one_thread):
    x, y = np.full((4, 1, 8, 8), 0.31, np.float32), np.zeros(4, np.int64)
    states = []
    for check_every in (0, 1, 5):
        jitter = Jitter()
        est = estimator(Overshoot(), [jitter])
        torch.manual_seed(3)
        A.PGDEOT(est, eot_samples=2, eps=0.05, eps_step=STEP, max_iter=6, check_every=check_every).generate(x, y)
        states.append((jitter.generator.get_state(), torch.random.get_rng_state()))
    for purifier_state, global_state in states[1:]:  # judging took no draw from the purifier's or torch's generator
        assert torch.equal(purifier_state, states[0][0]) and torch.equal(global_state, states[0][1])
    # reproducible: the judgement's draws are seeded from the attack's generator
    runs = [
        A.PGDEOT(estimator(Overshoot(), [Jitter()]), eot_samples=2, eps=0.05, eps_step=STEP, max_iter=6,
                 random_start=True, generator=torch.Generator().manual_seed(1)).generate(x, y)
        for _ in range(2)
    ]  # fmt: skip
    np.testing.assert_array_equal(runs[0], runs[1])


def test_apgd_chooses_between_its_runs_by_the_rule(one_thread, monkeypatch):
    est = estimator(Overshoot())
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    # each run returns a planted point: CE nearer to broken (u = 0.026, image 0) than DLR (u = 0.045); the old
    # choice took the last loss's output for every image left unbroken
    outputs = {"ce": 0.026, "dlr": 0.045}
    calls = []

    def run(self, name, xs, ys):
        calls.append((name, len(xs)))
        return xs + outputs[name]

    monkeypatch.setattr(A.APGDEOT, "_run", run)
    out = A.APGDEOT(est, eps=0.05, max_iter=2, eot_samples=1).generate(x, y)
    np.testing.assert_allclose((out - x).reshape(2, -1).mean(1), [0.026, 0.026], atol=1e-6)
    assert calls == [("ce", 2), ("dlr", 2)]
    # restarts run the losses again on the images still unbroken; a broken point (u = 0.03) is kept and ends them
    calls.clear()
    outputs.update(ce=0.03)
    out = A.APGDEOT(est, eps=0.05, max_iter=2, eot_samples=1, num_random_init=3).generate(x, y)
    assert calls == [("ce", 2)] and predicted(est, out).tolist() == [1, 1]


def test_apgd_restarts_run_art_from_fresh_random_starts(one_thread):
    est = estimator(TwoBumps())
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    one = A.APGDEOT(est, eps=0.05, max_iter=5, eot_samples=1, losses=("ce",), seed=0).generate(x, y)
    many = A.APGDEOT(est, eps=0.05, max_iter=5, eot_samples=1, losses=("ce",), seed=0, num_random_init=8).generate(x, y)
    assert predicted(est, many).sum() > predicted(est, one).sum()


def test_one_default_gradient_mode():
    assert DEFAULT_GRADIENT == "full"
    net = torch.nn.Identity()
    for cls in (ADPPurifier, ReverseDiffusionPurifier, DenoisedSmoothingPurifier):
        assert inspect.signature(cls).parameters["gradient"].default == DEFAULT_GRADIENT
    with_gradient = [
        c for c in vars(A).values() if inspect.isclass(c) and "gradient" in inspect.signature(c).parameters
    ]
    assert {c.__name__ for c in with_gradient} >= {"PGDEOT", "APGDEOT", "SelectiveEOT", "LowFrequencyVote"}
    for cls in with_gradient:
        assert inspect.signature(cls).parameters["gradient"].default == DEFAULT_GRADIENT, cls.__name__
    assert ADPPurifier(net, device_type="cpu").gradient == DEFAULT_GRADIENT


def test_aims_parameters_and_messages():
    est = estimator(Overshoot())
    assert A.PGDEOT(est).judgement == "mean" and A.PGDEOT.aim == "mean"
    # the attacks with loops of their own judge by their aim alone (no judgement parameter); the DLR loss needs three
    # classes, so on two the selective attack runs margin and CE
    selective = A.SelectiveEOT(est, losses=("margin", "ce"))
    assert selective.aim == "worst" and "judgement" not in selective.attack_params
    vote = A.LowFrequencyVote(est)
    assert vote.aim == "majority" and "judgement" not in vote.attack_params
    assert not A.ClassifierPGD(est).judged_defended
    attack = A.PGDEOTDev(est)
    attack.set_params(num_random_init=3, check_every=2, judge_draws=4)  # ART's set_params reaches every subclass
    assert (attack.num_random_init, attack.check_every, attack.judge_draws) == (3, 2, 4)
    for kw, message in (
        ({"num_random_init": 0}, "num_random_init must be an integer >= 1, got 0."),
        ({"check_every": -1}, "check_every must be an integer >= 0, got -1."),
        ({"judge_draws": 0}, "judge_draws must be an integer >= 1, got 0."),
        ({"judgement": "median"}, "judgement must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            A.PGDEOT(est, **kw)
        if "check_every" not in kw:  # APGD keeps ART's best-loss point within a run: no check interval
            with pytest.raises(ValueError, match=message):
                A.APGDEOT(est, **kw)
