"""Noise levels: the geometric training schedule and the two data-driven rules of thumb.

- :func:`geometric_sigmas` -- the schedule σ₁ > … > σ_L of NCSN/NCSNv2 training.
- :func:`recommend_sigmas` -- Song & Ermon 2020 (https://arxiv.org/abs/2006.09011), Technique 1 (σ₁ ≈ the
  largest pairwise Euclidean distance in the data) and Technique 2 (the common ratio γ from the
  Gaussian-overlap condition).
- :func:`median_heuristic_sigma` -- the purification noise level of the ADP paper
  (https://arxiv.org/abs/2106.06041, Section 3.2): median pairwise Euclidean distance / √D, which gives
  σ = 0.25 on CIFAR-10.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.stats import norm

from .._checks import probability

__all__ = ["geometric_sigmas", "recommend_sigmas", "median_heuristic_sigma", "pairwise_distances"]


def geometric_sigmas(sigma_begin: float, sigma_end: float, num: int) -> torch.Tensor:
    """
    Geometric noise schedule σ₁ = ``sigma_begin`` > … > σ_L = ``sigma_end``.

    :param sigma_begin: The largest noise level σ₁ (> ``sigma_end``).
    :param sigma_end: The smallest noise level σ_L (> 0).
    :param num: Number of levels L (≥ 2).
    :return: Float32 tensor of shape ``(num,)``, decreasing.
    """
    if not 0 < sigma_end < sigma_begin:
        raise ValueError(f"Need 0 < sigma_end < sigma_begin, got sigma_begin={sigma_begin}, sigma_end={sigma_end}.")
    if int(num) != num or num < 2:
        raise ValueError(f"num must be an integer >= 2, got {num}.")
    return torch.from_numpy(np.geomspace(sigma_begin, sigma_end, int(num))).float()


def _flat(x) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    if x.ndim < 2 or x.shape[0] < 2:
        raise ValueError(f"x must hold at least 2 samples of shape N×..., got shape {tuple(x.shape)}.")
    x = x.reshape(x.shape[0], -1).double()
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or Inf values.")
    return x


def _subsample(x: torch.Tensor, max_samples: int | None, seed: int) -> torch.Tensor:
    if max_samples is not None and x.shape[0] > max_samples:
        idx = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:max_samples]
        x = x[idx]
    return x


def pairwise_distances(x, *, chunk: int = 1024) -> torch.Tensor:
    """
    All Euclidean distances ‖xᵢ − xⱼ‖₂, i < j, computed in chunks.

    :param x: Samples of shape ``N×...`` (array or tensor).
    :return: Float64 tensor of the N(N−1)/2 distances.
    """
    x = _flat(x)
    out = []
    for start in range(0, x.shape[0], chunk):
        block = torch.cdist(x[start : start + chunk], x)
        rows = torch.arange(start, start + block.shape[0]).unsqueeze(1)
        out.append(block[rows < torch.arange(x.shape[0]).unsqueeze(0)])
    return torch.cat(out)


def median_heuristic_sigma(x, *, max_samples: int | None = 2000, seed: int = 0) -> float:
    """
    Median pairwise Euclidean distance divided by √D -- the ADP paper's choice of the injected noise σ.

    :param x: Data of shape ``N×C×H×W`` (or any ``N×...``), values in the range the purifier sees.
    :param max_samples: Use a random subset of this many samples (``None``: all; the cost is O(N²)).
    :param seed: Seed of the subset.
    :return: σ as a float.
    """
    x = _subsample(_flat(x), max_samples, seed)
    return float(pairwise_distances(x).median() / math.sqrt(x.shape[1]))


def _overlap(gamma: float, dim: int) -> float:
    """Song & Ermon 2020, Technique 2: Φ(√(2D)(γ−1) + 3γ) − Φ(√(2D)(γ−1) − 3γ)."""
    a = math.sqrt(2 * dim) * (gamma - 1)
    return float(norm.cdf(a + 3 * gamma) - norm.cdf(a - 3 * gamma))


def recommend_sigmas(
    x, *, sigma_end: float = 0.01, overlap: float = 0.5, max_samples: int | None = 10000, seed: int = 0
) -> torch.Tensor:
    """
    Training noise levels chosen by Song & Ermon 2020's Techniques 1 and 2.

    σ₁ is the largest pairwise Euclidean distance of the data (Technique 1); the common ratio γ > 1 solves
    Φ(√(2D)(γ−1) + 3γ) − Φ(√(2D)(γ−1) − 3γ) = ``overlap`` (Technique 2, ≈ 0.5); L is the number of levels
    needed to go from σ₁ down to ``sigma_end`` with that ratio.

    :param x: Training data of shape ``N×...``.
    :param sigma_end: The smallest level σ_L.
    :param overlap: The Gaussian-overlap target of Technique 2, in (0, 1).
    :param max_samples: Use a random subset of this many samples for the maximum distance (``None``: all).
    :param seed: Seed of the subset.
    :return: Float32 tensor of decreasing levels, from σ₁ to ``sigma_end``.
    """
    probability("overlap", overlap)
    flat = _subsample(_flat(x), max_samples, seed)
    sigma_begin = float(pairwise_distances(flat).max())
    if not 0 < sigma_end < sigma_begin:
        raise ValueError(
            f"sigma_end={sigma_end} must be positive and below the largest pairwise distance {sigma_begin:.4g}."
        )
    dim = flat.shape[1]
    # The overlap falls from 1 towards 0 as γ grows, so it has one root above 1 for any target in (0, 1).
    hi = 2.0
    while _overlap(hi, dim) > overlap:
        hi *= 2
    gamma = brentq(lambda g: _overlap(g, dim) - overlap, 1.0 + 1e-12, hi)
    num = max(2, math.ceil(math.log(sigma_begin / sigma_end) / math.log(gamma)) + 1)
    return geometric_sigmas(sigma_begin, sigma_end, num)
