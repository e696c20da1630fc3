"""
``python -m art_adp.evaluate ...`` = ``art-adp evaluate ...``, e.g. ``torchrun --nproc_per_node=2 -m art_adp.evaluate``.

Only an entry point: the function ``art_adp.evaluate`` is :func:`art_adp.evaluation.evaluate`, and the harness
lives in :mod:`art_adp.evaluation` (importing this module by name would shadow that function, so don't).
"""

if __name__ == "__main__":
    import sys

    from art_adp.cli import main

    sys.exit(main(["evaluate", *sys.argv[1:]]))
