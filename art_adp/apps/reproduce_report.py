"""``reproduce mnist``'s report: the learning curve and the table from the records (the paper's number beside the
measured one at every budget), the diagnostics in words, and the curve's figure."""

from __future__ import annotations

from pathlib import Path


from ..attacks import registry
from ..attacks.registry import LABELS
from ..runs.engine import (correct)  # fmt: skip
from ..runs.render import accuracy_cell, markdown_table
from ..runs.statistics import summary
from .reproduce_recipe import CURVE_DIRECTIONS, PAPER_MNIST, MnistRecipe
from .snapshots import read_snapshot_log

__all__ = ["render_table"]


def _diagnostics_md(report: dict) -> str:
    from .diagnostics import render_diagnostics

    adp = {p["step"]: {"clean": p["clean"] / p["n"], "clf_pgd": p["clf_pgd"] / p["n"]} for p in report["curve"]}
    rates = {p["step"]: p.get("compression_rate") for p in report["curve"]}
    per_step = [
        {
            **r,
            "adp": {k: {"accuracy": v} for k, v in adp.get(r["step"], {}).items()},
            "compression_rate": rates.get(r["step"]),
        }
        for r in report["diagnostics"]["per_step"]
    ]
    label = f"compression rate (median, l_inf radius {report['recipe']['eps']}, {CURVE_DIRECTIONS} directions)"
    return render_diagnostics(
        per_step, report["diagnostics"]["sweep"], report["recipe"]["sigma"], compression_label=label
    )


def _curve(records: list[dict], denoise: dict[int, dict], recipe: MnistRecipe, run_dir: Path) -> list[dict]:
    """Learning-curve points: per snapshot with complete records, accuracy on the first ``n_curve`` images."""
    train = {r["step"]: r["wall_s"] for r in read_snapshot_log(run_dir / "score")}
    out = []
    for m in recipe.curve_milestones:
        if m not in denoise or m not in train:
            continue
        n = denoise[m]["n"]
        point = {
            "step": m,
            "train_wall_s": train[m],
            "n": n,
            "ensemble_size": recipe.ensemble_size,
            "repeats": recipe.repeats,
            "denoising_ratio": denoise[m]["denoising_ratio"],
            "attack_ratio": denoise[m].get("attack_ratio"),
            "compression_rate": denoise[m].get("compression_rate"),
        }
        for row, key in (("clean", "clean"), (registry.BLIND_ATTACK, "clf_pgd")):
            recs = [r for r in records if r["budget"] == m and r["row"] == row and r["index"] < n]
            if len(recs) < n:
                break
            point[key] = sum(correct(r) for r in recs)
        else:
            out.append(point)
    return out


def _summarise(records: list[dict], recipe: MnistRecipe, n_test: int) -> dict:
    rows = recipe.rows()
    out: dict = {}
    for b in recipe.budgets:
        for row, spec in rows.items():
            limit = n_test if spec["n"] is None else min(spec["n"], n_test)
            recs = [r for r in records if r["budget"] == b and r["row"] == row and r["index"] < limit]
            ok = [correct(r) for r in recs]
            mine, bare = summary(ok), summary([r["undefended_pred"] == r["label"] for r in recs])
            out.setdefault(row, {})[str(b)] = {
                "n": len(recs),
                "target_n": limit,
                "correct": sum(ok),
                "accuracy": mine["accuracy"] if recs else None,
                "ci95": mine["ci95"],
                "undefended": bare["accuracy"] if recs else None,
                "undefended_ci95": bare["ci95"],
                "max_linf": max((r["linf"] for r in recs), default=0.0),
                "wall_s": round(sum(r["wall_s"] for r in recs), 1),
            }
    return out


def render_table(report: dict) -> str:
    """The markdown table: one line per row, the paper's number beside the measured one at every budget."""
    recipe = report["recipe"]
    budgets = [str(b) for b in recipe["budgets"]]
    rows = report["rows"]
    train = {str(r["step"]): r for r in report["score_snapshots"]}

    def trained(b):
        return f"{train[b]['wall_s'] / 60:.0f} min" if b in train else "not trained yet"

    head = ["row", "n", "attack budget", "paper (ADP)", "undefended MLP"] + [
        f"ADP, score {int(b):,} it ({trained(b)})" for b in budgets
    ]
    lines = []
    for row, per in rows.items():
        first = per[budgets[0]]
        spec = report["row_budgets"][row]
        budget = (
            "–"
            if row == "clean"
            else (
                f"ε = {recipe['eps']}, {spec['max_iter']} × {spec['eps_step']}"
                + (f", EOT {spec['eot_samples']}" if "eot_samples" in spec else "")
            )
        )
        paper = PAPER_MNIST.get(row)
        cells = [
            LABELS[row],
            str(first["target_n"]),
            budget,
            "–" if paper is None else f"{paper:.2f}",
            (
                "–"
                if first["undefended"] is None
                else (
                    accuracy_cell(first["undefended"], first["undefended_ci95"])
                    if row in ("clean", registry.BLIND_ATTACK)
                    else "–"
                )
            ),
        ]
        for b in budgets:
            cell = "–" if per[b]["accuracy"] is None else accuracy_cell(per[b]["accuracy"], per[b]["ci95"])
            if 0 < per[b]["n"] < per[b]["target_n"]:
                cell += f" (partial: {per[b]['n']} of {per[b]['target_n']})"
            cells.append(cell)
        lines.append(cells)
    return "\n".join(markdown_table(head, lines))


def _plot_curve(curve: list[dict], path: Path, title: str, undefended: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in curve]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    ax.plot(steps, [100 * r["clean"] / r["n"] for r in curve], "o-", label="ADP clean")
    ax.plot(steps, [100 * r["clf_pgd"] / r["n"] for r in curve], "s-", label="ADP under Clf-PGD ε = 0.3")
    ax.axhline(PAPER_MNIST["clean"], color="tab:blue", ls=":", lw=1, label="paper, clean (98.07 %)")
    if undefended is not None:
        ax.axhline(
            100 * undefended, color="gray", ls="--", lw=1, label=f"undefended MLP, clean ({100 * undefended:.2f} %)"
        )
    ax.axhline(PAPER_MNIST[registry.BLIND_ATTACK], color="tab:orange", ls=":", lw=1, label="paper, Clf-PGD (96.41 %)")
    for r in curve:
        ax.annotate(
            f"{r['train_wall_s'] / 60:.0f} min",
            (r["step"], 100 * r["clean"] / r["n"]),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    ax.set_ylim(-3, 103)
    ax.set_ylabel(f"accuracy (%), first {curve[0]['n']} test images, S = {curve[0]['ensemble_size']}")
    ratios = (("denoising_ratio", "^-", "tab:green", "denoising ratio: noisy clean images"),
              ("attack_ratio", "v-", "tab:red", "attack-removal ratio: Clf-PGD images"))  # fmt: skip
    for key, style, color, label in ratios:  # the attack's ratio only where every snapshot has one
        if all(r.get(key) is not None for r in curve):
            ax2.plot(steps, [r[key] for r in curve], style, color=color, label=label)
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("MSE to the clean image: before / after purifying")
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_xlabel(
            "score-model training iterations (labels: training wall time)"
            if a is ax
            else "score-model training iterations"
        )
        a.legend(fontsize=8, loc="center right")
        a.grid(alpha=0.3)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
