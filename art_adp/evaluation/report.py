"""Tables (the paper's Table 3 shape, Tables 5 and 6 for the sweeps), the sanity report and the JSON report."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

import numpy as np

from . import sanity

__all__ = ["LABELS", "build", "write"]

LABELS = {
    "clean": "Natural (clean)",
    "clf-pgd": "Clf-PGD (preprocessor-blind)",
    "bpda-eot": "BPDA+EOT",
    "joint-score": "Joint (score)+EOT",
    "joint-full": "Joint (full)+EOT",
    "spsa": "SPSA (black-box)",
    "full-pgd-eot": "Full-gradient PGD+EOT",
    "apgd-eot": "APGD-EOT (CE, then DLR)",
}


def budget(attack: str, c) -> str:
    """The attack's counts under ``c``, for the table."""
    it = f"{c.iterations} it"
    return {
        "clean": "-",
        "clf-pgd": it,
        "bpda-eot": f"{it}, EOT {c.eot} ({c.eot_aggregate})",
        "joint-score": f"{it}, EOT {c.eot}, w = {c.joint_weight:g}",
        "joint-full": f"{it}, EOT {c.eot}, w = {c.joint_weight:g}",
        "spsa": f"{c.spsa_iterations} it, {c.spsa_samples} samples/step",
        "full-pgd-eot": f"{it}, EOT {c.eot}",
        "apgd-eot": f"{c.apgd_iterations} it/loss, EOT {c.apgd_eot}",
    }[attack]


def summarize(rows: list[dict]) -> dict:
    """Accuracies of one (setting, attack): mean over examples and repeats, worst case over repeats, undefended."""
    correct = np.array([[p == r["label"] for p in r["pred"]] for r in rows], dtype=bool)
    return {"n": len(rows), "mean": float(correct.mean()), "worst": float(correct.all(1).mean()),
            "per_repeat": [float(v) for v in correct.mean(0)],
            "undefended": float(np.mean([r["undefended_pred"] == r["label"] for r in rows])),
            "max_linf": max(r["linf"] for r in rows), "max_l2": max(r["l2"] for r in rows)}


def build(records: dict, config, settings, *, description: dict, seconds: dict, world_size: int) -> dict:
    """The report: one summary per (setting, attack), the strongest attack, the sanity warnings."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for (s, a, _), r in sorted(records.items()):
        groups.setdefault((s, a), []).append(r)
    results = {f"{s.name}/{a}": summarize(groups[(s.name, a)]) for s in settings for a in s.attacks
               if (s.name, a) in groups}  # in the plan's order: clean first, then the attacks as listed
    main = {a: results[f"main/{a}"] for s in settings if s.name == "main" for a in s.attacks}
    attacked = {a: v for a, v in main.items() if a != "clean"}
    strongest = min(attacked, key=lambda a: (attacked[a]["worst"], attacked[a]["mean"])) if attacked else None

    sanity_inputs: dict = {"unbounded": None, "eps_points": [], "iteration_points": [], "black_box": None,
                           "best_white_box": None}
    subset = [s for s in settings if s.name.startswith("sanity:")]
    if subset:
        white = subset[0].attacks[0]
        n_sub = results[f"{subset[0].name}/{white}"]["n"]
        base = summarize(groups[("main", white)][:n_sub])["mean"]
        sanity_inputs["unbounded"] = results[f"sanity:eps=1/{white}"]["mean"]
        sanity_inputs["eps_points"] = [(config.eps / 2, results[f"sanity:eps/2/{white}"]["mean"]),
                                       (config.eps, base), (1.0, sanity_inputs["unbounded"])]
        half = max(1, (config.apgd_iterations if white == "apgd-eot" else config.iterations) // 2)
        full = config.apgd_iterations if white == "apgd-eot" else config.iterations
        sanity_inputs["iteration_points"] = [(half, results[f"sanity:iterations/2/{white}"]["mean"]), (full, base)]
        sanity_inputs["white_box_attack"] = white
    if "spsa" in attacked:
        whites = [v["mean"] for a, v in attacked.items() if a != "spsa"]
        sanity_inputs["black_box"] = attacked["spsa"]["mean"]
        sanity_inputs["best_white_box"] = min(whites) if whites else None
    warnings = sanity.sanity_warnings(**{k: v for k, v in sanity_inputs.items() if k != "white_box_attack"})

    from dataclasses import asdict

    cfg = asdict(config)
    cfg["norm"] = "inf" if config.norm == math.inf else config.norm
    return {"config": cfg, "description": description, "results": results, "strongest": strongest,
            "sanity": {"inputs": sanity_inputs, "warnings": warnings}, "seconds": seconds, "world_size": world_size,
            "budgets": {a: budget(a, config) for a in main}}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def markdown(result: dict) -> str:
    """The report as markdown: header, the Table-3-shaped table, sweeps, sanity report."""
    c = result["config"]
    norm = "l_inf" if c["norm"] == "inf" else "l_2"
    step = c["eps_step"] if c["eps_step"] is not None else c["eps"] / 4
    lines = [f"Threat model: {norm} eps = {c['eps']:.4g}, step {step:.4g}"]
    lines += [f"{k}: {v}" for k, v in result["description"].items()]
    lines += [f"Judged on the ensemble of S = {c['runs']} purifications, repeated R = {c['repeats']} times: mean over "
              "examples and repeats; worst case = correct in all R repeats.", ""]
    lines += ["| Attack | Budget | Undefended | Defended mean | Defended worst case | n |", "|---|---|---|---|---|---|"]
    for key, v in result["results"].items():
        setting, attack = key.split("/", 1)
        if setting == "main":
            lines.append(f"| {LABELS[attack]} | {result['budgets'][attack]} | {_pct(v['undefended'])} | "
                         f"{_pct(v['mean'])} | {_pct(v['worst'])} | {v['n']} |")
    lines.append("")
    lines.append("Accuracy in %. " + (c["note"] or ""))
    if result["strongest"]:
        s = result["results"][f"main/{result['strongest']}"]
        lines.append(f"Strongest attack: {LABELS[result['strongest']]} ({_pct(s['mean'])} % mean, "
                     f"{_pct(s['worst'])} % worst case).")
    sweeps = sweep_tables(result)
    if sweeps:
        lines += ["", *sweeps]
    lines += ["", "Sanity report (Carlini et al. 2019):"]
    inputs = result["sanity"]["inputs"]
    if inputs.get("unbounded") is not None:
        lines.append(f"- {inputs['white_box_attack']} on the first {result['results'][next(k for k in result['results'] if k.startswith('sanity:eps=1'))]['n']}"
                     f" examples: accuracy {', '.join(f'{_pct(a)} % at eps {e:.4g}' for e, a in inputs['eps_points'])}; "
                     f"{', '.join(f'{_pct(a)} % after {int(i)} iterations' for i, a in inputs['iteration_points'])}")
    if inputs.get("black_box") is not None and inputs.get("best_white_box") is not None:
        lines.append(f"- SPSA {_pct(inputs['black_box'])} % vs best white-box {_pct(inputs['best_white_box'])} %")
    warnings = result["sanity"]["warnings"]
    lines += [f"- WARNING: {w}" for w in warnings] if warnings else ["- no sign of gradient masking"]
    return "\n".join(lines) + "\n"


def sweep_tables(result: dict) -> list[str]:
    """Table 5 (σ sweep) and Table 6 (EOT sweep) when they were run."""
    res, lines = result["results"], []
    sigmas = sorted({float(k.split("/")[0][6:]) for k in res if k.startswith("sigma=")})
    if sigmas:
        lines += ["| sigma | Standard | BPDA+EOT | Clf-PGD |", "|---|---|---|---|"]
        for s in sigmas:
            r = [res[f"sigma={s:g}/{a}"] for a in ("clean", "bpda-eot", "clf-pgd")]
            lines.append(f"| {s:g} | " + " | ".join(f"{_pct(v['mean'])} ({_pct(v['worst'])})" for v in r) + " |")
        lines += ["", "sigma sweep (paper Table 5): mean (worst case) accuracy in %.", ""]
    eots = sorted({int(k.split("/")[0][4:]) for k in res if k.startswith("eot=")})
    if eots:
        lines += ["| EOT samples | " + " | ".join(map(str, eots)) + " |", "|---" * (len(eots) + 1) + "|"]
        lines.append("| BPDA+EOT | " + " | ".join(f"{_pct(res[f'eot={k}/bpda-eot']['mean'])}" for k in eots) + " |")
        lines += ["", "EOT sweep (paper Table 6): mean accuracy in %."]
    return lines


def write(result: dict, run_dir: str | os.PathLike, *, log: Callable[[str], None] = print) -> None:
    """Write ``report.md``, ``report.json`` and the plots into ``run_dir`` and log the markdown."""
    from .. import plots

    run_dir = Path(run_dir)
    text = markdown(result)
    (run_dir / "report.md").write_text(text)
    tmp = run_dir / "report.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, run_dir / "report.json")
    res = result["results"]
    main = {LABELS[k.split("/", 1)[1]]: (v["mean"], v["worst"]) for k, v in res.items() if k.startswith("main/")}
    plots.robustness_bars(run_dir / "robustness.png", main, title="ADP under attack (mean / worst case over R)")
    sigmas = sorted({float(k.split("/")[0][6:]) for k in res if k.startswith("sigma=")})
    if sigmas:
        curves = {LABELS[a]: [res[f"sigma={s:g}/{a}"]["mean"] for s in sigmas] for a in ("clean", "bpda-eot", "clf-pgd")}
        plots.sweep_curve(run_dir / "sigma_sweep.png", sigmas, curves, xlabel="sigma", title="sigma sweep (Table 5)")
    eots = sorted({int(k.split("/")[0][4:]) for k in res if k.startswith("eot=")})
    if eots:
        plots.sweep_curve(run_dir / "eot_sweep.png", eots, {"BPDA+EOT": [res[f"eot={k}/bpda-eot"]["mean"] for k in eots]},
                          xlabel="EOT samples", title="EOT sweep (Table 6)")
    for line in text.splitlines():
        log(line)
