"""Models shipped inside the package, loaded by name: ``load_score_model("digits")``, ``load_classifier("digits")``.

``bundled.json`` beside this file records, for each name, its files with their SHA-256 and the command that made them
(the package's own training, seeded; ``tests/test_pretrained.py`` hashes the files against it). The ``digits`` pair
is the digits demo's: an NCSNv2(ngf=8) score model and a DigitsCNN trained on scikit-learn's bundled 8×8 digits, small
enough to ship and to run a quickstart on a CPU in seconds. It is a demonstration model, not a robustness claim.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["BUNDLED", "RECORD", "bundled_file"]

HERE = Path(__file__).resolve().parent
RECORD: dict = json.loads((HERE / "bundled.json").read_text())
# name -> kind ("score", "classifier") -> file name inside this folder
BUNDLED: dict[str, dict[str, str]] = {
    name: {kind: entry["file"] for kind, entry in kinds.items()} for name, kinds in RECORD["models"].items()
}


def bundled_file(path_or_name: str | os.PathLike, kind: str) -> Path:
    """
    The file to load for ``path_or_name``: the path itself when it exists, a zoo entry's checked file for
    ``zoo:NAME`` (:func:`art_adp.zoo.zoo_file`), else the bundled model of that name.

    :param path_or_name: A checkpoint path, ``zoo:NAME``, or a bundled name (``"digits"``).
    :param kind: ``"score"`` or ``"classifier"``.
    :raises FileNotFoundError: For a path that does not exist and is no bundled name; the message lists the names.
        For a zoo name that cannot be read (:class:`art_adp.zoo.ZooError`), or that names a model of another kind.
    """
    from .. import zoo

    if (name := zoo.zoo_name(path_or_name)) is not None:
        held = zoo.entry(name).get("kind", "classifier")
        if held != kind:
            raise zoo.ZooError(f"zoo:{name} is a {held} model, not a {kind} model.")
        return zoo.zoo_file(name)
    path = Path(path_or_name)
    if path.exists():
        return path
    name = str(path_or_name)
    if name in BUNDLED and kind in BUNDLED[name]:
        return HERE / BUNDLED[name][kind]
    names = sorted(n for n, kinds in BUNDLED.items() if kind in kinds)
    raise FileNotFoundError(
        f"No checkpoint at {path}, and no bundled {kind} model of that name: give a checkpoint file, or one of the "
        f"bundled names {names}."
    )
