"""The certification run (``art-adp certify``): :func:`~art_adp.certify.certify` and
:func:`~art_adp.certify.certify_approximate` over a test set at several σ, one JSON line per input (resumable, the
settings guarded), then the certified-accuracy table and curves."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..certify import Certificate, _check, approximate_radius, certified_accuracy, certify, certify_approximate
from ..runs.records import append_records, describe_differences, read_jsonl
from .plots import certified_accuracy_curve

__all__ = ["run_certify"]


def _read_records(path: Path) -> dict[int, dict]:
    """Complete records of a certification JSONL file by input index (a line cut short by an interruption is
    ignored here and cut off before the next append)."""
    return {record["index"]: record for record in read_jsonl(path)}


def run_certify(
    run_dir: str | Path,
    model_for_sigma: Callable[[float], Callable],
    x: torch.Tensor,
    y: np.ndarray,
    *,
    sigmas: Sequence[float] = (0.12, 0.25, 0.5),
    n0: int = 100,
    n: int = 1000,
    alpha: float = 0.001,
    n_approximate: int = 100,
    radii: Sequence[float] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0),
    batch_size: int = 1000,
    seed: int = 0,
    progress: bool = True,
    settings: dict | None = None,
) -> dict:
    """
    Certify every input of ``x`` at each σ (CERTIFY and the approximate variant), writing one JSON line per input
    to ``run_dir/certify_sigma{σ}.jsonl`` as it finishes, so an interrupted run resumes where it stopped (input i
    always draws its noise from a generator seeded by ``(seed, i)``); then ``certify.json``, ``certify.md`` (the
    certified-accuracy table) and ``certify.png`` (the curves). ``certify_settings.json`` records n₀, n, α, the
    approximate variant's n and the seed; resuming with other settings raises. When ``n_approximate == n0`` the
    approximate radius comes from CERTIFY's n₀ selection draws (no extra samples; the paper's variant uses 100 draws).

    :param run_dir: Output folder.
    :param model_for_sigma: σ → base classifier (e.g. ``lambda s: adp_base_classifier(clf, score)``).
    :param x: ``N×C×H×W`` inputs; ``y``: their ``N`` labels.
    :param settings: Further settings that change the certificates (e.g. the checkpoints' SHA-256, the purification
        steps), stored and compared with n₀, n, α, the approximate n and the seed.
    :return: ``{"table": {σ: {"certify": [...], "approximate": [...]}}, "radii": [...], ...}``.
    """
    for sigma in sigmas:
        _check(lambda z: z, x, sigma, n0, n, alpha, batch_size)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = {**(settings or {}), "n0": n0, "n": n, "alpha": alpha, "n_approximate": n_approximate, "seed": seed}
    settings = json.loads(json.dumps(settings))  # as stored (tuples become lists)
    settings_path = run_dir / "certify_settings.json"
    if settings_path.exists():
        stored = json.loads(settings_path.read_text())
        if stored != settings:
            raise ValueError(
                f"{run_dir} holds certificates made with other settings: "
                f"{describe_differences(stored, settings)}. Use another run directory, or the same "
                "settings to resume."
            )
    settings_path.write_text(json.dumps(settings))
    y = np.asarray(y)
    table, curves = {}, {}
    for sigma in sigmas:
        model = model_for_sigma(sigma)
        path = run_dir / f"certify_sigma{sigma:g}.jsonl"
        records = _read_records(path)
        todo = [i for i in range(len(x)) if i not in records]
        for i in tqdm(todo, desc=f"certify sigma={sigma:g} ({len(records)} done)", disable=not progress):
            gen = torch.Generator(x.device).manual_seed(seed * 1_000_003 + i)
            exact = certify(
                model,
                x[i : i + 1],
                sigma=sigma,
                n0=n0,
                n=n,
                alpha=alpha,
                batch_size=batch_size,
                generator=gen,
                progress=False,
            )
            # the selection draws double as the paper's approximate estimate
            if n_approximate == n0 and exact.selection_counts is not None:
                approx = approximate_radius(exact.selection_counts, sigma)
            else:
                approx = certify_approximate(
                    model,
                    x[i : i + 1],
                    sigma=sigma,
                    n=n_approximate,
                    batch_size=batch_size,
                    generator=gen,
                    progress=False,
                )
            record = {
                "index": i,
                "label": int(y[i]),
                "prediction": int(exact.prediction[0]),
                "radius": float(exact.radius[0]),
                "p_a_lower": float(exact.p_a[0]),
                "approx_prediction": int(approx.prediction[0]),
                "approx_radius": float(approx.radius[0]),
            }
            append_records(path, [record])
            records[i] = record
        rec = [records[i] for i in range(len(x))]
        exact = Certificate(
            np.array([r["prediction"] for r in rec]),
            np.array([r["radius"] for r in rec]),
            np.array([r["p_a_lower"] for r in rec]),
            np.zeros((len(rec), 0)),
            sigma,
            False,
        )
        approx = Certificate(
            np.array([r["approx_prediction"] for r in rec]),
            np.array([r["approx_radius"] for r in rec]),
            np.zeros(len(rec)),
            np.zeros((len(rec), 0)),
            sigma,
            True,
        )
        grid = np.linspace(0, max(radii[-1], 2.6 * max(sigmas)), 200)
        curves[f"{sigma:g}"] = {
            "CERTIFY": (grid, certified_accuracy(exact, y, grid)),
            "approximate": (grid, certified_accuracy(approx, y, grid)),
        }
        table[f"{sigma:g}"] = {
            "certify": certified_accuracy(exact, y, radii).tolist(),
            "approximate": certified_accuracy(approx, y, radii).tolist(),
            "abstained": int(np.sum(exact.prediction == -1)),
        }
    header = "| σ | variant | " + " | ".join(f"r = {r:g}" for r in radii) + " |"
    lines = [header, "|---|---|" + "---|" * len(radii)]
    for sigma_key, row in table.items():
        lines.append(
            f"| {sigma_key} | CERTIFY (n0={n0}, n={n}, α={alpha:g}) | "
            + " | ".join(f"{100 * a:.1f}" for a in row["certify"])
            + " |"
        )
        lines.append(
            f"| {sigma_key} | approximate (n={n_approximate}, not a certificate) | "
            + " | ".join(f"{100 * a:.1f}" for a in row["approximate"])
            + " |"
        )
    (run_dir / "certify.md").write_text("\n".join(lines) + "\n")
    certified_accuracy_curve(
        run_dir / "certify.png", curves, title=f"ADP-smoothed classifier, {len(x)} inputs, n0={n0}, n={n}, α={alpha:g}"
    )
    results = {
        "table": table,
        "radii": list(radii),
        "n0": n0,
        "n": n,
        "alpha": alpha,
        "n_approximate": n_approximate,
        "n_examples": len(x),
        "seed": seed,
    }
    (run_dir / "certify.json").write_text(json.dumps(results, indent=2))
    return results
