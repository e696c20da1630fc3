"""Wide residual network (Zagoruyko & Komodakis, 2016), ADP's CIFAR-10 classifier (WRN-28-10)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from art_adp._checks import number, positive_int


class _Block(nn.Module):
    """Pre-activation basic block: BN-ReLU-conv3x3(stride) -> BN-ReLU-dropout-conv3x3, plus a shortcut."""

    def __init__(self, in_planes: int, out_planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.dropout = dropout
        # 1x1 projection on the pre-activated input when the shape changes, identity otherwise.
        same = in_planes == out_planes and stride == 1
        self.shortcut = None if same else nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(out)
        out = F.relu(self.bn2(self.conv1(out)))
        out = F.dropout(out, p=self.dropout, training=self.training)
        return self.conv2(out) + shortcut


class WideResNet(nn.Module):
    """
    WRN-depth-k: conv3x3(16) -> 3 groups of (depth - 4) / 6 pre-activation basic blocks with 16k, 32k, 64k channels
    (strides 1, 2, 2) -> BN-ReLU -> global average pooling (the 8x8 average pool for 32x32 inputs) -> FC(K).

    WRN-28-10 (widths 16, 160, 320, 640) has 36,479,194 parameters for 10 classes, the 36.5 M of the ADP paper.
    Convolutions have no bias; initialisation is He-normal (fan-out) for convolutions, BN weight 1 and bias 0,
    linear bias 0.

    Arguments are keyword-only, in the order every classifier of :mod:`art_adp.models` shares (``in_channels``,
    ``image_size``, ``nb_classes``).

    :param in_channels: Number of input channels C.
    :param image_size: Height and width H = W of the square input images (recorded; global pooling takes any size).
    :param nb_classes: Number of classes K.
    :param depth: Network depth; (depth - 4) must be a positive multiple of 6.
    :param widen_factor: Width multiplier k.
    :param dropout: Dropout probability in [0, 1) between the two convolutions of each block.
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        image_size: int = 32,
        nb_classes: int = 10,
        depth: int = 28,
        widen_factor: int = 10,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        depth = positive_int("depth", depth)
        if depth < 10 or (depth - 4) % 6 != 0:
            raise ValueError(
                f"depth must satisfy (depth - 4) % 6 == 0 with depth >= 10 (10, 16, 22, 28, ...), got {depth}"
            )
        widen_factor = positive_int("widen_factor", widen_factor)
        nb_classes = positive_int("nb_classes", nb_classes)
        in_channels = positive_int("in_channels", in_channels)
        image_size = positive_int("image_size", image_size)
        dropout = number("dropout", dropout, low=0, high=1, high_open=True)
        self.config = {
            "in_channels": in_channels,
            "image_size": image_size,
            "nb_classes": nb_classes,
            "depth": depth,
            "widen_factor": widen_factor,
            "dropout": dropout,
        }

        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)]
        for g, stride in enumerate((1, 2, 2)):
            layers += [
                _Block(widths[g] if i == 0 else widths[g + 1], widths[g + 1], stride if i == 0 else 1, dropout)
                for i in range(n)
            ]
        layers += [
            nn.BatchNorm2d(widths[3]),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(widths[3], nb_classes),
        ]
        self.net = nn.Sequential(*layers)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: Images of shape (N, C, H, W) with values in [0, 1] (32x32 for CIFAR).
        :return: Logits of shape (N, K).
        """
        return self.net(x)
