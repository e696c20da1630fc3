"""The statistics of every accuracy the applications report: the one interval of an accuracy (:func:`wilson`), the
three judgements of R predictions per image (mean, worst case, majority vote), and the one summary of a cell's records
that every table and card reports (:func:`summary`). Certification keeps its own exact (Clopper-Pearson) bound
(:mod:`art_adp.certification`), which its guarantee needs."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["LEVEL", "flags_of", "judgements", "majority_correct", "per_image", "summary", "wilson"]

LEVEL = 0.95


def wilson(p: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval for a proportion ``p`` over ``n`` examples (``p·n`` need not be an integer; ``(nan,
    nan)`` for n = 0). The one interval of every accuracy the applications report: a count (worst of R, majority of
    R, the undefended model) and a fractional mean over R alike (``tests/test_layering.py`` finds a second)."""
    from scipy.stats import norm

    if n == 0:
        return math.nan, math.nan
    z = float(norm.ppf(1 - (1 - level) / 2))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def majority_correct(preds: list[int], label: int) -> bool:
    """The label is the unique most frequent of the R predictions (a tie counts against the defence)."""
    values, counts = np.unique(preds, return_counts=True)
    top = counts.max()
    return bool(counts[values == label].sum() == top and (counts == top).sum() == 1)


def judgements(rows: list[dict]) -> dict[str, float]:
    """
    The three judgements of R predictions per example (each row: ``pred``, the R predictions, and ``label``): the
    mean over examples and R, the worst case over R (correct in all R), the majority vote over R; with R > 2, also
    the worst case over the first two (``"worst of 2"``: what a table judged worst of R = 2 would say).
    """
    correct = np.array([[p == r["label"] for p in r["pred"]] for r in rows], dtype=bool)
    out = {
        "mean": float(correct.mean()),
        "worst": float(correct.all(1).mean()),
        "majority": float(np.mean([majority_correct(r["pred"], r["label"]) for r in rows])),
    }
    if correct.shape[1] > 2:
        out["worst of 2"] = float(correct[:, :2].all(1).mean())
    return out


def summary(correct, rows=None) -> dict:
    """
    The one summary of a cell: ``accuracy`` -- the share of ``correct`` (per image: right in every judgement, the
    worst of R; or a per-image worst case over attacks) -- ``n`` and its Wilson ``ci95``; where every one of the
    cell's ``rows`` (records with ``pred``, the R predictions, and ``label``) holds R ≥ 2 predictions,
    ``judgements``: :func:`judgements`' mean, worst and majority of R (and worst of 2), each with its ``accuracy``
    and ``ci95``.
    """
    n = len(correct)
    p = float(np.mean(correct)) if n else float("nan")
    out = {"accuracy": p, "n": n, "ci95": list(wilson(p, n))}
    if rows and all(len(r.get("pred", ())) >= 2 and "label" in r for r in rows):
        out["judgements"] = {k: {"accuracy": v, "ci95": list(wilson(v, n))} for k, v in judgements(rows).items()}
    return out


def per_image(correct: Mapping[int, bool]) -> dict:
    """A cell's per-image flags as a table keeps them: ``images``, the image indices as ``[start, stop)`` runs, and
    ``flags``, one character per image in that order (``"1"``: right in every judgement), so that a per-image worst
    case over cells needs the table only, not its records."""
    order = sorted(int(i) for i in correct)
    runs: list[list[int]] = []
    for i in order:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return {"images": runs, "flags": "".join("1" if correct[i] else "0" for i in order)}


def flags_of(cell: Mapping) -> dict[int, bool]:
    """The per-image flags a table's cell keeps (:func:`per_image`): image index → right in every judgement."""
    order = [i for start, stop in cell["images"] for i in range(start, stop)]
    if len(order) != len(cell["flags"]):
        raise ValueError(f"A cell's flags ({len(cell['flags'])}) do not match its images ({len(order)}).")
    return {i: f == "1" for i, f in zip(order, cell["flags"])}
