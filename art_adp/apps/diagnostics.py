"""Diagnostics that say why a purifier fails on real data, per score-model snapshot.

Three questions, each answered by an accuracy on the same images and judged the way ADP is judged (the S-run
ensemble: mean softmax over S draws of the noise, one judgement):

- **noise alone** -- the classifier on clip(x + σε), no purification: what the classifier keeps of the injected
  noise. If this is low, no purifier can do better than what it gives back (the classifier cannot take the noise).
- **one-step denoise** -- clip(x₀ + σ·h(x₀)) with x₀ = clip(x + σε): Tweedie's one-step estimate of the clean image
  from the score network h (``h(x̃) ≈ −z`` for x̃ = x + σz). It is what a good score model reaches in one jump;
  if it is low, the score model is weak.
- **ADP sweep** (final snapshot only) -- ADP at T ∈ :data:`SWEEP_STEPS` and λ ∈ :data:`SWEEP_LAMS`. In the local
  Gaussian model each step closes about λ of the gap to the denoised point (1 − (1 − λ)^T after T steps: 40 % at
  T = 10, λ = 0.05; 99.5 % at T = 50, λ = 0.1): if ADP is well below the one-step denoise and rises with T·λ, the
  step schedule stops short.

Each is measured on clean images and on the Clf-PGD images of the recipe.
"""

from __future__ import annotations

from collections.abc import Callable

import itertools
import os
from typing import Any

import numpy as np
import torch

from .._device import to_model
from ..defended import DefendedModel
from ..purification import purify
from ..runs.records import append_records, read_jsonl, record_key
from ..runs.seeds import derive_seed
from ..runs.render import accuracy_cell, markdown_table

__all__ = ["SWEEP_STEPS", "SWEEP_LAMS", "ensemble_correct", "one_step_denoise", "snapshot_diagnostics", "adp_sweep"]

SWEEP_STEPS = (10, 20, 50)
SWEEP_LAMS = (0.05, 0.1)

Transform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def ensemble_correct(
    classifier: torch.nn.Module,
    transform: Transform,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray,
    *,
    ensemble_size: int,
    seed: int,
    batch_size: int = 256,
) -> np.ndarray:
    """
    Whether the mean softmax of ``classifier`` over ``ensemble_size`` draws of ``transform(x, generator)`` picks ``y``:
    the S-run ensemble of :class:`~art_adp.DefendedModel`.

    The draws come from a CPU generator seeded per batch and draw (same noise on every device).

    :return: Boolean array of length N.
    """
    x = to_model(x if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float32), classifier)
    y_t = torch.as_tensor(np.asarray(y))
    out = []
    with torch.no_grad():
        for i, xb in enumerate(x.split(batch_size)):  # one draw of the batch per pass: draw r is the r-th call
            model = DefendedModel(classifier, _seeded(transform, seed, i), ensemble_size=ensemble_size,
                                  batch_size=len(xb))  # fmt: skip
            out.append(model(xb).argmax(1).cpu())
    return (torch.cat(out) == y_t[: len(x)]).numpy()


def _seeded(transform: Transform, seed: int, batch: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``transform`` as a purifier ``x → x'`` whose ``r``-th call draws from a CPU generator seeded
    ``derive_seed(seed, "diagnostic", batch, r)``."""
    draws = itertools.count()
    return lambda xb: transform(xb, torch.Generator().manual_seed(derive_seed(seed, "diagnostic", batch, next(draws))))


def noisy(sigma: float) -> Transform:
    """clip(x + σε): the injected noise alone."""
    return lambda xb, g: purify(_identity, xb, sigma=sigma, steps=0, generator=g)


def one_step_denoise(score_model: torch.nn.Module, sigma: float) -> Transform:
    """clip(x₀ + σ·h(x₀)), x₀ = clip(x + σε): Tweedie's one-step denoise with the noise-level-free score h."""

    def transform(xb: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        x0 = purify(score_model, xb, sigma=sigma, steps=0, generator=g)
        return (x0 + sigma * score_model(x0)).clamp(0.0, 1.0)

    return transform


def adp(score_model: torch.nn.Module, sigma: float, steps: int, lam: float) -> Transform:
    """ADP (adaptive step size) at T = ``steps`` and λ = ``lam``."""
    return lambda xb, g: purify(score_model, xb, sigma=sigma, steps=steps, lam=lam, generator=g)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _pct(ok: np.ndarray) -> dict:
    return {"correct": int(ok.sum()), "n": int(len(ok)), "accuracy": round(float(ok.mean()), 4) if len(ok) else None}


def snapshot_diagnostics(
    classifier: torch.nn.Module,
    score_model: torch.nn.Module,
    x: np.ndarray,
    x_pgd: np.ndarray,
    y: np.ndarray,
    *,
    sigma: float,
    ensemble_size: int,
    seed: int,
) -> dict:
    """
    The per-snapshot diagnostics on clean images ``x`` and their Clf-PGD images ``x_pgd``.

    :return: ``{"noise": {"clean": ..., "clf_pgd": ...}, "denoise1": {...}}``, each ``{"correct", "n", "accuracy"}``.
    """
    out: dict = {}
    for key, transform in (("noise", noisy(sigma)), ("denoise1", one_step_denoise(score_model, sigma))):
        out[key] = {
            row: _pct(
                ensemble_correct(
                    classifier, transform, xs, y, ensemble_size=ensemble_size, seed=derive_seed(seed, key, row)
                )
            )
            for row, xs in (("clean", x), ("clf_pgd", x_pgd))
        }
    return out


def adp_sweep(
    classifier: torch.nn.Module,
    score_model: torch.nn.Module,
    x: np.ndarray,
    x_pgd: np.ndarray,
    y: np.ndarray,
    *,
    sigma: float,
    ensemble_size: int,
    seed: int,
    steps: tuple[int, ...] = SWEEP_STEPS,
    lams: tuple[float, ...] = SWEEP_LAMS,
) -> list[dict]:
    """ADP clean and under Clf-PGD at every (T, λ) of the sweep: one record ``{"steps", "lam", "clean", "clf_pgd"}``
    each."""
    records = []
    for t in steps:
        for lam in lams:
            transform = adp(score_model, sigma, t, lam)
            rec: dict = {"steps": t, "lam": lam, "closed": round(1 - (1 - lam) ** t, 3)}
            for row, xs in (("clean", x), ("clf_pgd", x_pgd)):
                s = derive_seed(seed, "sweep", t, lam, row)
                rec[row] = _pct(ensemble_correct(classifier, transform, xs, y, ensemble_size=ensemble_size, seed=s))
            records.append(rec)
    return records


def render_diagnostics(
    per_step: list[dict], sweep: list[dict], sigma: float, *, compression_label: str | None = None
) -> str:
    """
    Markdown: one line per snapshot (noise alone, one-step denoise, ADP), then the sweep on the final one.

    :param per_step: One dict per snapshot (``step``, ``n``, ``noise``, ``denoise1``, optionally ``adp`` and
        ``compression_rate``).
    :param sweep: The ADP sweep's rows on the final snapshot (may be empty).
    :param sigma: The injected noise σ (for the header).
    :param compression_label: With a header here, one more column: each step's ``compression_rate`` (– where None).
    """

    def cell(d: dict | None) -> str:
        return "–" if not d or d.get("accuracy") is None else accuracy_cell(d["accuracy"])

    def pair(d: dict | None) -> str:
        return f"{cell((d or {}).get('clean'))} / {cell((d or {}).get('clf_pgd'))}"

    head = ["score iterations", "n", f"noise σ = {sigma} alone: clean / Clf-PGD", "one-step denoise: clean / Clf-PGD",
            "ADP (T 10, λ 0.05): clean / Clf-PGD", *([compression_label] if compression_label else [])]  # fmt: skip
    rates = [["–" if r.get("compression_rate") is None else f"{r['compression_rate']:.3f}"] for r in per_step]
    rows = [[f"{r['step']:,}", r["n"], pair(r["noise"]), pair(r["denoise1"]), pair(r.get("adp")),
             *(rate if compression_label else [])] for r, rate in zip(per_step, rates)]  # fmt: skip
    lines = markdown_table(head, rows)
    if sweep:
        lines += ["", f"ADP sweep on the final snapshot ({sweep[0].get('step', '?'):,} iterations):", "",
                  *markdown_table(["T", "λ", "1 − (1 − λ)^T", "clean", "Clf-PGD"],
                                  [[r["steps"], r["lam"], f"{r['closed']:.2f}", cell(r["clean"]), cell(r["clf_pgd"])]
                                   for r in sweep])]  # fmt: skip
    return "\n".join(lines)


def stage_diagnostics(
    classifier: torch.nn.Module,
    data: Any,
    recipe: Any,
    run_dir: str | os.PathLike,
    *,
    load_snapshot: Callable[[int], torch.nn.Module],
    clf_pgd: Callable[[], np.ndarray],
    log: Callable[[str], None] = print,
    measure: bool = True,
) -> dict:
    """
    ``reproduce``'s diagnostics, resumable: per curve snapshot (:func:`snapshot_diagnostics`, one line of
    ``diagnostics.jsonl`` each) and the sweep on the latest snapshot (:func:`adp_sweep`), on the first ``n_curve``
    test images, judged on the S = ``recipe.ensemble_size`` ensemble.

    :param classifier: The classifier, on the device the diagnostics run on.
    :param data: The :class:`~art_adp.data.Dataset` (test images and labels).
    :param recipe: The :class:`~art_adp.apps.reproduce.MnistRecipe` (σ, S, ``n_curve``, milestones, seed).
    :param run_dir: The run folder (``score/snapshots/``; ``diagnostics.jsonl`` is written there).
    :param load_snapshot: Iteration count → the EMA score model saved there.
    :param clf_pgd: The recipe's Clf-PGD images of the first test images (at least ``n_curve``).
    :param log: Where progress lines go.
    :param measure: False: only read what ``diagnostics.jsonl`` holds (the ``report`` stage alone).
    :return: ``{"per_step": [...], "sweep": [...]}`` (the sweep of the latest snapshot measured).
    """
    import json
    import time
    from pathlib import Path

    path = Path(run_dir) / "diagnostics.jsonl"
    recs = read_jsonl(path)
    done = {record_key(r, ("kind", "step", "steps", "lam"), {"steps": None, "lam": None}) for r in recs}
    snapshots = Path(run_dir) / "score" / "snapshots"
    steps = [m for m in recipe.milestones if (snapshots / f"score_{m:07d}.safetensors").exists()]
    n = min(recipe.n_curve, len(data.x_test))
    x, y = data.x_test[:n], data.y_test[:n]
    x_pgd = None
    todo: list[tuple[str, int, int | None, float | None]] = [
        ("snapshot", m, None, None) for m in recipe.curve_milestones if m in steps
    ]
    todo += [("sweep", steps[-1], t, lam) for t in SWEEP_STEPS for lam in SWEEP_LAMS] if steps else []
    loaded: dict[int, torch.nn.Module] = {}
    for kind, m, t, lam in todo:  # one line each: a sweep resumes per (T, λ)
        if (kind, m, t, lam) in done or not measure:
            continue
        x_pgd = clf_pgd()[:n] if x_pgd is None else x_pgd
        start = time.perf_counter()
        if m not in loaded:
            loaded.clear()
            loaded[m] = load_snapshot(m).eval().requires_grad_(False)
        seed = derive_seed(recipe.seed, kind, m)
        common = {"sigma": recipe.sigma, "ensemble_size": recipe.ensemble_size, "seed": seed}
        rec: dict = {"kind": kind, "step": m, "n": n, "ensemble_size": recipe.ensemble_size}
        if kind == "snapshot":
            rec.update(snapshot_diagnostics(classifier, loaded[m], x, x_pgd, y, **common))  # type: ignore[arg-type]
        else:
            assert t is not None and lam is not None
            grid = {"steps": (t,), "lams": (lam,)}
            rec.update(adp_sweep(classifier, loaded[m], x, x_pgd, y, **grid, **common)[0])  # type: ignore[arg-type]
        rec["wall_s"] = round(time.perf_counter() - start, 1)
        append_records(path, [rec])
        recs.append(rec)
        log(f"[diagnostics] {kind} at {m} iterations: {json.dumps(rec)}")
    per_step = sorted((r for r in recs if r["kind"] == "snapshot"), key=lambda r: r["step"])
    last = max((r["step"] for r in recs if r["kind"] == "sweep" and "steps" in r), default=None)
    sweep = sorted(
        (r for r in recs if r["kind"] == "sweep" and r["step"] == last and "steps" in r),
        key=lambda r: (r["steps"], r["lam"]),
    )
    return {"per_step": per_step, "sweep": sweep}
