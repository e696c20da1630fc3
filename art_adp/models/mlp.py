"""The simple multilayer perceptron ADP uses as MNIST classifier."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from art_adp._checks import positive_int


class MLP(nn.Module):
    """
    Fully connected ReLU classifier: flatten -> [Linear -> ReLU] x len(hidden) -> Linear(nb_classes).

    The ADP paper (Yoon, Hwang & Lee, ICML 2021, appendix figure "Simple MLP structure for MNIST classifier") gives
    this network only as a figure whose layer sizes are not readable, so the default is the standard MNIST MLP with
    two hidden layers of 512 units (669,706 parameters at the defaults), not a verified copy of the paper's network.

    :param in_channels: Number of input channels C.
    :param image_size: Height and width H = W of the square input images.
    :param nb_classes: Number of classes K.
    :param hidden: Widths of the hidden layers; an empty sequence gives multinomial logistic regression.
    """

    def __init__(
        self, in_channels: int = 1, image_size: int = 28, nb_classes: int = 10, *, hidden: Iterable[int] = (512, 512)
    ) -> None:
        super().__init__()
        in_channels = positive_int("in_channels", in_channels)
        image_size = positive_int("image_size", image_size)
        nb_classes = positive_int("nb_classes", nb_classes)
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Iterable):
            raise ValueError(f"hidden must be a sequence of positive integers, got {hidden!r}")
        hidden = [positive_int(f"hidden[{i}]", h) for i, h in enumerate(hidden)]
        self.config = {"in_channels": in_channels, "image_size": image_size, "nb_classes": nb_classes, "hidden": hidden}

        layers: list[nn.Module] = [nn.Flatten()]
        width = in_channels * image_size * image_size
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, nb_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: Images of shape (N, C, H, W) with values in [0, 1].
        :return: Logits of shape (N, K).
        """
        return self.net(x)
