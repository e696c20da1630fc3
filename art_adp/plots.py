"""Deprecated: moved to :mod:`art_adp.apps.plots`. Importing still works, with a ``DeprecationWarning`` (removed in 0.3)."""

import sys

from ._checks import moved_module

sys.modules[__name__] = moved_module(__name__, "art_adp.apps.plots")
