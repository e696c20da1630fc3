"""Every figure of the package, drawn with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

__all__ = ["image_grid", "sweep_curve", "certified_accuracy_curve", "score_norm_histogram"]


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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sweep_curve(
    path: str | os.PathLike, xs, curves: Mapping[str, list[float]], *, xlabel: str, title: str | None = None
) -> None:
    """
    Save accuracy curves over a swept parameter (the paper's Tables 5 and 6 as plots).

    :param xs: Swept values.
    :param curves: Curve label → accuracies in [0, 1], one per value of ``xs``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, ys in curves.items():
        ax.plot(xs, [100 * v for v in ys], "o-", label=label)
    _save_percent_plot(plt, fig, ax, path, xlabel=xlabel, ylabel="accuracy (%)", title=title, title_size=10)


def certified_accuracy_curve(
    path: str | os.PathLike, curves: Mapping[str, Mapping[str, tuple]], *, title: str | None = None
) -> None:
    """
    Save certified accuracy against ℓ₂ radius: one colour per σ, one line style per variant.

    :param path: Output PNG.
    :param curves: σ label → {variant label (e.g. ``"CERTIFY"``, ``"approximate"``) → (radii, accuracies in
        [0, 1])}.
    :param title: Figure title.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = ["-", "--", ":", "-."]
    for k, (sigma, variants) in enumerate(curves.items()):
        for j, (variant, (radii, acc)) in enumerate(variants.items()):
            ax.plot(
                radii, 100 * np.asarray(acc), styles[j % len(styles)], color=f"C{k}", label=f"σ = {sigma}, {variant}"
            )
    _save_percent_plot(
        plt, fig, ax, path, xlabel="ℓ₂ radius", ylabel="certified accuracy (%)", title=title, title_size=9
    )


def _save_percent_plot(plt, fig, ax, path, *, xlabel: str, ylabel: str, title: str | None, title_size: int) -> None:
    """Label a 0–100 % line plot, add grid and legend, save it as PNG and close it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=title_size)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def score_norm_histogram(
    path: str | os.PathLike,
    norms: Mapping[str, np.ndarray],
    *,
    threshold: float | None = None,
    title: str | None = None,
) -> None:
    """
    Save overlaid density histograms of score norms ‖h(x)‖₂ (the ADP paper's score-norm figure).

    :param path: Output PNG.
    :param norms: Label (e.g. ``"natural"``, ``"adversarial"``, ``"pur_a"``) → 1-D array of score norms.
    :param threshold: Detection threshold, drawn as a vertical line.
    :param title: Figure title.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    values = np.concatenate([np.asarray(v, dtype=float) for v in norms.values()])
    bins = np.linspace(values.min(), values.max(), 40)
    for label, v in norms.items():
        ax.hist(np.asarray(v, dtype=float), bins=bins, density=True, alpha=0.45, label=label)
    if threshold is not None:
        ax.axvline(threshold, color="k", linestyle="--", label=f"threshold {threshold:.3g}")
    ax.set_xlabel("score norm ‖h(x)‖₂")
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def accuracy_vs_eps(
    path: str | os.PathLike, curves: Mapping[str, list[tuple[float, float, float, float]]], *, title: str | None = None
) -> None:
    """
    Save accuracy against the attack radius ε with confidence intervals as error bars.

    :param curves: Curve label → ``(eps, accuracy, ci_low, ci_high)`` points, accuracies in [0, 1].
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (label, points) in enumerate(curves.items()):
        eps, acc, lo, hi = (np.asarray(v, dtype=float) for v in zip(*points))
        yerr = 100 * np.clip([acc - lo, hi - acc], 0, None)  # float rounding at 0 % and 100 %
        ax.errorbar(eps, 100 * acc, yerr=yerr, fmt="o-" if k < 3 else "s--", capsize=3, label=label)
    _save_percent_plot(plt, fig, ax, path, xlabel="eps", ylabel="accuracy (%)", title=title, title_size=9)
