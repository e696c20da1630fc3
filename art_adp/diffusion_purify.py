"""
Purification with a diffusion model's denoiser: reverse diffusion (DiffPure, GDMP) and one-shot denoising (denoised
smoothing), beside ADP's :func:`~art_adp.purify`.

Both work in the variance-exploding view on [0, 1] pixels, over one contract, the denoiser ``D(x, σ)``
(:class:`~art_adp.score.denoiser.Denoiser`, built from a ``VPScore``, an ``EDMScore`` or a ``DenoiserUNet``). Like
:func:`~art_adp.purify` they never switch off autograd and take their randomness from a ``torch.Generator``.

| Paper link (DiffPure): https://arxiv.org/abs/2205.07460 ; (GDMP): https://arxiv.org/abs/2205.14969
| Paper link (DDIM): https://arxiv.org/abs/2010.02502 ; (EDM samplers): https://arxiv.org/abs/2206.00364
| Paper link (denoised smoothing with diffusion models): https://arxiv.org/abs/2206.10550 (Carlini et al., ICLR 2023)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._checks import one_of
from ._fast_paths import checkpointed
from .purification import check_images
from .score.denoiser import Denoiser

__all__ = ["SAMPLERS", "one_shot_denoise", "reverse_diffusion"]

SAMPLERS = ("ddim", "ancestral", "heun")


def _noise(x: torch.Tensor, draws: int, generator: torch.Generator | None) -> torch.Tensor:
    """``N × draws × C×H×W`` standard normal noise in one draw, so row i's noise never depends on the batch size."""
    device = x.device if generator is None else generator.device
    return torch.randn((x.shape[0], draws, *x.shape[1:]), generator=generator, device=device).to(x)


def _step(denoiser: Denoiser, x, sigma: float, sigma_next: float, z, sampler: str) -> torch.Tensor:
    """One step from level σ to σ' < σ (σ' = 0: the denoised estimate itself)."""
    d = denoiser(x, sigma)
    if sigma_next == 0:
        return d
    if sampler == "ancestral":  # DDPM's posterior step = Euler to σ_down, then fresh noise σ_up (σ_up² + σ_down² = σ'²)
        up = sigma_next * math.sqrt(1 - (sigma_next / sigma) ** 2)
        return d + math.sqrt(sigma_next**2 - up**2) / sigma * (x - d) + up * z
    x_next = d + sigma_next / sigma * (x - d)  # DDIM (η = 0) = Euler on dx/dσ = (x − D)/σ
    if sampler == "heun":  # EDM's 2nd-order correction: the mean of the slopes at σ and σ'
        d_next = denoiser(x_next, sigma_next)
        x_next = x + (sigma_next - sigma) * ((x - d) / sigma + (x_next - d_next) / sigma_next) / 2
    return x_next


def reverse_diffusion(
    denoiser: Denoiser | torch.nn.Module,
    x: torch.Tensor,
    *,
    sigma: float = 0.25,
    steps: int = 20,
    sampler: str = "ddim",
    sigma_min: float = 0.01,
    clip_values: tuple[float, float] = (0.0, 1.0),
    generator: torch.Generator | None = None,
    gradient_checkpointing: bool = False,
    on_state: Callable[[torch.Tensor, float, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """
    Purify ``x`` by diffusing it to level σ* and returning with K sampler steps (DiffPure / GDMP):

        x_{σ_K} = x + σ* ε,   ε ~ N(0, I)                                   (forward diffusion to t*)
        x_{σ_{i−1}} = step(x_{σ_i}; σ_i → σ_{i−1}),   i = K … 1,  σ_0 = 0     (reverse diffusion)
        output = clip(x_{σ_0})

    with D = D(x_{σ_i}, σ_i) and, per ``sampler``,

    - ``"ddim"``: x' = D + (σ'/σ)(x − D): DDIM with η = 0 on a VP model (exactly, in the VE variables x/√ᾱ), Euler's
      method on the probability-flow ODE on an EDM model; K denoiser calls.
    - ``"ancestral"``: x' = D + (σ_down/σ)(x − D) + σ_up z, z ~ N(0, I), σ_up = σ'√(1 − σ'²/σ²),
      σ_down = √(σ'² − σ_up²): DDPM's ancestral step (DDIM η = 1) on a VP model, k-diffusion's Euler-ancestral on
      EDM; K calls.
    - ``"heun"``: EDM's deterministic Heun step (Karras et al. 2022, Algorithm 1; Euler on the last step); 2K − 1 calls.

    The levels σ_K = σ* > … > σ_1 come from :meth:`Denoiser.schedule` (VP: DDIM's linspace over the schedule's steps,
    σ* the step nearest ``sigma``; EDM: the ρ = 7 schedule down to ``sigma_min``). All noise -- ε and the ancestral
    z's -- is drawn up front in one ``N × (1 + K) × C×H×W`` draw (``N × 1 × …`` for the deterministic samplers), so
    every sample's result is independent of the others in its batch, and a checkpointed step replays its own noise.

    :param denoiser: A :class:`~art_adp.score.denoiser.Denoiser`, or what it wraps (``VPScore``, ``EDMScore``,
        ``DenoiserUNet``).
    :param x: Images ``N×C×H×W`` in ``clip_values``.
    :param sigma: σ* > 0, the diffusion level in [0, 1] pixel units (DiffPure's t* = 0.1 on a VP-SDE is σ* ≈ 0.16).
    :param steps: K ≥ 1, the reverse steps.
    :param sampler: ``"ddim"``, ``"ancestral"`` or ``"heun"``.
    :param sigma_min: The smallest nonzero level of an EDM schedule (pixels; ignored on a VP schedule).
    :param clip_values: ``(min, max)`` of the images; the output is clipped into it.
    :param generator: Source of the noise (default: torch's global generator).
    :param gradient_checkpointing: Checkpoint every step (``torch.utils.checkpoint``): the backward pass recomputes
        one step at a time from its input and its pre-drawn noise, so the gradient is the exact one at the memory
        of one step's activations.
    :param on_state: Called after each step with ``(x_{σ_{i−1}}, σ_{i−1}, ε)`` -- the state, its level and the
        forward diffusion's noise ε -- for i = K … 1 (the last state is the clipped output, at level 0), with autograd
        when it records: the reference of a state is the clean image diffused with the same noise to its level,
        ``x + σ_{i−1} ε`` (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`). It changes no value.
    :return: The purified images, ``x``'s shape, in ``clip_values``.
    """
    one_of("sampler", sampler, SAMPLERS)
    check_images(x, clip_values)
    denoiser = denoiser if isinstance(denoiser, Denoiser) else Denoiser(denoiser)
    levels = [*denoiser.schedule(sigma, steps, sigma_min=sigma_min), 0.0]
    noise = _noise(x, 1 + steps if sampler == "ancestral" else 1, generator)
    y = x + levels[0] * noise[:, 0]
    for i in range(steps):
        z = noise[:, 1 + i] if sampler == "ancestral" else None
        if gradient_checkpointing:
            y = checkpointed(_step)(denoiser, y, levels[i], levels[i + 1], z, sampler)
        else:
            y = _step(denoiser, y, levels[i], levels[i + 1], z, sampler)
        if on_state is not None and i < steps - 1:
            on_state(y, levels[i + 1], noise[:, 0])
    out = y.clamp(*clip_values)
    if on_state is not None:
        on_state(out, 0.0, noise[:, 0])
    return out


def one_shot_denoise(
    denoiser: Denoiser | torch.nn.Module,
    x: torch.Tensor,
    *,
    sigma: float = 0.25,
    add_noise: bool = True,
    clip_values: tuple[float, float] = (0.0, 1.0),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """
    Denoised smoothing's base purification (Carlini et al. 2023): ``clip(D(x + σε, σ))``, one denoiser call at the
    level of the noise (on a VP model the step t with √((1 − ᾱ_t)/ᾱ_t) nearest to σ on the network's scale).

    :param denoiser: As for :func:`reverse_diffusion`.
    :param x: Images ``N×C×H×W`` in ``clip_values``, or with ``add_noise=False`` images that already carry the
        Gaussian noise σ (randomized smoothing's draws, e.g. inside :func:`~art_adp.certify`): then only finiteness
        is checked.
    :param sigma: The noise level σ > 0 in [0, 1] pixel units.
    :param add_noise: Add the noise σε here (a purifier); ``False``: ``x`` is already noisy (a smoothing base).
    :param clip_values: ``(min, max)`` of the images; the output is clipped into it.
    :param generator: Source of ε (default: torch's global generator).
    :return: The denoised images, ``x``'s shape.
    """
    denoiser = denoiser if isinstance(denoiser, Denoiser) else Denoiser(denoiser)
    if add_noise:
        check_images(x, clip_values)
        x = x + sigma * _noise(x, 1, generator)[:, 0]
    elif not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or Inf values; denoising needs finite images.")
    return denoiser(x, sigma).clamp(*clip_values)
