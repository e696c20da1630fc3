"""The paper's row on a data set, measured lever by lever: which of score quality, schedule, noise level and attack
decides ADP's accuracy on real images, against the baselines a user would pick instead.

Two score models are measured side by side on the same images, attacks and judging:

- ``oracle``: :class:`~art_adp.KernelScore` over the training split -- the exact optimum of denoising score matching
  on those images, at the level h is taken at: what a *perfectly trained* score model would do;
- ``denoiser``: a :class:`~art_adp.DenoiserUNet` trained with ``art-adp train-denoiser``, through
  :class:`~art_adp.EDMScore` at the same level.

Each *setting* is a purification: ADP (σ, T, λ, τ; the score taken at level σ) or the one-step denoise
x̂ = clip(x₀ + σ·h_σ(x₀)) -- Tweedie's estimate, ADP with one step of fixed size σ -- in front of a classifier (the
data set's, or the adversarially trained one). Each *row* is an attack: clean inputs; Clf-PGD, PGD on the bare
classifier blind to the purifier (the paper's attack); adaptive attacks through the purification from the attack
registry (BPDA+EOT, full-gradient PGD+EOT, APGD-EOT; any registry attack is a row by its name); AutoAttack
(standard version, torchattacks' port of Croce & Hein's code) on the undefended classifiers. A data set's
:class:`Preset` holds the radius, the rows' budgets, the classifiers and the σ grid; MNIST's is the table of
``docs/mnist_results.md``, Fashion-MNIST's the paper's ε = 8/255.

Judgements: clean and Clf-PGD rows on the S-run ensemble (mean softmax of S purifications); adaptive rows R times
(fresh noise each: the mean, the worst case and the majority vote over R, from the evaluation's report), and, with
``judges`` holding ``"fixed"``, with the purifier's randomness fixed (the attack and the judge see one frozen draw,
EOT 1: the evaluation's fixed-noise view). Records go to ``RUN_DIR/records/`` one per (classifier, score
model, setting, attack, judge, image), so a run resumes and more images can be added later; ``table.json`` and
``table.md`` hold the accuracies with Wilson intervals, the rows' budgets, the classifiers' training and the
provenance.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..attacks.registry import AUTOATTACK, BLIND_ATTACK, OPTION_HELP, REGISTRY, Budget, budget_settings
from ..models.checkpoint import check_purifier
from ..pretrained import bundled_file
from ..runs.provenance import code_diff, code_version, provenance
from ..runs.engine import (
    Attacking,
    Cell,
    Judgement,
    Price,
    defended_estimator,
    estimate,
    folder_scheme,
    pending,
    probing,
    run,
)
from ..runs.records import read_records, settings_path, write_json
from ..runs.seeds import FIXED_BLOCK, LEVERS_SCHEMES, SeedPlan, check_scheme
from .flags import PRECISION_HELP
from .._hardware import require_native
from .levers_classifiers import (
    from_zoo,
    JUDGE_BATCH,
    _classes,
    _held,
    _training_facts,
    chosen_classifiers,
    measured_purifier,
    model_clipped,
    refuse_untrained,
    settings_of,
)
from .levers_presets import (
    JUDGES,
    SETTINGS_HELP,
    Preset,
    Row,
    RowBudgets,
    Setting,
    _rows,
    preset_for,
    row_budgets,
    setting_named,
    sigma_settings,
    table_rows,
)
from .levers_table import LEVERS_KEY, render_levers, table_markdown

#: A lever cell's key fields (:attr:`~art_adp.runs.engine.Cell.key_fields`): its records' key but the image.
CELL = LEVERS_KEY[:-1]

__all__ = [
    "BLOCK",
    "ESTIMATE_HELP",
    "FIXED_CHUNK",
    "FLAG_HELP",
    "LeversConfig",
    "judge_seeds",
    "levers_command",
    "run_levers",
    "stage_keywords",
]


#: Images an adaptive row attacks, judges and records at a time, by their index (images 0-49, 50-99, ...): a row cut
#: short resumes from its last whole block, and a resumed row equals an uninterrupted one.
BLOCK = 50

#: Images the fixed-noise view attacks and judges under one frozen draw (its blocks, by index, and its batches).
FIXED_CHUNK = FIXED_BLOCK


def _white_parts(r: Row) -> tuple[str, ...]:
    """What a white-box row's attack seed is derived from beside the run's seed (the ``levers-white`` scheme)."""
    return (AUTOATTACK,) if r.attack == AUTOATTACK else ("pgd", r.name)


def judge_seeds(scheme: str, seed: int, key: tuple, repeats: int) -> SeedPlan:
    """The seeds of the adaptive cell ``key`` (classifier, score model, setting, row, judge) whose R judgements a
    block draws (``plan(first // BLOCK, first).judge``) in a folder of seed scheme ``scheme``."""
    return SeedPlan("levers", seed, ("",), repeats) if scheme == "levers" else SeedPlan(scheme, seed, key, repeats)


def _white(r: Row, budgets: RowBudgets) -> Attacking:
    """The attack of a white-box row on an undefended classifier: none (clean), or the registry's at the row's
    ``white`` budget (its PGD rows: Clf-PGD, ART's PGD on the bare classifier)."""
    return Attacking() if not r.attack else Attacking(r.attack, budgets.white)


def run_levers(
    data,
    run_dir: str | Path,
    *,
    dataset: str = "mnist",
    models: Sequence[str] = ("oracle", "denoiser"),
    denoiser_path: str | Path | None = None,
    settings: Sequence[str] | None = None,
    attacks: Sequence[str] | None = None,
    classifiers: Sequence[str] | None = None,
    purified: Sequence[str] | None = None,
    judges: Sequence[str] = ("ensemble",),
    n_examples: int = 1000,
    ensemble_size: int = 10,
    repeats: int = 10,
    eot_samples: int = 5,
    eps: float | None = None,
    arch: str | None = None,
    sigmas: Sequence[float] | None = None,
    max_iter: int | None = None,
    eps_step: float | None = None,
    max_epochs: int | None = None,
    restarts: int | None = 1,
    loss: str = Budget.loss,
    eot_target: str = Budget.eot_target,
    step_schedule: str = Budget.step_schedule,
    keep_examples: bool = True,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
    estimate_only: bool = False,
    attack_precision: str = Budget.precision,
    force_precision: bool = False,
    seed_scheme: str | None = None,
    zoo: bool = False,
) -> dict:
    """
    Measure ``attacks`` × ``settings`` × ``models`` × ``purified`` classifiers, and the undefended ``classifiers``,
    on the first ``n_examples`` test images, reading the classifiers from the run folder (trained there by
    :func:`~art_adp.apps.levers_classifiers.train_levers_classifiers`, brought, or from the zoo): it never trains.
    Resumes from ``RUN_DIR/records/`` (images already measured are skipped), then writes ``table.json`` /
    ``table.md``; ``table.json``'s provenance keeps every earlier call into the folder (``provenance.calls``, in
    order, each with its own command, code, device and wall time). A plan of the evaluation engine
    (:mod:`art_adp.runs.engine`): one cell per (classifier, score model, setting, row, judge), each cell's settings
    (radius, row, budget, purification, judging, seed) kept in ``RUN_DIR/settings.json``; a cell asked again with other
    settings is refused before anything runs.

    :param data: A :class:`~art_adp.data.Dataset` of images (MNIST, Fashion-MNIST, CIFAR-10).
    :param run_dir: The run folder (classifiers, adversarial examples, records, table): a classifier the preset
        trains must be there (``NAME.safetensors``, from :func:`~.levers_classifiers.train_levers_classifiers`:
        ``art-adp train-levers``), else it is refused naming the command that trains it (estimate_only excepted).
    :param dataset: The data set, a key of :data:`~art_adp.data.DATASETS` that names a preset (:func:`preset_for`).
    :param models: ``"oracle"`` and/or ``"denoiser"``.
    :param denoiser_path: The :class:`~art_adp.DenoiserUNet` checkpoint (for ``"denoiser"``).
    :param settings: Setting names (default: all of the σ grid's).
    :param attacks: Row names of the preset, or any attack registry name (an adaptive row at the preset's adaptive
        budget), or either followed by ``-{N}it-r{K}`` (:data:`VARIANT`: that adaptive row with the best iterate, N
        iterations, K runs); default: the preset's.
    :param classifiers: The undefended classifiers measured (default: the preset's baselines; ``()``: none).
    :param purified: The classifiers ADP is put in front of (default: the preset's classifier).
    :param judges: ``"ensemble"`` (S-run ensemble; adaptive rows R times) and/or ``"fixed"`` (fixed noise: clean and
        adaptive rows).
    :param n_examples: Test images (the first ones of the test split).
    :param ensemble_size: S, purifications averaged per prediction (the paper's 10).
    :param repeats: R, judgements of the adaptive rows (fresh noise each; 10, DiffHammer's Wor.Rob@10: the tables
        give the worst of 10 beside the worst of the first 2).
    :param eot_samples: EOT draws per gradient of the adaptive attacks.
    :param eps, arch, sigmas, max_iter, eps_step, max_epochs: Overrides of the preset (:func:`preset_for`); those
        that change a training (radius, architecture, σ grid, epochs) are the training stage's too.
    :param restarts: K: measure every adaptive row as its :func:`with_restarts` variant (the best iterate, judged on
        S draws of its own, and K runs), recorded under the variant's name (the default: one run, its best iterate);
        None: the rows as recorded before the rule (one run, the last iterate).
    :param loss, eot_target, step_schedule: The attacks' options (:class:`~art_adp.attacks.registry.Budget`): PGD+EOT's
        loss, what the EOT gradients differentiate, the PGD family's steps. Each adaptive record carries the options
        its attack ran with that differ from the first records' (:func:`~art_adp.attacks.registry.recorded`), and a
        run folder holding a row measured with other options (or before records carried them) is refused for it.
    :param keep_examples: Keep the adversarial examples of every adaptive block
        (``RUN_DIR/examples/<classifier>__<model>__<setting>__<row>__<first image>.npz``: images, indices), so a new
        judgement needs no new attack.
    :param seed: Seed of every draw (random starts, purification noise).
    :param device: Where the networks run (``"cpu"`` or ``"cuda"``).
    :param progress: Print one line per measured cell.
    :param attack_precision: The adaptive rows' gradient passes (:class:`~art_adp.attacks.registry.Budget`'s
        ``precision``): ``"fp32"``, or ``"bf16"`` autocast (judgements stay fp32), recorded with each row's options.
    :param force_precision: bf16 attacks even on a processor that emulates it.
    :param seed_scheme: How a block's seeds come from ``seed`` (:data:`~art_adp.runs.seeds.LEVERS_SCHEMES`):
        ``"apart"``, the attack's, the purifiers' noise and the judgements' derived apart from the cell and the
        block's first image (:func:`~art_adp.runs.seeds.apart`), or ``"levers"``, the schemes of the folders measured
        before it; None: the folder's own (:func:`~art_adp.runs.engine.folder_scheme`), ``"apart"`` for a new one,
        recorded in its cells' settings.
    :param zoo: Take every classifier from the model zoo (``zoo:DATASET/NAME``, :mod:`art_adp.zoo`), checked against
        its manifest and copied into the run folder, instead of the folder's own (trained or brought); a folder
        holding other weights under the name is refused.
    :param estimate_only: Price the defended rows still to measure and stop (nothing trained, attacked or recorded):
        one line per row with its estimated time on this device, from the attack registry's cost model and a timed
        probe of each purifier (:func:`~art_adp.runs.engine.estimate`, the cells a run would measure); returns
        ``{"estimate_seconds": total, "by_row": {...}, "n_examples", "provenance"}``, also written to
        ``RUN_DIR/estimate.json``. A classifier not trained yet is priced with its untrained architecture (the same
        cost); its training is not.
    :raises ValueError: For a request the preset does not hold (rows, settings, classifiers, judges, a denoiser),
        before anything is read (:func:`_asked`), and for a classifier not trained yet.
    """
    from ..score import load_score_model

    preset, rows, chosen, classifiers, purified, behind = _asked(
        dataset, eps=eps, arch=arch, sigmas=sigmas, max_iter=max_iter, eps_step=eps_step, max_epochs=max_epochs,
        attacks=attacks, restarts=restarts, settings=settings, classifiers=classifiers, purified=purified,
        judges=judges, models=models, denoiser_path=denoiser_path, attack_precision=attack_precision, device=device,
        force_precision=force_precision)  # fmt: skip
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    scheme = check_scheme(folder_scheme(settings_path(run_dir), legacy="levers") if seed_scheme is None
                          else seed_scheme, LEVERS_SCHEMES)  # fmt: skip
    started, code = time.monotonic(), code_version()  # the code this run loads now, whatever the checkout is later
    diff = code_diff() if code.endswith("-dirty)") else None  # and, uncommitted, its diff as read now
    names = dict.fromkeys([*classifiers, *purified])
    for k in names if zoo else ():
        from_zoo(f"{dataset}/{k}", run_dir)
    if not estimate_only:  # measuring never trains: train_levers_classifiers does (art-adp train-levers)
        refuse_untrained(names, preset, run_dir, dataset=dataset, denoiser_path=denoiser_path, eps=eps, arch=arch,
                         sigmas=sigmas, max_epochs=max_epochs, seed=seed, device=device)  # fmt: skip
    eps = preset.eps
    options = {"loss": loss, "eot_target": eot_target, "step_schedule": step_schedule, "precision": attack_precision}
    budgets = row_budgets(rows, eps, eot_samples=eot_samples, ensemble_size=ensemble_size, options=options)
    denoiser_path = None if denoiser_path is None else bundled_file(denoiser_path, "score")  # a zoo name: its file
    denoiser = load_score_model(denoiser_path, device) if denoiser_path is not None else None
    x, y = data.x_test[:n_examples], data.y_test[:n_examples]
    clfs = {k: _held(k, preset, run_dir) for k in names}  # trained or brought; untrained stand-ins only to estimate
    if not estimate_only:
        clfs = {k: m.to(device) for k, m in clfs.items()}
    base = preset.classifier

    def fields(clf, model, setting, attack, extra=None, judge="ensemble") -> dict:
        """What the records of the cell (``clf``, ``model``, ``setting``, ``attack``, ``judge``) carry besides the
        engine's fields, and its progress line (``label``; None with ``progress`` off)."""
        more = {**({"classifier": clf} if clf != base and model != "none" else {}),
                **({"judge": judge} if judge != "ensemble" else {})}  # fmt: skip
        where = f"{clf} ← {model}" if model != "none" else model
        return {"fields": {"model": model, "setting": setting, "attack": attack, "ensemble_size": ensemble_size,
                           "eot_samples": eot_samples, **more, **(extra or {})},
                "label": f"{where:>18} | {setting:<24} | {attack:<16} | {judge:<8}" if progress else None}  # fmt: skip

    def cell_settings(r: Row, judgement: Judgement, s: Setting | None = None, budget: Budget | None = None,
                      model: str = "none") -> dict:  # fmt: skip
        """What a cell's records depend on besides its images: the radius, the row and its budget, the purification,
        the judging, the seed and its scheme (the folder's ``settings.json`` keeps them: a cell run again with others is
        refused)."""
        return {"eps": eps, "row": asdict(r), "budget": None if budget is None else budget_settings(budget),
                "seed": seed, **({} if scheme == "levers" else {"seed_scheme": scheme}),
                "purifier": None if s is None else s.record(model_clipped(model, denoiser)),
                "judgement": {"kind": judgement.kind, "ensemble_size": judgement.ensemble_size,
                              "repeats": judgement.repeats}}  # fmt: skip

    def seeds_of(key: tuple, legacy: SeedPlan, repeats: int = 1) -> SeedPlan:
        """The seeds of the cell ``key``: the folder's scheme, ``legacy`` (the cell kind's own) in a ``"levers"``
        folder."""
        return legacy if scheme == "levers" else SeedPlan(scheme, seed, key, repeats)

    white = [r for r in rows if not r.adaptive]
    once = Judgement("once", batch_size=max(1, len(x)))
    cells: list[Cell] = [  # the undefended classifiers under white-box attacks
        Cell((base, "none", name, r.name, "ensemble"), CELL, f"bare:{name}", _white(r, budgets[r.name]), once,
             seeds=seeds_of((base, "none", name, r.name, "ensemble"), SeedPlan("levers-white", seed, _white_parts(r))),
             **fields(base, "none", name, r.name),
             block_size=None,
             settings=cell_settings(r, once))
        for name in (() if estimate_only else classifiers) for r in white
    ]  # fmt: skip
    for name in () if estimate_only else classifiers:
        check_purifier(getattr(clfs[name], "trained_behind", None), None, what=f"levers classifier {name!r}")
    adv: dict = {}  # (classifier, row) -> the file of its examples in the run folder
    for name in () if estimate_only else purified:  # Clf-PGD examples against the bare classifier, made once, shared
        for r in (r for r in white if r.attack == BLIND_ATTACK):
            seeds = seeds_of((name, "examples", r.name), SeedPlan("levers-white", seed, _white_parts(r)))
            cache = run_dir / f"{r.name.replace('/', '_')}{'' if name == base else f'@{name}'}.npy"
            pgd = budgets[r.name].white
            assert pgd is not None  # a white-box row's
            adv[(name, r.name)] = _blind_examples(clfs[name], pgd, x, y, cache, seeds(0, 0).attack, device)

    def purifier_of(model: str, s: Setting):
        return measured_purifier(model, s, data.x_train, denoiser, seed=seed, device=device)

    def cached(name: str, r: Row) -> Attacking:  # an estimate makes no examples: it prices the judgement alone
        return Attacking() if not r.attack or estimate_only else Attacking(examples=adv[(name, r.name)])

    targets: dict[str, tuple] = {}
    for name in purified:
        own = behind.get(name)  # a classifier trained behind a purification is measured behind that one only
        pairs = [(own[0], setting_named(own[1], preset.sigmas))] if own else [(m, s) for m in models for s in chosen]
        for model, s in pairs:
            target = f"{name}|{model}|{s.name}"
            targets[target] = (name, model, s)
            extra = {"purifier": s.record(model_clipped(model, denoiser))}
            ensemble = Judgement("ensemble", ensemble_size, repeats, batch_size=JUDGE_BATCH)
            for r in rows:
                if r.attack == AUTOATTACK:
                    continue  # a deterministic white-box attack: APGD-EOT is its randomized counterpart
                key = (name, model, s.name, r.name)
                if r.adaptive and "ensemble" in judges:
                    budget = budgets[r.name].ensemble
                    more = {**extra, "repeats": repeats, "options": budgets[r.name].recorded,
                            **({"eot_samples": r.eot_samples} if r.eot_samples else {})}  # fmt: skip
                    cells.append(Cell((*key, "ensemble"), CELL, target, Attacking(r.attack, budget), ensemble,
                                      seeds=seeds_of((*key, "ensemble"), SeedPlan("levers", seed, (r.name,), repeats),
                                                     repeats),
                                      **fields(*key, more),
                                      block_size=BLOCK,
                                      keep=key if keep_examples else None,
                                      price=Price(r.attack, budget, ensemble_size * repeats),
                                      settings=cell_settings(r, ensemble, s, budget, model)))  # fmt: skip
                if "ensemble" in judges and not r.adaptive:
                    one = replace(ensemble, repeats=1)
                    cells.append(Cell((*key, "ensemble"), CELL, target, cached(name, r), one,
                                      seeds=seeds_of((*key, "ensemble"), SeedPlan("levers-once", seed)),
                                      **fields(*key, {**extra, "repeats": 1}), block_size=None,
                                      price=Price(None, None, ensemble_size),
                                      settings=cell_settings(r, one, s, model=model)))  # fmt: skip
                if "fixed" in judges and (r.adaptive or not r.attack):
                    budget = budgets[r.name].fixed  # judged by the frozen draw
                    attack = Attacking(r.attack, budget) if r.adaptive else Attacking()
                    fixed = Judgement("fixed", 1, 1, batch_size=FIXED_CHUNK)
                    price = Price(r.attack if r.adaptive else None, budget, 1)
                    frozen = seeds_of((*key, "fixed"), SeedPlan("levers-fixed", seed, (r.name,)))
                    cells.append(Cell((*key, "fixed"), CELL, target, attack, fixed, seeds=frozen,
                                      **fields(*key, {**extra, "repeats": 1}, judge="fixed"),
                                      block_size=FIXED_CHUNK, settings=cell_settings(r, fixed, s, budget, model),
                                      price=price))  # fmt: skip
    built: dict[str, Any] = {}

    def build(target: str):
        """The estimator ``target`` names: an undefended classifier, or one behind a purifier (the last one built is
        kept: the cells of a purifier are consecutive, and the exact score holds the training split)."""
        if target not in built:
            built.clear()
            if target.startswith("bare:"):
                built[target] = defended_estimator(
                    clfs[target[5:]],
                    None,
                    input_shape=x.shape[1:],
                    nb_classes=_classes(clfs[target[5:]]),
                    device=device,
                )
            else:
                name, model, s = targets[target]
                purifier = purifier_of(model, s)
                check_purifier(getattr(clfs[name], "trained_behind", None), purifier,
                               what=f"levers classifier {name!r}")  # fmt: skip
                built[target] = defended_estimator(
                    clfs[name], purifier, input_shape=x.shape[1:], nb_classes=_classes(clfs[name]), device=device
                )
        return built[target]

    if estimate_only:  # the defended cells' prices: the registry's cost model at a timed probe of each purifier
        prov = provenance(wall_time_s=time.monotonic() - started, device=device, started_at=code, started_diff=diff)
        return _write_estimate(run_dir, cells, build, x, pending(cells, len(x), run_dir), n_examples, prov)
    run(cells, build, x, y, run_dir, progress=False, desc="levers")
    hashes = {k: run_dir / f"{k}.safetensors" if (run_dir / f"{k}.safetensors").exists() else clfs[k] for k in clfs}
    prov = provenance(wall_time_s=time.monotonic() - started, device=device, data=(x, y), started_at=code,
                      models={"denoiser": denoiser_path, **hashes} if denoiser_path else hashes,
                      started_diff=diff)  # fmt: skip
    return write_table(run_dir, preset, dataset, {k: _training_facts(k, preset, run_dir) for k in clfs}, prov)


def _asked(dataset: str, *, eps, arch, sigmas, max_iter, eps_step, max_epochs, attacks, restarts, settings, classifiers,
           purified, judges, models, denoiser_path, attack_precision: str, device: str,
           force_precision: bool) -> tuple:  # fmt: skip
    """What a :func:`run_levers` call asks for (its keywords of the same names), checked before anything is read,
    trained or measured: ``(preset, rows, settings, classifiers, purified, behind)`` -- the preset with the overrides,
    the rows (:func:`_rows`), the σ grid's settings, the undefended and purified classifiers
    (:func:`~art_adp.apps.levers_classifiers.chosen_classifiers`), and name → (score model, setting) of those trained
    behind a purifier.

    :raises ValueError: For a data set without a preset, an unknown row, setting, classifier or judge, the
        ``denoiser`` model (or a classifier behind it) without ``denoiser_path``, and bf16 attacks unless native."""
    preset = preset_for(dataset, eps=eps, arch=arch, sigmas=sigmas, max_iter=max_iter, eps_step=eps_step,
                        max_epochs=max_epochs)  # fmt: skip
    require_native(attack_precision, device, force=force_precision)
    rows = _rows(preset, tuple(preset.attacks if attacks is None else attacks), restarts)
    all_settings = sigma_settings(preset.sigmas)
    chosen = [s for s in all_settings if settings is None or s.name in settings]
    if settings is not None and len(chosen) != len(set(settings)):
        raise ValueError(f"Unknown settings {sorted(set(settings) - {s.name for s in all_settings})}; the σ grid "
                         f"{tuple(preset.sigmas)} has {[s.name for s in all_settings]}.")  # fmt: skip
    classifiers, purified = chosen_classifiers(preset, classifiers, purified)
    if set(judges) - set(JUDGES) or not judges:
        raise ValueError(f"judges must be a non-empty subset of {JUDGES}, got {tuple(judges)}.")
    behind = {k: own for k in dict.fromkeys([*classifiers, *purified])
              if (own := preset.classifiers[k].purifier) is not None}  # fmt: skip
    if ("denoiser" in models or any(m == "denoiser" for m, _ in behind.values())) and denoiser_path is None:
        raise ValueError("models includes 'denoiser' (or a classifier trained behind it): give denoiser_path (a "
                         "train-denoiser checkpoint).")  # fmt: skip
    return preset, rows, chosen, classifiers, purified, behind


def _blind_examples(clf, b: Budget, x, y, cache: Path, seed: int, device: str) -> str:
    """A Clf-PGD row's examples against the bare classifier: the registry's Clf-PGD
    (:data:`~art_adp.attacks.registry.BLIND_ATTACK`, the attack of the white-box rows' bare cells) at its budget
    ``b``, its random start drawn from ``seed``, made once and kept in the run folder as ``cache`` (a call with more
    images attacks the new ones only); its file name."""
    held = np.load(cache) if cache.exists() else x[:0]
    if len(held) < len(x):
        bare = defended_estimator(clf, None, input_shape=x.shape[1:], nb_classes=_classes(clf), device=device)
        fresh = REGISTRY[BLIND_ATTACK].build(bare, b, seed).generate(x[len(held) :], y=y[len(held) :])
        np.save(cache, np.concatenate([held, fresh.astype(np.float32)]))
    return cache.name


def _write_estimate(run_dir: Path, cells, build, x, left: Mapping[tuple, int], n_examples: int, prov: dict) -> dict:
    """Price the defended cells' images ``left`` (the registry's cost model at a timed probe of each purifier), print
    one line per row and write ``estimate.json``: ``{"estimate_seconds", "by_row", "n_examples", "provenance"}``."""
    prices: dict[str, float] = {}
    for k, seconds in estimate(cells, left, probing(build, x)).items():
        prices[f"{k[0]} ← {k[1]} | {k[2]} | {k[3]}" + ("" if k[4] == "ensemble" else f" ({k[4]})")] = seconds
        print(f"{k[0]} ← {k[1]} | {k[2]} | {k[3]} | {k[4]}: about {seconds / 60:.1f} min for {left[k]} images",
              flush=True)  # fmt: skip
    priced = {"estimate_seconds": sum(prices.values()), "by_row": prices, "n_examples": n_examples,
              "provenance": prov}  # fmt: skip
    write_json(run_dir / "estimate.json", priced, indent=1, ensure_ascii=False)
    return priced


def write_table(run_dir: Path, preset: Preset, dataset: str, classifiers: Mapping[str, dict], prov: dict) -> dict:
    """``table.json`` / ``table.md`` of the run folder from all its records: the cells (:func:`render_levers`), the
    preset's rows with the registry's attacks and the variants measured by any call, the ``classifiers``' training
    facts and ``prov``, after the provenance of every earlier call into the folder (``provenance.calls``, in
    order)."""
    table = render_levers(read_records(run_dir), base=preset.classifier)
    table.update(dataset=dataset, classifier=preset.classifier, eps=preset.eps)
    table["rows"] = table_rows(preset, (c["attack"] for c in table["cells"]))  # the variants measured by any call too
    table["classifiers"] = dict(classifiers)
    table["provenance"] = prov
    earlier = run_dir / "table.json"  # the earlier calls into this folder: kept, in order, with their provenance
    if earlier.exists():
        held = json.loads(earlier.read_text()).get("provenance", {})
        table["provenance"]["calls"] = [*held.get("calls", []), {k: v for k, v in held.items() if k != "calls"}]
    write_json(run_dir / "table.json", table, indent=1)
    (run_dir / "table.md").write_text(table_markdown(table))
    return table


ESTIMATE_HELP = "price each defended row left to measure on this device, and stop"

#: The help of ``art-adp levers``' flags, by :class:`LeversConfig` field.
FLAG_HELP = {
    "ensemble_size": "S, purifications averaged", "repeats": "R, judgements of the adaptive rows",
    "attacks": "rows of the preset, or attack registry names (adaptive rows); default: the preset's",
    "classifiers": "undefended classifiers (default: the preset's)",
    "purified": "classifiers ADP is put in front of (default: the preset's; none: only the undefended)",
    "judges": "ensemble: S-run ensemble (R times); fixed: fixed noise", "eps": "l_inf radius (preset's)",
    "arch": "architecture of the classifier ADP defends (preset's)", "sigmas": "the sigma grid (preset's)",
    "settings": SETTINGS_HELP,
    "max_iter": "iterations of the adaptive rows (preset's)", "eps_step": "step of the adaptive rows",
    "restarts": "K: adaptive rows with the best iterate, K runs", "estimate_only": ESTIMATE_HELP,
    "keep_examples": "do not keep the adversarial examples (RUN_DIR/examples)", **OPTION_HELP,
    "max_epochs": "cap on the adversarially trained classifiers' epochs (preset's: 100; they stop earlier "
                  "when validation robust accuracy plateaus)",
    "train_precision": "the classifiers' training passes: fp32, or bf16 autocast (validation stays fp32)",
    "seed_scheme": "seeds from --seed by this scheme (default: the run folder's; apart for a new one)",
    "zoo": "take every classifier from the model zoo (DATASET/NAME), checked, instead of training it",
    **PRECISION_HELP,
}  # fmt: skip


#: Settings of ``art-adp levers``: the keywords of :func:`run_levers` but
#: :data:`~art_adp.apps.levers_classifiers.NOT_SETTINGS`; the training's are ``art-adp train-levers``'
#: (:class:`~art_adp.apps.levers_classifiers.LeversTraining`).
LeversConfig = settings_of(run_levers, "LeversConfig", "Settings of ``art-adp levers``.")


def levers_command(
    config: Any,
    *,
    dataset: str = "mnist",
    data_root: str = "",
    denoiser: str | None = None,
    run_dir: str = "runs/levers",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """The paper's row on a data set lever by lever: ADP with the exact-score oracle (KernelScore over the training
    split) and a trained DenoiserUNet (--denoiser, from train-denoiser), at the released schedule, converged
    schedules, the one-step denoise and the σ grid, in front of the data set's classifier or the adversarially
    trained one, under Clf-PGD and adaptive attacks, beside the undefended and adversarially trained classifiers
    (white-box PGD, AutoAttack); the radius, the rows' budgets, the classifiers and the σ grid come from the data
    set's preset, each overridable; resumable, and more images can be added later. It measures only: the classifiers
    the preset trains come from `art-adp train-levers` into the same run folder (or --zoo), and one not trained yet is
    refused with the command that trains it. See docs/mnist.md and docs/fashion_mnist.md (their tables:
    docs/*_results.md)."""
    from ..data import load_dataset

    settings = {**asdict(config), "dataset": dataset, "denoiser_path": denoiser, "device": device or "cpu",
                "progress": progress}  # fmt: skip
    _asked(**stage_keywords(_asked, settings))  # a request the measurement refuses, refused before the data is read
    run_levers(load_dataset(dataset, data_root), run_dir, **stage_keywords(run_levers, settings))
    if not config.estimate_only:
        print((Path(run_dir) / "table.md").read_text())  # the table as run_levers wrote it


def stage_keywords(stage, settings: Mapping[str, Any]) -> dict:
    """The ``settings`` (``art-adp levers``': :class:`LeversConfig`'s and its data set, denoiser, device, progress)
    that the function ``stage`` takes (:func:`train_levers_classifiers`, :func:`run_levers`; all of them for a function
    of ``**keywords``)."""
    taken = inspect.signature(stage).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values()):
        return dict(settings)
    return {k: v for k, v in settings.items() if k in taken}
