"""
A compact noise-conditional UNet denoiser ``D(x, σ)`` with EDM preconditioning, small enough to train on a CPU.

The network returns its estimate of the clean image, like an EDM / k-diffusion ``Denoiser`` (Karras et al. 2022):

    D(x, σ) = μ + c_skip(σ)·(x − μ) + c_out(σ)·F(c_in(σ)·(x − μ), ln(σ)/4)

with ``c_skip = σ_d²/(σ² + σ_d²)``, ``c_out = σ·σ_d/√(σ² + σ_d²)``, ``c_in = 1/√(σ² + σ_d²)``, data centred at
``μ = 0.5`` on [0, 1] pixels and ``σ_d = 0.5``. The noise estimate is ε̂ = (x − D)/σ and ADP's score at a fixed
level is ``h = (D − x)/σ`` -- exactly :class:`~art_adp.EDMScore` with ``data_range=(0.0, 1.0)``; the same network
serves every σ, so one training gives ADP's score at σ 0.25, a one-shot denoiser and a reverse-diffusion sampler.

It trains with :func:`~art_adp.train_score_model` (which sees :attr:`DenoiserUNet.sigma_conditional` and feeds
each sample its level): denoising score matching ½‖h(x̃, σ) + z‖² = ½‖x − D(x̃, σ)‖²/σ², the ε-prediction loss of
DDPM, with σ drawn from the ``sigmas`` grid given to the trainer (a dense geometric grid draws ln σ uniformly).

Layout: a conv stem, then per resolution one residual block (GroupNorm, SiLU, 3×3 convs, the σ embedding as a
per-channel scale and shift) and a strided 3×3 down-convolution; the same blocks back up with skip connections
(nearest up-sampling to the skip's size, so any H×W works, odd sizes included).

| Paper link (EDM preconditioning): https://arxiv.org/abs/2206.00364
| Paper link (DDPM, ε-prediction): https://arxiv.org/abs/2006.11239
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import number, positive_int

__all__ = ["DenoiserUNet"]


def _groups(channels: int) -> int:
    return math.gcd(channels, 8)


class _ResBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, emb_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(_groups(in_ch), in_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.emb = nn.Linear(emb_dim, 2 * out_ch)
        self.norm2 = nn.GroupNorm(_groups(out_ch), out_ch)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)
        nn.init.zeros_(self.conv2.weight)
        assert self.conv2.bias is not None  # nn.Conv2d's default bias=True
        nn.init.zeros_(self.conv2.bias)
        self.skip = nn.Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.emb(emb)[:, :, None, None].chunk(2, dim=1)
        h = F.silu(self.norm2(h) * (1 + scale) + shift)
        return self.skip(x) + self.conv2(self.dropout(h))


class DenoiserUNet(nn.Module):
    """
    ``D(x, σ)``: a σ-conditioned UNet denoiser on [0, 1] images with EDM preconditioning (see the module docstring).

    Its ``forward(x, sigma)`` takes ``x`` ``N×C×H×W`` and ``sigma`` a scalar or an ``N`` tensor of noise levels in
    [0, 1] pixel units, and returns the denoised images (same shape). For ADP use
    ``EDMScore(net, sigma=0.25, data_range=(0.0, 1.0))``.
    """

    sigma_conditional = True  # train_score_model passes each sample's σ: forward(x, sigma)
    freqs: torch.Tensor  # registered buffer

    def __init__(
        self,
        in_channels: int = 1,
        *,
        channels: Sequence[int] = (32, 64, 64),
        emb_dim: int = 128,
        dropout: float = 0.0,
        sigma_data: float = 0.5,
    ) -> None:
        """
        :param in_channels: Image channels C.
        :param channels: Width of each resolution, top first; each further entry halves H and W (rounding up).
        :param emb_dim: Width of the σ embedding.
        :param dropout: Dropout inside the residual blocks while training.
        :param sigma_data: σ_d of the preconditioning (the RMS of the centred pixels x − 0.5; 0.5 for binary-ish
            images such as digits).
        """
        super().__init__()
        in_channels = positive_int("in_channels", in_channels)
        channels = [positive_int("channels", c) for c in channels]
        if not channels:
            raise ValueError("channels must name at least one width, e.g. (32, 64, 64).")
        emb_dim = positive_int("emb_dim", emb_dim)
        if emb_dim % 2:
            raise ValueError(f"emb_dim must be even (sine and cosine halves), got {emb_dim}.")
        dropout = number("dropout", dropout, low=0, high=1, high_open=True)
        sigma_data = number("sigma_data", sigma_data, low=0, low_open=True)
        self.config = {
            "in_channels": in_channels,
            "channels": list(channels),
            "emb_dim": emb_dim,
            "dropout": dropout,
            "sigma_data": sigma_data,
        }
        self.sigma_data = sigma_data
        self.register_buffer("freqs", torch.exp(-math.log(1e3) * torch.arange(emb_dim // 2) / (emb_dim // 2)))
        self.emb = nn.Sequential(nn.Linear(emb_dim, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.stem = nn.Conv2d(in_channels, channels[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.pool = nn.ModuleList()
        for i, ch in enumerate(channels):
            self.down.append(_ResBlock(channels[max(i - 1, 0)], ch, emb_dim, dropout))
            if i + 1 < len(channels):
                self.pool.append(nn.Conv2d(ch, ch, 3, stride=2, padding=1))
        self.mid = _ResBlock(channels[-1], channels[-1], emb_dim, dropout)
        self.up = nn.ModuleList(
            _ResBlock(channels[i + 1] + channels[i], channels[i], emb_dim, dropout) for i in range(len(channels) - 1)
        )
        self.out_norm = nn.GroupNorm(_groups(channels[0]), channels[0])
        self.out = nn.Conv2d(channels[0], in_channels, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        assert self.out.bias is not None  # nn.Conv2d's default bias=True
        nn.init.zeros_(self.out.bias)

    def _sigma(self, sigma, x: torch.Tensor) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
        if sigma.ndim == 0:
            sigma = sigma.expand(x.shape[0])
        sigma = sigma.reshape(-1)
        if sigma.shape[0] != x.shape[0]:
            raise ValueError(
                f"sigma must be a scalar or hold one level per image ({x.shape[0]}), got {sigma.shape[0]}."
            )
        return sigma

    def forward(self, x: torch.Tensor, sigma=None) -> torch.Tensor:
        """The denoised estimate ``D(x, σ)`` of images ``x`` (``N×C×H×W``) at levels ``sigma`` (scalar or ``N``)."""
        if sigma is None:
            raise ValueError(
                "DenoiserUNet is a σ-conditional denoiser D(x, sigma), not a score model h(x): for ADP wrap it at "
                "one level, EDMScore(net, sigma=0.25, data_range=(0.0, 1.0))."
            )
        if x.ndim != 4 or x.shape[1] != self.config["in_channels"]:
            raise ValueError(
                f"DenoiserUNet expects N×{self.config['in_channels']}×H×W images, got shape {tuple(x.shape)}."
            )
        sigma = self._sigma(sigma, x)
        s2 = sigma.square() + self.sigma_data**2
        c_skip = (self.sigma_data**2 / s2).view(-1, 1, 1, 1)
        c_out = (sigma * self.sigma_data / s2.sqrt()).view(-1, 1, 1, 1)
        c_in = s2.rsqrt().view(-1, 1, 1, 1)
        angles = (sigma.log() / 4)[:, None] * self.freqs[None] * 100  # c_noise = ln σ / 4, spread over frequencies
        emb = self.emb(torch.cat([angles.sin(), angles.cos()], dim=1))
        centred = x - 0.5
        h = self.stem(c_in * centred)
        skips = []
        for i, block in enumerate(self.down):
            h = block(h, emb)
            if i < len(self.pool):
                skips.append(h)
                h = self.pool[i](h)
        h = self.mid(h, emb)
        for i in reversed(range(len(self.up))):
            skip = skips[i]
            h = F.interpolate(h, size=skip.shape[-2:], mode="nearest")
            h = self.up[i](torch.cat([h, skip], dim=1), emb)
        f = self.out(F.silu(self.out_norm(h)))
        return 0.5 + c_skip * centred + c_out * f
