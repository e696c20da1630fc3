"""The compression rate (art_adp.compression) against closed forms, and the fixed-randomness attack
(art_adp.attacks.FixedNoisePGD) against the exact gradient through one deterministic purification."""

import re

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, purify
from art_adp.attacks import PGDEOT, FixedNoisePGD
from art_adp.attacks._core import cross_entropy
from art_adp.compression import compression_rate
from art_adp.preprocessor import DEFAULT_GRADIENT
from evalsuite_models import tiny_models

D = 64  # 1×8×8


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    mlp, score, x, y = tiny_models()
    return mlp, score, x[:12], y[:12]


def linear(a: torch.Tensor, b: float = 0.0, noise_seed: int | None = None):
    """P(x) = A x + b (+ a fixed noise vector drawn from a fresh generator on every call)."""

    def p(z):
        out = (z.flatten(1) @ a.T).view_as(z) + b
        if noise_seed is not None:
            out = out + torch.randn(z.shape, generator=torch.Generator().manual_seed(noise_seed))
        return out

    return p


def test_scaling_by_c_gives_rate_c_for_every_direction():
    x = torch.rand(5, 1, 8, 8)
    for norm in (2, "inf"):
        r = compression_rate(linear(0.3 * torch.eye(D), b=0.7), x, radius=0.1, nb_directions=4, norm=norm)
        np.testing.assert_allclose(r.ratios, 0.3, rtol=1e-5)
        assert r.summary["median"] == pytest.approx(0.3, rel=1e-5)
        assert r.values.shape == (5,) and r.ratios.shape == (5, 4)
        assert r.summary["nb_purifications"] == 5 * 6 and r.summary["nb_examples"] == 5


def test_identity_and_fixed_noise_give_one():
    x = torch.rand(4, 1, 8, 8)
    # a fixed noise vector added on top of an orthogonal map cancels in P(x + δ) − P(x): rate exactly 1
    q, _ = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(3)))
    for p in (lambda z: z, linear(q, noise_seed=5)):
        r = compression_rate(p, x, radius=0.05, nb_directions=3)
        np.testing.assert_allclose(r.ratios, 1.0, rtol=1e-4)


def test_coordinate_projection():
    # projecting onto k of d coordinates: with l_inf vertices every ratio is exactly sqrt(k/d); with uniform l2
    # directions E[ratio^2] = k/d (here within 5 % over 64 directions x 6 examples)
    k = 16
    a = torch.diag((torch.arange(D) < k).float())
    x = torch.rand(6, 1, 8, 8)
    r = compression_rate(linear(a), x, radius=0.2, nb_directions=8, norm=np.inf)
    np.testing.assert_allclose(r.ratios, (k / D) ** 0.5, rtol=1e-5)
    r2 = compression_rate(linear(a), x, radius=0.2, nb_directions=64, norm=2, seed=1)
    assert (r2.ratios**2).mean() == pytest.approx(k / D, rel=0.05)


def test_clipping_uses_the_clipped_perturbation():
    # x at 0: about half of each l_inf vertex is clipped away; P = 2x still has rate exactly 2, because the
    # denominator is the clipped perturbation's norm
    x = torch.zeros(3, 1, 8, 8)
    r = compression_rate(lambda z: 2 * z, x, radius=0.1, norm="inf", clip_values=(0.0, 1.0))
    np.testing.assert_allclose(r.ratios, 2.0, rtol=1e-5)


def test_fixed_seed_adp_purifier_is_reproducible_and_restores_its_generator(digits):
    _, score, x, _ = digits
    gen = torch.Generator().manual_seed(123)
    x = x[:6]
    p = ADPPurifier(score, sigma=0.25, steps=2, generator=gen, device_type="cpu")
    a = compression_rate(p, x, radius=0.2, nb_directions=2, seed=7)
    b = compression_rate(p, x, radius=0.2, nb_directions=2, seed=7)
    np.testing.assert_array_equal(a.ratios, b.ratios)
    assert p.generator is gen
    c = compression_rate(p, x, radius=0.2, nb_directions=2, seed=8)
    assert not np.array_equal(a.ratios, c.ratios)
    # sigma = 0, T = 0: the purifier is the identity (clipping into [0, 1] included): rate 1
    ident = ADPPurifier(score, sigma=0.0, steps=0, device_type="cpu")
    np.testing.assert_allclose(compression_rate(ident, x, radius=0.2, nb_directions=2).ratios, 1.0, rtol=1e-5)


def test_bad_input_is_refused_with_its_message():
    x = torch.rand(2, 1, 8, 8)
    ident = lambda z: z  # noqa: E731
    cases = [
        (dict(radius=0.0), "radius must be a number > 0, got 0.0."),
        (dict(radius=0.1, nb_directions=0), "nb_directions must be an integer >= 1, got 0."),
        (dict(radius=0.1, norm=1), "norm must be one of 2, inf, got 1."),
        (dict(radius=0.1, seed=-1), "seed must be an integer >= 0, got -1."),
        (dict(radius=0.1, clip_values=(1, 0)), "clip_values must be (min, max) with min < max, or None; got (1, 0)."),
        (dict(radius=0.1, generator=3), "generator must be a torch.Generator or None, got int."),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            compression_rate(ident, x, **kwargs)
    with pytest.raises(ValueError, match="purifier must be an ADPPurifier or a callable"):
        compression_rate(3, x, radius=0.1)
    with pytest.raises(ValueError, match=re.escape("x must be a non-empty floating-point batch N×C×H×W")):
        compression_rate(ident, torch.zeros(2, 3, dtype=torch.int64), radius=0.1)
    with pytest.raises(ValueError, match="The purifier is not deterministic"):
        compression_rate(lambda z: z + torch.randn(z.shape), x, radius=0.1)
    with pytest.raises(ValueError, match="A perturbation was clipped away entirely"):
        # one-pixel inputs at the top of the range: a +r vertex is clipped back onto x
        compression_rate(ident, torch.ones(8, 1), radius=0.1, norm="inf", clip_values=(0.0, 1.0))
    with pytest.raises(ValueError, match=re.escape("x must lie within clip_values (0.0, 1.0); its range is [0, 2].")):
        compression_rate(ident, torch.tensor([[0.0], [2.0]]), radius=0.1, clip_values=(0.0, 1.0))


def _estimator(mlp, purifier):
    return PyTorchClassifier(mlp, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10, clip_values=(0, 1),
                             preprocessing_defences=[purifier], device_type="cpu")


def test_fixed_noise_pgd_follows_the_exact_gradient_of_one_draw(digits):
    mlp, score, x, y = digits
    gen = torch.Generator().manual_seed(99)
    p = ADPPurifier(score, sigma=0.25, steps=2, generator=gen, device_type="cpu")
    # the last iterate (check_every=0): the step itself, not the best of the start and the step
    attack = FixedNoisePGD(_estimator(mlp, p), seed=4, eps=0.2, eps_step=0.05, max_iter=1, batch_size=12, check_every=0,
                           random_start=False)  # fmt: skip
    # one step by hand from the image: sign of the cross-entropy gradient through purify with the generator seeded 4
    xt = torch.as_tensor(x).requires_grad_(True)
    purified = purify(score, xt, sigma=0.25, steps=2, generator=torch.Generator().manual_seed(4))
    (g,) = torch.autograd.grad(cross_entropy(mlp(purified), torch.as_tensor(y)).sum(), xt)
    expected = (xt + 0.05 * g.sign()).clamp(0, 1).detach().numpy()
    np.testing.assert_allclose(attack.generate(x, y=y), expected, atol=1e-6)
    # the judge sees the same draw: its logits are the classifier's on purify(x, seed 4)
    with torch.no_grad():
        np.testing.assert_allclose(attack.predict(x), mlp(purified).numpy(), atol=1e-5)
    np.testing.assert_array_equal(attack.predict(x), attack.predict(x))
    assert p.generator is gen and p.gradient == DEFAULT_GRADIENT
    x_adv = FixedNoisePGD(_estimator(mlp, p), seed=4, eps=0.2, eps_step=0.05, max_iter=3).generate(x, y=y)
    assert np.abs(x_adv - x).max() <= 0.2 + 1e-6 and x_adv.min() >= 0 and x_adv.max() <= 1


def test_fixed_noise_pgd_at_sigma_zero_is_full_gradient_pgd(digits):
    mlp, score, x, y = digits
    p = ADPPurifier(score, sigma=0.0, steps=2, device_type="cpu")
    kw = dict(eps=0.2, eps_step=0.05, max_iter=3, random_start=False)  # both from the image
    a = FixedNoisePGD(_estimator(mlp, p), seed=0, **kw).generate(x, y=y)
    b = PGDEOT(_estimator(mlp, p), gradient="full", eot_samples=1, **kw).generate(x, y=y)
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_fixed_noise_pgd_refuses_bad_input(digits):
    mlp, score, _, _ = digits
    with pytest.raises(ValueError, match=re.escape("seed must be an integer >= 0, got -2.")):
        FixedNoisePGD(_estimator(mlp, ADPPurifier(score, device_type="cpu")), seed=-2)
    bare = PyTorchClassifier(mlp, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10, clip_values=(0, 1))
    with pytest.raises(ValueError, match=re.escape("FixedNoisePGD needs an estimator with an ADPPurifier")):
        FixedNoisePGD(bare)
