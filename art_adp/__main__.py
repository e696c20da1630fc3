"""``python -m art_adp …`` is ``art-adp …``; under torchrun: ``torchrun --nproc_per_node=N -m art_adp evaluate …``."""

import sys

from .apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
