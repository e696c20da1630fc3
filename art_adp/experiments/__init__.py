"""Deprecated: moved to :mod:`art_adp.apps` (the torchrun helper to :mod:`art_adp.runs.distributed`). Importing still
works, with a ``DeprecationWarning`` (removed in 0.3)."""

import sys

from .._checks import moved_module

_SUB = {f"{__name__}.{m}": f"art_adp.apps.{m}" for m in ("measure", "reproduce", "snapshots")}
sys.modules[__name__] = moved_module(
    __name__,
    "art_adp.apps",
    submodules={
        **_SUB,
        f"{__name__}.corruptions": "art_adp.apps.corruption_table",
        f"{__name__}.distributed": "art_adp.runs.distributed",
    },
)
