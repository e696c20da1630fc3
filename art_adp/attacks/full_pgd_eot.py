"""Deprecated: ``FullGradientPGDEOT(...)`` is ``PGDEOT(..., gradient="full")`` (removed in 0.3)."""

from __future__ import annotations

from .._checks import warn_deprecated
from .pgd_eot import PGDEOT

__all__ = ["FullGradientPGDEOT"]


class FullGradientPGDEOT(PGDEOT):
    """Deprecated alias of :class:`~art_adp.attacks.PGDEOT` with ``gradient="full"`` (removed in 0.3)."""

    def __init__(self, estimator, **kwargs) -> None:
        warn_deprecated('FullGradientPGDEOT(...) is deprecated, use PGDEOT(..., gradient="full")')
        super().__init__(estimator, gradient="full", **kwargs)
