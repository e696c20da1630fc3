"""Run records as JSON lines, shared by the evaluation and certification runs: appended atomically as they finish,
read back for resuming, and guarded by the settings that produced them.

A writer's records go out in one ``os.write`` on a file opened for appending, followed by ``fsync``; a process
killed mid-write leaves at most one partial last line, which :func:`read_jsonl` ignores and :func:`append_records`
cuts off (:func:`truncate_torn`) before writing again, so a resumed run has neither duplicated nor missing records.

A run folder keeps the settings its records depend on -- per cell, or one set for the whole folder -- and a run asked
with other settings is refused, naming the settings that differ: both by :func:`guard_settings`, the one writer of a
run's settings file and the one refusal.

Every command's run folder has one layout (:func:`records_path`, :func:`settings_path`, :func:`read_records`): its
records in ``records/rank-<r>.jsonl`` (one file per process: a distributed run's ranks append apart) and its settings
in ``settings.json``. A folder of an earlier layout (:data:`OLD_LAYOUT`) is refused by the writers, naming
``art-adp migrate``, which moves it into this one once; the readers read both.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from ..serialization import file_sha256, module_sha256, weights_sha256  # re-exported: their home is serialization

__all__ = [
    "OLD_LAYOUT",
    "RECORDS",
    "SETTINGS",
    "append_records",
    "array_sha256",
    "canonical",
    "EVALUATION_KEY",
    "describe_differences",
    "file_sha256",
    "guard_settings",
    "held_settings",
    "load_records",
    "module_sha256",
    "old_layout",
    "read_jsonl",
    "read_records",
    "record_files",
    "records_path",
    "settings_path",
    "record_key",
    "truncate_torn",
    "weights_sha256",
    "write_json",
]


#: The fields that identify an evaluation record (``art-adp evaluate``'s records, :func:`load_records`' keys).
EVALUATION_KEY = ("setting", "attack", "index")


def record_key(record: Mapping[str, Any], fields: Sequence[str], defaults: Mapping[str, Any] | None = None) -> tuple:
    """
    The identity of a record in a run folder, every command's: its values of ``fields``, in order (a resumed run skips
    a record whose key is on file). Each command's key shape is data: :data:`EVALUATION_KEY`, the engine's
    ``evaluate_robustness`` ``("attack", "index")``, the lever tables' ``(classifier, model, setting, attack, judge,
    index)``, ``reproduce``'s, the corruption table's, the diagnostics'.

    A list (JSON's tuple: a re-judgement's ``cell``) comes back as a tuple, so that the key can be looked up.

    :param defaults: The value of a field a record lacks (one written before the field existed, or one its writer leaves
        out at its usual value); a field neither in the record nor here raises ``KeyError``.
    """
    defaults = defaults or {}
    values = (record[f] if f in record or f not in defaults else defaults[f] for f in fields)
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)  # a JSON list (a cell's key) as a tuple


def _complete_prefix(data: bytes) -> int:
    """Length in bytes of the complete lines (everything up to the last newline)."""
    return data.rfind(b"\n") + 1


def truncate_torn(path: str | os.PathLike) -> int:
    """
    Cut a partial last line (a writer killed mid-line) off the file at ``path``, if any.

    :return: Bytes removed (0 when the file is whole or absent).
    """
    path = Path(path)
    if not path.exists():
        return 0
    size = path.stat().st_size
    keep = _complete_prefix(path.read_bytes())
    if keep != size:
        os.truncate(path, keep)
    return size - keep


def append_records(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append ``records`` to the JSONL file at ``path`` in one write (creating folders and the file), after
    cutting off a torn last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()
    if not payload:
        return
    truncate_torn(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The complete records of a JSONL file (a partial last line is ignored; an absent file gives [])."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    text = data[: _complete_prefix(data)].decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


#: A run folder's records (one file per process, ``rank-<r>.jsonl``) and its settings file, every command's.
RECORDS = "records"
SETTINGS = "settings.json"
#: The files of the layouts before the one, by the name :func:`~art_adp.runs.migrate.migrate` gives them in it: the
#: records of a lever table, of ``reproduce``, of ``evaluate_robustness`` and of the corruption table
#: (``records.jsonl``), and the settings of a lever table (``cells.json``), of ``reproduce`` (``recipe.json``) and of
#: the certification (``certify_settings.json``).
OLD_LAYOUT: Mapping[str, str] = MappingProxyType(
    {
        "records.jsonl": f"{RECORDS}/rank-0.jsonl",
        "cells.json": SETTINGS,
        "recipe.json": SETTINGS,
        "certify_settings.json": SETTINGS,
    }
)


def old_layout(run_dir: str | os.PathLike) -> list[str]:
    """The files of an earlier layout (:data:`OLD_LAYOUT`) that ``run_dir`` holds."""
    return [name for name in OLD_LAYOUT if (Path(run_dir) / name).exists()]


def _refuse_old(run_dir: Path) -> None:
    old = old_layout(run_dir)
    if old:
        raise ValueError(
            f"{run_dir} holds a run written in an earlier folder layout ({', '.join(old)}): move it into the one "
            f"layout once with `art-adp migrate {run_dir}` (records into {RECORDS}/, settings into {SETTINGS}; "
            "nothing is measured again), then run again."
        )


def records_path(run_dir: str | os.PathLike, rank: int = 0) -> Path:
    """The records file this process appends to, ``RUN_DIR/records/rank-<rank>.jsonl``.

    :raises ValueError: If ``run_dir`` holds a run of an earlier layout (:func:`old_layout`), naming ``art-adp
        migrate``.
    """
    run_dir = Path(run_dir)
    _refuse_old(run_dir)
    return run_dir / RECORDS / f"rank-{rank}.jsonl"


def settings_path(run_dir: str | os.PathLike) -> Path:
    """The run folder's settings file, ``RUN_DIR/settings.json`` (:func:`guard_settings` writes and guards it).

    :raises ValueError: As :func:`records_path`.
    """
    run_dir = Path(run_dir)
    _refuse_old(run_dir)
    return run_dir / SETTINGS


def held_settings(run_dir: str | os.PathLike) -> Path | None:
    """A reader's settings file of a run folder in either layout: ``settings.json``, else an earlier layout's
    (:data:`OLD_LAYOUT`); None where it holds none."""
    names = [SETTINGS, *(n for n, new in OLD_LAYOUT.items() if new == SETTINGS)]
    return next((Path(run_dir) / n for n in names if (Path(run_dir) / n).is_file()), None)


def record_files(run_dir: str | os.PathLike) -> list[Path]:
    """A run folder's records files, its processes' in order (``rank-0`` first), then the one of an earlier layout
    where it holds one (a reader, unlike a writer, takes both)."""
    run_dir = Path(run_dir)
    files = sorted((run_dir / RECORDS).glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    return [*files, *(p for p in [run_dir / "records.jsonl"] if p.exists())]


def read_records(run_dir: str | os.PathLike) -> list[dict]:
    """Every complete record of a run folder (:func:`record_files`)."""
    return [r for path in record_files(run_dir) for r in read_jsonl(path)]


def load_records(paths: Iterable[str | os.PathLike]) -> dict[tuple, dict]:
    """
    Read complete evaluation records from JSONL files, keyed by :func:`record_key` (:data:`EVALUATION_KEY`).

    :raises ValueError: If two files disagree on the same key (records from different settings mixed in one
        run folder).
    """
    out: dict[tuple, dict] = {}
    for path in paths:
        for record in read_jsonl(path):
            key = record_key(record, EVALUATION_KEY)
            if key in out and out[key] != record:
                raise ValueError(
                    f"Conflicting records for {key} in {path}; the run folder mixes evaluations with "
                    "different settings: use a new --run-dir."
                )
            out[key] = record
    return out


def canonical(value: Any) -> Any:
    """JSON-able form of a settings value (tuples as lists, numpy scalars as Python numbers, inf as "inf")."""
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def array_sha256(*arrays: np.ndarray) -> str:
    """SHA-256 of arrays' shapes, dtypes and bytes (the data an evaluation ran on)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix: value}


def describe_differences(old: Mapping, new: Mapping) -> str:
    """``"eps 0.1 (now 0.2), budget.iterations 10 (now 20)"``: the settings that differ, dotted paths."""
    a, b = _flatten(canonical(old)), _flatten(canonical(new))
    parts = [
        f"{k} {a.get(k, '(unset)')} (now {b.get(k, '(unset)')})"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]
    return ", ".join(parts)


def write_json(path: str | os.PathLike, obj: Any, **dumps) -> Path:
    """Write ``obj`` as JSON (``json.dumps(obj, **dumps)``, UTF-8) to ``path`` atomically: into a temporary file beside
    it, then ``os.replace``, so a process killed mid-write leaves the old file or the new one, never a torn one. The
    one way a run folder's JSON files (tables, reports, settings, estimates) are written; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, **dumps), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def guard_settings(path: str | os.PathLike, settings: Mapping, *, what: str | None = None,
                   defaults: Mapping | None = None, write: bool = True,
                   held: Mapping | None = None) -> dict:  # fmt: skip
    """
    The one settings guard of every run folder, and the one writer of its settings file: a run's settings are kept in
    the JSON file at ``path``, and a later run asked with other settings is refused before anything runs, naming the
    settings that differ. Two shapes of file, as folders have held them:

    - keyed (``what`` None; the engine's plans through :func:`art_adp.runs.engine.guard`: ``evaluate``'s, the lever
      tables' and ``evaluate_robustness``'s): ``settings``
      maps each cell's key (``"main / clf-pgd"``) to its settings; a cell on file with other settings is refused, the
      settings of new cells are added;
    - one set for the whole folder (``what`` names what it holds: ``"the certificates"``, ``"the corruption
      table"``, ``"the recipe"``): the first run writes ``settings``, a later run with others is refused.

    :param path: The settings file (:func:`settings_path`); its folder is the run folder.
    :param settings: This run's settings (JSON-able; tuples are stored as lists), or each cell's, by key.
    :param what: What a one-set folder holds, for the message; None: ``settings`` is keyed by cell.
    :param defaults: Values of settings a stored one-set file may predate (read as these when absent from it).
    :param write: False to check only (the other ranks of a distributed run, a resume's check).
    :param held: Keyed settings to check ``settings`` against instead of the file's, nothing written: what a folder's
        records hold for cells its settings file does not (records older than the file; :func:`~art_adp.runs.engine.
        guard`).
    :return: The settings as stored (keyed: every cell's on file).
    :raises ValueError: ``RUN_DIR holds records for LABEL made with other settings: eps 0.1 (now 0.2). Use another
        run folder (--run-dir), or the same settings to resume.`` (``LABEL``: ``what``, or the cell's key).
    """
    path = Path(path)
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() and held is None else held
    write = write and held is None
    if what is None:
        held, mine = stored or {}, {key: canonical(s) for key, s in settings.items()}
    else:  # one set: the file's content is the one "cell"
        held = {} if stored is None else {what: {**canonical(defaults or {}), **stored}}
        mine = {what: canonical(settings)}
    for key, s in mine.items():
        if key in held and held[key] != s:
            raise ValueError(
                f"{path.parent} holds records for {key} made with other settings: "
                f"{describe_differences(held[key], s)}. Use another run folder (--run-dir), or the same settings to "
                "resume."
            )
    if write and any(held.get(k) != v for k, v in mine.items()):  # each shape byte for byte as folders have held it
        body = {**held, **mine} if what is None else mine[what]
        write_json(path, body, indent=1, sort_keys=True, ensure_ascii=what is not None)
    return {**held, **mine} if what is None else mine[what]
