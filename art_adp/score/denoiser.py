"""
A diffusion model as a denoiser ``D(x, σ)`` on [0, 1] pixels: the one contract the diffusion purifiers sample with.

``D(x, σ) ≈ E[x₀ | x = x₀ + σε]`` for images in [0, 1] and noise σ in pixel units (k-diffusion's ``model(x, sigma)``
contract). Every diffusion model is one in the variance-exploding view (Karras et al. 2022, §3):

- VP / DDPM (:class:`~art_adp.VPScore`, e.g. from :func:`~art_adp.from_diffusers`): ``x_t = √ᾱ_t·(x' + σ_t'ε)``, so
  the step t at pixel level ``σ_t = σ_t'/a`` gives ``D(x, σ_t) = x − σ_t·ε̂`` (ε̂ the network's noise estimate at t;
  see :mod:`art_adp.score.diffusion` for the scale ``x' = a·x + b``). Only the schedule's levels exist: a σ between
  them uses the nearest (in log σ), which :meth:`Denoiser.level` reports.
- EDM (:class:`~art_adp.EDMScore`, :class:`~art_adp.DenoiserUNet`): ``D(x, σ) = (D'(a·x + b, a·σ) − b)/a``, any σ > 0.

DDIM (η = 0) on a VP model is then exactly Euler's method on the probability-flow ODE ``dx/dσ = (x − D(x, σ))/σ``
over the schedule's levels, and DDPM's ancestral step is k-diffusion's Euler-ancestral step (see
:mod:`art_adp.diffusion_purify`).

| Paper link (EDM, the VE view of every sampler): https://arxiv.org/abs/2206.00364
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._checks import number, positive_int
from .diffusion import EDMScore, VPScore

__all__ = ["Denoiser"]


class Denoiser(nn.Module):
    """
    ``D(x, σ)`` on [0, 1] pixels from a :class:`~art_adp.VPScore`, an :class:`~art_adp.EDMScore` or a σ-conditional
    denoiser on [0, 1] pixels such as :class:`~art_adp.DenoiserUNet` (the fixed σ of a score adapter is ignored:
    the denoiser is called at every level).
    """

    model: VPScore | EDMScore

    def __init__(self, model: nn.Module) -> None:
        """
        :param model: A ``VPScore``, an ``EDMScore``, or a module with ``sigma_conditional = True`` and
            ``forward(x, sigma)`` on [0, 1] pixels (``DenoiserUNet``).
        """
        super().__init__()
        if isinstance(model, Denoiser):
            model = model.model
        if getattr(model, "sigma_conditional", False) and not isinstance(model, (VPScore, EDMScore)):
            model = EDMScore(model, sigma=1.0, data_range=(0.0, 1.0))
        if not isinstance(model, (VPScore, EDMScore)):
            raise ValueError(
                f"model must be a VPScore (a DDPM network, e.g. from_diffusers(...)), an EDMScore or a "
                f"sigma-conditional denoiser such as DenoiserUNet, got {type(model).__name__}."
            )
        self.model = model
        if isinstance(model, VPScore):
            table = model.alphas_cumprod
            self.levels: torch.Tensor | None = ((1 - table) / table).sqrt() / model.scale  # σ_t in pixels, rising
        else:
            self.levels = None

    def level(self, sigma: float) -> tuple[float, int | None]:
        """The level the model realises for ``sigma`` (pixels): ``(σ, None)`` for EDM, ``(σ_t, t)`` for VP (nearest
        step in log σ)."""
        if self.levels is None:
            return float(sigma), None
        low, high = float(self.levels[0]), float(self.levels[-1])
        if not low * (1 - 1e-6) <= sigma <= high * (1 + 1e-6):
            raise ValueError(
                f"sigma={sigma!r} is outside the schedule's noise levels [{low:.4g}, {high:.4g}] in [0, 1] pixel "
                "units; choose a sigma inside it."
            )
        t = int((self.levels.log() - math.log(sigma)).abs().argmin())
        return float(self.levels[t]), t

    def schedule(self, sigma: float, steps: int, *, sigma_min: float = 0.01, rho: float = 7.0) -> list[float]:
        """
        The K = ``steps`` levels σ_K = σ* > … > σ_1 > 0 a sampler visits from ``sigma`` (then it returns to σ = 0).

        VP: the steps ``round(linspace(t*, 0, K))`` of the schedule (t* the step of ``sigma``; DDIM's
        "linspace" spacing), so σ_1 is the schedule's smallest level. EDM: Karras et al.'s ρ-schedule
        ``(σ*^{1/ρ} + i/(K−1)·(σ_min^{1/ρ} − σ*^{1/ρ}))^ρ`` (``sigma_min`` in pixels; one step: σ* alone).

        :raises ValueError: When the VP schedule has fewer than K steps up to t*.
        """
        steps = positive_int("steps", steps)
        top, t_star = self.level(number("sigma", sigma, low=0, low_open=True))
        if t_star is not None:
            if steps > t_star + 1:
                raise ValueError(
                    f"steps={steps} exceeds the {t_star + 1} steps of the model's schedule up to sigma={sigma:g} "
                    f"(t* = {t_star}); use steps <= {t_star + 1} or a larger sigma."
                )
            assert self.levels is not None
            ts = torch.linspace(t_star, 0, steps).round().long()
            return [float(self.levels[t]) for t in ts]
        number("sigma_min", sigma_min, low=0, high=top, low_open=True)
        if steps == 1:
            return [top]
        ramp = torch.linspace(0, 1, steps, dtype=torch.float64)
        hi, lo = top ** (1 / rho), sigma_min ** (1 / rho)
        return [float(s) for s in (hi + ramp * (lo - hi)) ** rho]

    def forward(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        """
        :param x: Noisy images ``N×C×H×W`` on [0, 1] pixels (x₀ + σε; values may leave [0, 1]).
        :param sigma: The noise level σ > 0 in pixels (VP: the nearest step of the schedule is used).
        :return: The denoised estimate D(x, σ), ``x``'s shape.
        """
        model = self.model
        scaled = x * model.scale + model.data_range[0]
        if isinstance(model, VPScore):
            level, t = self.level(sigma)
            assert t is not None
            return x - level * model.noise_at(scaled, t)
        net_sigma = torch.full((x.shape[0],), model.scale * sigma, dtype=x.dtype, device=x.device)
        return (model.model(scaled, net_sigma) - model.data_range[0]) / model.scale
