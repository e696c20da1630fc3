"""
NCSNv2 RefineNet score network (noise-unconditional), after Song & Ermon (2020).

This module follows the architecture of the reference code ``ermongroup/ncsnv2`` (``models/ncsnv2.py`` class
``NCSNv2``, ``models/layers.py`` and ``models/normalization.py``), written as a small self-contained set of layers.

| Paper link (NCSNv2): https://arxiv.org/abs/2006.09011
| Paper link (ADP): https://arxiv.org/abs/2106.06041
"""

from collections.abc import Sequence
from typing import Any, Union, cast

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import integer, positive_int


def _conv3x3(in_ch: int, out_ch: int, bias: bool = True, dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution whose padding (= dilation) keeps the spatial size."""
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=1, padding=dilation, dilation=dilation, bias=bias)


class InstanceNorm2dPlus(nn.Module):
    """
    InstanceNorm++ (non-conditional): instance normalisation that re-injects the normalised per-channel means,

    ``out_c = gamma_c * (IN(x)_c + alpha_c * (mu_c - mean(mu)) / sqrt(var(mu) + 1e-5)) + beta_c``,

    where ``mu_c`` is the spatial mean of channel ``c`` and mean/var are taken over the channels of one sample
    (unbiased variance, as in the reference), so the layer needs at least 2 channels.
    """

    def __init__(self, num_features: int, bias: bool = True) -> None:
        """
        :param num_features: Number of channels C (>= 2).
        :param bias: Whether to add the learnt per-channel offset ``beta``.
        """
        super().__init__()
        self.num_features = num_features
        self.instance_norm = nn.InstanceNorm2d(num_features, affine=False, track_running_stats=False)
        self.alpha = nn.Parameter(torch.empty(num_features).normal_(1.0, 0.02))
        self.gamma = nn.Parameter(torch.empty(num_features).normal_(1.0, 0.02))
        self.beta = nn.Parameter(torch.zeros(num_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        means = x.mean(dim=(2, 3))  # N x C
        means = (means - means.mean(dim=-1, keepdim=True)) / torch.sqrt(means.var(dim=-1, keepdim=True) + 1e-5)
        h = self.instance_norm(x) + means[..., None, None] * self.alpha[:, None, None]
        h = self.gamma[:, None, None] * h
        if self.beta is not None:
            h = h + self.beta[:, None, None]
        return h


class ConvMeanPool(nn.Module):
    """Convolution (same padding) followed by 2x2 mean pooling; halves the spatial size (H, W must be even)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int = 3, adjust_padding: bool = False) -> None:
        super().__init__()
        conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=1, padding=kernel_size // 2, bias=True)
        # ``adjust_padding`` adds one row/column of zeros at the top/left before the convolution (reference option).
        self.conv = nn.Sequential(nn.ZeroPad2d((1, 0, 1, 0)), conv) if adjust_padding else conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        return (h[:, :, ::2, ::2] + h[:, :, 1::2, ::2] + h[:, :, ::2, 1::2] + h[:, :, 1::2, 1::2]) / 4.0


class ResidualBlock(nn.Module):
    """
    Pre-activation residual block ``norm -> act -> conv -> norm -> act -> conv`` with a (learnt if needed) shortcut.

    As in the reference, ``resample="down"`` together with ``dilation`` means dilated convolutions *without*
    spatial down-sampling (and a dilated 3x3 shortcut); ``resample="down"`` without dilation down-samples by 2 with
    :class:`ConvMeanPool`.
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        resample: Union[str, None],
        act: nn.Module,
        adjust_padding: bool = False,
        dilation: Union[int, None] = None,
    ) -> None:
        super().__init__()
        self.act = act
        self.normalize1 = InstanceNorm2dPlus(in_ch)
        self.shortcut: Union[nn.Module, None] = None
        self.conv2: nn.Module
        if resample == "down":
            self.conv1 = _conv3x3(in_ch, in_ch, dilation=dilation or 1)
            self.normalize2 = InstanceNorm2dPlus(in_ch)
            if dilation is not None:
                self.conv2 = _conv3x3(in_ch, out_ch, dilation=dilation)
                self.shortcut = _conv3x3(in_ch, out_ch, dilation=dilation)
            else:
                self.conv2 = ConvMeanPool(in_ch, out_ch, 3, adjust_padding=adjust_padding)
                self.shortcut = ConvMeanPool(in_ch, out_ch, 1, adjust_padding=adjust_padding)
        elif resample is None:
            self.conv1 = _conv3x3(in_ch, out_ch, dilation=dilation or 1)
            self.normalize2 = InstanceNorm2dPlus(out_ch)
            self.conv2 = _conv3x3(out_ch, out_ch, dilation=dilation or 1)
            if in_ch != out_ch:
                if dilation is not None:
                    self.shortcut = _conv3x3(in_ch, out_ch, dilation=dilation)
                else:
                    self.shortcut = nn.Conv2d(in_ch, out_ch, kernel_size=1)
        else:
            raise ValueError(f"resample must be None or 'down', got {resample!r}.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(self.act(self.normalize1(x)))
        h = self.conv2(self.act(self.normalize2(h)))
        return h + (x if self.shortcut is None else self.shortcut(x))


class RCUBlock(nn.Module):
    """Residual conv unit: ``n_blocks`` residual blocks of ``n_stages`` x (act -> 3x3 conv without bias)."""

    def __init__(self, features: int, n_blocks: int, n_stages: int, act: nn.Module) -> None:
        super().__init__()
        self.act = act
        self.blocks = nn.ModuleList(
            nn.ModuleList(_conv3x3(features, features, bias=False) for _ in range(n_stages)) for _ in range(n_blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for convs in self.blocks:
            residual = x
            for conv in cast(nn.ModuleList, convs):
                x = conv(self.act(x))
            x = x + residual
        return x


class MSFBlock(nn.Module):
    """Multi-resolution fusion: 3x3 conv of each input, bilinear resize to a common shape, sum."""

    def __init__(self, in_planes: Sequence[int], features: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_conv3x3(c, features, bias=True) for c in in_planes)

    def forward(self, xs: list[torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
        ys = [F.interpolate(c(x), size=shape, mode="bilinear", align_corners=True) for c, x in zip(self.convs, xs)]
        out = ys[0]
        for y in ys[1:]:
            out = out + y
        return out


class CRPBlock(nn.Module):
    """Chained residual pooling: act, then ``n_stages`` x (5x5 max-pool stride 1 -> 3x3 conv), each added to x."""

    def __init__(self, features: int, n_stages: int, act: nn.Module) -> None:
        super().__init__()
        self.act = act
        self.pool = nn.MaxPool2d(kernel_size=5, stride=1, padding=2)
        self.convs = nn.ModuleList(_conv3x3(features, features, bias=False) for _ in range(n_stages))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(x)
        path = x
        for conv in self.convs:
            path = conv(self.pool(path))
            x = x + path
        return x


class RefineBlock(nn.Module):
    """RefineNet block: RCU (2x2) per input -> MSF (if several inputs) -> CRP (2 stages) -> output RCU."""

    def __init__(
        self, in_planes: Sequence[int], features: int, act: nn.Module, start: bool = False, end: bool = False
    ) -> None:
        super().__init__()
        self.adapt_convs = nn.ModuleList(RCUBlock(c, 2, 2, act) for c in in_planes)
        self.msf = None if start else MSFBlock(in_planes, features)
        self.crp = CRPBlock(features, 2, act)
        self.output_convs = RCUBlock(features, 3 if end else 1, 2, act)

    def forward(self, xs: list[torch.Tensor], output_shape: tuple[int, int]) -> torch.Tensor:
        hs = [adapt(x) for adapt, x in zip(self.adapt_convs, xs)]
        h = self.msf(hs, output_shape) if self.msf is not None else hs[0]
        return self.output_convs(self.crp(h))


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


class NCSNv2(nn.Module):
    """
    Noise-unconditional NCSNv2 RefineNet score network (Song & Ermon, 2020), used by ADP (Yoon, Hwang & Lee, 2021).

    The network returns the *noise-level-free* output ``h(x)``; the score at noise level sigma is
    ``s(x, sigma) = h(x) / sigma``, applied outside the model (the reference divides by sigma in its ``forward``).
    Inputs in [0, 1] are mapped to [-1, 1] with ``2 x - 1`` first, as the reference does for non-rescaled data.

    Architecture (reference ``NCSNv2``): 3x3 conv to ``ngf`` channels; encoder of residual blocks with InstanceNorm++
    and ELU: ``res1`` (2 blocks, ngf, HxW), ``res2`` (down-sampling with ConvMeanPool to 2 ngf, H/2 x W/2),
    ``res3`` / ``res4`` (dilation 2 / 4, no further down-sampling); RefineNet decoder ``refine1`` .. ``refine4``;
    final InstanceNorm++, ELU and 3x3 conv back to ``in_channels``. With ``ngf=128``, 3 x 32 x 32 (the reference
    CIFAR-10 configuration) it has 29,694,083 parameters.

    | Paper link (NCSNv2): https://arxiv.org/abs/2006.09011
    | Paper link (ADP): https://arxiv.org/abs/2106.06041
    """

    training_info: dict[str, Any]  # set by the loaders and the importer: {"sigmas": [...], "step": n, ...}

    def __init__(self, in_channels: int, image_size: int, *, ngf: int = 64) -> None:
        """
        Create the network.

        :param in_channels: Number of image channels C (>= 1), e.g. 1 for digits / MNIST, 3 for CIFAR-10.
        :param image_size: Height = width H of the square input images; an even integer >= 4 (e.g. 8, 28, 32). One
                           2x down-sampling is applied, so H must be even.
        :param ngf: Base number of feature maps (>= 2; InstanceNorm++ needs >= 2 channels); the reference uses 128
                    for CIFAR-10.
        :raises ValueError: If an argument is out of range.
        """
        super().__init__()
        positive_int("in_channels", in_channels)
        integer("image_size", image_size)
        integer("ngf", ngf, low=2)  # InstanceNorm++ normalises over >= 2 channels
        if image_size < 4 or image_size % 2 != 0:
            raise ValueError(
                f"Unsupported image_size {image_size}: NCSNv2 down-samples once by 2, so image_size must be an "
                "even integer >= 4 (e.g. 8, 28, 32)."
            )
        self.in_channels = in_channels
        self.image_size = image_size
        self.ngf = ngf
        self.config: dict[str, int] = {"in_channels": in_channels, "image_size": image_size, "ngf": ngf}

        act = self.act = nn.ELU()
        self.begin_conv = nn.Conv2d(in_channels, ngf, 3, stride=1, padding=1)
        self.res1 = nn.Sequential(ResidualBlock(ngf, ngf, None, act), ResidualBlock(ngf, ngf, None, act))
        self.res2 = nn.Sequential(ResidualBlock(ngf, 2 * ngf, "down", act), ResidualBlock(2 * ngf, 2 * ngf, None, act))
        self.res3 = nn.Sequential(
            ResidualBlock(2 * ngf, 2 * ngf, "down", act, dilation=2),
            ResidualBlock(2 * ngf, 2 * ngf, None, act, dilation=2),
        )
        # The reference passes adjust_padding=True for 28x28 here; since the block is dilated (no down-sampling)
        # the flag has no effect there either, it is kept for fidelity.
        self.res4 = nn.Sequential(
            ResidualBlock(2 * ngf, 2 * ngf, "down", act, adjust_padding=image_size == 28, dilation=4),
            ResidualBlock(2 * ngf, 2 * ngf, None, act, dilation=4),
        )
        self.refine1 = RefineBlock([2 * ngf], 2 * ngf, act, start=True)
        self.refine2 = RefineBlock([2 * ngf, 2 * ngf], 2 * ngf, act)
        self.refine3 = RefineBlock([2 * ngf, 2 * ngf], ngf, act)
        self.refine4 = RefineBlock([ngf, ngf], ngf, act, end=True)
        self.normalizer = InstanceNorm2dPlus(ngf)
        self.end_conv = nn.Conv2d(ngf, in_channels, 3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Compute the noise-level-free output ``h(x)``; the score at noise level sigma is ``h(x) / sigma``.

        :param x: Images of shape (N, C, H, W) with C = ``in_channels``, H = W = ``image_size``, values nominally in
                  [0, 1] (noisy inputs may leave that range).
        :return: ``h(x)``, same shape and dtype as ``x``, unbounded real values. Floating inputs of another dtype
            than the weights (float64, float16) are computed in the weights' dtype and returned in their own; an
            empty batch gives an empty result.
        :raises ValueError: If ``x`` does not have shape (N, C, H, W) with the configured C, H, W, or is not
            floating point.
        """
        c, s = self.in_channels, self.image_size
        if x.dim() != 4 or tuple(x.shape[1:]) != (c, s, s):
            raise ValueError(f"Expected input of shape N x {c} x {s} x {s} (N x C x H x W), got {tuple(x.shape)}.")
        if not torch.is_floating_point(x):
            raise ValueError(f"Expected floating-point images, got {x.dtype}; convert them to float in [0, 1].")
        weight = self.begin_conv.weight
        if x.shape[0] == 0:
            return torch.zeros_like(x)
        if x.dtype != weight.dtype and not _autocast_enabled(x.device.type):
            return self.forward(x.to(weight.dtype)).to(x.dtype)
        h = self.begin_conv(2.0 * x - 1.0)
        layer1 = self.res1(h)
        layer2 = self.res2(layer1)
        layer3 = self.res3(layer2)
        layer4 = self.res4(layer3)
        ref = self.refine1([layer4], layer4.shape[2:])
        ref = self.refine2([layer3, ref], layer3.shape[2:])
        ref = self.refine3([layer2, ref], layer2.shape[2:])
        ref = self.refine4([layer1, ref], layer1.shape[2:])
        return self.end_conv(self.act(self.normalizer(ref)))
