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
    "full-pgd-eot": lambda est, **kw: A.PGDEOT(est, eot_samples=1, **kw),
    "fixed-noise-pgd": lambda est, **kw: A.FixedNoisePGD(est, **kw),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_earlier_broken_iterate_is_returned_not_the_robust_last_one(one_thread, name):
    est = estimator(Overshoot(), [identity_adp()] if name == "fixed-noise-pgd" else None)
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    kw = dict(eps=0.05, eps_step=STEP, max_iter=6, random_start=False)  # the planted path starts at x₀
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
    kw = dict(eps=0.05, eps_step=STEP, max_iter=10, generator=torch.Generator().manual_seed(0), random_start=False)
    assert predicted(est, x).tolist() == [0, 0, 1]
    one = A.PGDEOT(est, eot_samples=1, num_random_init=1, **kw).generate(x, y)  # the ablation: one run from x₀
    assert predicted(est, one).tolist() == [0, 0, 1]
    assert (one[:2, 0, 0, 0] - 0.3 > 0.03).all()  # it climbed the wide, robust bump

    rows = []

    class Counting(A.PGDEOT):
        def _direction(self, x_adv, yb):
            rows.append(len(x_adv))
            return super()._direction(x_adv, yb)

    many = Counting(est, eot_samples=1, num_random_init=8, **kw).generate(x, y)
    assert predicted(est, many).tolist() == [1, 1, 1]
    assert np.abs(many - x).max() <= 0.05 + 1e-6
    assert rows[:10] == [3] * 10 and set(rows[10:]) <= {1, 2} and len(rows) < 80  # restarts: the unbroken only


class Flips(PreprocessorPyTorch):
    """A random defence: each row, with probability 0.2 from its own generator, is flipped -- pixel (0, 1) set to 1
    (else 0), which the classifiers below read as a confidently wrong draw."""

    def __init__(self, seed: int = 11) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, x, y=None):
        x = x.clone()
        x[:, 0, 0, 1] = (torch.rand(len(x), generator=self.generator) < 0.2).to(x.dtype)
        return x, y


class FlippedBumps(TwoBumps):
    """:class:`TwoBumps` on a draw that is not flipped (the narrow bump only with ``narrow``), class 1's logit 5 on a
    flipped one. From v = 0 to the wide bump's top the mean softmax of ten draws is broken exactly when at least four
    of them are flipped (an image broken by luck: a ten-draw judgement with four or more flips, about one in eight);
    at the narrow bump's top every draw is wrong."""

    def __init__(self, narrow: bool = True) -> None:
        super().__init__()
        self.narrow = narrow

    def forward(self, x):
        flip = x[:, 0, 0, 1]
        z = super().forward(x) if self.narrow else torch.stack([0 * flip, -1 - 100 * (x[:, 0, 0, 0] - 0.34) ** 2], 1)
        return torch.stack([z[:, 0], flip * 5 + (1 - flip) * z[:, 1]], 1)


def _lucky(judges, x, y, seeds=range(200)):
    """The first seed whose attack's own judgement (``judges(seed)[0]``) calls ``x`` broken and whose fresh draws
    (``judges(seed)[1]``) do not."""
    yt, xt = torch.as_tensor(y), torch.as_tensor(x)
    for seed in seeds:
        own, fresh = judges(seed)
        if bool((own.judge(xt) < 0).all()) and bool((fresh.judge(xt) >= 0).all()):
            return seed
    raise AssertionError("no lucky seed")


def _no_confirmation(best, fresh, rows, below=0.0, sets=1):  # noqa: ARG001 -- confirmed's signature
    """The ablation of :func:`~art_adp.attacks.best_iterate.confirmed`: the attack's own draws decide alone."""
    return best.score[rows] < below


RESTARTS = {  # (attack at a seed, its own and its fresh judgement at that seed, where the ablation is patched)
    "pgd": (
        lambda est, s: A.PGDEOT(est, eot_samples=1, eps=0.05, eps_step=STEP, max_iter=10, num_random_init=8,
                                generator=torch.Generator().manual_seed(s)),
        lambda attack, y: (attack._best_iterate(y, 0), attack._best_iterate(y, 0, "confirm")),
        A._core,
    ),
    "apgd": (
        lambda est, s: A.APGDEOT(est, eps=0.05, max_iter=10, eot_samples=1, losses=("ce", "margin"), seed=s),
        lambda attack, y: (attack._best_iterate(y, 0), attack._best_iterate(y, 0, "confirm")),
        A._core,
    ),
    "selective": (
        lambda est, s: A.SelectiveEOT(est, graft=False, eps=0.05, max_iter=10, eot_samples=2, judge_samples=10,
                                      losses=("margin", "ce"), judgement="mean", seed=s),
        lambda attack, y: (attack._judge(y, (attack.seed * 7919 + 1) % 2**62),
                           attack._judge(y, A.best_iterate.derived_seed(attack.seed, "confirm", 0))),
        A.selective_eot,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RESTARTS))
def test_an_image_broken_only_on_the_attacks_own_draws_is_attacked_again(one_thread, monkeypatch, name):
    """An image no attack can break (the wide bump only), at a seed whose judging draws hold four flips: every
    iterate of the first run is broken on those draws and on no fresh ones. The later runs (restarts, APGD's second
    loss, selective EOT's next loss) attack it again; the ablation -- the own draws' verdict alone -- leaves it out."""
    make, judges, module = RESTARTS[name]
    est = estimator(FlippedBumps(narrow=False), [Flips()])
    x, y = np.full((1, 1, 8, 8), 0.3, np.float32), np.zeros(1, np.int64)
    seed = _lucky(lambda s: judges(make(est, s), torch.as_tensor(y)), x, y)
    runs = []
    spied = {"pgd": (A.PGDEOT, "_start"), "apgd": (A.APGDEOT, "_start"), "selective": (A.SelectiveEOT, "_run")}[name]
    real = getattr(*spied)
    monkeypatch.setattr(*spied, lambda self, xs, *a: runs.append(len(xs)) or real(self, xs, *a))
    make(est, seed).generate(x, y)
    assert len(runs) > 1 and set(runs) == {1}  # the first run, then at least one more on the image
    runs.clear()
    monkeypatch.setattr(module, "confirmed", _no_confirmation)
    make(est, seed).generate(x, y)
    assert runs == [1]  # the ablation: the first run only


def test_a_restart_breaks_what_the_own_draws_broke_by_luck(one_thread, monkeypatch):
    """PGD+EOT with restarts on the flipped two bumps, at a seed whose judging draws break the image by luck: the
    first run climbs the wide bump (broken on those draws only); the restarts, confirmed on fresh draws, find the
    narrow bump, broken on every draw. The ablation returns the first run's lucky iterate, robust on the table's
    fresh judgements but where they too hold four flips."""
    make, judges, module = RESTARTS["pgd"]
    est = estimator(FlippedBumps(), [Flips()])
    x, y = np.full((1, 1, 8, 8), 0.3, np.float32), np.zeros(1, np.int64)
    seed = _lucky(lambda s: judges(make(est, s), torch.as_tensor(y)), x, y)
    table = A.best_iterate.BestIterate(est, torch.as_tensor(y), draws=10, seed=12345)  # fresh S = 10 ensembles

    def broken(x_adv):
        return [bool(table.judge(torch.as_tensor(x_adv))[0] < 0) for table.seed in range(100, 105)]

    assert broken(make(est, seed).generate(x, y)) == [True] * 5
    monkeypatch.setattr(module, "confirmed", _no_confirmation)
    assert sum(broken(make(est, seed).generate(x, y))) <= 1  # broken again only where a judgement is as lucky


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


class PassesThrough(torch.nn.Module):
    """Three classes on 1×8×8 images of base value 0.3, by the mean offset u: class 1 wins only in the band
    |u − 0.03| < 0.01, class 2 never within u ≤ 0.05; the cross-entropy of class 0 rises with u all the way to 0.05
    (class 2's logit climbs faster than class 1's falls past the band). An ascent from u ≈ 0 in steps of 0.01 crosses
    the band (broken at u ≈ 0.03) and ends at the ε-ball's edge u = 0.05, robust -- where its loss is highest, so
    APGD's own best-loss point is robust too."""

    def forward(self, x):
        u = x.flatten(1).mean(1) - 0.3
        return torch.stack([torch.zeros_like(u), 0.05 - 5 * (u - 0.03).abs(), -2 + 39 * u], 1)


def estimator3(model):
    return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                             clip_values=(0, 1), device_type="cpu")  # fmt: skip


def test_apgd_returns_the_broken_iterate_its_run_passed(one_thread):
    est = estimator3(PassesThrough())
    x, y = np.full((4, 1, 8, 8), 0.3, np.float32), np.zeros(4, np.int64)
    kw = dict(eps=0.05, eps_step=0.01, max_iter=20, eot_samples=1, losses=("ce",), seed=1)
    # the ablation: the run's last iterate (what ART's APGD returned when its view called it broken) is robust at
    # the edge of the ball, its highest loss
    last = A.APGDEOT(est, check_every=0, **kw).generate(x, y)
    np.testing.assert_allclose((last - x).reshape(4, -1).mean(1), 0.05, atol=1e-3)
    assert predicted(est, last).tolist() == [0, 0, 0, 0]
    # every iterate offered to the rule (the default, "auto": no purifier, judging is free): the band's is kept
    best = A.APGDEOT(est, **kw).generate(x, y)
    assert predicted(est, best).tolist() == [1, 1, 1, 1]
    assert np.abs((best - x).reshape(4, -1).mean(1) - 0.03).max() < 0.01


def test_apgd_attacks_every_image_and_runs_each_loss_on_the_unbroken(one_thread, monkeypatch):
    est = estimator(Overshoot())
    x, y = np.full((3, 1, 8, 8), 0.3, np.float32), np.zeros(3, np.int64)
    x[2] += PEAK  # image 2 is broken at the start: ART's APGD never attacked it; every first run does
    rows = []
    real = A.APGDEOT._loss_gradient

    def spy(self, x_adv, yb):
        rows.append((self._loss_name, len(x_adv)))
        return real(self, x_adv, yb)

    monkeypatch.setattr(A.APGDEOT, "_loss_gradient", spy)
    A.APGDEOT(est, eps=0.05, max_iter=3, eot_samples=1, losses=("ce", "margin")).generate(x, y)
    assert rows[0] == ("ce", 3) and all(r == ("ce", 3) for r in rows[:4])
    assert all(name == "margin" and n < 3 for name, n in rows[4:])  # the second loss on the images left


def test_apgd_chooses_between_its_runs_by_the_rule(one_thread, monkeypatch):
    est = estimator(Overshoot())
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    # each loss's run ends at a planted point: CE's nearer to broken (u = 0.026) than DLR's (u = 0.045)
    outputs = {"ce": 0.026, "dlr": 0.045}
    calls = []

    def run(self, xs, ys, clip, offer):
        calls.append((self._loss_name, len(xs)))
        out = xs + outputs[self._loss_name]
        offer(out, self.max_iter)
        return out

    monkeypatch.setattr(A.APGDEOT, "_loop", run)
    out = A.APGDEOT(est, eps=0.05, max_iter=2, eot_samples=1).generate(x, y)
    np.testing.assert_allclose((out - x).reshape(2, -1).mean(1), [0.026, 0.026], atol=1e-6)
    assert calls == [("ce", 2), ("dlr", 2)]
    # restarts run the losses again on the images still unbroken; a broken point (u = 0.03) is kept and ends them
    calls.clear()
    outputs.update(ce=0.03)
    out = A.APGDEOT(est, eps=0.05, max_iter=2, eot_samples=1, num_random_init=3).generate(x, y)
    assert calls == [("ce", 2)] and predicted(est, out).tolist() == [1, 1]


def test_apgd_checkpoints_are_croce_and_heins():
    # p_0 = 0, p_1 = 0.22, p_{j+1} = p_j + max(p_j − p_{j−1} − 0.03, 0.06), counted in whole iterations
    assert A.apgd_eot.checkpoints(100) == [21, 40, 56, 69, 79, 86, 92, 98]
    assert A.apgd_eot.checkpoints(10) == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def _apgd_trajectory(monkeypatch, **changes):
    """The mean offsets u of the iterates one APGD margin run offers on the planted peak (no purifier, one draw, from
    u = 0, steps of 0.04), with the module's constants ``changes`` (the ablations)."""
    from test_selective_eot import Peak

    for name, value in changes.items():
        monkeypatch.setattr(A.apgd_eot, name, value)
    seen = []
    real = A.APGDEOT._loop

    def loop(self, xs, ys, clip, offer):
        def recorded(x_adv, step):
            seen.append(float(x_adv.flatten(1).mean(1)[0]) - 0.3)
            return offer(x_adv, step)

        return real(self, xs, ys, clip, recorded)

    monkeypatch.setattr(A.APGDEOT, "_loop", loop)
    monkeypatch.setattr(A.APGDEOT, "_random_point", lambda self, x, clip: x.clone())  # from u = 0: exact steps
    x = np.full((1, 1, 8, 8), 0.3, np.float32)
    A.APGDEOT(estimator(Peak()), eps=0.2, eps_step=0.04, max_iter=30, eot_samples=1, losses=("margin",),
              check_every=0).generate(x, np.zeros(1, np.int64))  # fmt: skip
    monkeypatch.undo()
    return np.array(seen)


def test_apgd_eot_momentum_and_step_halving_by_hand(one_thread, monkeypatch):
    """Croce & Hein's step on a peak at u = 0.03 (the margin's gradient is sign(0.03 − u) on every pixel): the first
    step is the full η = 0.04; the second, the gradient reversed past the peak, is momentum's 0.75 (−η) + 0.25 (+η) =
    −η/2; the checkpoints where the loss stopped rising halve the step, so the oscillation about the peak dies down."""
    u = _apgd_trajectory(monkeypatch)
    steps = np.diff(u)
    assert steps[0] == pytest.approx(0.04, abs=1e-5) and steps[1] == pytest.approx(-0.02, abs=1e-5)
    assert np.abs(steps[-5:]).max() < 0.04 / 4 and abs(u[-1] - 0.03) < 0.01
    # the ablations: without momentum the reversal is a full step; without halving the oscillation does not die
    assert np.diff(_apgd_trajectory(monkeypatch, MOMENTUM=1.0))[1] == pytest.approx(-0.04, abs=1e-5)
    assert np.abs(np.diff(_apgd_trajectory(monkeypatch, checkpoints=lambda n: []))[-5:]).max() >= 0.04 / 4


def test_apgd_starts_as_croce_and_hein_on_the_surface_of_the_ball(one_thread):
    """autopgd_base.py:206-213: ℓ∞, a uniform draw scaled to ‖δ‖∞ = ε; ℓ2, a Gaussian direction at radius ε."""
    x = torch.full((64, 1, 8, 8), 0.5)
    for norm in (np.inf, 2):
        attack = A.APGDEOT(estimator(Overshoot()), norm=norm, eps=0.1, seed=3)
        attack.generator = torch.Generator().manual_seed(3)
        delta = (attack._start(x, torch.zeros(64, dtype=torch.long), (0.0, 1.0)) - x).flatten(1)
        size = delta.abs().amax(1) if norm == np.inf else delta.norm(dim=1)
        torch.testing.assert_close(size, torch.full((64,), 0.1), atol=1e-6, rtol=0)
        if norm == np.inf:  # uniform in the box, scaled: most coordinates inside it, one at its face
            assert ((delta.abs() < 0.1 - 1e-6).float().mean(1) > 0.9).all()


def test_apgd_restarts_run_from_fresh_random_starts(one_thread):
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
    # selective EOT aims at DiffHammer's N-evaluation unless told the table's judgement; the DLR loss needs three
    # classes, so on two it runs margin and CE
    selective = A.SelectiveEOT(est, losses=("margin", "ce"))
    assert selective.aim == selective.judgement == "worst"
    assert A.SelectiveEOT(est, losses=("margin", "ce"), judgement="mean").judgement == "mean"
    # the low-frequency vote attack aims at the tables' mean softmax unless told DiffBreak's vote
    vote = A.LowFrequencyVote(est)
    assert vote.aim == vote.judgement == "mean" and "judgement" in vote.attack_params
    assert A.LowFrequencyVote(est, judgement="majority").judgement == "majority"
    with pytest.raises(ValueError, match="judgement must be one of"):
        A.LowFrequencyVote(est, judgement="median")
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
        with pytest.raises(ValueError, match=message):
            A.APGDEOT(est, **kw)


def test_spsa_returns_its_best_iterate_not_its_last(one_thread, monkeypatch):
    torchattacks = pytest.importorskip("torchattacks")
    # a scripted SPSA gradient estimate that always raises u: Adam's steps of 0.01 pass the band at u ≈ 0.03 (broken)
    # and end at the ball's edge u = 0.05 (robust), torchattacks' last iterate
    monkeypatch.setattr(torchattacks.SPSA, "spsa_grad", lambda self, x, y, *a: -torch.ones_like(x))
    est = estimator(Overshoot())
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    out = A.BlackBoxSPSA(est, eps=0.05, eps_step=0.01, max_iter=8, samples_per_step=2).generate(x, y)
    assert predicted(est, out).tolist() == [1, 1]
    np.testing.assert_allclose((out - x).reshape(2, -1).mean(1), 0.03, atol=1e-3)
    plain = torchattacks.SPSA(torch.nn.Identity(), eps=0.05, lr=0.01, nb_iter=8, nb_sample=2)
    last = plain.spsa_perturb(torch.as_tensor(x), torch.as_tensor(y))  # the ablation: its last iterate
    assert predicted(est, last.numpy()).tolist() == [0, 0]


class NarrowBand(torch.nn.Module):
    """Class 1 wins only for |u − 0.035| < 0.002 (u the mean offset from 0.3): sign steps of 0.01 from u = 0 circle
    0.03 and 0.04 and never land in it; half a step does."""

    def forward(self, x):
        u = x.flatten(1).mean(1) - 0.3
        return torch.stack([torch.zeros_like(u), 1 - (u - 0.035).abs() / 0.002], 1)


@pytest.mark.parametrize("name", ["full-pgd-eot"])
def test_the_halving_schedule_lands_where_constant_steps_circle(one_thread, name):
    est = estimator(NarrowBand())
    x, y = np.full((2, 1, 8, 8), 0.3, np.float32), np.zeros(2, np.int64)
    kw = dict(eps=0.05, eps_step=0.01, max_iter=12, check_every=1, random_start=False)  # from u = 0
    constant = ATTACKS[name](est, **kw).generate(x, y)  # the ablation
    assert predicted(est, constant).tolist() == [0, 0]
    halving = ATTACKS[name](est, step_schedule="halving", **kw).generate(x, y)
    assert predicted(est, halving).tolist() == [1, 1]
    attack = ATTACKS[name](est, step_schedule="halving", **kw)
    assert [attack.step_size(i) for i in (0, 5, 6, 8, 9, 11)] == [0.01, 0.01, 0.005, 0.005, 0.0025, 0.0025]


@pytest.mark.parametrize("name", ["full-pgd-eot", "full-pgd-eot-ensemble"])
def test_the_strongest_presets_pgd_rows_start_at_random_and_halve_their_steps(one_thread, name):
    """The strongest preset's PGD rows on the two planted cases of a single run: the two bumps (from x₀ the run climbs
    the robust bump; from a random start some runs find the narrow one) and the narrow band (constant steps circle
    it). The preset's budget -- a random start and the halving schedule -- breaks images on both; each ablation, the
    start at x₀ or constant steps, breaks fewer."""
    from art_adp.apps.evaluation.config import EvalConfig
    from art_adp.attacks.registry import REGISTRY

    x, y = np.full((8, 1, 8, 8), 0.3, np.float32), np.zeros(8, np.int64)

    def broken(model, **change):
        c = EvalConfig.preset("strongest", eps=0.05, eps_step=0.01, max_iter=12, eot_samples=1, **change)
        est = estimator(model)
        return int(predicted(est, REGISTRY[name].build(est, c.budget(name), 0).generate(x, y)).sum())

    assert broken(TwoBumps()) >= 2 and broken(TwoBumps(), random_start=False) == 0
    assert broken(NarrowBand()) == 8 > broken(NarrowBand(), step_schedule="constant")
