"""Old run folders into the one record layout (:func:`~art_adp.runs.engine.records`), the one settings guard
(:func:`~art_adp.runs.engine.guard`) and the one folder layout (:func:`~art_adp.runs.records.records_path`), once,
nothing re-measured.

A folder of an earlier layout (:data:`~art_adp.runs.records.OLD_LAYOUT`: a lever table's, ``reproduce``'s,
``evaluate_robustness``'s or the corruption table's ``records.jsonl``; a lever table's ``cells.json``, ``reproduce``'s
``recipe.json``, the certification's ``certify_settings.json``) has them moved to ``records/rank-0.jsonl`` and
``settings.json``, content unchanged.

Records written before the one layout carry what the layout derives -- ``correct`` (right in every judgement) and
``undefended_correct`` (the bare classifier right) -- beside the predictions they were derived from: each is checked
against them and dropped. An evaluation folder written before the one guard names each record's settings by a digest
(``settings``) that its ``settings.json`` maps to the settings: the file is keyed by cell (``"main / clf-pgd"``)
instead, and the digests dropped. The old files are kept beside (``records.jsonl.v0``, ``settings.json.v0``: a
name no reader globs); a field
the old layout never held (the norms of a clean row, say) stays absent: nothing is invented. A record that
contradicts itself, or a digest the settings file does not hold, is refused, naming it: it cannot be converted
without measuring it again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .records import EVALUATION_KEY, OLD_LAYOUT, SETTINGS, old_layout, read_jsonl, record_key

__all__ = ["DERIVED", "migrate", "migrated"]

#: The fields of the old layouts that the one layout derives from ``pred``, ``undefended_pred`` and ``label``.
DERIVED = ("correct", "undefended_correct")


def migrated(record: dict, line: int | None = None) -> dict:
    """``record`` in the one layout: its derived fields checked against its predictions and dropped, and its settings
    digest (kept by the folder's settings file instead, :func:`migrate`).

    :raises ValueError: A derived field without predictions (``pred`` and ``label``) to check it against, or one that
        contradicts them, named by the record's ``line``.
    """
    where = "a record" if line is None else f"line {line}"
    held = [k for k in DERIVED if k in record]
    if held and ("pred" not in record or "label" not in record):
        raise ValueError(f"{where} holds no predictions ({sorted(record)}): it cannot be converted; measure it again.")
    derived = {}
    if held:
        derived["correct"] = bool(record["pred"]) and all(p == record["label"] for p in record["pred"])
    if "undefended_pred" in record and held:
        derived["undefended_correct"] = record["undefended_pred"] == record["label"]
    for k in held:
        if k not in derived or bool(record[k]) != derived[k]:
            raise ValueError(f"{where}: its {k} {record[k]} contradicts its predictions ({record}).")
    return {k: v for k, v in record.items() if k not in DERIVED and not (k == "settings" and _digest(record))}


def _digest(record: dict) -> bool:
    """Whether ``record`` names its settings by digest (an evaluation's record before the one guard), not by value
    (a training curve's record keeps its settings themselves)."""
    return isinstance(record.get("settings"), str) and "setting" in record and "attack" in record


def _settings_by_cell(run_dir: Path, files: dict[Path, list[dict]]) -> dict | None:
    """An evaluation folder's ``settings.json`` keyed by cell instead of by the digests its records name (None: no
    record names one)."""
    digests: dict[str, str] = {}
    for path, held in files.items():
        for i, r in enumerate(held):
            if not _digest(r):
                continue
            key = " / ".join(record_key(r, EVALUATION_KEY[:2]))  # the cell, as settings.json names it
            if digests.setdefault(key, r["settings"]) != r["settings"]:
                raise ValueError(f"{path}: line {i + 1}: {key} names settings {r['settings']}, its other records "
                                 f"{digests[key]}: one cell, one set of settings.")  # fmt: skip
    if not digests:
        return None
    path = run_dir / SETTINGS
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    missing = sorted({d for d in digests.values() if d not in stored})
    if missing:
        raise ValueError(f"{path} holds no settings for the digests {missing} its records name: they cannot be "
                         "converted; measure them again.")  # fmt: skip
    return {key: stored[d] for key, d in sorted(digests.items())}


def _replace(path: Path, text: str, old: Path) -> None:
    """``path`` holds ``text``, its old content kept as ``old``: the new file whole first, then the old one aside."""
    tmp = path.with_name(path.name + ".new.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(path, old)
    os.replace(tmp, path)


def migrate(run_dir: str | os.PathLike) -> dict:
    """
    Convert a run folder's records (``RUN_DIR/*.jsonl``, an evaluation's ``RUN_DIR/records/*.jsonl``) to the one
    record layout, and an evaluation's ``settings.json`` to the one guard's, once, the old files kept beside as
    ``<name>.v0``; a folder already converted is left alone.

    Then the files of an earlier folder layout are moved into the one (:data:`~art_adp.runs.records.OLD_LAYOUT`).

    :return: ``{file: records converted}`` of the files converted (``settings.json``: the cells it now keys), and
        ``{"OLD -> NEW": 1}`` for each file moved into the one folder layout.
    :raises FileNotFoundError: If ``run_dir`` holds no records and no file of an earlier layout.
    :raises ValueError: If a record or the settings cannot be converted (:func:`migrated`), or a file to move would
        replace one of the one layout (the folder holds both); nothing is written then.
    """
    run_dir = Path(run_dir)
    paths = sorted([*run_dir.glob("*.jsonl"), *run_dir.glob("records/*.jsonl")])
    if not paths and not old_layout(run_dir):  # a folder of settings alone (reproduce's, trained only) still moves
        raise FileNotFoundError(f"{run_dir} holds no records (records.jsonl, records/*.jsonl): give a run folder.")
    moves = {run_dir / old: run_dir / OLD_LAYOUT[old] for old in old_layout(run_dir)}
    clash = sorted(str(new.relative_to(run_dir)) for new in moves.values() if new.exists())
    if clash or len(set(moves.values())) < len(moves):
        raise ValueError(f"{run_dir} holds files of both layouts ({', '.join(p.name for p in moves)} and "
                         f"{', '.join(clash) or 'two settings files'}): it mixes runs; keep one of them.")  # fmt: skip
    files = {p: read_jsonl(p) for p in paths}
    by_cell = _settings_by_cell(run_dir, files)
    todo = {}
    for path, held in files.items():
        if any(_digest(r) or any(k in r for k in DERIVED) for r in held):
            try:
                todo[path] = [migrated(r, i + 1) for i, r in enumerate(held)]
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None
    for path, new in todo.items():
        _replace(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in new), path.with_name(path.name + ".v0"))
    done = {str(p.relative_to(run_dir)): len(v) for p, v in todo.items()}
    if by_cell is not None:
        text = json.dumps(by_cell, indent=1, sort_keys=True, ensure_ascii=False)
        _replace(run_dir / SETTINGS, text, run_dir / f"{SETTINGS}.v0")
        done[SETTINGS] = len(by_cell)
    for source, target in moves.items():
        target.parent.mkdir(exist_ok=True)
        os.replace(source, target)
        done[f"{source.name} -> {target.relative_to(run_dir).as_posix()}"] = 1
    return done
