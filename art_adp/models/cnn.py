"""Small convolutional classifiers: ADP's Fashion-MNIST CNN and a CNN for the 8x8 scikit-learn digits."""

from __future__ import annotations

import torch
from torch import nn

from art_adp._checks import integer, positive_int


class SmallCNN(nn.Module):
    """
    conv5x5(width) -> ReLU -> maxpool2 -> conv5x5(2 width) -> ReLU -> maxpool2 -> FC(fc_width) -> ReLU -> FC(K).

    The ADP paper's Fashion-MNIST classifier: the paper states 5x5 convolutions with stride 1 and padding 2; the
    channel and FC widths are the usual choice for this layout (3,274,634 parameters at the defaults).

    :param in_channels: Number of input channels C.
    :param image_size: Height and width H = W of the square input images (>= 4; each max-pool floors the size).
    :param nb_classes: Number of classes K.
    :param width: Channels of the first convolution; the second has 2 * width.
    :param fc_width: Units of the hidden fully connected layer.
    """

    def __init__(
        self, in_channels: int = 1, image_size: int = 28, nb_classes: int = 10, *, width: int = 32, fc_width: int = 1024
    ) -> None:
        super().__init__()
        in_channels = positive_int("in_channels", in_channels)
        image_size = positive_int("image_size", image_size)
        nb_classes = positive_int("nb_classes", nb_classes)
        width = positive_int("width", width)
        fc_width = positive_int("fc_width", fc_width)
        if image_size < 4:
            raise ValueError(f"image_size must be at least 4 (two 2x2 max-pools), got {image_size}")
        self.config = {
            "in_channels": in_channels,
            "image_size": image_size,
            "nb_classes": nb_classes,
            "width": width,
            "fc_width": fc_width,
        }
        side = image_size // 4
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, width, 5, stride=1, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 5, stride=1, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * width * side * side, fc_width),
            nn.ReLU(),
            nn.Linear(fc_width, nb_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: Images of shape (N, C, H, W) with values in [0, 1].
        :return: Logits of shape (N, K).
        """
        return self.net(x)


class DigitsCNN(nn.Module):
    """
    conv3x3(width) -> ReLU -> conv3x3(2 width) -> ReLU -> maxpool2 -> conv3x3(2 width) -> ReLU -> flatten -> FC(K).

    A small classifier for the 8x8 grey-scale scikit-learn digits (not in the paper; used for fast end-to-end tests).
    All convolutions use padding 1, so the features are 2 width x (H/2) x (H/2) (65,994 parameters at the defaults).

    Arguments are keyword-only.

    :param in_channels: Number of input channels C.
    :param image_size: Height and width H = W of the square input images (>= 2).
    :param nb_classes: Number of classes K.
    :param width: Channels of the first convolution; the others have 2 * width.
    """

    def __init__(self, *, in_channels: int = 1, image_size: int = 8, nb_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        in_channels = positive_int("in_channels", in_channels)
        image_size = integer("image_size", image_size, low=2)
        nb_classes = positive_int("nb_classes", nb_classes)
        width = positive_int("width", width)
        self.config = {"in_channels": in_channels, "image_size": image_size, "nb_classes": nb_classes, "width": width}
        side = image_size // 2
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(2 * width * side * side, nb_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: Images of shape (N, C, H, W) with values in [0, 1] (N, 1, 8, 8 for the digits).
        :return: Logits of shape (N, K).
        """
        return self.net(x)
