"""KernelScore: the exact score of a Gaussian kernel density, checked against closed forms and finite differences."""

import math

import numpy as np
import pytest
import torch

from art_adp import ADPPurifier, KernelScore, purify


def _explicit(x, ref, s):
    """The textbook formula, all at once: Σ softmax(−‖x − xᵢ‖²/2s²)·(xᵢ − x)/s."""
    d2 = (x.flatten(1)[:, None] - ref.flatten(1)[None]).square().sum(-1)
    w = torch.softmax(-d2 / (2 * s * s), dim=1)
    return ((w @ ref.flatten(1) - x.flatten(1)) / s).view_as(x)


def test_one_reference_point_pulls_straight_to_it():
    ref = torch.tensor([[[[0.2, 0.7], [0.4, 0.9]]]])
    x = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]], [[[0.0, 1.0], [0.3, 0.1]]]])
    h = KernelScore(ref, bandwidth=0.25)(x)
    torch.testing.assert_close(h, (ref - x) / 0.25)


def test_two_points_weights_by_hand():
    ref = torch.tensor([[0.0], [1.0]])
    x = torch.tensor([[0.25]])
    s = 0.5
    # weights ∝ exp(−d²/2s²): d² = 1/16 and 9/16 → w₁/w₀ = exp(−(9/16 − 1/16)/(2·0.25)) = e^{-1}
    w1 = math.exp(-1) / (1 + math.exp(-1))
    expected = ((1 - w1) * (0.0 - 0.25) + w1 * (1.0 - 0.25)) / s
    assert KernelScore(ref, bandwidth=s)(x).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
def test_chunks_give_the_one_shot_answer(chunk_size):
    gen = torch.Generator().manual_seed(0)
    ref, x = torch.rand(7, 1, 3, 3, generator=gen), torch.rand(4, 1, 3, 3, generator=gen)
    h = KernelScore(ref, bandwidth=0.2, chunk_size=chunk_size)(x)
    torch.testing.assert_close(h, _explicit(x, ref, 0.2), atol=1e-5, rtol=1e-5)


def test_bf16_autocast_leaves_the_exact_score_in_fp32():
    """Under an attack's bf16 autocast the exact score is still computed in fp32: the same values, where bf16
    distances of 784-pixel images would scramble the kernel weights."""
    gen = torch.Generator().manual_seed(0)
    ref, x = torch.rand(300, 1, 28, 28, generator=gen), torch.rand(5, 1, 28, 28, generator=gen)
    score = KernelScore(ref, bandwidth=0.25)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = score(x)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, score(x))


def test_far_inputs_do_not_overflow():
    """Distances whose kernel values underflow to 0 in float32 (exp(−1e6)) still give the nearest point's pull."""
    ref = torch.tensor([[0.0], [1.0]])
    x = torch.tensor([[100.0]])
    h = KernelScore(ref, bandwidth=0.01, chunk_size=1)(x)
    assert torch.isfinite(h).all()
    torch.testing.assert_close(h, (ref[1:] - x) / 0.01)  # all weight on the nearer point


def test_the_gradient_matches_finite_differences():
    gen = torch.Generator().manual_seed(1)
    ref = torch.rand(5, 4, generator=gen, dtype=torch.float64)
    x = torch.rand(2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    score = KernelScore(ref, bandwidth=0.3, chunk_size=2)
    assert torch.autograd.gradcheck(score, (x,))


def test_it_is_the_optimum_of_denoising_score_matching():
    """At level s, E[−z | x̃] for x̃ = xᵢ + s·z with xᵢ uniform over the reference: the kernel score, by Monte Carlo."""
    ref = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    s, x_eval = 0.8, torch.tensor([[0.6]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(2)
    i = torch.randint(3, (400_000,), generator=gen)
    z = torch.randn(400_000, 1, generator=gen, dtype=torch.float64)
    noisy = ref[i] + s * z
    near = (noisy - x_eval).abs()[:, 0] < 0.01
    monte_carlo = -z[near].mean()
    assert KernelScore(ref, bandwidth=s)(x_eval).item() == pytest.approx(monte_carlo.item(), abs=0.03)


@pytest.mark.parametrize(
    "reference, kwargs, message",
    [
        (np.zeros((0, 1, 2, 2), np.float32), {"bandwidth": 0.1}, "reference must be a non-empty"),
        (np.zeros((3,), np.float32), {"bandwidth": 0.1}, "reference must be a non-empty"),
        (np.full((2, 4), np.nan, np.float32), {"bandwidth": 0.1}, "reference holds NaN or infinite values"),
        (np.zeros((2, 4), np.int64), {"bandwidth": 0.1}, "reference must be floating point"),
        (np.zeros((2, 4), np.float32), {"bandwidth": 0.0}, "bandwidth"),
        (np.zeros((2, 4), np.float32), {"bandwidth": -1.0}, "bandwidth"),
        (np.zeros((2, 4), np.float32), {"bandwidth": 0.1, "chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_input_is_named(reference, kwargs, message):
    with pytest.raises(ValueError, match=message):
        KernelScore(reference, **kwargs)


def test_inputs_of_another_shape_are_refused():
    with pytest.raises(ValueError, match=r"reference images have shape \(1, 2, 2\); got inputs of shape \(1, 3, 3\)"):
        KernelScore(np.zeros((2, 1, 2, 2), np.float32), bandwidth=0.1)(torch.zeros(1, 1, 3, 3))


def test_purification_on_the_oracle_moves_towards_the_reference(one_thread):
    """ADP with the oracle: a noisy copy of a reference image ends nearer to it than it started."""
    gen = torch.Generator().manual_seed(3)
    ref = (torch.rand(20, 1, 6, 6, generator=gen) > 0.5).float()
    x = ref[:4].clone()
    out = purify(KernelScore(ref, bandwidth=0.15), x, sigma=0.25, steps=50, lam=0.5, generator=gen)
    noisy_err = 0.25**2  # the initial noise's mean square, before clipping
    assert (out - x).square().mean() < noisy_err / 4


@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_arts_pgd_runs_through_the_oracle_in_both_gradient_modes(gradient, one_thread):
    from art.attacks.evasion import ProjectedGradientDescent
    from art.estimators.classification import PyTorchClassifier

    gen = torch.Generator().manual_seed(4)
    ref = torch.rand(30, 1, 4, 4, generator=gen)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    purifier = ADPPurifier(KernelScore(ref, bandwidth=0.2), gradient=gradient, steps=2, generator=gen)
    est = PyTorchClassifier(
        model, torch.nn.CrossEntropyLoss(), input_shape=(1, 4, 4), nb_classes=3, clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier],
    )  # fmt: skip
    x, y = ref[:6].numpy(), np.arange(6) % 3
    grad = est.loss_gradient(x, np.eye(3, dtype=np.float32)[y])
    assert np.isfinite(grad).all() and np.abs(grad).sum() > 0
    x_adv = ProjectedGradientDescent(est, eps=0.1, eps_step=0.05, max_iter=2, verbose=False).generate(x, y=y)
    assert np.abs(x_adv - x).max() <= 0.1 + 1e-6 and np.abs(x_adv - x).max() > 0.01
