"""Deprecated: renamed :mod:`art_adp.serialization` ("checkpoint" now means only the safetensors files, never
gradient checkpointing). Importing still works; every name read from here warns (removed in 0.3)."""

from __future__ import annotations

from . import serialization as _serialization
from ._checks import warn_deprecated

__all__ = list(_serialization.__all__)


def __getattr__(name: str):
    if name in _serialization.__all__ or name == "FORMAT":
        warn_deprecated(f"art_adp.checkpoint.{name} is deprecated, use art_adp.serialization.{name}")
        return getattr(_serialization, name)
    raise AttributeError(f"module 'art_adp.checkpoint' has no attribute {name!r}")
