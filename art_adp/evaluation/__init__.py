"""Deprecated: moved to :mod:`art_adp.apps.evaluation` (the records to :mod:`art_adp.runs.records`). Importing still
works, with a ``DeprecationWarning`` (removed in 0.3)."""

import sys

from .._checks import moved_module

_SUB = {f"{__name__}.{m}": f"art_adp.apps.evaluation.{m}" for m in ("config", "report", "run", "sanity")}
sys.modules[__name__] = moved_module(
    __name__, "art_adp.apps.evaluation", submodules={**_SUB, f"{__name__}.records": "art_adp.runs.records"}
)
