"""Purifier families side by side: one table from the evaluation cards of ADP, reverse diffusion and denoised
smoothing run on the same data, classifier, attacks and budgets (``art-adp evaluate --purifier adp,reverse-diffusion,
denoised-smoothing``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ...runs.render import accuracy_cell, markdown_table
from .config import PURIFIERS, budget_fields
from .report import LABELS, header
from ...runs.records import write_json

__all__ = ["FAMILIES", "compare", "markdown", "write"]

FAMILIES = PURIFIERS
SCHEMA = "art-adp/purifier-comparison/1"


def compare(cards: Mapping[str, dict]) -> dict:
    """
    The side-by-side result of evaluation cards (family name → the card :func:`~art_adp.apps.evaluation.evaluate`
    returned), which must share the data, classifier, threat model and budgets.

    :raises ValueError: When the cards differ in anything but the defence.
    """
    if not cards:
        raise ValueError("compare needs at least one evaluation card.")
    first = next(iter(cards.values()))
    shared = ("config", "scale", "shortfalls")
    for name, card in cards.items():
        for key in shared:
            if card[key] != first[key]:
                raise ValueError(f"The card of {name!r} differs from the others in {key!r}: compare like with like.")
    attacks = [r["attack"] for r in first["card"]]
    rows = {
        name: {
            "purifier": card.get("purifier", "ADP"),
            "defence": card["description"].get("Defence", ""),
            "attacks": {
                r["attack"]: {k: r[k] for k in ("mean", "worst", "majority", "fixed") if k in r} for r in card["card"]
            },
            "sanity": card["sanity"].get("verdict"),
            "seconds": sum(card["seconds"].values()),
        }
        for name, card in cards.items()
    }
    undefended = {r["attack"]: r.get("baselines", {}).get("undefended") for r in first["card"]}
    shared_header = {**first, "compression": None}  # the compression rate belongs to one purifier, not to all
    shared_header["description"] = {k: v for k, v in first["description"].items() if k != "Defence"}
    return {
        "schema": SCHEMA,
        "families": list(cards),
        "attacks": attacks,
        "budgets": {r["attack"]: r["budget"] for r in first["card"]},
        "header": header(shared_header),
        "undefended": undefended,
        "rows": rows,
        "budget_fields": {a: list(budget_fields(a)) for a in attacks},
    }


def _cell(stat: dict | None) -> str:
    """A comparison's accuracy (:func:`~art_adp.runs.render.accuracy_cell`, without its interval: each card has it)."""
    return "-" if stat is None else accuracy_cell(stat["value"])


def markdown(result: dict) -> str:
    """The comparison as markdown: the shared header, one row per family and attack (mean, worst of R, majority of R,
    fixed noise), then each family's defence in words."""
    lines = [*result["header"], ""]
    cols = ["Purifier", "Attack", "Budget", "mean", "worst of R", "majority of R", "fixed noise"]
    table = [["Undefended", LABELS[a], result["budgets"][a], _cell(result["undefended"][a]), "", "", ""]
             for a in result["attacks"] if result["undefended"].get(a) is not None]  # fmt: skip
    for name in result["families"]:
        row = result["rows"][name]
        table += [[row["purifier"], LABELS[a], result["budgets"][a],
                   *(_cell(row["attacks"][a].get(k)) for k in ("mean", "worst", "majority", "fixed"))]
                  for a in result["attacks"]]  # fmt: skip
    lines += markdown_table(cols, table)
    lines.append("")
    lines.append(
        "Accuracy in % on the same examples (the undefended classifier attacked directly, judged once); mean over "
        "examples and R judgements; worst = correct in all R; majority = the majority vote of the R; fixed = one "
        "frozen noise draw shared by the attack (EOT 1) and the judge. Each family's own card (report.md in its run "
        "folder; <run-dir>/<family> from the command line) gives the confidence intervals and the sanity report."
    )
    lines += [
        f"- {result['rows'][n]['purifier']}: {result['rows'][n]['defence']} ({result['rows'][n]['seconds']:.0f} s)"
        for n in result["families"]
    ]
    return "\n".join(lines) + "\n"


def write(result: dict, run_dir: str | os.PathLike) -> None:
    """``comparison.json`` and ``comparison.md`` in ``run_dir``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "comparison.json", result, indent=2)
    (run_dir / "comparison.md").write_text(markdown(result))
