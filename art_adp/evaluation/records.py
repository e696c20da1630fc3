"""Per-example evaluation records as JSON lines: appended atomically as they finish, read back for resuming.

One record per (setting, attack, example). A chunk's records go out in one ``os.write`` on a file opened for
appending, followed by ``fsync``; a process killed mid-write leaves at most one partial last line, which
:func:`load_records` ignores and :func:`append_records` cuts off before writing again, so a resumed run has
neither duplicated nor missing records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

__all__ = ["append_records", "load_records", "record_key"]


def record_key(record: dict) -> tuple[str, str, int]:
    """The identity of a record: (setting, attack, example index)."""
    return record["setting"], record["attack"], int(record["index"])


def _complete_prefix(path: Path) -> int:
    """Length in bytes of the file's complete lines (everything up to the last newline)."""
    data = path.read_bytes()
    return data.rfind(b"\n") + 1


def append_records(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append ``records`` to the JSONL file at ``path`` in one write (creating folders and the file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()
    if not payload:
        return
    if path.exists():
        keep = _complete_prefix(path)
        if keep != path.stat().st_size:  # a killed writer's partial line
            os.truncate(path, keep)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_records(paths: Iterable[str | os.PathLike]) -> dict[tuple[str, str, int], dict]:
    """
    Read complete records from JSONL files (a partial last line is ignored), keyed by :func:`record_key`.

    :raises ValueError: If two files disagree on the same key (records from different settings mixed in one
        run folder).
    """
    out: dict[tuple[str, str, int], dict] = {}
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        text = path.read_bytes()[: _complete_prefix(path)].decode()
        for line in text.splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            key = record_key(record)
            if key in out and out[key] != record:
                raise ValueError(f"Conflicting records for {key} in {path}; the run folder mixes evaluations with "
                                 "different settings: use a new --run-dir.")
            out[key] = record
    return out
