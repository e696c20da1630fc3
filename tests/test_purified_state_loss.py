"""DiffAttack's loss on the purification states: the states each purifier exposes (equal to the plain loop's, their
references), the loss by hand and against finite differences, rows matched to their clean images by index where the
nearest clean image is another row's, a planted case that only the intermediate states break (with its mirrored twin,
and the ablation that takes them out), and every purifier family in both gradient modes. Tiny models only."""

import functools
import re

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, DefendedModel, DenoisedSmoothingPurifier, EOTClassifier, NCSNv2, purify
from art_adp import ReverseDiffusionPurifier
from art_adp.attacks import apgd_eot, pgd_eot
from art_adp.attacks._core import cross_entropy
from art_adp.attacks.purified_state_loss import PurifiedStateLoss, deviation, distance
from art_adp.diffusion_purify import reverse_diffusion
from art_adp.eot import rows_of, tag_rows
from art_adp.preprocessor import PurifierPyTorch, PurifierState
from art_adp.score.unet import DenoiserUNet

EPS = 0.1


# -- the states --------------------------------------------------------------------------------------------------------


class Score(torch.nn.Module):
    """A smooth planted score: h(x) = tanh(W x) − x/2."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16) / 4)

    def forward(self, x):
        return torch.tanh(x.flatten(1) @ self.w.T).view_as(x) - x / 2


@pytest.mark.parametrize("options", [{}, {"gradient_checkpointing": True}, {"compact": True, "step_size": "adaptive"}])
def test_adp_reports_every_state_of_algorithm_1_and_they_are_the_plain_loops(options):
    torch.manual_seed(0)
    score, x = Score(), torch.rand(3, 1, 4, 4)
    kw = {"sigma": 0.1, "steps": 4, "step_size": [0.05, 0.1, 0.02, 0.07], "tau": 0.0, **options}
    seen = []
    out = purify(score, x, **kw, generator=torch.Generator().manual_seed(5), on_state=seen.append)
    assert len(seen) == 4
    torch.testing.assert_close(seen[-1], out)
    torch.testing.assert_close(out, purify(score, x, **kw, generator=torch.Generator().manual_seed(5)))
    for t in range(1, 4):  # x_t is the result of the same loop stopped after t steps, with the same noise
        stopped = purify(score, x, **{**kw, "steps": t}, generator=torch.Generator().manual_seed(5))
        torch.testing.assert_close(seen[t - 1], stopped)


class Oracle(torch.nn.Module):
    """A perfect σ-conditional denoiser of one clean batch: D(x, σ) = clean."""

    sigma_conditional = True

    def __init__(self, clean):
        super().__init__()
        self.clean = clean

    def forward(self, x, sigma):
        return self.clean.expand_as(x)


def test_reverse_diffusion_states_and_their_reference_the_clean_image_diffused_with_the_same_noise():
    torch.manual_seed(0)
    clean = 0.25 + 0.5 * torch.rand(2, 1, 4, 4)
    delta = 0.02 * torch.randn_like(clean)
    seen = []
    out = reverse_diffusion(
        Oracle(clean),
        clean + delta,
        sigma=0.5,
        steps=4,
        generator=torch.Generator().manual_seed(1),
        on_state=lambda s, level, noise: seen.append(PurifierState(s, level, noise)),
    )
    plain = reverse_diffusion(
        Oracle(clean), clean + delta, sigma=0.5, steps=4, generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(out, plain)
    assert len(seen) == 4 and seen[-1].level == 0 and seen[0].level < 0.5
    torch.testing.assert_close(seen[-1].state, out)
    # a perfect denoiser's DDIM path from x + δ + σ*ε is x + σ_i ε + (σ_i/σ*) δ: against the same noise the deviation
    # is exactly what is left of δ at each level (against fresh noise it would be the noise, ~σ_i √d)
    for s in seen[:-1]:
        torch.testing.assert_close(distance(s.state, s.reference(clean)), s.level / 0.5 * distance(delta, 0 * delta))


@pytest.fixture(scope="module")
def families():
    torch.manual_seed(0)
    net = DenoiserUNet(1, channels=(4, 8), emb_dim=8).eval()
    return {
        "adp": lambda **kw: ADPPurifier(
            NCSNv2(1, 8, ngf=4).eval(), sigma=0.1, steps=3, step_size=0.01, device_type="cpu", **kw
        ),
        "reverse-diffusion": lambda **kw: ReverseDiffusionPurifier(net, sigma=0.3, steps=3, device_type="cpu", **kw),
        "denoised-smoothing": lambda **kw: DenoisedSmoothingPurifier(net, sigma=0.3, device_type="cpu", **kw),
    }


@pytest.mark.parametrize("family, intermediate", [("adp", 2), ("reverse-diffusion", 2), ("denoised-smoothing", 0)])
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_draw_states_records_each_purifiers_states_in_chunks_with_values_and_gradients_of_its_mode(
    one_thread, families, family, intermediate, gradient
):
    purifier = families[family](gradient=gradient, batch_size=2, generator=torch.Generator().manual_seed(3))
    model = DefendedModel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)), purifier, ensemble_size=1)
    x = torch.rand(3, 1, 8, 8, requires_grad=True)  # two chunks: the states of a chunk are joined row for row
    logits, states = model.draw_states(x)
    purifier.generator.manual_seed(3)
    torch.testing.assert_close(logits, model.draw_logits(x))
    assert len(states) == intermediate + 1 and all(s.state.shape == x.shape for s in states)
    assert getattr(purifier, "gradient_checkpointing", False) is False  # switched on while drawing only
    if family == "reverse-diffusion":
        assert [s.level for s in states][-1] == 0 and states[0].level > states[1].level > 0
    if intermediate:
        (g,) = torch.autograd.grad(states[0].state.sum(), x)
        if gradient == "bpda":  # straight-through: the identity
            torch.testing.assert_close(g, torch.ones_like(x))
        else:
            assert not torch.allclose(g, torch.ones_like(x))


# -- the loss ----------------------------------------------------------------------------------------------------------


def test_deviation_and_the_loss_by_hand():
    clean = torch.tensor([[[[0.2, 0.1], [0.5, 0.5]]], [[[0.0, 0.0], [0.0, 0.0]]]])
    noise = torch.ones_like(clean)
    mid = PurifierState(clean + 0.1 + 0.3, 0.1, noise)  # reference clean + 0.1: 0.3 off on 4 values -> 0.6
    final = PurifierState(torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]], [[[1.0, 0.0], [0.0, 0.0]]]]))
    torch.testing.assert_close(
        deviation([mid, final], clean), (torch.tensor([0.6, 0.6]) + torch.tensor([0.5, 1.0])) / 2
    )
    logits, labels = torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([0, 1])
    ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    # the rows come in another order and name their clean image by index
    flipped = [PurifierState(s.state.flip(0), s.level, s.noise) for s in (mid, final)]
    y = torch.stack([labels, torch.tensor([1, 0])], 1)
    loss = PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.5)
    torch.testing.assert_close(loss((logits, flipped), y), ce + 0.5 * torch.tensor([1.6, 1.1]) / 2)
    final_only = PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.5, intermediate=False)
    torch.testing.assert_close(final_only((logits, flipped), y), ce + 0.5 * torch.tensor([1.0, 0.5]))
    torch.testing.assert_close(
        PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.0)((logits, flipped), y), ce
    )


def test_gradient_against_finite_differences():
    torch.manual_seed(0)
    w_p, w_c = torch.randn(4, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    clean = torch.rand(2, 1, 2, 2, dtype=torch.float64)
    noise = torch.randn_like(clean)
    y = torch.tensor([[0, 1], [2, 0]])
    loss = PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.7)

    def objective(x):  # a tiny smooth two-step "purifier" and classifier, the loss of their states
        mid = torch.tanh(x.flatten(1) @ w_p.T).view_as(x)
        out = torch.sigmoid(mid)
        return loss((out.flatten(1) @ w_c.T, [PurifierState(mid, 0.2, noise), PurifierState(out)]), y)

    x = (clean.flip(0) + 0.05 * torch.randn_like(clean)).requires_grad_(True)
    assert torch.autograd.gradcheck(objective, (x,), eps=1e-6, atol=1e-7)


# -- rows matched by index ---------------------------------------------------------------------------------------------


class Identity(PurifierPyTorch):
    """A purifier that returns its input: its one state is the attacked row itself."""

    params = ["gradient", "batch_size"]

    def __init__(self) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.gradient, self.batch_size = "full", 256

    def _check_params(self):
        pass

    def forward(self, x, y=None):
        return self._through(x), y

    def _purify(self, x, on_state=None):
        if on_state is not None:
            on_state(x)
        return x


def neighbours_batch(n=32, eps=0.3):
    """MNIST-sized pairs of digits 1.4 apart in l2, each moved eps towards its pair (l-inf): 8.4 from its own clean
    image, 8.1 from its pair's."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.35, 0.65, (n // 2, 1, 28, 28)).astype(np.float32)
    clean = np.concatenate([base, base + 0.05 * rng.choice([-1, 1], base.shape)]).astype(np.float32)
    nearest = torch.cdist(torch.from_numpy(clean).flatten(1), torch.from_numpy(clean).flatten(1))
    nearest = (nearest + 1e9 * torch.eye(n)).argmin(1).numpy()
    moved = np.clip(clean + eps * np.sign(clean[nearest] - clean), 0, 1).astype(np.float32)
    return clean, moved


def test_rows_find_their_own_clean_image_where_the_nearest_clean_image_is_another_rows(one_thread):
    clean, moved = neighbours_batch()
    n = len(clean)
    # the construction: the nearest clean image (l2), the old rule, is another row's for every row
    wrong = torch.cdist(torch.from_numpy(moved).flatten(1), torch.from_numpy(clean).flatten(1)).argmin(1)
    assert (wrong.numpy() != np.arange(n)).all()
    y = np.arange(n) % 3
    assert (rows_of(torch.from_numpy(tag_rows(y, 3))) == torch.from_numpy(np.stack([y, np.arange(n)], 1))).all()
    est = PyTorchClassifier(
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 3)),
        torch.nn.CrossEntropyLoss(),
        input_shape=(1, 28, 28),
        nb_classes=3,
        clip_values=(0, 1),
        preprocessing_defences=[Identity()],
        device_type="cpu",
    )
    loss = PurifiedStateLoss(lambda z, t: 0 * z[:, 0], reference=torch.from_numpy(clean))
    view = EOTClassifier(est, ensemble_size=2, loss=loss, states=True)
    subset = np.random.default_rng(1).permutation(n)[: n // 2]  # as ART passes them: the rows still unbroken, shuffled
    got = view.compute_loss(moved[subset], tag_rows(y, 3)[subset])
    np.testing.assert_allclose(got, np.full(len(subset), 0.3 * 28), rtol=1e-5)  # each row 8.4 from its own image
    g = view.loss_gradient(moved[subset], tag_rows(y, 3)[subset])
    own = moved[subset] - clean[subset]
    np.testing.assert_allclose(
        g, own / np.linalg.norm(own.reshape(len(subset), -1), axis=1)[:, None, None, None], atol=1e-5
    )
    with pytest.raises(ValueError, match=re.escape("pass art_adp.eot.tag_rows(labels, nb_classes)")):
        view.compute_loss(moved[:2], np.eye(3)[y[:2]])


def test_apgd_passes_each_row_of_its_subset_with_its_own_clean_image(one_thread, monkeypatch):
    clean, moved = neighbours_batch(16)
    est = PyTorchClassifier(
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 3)),
        torch.nn.CrossEntropyLoss(),
        input_shape=(1, 28, 28),
        nb_classes=3,
        clip_values=(0, 1),
        preprocessing_defences=[Identity()],
        device_type="cpu",
    )
    pred = est.predict(clean).argmax(1)
    y = np.where(np.arange(16) % 2 == 0, pred, (pred + 1) % 3)  # half the rows already misclassified: ART's subset
    calls = []

    class Spy(PurifiedStateLoss):
        def __call__(self, draw, y):
            calls.append((draw[1][-1].state.detach(), self.clean_of(y[:, 1]), y[:, 1].clone()))
            return super().__call__(draw, y)

    monkeypatch.setattr(apgd_eot, "PurifiedStateLoss", Spy)
    attack = A.APGDEOTDev(est, eps=0.01, max_iter=3, eot_samples=1, losses=("ce", "margin"))
    attack.generate(clean, y)
    # the CE run attacks every row (the odd ones broken at the start too), indexed 0..15 in its batch; the margin run
    # the rows the best-iterate rule still finds unbroken, indexed 0..k-1, each with its own clean image
    first = [c for c in calls if len(c[2]) == 16]
    assert first and all(set(r.tolist()) == set(range(16)) for _, _, r in first)
    for _, own, r in first:
        assert torch.equal(own, torch.from_numpy(clean)[r])
    later = [c for c in calls if len(c[2]) < 16]
    assert later and all(set(r.tolist()) == set(range(len(r))) for _, _, r in later)
    # every row stays within eps of its own clean image: the one the loss was given
    assert all((state - own).abs().max() <= 0.01 + 1e-5 for state, own, _ in calls)


# -- a planted case only the intermediate states break -----------------------------------------------------------------


class Detour(PurifierPyTorch):
    """Two states: x + shift (moves with x, one for one), then the output round(x, 1) -- piecewise constant, so
    neither the classifier's loss nor the output's deviation has a gradient. Only the intermediate state says which
    way to go: the way of ``shift``."""

    params = ["gradient", "batch_size"]

    def __init__(self, shift: float) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.shift, self.gradient, self.batch_size = shift, "full", 256

    def _check_params(self):
        pass

    def forward(self, x, y=None):
        return self._through(x), y

    def _purify(self, x, on_state=None):
        detour = x + self.shift
        out = torch.round((detour - self.shift) * 10) / 10
        if on_state is not None:
            on_state(detour)
            on_state(out)
        return out


class Step(torch.nn.Module):
    """Class 1 once the mean pixel passes ``threshold`` (above, or below when mirrored), else class 0; flat
    everywhere (a step: zero gradient)."""

    def __init__(self, threshold: float, above: bool) -> None:
        super().__init__()
        self.threshold, self.above = threshold, above

    def forward(self, z):
        live = z.flatten(1).mean(1)
        hit = (live > self.threshold) if self.above else (live < self.threshold)
        zero = 0 * live  # connected to the graph, gradient zero
        return torch.stack([0.5 + zero, 20.0 * hit.float() + zero, zero], 1)


TWINS = {"up": (0.2, 0.35, True), "mirrored": (-0.2, 0.25, False)}  # shift, threshold, above


def twin(name):
    shift, threshold, above = TWINS[name]
    return PyTorchClassifier(
        Step(threshold, above),
        torch.nn.CrossEntropyLoss(),
        input_shape=(1, 8, 8),
        nb_classes=3,
        clip_values=(0, 1),
        preprocessing_defences=[Detour(shift)],
        device_type="cpu",
    )


ATTACKS = {
    "pgd-eot": (
        lambda e, dev: A.PGDEOT(e, eps=EPS, eps_step=0.025, max_iter=6, eot_samples=2, dev_weight=dev),
        pgd_eot,
    ),
    "apgd-eot": (lambda e, dev: A.APGDEOT(e, eps=EPS, max_iter=6, eot_samples=2, dev_weight=dev), apgd_eot),
}


@pytest.mark.parametrize("attack", ["pgd-eot", "apgd-eot"])
def test_only_the_intermediate_states_break_the_flat_classifier_both_ways_and_without_them_nothing_does(
    one_thread, monkeypatch, attack
):
    build, module = ATTACKS[attack]
    x, y = np.full((3, 1, 8, 8), 0.3, np.float32), np.zeros(3, np.int64)  # purified 0.3: class 0 in both twins
    up, mirrored = twin("up"), twin("mirrored")
    assert (up.predict(x).argmax(1) == 0).all() and (mirrored.predict(x).argmax(1) == 0).all()
    # a fixed direction breaks one twin and not the other
    assert (up.predict(x + EPS).argmax(1) == 1).all() and (mirrored.predict(x + EPS).argmax(1) == 0).all()
    assert (up.predict(x - EPS).argmax(1) == 0).all() and (mirrored.predict(x - EPS).argmax(1) == 1).all()
    for name in TWINS:
        est = twin(name)
        x_adv = build(est, 1.0).generate(x, y)
        assert np.abs(x_adv - x).max() <= EPS + 1e-6
        assert (est.predict(x_adv).argmax(1) == 1).all(), name  # DiffAttack's loss breaks both twins
        assert (est.predict(build(est, 0.0).generate(x, y)).argmax(1) == 0).all()  # the classifier's loss alone: no
    # the ablation: the deviation of the purified output alone (the loss before), at the same weight, breaks neither
    monkeypatch.setattr(module, "PurifiedStateLoss", functools.partial(PurifiedStateLoss, intermediate=False))
    for name in TWINS:
        est = twin(name)
        assert (est.predict(build(est, 1.0).generate(x, y)).argmax(1) == 0).all(), name


# -- every family, both modes; names and checks ------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["adp", "reverse-diffusion", "denoised-smoothing"])
@pytest.mark.parametrize("attack", ["pgd", "apgd"])
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_every_purifier_family_in_both_modes(one_thread, families, family, attack, gradient):
    torch.manual_seed(1)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()
    purifier = families[family]()
    est = PyTorchClassifier(
        clf,
        torch.nn.CrossEntropyLoss(),
        input_shape=(1, 8, 8),
        nb_classes=3,
        clip_values=(0, 1),
        preprocessing_defences=[purifier],
        device_type="cpu",
    )
    x = np.random.default_rng(0).random((2, 1, 8, 8)).astype(np.float32)
    cls = A.PGDEOTDev if attack == "pgd" else A.APGDEOTDev
    kw = {"eps_step": 0.05} if attack == "pgd" else {}
    x_adv = cls(est, gradient=gradient, eps=0.1, max_iter=2, eot_samples=2, memory_budget=64, **kw).generate(
        x, np.array([0, 1])
    )
    assert np.abs(x_adv - x).max() <= 0.1 + 1e-6 and np.abs(x_adv - x).max() > 0
    assert purifier.gradient == "full"  # the purifier's own mode (the default), restored


def test_eot_classifier_states_need_a_loss_and_names_and_checks():
    est = twin("up")
    with pytest.raises(ValueError, match=re.escape("states=True needs a per-example loss of (logits, purification")):
        EOTClassifier(est, states=True)
    with pytest.raises(ValueError, match=f"^{re.escape('dev_weight must be a number >= 0, got -1.')}$"):
        A.PGDEOT(est, dev_weight=-1)
    with pytest.raises(ValueError, match=re.escape("tag_rows needs N class indices in [0, 3)")):
        tag_rows(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match=re.escape("row indices must lie in [0, 2)")):
        PurifiedStateLoss(cross_entropy, reference=torch.zeros(2, 1, 2, 2)).clean_of(torch.tensor([0, 2]))
    assert (A.PGDEOTDev(est).name, A.PGDEOTDev(est, gradient="bpda").name, A.APGDEOTDev(est).name) == (
        "full-pgd-eot-dev",
        "bpda-eot-dev",
        "apgd-eot-dev",
    )
    assert A.PGDEOT(est).dev_weight == 0.0 and A.PGDEOTDev(est).dev_weight == 1.0
