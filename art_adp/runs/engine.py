"""The evaluation engine: a plan of cells -- a defended model, an attack with its budget, a judgement -- run in blocks
of images, resumably, into one record file, with the per-image worst case over attacks as an output.

    from art_adp.runs.engine import evaluate_robustness
    result = evaluate_robustness(classifier, purifier, x, y, eps=8 / 255, run_dir="runs/mine")
    result["worst_case"]["accuracy"], result["robust"]  # per image: left correct by every attack

Every command that measures accuracy under attack is a plan of this engine: ``art-adp evaluate`` (its card),
``art-adp levers`` (the lever tables) and ``reproduce`` (the paper's MNIST row), and :func:`evaluate_robustness`, the
Python entry point, as AutoAttack's ``run_standard_evaluation`` is: a list of attacks with their budgets, each image
judged robust only if no attack broke it, the state on disk to resume.

One block of one cell: the purifiers reseeded for the attack (:attr:`Seeds.noise`; a *fixed* judgement freezes that
draw for the attack and the judge alike), the attack run (:attr:`Cell.attack`, seeded by :attr:`Seeds.attack`), the
adversarial examples judged (:func:`judge`: the S-run ensemble R times with fresh noise, one frozen draw, or once), and
the block's records appended (one line per image in the one layout, :func:`records`, atomically: a run killed
mid-block resumes from its last whole block). A cell's seeds come from its identity and its block alone, so a block
gives the same records whichever process runs it, in any order.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

from ..attacks._core import purifiers
from ..attacks.registry import REGISTRY, Budget, budget_settings
from ..ensemble import logits
from ..eot import EOTClassifier
from .plans import ENTRY_POINT, PAPER, budget, plan
from .records import SETTINGS, append_records, canonical, guard_settings, read_jsonl, read_records, record_key
from .records import records_path, settings_path, write_json
from .seeds import SCHEME, SeedPlan, Seeds, check_scheme, derive_seed
from .statistics import per_image, summary

__all__ = [
    "Attacking",
    "Cell",
    "EXTRAS",
    "JUDGES",
    "JudgeKind",
    "Judgement",
    "Outcome",
    "Price",
    "Seeds",
    "folder_scheme",
    "attack_of",
    "build_defence",
    "correct",
    "flags",
    "defended_estimator",
    "describe_defence",
    "estimate",
    "evaluate_robustness",
    "probe",
    "probing",
    "unit_seconds",
    "frozen_noise",
    "guard",
    "judge",
    "keep",
    "kept",
    "pending",
    "records",
    "registry_attack",
    "rejudge",
    "rejudge_robustness",
    "record_identity",
    "reseed",
    "run",
    "run_cells",
    "single_value",
    "worst_case",
]


@dataclass(frozen=True)
class Judgement:
    """How a cell is judged (a name of :data:`JUDGES`), with S = ``ensemble_size`` and R = ``repeats``, in batches."""

    kind: str = "ensemble"
    ensemble_size: int = 10
    repeats: int = 1
    batch_size: int = 500

    def __post_init__(self):
        if self.kind not in JUDGES:
            raise ValueError(f"judgement must be one of {list(JUDGES)}, got {self.kind!r}.")


#: An attack of a cell: ``(estimator, x, y, indices, seeds) -> x_adv`` for one block.
Attack = Callable[[Any, np.ndarray, np.ndarray, np.ndarray, Seeds], np.ndarray]


@dataclass
class Outcome:
    """What one block gives its records: the images' indices, labels, adversarial examples and the judgement's
    predictions (``R × N``; one line for a fixed or once judgement), the seconds it took; the undefended prediction
    (the bare classifier on the adversarial examples) on demand."""

    index: np.ndarray
    label: np.ndarray
    x: np.ndarray
    x_adv: np.ndarray
    preds: np.ndarray
    seconds: float
    seeds: Seeds
    estimator: Any = field(repr=False, default=None)

    @property
    def correct(self) -> np.ndarray:
        """Correct in every judgement (the worst of R)."""
        return (self.preds == self.label).all(0)

    def undefended(self) -> np.ndarray:
        """The bare classifier's prediction on the adversarial examples (the defences skipped)."""
        xt = torch.as_tensor(self.x_adv, dtype=torch.float32, device=self.estimator.device)
        with torch.no_grad():
            return logits(self.estimator, xt, defended=False).argmax(1).cpu().numpy()

    def linf(self) -> np.ndarray:
        return np.abs(self.x_adv - self.x).reshape(len(self.index), -1).max(1)

    def l2(self) -> np.ndarray:
        return np.array([np.linalg.norm(d) for d in (self.x_adv - self.x).reshape(len(self.index), -1)])


@dataclass(frozen=True)
class Price:
    """What a cell costs per image, as data: its attack (a registry name; None: no attack through the purifier) at
    ``budget``, ``forward_passes`` defended forward passes beside it (its judgement's: S × R for the ensemble, one for
    a frozen draw; a sanity check's flags, :func:`flags`: two) and ``full_passes`` full-gradient passes (the flags':
    one). :func:`unit_seconds` prices it at a :func:`probe`, :func:`estimate` a plan's cells."""

    attack: str | None
    budget: Budget | None
    forward_passes: int
    full_passes: int = 0


@dataclass(frozen=True)
class Cell:
    """
    One cell of a plan: the estimator ``target`` attacked by ``attack`` and judged by ``judgement``.

    :param key: The cell's identity: its records are those whose record key (:func:`record_identity`) is ``(*key,
        index)``.
    :param key_fields: The record field of each value of ``key``, in order (``("setting", "attack")``): the engine
        derives the records' key from them (:func:`record_identity`); a field the cell's records leave out
        (not in ``fields``) has the cell's value as every such record's.
    :param target: The name of the estimator attacked (``run_cells``' ``targets`` builds it).
    :param attack: An :class:`Attacking` (a registry attack at its budget, none, or examples kept in the run folder),
        or a plan's own ``(estimator, x, y, indices, seeds) -> x_adv``.
    :param judgement: How the adversarial examples are judged.
    :param seeds: ``(block number, first index) -> Seeds``: a :class:`~art_adp.runs.seeds.SeedPlan` (a scheme by name,
        the run's seed, the cell's identity, R).
    :param block_size: Images per block (blocks by index: 0 to B - 1, B to 2B - 1, ...); None: every pending image in
        one block.
    :param images: Only the first ``images`` images (None: all).
    :param fields: What every record of the cell carries before the engine's own fields (:func:`records`): its
        identity as the plan reads it back (``key`` finds it) and what it adds (JSON-able).
    :param extras: A name of :data:`EXTRAS`: more fields per image, computed from the block (None: none).
    :param label: Printed with the block's accuracy after each block (``label | 82.0% of 50``; None: silent).
    :param keep: Keep the block's adversarial examples in the run folder's ``examples/`` under this name
        (:func:`keep`); None: not kept.
    :param price: What its attack and judgement cost per image (a :class:`Price`: the registry's cost model at a
        :func:`probe` of its target); None: not priced.
    :param settings: What the cell's records depend on (JSON-able: budget, judging, defence, data, weights...): a run
        folder guarded by :func:`guard` refuses the cell when they differ from those it was first run with.
    """

    key: tuple
    key_fields: tuple[str, ...]
    target: Any
    attack: Attacking | Attack
    judgement: Judgement
    seeds: SeedPlan | Callable[[int, int], Seeds]
    fields: Mapping = field(default_factory=dict)
    block_size: int | None = 50
    images: int | None = None
    keep: tuple | None = None
    price: Price | None = None
    settings: Mapping | None = None
    extras: str | None = None
    label: str | None = None

    def __post_init__(self):
        if self.extras is not None and self.extras not in EXTRAS:
            raise ValueError(f"extras must be None or one of {list(EXTRAS)}, got {self.extras!r}.")
        if len(self.key_fields) != len(self.key):
            raise ValueError(f"A cell's key_fields name the record field of each value of its key: {self.key} has "
                             f"{len(self.key)} values, key_fields {self.key_fields} "
                             f"{len(self.key_fields)} names.")  # fmt: skip
        differ = [(n, self.fields[n], v) for n, v in zip(self.key_fields, self.key) if n in self.fields
                  and self.fields[n] != v]  # fmt: skip
        if differ:
            raise ValueError(f"The cell {self.key} writes other values into its records' key fields than its key: "
                             + ", ".join(f"{n} {w!r} (key {v!r})" for n, w, v in differ) + ".")  # fmt: skip


#: The key value of a record that lacks a key field no cell of the plan leaves out: no cell's.
_OTHER_PLANS = "(a record of another plan)"


def record_identity(cells: Iterable[Cell]) -> Callable[[Mapping], tuple]:
    """
    The record key of a plan, derived from its cells, the one the engine resumes by: :func:`~art_adp.runs.records.
    record_key` at the cells' :attr:`Cell.key_fields` and ``index``, a record lacking a key field having the value of
    the cells that leave it out of their records (a lever table's own classifier, the ensemble judge).

    :raises ValueError: If the cells name different key fields, or two cells leave a field out at different values
        (their records could not be told apart).
    """
    cells = list(cells)
    names = {c.key_fields for c in cells}
    if len(names) > 1:
        raise ValueError(f"A plan's cells name one set of key fields, these name {sorted(names)}.")
    omitted: dict[str, set] = {}
    for c in cells:
        for name, value in zip(c.key_fields, c.key):
            if name not in c.fields:
                omitted.setdefault(name, set()).add(value)
    clash = {name: sorted(values, key=repr) for name, values in omitted.items() if len(values) > 1}
    if clash:
        raise ValueError(f"Cells leave the key field(s) {clash} out of their records at different values: their "
                         "records could not be told apart; write the field.")  # fmt: skip
    fields = (*(names.pop() if names else ()), "index")
    defaults = {name: omitted[name].pop() if name in omitted else _OTHER_PLANS for name in fields[:-1]}
    return functools.partial(record_key, fields=fields, defaults=defaults)


def clean(estimator, x, y, idx, seeds):  # pylint: disable=unused-argument
    """The clean row: the images themselves."""
    return x


@dataclass(frozen=True)
class Attacking:
    """
    A cell's attack as data: the attack registry's ``name`` at ``budget``; ``"clean"``, none; or, with ``examples``,
    adversarial examples made once (e.g. Clf-PGD on the bare classifier, shared by every purifier in front of it) and
    kept in the run folder as a file of that name (``.npy``, or ``.npz`` holding one array), read at the block's
    indices.
    """

    name: str = "clean"
    budget: Budget | None = None
    examples: str | None = None

    def __post_init__(self):
        if self.examples is None and self.name != "clean" and self.name not in REGISTRY:
            raise ValueError(f"Unknown attack {self.name!r}; choose from {['clean', *REGISTRY]}.")
        if self.examples is None and self.name != "clean" and self.budget is None:
            raise ValueError(f"the attack {self.name!r} needs its budget: Attacking({self.name!r}, Budget(...)).")


def attack_of(attack: Attacking | Attack, run_dir: str | Path | None = None) -> Attack:
    """The callable a block runs for ``attack``: a plan's own callable as it is, else :class:`Attacking` resolved
    (``examples`` read from ``run_dir``)."""
    if not isinstance(attack, Attacking):
        return attack
    if attack.examples is not None:
        if run_dir is None:
            raise ValueError(f"the examples {attack.examples!r} are read from a run folder: give run_dir.")
        path = Path(run_dir) / attack.examples
        return lambda estimator, x, y, idx, seeds: _examples(path, idx)
    if attack.name == "clean" or attack.budget is None:  # a budget is required of every other name
        return clean
    return registry_attack(attack.name, attack.budget)


def _examples(path: Path, idx) -> np.ndarray:
    """The kept examples at ``idx``: a ``.npy`` file (memory-mapped), or a ``.npz`` holding one array."""
    if path.suffix == ".npz":
        with np.load(path) as f:
            return f[f.files[0]][np.asarray(idx)]
    return np.load(path, mmap_mode="r")[np.asarray(idx)]


def registry_attack(name: str, budget: Budget) -> Attack:
    """The attack registry's ``name`` at ``budget``, built on the block's estimator with the block's attack seed."""
    if name not in REGISTRY:
        raise ValueError(f"Unknown attack {name!r}; choose from {list(REGISTRY)}.")

    def run(estimator, x, y, idx, seeds):  # pylint: disable=unused-argument
        return REGISTRY[name].build(estimator, budget, seeds.attack).generate(x, y=y).astype(np.float32)

    return run


def reseed(estimator, seed: int) -> None:
    """Give every purifier of ``estimator`` a generator seeded with ``seed``."""
    for p in purifiers(estimator):
        p.set_params(generator=torch.Generator(p.device).manual_seed(seed))


@contextlib.contextmanager
def frozen_noise(estimator, seed: int):
    """
    Fix the randomness of the estimator's purifiers: every forward pass re-seeds the purifier's generator with
    ``seed``, so a batch of N rows gets the same noise draw on every call (the attack's and the judge's alike): a
    deterministic defence. Rows are drawn by position, so the view is exact for attacks that always pass the whole
    block with EOT 1 (PGD, BPDA, Joint, full-gradient PGD); APGD's later passes on the examples still unbroken see
    the draws of their new positions.
    """
    found = purifiers(estimator)
    for p in found:
        original = type(p).forward

        def forward(x, y=None, _p=p, _original=original):
            if _p.generator is None:
                _p.set_params(generator=torch.Generator(_p.device))
            _p.generator.manual_seed(seed)
            return _original(_p, x, y)

        setattr(p, "forward", forward)  # an instance attribute, shadowing the class's method until restored
    try:
        yield
    finally:
        for p in found:
            p.__dict__.pop("forward", None)


def _ensemble(estimator, x: np.ndarray, judgement: Judgement, seeds: Sequence[int]) -> np.ndarray:
    if len(seeds) != judgement.repeats:
        raise ValueError(f"an ensemble judgement of R = {judgement.repeats} needs {judgement.repeats} seeds.")
    ensemble = EOTClassifier(estimator, ensemble_size=judgement.ensemble_size, batch_size=judgement.batch_size)
    preds = []
    for s in seeds:
        reseed(estimator, s)
        preds.append(ensemble.predict(x).argmax(1))
    return np.stack(preds)


def _one_draw(estimator, x: np.ndarray, judgement: Judgement, seeds: Sequence[int]) -> np.ndarray:
    return EOTClassifier(estimator, ensemble_size=1, batch_size=judgement.batch_size).predict(x).argmax(1)[None]


def _once(estimator, x: np.ndarray, judgement: Judgement, seeds: Sequence[int]) -> np.ndarray:
    return estimator.predict(x, batch_size=judgement.batch_size).argmax(1)[None]


def _no_prediction(estimator, x: np.ndarray, judgement: Judgement, seeds: Sequence[int]) -> np.ndarray:
    return np.zeros((0, len(x)), dtype=np.int64)


@dataclass(frozen=True)
class JudgeKind:
    """
    A kind of judgement: ``predict(estimator, x, judgement, seeds) -> R × N`` labels (``seeds``: the R judgements'
    noise seeds), and ``frozen``: the purifiers' noise frozen at the block's noise seed for the attack and the judge
    alike (:func:`frozen_noise`), a deterministic defence.
    """

    predict: Callable[[Any, np.ndarray, Judgement, Sequence[int]], np.ndarray]
    frozen: bool = False


#: How a cell's adversarial examples are judged, by name -- the one place a judgement is added: the S-run ensemble
#: (mean softmax of S purifications) R times with fresh noise; one frozen draw shared with the attack (the purifier made
#: deterministic); once (a deterministic model); none (a cell whose records are not predictions, e.g. a sanity check's
#: flags). A plan asks for one by name in its cells (:class:`Judgement`), and :func:`rejudge` re-judges kept examples
#: by any of them without attacking.
JUDGES: dict[str, JudgeKind] = {
    "ensemble": JudgeKind(_ensemble),
    "fixed": JudgeKind(_one_draw, frozen=True),
    "once": JudgeKind(_once),
    "none": JudgeKind(_no_prediction),
}


def judge(estimator, x: np.ndarray, judgement: Judgement, seeds: Sequence[int] = ()) -> np.ndarray:
    """
    The predictions of ``estimator`` on ``x`` as ``judgement`` asks (:data:`JUDGES`): ``R × N`` labels of the S-run
    ensemble, the purifiers reseeded with ``seeds[r]`` before judgement r (``"ensemble"``); ``1 × N`` of one draw
    (``"fixed"``: inside :func:`frozen_noise`) or of the estimator itself (``"once"``).
    """
    return JUDGES[judgement.kind].predict(estimator, np.asarray(x, dtype=np.float32), judgement, seeds)


def keep(run_dir: Path, cell: Sequence, idx: Sequence[int] | np.ndarray, x_adv: np.ndarray) -> Path:
    """Save a block's adversarial examples: ``RUN_DIR/examples/<cell joined by __>__<first index>.npz`` (compressed;
    ``images`` float32, ``indices``), written atomically; returns the path."""
    folder = Path(run_dir) / "examples"
    folder.mkdir(parents=True, exist_ok=True)
    name = _kept_name(cell) + f"__{int(idx[0])}.npz"
    tmp = folder / (name + ".tmp.npz")
    np.savez_compressed(tmp, images=np.asarray(x_adv, np.float32), indices=np.asarray(idx, np.int64))
    tmp.replace(folder / name)
    return folder / name


def _kept_name(cell: Sequence) -> str:
    return "__".join(re.sub(r"[^A-Za-z0-9.+-]+", "_", str(c)) for c in cell)


def kept(run_dir: str | Path, cell: Sequence | None = None, *, required: bool = False) -> list[Path]:
    """The blocks of adversarial examples kept in ``RUN_DIR/examples/`` (:func:`keep`): those of ``cell``, or every
    cell's (None); by first image.

    :raises ValueError: With ``required``, if there are none: a new judgement needs the attacks run again.
    """
    name = re.compile((re.escape(_kept_name(cell)) if cell is not None else ".+") + r"__(\d+)\.npz")
    found = [(int(m[1]), p) for p in (Path(run_dir) / "examples").glob("*.npz") if (m := name.fullmatch(p.name))]
    if required and not found:
        raise ValueError(f"{run_dir} holds no kept adversarial examples (examples/*.npz) to judge again: its attacks "
                         "ran without keeping them (levers --no-keep-examples), or it is no run folder.")  # fmt: skip
    return [p for _, p in sorted(found)]


def rejudge(
    run_dir: str | Path,
    cells: Mapping[tuple, tuple[Any, Callable[[int], Sequence[int]]]],
    targets: Callable[[Any], Any],
    labels: Mapping[tuple[tuple, int], int],
    judgement: Judgement,
    *,
    name: str,
    settings: Mapping | None = None,
    progress: bool = True,
) -> dict:
    """
    Judge again, without attacking, the adversarial examples a run kept (:func:`keep`): each kept block of each cell
    (its ``keep`` name → ``(target, seeds)``) by :func:`judge` at ``judgement``, the R judgements' purifiers reseeded
    with ``seeds(first image of the block)`` -- the plan's own scheme, so that at the run's R and seed the run's own
    predictions come back, and a larger R only adds judgements after them. Only blocks the run recorded are judged
    (``labels``: ``(cell, index) → label``, from its records).

    The records (cell, index, label, the R predictions) go to ``RUN_DIR/<name>.jsonl`` block by block (a call
    resumes; the run's own records stay untouched), and per cell a summary -- ``accuracy`` (the worst of R), ``n``,
    ``ci95`` (Wilson), ``judgements`` (mean, worst, majority of R), the per-image ``images`` and ``flags``
    (:func:`~art_adp.runs.statistics.per_image`) -- to ``RUN_DIR/<name>.json`` with ``settings`` and the provenance;
    returned.

    :raises ValueError: If none of the cells has a block kept.
    """
    from tqdm.auto import tqdm

    from .provenance import provenance

    run_dir, started = Path(run_dir), time.monotonic()
    work = [(c, target, seeds, p) for c, (target, seeds) in cells.items() for p in kept(run_dir, c)]
    if not work:
        kept(run_dir, required=True)
        raise ValueError(f"{run_dir} holds no kept adversarial examples of the cells {list(cells)}.")
    path = run_dir / f"{name}.jsonl"
    done = {record_key(r, ("cell", "index")) for r in read_jsonl(path)}
    device = None
    for cell, target, seeds, file in tqdm(work, disable=not progress, unit="block", desc="rejudge"):
        with np.load(file) as f:
            x_adv, idx = f["images"], [int(i) for i in f["indices"]]
        if any((cell, i) not in labels for i in idx) or all((tuple(cell), i) in done for i in idx):
            continue  # not recorded by the run (killed before its records), or judged already
        estimator = targets(target)
        device, preds = estimator.device, judge(estimator, x_adv, judgement, seeds(idx[0]))
        append_records(path, [{"cell": list(cell), "index": i, "label": labels[cell, i], "pred": preds[:, j].tolist()}
                              for j, i in enumerate(idx)])  # fmt: skip
    by: dict[tuple, dict[int, dict]] = {}
    for r in read_jsonl(path):
        by.setdefault(tuple(r["cell"]), {})[r["index"]] = r
    out: dict[str, Any] = {"settings": dict(settings or {}), "cells": []}
    for cell, found in by.items():
        rows = [found[i] for i in sorted(found)]
        ok = np.array([correct(r) for r in rows], dtype=bool)
        out["cells"].append({"cell": list(cell), **summary(ok, rows),
                             **per_image(dict(zip(sorted(found), ok.tolist())))})  # fmt: skip
    out["provenance"] = provenance(wall_time_s=time.monotonic() - started, device=device)
    write_json(run_dir / f"{name}.json", out, indent=1, ensure_ascii=False)
    return out


def single_value(values: Iterable, what: str, run_dir: str | Path):
    """The one value of ``what`` the cells of a run folder share (a re-judgement's default).

    :raises ValueError: If the cells differ in it, naming their values.
    """
    found = sorted(set(values), key=repr)
    if len(found) != 1:
        raise ValueError(f"{run_dir}'s cells were judged at several {what} values {found}: give {what}.")
    return found[0]


def blocks(cell: Cell, pending: Sequence[int]) -> list[tuple[int, list[int]]]:
    """``pending`` cut into the cell's blocks by index, each with its number (one block when ``block_size`` is
    None)."""
    if cell.block_size is None:
        return [(0, list(pending))] if len(pending) else []
    parts: dict[int, list[int]] = {}
    for i in pending:
        parts.setdefault(int(i) // cell.block_size, []).append(int(i))
    return list(parts.items())


def run_cells(
    cells: Iterable[Cell],
    targets: Callable[[Any], Any],
    x: np.ndarray,
    y: np.ndarray,
    path: str | Path,
    *,
    done: Iterable[Mapping] | None = None,
    run_dir: str | Path | None = None,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    desc: str = "evaluate",
) -> dict[tuple, float]:
    """
    Run every block of ``cells`` not yet recorded, appending each block's records to ``path``: a block's image is done
    when a record of its key (:func:`record_identity`, ``(*cell.key, index)``) is on file (in ``path``, or among the
    records ``done`` when given: every rank's).

    :param targets: Target name → its estimator (built when a cell first needs it; the plan may cache).
    :param run_dir: Where kept examples go (``cell.keep``).
    :param shard: ``(rank, world)``: this process runs every world-th block (torchrun), all ranks the same list.
    :return: Seconds per cell key.
    """
    from tqdm.auto import tqdm

    path, cells = Path(path), list(cells)
    key = record_identity(cells)
    recorded = {key(r) for r in (read_jsonl(path) if done is None else done)}
    units = [(c, b, part) for c in cells for b, part in blocks(c, range(len(x) if c.images is None else c.images))]
    rank, world = shard
    mine = [(c, b, [i for i in part if (*c.key, i) not in recorded]) for c, b, part in units[rank::world]]
    mine = [u for u in mine if u[2]]
    seconds: dict[tuple, float] = {}
    bar = tqdm(total=sum(len(u[2]) for u in mine), disable=not progress or not mine, unit="image", desc=desc)
    for cell, b, part in mine:
        estimator = targets(cell.target)
        start = time.perf_counter()
        idx = np.asarray(part)
        outcome = run_block(cell, estimator, x[idx], y[idx], idx, b, run_dir=run_dir)
        if cell.keep is not None and run_dir is not None:
            keep(Path(run_dir), cell.keep, idx, outcome.x_adv)
        outcome.seconds = time.perf_counter() - start
        lines = records(cell, outcome)
        append_records(path, lines)
        if cell.label is not None:
            print(f"{cell.label} | {np.mean([correct(r) for r in lines]):6.1%} of {len(idx)}", flush=True)
        seconds[cell.key] = seconds.get(cell.key, 0.0) + outcome.seconds
        bar.update(len(idx))
    bar.close()
    return seconds


def run(
    cells: Sequence[Cell],
    targets: Callable[[Any], Any],
    x: np.ndarray,
    y: np.ndarray,
    run_dir: str | Path,
    *,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    desc: str = "evaluate",
) -> dict[tuple, float]:
    """
    The one path from a plan's cells to its run folder, every command's: the cells' settings guarded in the folder's
    settings file (:func:`guard`: rank 0 of a distributed run writes them, the others check, then all meet), then every
    block not yet recorded run (:func:`run_cells`) into this process's records file, the one layout
    (:func:`~art_adp.runs.records.records_path`: a folder of an earlier layout is refused, naming ``art-adp
    migrate``), its adversarial examples kept in ``RUN_DIR/examples/``. An image is done when any rank's records hold
    its record key, which the engine derives from the cells (:func:`record_identity`).

    :param shard: ``(rank, world)`` of a distributed run.
    :return: Seconds per cell key.
    """
    from . import distributed  # pylint: disable=import-outside-toplevel

    run_dir, (rank, world), done = Path(run_dir), shard, read_records(run_dir)
    guard(settings_path(run_dir), cells, write=rank == 0, records=done)
    if world > 1:
        distributed.barrier()
    return run_cells(cells, targets, x, y, records_path(run_dir, rank), done=done, run_dir=run_dir, shard=shard,
                     progress=progress, desc=desc)  # fmt: skip


def pending(cells: Sequence[Cell], n: int, run_dir: str | Path) -> dict[tuple, int]:
    """Per cell key, how many of the first ``n`` images (its ``images``, if fewer) have no record in ``run_dir``."""
    key = record_identity(cells)
    recorded = {key(r) for r in read_records(run_dir)}
    return {c.key: sum(1 for i in range(n if c.images is None else min(n, c.images)) if (*c.key, i) not in recorded)
            for c in cells}  # fmt: skip


def estimate(cells: Sequence[Cell], left: Mapping[tuple, int], probes: Callable[[Any], dict]) -> dict[tuple, float]:
    """The one cost estimate, every command's: the seconds of each priced cell on its ``left[key]`` images, its
    :attr:`Cell.price` at its target's probe ``probes(target)`` (:func:`probing`; a plan whose targets are one estimator
    gives its one probe). Cells not priced or with nothing left are left out."""
    return {c.key: left[c.key] * unit_seconds(c.price, probes(c.target)) for c in cells
            if c.price is not None and left.get(c.key)}  # fmt: skip


def probing(targets: Callable[[Any], Any], x: np.ndarray, batch_size: int = 50) -> Callable[[Any], dict]:
    """``target -> probe``: the :func:`probe` of the estimator ``targets(target)``, on up to 32 of ``x``, taken once
    per target."""
    return functools.cache(lambda target: probe(targets(target), x[: max(1, min(len(x), 32))], batch_size))


def flags(o: Outcome) -> list[dict]:
    """AutoAttack's two flags per input, on the block's inputs: ``random_output`` (the defended output differs between
    two calls) and ``zero_gradient`` (the loss gradient through the defence is exactly zero)."""
    estimator, seed = o.estimator, o.seeds.attack
    xt = torch.as_tensor(o.x, device=estimator.device)
    yt = torch.as_tensor(o.label, device=estimator.device)
    outs = []
    for r in range(2):
        reseed(estimator, derive_seed(seed, "flags", r))
        with torch.no_grad():
            outs.append(logits(estimator, xt).float())
    random = ((outs[0] - outs[1]).abs().flatten(1).amax(1) > 1e-6).cpu().numpy()
    reseed(estimator, derive_seed(seed, "flags", "gradient"))
    xg = xt.clone().requires_grad_(True)
    with torch.enable_grad():
        loss = torch.nn.functional.cross_entropy(logits(estimator, xg), yt, reduction="sum")
        g = torch.autograd.grad(loss, xg, allow_unused=True)[0] if loss.requires_grad else None
    zero = np.ones(len(xt), bool) if g is None else (g.flatten(1).abs().amax(1) == 0).cpu().numpy()
    return [{"random_output": bool(a), "zero_gradient": bool(b)} for a, b in zip(random, zero)]


def wall_s(o: Outcome) -> list[dict]:
    """The block's seconds per image (``wall_s``): the one field that differs between two runs of a block."""
    return [{"wall_s": round(o.seconds / len(o.index), 3)}] * len(o.index)


#: The extra fields a cell's records may carry (:attr:`Cell.extras`): name → ``(outcome) -> one dict per image``.
EXTRAS: dict[str, Callable[[Outcome], list[dict]]] = {"flags": flags, "wall_s": wall_s}


def records(cell: Cell, o: Outcome) -> list[dict]:
    """
    The one record layout: a line per image of a block -- the cell's :attr:`~Cell.fields`, then the image's
    ``index`` and ``label``, ``pred`` (the R judgements' predictions; none for a cell judged ``"none"``),
    ``undefended_pred`` (the bare classifier on the adversarial example), the perturbation's ``linf`` and ``l2``
    norms, and the cell's :attr:`~Cell.extras`. Nothing else: a block's records are the same whichever process runs
    it, whenever.
    """
    bare, linf, l2 = o.undefended(), o.linf(), o.l2()
    more = EXTRAS[cell.extras](o) if cell.extras is not None else [{}] * len(o.index)
    return [{**cell.fields, "index": int(i), "label": int(o.label[j]), "pred": [int(p) for p in o.preds[:, j]],
             "undefended_pred": int(bare[j]), "linf": round(float(linf[j]), 6), "l2": round(float(l2[j]), 6),
             **more[j]}
            for j, i in enumerate(o.index)]  # fmt: skip


def correct(record: Mapping) -> bool:
    """Whether a record's image was classified correctly in every judgement (the worst of R)."""
    return bool(record["pred"]) and all(p == record["label"] for p in record["pred"])


def run_block(cell: Cell, estimator, x: np.ndarray, y: np.ndarray, idx: np.ndarray, block: int, *,
              run_dir: str | Path | None = None) -> Outcome:  # fmt: skip
    """One block of ``cell``: attack (its noise seeded, or frozen for a fixed judgement), then judge."""
    seeds = cell.seeds(block, int(idx[0]))
    context: contextlib.AbstractContextManager
    if JUDGES[cell.judgement.kind].frozen:
        context = frozen_noise(estimator, seeds.noise)
    else:
        reseed(estimator, seeds.noise)
        context = contextlib.nullcontext()
    with context:
        x_adv = np.asarray(attack_of(cell.attack, run_dir)(estimator, x, y, idx, seeds), dtype=np.float32)
        preds = judge(estimator, x_adv, cell.judgement, seeds.judge)
    return Outcome(index=idx, label=np.asarray(y), x=x, x_adv=x_adv, preds=preds, seconds=0.0, estimator=estimator,
                   seeds=seeds)  # fmt: skip


def worst_case(correct: Mapping[str, Mapping[int, bool]]) -> tuple[list[int], np.ndarray] | None:
    """
    The per-image worst case over attacks: ``correct[attack][index]`` → the images every attack was measured on and,
    per image, whether every attack left it correct (an image counts as robust only if no attack broke it). None
    with fewer than two attacks or no shared image.
    """
    if len(correct) < 2:
        return None
    shared = sorted(set.intersection(*(set(v) for v in correct.values())))
    if not shared:
        return None
    return shared, np.array([all(v[i] for v in correct.values()) for i in shared])


#: Timings of the probe; it keeps the fastest.
PROBE_REPEATS = 3


def probe(estimator, x: np.ndarray, batch_size: int) -> dict:
    """Seconds per image of one defended forward pass (no gradient) and of one full-gradient forward+backward pass,
    timed on a batch of the real inputs, and the bytes of autograd graph per image of the latter. It draws nothing a
    run would: the purifiers' generators, any other preprocessor's own generator (a user's randomized defence) and
    torch's global RNG are left as they were."""
    generators = [(p, p.generator) for p in purifiers(estimator)]
    rewound = [(g, g.get_state()) for op in estimator.preprocessing_operations
               if isinstance(g := getattr(op, "generator", None), torch.Generator)]  # fmt: skip
    dev = estimator.device
    try:
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            return _timed(estimator, x, batch_size)
    finally:
        for p, generator in generators:
            p.set_params(generator=generator)
        for g, state in rewound:
            g.set_state(state)


#: Most rows the probe times a pass at on a CPU (a GPU: 1024): the attacks' blocks of draws, as the memory budget
#: sizes them, are of this order on a small score network; a pass timed at a few rows costs up to 6x more per row.
CPU_PROBE_ROWS = 128


def _timed(estimator, x: np.ndarray, batch_size: int) -> dict:
    """:func:`probe`'s timings (the estimator's noise drawn from seed 0), each pass at the rows a run's blocks hold:
    the forward pass at ``batch_size`` rows and the full-gradient pass at the rows one block of the memory budget
    holds (:class:`~art_adp.ensemble.RowBlocks`), both at most :data:`CPU_PROBE_ROWS` on a CPU."""
    from ..attacks._core import gradient_mode
    from ..ensemble import GraphMemory, RowBlocks

    dev = estimator.device
    cap = 1024 if dev.type == "cuda" else CPU_PROBE_ROWS

    def rows_of(n: int) -> torch.Tensor:
        return torch.as_tensor(np.resize(x, (n, *x.shape[1:])), dtype=torch.float32, device=dev)

    def full_pass(xg: torch.Tensor) -> int:
        """One full-gradient forward and backward pass; the bytes of graph it recorded."""
        with gradient_mode(estimator, "full"), torch.enable_grad():
            xg = xg.clone().requires_grad_(True)
            with GraphMemory() as graph:
                out = logits(estimator, xg)
            if out.requires_grad:
                out.sum().backward()
        return graph.nbytes

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    rows = min(batch_size, cap)
    xb = rows_of(rows)
    reseed(estimator, 0)
    with torch.no_grad():
        logits(estimator, xb[:8])  # warm-up, of the backward pass too (its first call allocates: 1.5-2x slower)
    blocks = RowBlocks(rows, batch_size=None, memory_budget=None, device=dev)  # the attacks' blocks, sized alike
    first = rows_of(blocks.rows)  # the first block, whose graph sizes the others
    blocks.record(len(first), full_pass(first))
    xf = rows_of(blocks.rows)
    sync()
    forward = full = float("inf")
    for _ in range(PROBE_REPEATS):  # the fastest of a few timings: a busy machine only ever slows one down
        t = time.perf_counter()
        with torch.no_grad():
            logits(estimator, xb)
        sync()
        forward = min(forward, (time.perf_counter() - t) / rows)
        t = time.perf_counter()
        nbytes = full_pass(xf)
        sync()
        full = min(full, (time.perf_counter() - t) / len(xf))
    return {"rows": rows, "full_rows": len(xf), "forward": forward, "full": max(full, forward),
            "graph_row_bytes": nbytes / len(xf)}  # fmt: skip


def unit_seconds(price: Price, probe: dict) -> float:
    """Estimated seconds per image of a cell's :class:`Price`: the registry's count of purification passes for its
    attack (none without one) and its forward and full-gradient passes, at the probe's cost of each."""
    f, b = probe["forward"], probe["full"]
    attack = REGISTRY[price.attack].cost(cast(Budget, price.budget), f, b) if price.attack else 0.0
    return attack + price.forward_passes * f + price.full_passes * b


def defended_estimator(classifier, defences=None, *, input_shape, nb_classes: int = 10, clip_values=(0.0, 1.0),
                       device: str = "cpu"):  # fmt: skip
    """ART's ``PyTorchClassifier`` of ``classifier`` (cross-entropy loss) behind ``defences`` (a preprocessor or a
    list; None: undefended), on ``device`` (``"cpu"``/``"cuda"``): the one way every plan builds its models."""
    if isinstance(defences, PreprocessorPyTorch):
        defences = [defences]
    return PyTorchClassifier(
        classifier.to(device), torch.nn.CrossEntropyLoss(), input_shape=tuple(input_shape),
        nb_classes=nb_classes, clip_values=clip_values, preprocessing_defences=list(defences) if defences else None,
        device_type="gpu" if str(device).startswith("cuda") else "cpu",
    )  # fmt: skip


def evaluate_robustness(
    classifier: torch.nn.Module, defences, x: np.ndarray, y: np.ndarray, *, eps: float,
    attacks: Sequence[str] | Mapping[str, Budget] | None = None, preset: str | None = None,
    eps_step: float | None = None, max_iter: int | None = None, eot_samples: int | None = None,
    ensemble_size: int | None = None, repeats: int | None = None, run_dir: str | Path = "runs/robustness",
    seed: int = 0, block_size: int = 50, nb_classes: int | None = None, device: str = "cpu", progress: bool = True,
    attack_precision: str = "fp32", force_precision: bool = False, seed_scheme: str | None = None,
) -> dict:  # fmt: skip
    """
    Accuracy of ``classifier`` behind ``defences`` (an :class:`~art_adp.ADPPurifier`, a list of ART PyTorch
    preprocessors, or None) under every attack of ``attacks``, and the per-image worst case over them: the engine's
    plan a user calls the way AutoAttack's users call ``run_standard_evaluation``.

    Clean images and each attack are judged on the S-run ensemble R times with fresh noise (an image counts as correct
    under an attack only if every judgement is: the worst of R); an image is robust only if every attack left it correct
    (the per-image worst case over the attacks, the clean row aside, as the lever tables count it). Blocks of
    ``block_size`` images are recorded in ``RUN_DIR/records/`` as they finish, their
    adversarial examples in ``RUN_DIR/examples/``; calling again with the same folder resumes (more attacks may be
    added), and a call whose data (the images and labels, all of them: other or more images need another folder),
    weights, defence, judging, seed scheme or an attack's budget differs from the folder's is refused, naming what
    differs.

    :param attacks: Names of the attack registry (:data:`~art_adp.attacks.registry.REGISTRY`), each at the shared
        budget of :data:`~art_adp.runs.plans.ENTRY_POINT` (ℓ∞ ``eps``, ``max_iter`` (100) steps of ``eps_step``
        (default ε/4) from a random start, ``eot_samples`` (8) EOT draws, the best iterate judged on S draws), or a
        mapping name → :class:`~art_adp.attacks.registry.Budget`; ``"autoattack"``
        (:data:`~art_adp.attacks.registry.AUTOATTACK`) is AutoAttack's standard version at ``eps`` (for a classifier
        without a randomized defence: an adversarially trained baseline, say). None:
        :data:`~art_adp.runs.plans.STANDARD`, or the preset's.
    :param preset: An evaluation plan of :data:`~art_adp.runs.plans.PLANS` (``"paper"``, ``"croce"``,
        ``"strongest"``, ``"smoke"``; what ``art-adp evaluate --preset`` runs): its attacks, each at the plan's budget
        at ``eps``, judged as it judges (S, R); ``attacks`` (names), ``max_iter``, ``eot_samples``, ``ensemble_size``
        and ``repeats`` given beside it extend it.
    :param ensemble_size, repeats: S and R (None: the preset's, or 10 and 10).
    :param attack_precision: The shared budget's gradient passes, ``"fp32"`` or ``"bf16"`` (judgements stay fp32;
        refused where the processor emulates bf16 unless ``force_precision``).
    :param seed_scheme: How a block's seeds come from ``seed`` (:data:`~art_adp.runs.seeds.SCHEMES`); None: the
        folder's own (:func:`folder_scheme`), ``"apart"`` for a new folder, recorded in its settings.
    :return: ``{"clean": summary, "attacks": {name: summary}, "worst_case": summary, "robust": bool per image,
        "run_dir": str}``; a summary (:func:`~art_adp.runs.statistics.summary`, the lever tables' cells' too) holds
        ``accuracy``, ``n``, ``ci95`` (Wilson) and, with R ≥ 2, ``judgements`` (mean, worst, majority, worst of 2;
        each its ``accuracy`` and ``ci95``).
    """
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"x must be N×C×H×W and y N labels, got shapes {x.shape} and {y.shape}.")
    from .._hardware import require_native

    budgets, ensemble_size, repeats = _budgets(attacks, preset, eps, eps_step, block_size, attack_precision,
                                               max_iter=max_iter, eot_samples=eot_samples,
                                               ensemble_size=ensemble_size, repeats=repeats)  # fmt: skip
    for b in budgets.values():
        require_native(b.precision, device, force=force_precision)
    classifier = classifier.to(device).eval()
    nb_classes = nb_classes or _classes(classifier, x[:1], device)
    estimator = defended_estimator(classifier, defences, input_shape=x.shape[1:], nb_classes=nb_classes, device=device)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    scheme = folder_scheme(settings_path(run_dir)) if seed_scheme is None else seed_scheme
    common = _common_settings(x, y, classifier, estimator, seed=seed, ensemble_size=ensemble_size, repeats=repeats,
                              block_size=block_size, scheme=scheme)  # fmt: skip
    judgement = Judgement("ensemble", ensemble_size, repeats, batch_size=max(block_size, 1))

    cells = [
        Cell((a,), ("attack",), "defended", Attacking(a, budgets.get(a)), judgement,
             seeds=SeedPlan(scheme, seed, (a,), repeats), fields={"attack": a},
             block_size=block_size, keep=None if a == "clean" else (a,),
             settings={**common, "budget": budget_settings(budgets[a]) if a in budgets else None})
        for a in ("clean", *budgets)
    ]  # fmt: skip
    run(cells, lambda _: estimator, x, y, run_dir, progress=progress, desc="robustness")
    return {**_result(read_records(run_dir), ("clean", *budgets), len(x)), "run_dir": str(run_dir)}


def rejudge_robustness(
    classifier: torch.nn.Module,
    defences,
    run_dir: str | Path,
    *,
    repeats: int | None = None,
    ensemble_size: int | None = None,
    seed: int | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """
    :func:`evaluate_robustness`'s run folder judged again without attacking (:func:`rejudge`): the adversarial examples
    it kept judged on R fresh S-run ensembles, seeded by the run's scheme (a :class:`~art_adp.runs.seeds.SeedPlan`)
    from ``seed``; each None: the run's own, which gives back its own predictions. ``classifier`` and ``defences``
    must be those the run measured: their SHA-256 and parameters are checked against the folder's ``settings.json``.

    :return: :func:`rejudge`'s summary, also in ``RUN_DIR/rejudged-S{S}-R{R}-seed{seed}.json`` beside its records.
    :raises ValueError: If the folder holds no kept examples, or was measured with another classifier or defence.
    """
    from .records import canonical, describe_differences, module_sha256

    run_dir = Path(run_dir)
    found = kept(run_dir, required=True)
    held = json.loads((run_dir / SETTINGS).read_text(encoding="utf-8"))
    attacks = [a for a in held if a != "clean"]
    classifier, sample = classifier.to(device).eval(), np.load(found[0])["images"][:1]
    estimator = defended_estimator(classifier, defences, input_shape=sample.shape[1:],
                                   nb_classes=_classes(classifier, sample, device), device=device)  # fmt: skip
    mine = canonical({"classifier_sha256": module_sha256(classifier),
                      "defences": [describe_defence(d) for d in estimator.preprocessing_defences or []]})  # fmt: skip
    theirs = {k: held[attacks[0]][k] for k in mine}
    if mine != theirs:
        raise ValueError(f"{run_dir} was measured with another classifier or defence: "
                         f"{describe_differences(theirs, mine)}.")  # fmt: skip

    def own(what: str):
        return single_value((held[a][what] for a in attacks), what, run_dir)

    r, s = repeats or own("repeats"), ensemble_size or own("ensemble_size")
    seed = own("seed") if seed is None else seed
    labels = {(record_key(x, ("attack",)), x["index"]): x["label"] for x in read_records(run_dir)}
    cells = {(a,): ("defended", lambda first, a=a: SeedPlan("shared", seed, (a,), r)(0, first).judge) for a in attacks}
    judgement = Judgement("ensemble", s, r, batch_size=max(own("block_size"), 1))
    return rejudge(run_dir, cells, lambda _: estimator, labels, judgement, name=f"rejudged-S{s}-R{r}-seed{seed}",
                   settings={"ensemble_size": s, "repeats": r, "seed": seed}, progress=progress)  # fmt: skip


def _result(records: list[dict], attacks: Sequence[str], n: int) -> dict:
    """Each attack's summary over the first ``n`` images, the per-image worst case over them and the robust flags."""
    by: dict[str, dict[int, dict]] = {}
    for r in records:
        if r["index"] < n:
            by.setdefault(r["attack"], {})[r["index"]] = r
    correct = {a: {i: all(p == r["label"] for p in r["pred"]) for i, r in by[a].items()} for a in attacks}
    attacked = [a for a in attacks if a != "clean"]
    robust = np.array([all(correct[a].get(i, False) for a in attacked) for i in range(n)])
    worst = worst_case({a: correct[a] for a in attacked})
    each = {a: summary(np.array(list(correct[a].values())), list(by[a].values())) for a in attacks}
    return {"clean": each["clean"], "attacks": {a: each[a] for a in attacks if a != "clean"},
            "worst_case": summary(worst[1] if worst else robust), "robust": robust}  # fmt: skip


def _classes(classifier: torch.nn.Module, sample: np.ndarray, device: str) -> int:
    """The classes of ``classifier``: the length of its output on ``sample``."""
    with torch.no_grad():
        return int(classifier(torch.as_tensor(sample, device=device)).shape[-1])


def _common_settings(x, y, classifier, estimator, *, seed: int, ensemble_size: int, repeats: int, block_size: int,
                     scheme: str) -> dict:  # fmt: skip
    """What every cell of the entry point depends on: the data's and weights' SHA-256, the defences, the judging and the
    seeds (the seed scheme only where it is not the ``"shared"`` one of the folders from before it)."""
    from .records import array_sha256, module_sha256

    check_scheme(scheme)
    return {"data_sha256": array_sha256(x, y), "classifier_sha256": module_sha256(classifier), "seed": seed,
            "defences": [describe_defence(d) for d in estimator.preprocessing_defences or []],
            "ensemble_size": ensemble_size, "repeats": repeats, "block_size": block_size,
            **({} if scheme == "shared" else {"seed_scheme": scheme})}  # fmt: skip


def folder_scheme(path: str | Path, legacy: str = "shared") -> str:
    """The seed scheme of the run folder whose cells' settings are kept in ``path`` (:func:`guard`'s file, or the
    evaluation's): the one its cells name, ``legacy`` where they name none (measured before the scheme was recorded:
    ``"shared"`` for an evaluation, ``"levers"`` for a levers folder), :data:`~art_adp.runs.seeds.SCHEME` for a new
    folder (values that are no cell's settings are ignored).

    :raises ValueError: If its cells name several."""
    path = Path(path)
    held = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    cells = [v for v in held.values() if isinstance(v, Mapping)]  # a caller's own keys may share the file
    if not cells:
        return SCHEME
    return single_value((v.get("seed_scheme", legacy) for v in cells), "seed_scheme", path.parent)


def _budgets(attacks, preset: str | None, eps: float, eps_step, block_size: int, precision: str,
             **given) -> tuple[dict[str, Budget], int, int]:  # fmt: skip
    """``(name → budget, S, R)``: the evaluation plan ``preset`` at ``eps`` (None:
    :data:`~art_adp.runs.plans.ENTRY_POINT`), extended by ``attacks`` (names; without a preset, budgets too) and the
    ``given`` counts, S and R that are not None."""
    if preset is not None and isinstance(attacks, Mapping):
        raise ValueError("attacks given as budgets and a preset: give one of them (names extend a preset).")
    base = ENTRY_POINT if preset is None else {**PAPER, **plan(preset, "evaluate").values}
    names = None if isinstance(attacks, Mapping) else attacks
    values = {**base, **{k: v for k, v in {**given, "attacks": names}.items() if v is not None}}
    shared = {"eps": eps, "eps_step": eps / 4 if eps_step is None else eps_step, "batch_size": block_size,
              "precision": precision,  # without a preset, every attack takes the counts alike (its own ones too)
              **({} if preset is not None else {k: values[k] for k in ("max_iter", "eot_samples")})}  # fmt: skip
    budgets = dict(attacks) if isinstance(attacks, Mapping) else {
        a: budget(a, values, **shared) if a in REGISTRY else None for a in values["attacks"]}  # fmt: skip
    unknown = sorted(set(budgets) - set(REGISTRY))
    if unknown:
        raise ValueError(f"Unknown attacks {unknown}; choose from {list(REGISTRY)}.")
    return cast(dict[str, Budget], budgets), values["ensemble_size"], values["repeats"]


def build_defence(description: Mapping[str, Any], model: torch.nn.Module, *, seed: int | None = None,
                  device: str = "cpu"):  # fmt: skip
    """
    The one purifier builder: the purifier ``description`` names -- ``{"type": "ADPPurifier" |
    "ReverseDiffusionPurifier" | "DenoisedSmoothingPurifier", **its parameters}``, :func:`describe_defence`'s form,
    the networks' SHA-256 left out -- on ``model`` (ADP's score model, the diffusion purifiers' denoiser), on
    ``device``, its noise drawn from a generator of its own seeded with ``seed`` (None: torch's global one).

    :raises ValueError: For another type, naming those it builds.
    """
    from ..diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
    from ..preprocessor import ADPPurifier

    types = {c.__name__: c for c in (ADPPurifier, ReverseDiffusionPurifier, DenoisedSmoothingPurifier)}
    kind = description.get("type", "ADPPurifier")
    if kind not in types:
        raise ValueError(f"A purifier description's type must be one of {list(types)}, got {kind!r}.")
    params = {k: v for k, v in description.items() if k != "type" and not k.endswith("_sha256")}
    if seed is not None:
        params["generator"] = torch.Generator(device).manual_seed(seed)
    return types[kind](model, **params, device_type="gpu" if str(device).startswith("cuda") else "cpu")


def describe_defence(d) -> dict:
    """What a defence's records depend on: its type and parameters, its networks by the SHA-256 of their weights."""
    from ..diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
    from ..preprocessor import PURIFY_PARAMS, ADPPurifier
    from .records import module_sha256

    if isinstance(d, ADPPurifier):
        out = {
            "type": "ADPPurifier",
            # clip_noise only where it is off: records from before the option (all clipped) keep their settings
            **{k: getattr(d, k) for k in PURIFY_PARAMS if k != "clip_noise" or not d.clip_noise},
            "gradient": d.gradient,
            "beta": d.beta,
            "clip_inputs": d.clip_inputs,
            "score_sha256": module_sha256(d.score_model),
        }
        if d.detector is not None:
            out["detector_threshold"] = getattr(d.detector, "threshold", None)
        return out
    if isinstance(d, (ReverseDiffusionPurifier, DenoisedSmoothingPurifier)):
        return {
            "type": type(d).__name__,
            **{k: getattr(d, k) for k in d.params if k != "generator"},
            "model_sha256": module_sha256(d.denoiser),
        }
    return {"type": type(d).__name__, **{k: getattr(d, k, None) for k in getattr(d, "params", [])}}


def guard(path: str | Path, cells: Iterable[Cell], *, write: bool = True, records: Iterable[Mapping] = ()) -> None:
    """
    A run folder's settings guard at its cells: each cell's :attr:`Cell.settings`, under the cell's key
    (``"main / clf-pgd"``), through :func:`~art_adp.runs.records.guard_settings` (the one writer of a settings file and
    the one refusal): a cell whose settings differ from those kept in ``path`` is refused, naming the settings that
    differ, before anything runs; the settings of new cells are added (``write``: False for the other ranks of a
    distributed run, which check only). A cell the file does not hold yet is checked against its ``records`` on file
    instead (a folder's records older than its settings file): a record of the cell's key that lacks a field of
    the cell's :attr:`Cell.fields`, or holds it at another value (another EOT budget, other attack options), is refused
    alike.

    :raises ValueError: ``RUN_DIR holds records for KEY made with other settings: budget.eps 0.1 (now 0.2)...``
    """
    keyed = {" / ".join(map(str, c.key)): c for c in cells}
    held = json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).is_file() else {}
    new = {c.key: label for label, c in keyed.items() if label not in held}
    key, differ = record_identity(keyed.values()), dict[str, dict]()
    for r in records if new else ():
        label = new.get(key(r)[:-1])
        fields = {} if label is None else {n: r[n] for n in keyed[label].fields if n in r}
        if label is not None and canonical(fields) != canonical(keyed[label].fields):
            differ.setdefault(label, fields)  # the cell's first record written otherwise
    guard_settings(path, {label: keyed[label].fields for label in differ}, write=False, held=differ)
    guard_settings(path, {label: c.settings for label, c in keyed.items() if c.settings is not None}, write=write)
