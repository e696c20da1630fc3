"""Copy a result a command wrote under runs/ into docs/results/, with the data folder it read named, not its path.

    python docs/publish.py runs/fm-behind/table.json docs/results/fashion_mnist_adv_behind_purifier.json

A committed result holds no path of the machine that measured it (tests/test_docs_drift.py): the command's
``--data-root PATH`` becomes ``--data-root DIR`` and the folder's name goes to ``provenance.data_root``, from which
``docs/render.py`` names the split (``DATA_SPLITS``). Everything else is copied as the command wrote it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_DATA_ROOT = re.compile(r"(--data-root[= ])(\S+)")


def data_roots(command: str) -> list[str]:
    """The data folders a command reads (its ``--data-root`` values), in order."""
    return [m[2] for m in _DATA_ROOT.finditer(command)]


def with_dir(command: str) -> str:
    """``command`` with every data folder as ``DIR``, as a user would type it."""
    return _DATA_ROOT.sub(r"\1DIR", command)


def publish(result: dict) -> dict:
    """``result`` with its command's data folder as ``DIR`` and the folder's name in ``provenance.data_root``."""
    p = dict(result["provenance"])
    roots = data_roots(p["command"])
    if len(roots) > 1:
        raise ValueError(f"the command reads {len(roots)} data folders; publish takes one")
    if roots and roots[0] != "DIR":
        p["data_root"] = Path(roots[0]).name
        p["command"] = with_dir(p["command"])
    return {**result, "provenance": p}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    source, target = map(Path, argv)
    out = publish(json.loads(source.read_text(encoding="utf-8")))
    target.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target} ({out['provenance']['command']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
