"""Classifier checkpoints (safetensors + JSON header; see :mod:`art_adp.serialization`)."""

from __future__ import annotations

import os

import torch

from ..pretrained import bundled_file
from ..serialization import load_module, save_module
from .cnn import DigitsCNN, SmallCNN
from .mlp import MLP
from .wrn import WideResNet

__all__ = ["save_classifier", "load_classifier", "ARCHITECTURES"]

ARCHITECTURES: dict[str, type[torch.nn.Module]] = {c.__name__: c for c in (MLP, SmallCNN, DigitsCNN, WideResNet)}


def save_classifier(model: torch.nn.Module, path: str | os.PathLike, **header) -> None:
    """Save one of this package's classifiers (weights + constructor arguments + extra JSON ``header`` fields)."""
    save_module(model, path, ARCHITECTURES, **header)


def load_classifier(path: str | os.PathLike, device: str | torch.device | None = None) -> torch.nn.Module:
    """Rebuild a classifier saved by :func:`save_classifier`, or one shipped with the package by name (``"digits"``;
    :mod:`art_adp.pretrained`), in eval mode. Never unpickles anything.

    :raises FileNotFoundError: For a path that does not exist and is no bundled name (the message lists the names).
    """
    return load_module(bundled_file(path, "classifier"), ARCHITECTURES, device)[0]
