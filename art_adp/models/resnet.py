"""The CIFAR ResNets of He et al. (2016, §4.2): ResNet-20/32/44/56, the small classifiers of CIFAR-10 benchmarks.

Parameter names are those of the widely used reference implementation (``akamaster/pytorch_resnet_cifar10``:
``conv1``, ``bn1``, ``layer{1,2,3}.{i}.conv1/bn1/conv2/bn2``, ``linear``), so its published state dicts load
into :class:`CifarResNet` once their ``module.`` prefix is stripped; the input standardisation those were trained
with is part of the model here (``mean``, ``std``: not in the state dict).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from art_adp._checks import positive_int

#: CIFAR-10's per-channel mean and standard deviation of the training images, on [0, 1] pixels.
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class _Block(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut (option A: subsample and zero-pad the channels), then ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.pad = (planes - in_planes) // 2 if stride != 1 or in_planes != planes else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        shortcut = x if self.pad is None else F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))
        return F.relu(out + shortcut)


class CifarResNet(nn.Module):
    """
    ResNet-``depth`` for 32×32 images: conv3x3(16)-BN-ReLU, three stages of (depth − 2)/6 basic blocks with 16, 32
    and 64 channels (strides 1, 2, 2; option-A shortcuts, parameter-free), global average pooling, FC(K).
    ResNet-20 has 269,722 parameters for ten classes.

    :param in_channels: Input channels C.
    :param image_size: Height and width of the square inputs (recorded; global pooling takes any size).
    :param nb_classes: Classes K.
    :param depth: 20, 32, 44, 56, ... ((depth − 2) a multiple of 6).
    :param mean: Per-channel mean subtracted from the [0, 1] input before the first convolution (None: none).
    :param std: Per-channel standard deviation it is divided by (given with ``mean``).
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        *,
        in_channels: int = 3,
        image_size: int = 32,
        nb_classes: int = 10,
        depth: int = 20,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        depth = positive_int("depth", depth)
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth must satisfy (depth - 2) % 6 == 0 with depth >= 8 (20, 32, 44, 56), got {depth}")
        if (mean is None) != (std is None):
            raise ValueError("mean and std must be given together (the input standardisation), or neither.")
        channels = positive_int("in_channels", in_channels)
        mean_t = torch.zeros(channels) if mean is None else torch.as_tensor(mean, dtype=torch.float32).flatten()
        std_t = torch.ones(channels) if std is None else torch.as_tensor(std, dtype=torch.float32).flatten()
        if len(mean_t) != channels or len(std_t) != channels or not bool((std_t > 0).all()):
            raise ValueError(f"mean and std must hold {channels} values each (one per channel), std > 0.")
        self.config = {
            "in_channels": channels,
            "image_size": positive_int("image_size", image_size),
            "nb_classes": positive_int("nb_classes", nb_classes),
            "depth": depth,
            "mean": None if mean is None else [float(v) for v in mean_t],
            "std": None if std is None else [float(v) for v in std_t],
        }
        self.register_buffer("mean", mean_t.view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", std_t.view(1, -1, 1, 1), persistent=False)
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        widths, stages, in_planes = (16, 32, 64), [], 16
        for width, stride in zip(widths, (1, 2, 2)):
            blocks = []
            for i in range(n):
                blocks.append(_Block(in_planes, width, stride if i == 0 else 1))
                in_planes = width
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.linear = nn.Linear(64, positive_int("nb_classes", nb_classes))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: Images ``N×C×H×W`` in [0, 1].
        :return: Logits ``N×K``.
        """
        out = F.relu(self.bn1(self.conv1((x - self.mean) / self.std)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.linear(out.mean((2, 3)))
