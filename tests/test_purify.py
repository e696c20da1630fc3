"""purify: Algorithm 1 against hand computations with linear scores, and its invariances."""

import math

import pytest
import torch

from art_adp import purify

MU = 0.5


def linear_score(s):
    """h(x) = −(x − μ)/s: the score of N(μ, s²I) times s, for which the adaptive step is exactly λs."""
    return lambda x: -(x - MU) / s


def test_adaptive_step_is_lambda_s_and_residual_shrinks_by_one_minus_lambda():
    s, lam, steps = 0.2, 0.05, 6
    x = torch.full((3, 1, 4, 4), 0.9)
    x[1] = 0.2
    out, info = purify(linear_score(s), x, sigma=0.0, steps=steps, lam=lam, return_info=True)
    assert torch.allclose(info["step_sizes"], torch.full((3, steps), lam * s), rtol=1e-3)
    assert info["steps"].tolist() == [steps] * 3
    expected = MU + (x - MU) * (1 - lam) ** steps
    assert torch.allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("s", [0.05, 0.5, 1.5])
def test_adaptive_step_for_other_widths(s):
    _, info = purify(linear_score(s), torch.full((1, 1, 2, 2), 0.8), sigma=0, steps=1, return_info=True)
    assert info["step_sizes"].item() == pytest.approx(min(0.05 * s, 0.1), rel=1e-3)


def test_step_clamp_bounds_the_adaptive_step():
    # λs = 0.05·4 = 0.2 > 0.1: clamped to the upper bound.
    _, info = purify(linear_score(4.0), torch.full((1, 1, 2, 2), 0.8), sigma=0, steps=2, return_info=True)
    assert torch.allclose(info["step_sizes"], torch.full((1, 2), 0.1))
    _, info = purify(
        linear_score(4.0), torch.full((1, 1, 2, 2), 0.8), sigma=0, steps=2, step_clamp=(0, 0.03), return_info=True
    )
    assert torch.allclose(info["step_sizes"], torch.full((1, 2), 0.03))


def test_stopping_is_per_sample_and_final():
    # Sample 0 sees λs = 0.05·0.01 = 5e-4 < τ = 1e-3 and must stop at once, keeping x₀; sample 1 (λs = 0.01) runs on.
    s = torch.tensor([0.01, 0.2]).view(2, 1, 1, 1)
    x = torch.full((2, 1, 2, 2), 0.9)
    out, info = purify(lambda z: -(z - MU) / s, x, sigma=0, steps=4, return_info=True)
    assert info["steps"].tolist() == [0, 4]
    assert torch.equal(out[0], x[0])
    assert info["step_sizes"][0].abs().sum() == 0
    assert torch.allclose(out[1], MU + (x[1] - MU) * 0.95**4, atol=1e-5)


def test_stopped_sample_does_not_restart():
    # A score whose curvature grows after the first step: steps 1 then stop for good even if later α ≥ τ again.
    calls = {"n": 0}

    def score(z):
        calls["n"] += 1
        s = 0.01 if calls["n"] in (3, 4) else 0.2  # evaluations 3–4 form step 2
        return -(z - MU) / s

    _, info = purify(score, torch.full((1, 1, 2, 2), 0.9), sigma=0, steps=4, return_info=True)
    assert info["steps"].item() == 1
    assert info["step_sizes"][0, 2:].abs().sum() == 0


def test_every_iterate_is_clipped():
    # A score pushing hard outwards: the output stays in clip_values.
    out = purify(lambda z: torch.ones_like(z) * 50, torch.full((2, 1, 3, 3), 0.95), sigma=0, steps=3, step_size=0.1)
    assert out.max().item() == 1.0
    out = purify(lambda z: -torch.ones_like(z) * 50, torch.full((2, 1, 3, 3), 0.6), sigma=0, steps=1,
                 step_size=0.1, clip_values=(0.2, 0.8))
    assert out.min().item() == pytest.approx(0.2)


@pytest.mark.parametrize("schedule", [0.02, [0.05, 0.01, 0.0005]])
def test_manual_schedules_are_followed_exactly(schedule):
    alphas = [schedule] * 3 if isinstance(schedule, float) else schedule
    x = torch.full((2, 1, 2, 2), 0.9)
    out, info = purify(linear_score(0.2), x, sigma=0, steps=3, step_size=schedule, return_info=True)
    expected = x.clone()
    for a in alphas:
        expected = expected + a * (-(expected - MU) / 0.2)
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(info["step_sizes"], torch.tensor([alphas, alphas]))  # τ does not stop a manual schedule
    assert info["steps"].tolist() == [3, 3]


def test_identity_without_noise_or_steps():
    x = torch.rand(4, 3, 5, 5)
    assert torch.equal(purify(linear_score(0.2), x, sigma=0.0, steps=0), x)


def test_noise_injection_is_clipped_gaussian_from_the_generator():
    x = torch.full((2000, 1, 4, 4), 0.5)
    out = purify(linear_score(0.2), x, sigma=0.1, steps=0, generator=torch.Generator().manual_seed(3))
    expected = (x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))).clamp(0, 1)
    assert torch.equal(out, expected)
    assert (out - 0.5).std().item() == pytest.approx(0.1, rel=0.02)


def test_same_generator_seed_same_result_different_seed_different():
    x = torch.rand(3, 1, 4, 4)
    a, b, c = (purify(linear_score(0.3), x, generator=torch.Generator().manual_seed(s)) for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sample_alone_equals_sample_in_batch():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv2d(4, 1, 3, padding=1))
    x = torch.rand(5, 1, 6, 6)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    x0 = (x + 0.25 * noise).clamp(0, 1)  # inject the noise outside, so both runs see the same x₀
    with torch.no_grad():
        batch, info = purify(net, x0, sigma=0, return_info=True)
        alone = torch.cat([purify(net, x0[i : i + 1], sigma=0) for i in range(5)])
    assert torch.allclose(batch, alone, atol=1e-6)
    assert info["step_sizes"].shape == (5, 10)


def test_gradient_flows_through_all_steps():
    x = torch.full((1, 1, 2, 2), 0.9, requires_grad=True)
    s, lam, steps = 0.2, 0.05, 5
    out = purify(linear_score(s), x, sigma=0, steps=steps)
    out.sum().backward()
    # x_T = μ + (x − μ)(1 − λ)^T with α = λs independent of x for a linear score.
    assert torch.allclose(x.grad, torch.full_like(x, (1 - lam) ** steps), rtol=1e-3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"sigma": -0.1}, "sigma must be a number >= 0, got -0.1."),
        ({"steps": 2.5}, "steps must be an integer >= 0, got 2.5."),
        ({"lam": 1.0}, "lam must be a number in (0, 1), got 1.0."),
        ({"delta": 0}, "delta must be a number > 0, got 0."),
        ({"step_clamp": (0.1, 0.01)}, "step_clamp must be (min, max) with 0 <= min <= max, got (0.1, 0.01)."),
        ({"tau": -1}, "tau must be a number >= 0, got -1."),
        ({"clip_values": (1, 0)}, "clip_values must be (min, max) with min < max, got (1, 0)."),
        ({"step_size": "fast"}, "step_size must be 'adaptive', 'adaptive-jvp', a float or a sequence of floats, got 'fast'."),
        ({"step_size": [0.1, 0.1]}, "A step_size schedule needs at least steps=10 values, got 2."),
        ({"step_size": -0.1}, "step_size values must be >= 0, got -0.1."),
    ],
)
def test_bad_parameters_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match="^" + __import__("re").escape(message) + "$"):
        purify(linear_score(0.2), torch.rand(1, 1, 2, 2), **kwargs)


def test_integer_input_is_refused():
    with pytest.raises(ValueError, match=r"x must be a floating-point N×C×H×W tensor, got torch.uint8"):
        purify(linear_score(0.2), torch.zeros(1, 1, 2, 2, dtype=torch.uint8))


def test_finite_difference_step_matches_paper_formula_on_a_nonlinear_score():
    # h(x) = −tanh(x − μ)·k: compare the α purify used with eq. (11) evaluated by hand.
    k, lam, delta = 3.0, 0.05, 1e-3
    h = lambda z: -torch.tanh(z - MU) * k  # noqa: E731
    x = torch.tensor([0.1, 0.7, 0.95, 0.3]).view(1, 1, 2, 2)
    _, info = purify(h, x, sigma=0, steps=1, lam=lam, delta=delta, return_info=True)
    hx = h(x.double())
    ratio = (hx * h(x.double() + delta * hx)).sum() / hx.pow(2).sum()
    assert info["step_sizes"].item() == pytest.approx(float(lam * delta / (1 - ratio)), rel=1e-3)
    assert not math.isnan(info["step_sizes"].item())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_inputs_are_refused(bad):
    x = torch.rand(2, 1, 4, 4)
    x[1, 0, 2, 2] = bad
    with pytest.raises(ValueError, match="^x contains NaN or Inf values; purification needs finite images.$"):
        purify(linear_score(0.2), x)


def test_0_255_images_are_refused_with_the_fix():
    x = torch.rand(2, 1, 4, 4) * 255
    with pytest.raises(ValueError, match=r"outside clip_values \(0.0, 1.0\) by more than 0.1; .*divide 0-255 images by 255"):
        purify(linear_score(0.2), x)


def test_values_within_the_tolerance_are_clipped_like_spsa_probes():
    x = torch.full((2, 1, 4, 4), 0.5)
    x[0] = 1.01  # SPSA's x + δ with δ = 0.01
    x[1] = -0.05
    out = purify(linear_score(0.2), x, sigma=0.0, steps=0)
    assert out[0].eq(1.0).all() and out[1].eq(0.0).all()
    with pytest.raises(ValueError, match=r"x has values in \[0.5, 1.2\]"):
        purify(linear_score(0.2), torch.cat([x[:1] * 0 + 0.5, x[:1] * 0 + 1.2]))


def test_an_empty_batch_gives_an_empty_result():
    out, info = purify(linear_score(0.2), torch.zeros(0, 1, 4, 4), return_info=True)
    assert out.shape == (0, 1, 4, 4) and info["steps"].shape == (0,) and info["step_sizes"].shape == (0, 10)


def test_clip_noise_off_keeps_the_noisy_input_as_drawn_and_its_gradient():
    """clip_noise=False: x₀ = x + σε as the generator draws it (no clip), what a model trained on unclipped noise
    saw; the gradient of x₀ to x is the identity, where the clip zeroes it at clipped pixels."""
    x = torch.full((500, 1, 4, 4), 0.9, requires_grad=True)
    draw = 0.3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(4))
    out = purify(linear_score(0.2), x, sigma=0.3, steps=0, clip_noise=False, generator=torch.Generator().manual_seed(4))
    assert torch.equal(out, x + draw) and out.max() > 1.5
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    x.grad = None
    clipped = purify(linear_score(0.2), x, sigma=0.3, steps=0, generator=torch.Generator().manual_seed(4))
    clipped.sum().backward()
    assert torch.equal(clipped, (x + draw).clamp(0, 1))
    inside = ((x + draw) > 0) & ((x + draw) < 1)
    assert torch.equal(x.grad, inside.float().detach())  # the paper's clip: no gradient where clipped
    with pytest.raises(ValueError, match="clip_noise must be True or False, got 'no'."):
        purify(linear_score(0.2), x, clip_noise="no")
