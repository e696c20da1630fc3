"""Part of ``reproduce``'s curve: noise alone, one-step denoise and the ADP sweep, against exact answers."""

import numpy as np
import pytest
import torch

from art_adp.apps.diagnostics import (
    adp_sweep,
    ensemble_correct,
    noisy,
    one_step_denoise,
    render_diagnostics,
    snapshot_diagnostics,
)

SIGMA = 0.25


class LinearScore(torch.nn.Module):
    """The exact noise-level-free score of a point mass at ``c`` seen at noise σ: h(x) = −(x − c)/σ."""

    def __init__(self, c: torch.Tensor, sigma: float) -> None:
        super().__init__()
        self.register_buffer("c", c)
        self.sigma = sigma

    def forward(self, x):
        return -(x - self.c) / self.sigma


class Brightness(torch.nn.Module):
    """Class 1 if the mean pixel is above 0.5, else class 0 (logits ±10·(mean − 0.5))."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        m = x.flatten(1).mean(1, keepdim=True) - 0.5
        return torch.cat([-10 * m, 10 * m], 1) * self.w


def test_one_step_denoise_with_the_exact_score_returns_the_point_mass():
    c = torch.full((1, 4, 4), 0.6)
    out = one_step_denoise(LinearScore(c, SIGMA), SIGMA)(torch.rand(3, 1, 4, 4), torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, c.expand(3, 1, 4, 4))


def test_noise_alone_is_clip_of_x_plus_sigma_eps_from_the_generator():
    x = torch.rand(2, 1, 3, 3)
    out = noisy(SIGMA)(x, torch.Generator().manual_seed(5))
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(out, (x + SIGMA * eps).clamp(0, 1))


def test_ensemble_correct_is_the_argmax_of_the_mean_softmax():
    x = np.stack([np.full((1, 2, 2), v, np.float32) for v in (0.2, 0.9, 0.7)])
    ok = ensemble_correct(Brightness(), lambda xb, g: xb, x, np.array([0, 1, 0]), ensemble_size=3, seed=0, batch_size=2)
    np.testing.assert_array_equal(ok, [True, True, False])


def test_snapshot_diagnostics_separate_the_noise_from_the_score_model():
    """A bright class-1 image: the noise alone (σ huge) loses it half the time, the exact score gives it back."""
    c = torch.full((1, 4, 4), 0.8)
    x = c.numpy()[None].repeat(40, 0)
    sigma = 3.0
    out = snapshot_diagnostics(Brightness(), LinearScore(c, sigma), x, x, np.ones(40), sigma=sigma, ensemble_size=1, seed=0)
    assert out["denoise1"]["clean"] == {"correct": 40, "n": 40, "accuracy": 1.0}
    assert 0.2 < out["noise"]["clean"]["accuracy"] < 0.9  # clip(0.8 + 3ε): a coin toss around 0.5, biased up


def test_adp_sweep_covers_the_grid_and_states_the_fraction_closed():
    c = torch.full((1, 4, 4), 0.8)
    x = c.numpy()[None].repeat(4, 0)
    recs = adp_sweep(
        Brightness(),
        LinearScore(c, SIGMA),
        x,
        x,
        np.ones(4),
        sigma=SIGMA,
        ensemble_size=1,
        seed=0,
        steps=(1, 3),
        lams=(0.05, 0.1),
    )
    assert [(r["steps"], r["lam"]) for r in recs] == [(1, 0.05), (1, 0.1), (3, 0.05), (3, 0.1)]
    assert [r["closed"] for r in recs] == pytest.approx([0.05, 0.1, 1 - 0.95**3, 1 - 0.9**3], abs=1e-3)
    assert all(r["clean"]["n"] == 4 for r in recs)


def test_render_shows_one_line_per_snapshot_and_the_sweep():
    acc = {"correct": 1, "n": 2, "accuracy": 0.5}
    per = [{"step": 1000, "n": 2, "noise": {"clean": acc, "clf_pgd": acc}, "denoise1": {"clean": acc, "clf_pgd": acc}}]
    sweep = [{"steps": 10, "lam": 0.05, "closed": 0.401, "clean": acc, "clf_pgd": acc, "step": 1000}]
    md = render_diagnostics(per, sweep, 0.25)
    assert "| 1,000 | 2 | 50.0 / 50.0 | 50.0 / 50.0 | – / – |" in md
    assert "| 10 | 0.05 | 0.40 | 50.0 | 50.0 |" in md
