"""Every figure of the package, drawn with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np

__all__ = ["image_grid"]


def image_grid(path: str | os.PathLike, rows: Mapping[str, np.ndarray], *, title: str | None = None) -> None:
    """
    Save a grid of images: one row per entry of ``rows`` (label → ``N×C×H×W`` array in [0, 1]).

    :param path: Output PNG.
    :param rows: Row label → images; every row shows the same number of images.
    :param title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = min(len(v) for v in rows.values())
    fig, axes = plt.subplots(len(rows), n, figsize=(1.0 * n + 1.5, 1.1 * len(rows) + 0.4), squeeze=False)
    for r, (label, images) in enumerate(rows.items()):
        for c in range(n):
            img = np.asarray(images[c]).transpose(1, 2, 0)
            ax = axes[r, c]
            ax.imshow(img.squeeze(-1) if img.shape[-1] == 1 else img, cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
