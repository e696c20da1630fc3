"""The evaluation card: per attack, accuracy as the mean over R judgements, the worst case over R, the majority vote
over R and with the randomness fixed, each with its 95 % Wilson interval over examples (the one summary of a cell,
:func:`~art_adp.runs.statistics.summary`); the baselines side by side; the budgets actually run; the sanity report.
Written as markdown (``report.md``), JSON with a versioned schema (``report.json``) and one figure
(``accuracy_vs_eps.png``), plus the sweeps' tables and plots.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...attacks import registry
from ...runs.engine import worst_case
from ...runs.plans import PLATEAU
from ...runs.statistics import summary, wilson
from ...runs.render import accuracy_cell, markdown_table
from . import sanity
from .config import GRADIENT_FREE, budget_fields, budget_text, judging_shortfalls, shortfalls, white_box_fields
from ...runs.records import write_json

__all__ = ["LABELS", "SCHEMA", "build", "markdown", "wilson", "write"]

SCHEMA = "art-adp/evaluation-card/1"
LABELS = registry.LABELS
BASELINE_ATTACK = {"clean": "clean", **{spec.name: spec.baseline for spec in registry.REGISTRY.values()}}
SWEEP = registry.SWEEP_ATTACK  # the adaptive attack of the σ and EOT sweeps (Tables 5-6)
SIGMA_ROWS = ("clean", SWEEP, registry.BLIND_ATTACK)  # the σ sweep's columns, as in Table 5
#: Configuration fields added after the first cards, with the value every earlier card ran at: a card's ``config``
#: names them only where they differ, so the earlier cards keep their form.
LATER_FIELDS = {"masking_examples": 0}


def _accuracies(rows: list[dict]) -> dict:
    """
    One (setting, attack) over its examples as the card keeps it, read off the one summary of a cell
    (:func:`~art_adp.runs.statistics.summary`, Wilson intervals): the mean over examples and R judgements, the worst
    case over R (correct in all R), the majority vote over R, each repeat, and the undefended model on the same inputs.
    """
    correct = np.array([[p == r["label"] for p in r["pred"]] for r in rows], dtype=bool)
    cell = summary(correct.all(1), rows)
    judged = cell.get("judgements") or dict.fromkeys(("mean", "worst", "majority"), cell)  # R = 1: one judgement
    undefended = summary([r["undefended_pred"] == r["label"] for r in rows])
    return {
        "n": cell["n"],
        "repeats": int(correct.shape[1]),
        **{k: judged[k]["accuracy"] for k in ("mean", "worst", "majority")},
        "per_repeat": [float(v) for v in correct.mean(0)],
        "undefended": undefended["accuracy"],
        "ci": {**{k: judged[k]["ci95"] for k in ("mean", "worst", "majority")}, "undefended": undefended["ci95"]},
        "max_linf": max(r["linf"] for r in rows),
        "max_l2": max(r["l2"] for r in rows),
    }


def _sanity(results: dict, groups: dict, config, settings) -> dict:
    """The checks' inputs, warnings, which checks ran and which were skipped (and why)."""
    inputs: dict = {}
    warnings, ran, skipped = [], [], []
    flags = groups.get(("sanity:flags", "flags"))
    main_attacks = next(s for s in settings if s.name == "main").attacks
    if flags:
        inputs["random_fraction"] = float(np.mean([r["random_output"] for r in flags]))
        inputs["zero_gradient_fraction"] = float(np.mean([r["zero_gradient"] for r in flags]))
        eots = [
            getattr(config, white_box_fields(a)[1])
            for a in main_attacks
            if a in registry.REGISTRY and registry.REGISTRY[a].gradient
        ]
        inputs["smallest_eot"] = min(eots) if eots else 1
        warnings += [
            sanity.check_randomness(
                inputs["random_fraction"], eot_samples=inputs["smallest_eot"], repeats=config.repeats
            ),
            sanity.check_zero_gradients(inputs["zero_gradient_fraction"]),
        ]
        ran += ["randomness", "zero gradients"]
    subset = [s for s in settings if s.subset and s.name != "sanity:flags"]
    if subset:
        white = subset[0].attacks[0]
        it_field, eot_field = white_box_fields(white)
        n_sub = len(groups[(subset[0].name, white)])
        base = _accuracies(groups[("main", white)][:n_sub])["mean"]
        inputs.update(white_box_attack=white, n=n_sub)
        inputs["eps_points"] = [
            (config.eps / 2, results[f"sanity:eps/2/{white}"]["mean"]),
            (config.eps, base),
            (1.0, results[f"sanity:eps=1/{white}"]["mean"]),
        ]
        inputs["unbounded"] = inputs["eps_points"][-1][1]
        inputs["iteration_points"] = sorted(
            [(getattr(config, it_field), base)]
            + [(s.overrides[it_field], results[f"{s.name}/{white}"]["mean"]) for s in subset if it_field in s.overrides]
        )
        inputs["eot_points"] = sorted(
            [(getattr(config, eot_field), base)]
            + [
                (s.overrides[eot_field], results[f"{s.name}/{white}"]["mean"])
                for s in subset
                if eot_field in s.overrides
            ]
        )
        warnings += [sanity.check_unbounded(inputs["unbounded"]), sanity.check_monotone(inputs["eps_points"], "eps")]
        ran += ["eps = 1", "monotone in eps"]
        for what, points in (("iterations", inputs["iteration_points"]), ("EOT", inputs["eot_points"])):
            if len(points) > 1:
                name = "iterations" if what == "iterations" else "EOT draws"
                warnings += [sanity.check_monotone(points, name), sanity.check_converged(points, name)]
                ran += [f"monotone in {what}", f"{what} convergence"]
            else:
                skipped.append(f"{what} convergence: one point only")
    elif config.sanity:
        skipped.append("white-box checks: no gradient attack among the attacks")
    black = next((a for a in main_attacks if a in registry.REGISTRY and registry.REGISTRY[a].black_box), None)
    gradient = [a for a in main_attacks if a in registry.REGISTRY and not registry.REGISTRY[a].black_box]
    free = next((s for s in settings if s.name == GRADIENT_FREE), None)
    if black is not None:  # SPSA, the registry's black-box attack
        whites = [results[f"main/{a}"]["mean"] for a in main_attacks if a not in ("clean", black)]
        short = shortfalls(black, config)
        if short:
            skipped.append(
                f"SPSA vs white-box: SPSA's budget is below the paper's ({', '.join(short)}), so a weak "
                "SPSA could not reveal masking"
            )
        elif whites:
            inputs["black_box"], inputs["best_white_box"] = results[f"main/{black}"]["mean"], min(whites)
            inputs["only_black_box"] = _only_broken(groups[("main", black)], groups, gradient)
            warnings += [
                sanity.check_black_box(inputs["black_box"], inputs["best_white_box"]),
                sanity.check_only_broken(inputs["only_black_box"], len(groups[("main", black)])),
            ]
            ran.append("SPSA vs white-box")
    elif free is not None:  # the gradient-free masking check on the first masking_examples
        inputs["gradient_free"] = _gradient_free(free.attacks[0], groups, gradient, config)
        check = inputs["gradient_free"]
        warnings += [
            sanity.check_black_box(check["mean"], check["best_gradient"]) if gradient else None,
            sanity.check_only_broken(check["only_broken"], check["n"]),
        ]
        ran.append("gradient-free check")
    elif config.sanity:
        skipped.append("SPSA vs white-box: SPSA not among the attacks" + _why_no_check(config))
    return {"inputs": inputs, "warnings": [w for w in warnings if w], "ran": ran, "skipped": skipped}


def _broken(rows: list[dict]) -> dict[int, bool]:
    """Per image index, whether any of its R judgements got it wrong (the worst of R)."""
    return {r["index"]: not all(p == r["label"] for p in r["pred"]) for r in rows}


def _only_broken(rows: list[dict], groups: dict, gradient: list[str]) -> list[int]:
    """The images of ``rows`` (a gradient-free attack's records) it broke, worst of R, that none of the ``gradient``
    attacks of the main table broke."""
    by = [_broken(groups.get(("main", a), [])) for a in gradient]
    return sorted(i for i, hit in _broken(rows).items() if hit and not any(b.get(i, False) for b in by))


def _gradient_free(attack: str, groups: dict, gradient: list[str], config) -> dict:
    """The gradient-free check's inputs: its attack, budget and images, its mean accuracy, the best gradient attack's
    on the same images, and the images only it broke."""
    rows = groups[(GRADIENT_FREE, attack)]
    mine = {r["index"] for r in rows}
    means = {a: _accuracies([r for r in groups[("main", a)] if r["index"] in mine])["mean"] for a in gradient}
    best = min(means, key=lambda a: means[a]) if means else None
    return {"attack": attack, "budget": budget_text(attack, config), "n": len(rows), "mean": _accuracies(rows)["mean"],
            "best_gradient_attack": best, "best_gradient": None if best is None else means[best],
            "only_broken": _only_broken(rows, groups, gradient)}  # fmt: skip


def _why_no_check(config) -> str:
    """Why the gradient-free check a plan asks for (``masking_examples``) did not run; ``""`` where none was asked."""
    black = [s for s in registry.REGISTRY.values() if s.black_box]
    if not getattr(config, "masking_examples", 0) or not black:
        return ""
    if config.norm not in black[0].norms:
        return f", and the gradient-free check did not run: {black[0].label.split()[0]} is an l_inf attack"
    return (", and the gradient-free check did not run: the defence does not clip its noisy input (no clamp to mask "
            "the gradients)")  # fmt: skip


def build(
    records: dict,
    config,
    settings,
    *,
    description: dict,
    seconds: dict,
    world_size: int,
    estimate_seconds: float | None = None,
    compression: dict | None = None,
    compression_sweep: dict | None = None,
) -> dict:
    """The card: one summary per (setting, attack), the per-attack rows, the scale and the verdicts; ``compression``
    (the summary of :func:`~art_adp.compression.compression_rate` on the defence's purifier, or None) for a header
    line and ``compression_sweep`` (σ-sweep setting name, e.g. ``"sigma=0.1"`` → its summary) for a column of the σ
    table."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for (s, a, _), r in sorted(records.items()):
        groups.setdefault((s, a), []).append(r)
    results = {
        f"{s.name}/{a}": _accuracies(groups[(s.name, a)])
        for s in settings
        for a in s.attacks
        if (s.name, a) in groups and a != "flags"
    }  # in the plan's order
    main_setting = next(s for s in settings if s.name == "main")
    baselines = [s.baseline for s in settings if s.baseline is not None]
    short = {a: shortfalls(a, config) for a in main_setting.attacks}
    short = {a: v for a, v in short.items() if v}
    judging = judging_shortfalls(config)
    claim = not short and not judging
    check = _sanity(results, groups, config, settings)
    complete = config.sanity and not any(s.startswith(("white-box", "iterations", "EOT")) for s in check["skipped"])

    rows = []
    for a in main_setting.attacks:
        v = results[f"main/{a}"]
        row = {
            "attack": a,
            "label": LABELS[a],
            "budget": budget_text(a, config),
            "below_reference": short.get(a, []),
            "overridden": sorted(set(config.overridden) & set(budget_fields(a))),
            "n": v["n"],
            "transfer_to_undefended": {"value": v["undefended"], "ci": v["ci"]["undefended"]},
            "mean": {"value": v["mean"], "ci": v["ci"]["mean"], "method": "wilson"},
            "worst": {"value": v["worst"], "ci": v["ci"]["worst"], "method": "wilson"},
            "majority": {"value": v["majority"], "ci": v["ci"]["majority"], "method": "wilson"},
        }
        if f"fixed/{a}" in results:
            f = results[f"fixed/{a}"]
            row["fixed"] = {"value": f["mean"], "ci": f["ci"]["worst"], "method": "wilson"}  # R = 1
        for b in baselines:
            key = f"baseline:{b}/{BASELINE_ATTACK[a]}"
            if key in results:
                row.setdefault("baselines", {})[b] = {
                    "value": results[key]["mean"],
                    "ci": results[key]["ci"]["worst"],
                    "method": "wilson",
                    "as": BASELINE_ATTACK[a],
                }
        rows.append(row)

    attacked = {r["attack"]: r for r in rows if r["attack"] != "clean"}
    worst = _worst_case(groups, [a for a in main_setting.attacks if a not in ("clean", "flags")])
    strongest = (
        min(attacked, key=lambda a: (attacked[a]["worst"]["value"], attacked[a]["mean"]["value"])) if attacked else None
    )
    # the defence judged by the majority vote over R (the judgement DiffBreak's systemic attack aims at)
    strongest_majority = (
        min(attacked, key=lambda a: (attacked[a]["majority"]["value"], attacked[a]["mean"]["value"]))
        if attacked
        else None
    )
    reasons = []
    if not claim:
        reasons.append("budgets below the reference")
    if not complete:
        reasons.append("the sanity checks did not run" if not config.sanity else "not every sanity check ran")
    verdict = None
    if check["warnings"]:
        verdict = "warnings"
    elif not reasons:
        verdict = "no sign of gradient masking"
    cfg = {k: v for k, v in asdict(config).items() if k not in LATER_FIELDS or LATER_FIELDS[k] != v}
    cfg["norm"] = "inf" if config.norm == math.inf else config.norm
    cfg["step"] = config.step
    return {
        "schema": SCHEMA,
        "scale": "reference" if claim else "smoke",
        "claim": claim,
        "preset": config.preset_name,
        "overridden": {k: _jsonable(cfg.get(k, getattr(config, k))) for k in config.overridden},
        "shortfalls": {"attacks": short, "judging": judging},
        "config": cfg,
        "description": description,
        "card": rows,
        "results": results,
        "strongest": strongest if not reasons else None,
        "strongest_candidate": strongest,
        "strongest_majority": strongest_majority if not reasons else None,
        "strongest_majority_candidate": strongest_majority,
        "verdict_withheld_because": reasons,
        "sanity": {**check, "verdict": verdict},
        "seconds": seconds,
        "estimate_seconds": estimate_seconds,
        "world_size": world_size,
        "baselines": baselines,
        "compression": compression,
        "compression_sweep": dict(compression_sweep or {}),
        "worst_case": worst,
    }


def _worst_case(groups: dict, attacks: list[str]) -> dict | None:
    """The main table's per-image worst case over its attacks (worst of R each): an example counts only if no attack
    broke it (the engine's :func:`~art_adp.runs.engine.worst_case`); None with fewer than two attacks."""
    found = worst_case({a: {r["index"]: all(p == r["label"] for p in r["pred"]) for r in groups.get(("main", a), [])}
                        for a in attacks})  # fmt: skip
    if found is None:
        return None
    cell = summary(found[1])
    return {"value": cell["accuracy"], "ci": cell["ci95"], "method": "wilson", "n": cell["n"], "attacks": attacks}


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def _cell(stat: dict | None) -> str:
    """A card's accuracy (:func:`~art_adp.runs.render.accuracy_cell`), n/a where the row has none."""
    return "n/a" if stat is None else accuracy_cell(stat["value"], stat["ci"])


def header(result: dict) -> list[str]:
    """The lines above the card: scale, preset and overrides, threat model, defence, judging."""
    c = result["config"]
    norm = "l_inf" if c["norm"] == "inf" else "l_2"
    lines = []
    if result["claim"]:
        lines.append(
            "Budgets meet the reference (the paper's protocol; Croce et al. for APGD, whose EOT draws may "
            f"stop where measured strength stops growing: {PLATEAU['apgd_eot_samples']})."
        )
    else:
        short = [f"{a}: {', '.join(v)}" for a, v in result["shortfalls"]["attacks"].items()]
        short += result["shortfalls"]["judging"]
        lines.append(
            "SMOKE-SCALE RUN, NOT A ROBUSTNESS CLAIM: budgets below the reference (the paper's protocol; "
            f"Croce et al. for APGD): {'; '.join(short)}."
        )
    over = result["overridden"]
    lines.append(
        f"Preset: {result['preset']}"
        + (f", overridden: {', '.join(f'{k} = {v}' for k, v in over.items())}" if over else " (no overrides)")
    )
    step = "eps/4, following eps" if c["eps_step"] is None else "set explicitly"
    lines.append(f"Threat model: {norm} eps = {c['eps']:.4g}, step {c['step']:.4g} ({step}); APGD starts at 2 eps")
    lines += [f"{k}: {v}" for k, v in result["description"].items()]
    size = c.get("ensemble_size", c.get("runs"))  # "runs" in cards written before S was ensemble_size
    lines.append(
        f"Judged on the ensemble of S = {size} purifications, R = {c['repeats']} times with fresh "
        "noise; fixed = one frozen noise draw shared by the attack (EOT 1) and the judge."
    )
    rate = result.get("compression")
    if rate and "error" in rate:
        lines.append(f"Compression rate (Liu & Wei 2025, reconstructed): not measured: {rate['error']}")
    elif rate:
        lines.append(
            "Compression rate (Liu & Wei 2025, reconstructed; gradient-free): "
            f"{_rate(rate)} (median [q25, q75] over {rate['nb_examples']} images) at radius {rate['radius']:.4g} "
            f"(l_{rate['norm']} directions, ratios in l_2), {rate['nb_directions']} directions, one fixed noise draw; "
            "below 1 the purifier shrinks the ball"
        )
    return lines


def _rate(rate: dict | None) -> str:
    """A compression summary as ``median [q25, q75]``."""
    if not rate or "error" in rate:
        return "n/a"
    return f"{rate['median']:.3f} [{rate['q25']:.3f}, {rate['q75']:.3f}]"


def markdown(result: dict) -> str:
    """The card as markdown: header, the per-attack table with CIs, sweeps, sanity report."""
    rows, baselines = result["card"], result["baselines"]
    name = result.get("purifier", "ADP")  # the defence's family (cards written before it was recorded: ADP)
    lines = [*header(result), ""]
    cols = [
        "Attack",
        "Budget",
        *[b.capitalize() if b == "undefended" else f"{b} (baseline)" for b in baselines],
        f"{name} mean",
        f"{name} worst of R",
        f"{name} majority of R",
        f"{name} fixed noise",
        "n",
    ]
    table = []
    for r in rows:
        budget = r["budget"]
        if r["below_reference"]:
            budget += f" (below reference: {', '.join(r['below_reference'])})"
        if r["overridden"]:
            budget += f" (overridden: {', '.join(r['overridden'])})"
        cells = [
            r["label"],
            budget,
            *[_cell(r.get("baselines", {}).get(b)) for b in baselines],
            _cell(r["mean"]),
            _cell(r["worst"]),
            _cell(r["majority"]),
            _cell(r.get("fixed")),
            str(r["n"]),
        ]
        table.append(cells)
    lines += markdown_table(cols, table)
    c = result["config"]
    lines.append("")
    foot = (
        f"Accuracy in % with 95 % confidence intervals over the n examples ({_methods(rows)}). Budgets per row as "
        f"run, steps of {c['step']:.4g}; mean = over "
        "examples and R judgements; worst = correct in all R; majority = the label is the unique most frequent "
        "of the R predictions; fixed noise = the fixed-randomness attack: one frozen noise draw shared by the attack "
        "(EOT 1) and the judge, with full gradients the attack that art_adp.attacks.FixedNoisePGD gives users "
        "(SPSA: n/a)."
    )
    if baselines:
        foot += (
            " Undefended and other baselines are attacked directly with the same budgets and judged once "
            "(deterministic); on them the PGD-family rows are PGD, APGD runs with EOT 1."
        )
    lines.append(foot + (f" {c['note']}" if c["note"] else ""))
    if result["strongest"]:
        s = next(r for r in rows if r["attack"] == result["strongest"])
        lines.append(
            f"Strongest attack: {s['label']} ({_pct(s['mean']['value'])} % mean, "
            f"{_pct(s['worst']['value'])} % worst case)."
        )
        if result.get("strongest_majority"):  # cards written before it was recorded have none
            v = next(r for r in rows if r["attack"] == result["strongest_majority"])
            lines.append(
                f"Strongest attack against the majority vote over R: {v['label']} ({_pct(v['majority']['value'])} % "
                "majority)."
            )
    else:
        lines.append(f"No strongest attack named: {' and '.join(result['verdict_withheld_because'])}.")
    if result.get("worst_case"):  # cards written before it was recorded have none
        w = result["worst_case"]
        lines.append(
            f"Per example over all {len(w['attacks'])} attacks (correct only if no attack broke it, worst of R each): "
            f"{_cell(w)} % of {w['n']}."
        )
    sweeps = sweep_tables(result)
    if sweeps:
        lines += ["", *sweeps]
    lines += ["", "Sanity report (Carlini et al. 2019; Croce et al. 2022; AutoAttack's flags):"]
    inputs = result["sanity"]["inputs"]
    if "random_fraction" in inputs:
        lines.append(
            f"- randomness: the same input judged twice gives different outputs for "
            f"{_pct(inputs['random_fraction'])} % of inputs; zero loss gradient for "
            f"{_pct(inputs['zero_gradient_fraction'])} %"
        )
    if "eps_points" in inputs:
        lines.append(
            f"- {inputs['white_box_attack']} on the first {inputs['n']} examples: accuracy "
            + ", ".join(f"{_pct(a)} % at eps {e:.4g}" for e, a in inputs["eps_points"])
            + "; "
            + ", ".join(f"{_pct(a)} % after {int(i)} it" for i, a in inputs["iteration_points"])
            + "; "
            + ", ".join(f"{_pct(a)} % with EOT {int(k)}" for k, a in inputs["eot_points"])
        )
    if "black_box" in inputs:
        only = inputs.get("only_black_box")  # cards written before it was recorded have none
        lines.append(
            f"- SPSA {_pct(inputs['black_box'])} % vs best white-box {_pct(inputs['best_white_box'])} %"
            + ("" if only is None else f"; broken by SPSA and by no gradient attack: {_images(only)}")
        )
    if "gradient_free" in inputs:
        g = inputs["gradient_free"]
        best = g["best_gradient_attack"]
        versus = "" if best is None else f" vs {_pct(g['best_gradient'])} % under the best gradient attack ({best})"
        lines.append(
            f"- gradient-free check (the defence clips its noisy input): {g['attack']} ({g['budget']}) on the "
            f"first {g['n']} examples, {_pct(g['mean'])} % mean{versus} on them; broken by {g['attack']} and by no "
            f"gradient attack: {_images(g['only_broken'])}"
        )
    lines += [f"- skipped: {s}" for s in result["sanity"]["skipped"]]
    lines += [f"- WARNING: {w}" for w in result["sanity"]["warnings"]]
    if result["sanity"]["verdict"] == "no sign of gradient masking":
        lines.append(f"- no sign of gradient masking ({', '.join(result['sanity']['ran'])})")
    elif not result["sanity"]["warnings"]:
        lines.append(f"- no verdict on gradient masking: {' and '.join(result['verdict_withheld_because'])}")
    return "\n".join(lines) + "\n"


def _methods(rows: list[dict]) -> str:
    """The intervals' method in words, as the card recorded it: Wilson for every accuracy; a card written before
    (its counts' intervals exact) says ``Clopper–Pearson; Wilson for the mean over R``."""
    if any(r["worst"].get("method") == "clopper-pearson" for r in rows):
        return "Clopper–Pearson; Wilson for the mean over R, whose count is fractional"
    return "Wilson"


def _images(indices: list[int]) -> str:
    """Image indices in words: ``"none"`` or ``"images 3, 7"``."""
    return f"images {', '.join(map(str, indices))}" if indices else "none"


def sweep_tables(result: dict) -> list[str]:
    """Table 5 (σ sweep) and Table 6 (EOT sweep) when they were run."""
    res, lines = result["results"], []
    sigmas = sorted({float(k.split("/")[0][6:]) for k in res if k.startswith("sigma=")})
    if sigmas:
        rates = result.get("compression_sweep") or {}
        head = ["sigma", "Standard", *(LABELS[a] for a in SIGMA_ROWS[1:]), *(["Compression rate"] if rates else [])]
        cells = {s: [res[f"sigma={s:g}/{a}"] for a in SIGMA_ROWS] for s in sigmas}
        table = [[f"{s:g}", *(f"{_pct(v['mean'])} ({_pct(v['worst'])})" for v in cells[s]),
                  *([_rate(rates.get(f"sigma={s:g}"))] if rates else [])] for s in sigmas]  # fmt: skip
        lines += markdown_table(head, table)
        lines += [
            "",
            "sigma sweep (paper Table 5): mean (worst case) accuracy in %"
            + ("; compression rate median [q25, q75] as in the header, at each sigma." if rates else "."),
            "",
        ]
    eots = sorted({int(k.split("/")[0][4:]) for k in res if k.startswith("eot=")})
    if eots:
        lines += markdown_table(["EOT samples", *map(str, eots)],
                                [[LABELS[SWEEP], *(_pct(res[f"eot={k}/{SWEEP}"]["mean"]) for k in eots)]])  # fmt: skip
        lines += ["", "EOT sweep (paper Table 6): mean accuracy in %."]
    return lines


def eps_curves(result: dict, top: int = 3) -> dict:
    """Accuracy against ε with CIs for the ``top`` strongest attacks: ε = 0 (clean), the main ε, every swept ε."""
    res, c = result["results"], result["config"]
    attacked = sorted((r for r in result["card"] if r["attack"] != "clean"), key=lambda r: r["mean"]["value"])
    clean = res["main/clean"]
    curves = {}
    for r in attacked[:top]:
        a = r["attack"]
        points = [(0.0, clean["mean"], *clean["ci"]["mean"]), (c["eps"], r["mean"]["value"], *r["mean"]["ci"])]
        for key, v in res.items():
            setting, attack = key.split("/", 1)
            if setting.startswith("eps=") and attack == a:
                points.append((float(setting[4:]), v["mean"], *v["ci"]["mean"]))
        curves[r["label"]] = sorted(points)
    inputs = result["sanity"]["inputs"]
    if "eps_points" in inputs:
        n, a = inputs["n"], inputs["white_box_attack"]
        curves[f"{LABELS[a]}, first {n} (sanity)"] = sorted(
            (e, acc, *wilson(acc, n)) for e, acc in inputs["eps_points"]
        )
    return curves


def write(result: dict, run_dir: str | os.PathLike, *, log: Callable[[str], None] = print) -> None:
    """Write ``report.md``, ``report.json`` and the figures into ``run_dir`` and log the markdown."""
    from .. import plots

    run_dir = Path(run_dir)
    text = markdown(result)
    (run_dir / "report.md").write_text(text)
    write_json(run_dir / "report.json", result, indent=2)
    res = result["results"]
    scale = "reference budgets" if result["claim"] else "SMOKE-SCALE, not a robustness claim"
    plots.accuracy_vs_eps(
        run_dir / "accuracy_vs_eps.png",
        eps_curves(result),
        title=f"Accuracy against eps, mean over R, 95 % CI ({scale})",
    )
    sigmas = sorted({float(k.split("/")[0][6:]) for k in res if k.startswith("sigma=")})
    if sigmas:
        curves = {LABELS[a]: [res[f"sigma={s:g}/{a}"]["mean"] for s in sigmas] for a in SIGMA_ROWS}
        plots.sweep_curve(run_dir / "sigma_sweep.png", sigmas, curves, xlabel="sigma", title="sigma sweep (Table 5)")
    eots = sorted({int(k.split("/")[0][4:]) for k in res if k.startswith("eot=")})
    if eots:
        plots.sweep_curve(
            run_dir / "eot_sweep.png",
            eots,
            {LABELS[SWEEP]: [res[f"eot={k}/{SWEEP}"]["mean"] for k in eots]},
            xlabel="EOT samples",
            title="EOT sweep (Table 6)",
        )
    for line in text.splitlines():
        log(line)
