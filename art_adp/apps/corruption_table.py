"""The ADP paper's common-corruption table (its Table 4 and appendix Table 8) on any data set: ``art-adp corruptions``.

Rows: the undefended classifier; ADP with σ = 0, 0.1, 0.25 (adaptive steps, λ = 0.05); ADP σ = 0.25 with
score-norm detection (flagged inputs σ, the others βσ); ADP σ = 0 with a DCT-trained and with an AugMix-trained
score model (the DCT one with adaptive steps, the AugMix one with the paper's manual schedule
:func:`~art_adp.corruptions.corruption_step_sizes`, as its appendix says); and, to tell the AugMix model's share
from its schedule's, the plain model with that schedule. Columns: clean accuracy, each of the
15 corruptions averaged over severities 1-5, the mean per severity and the mean of all 75 sets.

The corrupted test sets are computed once into ``run_dir/data`` (:func:`~art_adp.corruptions.write_corrupted`,
the CIFAR-10-C layout, with the ImageNet-C or CIFAR-10-C constants) and read back through
:func:`~art_adp.data.load_cifar10c`; with ``cifar10c_root`` the real CIFAR-10-C files are read instead. Where the
test images have official file names (CIFAR-10), the corrupted rows are selected by name, so the clean and the
corrupted columns are the same images. A σ-conditional denoiser (a DenoiserUNet) serves as h at the row's σ, and at
``zero_level`` where σ = 0 (:func:`~art_adp.score.diffusion.score_at`).

Several classifiers share one table by calls into one folder (``classifier_name``): one record per (classifier, row,
corruption, severity) goes to ``records/`` as it finishes; a rerun skips finished ones, and refuses a run folder
whose ``settings.json`` differs. Each call's provenance goes to ``calls.jsonl``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..corruptions import CORRUPTIONS, SEVERITIES, corruption_step_sizes, write_corrupted
from ..data import load_cifar10c
from ..defended import DefendedModel
from ..detect import ScoreNormDetector
from ..purification import DEFAULTS, purify
from ..runs.provenance import code_diff, code_version, provenance
from ..runs.records import (
    append_records,
    guard_settings,
    read_jsonl,
    record_key,
    records_path,
    settings_path,
    write_json,
)
from ..score.diffusion import score_at
from ..runs.seeds import derive_seed
from ..runs.render import accuracy_cell, markdown_table

__all__ = ["CorruptionConfig", "corruptions_command", "run_corruptions", "variant_names", "VARIANTS"]

# row -> (score model, σ, detection-driven σ, step schedule): the paper's Table 4 rows
VARIANT_SETTINGS = {
    "undefended": None,
    "ADP σ=0": ("plain", 0.0, False, "adaptive"),
    "ADP σ=0.1": ("plain", 0.1, False, "adaptive"),
    "ADP σ=0.25": ("plain", 0.25, False, "adaptive"),
    "ADP σ=0.25 + detection": ("plain", 0.25, True, "adaptive"),
    "ADP σ=0, AugMix's schedule": ("plain", 0.0, False, "corruption"),  # separates model from schedule
    "ADP σ=0 + DCT": ("dct", 0.0, False, "adaptive"),
    "ADP σ=0 + AugMix": ("augmix", 0.0, False, "corruption"),
}
VARIANTS = tuple(VARIANT_SETTINGS)


def variant_names(text: str) -> list[str]:
    """The rows ``--variants`` names: comma-separated, a row name that holds a comma (``ADP σ=0, AugMix's schedule``)
    read whole; an unknown name is kept for :func:`run_corruptions` to refuse with the valid ones."""
    names, rest, longest_first = [], text.strip(), sorted(VARIANTS, key=len, reverse=True)
    while rest:
        raw = next((v for v in longest_first if rest == v or rest.startswith(v + ",")), rest.split(",")[0])
        if raw.strip():
            names.append(raw.strip())
        rest = rest[len(raw) :].lstrip(",").strip()
    return names


@dataclass(frozen=True)
class CorruptionConfig:
    """Settings of :func:`run_corruptions` (all of them go to ``settings.json`` and guard resuming)."""

    n_examples: int | None = None  # first N test images (None: all)
    ensemble_size: int = 2  # S purifications averaged (softmax) where σ > 0; σ = 0 is deterministic: S = 1
    steps: int = DEFAULTS.steps  # T
    lam: float = 0.05
    beta: float = 0.2  # detection: unflagged inputs get βσ
    fpr: float = 0.05  # detection threshold: this false-positive rate on clean calibration images
    n_calibration: int = 500  # clean training images the detection threshold is fitted on
    batch_size: int = 512
    seed: int = 0  # purification noise: derive_seed(seed, row, corruption, severity)
    corruption_seed: int = 0  # the corruptions' randomness (write_corrupted)
    constants: str = "imagenet-c"  # the corruptions' constants: "imagenet-c" (imagecorruptions) or "cifar10-c"
    zero_level: float = 0.02  # the level a σ-conditional denoiser's h is read at for σ = 0 (σ > 0: at σ)


def _variants(available: set[str]) -> list[str]:
    """The rows whose score model is given."""
    return [v for v, st in VARIANT_SETTINGS.items() if st is None or st[0] in available]


#: The classifier of a record written before tables held several.
ONE_CLASSIFIER = "classifier"


#: The fields that identify a record of a corruption table (:func:`~art_adp.runs.records.record_key`).
RECORD_KEY = ("classifier", "variant", "corruption", "severity")


def _load_records(path: Path) -> dict[tuple, dict]:
    """The complete records of ``path`` by (classifier, variant, corruption, severity)."""
    return {record_key(r, RECORD_KEY, {"classifier": ONE_CLASSIFIER}): r for r in read_jsonl(path)}


def _level(sigma: float, c: "CorruptionConfig") -> float:
    """The level h is read at for a row of noise σ (a σ-conditional denoiser's; a noise-level-free h ignores it)."""
    return sigma if sigma > 0 else c.zero_level


def _predictor(variant: str, classifier, scores: dict, detector, c: CorruptionConfig, device) -> Callable:
    """``(x, generator) -> predicted labels`` for one row of the table: the S-run ensemble of
    :class:`~art_adp.DefendedModel`, one draw of the batch per pass (the draws take the generator's noise in turn)."""
    setting = VARIANT_SETTINGS[variant]
    if setting is None:
        return lambda x, gen: classifier(x).argmax(1)
    key, sigma, detection, schedule = setting
    score = score_at(scores[key], _level(sigma, c))
    step_size = corruption_step_sizes(steps=c.steps) if schedule == "corruption" else "adaptive"
    draws = c.ensemble_size if sigma > 0 else 1  # σ = 0: purification is deterministic, every draw is the same

    def predict(x, gen):
        s = sigma * torch.where(detector.flag(x), 1.0, c.beta).to(x.dtype) if detection else sigma  # σ per row of x
        purifier = functools.partial(purify, score, sigma=s, steps=c.steps, step_size=step_size, lam=c.lam,
                                     generator=gen)  # fmt: skip
        return DefendedModel(classifier, purifier, ensemble_size=draws, batch_size=len(x))(x).argmax(1)

    return predict


def corruptions_command(
    config: CorruptionConfig,
    *,
    classifier: str,
    score: str,
    score_dct: str | None = None,
    score_augmix: str | None = None,
    dataset: str = "digits",
    data_root: str | None = None,
    cifar10c_root: str | None = None,
    cifar10_archive: str | None = None,
    classifier_name: str = ONE_CLASSIFIER,
    description: str | None = None,
    variants: Sequence[str] | None = None,
    run_dir: str = "runs/corruptions",
    device: str | None = None,
    progress: bool = True,
) -> dict:
    """``art-adp corruptions``: load the data set and the models (checkpoint paths or zoo:NAME), then
    :func:`run_corruptions`. Several classifiers go into one table by calls into one --run-dir, each with its
    --classifier-name."""
    from ..data import cifar10_test_order, load_dataset, test_names
    from .loading import load_classifier_arg, load_score_arg

    def load_score_model(spec):
        return load_score_arg(spec)[0]

    data = load_dataset(dataset, data_root)
    n = len(data.x_test) if config.n_examples is None else min(config.n_examples, len(data.x_test))
    description = description or (
        f"{dataset}: first {n} of {len(data.x_test)} test images; models trained on its {len(data.x_train)} training "
        "images"
    )
    if cifar10_archive and not cifar10c_root:
        raise ValueError("--cifar10-archive gives the order of the real CIFAR-10-C files: use it with --cifar10c-root.")
    return run_corruptions(
        run_dir,
        load_classifier_arg(classifier)[0],
        load_score_model(score),
        data.x_test,
        data.y_test,
        data.x_train,
        config=config,
        score_dct=load_score_model(score_dct) if score_dct else None,
        score_augmix=load_score_model(score_augmix) if score_augmix else None,
        description=description,
        cifar10c_root=cifar10c_root,
        names=test_names(data_root) if dataset == "cifar10" and data_root else None,
        order=cifar10_test_order(cifar10_archive) if cifar10_archive else None,
        classifier_name=classifier_name,
        nb_classes=data.nb_classes,
        variants=variants,
        progress=progress,
        device=device,
    )


def run_corruptions(
    run_dir: str | Path,
    classifier: torch.nn.Module,
    score: torch.nn.Module,
    x_test: np.ndarray,
    y_test: np.ndarray,
    x_calibration: np.ndarray,
    *,
    config: CorruptionConfig = CorruptionConfig(),
    score_dct: torch.nn.Module | None = None,
    score_augmix: torch.nn.Module | None = None,
    description: str = "",
    cifar10c_root: str | Path | None = None,
    names: Sequence[str] | None = None,
    order: Sequence[str] | None = None,
    classifier_name: str = ONE_CLASSIFIER,
    nb_classes: int = 10,
    variants: Sequence[str] | None = None,
    progress: bool = True,
    device: str | torch.device | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """
    Measure every row of the table on the clean and the 75 corrupted test sets; write ``records/``,
    ``corruptions.json``, ``corruptions.md`` and ``corruptions.png`` to ``run_dir``.

    :param classifier: ``N×C×H×W`` in [0, 1] → logits.
    :param score: The plain DSM score model h (rows σ = 0 / 0.1 / 0.25 and detection).
    :param x_test: Clean test images ``N×C×H×W`` float in [0, 1] (the first ``config.n_examples`` are used).
    :param y_test: Their labels.
    :param x_calibration: Clean images (not the test images) for the detection threshold.
    :param score_dct: Score model trained with ``augment="dct"`` (its row is left out when ``None``).
    :param score_augmix: Score model trained with ``augment="augmix"`` (its row is left out when ``None``).
    :param description: Data and models in words, for the table's header (e.g. the split).
    :param cifar10c_root: Read the corrupted sets from this CIFAR-10-C folder instead of corrupting ``x_test``.
    :param names: The official file names of ``x_test`` (one each): the corrupted rows are selected by them, so the
        clean and corrupted columns are the same images (a cache written here records them).
    :param order: The official names of ``cifar10c_root``'s rows, in its order (the official test order:
        :func:`~art_adp.data.cifar10_test_order`); needed with ``names`` and ``cifar10c_root``.
    :param classifier_name: The classifier's name in the table: calls into one folder with different names make one
        table of several classifiers.
    :param variants: Measure only these rows (names from :data:`VARIANTS`; default: every row whose score model
        is given), e.g. to add rows to a run folder from a second process.
    :return: The results (also in ``corruptions.json``).
    """
    c = config
    start = time.perf_counter()
    code = code_version()  # the code this call runs, as it starts: the checkout may move on while it measures
    diff = code_diff() if code.endswith("-dirty)") else None
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    x_test, y_test = np.asarray(x_test)[: c.n_examples], np.asarray(y_test)[: c.n_examples]
    names = None if names is None else list(names)[: len(x_test)]
    if names is not None and len(names) != len(x_test):
        raise ValueError(f"names: {len(names)} file names for {len(x_test)} test images; give one per image.")
    if cifar10c_root and names is not None and order is None and not (Path(cifar10c_root) / "filenames.txt").exists():
        raise ValueError(
            f"{cifar10c_root}: the real CIFAR-10-C rows follow the official test order, which selects the test images "
            "by name: give the official archive (--cifar10-archive cifar-10-python.tar.gz, or its cifar-10-batches-py)."
        )
    given = {"plain": score, "dct": score_dct, "augmix": score_augmix}
    variants = _chosen_variants(variants, {k for k, m in given.items() if m is not None})
    settings = {
        "config": asdict(c),
        "n": len(x_test),
        "shape": list(x_test.shape[1:]),
        "cifar10c_root": str(cifar10c_root) if cifar10c_root else None,
        "description": description,
    }
    if names is not None:  # recorded only when given: a folder from before the selection by name holds none
        settings["names_sha256"] = hashlib.sha256("\n".join(names).encode()).hexdigest()
    guard_settings(settings_path(run_dir), settings, what="the corruption table")  # rows may be added later

    data_root = Path(cifar10c_root) if cifar10c_root else run_dir / "data"
    if not cifar10c_root:
        log(f"corrupting {len(x_test)} test images ({len(CORRUPTIONS)} corruptions x 5 severities) into {data_root}")
        write_corrupted(data_root, x_test, y_test, seed=c.corruption_seed, source=description, progress=progress,
                        constants=c.constants, names=names)  # fmt: skip

    classifier = classifier.to(dev).eval()
    layout = torch.channels_last if dev.type == "cpu" else torch.contiguous_format  # faster convs on CPU
    # nn.Module.to accepts memory_format at run time; torch's overloads for it omit the keyword
    scores = {
        k: m.to(dev, memory_format=layout).eval().requires_grad_(False)  # type: ignore[call-overload]
        for k, m in given.items()
        if m is not None
    }
    detecting = max((st[1] for v, st in VARIANT_SETTINGS.items() if st and st[2]), default=0.25)
    detector = ScoreNormDetector(
        score_at(scores["plain"], _level(detecting, c)), batch_size=c.batch_size,
        device_type="gpu" if dev.type == "cuda" else "cpu",
    )  # fmt: skip
    detector.fit(np.asarray(x_calibration)[: c.n_calibration], fpr=c.fpr)
    predictors = {v: _predictor(v, classifier, scores, detector, c, dev) for v in variants}
    sets = _TestSets(x_test, y_test, data_root, nb_classes, dev, layout, names, order)
    path = records_path(run_dir)
    _measure(path, classifier_name, predictors, sets, c, progress, log)

    done = _load_records(path)  # re-read: another process may have added rows to this run folder
    models = {classifier_name: classifier, **{f"score ({k})": m for k, m in given.items() if m is not None}}
    call = provenance(
        wall_time_s=time.perf_counter() - start,
        device=dev,
        models=models,
        data=(x_test, y_test),
        started_at=code,
        started_diff=diff,
    )
    append_records(run_dir / "calls.jsonl", [{**call, "classifier": classifier_name, "rows": variants}])
    results = summarise(done)
    results.update(
        {
            "settings": settings,
            "detection_threshold": detector.threshold,
            "seconds_this_call": round(time.perf_counter() - start, 1),
            "seconds_measuring": round(sum(r["seconds"] for r in done.values()), 1),
            "device": str(dev),
            "provenance": _provenance(read_jsonl(run_dir / "calls.jsonl")),
        }
    )
    write_json(run_dir / "corruptions.json", results, indent=2)
    _write_table(run_dir, results, variants, description, len(x_test), min(c.n_calibration, len(x_calibration)), c, log)
    log(f"wrote {run_dir / 'corruptions.md'}, corruptions.json, corruptions.png, records/")
    return results


def _chosen_variants(variants: Sequence[str] | None, available: set[str]) -> list[str]:
    """The rows to measure: ``variants``, or every row whose score model is given."""
    rows = _variants(available)
    if variants is not None and not set(variants) <= set(rows):
        raise ValueError(
            f"variants {sorted(set(variants) - set(rows))} cannot be measured: valid rows with the "
            f"score models given are {rows}."
        )
    return list(variants) if variants is not None else rows


def _provenance(calls: list[dict]) -> dict:
    """The result's provenance: the last call's, the models of every call, and the earlier calls (as
    ``docs/render.py`` prints them)."""
    models = {k: v for call in calls for k, v in call["models"].items()}
    return {**calls[-1], "models": models, "calls": calls[:-1]}


class _TestSets:
    """The clean and the corrupted test sets on the device, one at a time (the last one read is kept); the corrupted
    rows by the test images' official names where they have them, else the first N."""

    def __init__(self, x_test, y_test, data_root: Path, nb_classes: int, device, layout, names=None,
                 order=None) -> None:  # fmt: skip
        self.x_test, self.y_test, self.data_root = x_test, y_test, data_root
        self.nb_classes, self.device, self.layout = nb_classes, device, layout
        self.names, self.order = names, order
        self.cache: dict[tuple[str, int], tuple[torch.Tensor, np.ndarray]] = {}

    def __call__(self, name: str, severity: int) -> tuple[torch.Tensor, np.ndarray]:
        if (name, severity) not in self.cache:
            if name == "clean":
                x, y = self.x_test, self.y_test
            elif self.names is not None:
                x, y = load_cifar10c(self.data_root, name, severity, nb_classes=self.nb_classes, names=self.names,
                                     order=self.order)  # fmt: skip
            else:
                x, y = load_cifar10c(self.data_root, name, severity, nb_classes=self.nb_classes)
                x, y = x[: len(self.x_test)], y[: len(self.x_test)]
            if not np.array_equal(y, self.y_test):
                raise ValueError(f"{self.data_root}: the labels of {name} {severity} are not those of the clean test "
                                 "images: the corrupted rows are other images.")  # fmt: skip
            self.cache.clear()
            xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.device)
            self.cache[(name, severity)] = (xt.contiguous(memory_format=self.layout), y)
        return self.cache[(name, severity)]


def _measure(path: Path, classifier_name: str, predictors: dict, sets: _TestSets, c: CorruptionConfig, progress: bool,
             log) -> None:  # fmt: skip
    """One record per (row, corruption, severity) of this classifier without one in ``path``, set-major (each
    corrupted set is loaded once for all rows); the purification noise of each comes from
    ``derive_seed(seed, row, corruption, severity)``, the same for every classifier."""
    done = {k[1:]: r for k, r in _load_records(path).items() if k[0] == classifier_name}
    all_sets = [("clean", 0)] + [(name, s) for name in CORRUPTIONS for s in SEVERITIES]
    todo = [(v, name, s) for name, s in all_sets for v in predictors if (v, name, s) not in done]
    total = len(predictors) * len(all_sets)
    log(f"{total - len(todo)} of {total} (variant, corruption, severity) results on disk; {len(todo)} to go")
    pbar = tqdm(total=len(todo), disable=not progress, desc="corruptions", dynamic_ncols=True)
    for v, name, s in todo:
        x, y = sets(name, s)
        t0 = time.perf_counter()
        gen = torch.Generator(x.device).manual_seed(derive_seed(c.seed, v, name, s))
        with torch.no_grad():
            pred = torch.cat([predictors[v](xb, gen) for xb in x.split(c.batch_size)]).cpu().numpy()
        record = {
            "classifier": classifier_name,
            "variant": v,
            "corruption": name,
            "severity": s,
            "correct": int((pred == y).sum()),
            "n": int(len(y)),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        append_records(path, [record])
        pbar.update(1)
        pbar.set_postfix_str(f"{v} | {name} {s}")
    pbar.close()


def _write_table(run_dir: Path, results: dict, variants, description: str, n: int, n_cal: int, c, log) -> None:
    """``corruptions.md`` (the tables under a header) and ``corruptions.png`` (mean accuracy per severity)."""
    from .plots import sweep_curve

    device, threshold = results["device"], results["detection_threshold"]
    table = corruption_markdown(results)
    header = (
        f"{description}\nn = {n} test images, S = {c.ensemble_size} purifications where σ > 0, T = {c.steps}; "
        f"detection threshold {threshold:.4g} (fpr {c.fpr} on {n_cal} clean training images); device {device}\n\n"
    )
    (run_dir / "corruptions.md").write_text(header + table + "\n")
    sweep_curve(
        run_dir / "corruptions.png",
        list(range(6)),
        {v: [row["clean"]] + [row[f"severity {k}"] for k in SEVERITIES] for v, row in results["rows"].items()},
        xlabel="severity (0 = clean)",
        title=f"Mean over 15 corruptions: n = {n}, S = {c.ensemble_size}, T = {c.steps}\n"
        f"device {device}, {results['seconds_measuring']:.0f} s measuring",
    )
    log(header + table)
    log(
        f"time: {results['seconds_this_call']:.0f} s this call ({results['seconds_measuring']:.0f} s measuring in "
        f"all), device {device}"
    )


def summarise(records: dict[tuple[str, str, str, int], dict]) -> dict:
    """Accuracies per row (a classifier and a purifier; the rows of one classifier are named by the purifier alone):
    clean, each corruption over its 5 severities, each severity over the 15, and the mean."""
    classifiers = list(dict.fromkeys(k[0] for k in records))
    pairs = [(clf, v) for clf in classifiers for v in VARIANTS if any(k[:2] == (clf, v) for k in records)]
    rows = {}
    for clf, v in pairs:
        acc = {(name, s): r["correct"] / r["n"] for (rc, rv, name, s), r in records.items() if (rc, rv) == (clf, v)}
        row = {"clean": acc.get(("clean", 0), float("nan"))}
        for name in CORRUPTIONS:
            row[name] = float(np.mean([acc.get((name, s), np.nan) for s in SEVERITIES]))
        for s in SEVERITIES:
            row[f"severity {s}"] = float(np.mean([acc.get((name, s), np.nan) for name in CORRUPTIONS]))
        row["mean"] = float(np.mean([row[name] for name in CORRUPTIONS]))
        rows[v if len(classifiers) == 1 else f"{clf} · {v}"] = row
    return {"rows": rows, "columns": ["clean", *CORRUPTIONS, *(f"severity {s}" for s in SEVERITIES), "mean"]}


SHORT = {
    "gaussian_noise": "gauss",
    "shot_noise": "shot",
    "impulse_noise": "impulse",
    "defocus_blur": "defocus",
    "glass_blur": "glass",
    "motion_blur": "motion",
    "zoom_blur": "zoom",
    "snow": "snow",
    "frost": "frost",
    "fog": "fog",
    "brightness": "bright",
    "contrast": "contrast",
    "elastic_transform": "elastic",
    "pixelate": "pixel",
    "jpeg_compression": "jpeg",
}


def corruption_markdown(results: dict) -> str:
    """Two markdown tables (accuracy in %): per corruption, then per severity."""
    rows = results["rows"]
    per_c = ["clean", *CORRUPTIONS, "mean"]
    per_s = ["clean", *(f"severity {s}" for s in SEVERITIES), "mean"]
    lines = markdown_table(["variant", *(SHORT.get(k, k) for k in per_c)],
                           [[v, *(accuracy_cell(r[k]) for k in per_c)] for v, r in rows.items()])  # fmt: skip
    lines += ["", *markdown_table(["variant", "clean", *(f"sev {s}" for s in SEVERITIES), "mean"],
                                  [[v, *(accuracy_cell(r[k]) for k in per_s)] for v, r in rows.items()])]  # fmt: skip
    return "\n".join(lines)
