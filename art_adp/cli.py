"""Deprecated: moved to :mod:`art_adp.apps.cli` (``art-adp`` and ``python -m art_adp`` run it). Importing still
works, with a ``DeprecationWarning`` (removed in 0.3); ``python -m art_adp.cli`` still runs the command line."""

import sys

if __name__ == "__main__":
    from art_adp.apps.cli import main

    sys.exit(main())
else:
    from ._checks import moved_module

    sys.modules[__name__] = moved_module(__name__, "art_adp.apps.cli")
