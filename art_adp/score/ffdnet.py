"""
FFDNet (Zhang, Zuo & Zhang 2018), a σ-conditional CNN denoiser ``D(x, σ)`` on [0, 1] pixels, laid out as KAIR's
``models/network_ffdnet.py`` (``cszn/KAIR``, MIT) so that KAIR's state dicts load by name.

The image is padded to even H and W (replicating its last row and column), pixel-unshuffled by 2 (C·4 channels at
half the size), joined by a constant map of σ as one more channel, passed through ``depth`` 3×3 convolutions
(ReLU after each but the last: ``model.0``, ``model.2``, …, ``model.{2·depth−2}``) and pixel-shuffled back, then
cropped to the input's size. The network returns the denoised image itself (no residual, no preconditioning); σ is
the noise level in [0, 1] pixel units (KAIR's σ/255), so :func:`~art_adp.score.diffusion.score_at` and
:class:`~art_adp.EDMScore` with ``data_range=(0.0, 1.0)`` take it like a :class:`~art_adp.DenoiserUNet`.

KAIR's colour model is ``FFDNet(3, channels=96, depth=12)`` (852,108 parameters), trained on natural photographs
with unclipped Gaussian noise of σ in [0, 75/255]; the grey one is ``FFDNet(1, channels=64, depth=15)``.

| Paper link (FFDNet): https://arxiv.org/abs/1710.04026
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import positive_int

__all__ = ["FFDNet"]


class FFDNet(nn.Module):
    """
    ``D(x, σ)``: FFDNet on [0, 1] images (see the module docstring). ``forward(x, sigma)`` takes ``x`` ``N×C×H×W``
    and ``sigma`` a scalar or an ``N`` tensor of noise levels in [0, 1] pixel units, and returns the denoised images
    (same shape). For ADP use ``EDMScore(net, sigma=0.25, data_range=(0.0, 1.0))``.
    """

    sigma_conditional = True  # forward(x, sigma)

    def __init__(self, in_channels: int = 3, *, channels: int = 96, depth: int = 12) -> None:
        """
        :param in_channels: Image channels C (KAIR's ``in_nc`` = ``out_nc``).
        :param channels: Width of the hidden convolutions (KAIR's ``nc``).
        :param depth: Number of convolutions, head and tail included, at least 2 (KAIR's ``nb``).
        """
        super().__init__()
        in_channels = positive_int("in_channels", in_channels)
        channels = positive_int("channels", channels)
        depth = positive_int("depth", depth)
        if depth < 2:
            raise ValueError(f"depth must be at least 2 (a head and a tail convolution), got {depth}.")
        self.config = {"in_channels": in_channels, "channels": channels, "depth": depth}
        widths = [4 * in_channels + 1] + [channels] * (depth - 1) + [4 * in_channels]
        layers: list[nn.Module] = []
        for i in range(depth):
            layers.append(nn.Conv2d(widths[i], widths[i + 1], 3, padding=1))
            if i + 1 < depth:
                layers.append(nn.ReLU())
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, sigma=None) -> torch.Tensor:
        """The denoised estimate ``D(x, σ)`` of images ``x`` (``N×C×H×W``) at levels ``sigma`` (scalar or ``N``)."""
        if sigma is None:
            raise ValueError(
                "FFDNet is a σ-conditional denoiser D(x, sigma), not a score model h(x): for ADP wrap it at one level, "
                "EDMScore(net, sigma=0.25, data_range=(0.0, 1.0))."
            )
        if x.ndim != 4 or x.shape[1] != self.config["in_channels"]:
            raise ValueError(f"FFDNet expects N×{self.config['in_channels']}×H×W images, got shape {tuple(x.shape)}.")
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
        sigma = (sigma.expand(x.shape[0]) if sigma.ndim == 0 else sigma).reshape(-1)
        if sigma.shape[0] != x.shape[0]:
            raise ValueError(
                f"sigma must be a scalar or hold one level per image ({x.shape[0]}), got {sigma.shape[0]}."
            )
        h, w = x.shape[-2:]
        padded = F.pad(x, (0, w % 2, 0, h % 2), mode="replicate") if h % 2 or w % 2 else x
        down = F.pixel_unshuffle(padded, 2)
        level = sigma.view(-1, 1, 1, 1).expand(-1, 1, *down.shape[-2:])
        out = F.pixel_shuffle(self.model(torch.cat([down, level], dim=1)), 2)
        return out[..., :h, :w]
