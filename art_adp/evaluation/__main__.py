"""``python -m art_adp.evaluation ...`` = ``art-adp evaluate ...`` (the entry point for torchrun)."""

import sys

from ..cli import main

sys.exit(main(["evaluate", *sys.argv[1:]]))
