"""Classifier checkpoints (safetensors + JSON header; see :mod:`art_adp.serialization`)."""

from __future__ import annotations

import os

import torch

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
    """Rebuild a classifier saved by :func:`save_classifier`, in eval mode. Never unpickles anything."""
    return load_module(path, ARCHITECTURES, device)[0]
