"""Is the attack's budget enough? Robust accuracy of one defence against the attack's iterations, EOT draws and
restarts, as Carlini et al.'s checklist (2019, §5) and Croce et al. (2022, Fig. 2) ask: the table's budget should sit
where the curve is flat.

    python benchmarks/budget_curve.py --data-root DIR [--run-root runs/curve] [--n-examples 100]

The defence: the exact score's one-step denoise (σ 0.25) in front of the SmallCNN on Fashion-MNIST at ℓ∞ ε = 8/255;
the attack: full-gradient PGD+EOT with step ε/4 from a random start, its best iterate judged every 5 iterations on
10 draws of its own, restarts on the images left unbroken; each point judged on one fresh S = 10 ensemble. Each point
is one resumable ``art-adp levers`` call (one run folder per EOT count, ``RUN_ROOT-eotE``, since a levers row is named by its iterations
and restarts); a call that finds its records done returns at once. The point keeps the table of the call that
completed it (``point-ROW.json``: its accuracy, command, code version, device and wall time), and its price by
``levers --estimate-only`` taken when this script runs (``priced_s``, beside the measured wall time). Writes
``docs/results/fashion_mnist_budget_curve.json`` and ``docs/results/fashion_mnist_budget_curve.png``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
_publish = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_publish)  # the one place a command's data folder becomes DIR
OUT = ROOT / "docs" / "results" / "fashion_mnist_budget_curve"
#: (EOT draws, iterations, restarts), in the order they run: the iterations at EOT 8, the draws at 100 iterations,
#: the restarts at 100 iterations and EOT 16.
POINTS = ((8, 40, 1), (8, 100, 1), (16, 100, 1), (8, 200, 1), (32, 100, 1), (16, 100, 2), (16, 100, 3))


def levers_argv(data_root: str, run_dir: Path, n_examples: int, eot: int, iters: int, restarts: int) -> list[str]:
    return [
        "levers", "--dataset", "fashion-mnist", "--data-root", data_root, "--threads", "1", "--quiet",
        "--models", "oracle", "--settings", "one-step denoise", "--attacks", "full-pgd-eot", "--classifiers",
        "--purified", "cnn", "--judges", "ensemble", "--repeats", "1", "--n-examples", str(n_examples),
        "--run-dir", str(run_dir), "--eot-samples", str(eot), "--max-iter", str(iters), "--restarts", str(restarts),
    ]  # fmt: skip


def run_point(data_root: str, run_root: Path, n_examples: int, eot: int, iters: int, restarts: int) -> dict:
    """Run (or resume) one point; return its cell with the provenance of the call that completed it."""
    from art_adp.apps.cli import main

    run_dir = run_root.with_name(f"{run_root.name}-eot{eot}")
    row = f"full-pgd-eot-{iters}it-r{restarts}"
    kept = run_dir / f"point-{row}.json"
    if not kept.exists():
        if main(levers_argv(data_root, run_dir, n_examples, eot, iters, restarts)) != 0:
            raise RuntimeError(f"the levers call of {row} at EOT {eot} failed")
        shutil.copyfile(run_dir / "table.json", kept)
    table = json.loads(kept.read_text(encoding="utf-8"))
    (found,) = [c for c in table["cells"] if c["attack"] == row]
    return {
        "eot_samples": eot,
        "max_iter": iters,
        "restarts": restarts,
        **{k: found[k] for k in ("accuracy", "n", "ci95")},
        "provenance": table["provenance"],
    }


def price_point(data, n_examples: int, eot: int, iters: int, restarts: int) -> float:
    """The point's price by ``levers --estimate-only`` (the cost model and a timed probe on this device), in an empty
    run folder so every image counts."""
    import tempfile

    from art_adp.apps.levers import run_levers

    with tempfile.TemporaryDirectory() as tmp:
        out = run_levers(data, tmp, dataset="fashion-mnist", models=("oracle",), settings=["one-step denoise"],
                         attacks=("full-pgd-eot",), classifiers=(), purified=("cnn",), repeats=1,
                         n_examples=n_examples, eot_samples=eot, max_iter=iters, restarts=restarts,
                         progress=False, estimate_only=True)  # fmt: skip
    return round(out["estimate_seconds"], 1)


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), sharey=True)
    panels = (
        ("iterations (EOT 8, 1 run)", "max_iter", lambda p: p["eot_samples"] == 8 and p["restarts"] == 1),
        ("EOT draws (100 iterations, 1 run)", "eot_samples", lambda p: p["max_iter"] == 100 and p["restarts"] == 1),
        ("runs (100 iterations, EOT 16)", "restarts", lambda p: p["max_iter"] == 100 and p["eot_samples"] == 16),
    )
    for ax, (title, key, keep) in zip(axes, panels):
        chosen = sorted((p for p in points if keep(p)), key=lambda p: p[key])
        xs = [p[key] for p in chosen]
        ys = [100 * p["accuracy"] for p in chosen]
        low = [100 * (p["accuracy"] - p["ci95"][0]) for p in chosen]
        high = [100 * (p["ci95"][1] - p["accuracy"]) for p in chosen]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3)
        ax.set_xticks(xs)
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("robust accuracy, % (95 % Wilson)")
    fig.suptitle(
        "Exact score one-step → SmallCNN, Fashion-MNIST ε 8/255, full-gradient PGD+EOT, best iterate", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--data-root", required=True, help="the Fashion-MNIST folder levers reads")
    parser.add_argument(
        "--run-root", default="runs/curve", type=Path, help="one run folder per EOT count: RUN_ROOT-eotE"
    )
    parser.add_argument("--n-examples", type=int, default=100)
    args = parser.parse_args()
    import torch

    from art_adp.data import load_dataset

    torch.set_num_threads(1)  # as the points ran (--threads 1): the price is of the same setting
    points = [run_point(args.data_root, args.run_root, args.n_examples, *p) for p in POINTS]
    data = load_dataset("fashion-mnist", args.data_root)
    for p, (eot, iters, restarts) in zip(points, POINTS):
        p["priced_s"] = price_point(data, args.n_examples, eot, iters, restarts)
    first = points[0]["provenance"]
    versions = sorted({p["provenance"]["code_version"] for p in points})
    result = {
        "defence": "exact score (KernelScore over the training split) one-step denoise, σ 0.25 → SmallCNN (cnn)",
        "attack": "full-gradient PGD+EOT, step ε/4, random start, best iterate judged every 5 iterations on 10 draws",
        "dataset": "fashion-mnist",
        "eps": 8 / 255,
        "judge": "one fresh S = 10 ensemble (mean softmax) per point (R = 1)",
        "points": [{k: v for k, v in p.items() if k != "provenance"} | {
            "wall_time_s": p["provenance"]["wall_time_s"],
            "device": p["provenance"]["device"],
            "command": _publish.with_dir(p["provenance"]["command"]),
        } for p in points],  # fmt: skip
        "provenance": {
            "command": f"python benchmarks/budget_curve.py --data-root DIR --n-examples {args.n_examples}",
            "code_version": versions[0] if len(versions) == 1 else " / ".join(versions),
            "models": first["models"],
            "models_hash": first.get("models_hash"),
            "device": first["device"],
            "wall_time_s": round(sum(p["provenance"]["wall_time_s"] for p in points), 1),
            "data_root": Path(args.data_root).name,
        },
    }
    if any(p["provenance"]["models"] != first["models"] for p in points):
        raise RuntimeError("the points measured different classifiers: start again in an empty --run-root")
    OUT.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    plot(points, OUT.with_suffix(".png"))
    print(f"wrote {OUT.with_suffix('.json')} and {OUT.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
