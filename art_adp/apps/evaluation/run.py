"""The evaluation harness: attacks × examples, judged on the S-run ensemble repeated R times and with the
randomness fixed, per-example records that know their settings, resume, torchrun sharding, sweeps, baselines and
the sanity checks.

Work is cut into units (setting, attack, chunk of examples). Every random draw of a unit -- purification noise
while attacking and while judging, SPSA's directions, APGD's start -- comes from seeds derived from (seed, setting,
attack, chunk, repeat) alone, so a unit gives the same records whichever process runs it, in any order, and an
interrupted evaluation redoes only the units without records. Every record carries the digest of the settings that
produced it (threat model, budget, defence parameters, S, R, seed, the SHA-256 of the weights and of the data);
``settings.json`` in the run folder holds them in full, and resuming with other settings is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

from ...attacks._core import purifiers
from ...attacks.registry import BLIND_ATTACK, REGISTRY, SWEEP_ATTACK
from ...ensemble import default_memory_budget
from ...runs import distributed
from ...runs.seeds import SeedPlan, check_scheme, derive_seed
from ...diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
from ...preprocessor import ADPPurifier
from . import report
from .config import (
    ATTACKS,
    GRADIENT_ATTACKS,
    GRADIENT_FREE,
    clips_noise,
    gradient_free_attack,
    PAPER_ATTACKS,
    PRESETS,
    EvalConfig,
    attack_budget,
    budget_fields,
    count_fields,
    white_box_fields,
)
from ...runs.provenance import provenance
from ...runs import engine
from ...runs.engine import (
    Attacking,
    Cell,
    defended_estimator,
    describe_defence,
    Judgement,
    Price,
    folder_scheme,
)
from ...runs.records import EVALUATION_KEY, array_sha256, load_records, module_sha256, read_records, record_files
from ...runs.records import settings_path

__all__ = ["ATTACKS", "GRADIENT_FREE", "PAPER", "PAPER_ATTACKS", "PRESETS", "EvalConfig", "evaluate", "plan"]

PAPER = PRESETS["paper"]
#: An evaluation cell's key fields (:attr:`~art_adp.runs.engine.Cell.key_fields`): its records' key but the image.
CELL = EVALUATION_KEY[:-1]


@dataclass(frozen=True)
class Setting:
    """
    One group of attacks run with the same overrides of the config.

    :param judge: ``"ensemble"`` (S-run ensemble, R times), ``"fixed"`` (one frozen draw shared with the attack),
        ``"once"`` (a deterministic baseline, judged once).
    :param baseline: Name of the baseline classifier attacked instead of the defended one.
    """

    name: str
    attacks: tuple[str, ...]
    overrides: dict = field(default_factory=dict)  # EvalConfig fields, or "sigma" for the purifiers
    subset: bool = False  # only the sanity examples
    judge: str = "ensemble"
    baseline: str | None = None
    examples: int | None = None  # only the first N examples (None: all, or the sanity examples with subset)


def config_for(setting: Setting, c: EvalConfig) -> EvalConfig:
    """``c`` with the setting's overrides (σ, which belongs to the purifier, aside)."""
    return replace(c, **{k: v for k, v in setting.overrides.items() if k != "sigma"})


def white_box_attack(c: EvalConfig) -> str | None:
    """The gradient attack the sanity checks run: the first of :data:`GRADIENT_ATTACKS` in the config."""
    return next((a for a in GRADIENT_ATTACKS if a in c.attacks), None)


def plan(
    c: EvalConfig, *, randomized: bool = True, baselines: Sequence[str] = (), clipped: bool = False
) -> list[Setting]:
    """
    The settings an evaluation runs: the main table, the fixed-randomness view, the sanity attacks, the
    gradient-free masking check, the sweeps, the baselines.

    :param randomized: Whether the defence has ADPPurifiers (the fixed-randomness view needs one).
    :param baselines: Names of baseline classifiers.
    :param clipped: Whether the defence clips its noisy input (:func:`clips_noise`): the gradient-free check runs
        there (:func:`gradient_free_attack`).
    """
    one_draw = {f: 1 for a in ATTACKS for f in budget_fields(a) if f.endswith("eot_samples")}  # EOT 1 everywhere
    swept = tuple(a for a in c.attacks if not REGISTRY[a].black_box)
    settings = [Setting("main", ("clean", *c.attacks))]
    if c.fixed_noise and randomized:
        settings.append(Setting("fixed", ("clean", *swept), one_draw, judge="fixed"))
    white = white_box_attack(c)
    if c.sanity:
        settings.append(Setting("sanity:flags", ("flags",), {}, True))
        if white is not None:
            settings += [
                Setting("sanity:eps=1", (white,), {"eps": 1.0, "eps_step": c.step / c.eps}, True),
                Setting("sanity:eps/2", (white,), {"eps": c.eps / 2, "eps_step": c.step / 2}, True),
            ]
            it_field, eot_field = white_box_fields(white)
            main_it, main_eot = getattr(c, it_field), getattr(c, eot_field)
            for k in sorted({max(1, round(m * main_it)) for m in c.sanity_iterations} - {main_it}):
                settings.append(Setting(f"sanity:iterations={k}", (white,), {it_field: k}, True))
            for k in sorted(set(c.sanity_eot_samples) - {main_eot}):
                settings.append(Setting(f"sanity:eot={k}", (white,), {eot_field: k}, True))
    free = gradient_free_attack(c, clipped)
    if free is not None:
        settings.append(Setting(GRADIENT_FREE, (free,), examples=c.masking_examples))
    for e in c.eps_sweep:
        step = None if c.eps_step is None else c.eps_step * e / c.eps
        settings.append(Setting(f"eps={e:g}", swept, {"eps": float(e), "eps_step": step}))
    sigma_rows = ("clean", BLIND_ATTACK, SWEEP_ATTACK)
    settings += [Setting(f"sigma={s:g}", sigma_rows, {"sigma": float(s)}) for s in c.sigma_sweep]
    settings += [Setting(f"eot={k}", (SWEEP_ATTACK,), {"eot_samples": int(k)}) for k in c.eot_sweep]
    reduced = (
        "clean",
        *((BLIND_ATTACK,) if any(REGISTRY[a].baseline == BLIND_ATTACK for a in c.attacks) else ()),
        *(a for a in ATTACKS if a in c.attacks and REGISTRY[a].baseline == a != BLIND_ATTACK),
    )
    settings += [Setting(f"baseline:{name}", reduced, one_draw, judge="once", baseline=name) for name in baselines]
    return settings


def _cells(settings: Sequence[Setting], c: EvalConfig, common: dict, x: np.ndarray, scheme: str) -> list[Cell]:
    """The plan's cells: one per (setting, attack), blocks of ``chunk_size`` examples (the sanity checks' only those
    starting below ``sanity_examples``), seeded by the seed scheme ``scheme`` from (seed, setting, attack, first
    example), each with the settings its records depend on (:func:`unit_settings` over ``common``) and its price
    (:func:`price_of`)."""
    cells = []
    for s in settings:
        cs = config_for(s, c)
        repeats = c.repeats if s.judge == "ensemble" else 0
        judgement = Judgement(s.judge, c.ensemble_size, max(repeats, 1), batch_size=c.batch_size)
        for a in s.attacks:
            attack = Attacking() if a in ("clean", "flags") else Attacking(a, cs.budget(a))
            cells.append(Cell(
                (s.name, a), CELL, s.name, attack, Judgement("none") if a == "flags" else judgement,
                seeds=SeedPlan(scheme, c.seed, (s.name, a), repeats),
                fields={"setting": s.name, "attack": a}, settings=unit_settings(s, a, c, common),
                extras="flags" if a == "flags" else None, block_size=c.chunk_size,
                images=_images(s, c, len(x)), price=price_of(s, a, c),
            ))  # fmt: skip
    return cells


def _images(s: Setting, c: EvalConfig, n: int) -> int | None:
    """The images a setting's cells run on: the first ``s.examples``, the sanity checks' whole chunks, or all (None)."""
    if s.examples is not None:
        return min(n, s.examples)
    return min(n, -(-c.sanity_examples // c.chunk_size) * c.chunk_size) if s.subset else None


def _chunks(s: Setting, chunks: Sequence[np.ndarray], sanity_chunks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The examples of ``s``'s units, by chunk: the sanity chunks for a sanity setting, the first ``s.examples``."""
    if s.examples is not None:
        return [ch[ch < s.examples] for ch in chunks if ch[0] < s.examples]
    return list(sanity_chunks if s.subset else chunks)


def compression(
    purifier: ADPPurifier | None, x: np.ndarray, c: EvalConfig, settings: Sequence[Setting]
) -> tuple[dict | None, dict[str, dict]]:
    """
    The compression rate (:func:`~art_adp.compression.compression_rate`) of ``purifier`` on the first
    ``c.compression_examples`` of ``x`` at radius ε in the threat model's norm, seeded from ``c.seed``: its summary
    at the purifier's σ, and one per σ-sweep setting (keyed by the setting's name, σ set as the sweep sets it).
    ``(None, {})`` without a purifier or with ``compression_examples = 0``. A measurement the indicator refuses (e.g.
    a purifier that is not deterministic with its seed fixed) gives ``{"error": message}``: it never costs the card.
    The purifier's σ and generator are left as they were.
    """
    from ...compression import compression_rate

    if purifier is None or c.compression_examples == 0:
        return None, {}
    xs = x[: c.compression_examples]

    def measure(p: ADPPurifier) -> dict:
        try:
            return compression_rate(
                p,
                xs,
                radius=c.eps,
                norm="inf" if c.norm == np.inf else 2,
                nb_directions=c.compression_directions,
                seed=derive_seed(c.seed, "compression"),
                batch_size=c.batch_size,
            ).summary
        except ValueError as error:
            return {"error": str(error)}

    main = measure(purifier)
    sweep, sigma = {}, purifier.sigma
    try:
        for s in settings:
            if "sigma" in s.overrides:
                purifier.set_params(sigma=s.overrides["sigma"])
                sweep[s.name] = measure(purifier)
    finally:
        purifier.set_params(sigma=sigma)
    return main, sweep


FAMILY_LABELS = {
    ADPPurifier: "ADP",
    ReverseDiffusionPurifier: "Reverse diffusion",
    DenoisedSmoothingPurifier: "Denoised smoothing",
}


def _family_label(defences: Sequence[PreprocessorPyTorch]) -> str:
    """The card's name for the defence: ``"ADP"``, ``"Reverse diffusion"``, ``"Denoised smoothing"``."""
    names = [FAMILY_LABELS[type(d)] for d in defences if type(d) in FAMILY_LABELS]
    return " + ".join(names) if names else "Defended"


def unit_settings(setting: Setting, attack: str, c: EvalConfig, common: dict) -> dict:
    """Everything that changes the records of (``setting``, ``attack``): ``common`` (data, weights, defence, S, R,
    seed, chunking) and the attack's budget under the setting's overrides."""
    cs = config_for(setting, c)
    out = {
        **common,
        "setting": setting.name,
        "attack": attack,
        "budget": attack_budget(attack, cs),
        "judge": setting.judge,
    }
    if "sigma" in setting.overrides:
        out["sigma_override"] = setting.overrides["sigma"]
    if setting.baseline is not None:
        out["defences"] = []
        out["classifier_sha256"] = common["baselines_sha256"][setting.baseline]
    return out


def sanity_memory(units: Sequence[tuple[Setting, str, np.ndarray]], c: EvalConfig, probe: dict, dev) -> dict:
    """The autograd graph the sanity checks of ``units`` hold at a time: one block of EOT draws (examples × draws
    rows, at most ``batch_size`` and the memory budget's), its bytes at the probe's bytes per row, and the budget."""
    mine = [u for u in units if u[0].name.startswith("sanity")]
    budget = (default_memory_budget(dev) if c.memory_budget is None else c.memory_budget) * 2**20  # MiB -> bytes
    row = max(probe["graph_row_bytes"], 1.0)
    draws = max([getattr(config_for(s, c), white_box_fields(a)[1], 1) for s, a, _ in mine if a != "flags"] or [1])
    rows = min(c.batch_size, c.chunk_size * draws, max(1, int(budget // row)))
    return {"rows": rows, "graph_bytes": rows * row, "budget": budget}


def price_of(setting: Setting, attack: str, c: EvalConfig) -> Price | None:
    """What one image of (``setting``, ``attack``) costs, as data for the engine's one estimate
    (:func:`~art_adp.runs.engine.estimate`): the attack at the setting's budget and its judgement's forward passes
    (S × R for the ensemble, one for the frozen draw); the flags' two forward passes and one full gradient, unjudged;
    None for a baseline (an undefended classifier: no purification to price)."""
    if setting.baseline is not None:
        return None
    if attack == "flags":
        return Price(None, None, 2, full_passes=1)
    cs = config_for(setting, c)
    judge = {"ensemble": cs.ensemble_size * cs.repeats, "fixed": 1, "once": 1}[setting.judge]
    if attack == "clean":
        return Price(None, None, judge)
    return Price(attack, cs.budget(attack), judge)


def _peak_rss() -> float:
    """This process's peak resident memory so far, in bytes (0 where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _as_estimator(
    model,
    x: np.ndarray,
    nb_classes: int,
    clip_values,
    dev: torch.device,
    defences: Sequence[PreprocessorPyTorch] | None = None,
) -> PyTorchClassifier:
    if isinstance(model, PyTorchClassifier):
        return model
    return defended_estimator(model.to(dev).eval(), defences or None, input_shape=x.shape[1:], nb_classes=nb_classes,
                              clip_values=clip_values, device=dev.type)  # fmt: skip


def evaluate(
    classifier: torch.nn.Module,
    defences: ADPPurifier | Sequence[PreprocessorPyTorch],
    x: np.ndarray,
    y: np.ndarray,
    *,
    config: EvalConfig = PAPER,
    run_dir: str | Path = "runs/evaluate",
    nb_classes: int | None = None,
    clip_values: tuple[float, float] = (0.0, 1.0),
    description: dict | None = None,
    progress: bool = True,
    device: str | None = None,
    log: Callable[[str], None] = print,
    baselines: Mapping[str, torch.nn.Module | PyTorchClassifier] | None = None,
    estimate_only: bool = False,
    seed_scheme: str | None = None,
) -> dict | None:
    """
    Attack ``classifier`` defended by ``defences`` with every attack of ``config``; judge each adversarial example
    on the S-run ensemble R times and with its randomness fixed; write per-example records as they finish, then the
    evaluation card (``report.md``, ``report.json`` with a versioned schema, ``accuracy_vs_eps.png``) with the
    sanity report.

    | Paper link: https://arxiv.org/abs/2106.06041 (Tables 3, 5, 6); Croce et al. 2022,
      https://arxiv.org/abs/2202.13711; Carlini et al. 2019, https://arxiv.org/abs/1902.06705 (sanity checks)

    Before the attacks, a short timed probe estimates the run's time on this device (logged). Under
    ``torchrun --nproc_per_node=N`` the units are shared round-robin between the processes (one GPU each when
    present, gloo on CPU); rank 0 merges the records and writes the report, which equals a one-process run's.
    Re-running with the same ``run_dir`` and settings resumes: units with records are skipped; records made with
    other settings make it raise a ValueError that names the settings that differ.

    :param classifier: ``N×C×H×W`` → ``N×K`` logits.
    :param defences: An :class:`~art_adp.ADPPurifier` or a list of ART PyTorch preprocessors (e.g. a toy
        defence to test the sanity checks).
    :param x: Test inputs ``N×C×H×W`` in ``clip_values`` (the first ``config.n_examples`` are used).
    :param y: Labels, ``N`` indices.
    :param config: Attacks, budgets, S, R, checks, sweeps (:class:`EvalConfig`, e.g. ``EvalConfig.preset("smoke")``).
    :param run_dir: Output folder: ``records/rank-*.jsonl``, ``settings.json``, ``report.md``, ``report.json``,
        ``*.png``.
    :param nb_classes: K (default: the classifier's output width).
    :param description: Extra header lines for the report (data, models, defence).
    :param progress: A tqdm bar over the units of work.
    :param device: ``"cpu"`` or ``"cuda"`` (default: CUDA when available, one per torchrun process).
    :param log: Where report lines go.
    :param baselines: Name → classifier (``nn.Module`` or undefended ``PyTorchClassifier``) evaluated with the same
        attacks, budgets and threat model, side by side (e.g. an adversarially trained model). Without a purifier
        the attacks reduce to their classifier versions (PGD for the PGD family, APGD and SPSA as they are); a
        baseline is deterministic and judged once. The undefended ``classifier`` is always the first baseline
        (``"undefended"``).
    :param estimate_only: Log the time estimate and return it without attacking: ``{"estimate_seconds": total,
        "by_attack": {attack: seconds}, "sanity": ..., "gradient_free": seconds}`` (each attack's price over every
        setting that runs it; the gradient-free masking check's, None where it does not run).
    :param seed_scheme: How a unit's seeds come from ``config.seed`` (:data:`~art_adp.runs.seeds.SCHEMES`); None: the
        folder's own (:func:`~art_adp.runs.engine.folder_scheme`), ``"apart"`` for a new folder, in its settings.
    :return: The report (rank 0), else None.
    """
    config.check()
    called = time.perf_counter()
    dev, rank, world = distributed.setup(device)
    x, y, nb_classes, defences = _inputs(classifier, defences, x, y, config, nb_classes, dev)
    estimator = _as_estimator(classifier, x, nb_classes, clip_values, dev, defences)
    baselines, baseline_estimators = _baselines(classifier, baselines, defences, x, nb_classes, clip_values, dev)
    run_dir = Path(run_dir)
    chunks = [np.arange(s, min(s + config.chunk_size, len(x))) for s in range(0, len(x), config.chunk_size)]
    sanity_chunks = [ch for ch in chunks if ch[0] < config.sanity_examples]
    settings = plan(config, randomized=bool(purifiers(estimator)), baselines=tuple(baseline_estimators),
                    clipped=clips_noise(defences))  # fmt: skip
    units = [(s, a, ch) for s in settings for a in s.attacks for ch in _chunks(s, chunks, sanity_chunks)]
    scheme = folder_scheme(settings_path(run_dir)) if seed_scheme is None else seed_scheme
    common = _common_settings(classifier, defences, x, y, config, nb_classes, clip_values, baseline_estimators,
                              scheme)  # fmt: skip
    cells = _cells(settings, config, common, x, scheme)
    _resume(run_dir, cells)
    key = engine.record_identity(cells)
    done = {key(r) for r in read_records(run_dir)}
    pending = [u for u in units if not all((u[0].name, u[1], int(i)) in done for i in u[2])]
    est_seconds = sanity = prices = free = None
    if rank == 0 and (pending or estimate_only):
        est_seconds, sanity, prices, free = _log_estimate(estimator, x, config, cells, pending, len(units), dev, world,
                                                          log)  # fmt: skip
    if estimate_only:
        distributed.finish()
        return {"estimate_seconds": est_seconds, "sanity": sanity, "by_attack": prices, "gradient_free": free}
    targets = {None: estimator, **baseline_estimators}
    seconds = _work(cells, settings, targets, x, y, run_dir, (rank, world), progress)
    distributed.barrier()
    if rank != 0:
        distributed.finish()
        return None
    records = load_records(record_files(run_dir))
    wanted = {(s.name, a, int(i)) for (s, a, ch) in units for i in ch}
    missing = wanted - set(records)
    if missing:
        raise RuntimeError(f"{len(missing)} records missing after the evaluation (e.g. {sorted(missing)[:3]}).")
    records = {k: records[k] for k in sorted(wanted)}
    rate, rate_sweep = compression(next((d for d in defences if isinstance(d, ADPPurifier)), None), x, config, settings)
    result = report.build(
        records,
        config,
        settings,
        description=description or {},
        seconds=seconds,
        world_size=world,
        estimate_seconds=est_seconds,
        compression=rate,
        compression_sweep=rate_sweep,
    )
    result["purifier"] = _family_label(defences)
    scores = {f"score model {i}": d.score_model for i, d in enumerate(defences) if isinstance(d, ADPPurifier)}
    scores.update(
        {
            f"denoiser {i}": d.denoiser
            for i, d in enumerate(defences)
            if isinstance(d, (ReverseDiffusionPurifier, DenoisedSmoothingPurifier))
        }
    )
    others = {f"baseline {k}": m for k, m in baselines.items() if k != "undefended"}
    models = {"classifier": classifier, **scores, **others}
    result["provenance"] = provenance(wall_time_s=time.perf_counter() - called, device=dev, models=models, data=(x, y))
    report.write(result, run_dir, log=log)
    distributed.finish()
    return result


def _common_settings(classifier, defences, x, y, config: EvalConfig, nb_classes, clip_values, baselines,
                     scheme: str = "shared") -> dict:  # fmt: skip
    """What every unit's records depend on besides its attack's budget: data, weights, defences, S, R, seed and its
    scheme (named where it is not the ``"shared"`` one of the folders from before it), chunking."""
    check_scheme(scheme)
    return {
        **({} if scheme == "shared" else {"seed_scheme": scheme}),
        "data_sha256": array_sha256(x, y),
        "n_examples": len(x),
        "classifier_sha256": module_sha256(classifier),
        "defences": [describe_defence(d) for d in defences],
        "nb_classes": nb_classes,
        "clip_values": list(clip_values),
        "ensemble_size": config.ensemble_size,
        "repeats": config.repeats,
        "seed": config.seed,
        "chunk_size": config.chunk_size,
        "batch_size": config.batch_size,
        "baselines_sha256": {k: module_sha256(e.model) for k, e in baselines.items()},
    }


def _inputs(classifier, defences, x, y, config: EvalConfig, nb_classes: int | None, dev) -> tuple:
    """The checked inputs (the first ``config.n_examples``), K, and the defences as a list."""
    defences = [defences] if isinstance(defences, PreprocessorPyTorch) else list(defences)
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"x must be N×C×H×W and y N labels, got shapes {x.shape} and {y.shape}.")
    if config.n_examples is not None:
        x, y = x[: config.n_examples], y[: config.n_examples]
    classifier.to(dev).eval()
    if nb_classes is None:
        with torch.no_grad():
            nb_classes = int(classifier(torch.as_tensor(x[:1], device=dev)).shape[-1])
    return x, y, nb_classes, defences


def _baselines(classifier, baselines, defences, x, nb_classes, clip_values, dev) -> tuple[dict, dict]:
    """The baseline classifiers (the undefended one first when there is a defence) and their estimators."""
    baselines = dict(baselines or {})
    if defences:  # the undefended classifier, attacked directly, is always the first baseline
        baselines = {"undefended": classifier, **{k: v for k, v in baselines.items() if k != "undefended"}}
    estimators = {k: _as_estimator(m, x, nb_classes, clip_values, dev) for k, m in baselines.items()}
    for name, est in estimators.items():
        if est.preprocessing_defences:
            raise ValueError(f"baseline {name!r} has preprocessing defences; baselines are undefended classifiers.")
    return baselines, estimators


def _resume(run_dir: Path, cells: Sequence[Cell]) -> None:
    """Check the records already in ``run_dir`` before anything runs: two records of one image that disagree, a cell
    asked with other settings (the settings guard, :func:`~art_adp.runs.engine.guard`), and a folder whose records name
    their settings by digest (written before the one guard, refused naming the conversion)."""
    done = load_records(record_files(run_dir))
    if any("settings" in r for r in done.values()):
        raise ValueError(f"{run_dir} was written before the one settings guard (its records name their settings by "
                         f"digest): convert it once with art-adp migrate {run_dir}, then resume.")  # fmt: skip
    engine.guard(settings_path(run_dir), cells, write=False)


def _log_estimate(estimator, x, config: EvalConfig, cells: Sequence[Cell], pending, n_units: int, dev, world: int,
                  log) -> tuple:  # fmt: skip
    """Probe the device, log the engine's estimate (:func:`~art_adp.runs.engine.estimate`) of the ``pending`` units,
    each attack's share of it (over every setting that runs the attack) and the sanity checks' share and memory.

    :return: Seconds in all, the sanity checks' cost, seconds by attack, the gradient-free check's seconds (None
        where it does not run)."""
    probe = engine.probe(estimator, x, config.batch_size)  # one for every cell: the settings share the estimator
    seconds = engine.estimate(cells, _images_left(pending), lambda target: probe)
    est_seconds = sum(seconds.values()) / world
    prices = {a: sum(t for (_, b), t in seconds.items() if b == a) / world for a in _attack_order(pending)}
    sanity = {"seconds": sum(t for (s, _), t in seconds.items() if s.startswith("sanity")),
              **sanity_memory(pending, config, probe, dev)}  # fmt: skip
    checked = [u for u in pending if u[0].name == GRADIENT_FREE]
    free = sum(t for (s, _), t in seconds.items() if s == GRADIENT_FREE) / world if checked else None
    order = list(PRESETS)  # strongest, paper, croce (APGD only), smoke (CI-sized): largest first
    smaller = order[order.index(config.preset_name) + 1 :] if config.preset_name in order else order
    log(
        f"Estimated time on this device ({dev.type}, {torch.get_num_threads()} CPU threads): about "
        f"{_duration(est_seconds)} for {len(pending)} of {n_units} units of work on {len(x)} examples "
        f"(probe: {1000 * probe['forward']:.2f} ms per defended image in batches of {probe['rows']}, "
        f"{1000 * probe['full']:.2f} ms with a full gradient in {probe.get('full_rows', probe['rows'])}). "
        + _dominant(prices, est_seconds, config)
        + "Smaller: "
        + "".join(f"--preset {name}, " for name in smaller)
        + "--n-examples N, or per-attack flags (e.g. --spsa-samples-per-step 128). By attack: "
        + ", ".join(f"{a} {_duration(t)}" for a, t in prices.items())
        + "."
        + (
            f" Sanity checks: about {_duration(sanity['seconds'] / world)} of it; their gradient attacks hold "
            f"about {sanity['graph_bytes'] / 2**20:.0f} MiB of autograd graph at a time (blocks of "
            f"{sanity['rows']} image-draws, memory budget {sanity['budget'] / 2**20:.0f} MiB), on top of this "
            f"process's {_peak_rss() / 2**20:.0f} MiB (--no-sanity skips them)."
            if sanity["seconds"] > 0
            else ""
        )
        + (
            f" Gradient-free masking check (the defence clips its noisy input): {checked[0][1]} on the first "
            f"{config.masking_examples} examples, about {_duration(free or 0.0)} of it (--masking-examples N sizes "
            "it, 0 skips it)."
            if checked
            else ""
        )
    )
    return est_seconds, sanity, prices, free


def _dominant(prices: Mapping[str, float], total: float, c: EvalConfig) -> str:
    """The attack taking over half of ``total`` seconds, if one does, in words with the flags that shrink it (its
    budget's counts; the judgements' S and R for the clean row and the flags); ``""`` otherwise, and for a run of
    under a minute."""
    attack = next((a for a, t in prices.items() if t > total / 2), None)
    if attack is None or total < 60:
        return ""
    names = count_fields(attack) or ("ensemble_size", "repeats")
    flags = " or ".join(f"--{name.replace('_', '-')} (now {getattr(c, name)})" for name in names)
    return f"{attack} takes {_duration(prices[attack])} of it: lower {flags} to shrink it. "


def _images_left(units) -> dict[tuple, int]:
    """The images of ``units`` (setting, attack, chunk) by cell key (setting, attack)."""
    left: dict[tuple, int] = {}
    for s, a, ch in units:
        left[(s.name, a)] = left.get((s.name, a), 0) + len(ch)
    return left


def _attack_order(units) -> list[str]:
    """The attacks of ``units`` (setting, attack, chunk), each once, in the order they run."""
    return list(dict.fromkeys(a for _, a, _ in units))


def _work(cells, settings, targets: dict, x, y, run_dir: Path, shard, progress: bool) -> dict:
    """Run the ``cells`` not yet done (by every rank's records) on their target estimator (the setting's
    baseline, else the defended one with the setting's σ) into ``run_dir`` (:func:`~art_adp.runs.engine.run`); the
    purifiers' σ and generators are restored afterwards.

    :return: Seconds per ``"setting/attack"``.
    """
    by_name = {s.name: s for s in settings}
    saved = [(p, p.sigma, p.generator) for p in purifiers(targets[None])]

    def target(name: str):
        setting = by_name[name]
        for p, sigma, _ in saved:
            p.set_params(sigma=setting.overrides.get("sigma", sigma))
        return targets[setting.baseline]

    try:
        seconds = engine.run(cells, target, x, y, run_dir, shard=shard, progress=progress)
    finally:
        for p, sigma, generator in saved:
            p.set_params(sigma=sigma, generator=generator)
    return {f"{s}/{a}": t for (s, a), t in seconds.items()}
