"""Old run folders into the one record layout (:func:`~art_adp.runs.engine.records`), once, nothing re-measured.

Records written before the one layout carry what the layout derives -- ``correct`` (right in every judgement) and
``undefended_correct`` (the bare classifier right) -- beside the predictions they were derived from. :func:`migrate`
checks each against its predictions, drops it, and keeps the old file beside (``records.v0.jsonl``); a field the old
layout never held (the norms of a clean row, say) stays absent: it is not invented. A record that contradicts itself
or holds no predictions is refused, naming its line: it cannot be converted without measuring it again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .records import read_jsonl

__all__ = ["DERIVED", "migrate", "migrated"]

#: The fields of the old layouts that the one layout derives from ``pred``, ``undefended_pred`` and ``label``.
DERIVED = ("correct", "undefended_correct")


def migrated(record: dict, line: int | None = None) -> dict:
    """``record`` in the one layout: its derived fields checked against its predictions and dropped.

    :raises ValueError: A record without predictions (``pred`` and ``label``), or whose derived field contradicts
        them, named by its ``line``.
    """
    where = "a record" if line is None else f"line {line}"
    if "pred" not in record or "label" not in record:
        raise ValueError(f"{where} holds no predictions ({sorted(record)}): it cannot be converted; measure it again.")
    derived = {"correct": bool(record["pred"]) and all(p == record["label"] for p in record["pred"])}
    if "undefended_pred" in record:
        derived["undefended_correct"] = record["undefended_pred"] == record["label"]
    for k in DERIVED:
        if k in record and (k not in derived or bool(record[k]) != derived[k]):
            raise ValueError(f"{where}: its {k} {record[k]} contradicts its predictions ({record}).")
    return {k: v for k, v in record.items() if k not in DERIVED}


def migrate(run_dir: str | os.PathLike) -> dict:
    """
    Convert ``RUN_DIR/records.jsonl`` (and any ``rejudged-*.jsonl`` beside it) to the one record layout once, the
    old file kept as ``<name>.v0.jsonl``; a file already in the layout is left alone.

    :return: ``{file name: records converted}`` of the files converted.
    :raises FileNotFoundError: If ``run_dir`` holds no records.
    :raises ValueError: If a record cannot be converted (:func:`migrated`); nothing is written then.
    """
    run_dir = Path(run_dir)
    files = sorted(p for p in run_dir.glob("*.jsonl") if not p.name.endswith(".v0.jsonl"))
    if not (run_dir / "records.jsonl").exists():
        raise FileNotFoundError(f"{run_dir} holds no records.jsonl: give a run folder of art-adp.")
    todo = {}
    for path in files:
        held = read_jsonl(path)
        if any(k in r for r in held for k in DERIVED):
            try:
                todo[path] = [migrated(r, i + 1) for i, r in enumerate(held)]
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None
    for path, new in todo.items():  # the new file whole first, then the old one aside: a kill leaves one of them
        tmp = path.with_suffix(".new.tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in new), encoding="utf-8")
        os.replace(path, path.with_suffix(".v0.jsonl"))
        os.replace(tmp, path)
    return {p.name: len(v) for p, v in todo.items()}
