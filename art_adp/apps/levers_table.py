"""A lever table from its records: their key (:func:`levers_identity`; the engine derives the same one from a run's
cells), per cell the accuracy (worst of R), its Wilson interval and judgements, and the per-image flags (schema
``art-adp/levers-table/2``); the per-image worst case over attacks from those flags; the markdown view
(:func:`table_markdown`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence


from ..runs.engine import (
    correct,
    worst_case,
)
from ..runs.records import record_key
from ..runs.render import accuracy_cell, markdown_table
from ..runs.statistics import flags_of, per_image, summary

__all__ = [
    "LEVERS_KEY",
    "TABLE_SCHEMA",
    "WORST_CASE",
    "levers_identity",
    "render_levers",
    "table_markdown",
    "worst_over_attacks",
]

#: The fields that identify a lever table's record (:func:`~art_adp.runs.records.record_key`): its cell, then the
#: image; a record without ``classifier`` is the table's own classifier's, one without ``judge`` is judged by the
#: ensemble.
LEVERS_KEY = ("classifier", "model", "setting", "attack", "judge", "index")


def levers_identity(base: str | None) -> Callable[[Mapping], tuple]:
    """A lever table's record key: :func:`~art_adp.runs.records.record_key` at :data:`LEVERS_KEY`, a record without
    ``classifier`` being the table's own classifier's (``base``), one without ``judge`` judged by the ensemble."""
    return functools.partial(record_key, fields=LEVERS_KEY, defaults={"classifier": base, "judge": "ensemble"})


def render_levers(records: list[dict], base: str | None = None) -> dict:
    """
    Per (classifier, score model, setting, attack, judge): accuracy (correct in every judgement: the worst of R),
    n and its Wilson interval; where records hold R ≥ 2 predictions, the mean, worst and majority of R with theirs.
    """
    cells: dict[tuple, list[dict]] = {}
    identity = levers_identity(base)
    for r in records:
        cells.setdefault(identity(r)[:-1], []).append(r)  # the record's cell: its key but the image
    out = []
    for (clf, model, setting, attack, judge), rs in cells.items():
        budgets = sorted({r.get("eot_samples") for r in rs}, key=str)
        if len(budgets) > 1:
            raise ValueError(f"The records of {(clf, model, setting, attack, judge)} mix EOT draws {budgets}: one "
                             "cell, one budget (keep each budget's records in its own run folder).")  # fmt: skip
        last, stats = rs[-1], summary([correct(r) for r in rs], rs)
        cell = {"model": model, "setting": setting, "attack": attack,
                **{k: stats[k] for k in ("accuracy", "n", "ci95")},
                **{k: last[k] for k in ("ensemble_size", "eot_samples", "repeats") if k in last}}  # fmt: skip
        if "classifier" in last:
            cell["classifier"] = clf
        if judge != "ensemble":
            cell["judge"] = judge
        if (last.get("purifier") or {}).get("clip_noise") is False:  # a noisy input left unclipped, said so
            cell["clip_noise"] = False
        if (last.get("options") or {}).get("precision", "fp32") != "fp32":  # the attack's gradient passes, said so
            cell["precision"] = last["options"]["precision"]
        if "judgements" in stats:
            cell["judgements"] = stats["judgements"]
        out.append({**cell, **per_image({r["index"]: correct(r) for r in rs})})
    return {"schema": TABLE_SCHEMA, "cells": out + worst_over_attacks(out, base)}


#: The lever table file's schema: cells with their per-image flags (:func:`~art_adp.runs.statistics.per_image`).
TABLE_SCHEMA = "art-adp/levers-table/2"


#: The column of the per-image worst case over every attack measured on an image (the evaluation's rule: an image
#: counts as robust only if no attack broke it).
WORST_CASE = "worst-case"


def worst_over_attacks(cells: Sequence[Mapping], base: str | None = None) -> list[dict]:
    """
    Per (classifier, score model, setting) with two or more attacks judged on the S-ensemble: the images every one
    of those attacks was measured on, correct only where each attack left them correct (adaptive rows: worst of R),
    from the cells' per-image flags (:func:`~art_adp.runs.statistics.flags_of`), kept in the line too. A line of
    another classifier than ``base`` names it, as its cells do.
    """
    groups: dict[tuple, dict[str, dict[int, bool]]] = {}
    unclipped: set[tuple] = set()
    precisions: dict[tuple, set[str]] = {}
    for c in cells:
        if c["attack"] in ("", "clean", WORST_CASE) or c.get("judge", "ensemble") != "ensemble":
            continue
        key = (c.get("classifier", base), c["model"], c["setting"])
        groups.setdefault(key, {})[c["attack"]] = flags_of(c)
        if c.get("clip_noise") is False:
            unclipped.add(key)
        precisions.setdefault(key, set()).add(c.get("precision", "fp32"))
    out = []
    for (clf, model, setting), by in groups.items():
        found = worst_case(by)
        if found is None:
            continue
        cell = {"model": model, "setting": setting, "attack": WORST_CASE, **summary(found[1]), "attacks": sorted(by),
                **per_image(dict(zip(found[0], found[1].tolist())))}  # fmt: skip
        if (clf, model, setting) in unclipped:
            cell["clip_noise"] = False
        if precisions[clf, model, setting] != {"fp32"}:  # its attacks' gradient passes, said so
            cell["precision"] = " and ".join(sorted(precisions[clf, model, setting]))
        out.append({**cell, "classifier": clf} if clf != base else cell)
    return out


def table_markdown(table: dict) -> str:
    """One line per (classifier, score model, setting), one column per attack and judge: accuracy % [95 % interval]
    (n) (:func:`~art_adp.runs.render.accuracy_cell`; worst of R for the adaptive rows; with R > 2, the worst of the
    first 2 after it)."""
    cols = list(dict.fromkeys((c["attack"], c.get("judge", "ensemble")) for c in table["cells"]))
    groups: dict[tuple, dict] = {}
    for c in table["cells"]:
        clf = c.get("classifier", table.get("classifier", "")) if c["model"] != "none" else c["setting"]
        groups.setdefault((clf, c["model"], c["setting"]), {})[(c["attack"], c.get("judge", "ensemble"))] = c

    def cell(c: dict | None) -> str:
        if c is None:
            return ""
        two = c.get("judgements", {}).get("worst of 2")
        return accuracy_cell(c["accuracy"], c["ci95"], c["n"], precision=c.get("precision", "fp32")) + (
            "" if two is None else f"; worst of 2: {100 * two['accuracy']:.1f}")  # fmt: skip

    head = ["classifier", "score model", "setting", *(a if j == "ensemble" else f"{a} ({j})" for a, j in cols)]
    rows = [[*key, *(cell(by.get(col)) for col in cols)] for key, by in groups.items()]
    return "\n".join(markdown_table(head, rows)) + "\n"
