"""Moved to :mod:`art_adp._checks` (one checks module for the whole library); kept for old imports."""

from art_adp._checks import positive_int

__all__ = ["positive_int"]
