"""Classifier checkpoints (safetensors + JSON header; see :mod:`art_adp.serialization`)."""

from __future__ import annotations

import functools
import os

import torch

from ..serialization import load_module, save_module
from .cnn import DigitsCNN, SmallCNN
from .mlp import MLP
from .wrn import WideResNet

__all__ = ["save_classifier", "load_classifier", "ARCHITECTURES"]

ARCHITECTURES: dict[str, type[torch.nn.Module]] = {c.__name__: c for c in (MLP, SmallCNN, DigitsCNN, WideResNet)}
OLD_CONFIG_KEYS = {"num_classes": "nb_classes"}  # files written before 0.2 name the class count num_classes


def _build(cls: type[torch.nn.Module], **config) -> torch.nn.Module:
    """``cls(**config)`` with the config keys of older files renamed (silently: the file is not the caller's code)."""
    return cls(**{OLD_CONFIG_KEYS.get(k, k): v for k, v in config.items()})


_LOADERS = {name: functools.partial(_build, cls) for name, cls in ARCHITECTURES.items()}


def save_classifier(model: torch.nn.Module, path: str | os.PathLike, **header) -> None:
    """Save one of this package's classifiers (weights + constructor arguments + extra JSON ``header`` fields)."""
    save_module(model, path, ARCHITECTURES, **header)


def load_classifier(path: str | os.PathLike, device: str | torch.device | None = None) -> torch.nn.Module:
    """Rebuild a classifier saved by :func:`save_classifier`, in eval mode. Never unpickles anything."""
    return load_module(path, _LOADERS, device)[0]
