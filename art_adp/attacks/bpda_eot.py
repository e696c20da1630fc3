"""Deprecated: ``BPDAEOT(...)`` is ``PGDEOT(..., gradient="bpda")`` (removed in 0.3)."""

from __future__ import annotations

from .._checks import warn_deprecated
from .pgd_eot import AGGREGATES, PGDEOT

__all__ = ["BPDAEOT", "AGGREGATES"]


class BPDAEOT(PGDEOT):
    """Deprecated alias of :class:`~art_adp.attacks.PGDEOT` with ``gradient="bpda"`` (removed in 0.3)."""

    def __init__(self, estimator, **kwargs) -> None:
        warn_deprecated('BPDAEOT(...) is deprecated, use PGDEOT(..., gradient="bpda")')
        super().__init__(estimator, gradient="bpda", **kwargs)
