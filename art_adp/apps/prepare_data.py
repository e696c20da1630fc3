"""``art-adp prepare-cifar10``: the CIFAR-10 batches every CIFAR-10 run reads, rebuilt from the official archive or a
PNG copy (:func:`art_adp.data.prepare_cifar10`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["prepare_cifar10_command"]

WRITTEN = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")


def prepare_cifar10_command(source: str, *, out: str) -> Path:
    """Write CIFAR-10's "python version" (OUT/cifar-10-batches-py, what --data-root reads) from the official archive
    cifar-10-python.tar.gz, its extracted cifar-10-batches-py folder, or a folder of PNGs train/<class>/<name>.png and
    test/<class>/<name>.png with the official names (the public copy cyizhuo/CIFAR-10-dataset): the same files from
    either. Training: all 50,000 images in one fixed order; test_batch: the development split, the 5,000 test images
    art_adp/cifar10_development.txt names. Prints each file's SHA-256 (docs/cifar10.md lists them)."""
    from ..data import prepare_cifar10

    folder = prepare_cifar10(source, out)
    for name in WRITTEN:
        print(f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}  {folder / name}")
    return folder
