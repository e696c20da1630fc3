"""Where an attack's strength stops growing in its EOT draws: the one-cell run folders of one row measured at several
draw counts (``art-adp levers ... --eot-samples E``, the same images, seeds and judgement), collected image by image.

    python benchmarks/draws_curve.py runs/fm-apgd-eot2 runs/fm-apgd-eot4 runs/fm-apgd-eot8 \\
        --out docs/results/fashion_mnist_apgd_draws.json
    python benchmarks/draws_curve.py runs/c10-advd-apgd-eot4 --published docs/results/cifar10_adv_denoiser.json \\
        apgd-eot-100it-r1 --out docs/results/cifar10_apgd_draws.json

Each point keeps its cell (accuracy, interval, per-image flags) and the call that measured it, published as
``docs/publish.py`` publishes a table (the data folder as ``DIR``); beside each, the images it breaks that the point of
the most draws leaves, and the reverse. The folders must hold the same row at the same images, one draw count each;
``--published RESULT CELL`` adds a committed result's cell as a point (its call named), where its folder is gone.
Rendered in docs/attacks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
_publish = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_publish)  # the one place a command's data folder becomes DIR


def point(folder: Path) -> dict:
    """The folder's one cell with the call that measured it (published: no path of this machine)."""
    table = _publish.publish(json.loads((folder / "table.json").read_text(encoding="utf-8")))
    cells = [c for c in table["cells"] if c.get("flags")]
    if len(cells) != 1:
        raise SystemExit(f"{folder}: {len(cells)} cells with per-image flags; one row per folder")
    (cell,) = cells
    keep = ("model", "setting", "attack", "classifier", "eot_samples", "accuracy", "n", "ci95", "repeats",
            "ensemble_size", "images", "flags")  # fmt: skip
    return {**{k: cell[k] for k in keep}, "provenance": table["provenance"], "dataset": table["dataset"],
            "eps": table["eps"]}  # fmt: skip


def published_point(path: Path, name: str) -> dict:
    """The cell ``name`` of a committed result (``docs/results/*.json``) as a point: its flags, and the one call of the
    result that ran its attack (the result's last, or one of its earlier ``provenance.calls``)."""
    result = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in result["cells"] if c["attack"] == name and c.get("flags")]
    (attack,) = {r["attack"] for r in result["rows"] if r["name"] == name} or {None}
    top = {k: v for k, v in result["provenance"].items() if k != "calls"}
    calls = [c for c in [*result["provenance"].get("calls", []), top] if f"--attacks {attack}" in c["command"]]
    if len(cells) != 1 or len(calls) != 1:
        raise SystemExit(f"{path}: {len(cells)} cells named {name} with flags and {len(calls)} calls running "
                         f"{attack}; one of each")  # fmt: skip
    keep = ("model", "setting", "attack", "classifier", "eot_samples", "accuracy", "n", "ci95", "repeats",
            "ensemble_size", "images", "flags")  # fmt: skip
    provenance = {**calls[0], **{k: top[k] for k in ("models", "models_hash", "data_root") if k in top}}
    return {**{k: cells[0][k] for k in keep}, "provenance": provenance, "dataset": result["dataset"],
            "eps": result["eps"], "published": path.name}  # fmt: skip


def broken(p: dict) -> set[int]:
    """The images ``p`` breaks (flag 0), by index."""
    ((start, _),) = p["images"]
    return {start + i for i, f in enumerate(p["flags"]) if f == "0"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument(
        "--published",
        nargs=2,
        action="append",
        default=[],
        metavar=("RESULT", "CELL"),
        help="a point from a committed result's cell (its run folder gone)",
    )
    args = parser.parse_args()
    points = [point(f) for f in args.folders] + [published_point(Path(r), c) for r, c in args.published]
    points.sort(key=lambda p: p["eot_samples"])
    row = {k: {json.dumps(p[k]) for p in points}
           for k in ("dataset", "classifier", "model", "setting", "attack", "images", "repeats")}  # fmt: skip
    mixed = {k: v for k, v in row.items() if len(v) != 1}
    if mixed or len({p["eot_samples"] for p in points}) != len(points):
        raise SystemExit(f"the folders must hold one row at one draw count each; they differ in {sorted(mixed)}")
    most = broken(points[-1])
    for p in points:
        mine = broken(p)
        p["broken_only_here"] = sorted(mine - most)  # against the point of the most draws
        p["left_only_here"] = sorted(most - mine)
    calls = [{k: p["provenance"][k] for k in _publish.CALL if k in p["provenance"]} for p in points[:-1]]
    out = {"provenance": {**points[-1]["provenance"], "variants": True, "calls": calls},  # one source line for all
           "row": {k: json.loads(next(iter(v))) for k, v in row.items() if k != "images"}, "eps": points[0]["eps"],
           "points": points}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
