"""Does an attack keep its strength in bf16? Two levers run folders that measured the same rows on the same images and
seeds, one with fp32 gradient passes and one with ``--attack-precision bf16`` (judged in fp32 in both), compared row
by row and image by image: each precision's robust accuracy (worst of R) with its Wilson interval, the images on
which the two agree, and the per-image worst case over both precisions.

The rule the project applies (bf16 becomes what a data set's rows use only if it holds): no row's figure moves by more
than its interval's half-width, and the per-image worst case over both precisions equals either precision's within 1
point.

    python benchmarks/precision_agreement.py FP32_DIR BF16_DIR OUT.json

Writes OUT.json: the comparison, the two folders' provenance (each call's command, code, device, wall time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "docs")]
from art_adp.runs.engine import correct  # noqa: E402  pylint: disable=wrong-import-position
from art_adp.runs.records import read_records  # noqa: E402  pylint: disable=wrong-import-position
from art_adp.runs.statistics import wilson  # noqa: E402  pylint: disable=wrong-import-position
from publish import publish  # noqa: E402  pylint: disable=wrong-import-position  # the data folder named, not its path


def _flags(run: Path) -> dict[tuple, dict[int, bool]]:
    """(classifier, model, setting, row) → image → correct in every judgement, for the ensemble-judged rows."""
    out: dict[tuple, dict[int, bool]] = {}
    for r in read_records(run):
        if r.get("judge", "ensemble") == "ensemble" and r["attack"] != "clean":
            key = (r.get("classifier", ""), r["model"], r["setting"], r["attack"])
            out.setdefault(key, {})[r["index"]] = correct(r)
    return out


def compare(fp32: Path, bf16: Path) -> dict:
    a, b = _flags(fp32), _flags(bf16)
    rows = []
    for key in sorted(set(a) & set(b)):
        shared = sorted(set(a[key]) & set(b[key]))
        n = len(shared)
        fa, fb = [a[key][i] for i in shared], [b[key][i] for i in shared]
        worst = [x and y for x, y in zip(fa, fb)]
        pa, pb, pw = sum(fa) / n, sum(fb) / n, sum(worst) / n
        half = {p: (wilson(v, n)[1] - wilson(v, n)[0]) / 2 for p, v in (("fp32", pa), ("bf16", pb))}
        rows.append({
            "classifier": key[0], "model": key[1], "setting": key[2], "attack": key[3], "n": n,
            "fp32": pa, "bf16": pb, "half_width": half, "agree": sum(x == y for x, y in zip(fa, fb)) / n,
            "broken_by_fp32_only": [i for i, x, y in zip(shared, fa, fb) if y and not x],
            "broken_by_bf16_only": [i for i, x, y in zip(shared, fa, fb) if x and not y],
            "worst_case": pw,
            "holds": abs(pb - pa) <= min(half.values()) and min(abs(pw - pa), abs(pw - pb)) <= 0.01,
        })  # fmt: skip
    return {"rows": rows, "holds": all(r["holds"] for r in rows) and bool(rows)}


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    fp32, bf16, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    result = compare(fp32, bf16)
    tables = {p: publish(json.loads((d / "table.json").read_text())) for p, d in (("fp32", fp32), ("bf16", bf16))}
    result["dataset"] = tables["fp32"].get("dataset")
    result["runs"] = {p: t["provenance"] for p, t in tables.items()}
    # the rendered line names the fp32 folder's call; the bf16 folder's is kept beside it
    result["provenance"] = tables["fp32"]["provenance"]
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    for r in result["rows"]:
        print(f"{r['attack']}: fp32 {r['fp32']:.1%}, bf16 {r['bf16']:.1%} (± {min(r['half_width'].values()):.1%}), "
              f"agree {r['agree']:.1%}, worst case {r['worst_case']:.1%}: {'holds' if r['holds'] else 'does not hold'}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
