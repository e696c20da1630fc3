"""The EOT loss of the judged ensemble (``eot_target="ensemble"``): its gradient is the autograd gradient of the loss
of the log mean softmax, whatever the blocks (checkpointed blocks replay their noise), and on a planted defence whose
already-broken draws pull the mean of per-draw losses the wrong way, PGD+EOT and APGD-EOT break every image with it and
none without it. Judging draws are not gradient draws."""

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp.attacks._core import cross_entropy, margin
from art_adp.ensemble import aggregate_draws, ensemble_gradient, generators, logits
from art_adp.eot import EOTClassifier


class Marker(PreprocessorPyTorch):
    """A random defence: marks each draw as kind 1 (probability 0.3, its own generator) or kind 0 in pixel (0, 0)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, x, y=None):
        kind = (torch.rand(len(x), generator=self.generator) < 0.3).to(x.dtype)
        x = x.clone()
        x[:, 0, 0, 0] = kind
        return x, y


class TwoKinds(torch.nn.Module):
    """Kind-1 draws are confidently wrong already (logit 30 − 600u) and the mean offset u of the other pixels makes
    them *less* wrong; kind-0 draws (seven in ten) are confidently right (−10 + 500u) until u passes 0.02: the
    ensemble is right at the start (mean softmax ≈ 0.7 on class 0) and broken once kind 0 flips (u > 0.02; kind 1 stays wrong up to u = 0.05). The mean of per-draw losses is dominated by the
    kind-1 draws' gradient (CE: saturated kind-0 draws contribute ~e⁻¹⁰; margin: slope 600 against 500) and lowers u;
    the ensemble's loss weighs the kind-0 draws, which decide it."""

    def forward(self, x):
        kind = x[:, 0, 0, 0]
        u = x.flatten(1)[:, 1:].mean(1) - 0.3
        z1 = kind * (30 - 600 * u) + (1 - kind) * (-10 + 500 * u)
        return torch.stack([torch.zeros_like(u), z1], 1)


def defended(seed=0):
    return PyTorchClassifier(TwoKinds(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=2,
                             clip_values=(0, 1), preprocessing_defences=[Marker(seed)], device_type="cpu")  # fmt: skip


def judged(est, x):
    """The 50-draw ensemble's accuracy on label 0."""
    return float((EOTClassifier(est, ensemble_size=50).predict(x).argmax(1) == 0).mean())


X, Y = np.full((6, 1, 8, 8), 0.3, np.float32), np.zeros(6, np.int64)


@pytest.mark.parametrize("loss", ["ce", "margin"])
def test_pgd_eot_breaks_the_ensemble_only_through_its_loss(one_thread, loss):
    kw = dict(eps=0.05, eps_step=0.01, max_iter=10, eot_samples=8, loss=loss, random_start=False)  # from X itself
    est = defended()
    assert judged(est, X) == 1.0
    draws = A.PGDEOT(est, eot_target="draws", **{**kw, "loss": "ce"}).generate(X, Y)  # the ablation: the mean of
    assert judged(est, draws) == 1.0  # per-draw cross-entropies, as PGD+EOT followed before
    assert (draws - X).reshape(6, -1)[:, 1:].mean(1).max() <= 0.005  # pushed the wrong way (or kept at the start)
    ensemble = A.PGDEOT(est, eot_target="ensemble", **kw).generate(X, Y)
    assert judged(est, ensemble) == 0.0


def test_apgd_eot_breaks_the_ensemble_only_through_its_loss(one_thread):
    kw = dict(eps=0.05, max_iter=10, eot_samples=8, losses=("ce",))
    est = defended()
    assert judged(est, A.APGDEOT(est, eot_target="draws", **kw).generate(X, Y)) == 1.0
    assert judged(est, A.APGDEOT(est, eot_target="ensemble", **kw).generate(X, Y)) == 0.0


class Jitter(PreprocessorPyTorch):
    """N(0, s²) from its own generator; every noise tensor drawn is kept, with whether autograd was on."""

    def __init__(self, s=0.05):
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.s, self.generator, self.drawn = s, torch.Generator().manual_seed(1), []

    def forward(self, x, y=None):
        noise = torch.randn(x.shape, generator=self.generator)
        self.drawn.append((torch.is_grad_enabled(), noise))
        return x + self.s * noise, y


class Smooth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 3)
        torch.nn.init.normal_(self.fc.weight, generator=torch.Generator().manual_seed(0))
        torch.nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        return self.fc(torch.tanh(x.flatten(1)))


@pytest.mark.fp32_identity
def test_ensemble_gradient_is_the_gradient_of_the_ensembles_loss_whatever_the_blocks(one_thread):
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 2])
    for loss in (cross_entropy, margin):
        results = []
        for batch_size, budget in ((None, 512.0), (3, 1e-4)):  # one block; blocks of one image, checkpointed
            jitter = Jitter()
            est = PyTorchClassifier(Smooth(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                                    clip_values=(0, 1), preprocessing_defences=[jitter], device_type="cpu")  # fmt: skip
            with pytest.warns(UserWarning) if budget < 1 else _nothing():
                g, lk = ensemble_gradient(lambda z: logits(est, z), x, y, loss, 5, batch_size=batch_size,
                                          memory_budget=budget, generators=generators(est))  # fmt: skip
            results.append((g, lk))
        # by hand: the same 5 draws (the same generator seed), the loss of the log mean softmax, one autograd call
        jitter = Jitter()
        est = PyTorchClassifier(Smooth(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                                clip_values=(0, 1), preprocessing_defences=[jitter], device_type="cpu")  # fmt: skip
        xr = x.clone().requires_grad_(True)
        z = logits(est, xr.repeat(5, 1, 1, 1)).view(5, 3, 3)
        expected = loss(torch.logsumexp(z.log_softmax(-1), 0) - np.log(5), y)
        (g_ref,) = torch.autograd.grad(expected.sum(), xr)
        for g, lk in results:
            torch.testing.assert_close(lk, expected.detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
        assert torch.equal(aggregate_draws(z, "softmax"), torch.logsumexp(z.log_softmax(-1), 0) - np.log(5))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_judging_draws_are_not_gradient_draws(one_thread):
    jitter = Jitter()
    est = PyTorchClassifier(Smooth(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                            clip_values=(0, 1), preprocessing_defences=[jitter], device_type="cpu")  # fmt: skip
    x = np.random.default_rng(0).random((4, 1, 8, 8)).astype(np.float32)
    A.PGDEOT(est, eps=0.05, eps_step=0.01, max_iter=4, eot_samples=3, check_every=1).generate(x, np.arange(4) % 3)
    gradient = [n for grad, n in jitter.drawn if grad]
    judging = [n for grad, n in jitter.drawn if not grad]
    assert gradient and judging
    rows = lambda drawn: {tuple(r.flatten()[:8].tolist()) for n in drawn for r in n}  # noqa: E731
    assert not rows(gradient) & rows(judging)  # no judgement reused a gradient's noise
    assert len(rows(judging)) < sum(len(n) for n in judging)  # every judgement replays the same draws


def test_eot_target_refuses_what_it_cannot_differentiate():
    est = defended()
    with pytest.raises(ValueError, match="eot_target='ensemble' differentiates the ensemble's loss"):
        A.PGDEOT(est, eot_target="ensemble", aggregate="sign")
    with pytest.raises(ValueError, match="eot_target must be one of"):
        A.PGDEOT(est, eot_target="median")
    with pytest.raises(ValueError, match="needs eot_target='draws'"):
        A.APGDEOT(est, eot_target="ensemble", dev_weight=1.0)
