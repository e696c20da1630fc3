"""
The compression rate of a purifier within one randomness configuration: a gradient-free robustness indicator.

| Paper link: Liu & Wei, "How Do Diffusion Models Improve Adversarial Robustness?", 2025,
  https://arxiv.org/abs/2505.22839

Liu & Wei observe that, with its internal randomness fixed, a diffusion purifier is a deterministic map P that
compresses the input space around each input, and that the robustness which is left under fixed randomness tracks
how strongly it does so. Their text beyond the abstract was not available where this module was written, so the
measurement below is a reconstruction from that description, named and budgeted here (``docs/compression.md``):

    rate(x) = mean_j ‖P_ω(x + δ_j) − P_ω(x)‖₂ / ‖δ_j‖₂,

with the same noise draw ω for both purifications (the purifier's generator re-seeded with ``seed`` before each
call, so that an input's row meets the same ε), δ_j random directions of the given ``radius`` (uniform on the ℓ2
sphere, or random vertices ±radius of the ℓ∞ ball), clipped into the valid range (the denominator is the clipped
δ's norm). A rate below 1 means P maps a ball of inputs onto a smaller set: an attacker's budget shrinks by that
factor on the way to the classifier (to first order); 1 is the identity; a linear P(x) = A x + b has rates
between A's smallest and largest singular values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._checks import non_negative_int, number, one_of, positive_int
from .preprocessor import ADPPurifier

__all__ = ["CompressionRate", "compression_rate"]

NORMS = (2, np.inf)


@dataclass(frozen=True)
class CompressionRate:
    """
    The result of :func:`compression_rate`.

    :param values: Per-example rates (N,): the mean over directions of the distance ratios.
    :param ratios: All distance ratios ‖P(x + δ_j) − P(x)‖₂ / ‖δ_j‖₂ (N × nb_directions).
    :param summary: ``mean``, ``median``, ``q25``, ``q75`` of ``values``, and the measurement's inputs and budget:
        ``radius``, ``norm``, ``nb_directions``, ``seed``, ``nb_examples``, ``nb_purifications`` (purifier passes
        per example times examples, the determinism check included).
    """

    values: np.ndarray
    ratios: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)


def _directions(shape: tuple[int, ...], norm, radius: float, generator: torch.Generator) -> torch.Tensor:
    g = torch.randn(shape, generator=generator, device=generator.device)
    if norm == np.inf:
        return radius * g.sign()
    return radius * g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (g.ndim - 1)))


def _fixed_map(purifier, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The purifier as a deterministic map: an ADPPurifier re-seeded with ``seed`` before every call."""
    if isinstance(purifier, ADPPurifier):

        def run(z: torch.Tensor) -> torch.Tensor:
            purifier.generator = torch.Generator(purifier.device).manual_seed(seed)
            return purifier.forward(z)[0]

        return run
    return purifier


def compression_rate(
    purifier: ADPPurifier | Callable[[torch.Tensor], torch.Tensor],
    x: np.ndarray | torch.Tensor,
    *,
    radius: float,
    nb_directions: int = 8,
    norm: int | float | str = 2,
    seed: int = 0,
    clip_values: tuple[float, float] | None = None,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
) -> CompressionRate:
    """
    Measure how strongly ``purifier`` compresses a ball of the given ``radius`` around each input, with its
    randomness fixed (no gradients, no attack): ``rate(x) = mean_j ‖P(x + δ_j) − P(x)‖₂ / ‖δ_j‖₂``.

    | Paper link: https://arxiv.org/abs/2505.22839 (Liu & Wei 2025; a reconstruction of their compression rate
      from the paper's description, see the module docstring)

    Budget: ``nb_directions + 2`` purifier passes per example (one for x, one per direction, one to check that
    the map is deterministic), no gradients.

    :param purifier: An :class:`~art_adp.ADPPurifier` (its generator is replaced by one seeded with ``seed`` before
        every pass and restored afterwards, so x and x + δ meet the same noise draw) or any deterministic callable
        ``N×C×H×W`` tensor → same shape, e.g. ``lambda z: purify(score, z, generator=torch.Generator().manual_seed(0))``
        (a fresh generator per call fixes the noise).
    :param x: Inputs ``N×C×H×W`` (numpy or torch, floating point).
    :param radius: Size r > 0 of the perturbations: ‖δ‖₂ = r (``norm=2``) or δ ∈ {−r, r}^d (``norm=np.inf``).
    :param nb_directions: Random directions per example (K ≥ 1).
    :param norm: ``2`` (uniform directions on the ℓ2 sphere) or ``np.inf`` / ``"inf"`` (random vertices of the ℓ∞
        ball, where ℓ∞ attacks end). The ratio is always measured in ℓ2.
    :param seed: The one randomness configuration of the purifier (its generator's seed).
    :param clip_values: ``(min, max)``: x + δ is clipped into it and the ratio uses the clipped δ. Default: an
        ADPPurifier's ``clip_values``; no clipping for a callable.
    :param batch_size: Examples per purifier pass (default: all). An example's noise draw depends on its position
        in its batch, the same for x and every x + δ_j.
    :param generator: Source of the directions (default: a CPU generator seeded with ``seed + 1``, independent of
        the purifier's noise).
    :return: A :class:`CompressionRate`: per-example values, all ratios and a summary.
    :raises ValueError: On invalid arguments, a purifier that is not deterministic with its randomness fixed, an
        output of another shape, or an example whose perturbations are all clipped away.
    """
    xt, norm, clip_values, generator = _check(
        purifier, x, radius, nb_directions, norm, seed, clip_values, batch_size, generator
    )
    batch_size = len(xt) if batch_size is None else batch_size
    saved = purifier.generator if isinstance(purifier, ADPPurifier) else None
    device = purifier.device if isinstance(purifier, ADPPurifier) else xt.device
    run = _fixed_map(purifier, seed)
    try:
        with torch.no_grad():
            chunks = [xt[i : i + batch_size].to(device, torch.float32) for i in range(0, len(xt), batch_size)]
            r = torch.cat([_ratios(run, c, radius, nb_directions, norm, clip_values, generator) for c in chunks])
    finally:
        if isinstance(purifier, ADPPurifier):
            purifier.generator = saved
    ratios = r.double().numpy()
    if not np.isfinite(ratios).all():
        raise ValueError("The purifier returned NaN or Inf values.")
    values = ratios.mean(axis=1)
    summary = _summary(values, radius=radius, norm=norm, nb_directions=nb_directions, seed=seed)
    return CompressionRate(values=values, ratios=ratios, summary=summary)


def _summary(values: np.ndarray, *, radius: float, norm, nb_directions: int, seed: int) -> dict[str, Any]:
    """The summary of :class:`CompressionRate`: quartiles of the per-example rates and the budget spent."""
    return {
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "q25": float(np.quantile(values, 0.25)),
        "q75": float(np.quantile(values, 0.75)),
        "radius": float(radius),
        "norm": "inf" if norm == np.inf else 2,
        "nb_directions": nb_directions,
        "seed": seed,
        "nb_examples": len(values),
        "nb_purifications": len(values) * (nb_directions + 2),
    }


def _check(purifier, x, radius, nb_directions, norm, seed, clip_values, batch_size, generator):
    """Validate :func:`compression_rate`'s arguments; return ``(x as a tensor, norm, clip_values, generator)``."""
    if not (isinstance(purifier, ADPPurifier) or callable(purifier)):
        raise ValueError(
            f"purifier must be an ADPPurifier or a callable tensor -> tensor, got {type(purifier).__name__}."
        )
    xt = torch.as_tensor(x)
    if not torch.is_floating_point(xt) or xt.ndim < 2 or len(xt) == 0:
        raise ValueError(
            f"x must be a non-empty floating-point batch N×C×H×W, got dtype {xt.dtype} and shape {tuple(xt.shape)}."
        )
    if not bool(xt.isfinite().all()):
        raise ValueError("x contains NaN or Inf values.")
    number("radius", radius, low=0, low_open=True)
    positive_int("nb_directions", nb_directions)
    norm = np.inf if norm in ("inf", np.inf) else norm
    one_of("norm", norm, NORMS)
    non_negative_int("seed", seed)
    positive_int("batch_size", batch_size, optional=True)
    if clip_values is None and isinstance(purifier, ADPPurifier):
        clip_values = tuple(purifier.clip_values)
    if clip_values is not None:
        if not (len(clip_values) == 2 and clip_values[0] < clip_values[1]):
            raise ValueError(f"clip_values must be (min, max) with min < max, or None; got {clip_values!r}.")
        low, high = float(xt.min()), float(xt.max())
        if not (low >= clip_values[0] and high <= clip_values[1]):
            raise ValueError(f"x must lie within clip_values {tuple(clip_values)}; its range is [{low:g}, {high:g}].")
    if generator is None:
        generator = torch.Generator().manual_seed(seed + 1)
    elif not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}.")
    return xt, norm, clip_values, generator


def _ratios(run, xb, radius, nb_directions, norm, clip_values, generator) -> torch.Tensor:
    """The ratios of one batch: ``len(xb) × nb_directions``."""
    base = run(xb)
    if base.shape != xb.shape:
        raise ValueError(f"The purifier returned shape {tuple(base.shape)} for inputs {tuple(xb.shape)}.")
    scale = float(base.abs().max()) + 1.0
    if not torch.allclose(base, run(xb), rtol=0, atol=1e-5 * scale):
        raise ValueError(
            "The purifier is not deterministic: two passes on the same inputs differ. Fix its randomness "
            "(an ADPPurifier is re-seeded here; for a callable, draw its noise from a torch.Generator "
            "seeded inside the call)."
        )
    block = torch.empty(len(xb), nb_directions)
    for j in range(nb_directions):
        d = _directions(tuple(xb.shape), norm, radius, generator).to(xb.device)
        moved = xb + d if clip_values is None else (xb + d).clamp(*clip_values)
        dx = (moved - xb).flatten(1).norm(dim=1)
        if bool((dx == 0).any()):
            raise ValueError(
                "A perturbation was clipped away entirely (the input sits at a corner of clip_values); "
                "pass clip_values=None or inputs inside the range."
            )
        block[:, j] = ((run(moved) - base).flatten(1).norm(dim=1) / dx).cpu()
    return block
