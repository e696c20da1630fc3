"""``art-adp rejudge``: a lever table's run folder judged again without attacking. The adversarial examples the run
kept (``RUN_DIR/examples/``) go through the defended models it measured, rebuilt from the folder, on R fresh S-run
ensembles: a new judgement, a larger R or another seed costs forward passes only (:func:`~art_adp.runs.engine.rejudge`).

What rebuilds a defended model: its classifier, the folder's ``NAME.safetensors`` (or ``NAME.pt``), checked against
the SHA-256 the table's provenance recorded; its purification, the setting its cell recorded (``settings.json``, or
an earlier layout's ``cells.json``); its
score model, the exact score over the data set's training split (``oracle``) or the trained DenoiserUNet
(``denoiser``), found where the run's command line read it (``--data-root``, ``--denoiser``) or where given, and
checked against the test images' and the weights' SHA-256 the run recorded.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..runs.engine import Judgement, defended_estimator, kept, rejudge, single_value
from ..runs.records import SETTINGS, array_sha256, held_settings, module_sha256, read_records, record_key
from ..runs.records import weights_sha256
from . import levers
from .levers_classifiers import JUDGE_BATCH, brought, measured_purifier
from .levers_presets import Setting
from .levers_table import LEVERS_KEY

__all__ = ["HELP", "Rejudge", "rejudge_command", "rejudge_levers"]

#: The command's one-line help.
HELP = "judge a levers run's kept adversarial examples again on fresh ensembles, not attacking"


@dataclass(frozen=True)
class Rejudge:
    """Settings of ``art-adp rejudge``: R, S and the seed of the judgements (None: the run's own)."""

    repeats: int | None = None
    ensemble_size: int | None = None
    seed: int | None = None


def _flag(command: str, flag: str) -> list[str]:
    """The values given to ``flag`` in a recorded command line."""
    words = shlex.split(command)
    given = [w.split("=", 1)[1] for w in words if w.startswith(flag + "=")]
    return [b for a, b in zip(words, words[1:]) if a == flag] + given


def _denoiser(run_dir: Path, calls: list[dict], given, device: str):
    """The DenoiserUNet the run measured: ``given``, else the ``--denoiser`` of its commands, checked by SHA-256."""
    from ..score import load_score_model

    sha = next((c["models"]["denoiser"] for c in reversed(calls) if "denoiser" in c.get("models", {})), None)
    paths = [given] if given else [p for c in reversed(calls) for p in _flag(c["command"], "--denoiser")]
    for path in paths:
        if Path(path).is_file() and weights_sha256(path) == sha:
            return load_score_model(path, device)
    raise ValueError(
        f"{run_dir}'s cells purify with a trained denoiser (weights' SHA-256 {sha}), not found at "
        f"{paths or 'a path its table records'}: give that train-denoiser checkpoint (--denoiser PATH)."
    )


def _training_split(run_dir: Path, table: dict, calls: list[dict], n: int, data, data_root):
    """The training split of the run's data set (the exact score's), its test images checked against the run's."""
    from ..data import load_dataset

    roots = [data_root] if data_root else [p for c in reversed(calls) for p in _flag(c["command"], "--data-root")]
    if data is None and not roots:
        raise ValueError(
            f"{run_dir}'s oracle cells take the exact score over {table['dataset']}'s training split, and "
            "its table records no folder of it: give the data set's folder (--data-root DIR)."
        )
    data = load_dataset(table["dataset"], roots[0]) if data is None else data
    if array_sha256(data.x_test[:n], data.y_test[:n]) not in {c.get("data_sha256") for c in calls}:
        raise ValueError(
            f"The data set given is not the one {run_dir} measured: its first {n} test images' SHA-256 "
            "differs from the table's provenance."
        )
    return data.x_train


def rejudge_levers(run_dir, *, repeats: int | None = None, ensemble_size: int | None = None, seed: int | None = None,
                   data=None, data_root: str | None = None, denoiser: str | None = None, device: str | None = None,
                   progress: bool = True) -> dict:  # fmt: skip
    """
    Judge again the adversarial examples an ``art-adp levers`` run kept, on R fresh S-run ensembles with the run's
    seed scheme from ``seed`` (each None: the run's own, which gives back the run's own predictions; a larger R adds
    judgements after the run's, so its worst of R can only be lower). Records and summary:
    ``RUN_DIR/rejudged-S{S}-R{R}-seed{seed}.jsonl`` / ``.json`` (:func:`~art_adp.runs.engine.rejudge`).

    :param data: The run's :class:`~art_adp.data.Dataset` (the exact score's training split); None: read from
        ``data_root``, else the folder its command line read.
    :param denoiser: The run's train-denoiser checkpoint; None: the one its command line read.
    :param device: Where to judge (None: the run's device, where the same seeds draw the same noise).
    :raises ValueError: If the folder holds no kept examples, or lacks what rebuilds its defended models (naming it).
    """
    run_dir = Path(run_dir)
    kept(run_dir, required=True)
    settings, records = held_settings(run_dir), read_records(run_dir)
    missing = [f for f, held in (("records", records), (SETTINGS, settings),
                                 ("table.json", (run_dir / "table.json").is_file())) if not held]  # fmt: skip
    if missing:
        raise ValueError(
            f"{run_dir} lacks {', '.join(missing)}: a levers run's records, its cells' settings and its "
            "table (classifiers, denoiser, data set) rebuild the defended models it measured."
        )
    assert settings is not None  # refused above otherwise
    table, held = (json.loads(f.read_text(encoding="utf-8")) for f in (run_dir / "table.json", settings))
    calls, base = [*table["provenance"].get("calls", []), table["provenance"]], table["classifier"]
    labels, cells = {}, {}
    for r in records:
        key = record_key(r, LEVERS_KEY[:4], {"classifier": base})
        if r["model"] != "none" and r.get("judge", "ensemble") == "ensemble" and kept(run_dir, key):
            name = " / ".join((*key, "ensemble"))
            if name not in held:
                raise ValueError(f"{settings} holds no settings of {name} (measured before cells were "
                                 "recorded): its purification cannot be rebuilt.")  # fmt: skip
            labels[key, r["index"]], cells[key] = r["label"], held[name]
    if not cells:
        raise ValueError(f"{run_dir}'s records name no defended cell whose examples are kept.")

    def own(what: str):
        return single_value((c["judgement"][what] for c in cells.values()), what, run_dir)

    r_, s_ = repeats or own("repeats"), ensemble_size or own("ensemble_size")
    seed = single_value((c["seed"] for c in cells.values()), "seed", run_dir) if seed is None else seed
    models = {k[1] for k in cells}
    device = device or ("cpu" if calls[-1]["device"].startswith("CPU") else "cuda")
    score = _denoiser(run_dir, calls, denoiser, device) if "denoiser" in models else None
    n = max(i for _, i in labels) + 1
    x_train = _training_split(run_dir, table, calls, n, data, data_root) if "oracle" in models else None
    weights = {k: v for c in calls for k, v in c.get("models", {}).items()}
    shape = np.load(kept(run_dir)[0])["images"].shape[1:]
    built: dict = {}

    def build(target: tuple):
        """The defended model of ``(classifier, score model, setting)`` (the last one built kept: its rows follow)."""
        if target not in built:
            built.clear()
            clf = brought(target[0], run_dir)
            if module_sha256(clf) != weights.get(target[0]):
                raise ValueError(f"{run_dir}/{target[0]} is not the classifier the run measured (SHA-256 "
                                 f"{weights.get(target[0])}).")  # fmt: skip
            # the setting as its cells recorded it: clip_noise False where its noisy input is not clipped
            record = next(c for k, c in cells.items() if k[:3] == target)["purifier"]
            setting = Setting(**{**record, "clip_noise": record.get("clip_noise", True)})
            purifier = measured_purifier(target[1], setting, x_train, score, seed=seed, device=device)
            classes = getattr(clf, "config", {}).get("nb_classes", 10)
            built[target] = defended_estimator(clf, purifier, input_shape=shape, nb_classes=classes, device=device)
        return built[target]

    def seeds(k: tuple):
        """The judgements' seeds of cell ``k``'s block from image ``first`` on, by the folder's scheme."""
        plan = levers.judge_seeds(cells[k].get("seed_scheme", "levers"), seed, (*k, "ensemble"), r_)
        return lambda first: plan(first // levers.BLOCK, first).judge

    judgement = Judgement("ensemble", s_, r_, batch_size=JUDGE_BATCH)
    return rejudge(run_dir, {k: (k[:3], seeds(k)) for k in cells}, build, labels, judgement,
                   name=f"rejudged-S{s_}-R{r_}-seed{seed}", settings={"ensemble_size": s_, "repeats": r_, "seed": seed},
                   progress=progress)  # fmt: skip


def rejudge_command(config: Rejudge, *, run_dir: str, data_root: str | None = None, denoiser: str | None = None,
                    device: str | None = None, progress: bool = True) -> None:  # fmt: skip
    """Judge again the adversarial examples an art-adp levers run kept (RUN_DIR/examples), without attacking: on R
    fresh S-run ensembles of the defended models it measured, rebuilt from the folder (its classifiers, the settings
    of its cells, its score models as its command line read them), with the run's seed scheme. At the run's own R,
    S and seed (the defaults) the run's own predictions come back; a larger R or another seed costs forward passes
    only. Writes RUN_DIR/rejudged-S{S}-R{R}-seed{seed}.jsonl (one record per image) and .json (per cell: accuracy,
    the worst of R, with its Wilson interval, the mean and majority of R, per-image flags)."""
    out = rejudge_levers(run_dir, **asdict(config), data_root=data_root, denoiser=denoiser, device=device,
                         progress=progress)  # fmt: skip
    for c in out["cells"]:
        lo, hi = c["ci95"]
        print(f"{' | '.join(c['cell'])}: {c['accuracy']:.1%} of {c['n']} [{lo:.1%}, {hi:.1%}]")
