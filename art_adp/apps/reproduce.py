"""``art-adp reproduce mnist``: the paper's MNIST row as one resumable command.

Stages, each resumable and each timed (the wall seconds land in ``table.json``):

1. ``classifier`` -- the paper's MNIST MLP (:class:`~art_adp.models.MLP`), trained once (about a minute on a CPU).
2. ``score``      -- an NCSNv2 score model by multi-level DSM, with EMA snapshots at milestone iterations
   (:func:`~art_adp.apps.snapshots.train_with_snapshots`; resumes from its checkpoint bit-identically).
3. ``curve``      -- per snapshot: the denoising ratio and ADP accuracy, clean and under the Clf-PGD row, on the
   first ``n_curve`` test images (the learning curve; one JSON line per snapshot).
4. ``table``      -- per budget (a snapshot's iteration count): clean, Clf-PGD, BPDA+EOT and a full-gradient attack,
   judged on the S-run ensemble, worst case over R repeats, one JSON line per example (resumes per chunk).
5. ``report``     -- ``table.md`` / ``table.json`` with the paper's numbers beside the measured ones, Wilson 95 %
   intervals, n and budget per row, and ``learning_curve.png``.

| Paper link: https://arxiv.org/abs/2106.06041 (Appendix, "Evaluation results for more datasets": MNIST,
  ε = 0.3, Clf PGD, 98.07 % standard, 96.41 % robust)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .._device import to_model
from .._hardware import resolve_precision
from ..attacks import registry
from ..runs.provenance import device_description
from ..preprocessor import ADPPurifier
from ..purification import purify
from ..runs.engine import (Attacking, Cell, Judgement, Seeds, build_defence, defended_estimator, pending,
                           registry_attack, run)  # fmt: skip
from ..runs.plans import budget, plan
from ..runs.records import append_records, guard_settings, read_jsonl, read_records, settings_path
from ..runs.records import write_json
from ..runs.seeds import SeedPlan, derive_seed
from .reproduce_recipe import CURVE_DIRECTIONS, PAPER_MNIST, MnistRecipe
from .reproduce_report import _curve, _diagnostics_md, _plot_curve, _summarise, render_table
from .snapshots import read_snapshot_log, train_with_snapshots

__all__ = ["PAPER_MNIST", "STAGES", "MnistRecipe", "reproduce_command", "reproduce_mnist", "render_table"]

STAGES = ("classifier", "score", "curve", "table", "report")
#: The key fields of an evaluation cell of ``reproduce mnist`` (:attr:`~art_adp.runs.engine.Cell.key_fields`): the
#: snapshot (its training iterations), the row.
CELL = ("budget", "row")


def _stage_classifier(data, recipe: MnistRecipe, run_dir: Path, device: str, progress: bool, log) -> torch.nn.Module:
    from ..models import MLP, evaluate_accuracy, load_classifier, save_classifier, train_classifier

    path, info = run_dir / "classifier.safetensors", run_dir / "classifier.json"
    if path.exists() and info.exists():
        log(f"[classifier] reusing {path}")
        return load_classifier(path, device)
    log("[classifier] training the MLP")
    torch.manual_seed(recipe.seed)
    _, c, size, _ = data.x_train.shape
    start = time.perf_counter()
    model = train_classifier(
        MLP(c, size, data.nb_classes, hidden=recipe.hidden),
        data.x_train,
        data.y_train,
        epochs=recipe.clf_epochs,
        batch_size=recipe.clf_batch_size,
        lr=recipe.clf_lr,
        seed=recipe.seed,
        progress=progress,
        device=device,
    )
    wall = time.perf_counter() - start
    save_classifier(model, path)
    acc = evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    write_json(info, {"test_accuracy": acc, "wall_s": round(wall, 1), "epochs": recipe.clf_epochs})
    return model


def _stage_score(data, recipe: MnistRecipe, run_dir: Path, device: str, progress: bool, log, options) -> None:
    from ..score import NCSNv2, geometric_sigmas

    score_dir = run_dir / "score"
    done = {rec["step"] for rec in read_snapshot_log(score_dir)}
    if set(recipe.milestones) <= done:
        log(f"[score] reusing the snapshots at {recipe.milestones}")
        return
    log(f"[score] training to {recipe.milestones[-1]} iterations, snapshots at {recipe.milestones}")
    _, c, size, _ = data.x_train.shape
    torch.manual_seed(recipe.seed)  # the initial weights: the same command gives the same model
    train_with_snapshots(
        NCSNv2(c, size, ngf=recipe.ngf),
        data.x_train,
        geometric_sigmas(recipe.sigma_begin, recipe.sigma_end, recipe.num_sigmas),
        recipe.milestones,
        score_dir,
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        ema_decay=recipe.ema_decay,
        seed=recipe.seed,
        checkpoint_every=recipe.checkpoint_every,
        progress=progress,
        device=device,
        lr_warmup=recipe.lr_warmup,
        precision=recipe.precision,
        **options,
    )


def _snapshot(run_dir: Path, step: int, device: str) -> torch.nn.Module:
    from ..score import load_score_model

    return load_score_model(run_dir / "score" / "snapshots" / f"score_{step:07d}.safetensors", device)


def _adversarials(name: str, cache: Path, make: Callable[[], np.ndarray]) -> np.ndarray:
    """Attacks that do not depend on the score model (Clf-PGD) are computed once and kept."""
    if cache.exists():
        with np.load(cache) as f:
            return f["x"]
    x_adv = make()
    np.savez(cache, x=x_adv)
    return x_adv


def _clf_pgd(classifier, data, recipe: MnistRecipe, n: int, run_dir: Path, device: str) -> np.ndarray:
    def make():
        est = defended_estimator(classifier, None, input_shape=data.x_test.shape[1:], nb_classes=data.nb_classes,
                                 device=device)  # fmt: skip
        # the paper's row, from the image (its examples are kept and reused)
        b = budget(registry.BLIND_ATTACK, eps=recipe.eps, eps_step=recipe.eps_step, max_iter=recipe.max_iter,
                   random_start=False, batch_size=256)  # fmt: skip
        return registry_attack(registry.BLIND_ATTACK, b)(est, data.x_test[:n], data.y_test[:n], None, Seeds(0, 0))

    return _adversarials(registry.BLIND_ATTACK, run_dir / _pgd_file(n), make)


def _pgd_file(n: int) -> str:
    """The run folder's file of the Clf-PGD examples of the first ``n`` test images."""
    return f"{registry.BLIND_ATTACK}_{n}.npz"


def _snapshot_path(run_dir: Path, step: int) -> Path:
    return run_dir / "score" / "snapshots" / f"score_{step:07d}.safetensors"


def _units(recipe: MnistRecipe, n_test: int, run_dir: Path, stages, log) -> list[tuple[int, str, np.ndarray]]:
    """(score step, row, example indices) in the order they run: by step, the curve's rows first."""
    units = []
    for m in recipe.milestones:
        if not _snapshot_path(run_dir, m).exists():
            log(f"[eval] no snapshot at {m} iterations yet: skipped")
            continue
        rows = {}
        if "curve" in stages and m in recipe.curve_milestones:
            rows.update({r: min(recipe.n_curve, n_test) for r in ("clean", registry.BLIND_ATTACK)})
        if "table" in stages and m in recipe.budgets:
            for row, spec in recipe.rows().items():
                rows[row] = max(rows.get(row, 0), n_test if spec["n"] is None else min(spec["n"], n_test))
        for row, n in rows.items():
            units += [(m, row, np.arange(s, min(s + recipe.chunk_size, n))) for s in range(0, n, recipe.chunk_size)]
    return units


def _stage_eval(
    classifier, data, recipe: MnistRecipe, run_dir: Path, device: str, progress: bool, log, stages
) -> list[dict]:
    """Judge every (snapshot, row, chunk) the curve and the table need: one cell of the engine per (snapshot, row),
    blocks of ``chunk_size`` images; one JSON line per example."""
    n_test = len(data.x_test)
    images: dict[tuple[int, str], int] = {}  # (snapshot, row) -> the images its chunks cover
    for b, row, idx in _units(recipe, n_test, run_dir, stages, log):
        images[(b, row)] = max(images.get((b, row), 0), int(idx[-1]) + 1)
    n_pgd = min(n_test, max(recipe.n_curve, n_test if recipe.n_examples is None else recipe.n_examples))
    cells = [_cell(b, row, n, recipe, _pgd_file(n_pgd)) for (b, row), n in images.items()]
    left = pending(cells, n_test, run_dir)
    cells = [c for c in cells if left[c.key]]
    if not cells:
        log("[eval] reusing every record")
        return read_records(run_dir)
    log(f"[eval] {sum(left.values())} image judgement(s) of {len(cells)} (snapshot, row) cell(s) to make")
    if any(c.key[1] == registry.BLIND_ATTACK for c in cells):  # made once, kept in the run folder, read by the cells
        _clf_pgd(classifier, data, recipe, n_pgd, run_dir, device)
    loaded: dict[int, object] = {}

    def target(b: int):
        if b not in loaded:  # one snapshot's estimator at a time
            loaded.clear()
            loaded[b] = _defended(classifier, _snapshot(run_dir, b, device), data, recipe, device)
        return loaded[b]

    run(cells, target, data.x_test, data.y_test, run_dir, progress=progress, desc="eval")
    return read_records(run_dir)


def _purifier(score_model, recipe: MnistRecipe, device: str) -> ADPPurifier:
    """One ADP purification per call at the recipe's σ and T (adaptive α), seeded."""
    description = {"sigma": recipe.sigma, "steps": recipe.steps, "batch_size": 256, "channels_last": device == "cpu"}
    return build_defence(description, score_model, seed=0, device=device)


def _defended(classifier, score_model, data, recipe: MnistRecipe, device: str):
    """The classifier behind :func:`_purifier`."""
    return defended_estimator(classifier, _purifier(score_model, recipe, device), input_shape=data.x_test.shape[1:],
                              nb_classes=data.nb_classes, device=device)  # fmt: skip


def _cell(b: int, row: str, n: int, recipe: MnistRecipe, pgd_file: str | None) -> Cell:
    """The table's row ``row`` at snapshot ``b`` on the first ``n`` test images: clean, the Clf-PGD examples made once
    (``pgd_file`` in the run folder), or a registry attack at the row's budget; judged worst of R on the S-ensemble."""
    spec = recipe.rows()[row]
    if row == "clean":
        attack = Attacking()
    elif row == registry.BLIND_ATTACK:
        attack = Attacking(examples=pgd_file)
    else:
        step, iters = spec.get("eps_step", recipe.eps_step), spec.get("max_iter", 1)
        # the paper's protocol starts at the image, as every reproduced row (and folder) has
        spent = budget(row, eps=recipe.eps, eps_step=step, max_iter=iters, eot_samples=spec.get("eot_samples", 1),
                       random_start=False, batch_size=recipe.chunk_size)  # fmt: skip
        attack = Attacking(row, spent)
    judgement = Judgement("ensemble", recipe.ensemble_size, recipe.repeats, batch_size=512)
    seeds = SeedPlan(recipe.seed_scheme or "apart", recipe.seed, (b, row), recipe.repeats)
    return Cell((b, row), CELL, b, attack, judgement, seeds, {"budget": b, "row": row},
                block_size=recipe.chunk_size, images=n, extras="wall_s")  # fmt: skip


def denoising_ratio(
    score_model: torch.nn.Module,
    x,
    *,
    sigma: float = 0.25,
    steps: int = 10,
    seed: int = 0,
    batch_size: int = 256,
    x_start=None,
) -> float:
    """
    How many times purification shrinks the squared distance to the clean images ``x``.

    Without ``x_start``: the MSE of the noisy start x₀ = clip(x + σε) to x, divided by the MSE of the purified
    output (same ε) -- the denoising ratio (> 1: it denoises). With ``x_start`` (e.g. adversarial images of x):
    MSE(x_start, x) / MSE(purify(x_start), x) -- 1 means the perturbation survives purification intact.
    """
    x = to_model(x if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float32), score_model)
    start = x if x_start is None else to_model(np.asarray(x_start, dtype=np.float32), score_model)
    if start.shape != x.shape:
        raise ValueError(f"x_start must have the shape of x, {tuple(x.shape)}; got {tuple(start.shape)}.")
    before = after = 0.0
    with torch.no_grad():
        for i, (xb, sb) in enumerate(zip(x.split(batch_size), start.split(batch_size))):
            g = torch.Generator().manual_seed(derive_seed(seed, "denoise", i))
            clean = purify(score_model, sb, sigma=sigma, steps=steps, generator=g)
            if x_start is None:
                g.manual_seed(derive_seed(seed, "denoise", i))
                before += float((purify(score_model, sb, sigma=sigma, steps=0, generator=g) - xb).pow(2).sum())
            else:
                before += float((sb - xb).pow(2).sum())
            after += float((clean - xb).pow(2).sum())
    return before / max(after, 1e-30)


def _stage_denoise(classifier, data, recipe: MnistRecipe, run_dir: Path, device: str, log) -> dict[int, dict]:
    """
    Per curve snapshot, on the first ``n_curve`` test images (one purification each, cheap): the denoising ratio
    of clean images (injected-noise MSE / purified MSE) and the attack-removal ratio of the Clf-PGD images
    (MSE of x_adv to x / MSE of purify(x_adv) to x; 1 means the perturbation survives purification intact), and
    the compression rate of the snapshot's ADPPurifier (:func:`~art_adp.compression.compression_rate`, median over
    the images; radius ε in ℓ∞, :data:`CURVE_DIRECTIONS` directions, one seed for every snapshot).
    """
    from ..compression import compression_rate

    path = run_dir / "denoise.jsonl"
    done = {r["step"]: r for r in read_jsonl(path)}  # a later line for a step completes an earlier one
    n = min(recipe.n_curve, len(data.x_test))
    x = data.x_test[:n]
    x_pgd = None
    for m in recipe.curve_milestones:
        if (m in done and {"attack_ratio", "compression_rate"} <= set(done[m])) or not _snapshot_path(
            run_dir, m
        ).exists():
            continue
        start = time.perf_counter()
        score = _snapshot(run_dir, m, device)
        rec = dict(done.get(m) or {"step": m, "n": n})
        if "denoising_ratio" not in rec:
            rec["denoising_ratio"] = round(
                denoising_ratio(score, x, sigma=recipe.sigma, steps=recipe.steps, seed=recipe.seed), 4
            )
        if "attack_ratio" not in rec:
            if x_pgd is None:
                n_pgd = min(
                    len(data.x_test),
                    max(recipe.n_curve, len(data.x_test) if recipe.n_examples is None else recipe.n_examples),
                )
                x_pgd = _clf_pgd(classifier, data, recipe, n_pgd, run_dir, device)[:n]
            rec["attack_ratio"] = round(
                denoising_ratio(score, x, sigma=recipe.sigma, steps=recipe.steps, seed=recipe.seed, x_start=x_pgd), 4
            )
        if "compression_rate" not in rec:
            purifier = _purifier(score, recipe, device)
            rate = compression_rate(
                purifier,
                x,
                radius=recipe.eps,
                norm="inf",
                nb_directions=CURVE_DIRECTIONS,
                seed=derive_seed(recipe.seed, "compression"),
            )
            rec["compression_rate"] = round(rate.summary["median"], 4)
        rec["wall_s"] = round(rec.get("wall_s", 0.0) + time.perf_counter() - start, 1)
        done[m] = rec
        append_records(path, [rec])
        log(
            f"[curve] {m} iterations: purification divides the noise MSE by {rec['denoising_ratio']:.2f} and the "
            f"Clf-PGD perturbation's MSE by {rec['attack_ratio']:.2f}; compression rate {rec['compression_rate']:.3f} "
            f"(median, l_inf radius {recipe.eps})"
        )
    return done


def _diagnostics(classifier, data, recipe: MnistRecipe, run_dir: Path, device: str, log, measure: bool) -> dict:
    """Part of the ``curve`` stage: noise alone, one-step denoise, the ADP sweep (:mod:`.diagnostics`)."""
    from .diagnostics import stage_diagnostics

    n_pgd = min(
        len(data.x_test), max(recipe.n_curve, len(data.x_test) if recipe.n_examples is None else recipe.n_examples)
    )
    return stage_diagnostics(
        classifier.to(device).eval(),
        data,
        recipe,
        run_dir,
        load_snapshot=lambda m: _snapshot(run_dir, m, device),
        clf_pgd=lambda: _clf_pgd(classifier, data, recipe, n_pgd, run_dir, device),
        log=log,
        measure=measure,
    )


def reproduce_command(
    recipe: MnistRecipe,
    *,
    benchmark: str = "mnist",
    data_root: str = "",
    run_dir: str = "runs/reproduce-mnist",
    stages: tuple[str, ...] = STAGES,
    note: str = "",
    channels_last: bool = False,
    compile: bool | str = False,  # pylint: disable=redefined-builtin
    device: str | None = None,
    progress: bool = True,
) -> dict | None:
    """Every stage resumes: re-run the same command to continue (docs/mnist_results.md). --lr (auto: large_batch_lr of
    --batch-size), --lr-warmup and --precision belong to the recipe (a resume must keep them); --channels-last and
    --compile only change the speed, and on CUDA cuDNN's autotuner picks the convolutions."""
    from .commands import cudnn_autotune, resolve_lr

    if benchmark != "mnist":
        raise ValueError(f"Unknown benchmark {benchmark!r}; choose from mnist.")
    recipe = replace(recipe, lr=resolve_lr(recipe.lr, recipe.batch_size))  # settings.json: the number
    cudnn_autotune(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    report = reproduce_mnist(
        data_root,
        run_dir,
        recipe,
        device=device,
        progress=progress,
        stages=tuple(stages),
        note=note,
        train_options={"channels_last": channels_last, "compile": compile},
    )
    print(f"table: {Path(run_dir) / 'table.md'}")
    return report


def folder_recipe(recipe: MnistRecipe, stored: Path, device: str) -> tuple[MnistRecipe, str]:
    """``recipe`` with what its folder's ``stored`` recipe settles where ``recipe`` leaves it open, and why the
    precision: ``"auto"`` precision, and the seed scheme None (the stored one; ``"fp32"`` and ``"reproduce"`` where a
    folder measured before it names none; a new folder's ``"apart"``)."""
    held = json.loads(stored.read_text()) if stored.exists() else None
    precision, why = resolve_precision(recipe.precision, device, held=held and held.get("precision", "fp32"))
    scheme = recipe.seed_scheme or ("apart" if held is None else held.get("seed_scheme", "reproduce"))
    return replace(recipe, precision=precision, seed_scheme=scheme), why


def reproduce_mnist(
    data_root: str | os.PathLike,
    run_dir: str | os.PathLike = "runs/reproduce-mnist",
    recipe: MnistRecipe | None = None,
    *,
    device: str | None = None,
    progress: bool = True,
    stages: tuple[str, ...] = STAGES,
    data=None,
    note: str = "",
    log: Callable[[str], None] = print,
    train_options: dict | None = None,
) -> dict | None:
    """
    Train (or resume) the MNIST MLP and a score model, measure the learning curve and the table, write the report.

    Re-running with the same ``run_dir`` resumes every stage where it stopped. The recipe is saved as
    folder's ``settings.json``; a different recipe in the same folder is refused (use a new ``run_dir``).

    :param data_root: Folder with the four MNIST idx(.gz) files (:func:`~art_adp.data.load_mnist`).
    :param run_dir: Output folder.
    :param recipe: The settings (default: the plan ``reproduce:mnist``, :class:`MnistRecipe`'s defaults).
    :param device: ``"cpu"`` or ``"cuda"`` (default: CUDA when available).
    :param stages: The stages to run, in order (e.g. only ``("classifier", "score")`` to train in the background).
    :param data: A :class:`~art_adp.data.Dataset` to use instead of reading ``data_root``.
    :param note: A line for the table and the figure (e.g. where the data come from, how busy the machine was).
    :param train_options: Further keywords of :func:`~art_adp.score.train_score_model` that change its speed, not
        its model (``channels_last``, ``compile``); not part of the recipe, so a resume may change them.
    :return: The report (``table.json``'s content) when the ``report`` stage ran, else None.
    """
    from ..data import load_mnist

    recipe = recipe or plan("reproduce:mnist", "reproduce").values
    recipe.check()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stored = settings_path(run_dir)
    recipe, precision_reason = folder_recipe(recipe, stored, device)
    log(f"precision: {recipe.precision} ({precision_reason}); threads: {torch.get_num_threads()}")
    before = {**asdict(MnistRecipe()), "precision": "fp32", "seed_scheme": "reproduce"}  # a recipe from before
    mine = guard_settings(stored, asdict(recipe), what="the recipe", defaults=before)
    data = data if data is not None else load_mnist(data_root)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"Unknown stage(s) {unknown}; choose from {', '.join(STAGES)}.")
    classifier = _stage_classifier(data, recipe, run_dir, device, progress, log)
    if "score" in stages:
        _stage_score(data, recipe, run_dir, device, progress, log, train_options or {})
    denoise = _stage_denoise(classifier, data, recipe, run_dir, device, log) if "curve" in stages else None
    records = None
    if "curve" in stages or "table" in stages:
        records = _stage_eval(classifier, data, recipe, run_dir, device, progress, log, stages)
    diagnostics = _diagnostics(classifier, data, recipe, run_dir, device, log, measure="curve" in stages)
    if "report" not in stages:
        return None
    records = records if records is not None else read_records(run_dir)
    denoise = denoise if denoise is not None else {r["step"]: r for r in read_jsonl(run_dir / "denoise.jsonl")}
    curve = _curve(records, denoise, recipe, run_dir)
    clf_info = json.loads((run_dir / "classifier.json").read_text())
    report = {
        "paper": PAPER_MNIST,
        "recipe": mine,
        "device": device_description(device, precision=recipe.precision),
        "precision_reason": precision_reason,
        "data": {"root": str(data_root), "n_train": int(len(data.x_train)), "n_test": int(len(data.x_test))},
        "classifier": clf_info,
        "score_snapshots": read_snapshot_log(run_dir / "score"),
        "row_budgets": {row: {k: v for k, v in spec.items() if k != "n"} for row, spec in recipe.rows().items()},
        "rows": _summarise(records, recipe, len(data.x_test)),
        "curve": curve,
        "diagnostics": diagnostics,
        "note": note,
    }
    write_json(run_dir / "table.json", report, indent=1)
    table = render_table(report)
    (run_dir / "table.md").write_text(
        f"# ADP on MNIST ({report['data']['n_train']} training / {report['data']['n_test']} test images from "
        f"{data_root})\n\nDevice: {report['device']}. ADP: σ = {recipe.sigma}, T = {recipe.steps}, judged on the "
        f"S = {recipe.ensemble_size} ensemble, worst case over R = {recipe.repeats} repeats; 95 % Wilson intervals."
        f"{' ' + note if note else ''}\n\n"
        f"{table}\n"
        f"\n## Diagnostics (first {recipe.n_curve} test images, S = {recipe.ensemble_size})\n\n"
        f"{_diagnostics_md(report)}\n"
    )
    if curve:
        _plot_curve(
            curve,
            run_dir / "learning_curve.png",
            f"ADP (σ = {recipe.sigma}, T = {recipe.steps}) with NCSNv2 ngf = {recipe.ngf}, batch "
            f"{recipe.batch_size}, {recipe.num_sigmas} σ from {recipe.sigma_begin} to {recipe.sigma_end}; "
            f"MLP classifier; {report['data']['n_train']} training / {report['data']['n_test']} test images "
            f"from {Path(str(data_root)).name}\ndevice: {report['device']}{'; ' + note if note else ''}",
            undefended=clf_info.get("test_accuracy"),
        )
    log(table)
    return report
