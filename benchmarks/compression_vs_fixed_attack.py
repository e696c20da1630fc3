"""Does the compression rate order purifiers the way the fixed-randomness attack does? (Liu & Wei 2025, issue 22)

For each purifier setting (σ, T, score checkpoint): the compression rate (``art_adp.compression.compression_rate``,
no gradients) and the accuracy under ``FixedNoisePGD`` (full-gradient PGD against one frozen noise draw, judged on
that draw) on the same N test images, then Spearman's rank correlation between the two over the settings.

Digits (default): sklearn's bundled 8×8 digits, test split of ``load_digits()`` (seed 0, as the demo), the demo's
score model and classifier from $ART_ADP_DIGITS (default runs/demo), plus an under-trained score checkpoint that
this script trains itself (``--undertrained-iterations`` DSM steps, seeded), and T = 0 (x ↦ clip(x + σε): noise and
clipping only, the "no purification" end).

MNIST development split: ``--data-root DIR`` (the four idx.gz files) with ``--classifier PATH`` and one or more
``--score PATH`` (checkpoints written by ``art_adp.save_score_model``); images come from the test split.

    python benchmarks/compression_vs_fixed_attack.py --threads 1
    python benchmarks/compression_vs_fixed_attack.py --data-root data/mnist --classifier clf.safetensors \\
        --score score_10k.safetensors --score score_50k.safetensors --eps 0.3 --n 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DIGITS, ROOT, setup, write  # noqa: E402

from art_adp import ADPPurifier, NCSNv2, geometric_sigmas, load_score_model, train_score_model  # noqa: E402
from art_adp.attacks import FixedNoisePGD  # noqa: E402
from art_adp.compression import compression_rate  # noqa: E402
from art_adp.data import load_digits, load_mnist  # noqa: E402
from art_adp.models import load_classifier  # noqa: E402


def score_models(args, data) -> dict[str, torch.nn.Module]:
    if args.data_root is not None:
        if not args.score:
            raise SystemExit("--data-root needs at least one --score PATH (and --classifier PATH).")
        return {Path(p).stem: load_score_model(p, "cpu") for p in args.score}
    models = {"demo": load_score_model(DIGITS / "score.safetensors", "cpu")}
    if args.undertrained_iterations:
        models[f"dsm{args.undertrained_iterations}"] = train_score_model(
            NCSNv2(1, 8, ngf=16),
            data.x_train,
            geometric_sigmas(1.0, 0.01, 12),  # the demo's levels
            args.undertrained_iterations,
            batch_size=64,
            seed=0,
            progress=False,
            device="cpu",
        )
    return models


def settings(args, names) -> list[tuple[str, float, int]]:
    grid = [(names[0], s, t) for s in args.sigmas for t in args.steps]
    for extra in names[1:]:
        grid.append((extra, args.extra_sigma, args.extra_steps))
    if args.no_steps:
        grid.append((names[0], args.extra_sigma, 0))  # T = 0: x -> clip(x + sigma eps), noise and clipping only
    return grid


def analyse(rows: list[dict]) -> dict:
    """
    Spearman's rank correlations of the per-setting numbers: the primary one (median compression rate against the
    fixed-randomness attack accuracy, all settings), the same against the accuracy retained (attack accuracy over
    fixed-noise clean accuracy), and within each σ over T (the first score checkpoint only; 3 points give no
    useful p-value, so only rho is kept).
    """
    from scipy.stats import spearmanr

    def rho(rs, key) -> dict:
        r, p = spearmanr([x["compression_rate"]["median"] for x in rs], [key(x) for x in rs])
        return {"rho": float(r), "p_value": float(p), "nb_points": len(rs)}

    out = {
        "spearman": {**rho(rows, lambda r: r["fixed_attack_accuracy"]),
                     "between": "median compression rate and fixed-randomness attack accuracy"},
        "spearman_retained": {**rho(rows, lambda r: r["fixed_attack_accuracy"] / max(r["fixed_clean_accuracy"], 1e-12)),
                              "between": "median compression rate and attack accuracy / clean accuracy (fixed noise)"},
    }
    first = rows[0]["score"]
    within = {}
    for sigma in sorted({r["sigma"] for r in rows if r["score"] == first}):
        group = [r for r in rows if r["score"] == first and r["sigma"] == sigma]
        if len(group) >= 3:
            within[f"sigma={sigma:g}"] = {"rho": rho(group, lambda r: r["fixed_attack_accuracy"])["rho"],
                                          "nb_points": len(group), "steps": [r["steps"] for r in group]}
    out["spearman_within_sigma"] = within
    return out


def reanalyse(path: str) -> None:
    """Recompute the correlations of a result file from its per-setting rows (nothing is measured again)."""
    result = json.loads(Path(path).read_text())
    result.update(analyse(result["settings"]))
    result["analysed_with"] = " ".join([Path(sys.executable).name, *sys.argv])
    write(path, result)


def pool(paths: list[str], out: str) -> None:
    """
    Pool result files measured on disjoint images (same settings): per setting, accuracies weighted by n and the
    mean of the runs' median rates; then the same correlations. Nothing is measured again.
    """
    results = [json.loads(Path(p).read_text()) for p in paths]
    keyed = [{(r["score"], r["sigma"], r["steps"]): r for r in res["settings"]} for res in results]
    rows = []
    for key in keyed[0]:
        if not all(key in k for k in keyed):
            continue
        parts = [(k[key], res["n_examples"]) for k, res in zip(keyed, results)]
        n = sum(m for _, m in parts)
        rows.append({
            "score": key[0], "sigma": key[1], "steps": key[2],
            "compression_rate": {"median": float(np.mean([r["compression_rate"]["median"] for r, _ in parts])),
                                 "of": "mean of the runs' medians"},
            "fixed_clean_accuracy": sum(r["fixed_clean_accuracy"] * m for r, m in parts) / n,
            "fixed_attack_accuracy": sum(r["fixed_attack_accuracy"] * m for r, m in parts) / n,
            "n": n,
        })
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "git_commit": commit,
              "scale": "smoke", "n_examples": sum(res["n_examples"] for res in results),
              "runs": [{"file": p, **{k: res.get(k) for k in ("command", "git_commit", "device", "wall_seconds",
                                                              "first_example", "n_examples")},
                        "seed": res["attack"]["seed"]} for p, res in zip(paths, results)],
              "settings": rows}
    result.update(analyse(rows))
    write(out, result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48, help="test images (the first n of the test split)")
    ap.add_argument("--offset", type=int, default=0, help="skip the first images of the test split")
    ap.add_argument("--eps", type=float, default=0.175, help="l_inf budget of the attack and radius of the rate")
    ap.add_argument("--max-iter", type=int, default=5)
    ap.add_argument("--eps-step", type=float, default=None, help="default 2.5 eps / max_iter")
    ap.add_argument("--nb-directions", type=int, default=2)
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 10, 20])
    ap.add_argument("--extra-sigma", type=float, default=0.25, help="sigma of the other score checkpoints")
    ap.add_argument("--extra-steps", type=int, default=10, help="T of the other score checkpoints")
    ap.add_argument("--undertrained-iterations", type=int, default=100, help="digits: 0 for none")
    ap.add_argument("--no-t0", dest="no_steps", action="store_false", help="leave out the T = 0 setting")
    ap.add_argument("--seed", type=int, default=0, help="the one randomness configuration (attack, judge, rate)")
    ap.add_argument("--data-root", default=None, help="MNIST idx.gz folder (else: digits)")
    ap.add_argument("--score", action="append", default=[], help="score checkpoint (MNIST; repeatable)")
    ap.add_argument("--classifier", default=None, help="classifier checkpoint (MNIST)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compression_vs_fixed_attack.json"))
    ap.add_argument("--reanalyse", action="store_true", help="only recompute the correlations of --out's rows")
    ap.add_argument("--pool", nargs="+", default=None, help="result files on disjoint images: pool them into --out")
    args = ap.parse_args()
    if args.pool:
        pool(args.pool, args.out)
        return
    if args.reanalyse:
        reanalyse(args.out)
        return

    from art.estimators.classification import PyTorchClassifier

    env = setup(args.threads)
    start = time.perf_counter()
    if args.data_root is None:
        data = load_digits()
        classifier = load_classifier(DIGITS / "classifier.safetensors", "cpu")
        split = "digits test split of load_digits() (seed 0)"
    else:
        data = load_mnist(args.data_root)
        if args.classifier is None:
            raise SystemExit("--data-root needs --classifier PATH.")
        classifier = load_classifier(args.classifier, "cpu")
        split = f"MNIST test split ({args.data_root})"
    x, y = data.x_test[args.offset : args.offset + args.n], data.y_test[args.offset : args.offset + args.n]
    models = score_models(args, data)
    grid = settings(args, list(models))
    eps_step = args.eps_step if args.eps_step is not None else 2.5 * args.eps / args.max_iter
    # resume: rows already measured with the same arguments are read back from <out>.partial.jsonl
    partial = Path(args.out + ".partial.jsonl")
    key = json.dumps({k: v for k, v in vars(args).items() if k not in ("out", "threads")}, sort_keys=True)
    done = {}
    if partial.is_file():
        for line in partial.read_text().splitlines():
            record = json.loads(line)
            if record.get("key") == key:
                done[(record["row"]["score"], record["row"]["sigma"], record["row"]["steps"])] = record["row"]
    rows = []
    for name, sigma, steps in tqdm(grid, desc="settings"):
        if (name, sigma, steps) in done:
            rows.append(done[(name, sigma, steps)])
            continue
        t0 = time.perf_counter()
        purifier = ADPPurifier(models[name], sigma=sigma, steps=steps, batch_size=4096, device_type="cpu",
                               channels_last=True)
        rate = compression_rate(purifier, x, radius=args.eps, nb_directions=args.nb_directions, norm="inf",
                                seed=args.seed)
        t_rate = time.perf_counter() - t0
        est = PyTorchClassifier(classifier, torch.nn.CrossEntropyLoss(), input_shape=x.shape[1:],
                                nb_classes=data.nb_classes, clip_values=(0.0, 1.0), preprocessing_defences=[purifier],
                                device_type="cpu")
        attack = FixedNoisePGD(est, seed=args.seed, norm=np.inf, eps=args.eps, eps_step=eps_step,
                               max_iter=args.max_iter, batch_size=len(x))
        clean = float((attack.predict(x).argmax(1) == y).mean())
        x_adv = attack.generate(x, y=y)
        robust = float((attack.predict(x_adv).argmax(1) == y).mean())
        rows.append({"score": name, "sigma": sigma, "steps": steps, "compression_rate": rate.summary,
                     "fixed_clean_accuracy": clean, "fixed_attack_accuracy": robust,
                     "seconds": {"rate": round(t_rate, 2), "attack": round(time.perf_counter() - t0 - t_rate, 2)}})
        with partial.open("a") as f:
            f.write(json.dumps({"key": key, "row": rows[-1]}) + "\n")
        tqdm.write(f"{name:>8} sigma={sigma:<5g} T={steps:<3d} rate median {rate.summary['median']:.3f} "
                   f"mean {rate.summary['mean']:.3f}  fixed clean {clean:.3f}  fixed attack {robust:.3f}")
    undefended = PyTorchClassifier(classifier, torch.nn.CrossEntropyLoss(), input_shape=x.shape[1:],
                                   nb_classes=data.nb_classes, clip_values=(0.0, 1.0), device_type="cpu")
    from art_adp.attacks import ClassifierPGD

    x_bare = ClassifierPGD(undefended, eps=args.eps, eps_step=eps_step, max_iter=args.max_iter).generate(x, y=y)
    bare = float((undefended.predict(x_bare).argmax(1) == y).mean())
    wall = time.perf_counter() - start
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    result = {
        "command": env.pop("command"),
        "git_commit": commit,
        "device": f"cpu ({env['cpu']}), {env['threads']} thread(s)",
        "environment": env,
        "wall_seconds": round(wall, 1),
        "scale": "smoke" if args.n < 500 else "full",
        "data": split,
        "n_examples": len(x),
        "first_example": args.offset,
        "attack": {"name": "fixed-noise-pgd", "norm": "inf", "eps": args.eps, "eps_step": eps_step,
                   "max_iter": args.max_iter, "seed": args.seed, "judge": "the same frozen draw, same batches"},
        "rate": {"radius": args.eps, "norm": "inf", "nb_directions": args.nb_directions, "seed": args.seed,
                 "statistic": "median over examples of the per-example mean ratio"},
        "undefended_pgd_accuracy": bare,
        "settings": rows,
    }
    result.update(analyse(rows))
    sp = result["spearman"]
    print(f"Spearman rho = {sp['rho']:.3f} (p = {sp['p_value']:.3g}) over {sp['nb_points']} settings; undefended PGD "
          f"accuracy {bare:.3f}; {wall:.0f} s")
    write(args.out, result)
    partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
