"""The one renderer of every table the commands and the docs write: a markdown table from its header and rows
(:func:`markdown_table`), and the one format of an accuracy in its cells (:func:`accuracy_cell`). The views (the
evaluation card and its comparison, the lever tables, reproduce's table, the rendered docs) choose their columns and
rows; how a table and an accuracy look is decided here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["accuracy_cell", "markdown_table"]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    """The lines of a markdown table: ``header``, its rule, then one line per row (each cell's ``str``).

    :raises ValueError: If a row has another number of cells than the header."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"A table row has {len(row)} cells for {len(header)} columns: {list(row)}.")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return lines


def accuracy_cell(accuracy: float, ci95=None, n: int | None = None, *, precision: str = "fp32") -> str:
    """
    The one format of an accuracy in every table: ``"82.0 [78–85] (500)"`` -- the accuracy in %, its 95 % interval
    in whole % (left out when unknown or NaN) and the images (left out when None), with the gradient passes'
    precision where it is not fp32 (``"(200; bf16 gradient passes)"``).
    """
    text = f"{100 * accuracy:.1f}"
    if ci95 is not None and not any(v != v for v in ci95):
        text += f" [{100 * ci95[0]:.0f}–{100 * ci95[1]:.0f}]"
    more = "" if precision == "fp32" else f"{precision} gradient passes"
    if n is not None or more:
        text += " (" + "; ".join(str(p) for p in (n, more) if p not in (None, "")) + ")"
    return text
