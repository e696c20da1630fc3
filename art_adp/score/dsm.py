"""Multi-noise-level denoising score matching (Song & Ermon 2019/2020; ADP paper eq. 5)."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["dsm_loss"]


def dsm_loss(
    model: Callable[..., torch.Tensor],
    x: torch.Tensor,
    sigmas: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    shard: tuple[int, int] | None = None,
    center: torch.Tensor | None = None,
    target: torch.Tensor | None = None,
    denoiser: bool = False,
    clip: tuple[float, float] | None = None,
) -> torch.Tensor:
    """
    Multi-level denoising score matching loss for a noise-level-free score network.

    Each sample gets one level σ drawn uniformly from ``sigmas`` and a perturbation x̃ = x + σz, z ~ N(0, I).
    With the NCSNv2 parameterisation s(x̃, σ) = h(x̃)/σ, the σ²-weighted DSM term
    ½σ²‖s(x̃, σ) + z/σ‖² equals ½‖h(x̃) + z‖², so the loss is the batch mean of ½‖h(x̃) + z‖².

    :param model: The network ``h``: maps ``N×C×H×W`` to the same shape.
    :param x: Clean data, ``N×C×H×W`` in [0, 1].
    :param sigmas: 1-D tensor of noise levels.
    :param generator: Source of the level indices and the noise (default: torch's global generator).
    :param shard: ``(rank, world_size)``: draw levels and noise for all of ``x`` (so every rank draws the same),
        then evaluate the model on rows ``rank·N/W … (rank+1)·N/W`` only and return their mean. The mean of
        the W shard losses is the loss of the whole batch: data-parallel training over the concatenated batch.
    :param center: Centre of the perturbation, x̃ = center + σz (default ``x``): an augmentation F(x) for the
        paper's augmented DSM (:mod:`art_adp.score.augment`).
    :param target: The point the network learns to move x̃ towards (default ``x``): the loss becomes the batch
        mean of ½‖h(x̃) + (x̃ − target)/σ‖² = ½‖h(x̃) + z + (center − target)/σ‖². With neither given the
        computation is the plain one above, unchanged.
    :param denoiser: ``model`` is a σ-conditional denoiser ``D(x̃, σ)`` (e.g. :class:`~art_adp.DenoiserUNet`):
        it gets each sample's level, and h = (D − x̃)/σ, so the loss is the batch mean of ½‖x − D(x̃, σ)‖²/σ²
        (DDPM's ε-prediction loss). A dense geometric ``sigmas`` grid then draws ln σ uniformly.
    :param clip: ``(min, max)``: the network sees x̃ clipped into it, as ADP's noise injection clips (the paper's
        §5), and learns to move the clipped x̃ towards the target: z becomes (clip(x̃) − target)/σ. None: unclipped.
    :return: Scalar loss tensor.
    """
    sigmas = torch.as_tensor(sigmas, dtype=x.dtype, device=x.device)
    if sigmas.ndim != 1 or sigmas.numel() == 0:
        raise ValueError(f"sigmas must be a non-empty 1-D tensor, got shape {tuple(sigmas.shape)}.")
    gen_device = generator.device if generator is not None else x.device
    idx = torch.randint(len(sigmas), (x.shape[0],), generator=generator, device=gen_device).to(x.device)
    z = torch.randn(x.shape, generator=generator, device=gen_device, dtype=x.dtype).to(x.device)
    sigma = sigmas[idx].view(-1, *([1] * (x.ndim - 1)))
    x_noisy = x + sigma * z if center is None else center + sigma * z
    if center is not None or target is not None:  # augmented DSM: −σ·score target is z + (center − target)/σ
        z = z + ((x if center is None else center) - (x if target is None else target)) / sigma
    if clip is not None:  # −σ·h's target moves with x̃: (clip(x̃) − target)/σ = z + (clip(x̃) − x̃)/σ
        clipped = x_noisy.clamp(*clip)
        z, x_noisy = z + (clipped - x_noisy) / sigma, clipped
    part = slice(None)
    if shard is not None:
        rank, world = shard
        if x.shape[0] % world:
            raise ValueError(f"A batch of {x.shape[0]} cannot be split evenly over {world} ranks.")
        part = slice(rank * x.shape[0] // world, (rank + 1) * x.shape[0] // world)
        x_noisy, z = x_noisy[part], z[part]
    if denoiser:
        level = sigma[part]
        h = (model(x_noisy, level.flatten()) - x_noisy) / level
    else:
        h = model(x_noisy)
    return 0.5 * (h + z).flatten(1).pow(2).sum(1).mean()
