"""The classifiers and purifiers of a lever table: each :class:`~art_adp.apps.levers_presets.ClassifierRecipe` trained
(adversarially, or behind the purifier it names) by the training stage (:func:`train_levers_classifiers`) or brought
into the run folder, read back for the measurement (:func:`~art_adp.apps.levers.run_levers`, which never trains), the
facts of its training for the table, and the purifier a defended cell measures."""

from __future__ import annotations

import copy
import inspect
import json
import shlex
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, field, make_dataclass
from pathlib import Path
from typing import Any

import torch

from ..runs.engine import (
    build_defence,
)
from .._hardware import require_native
from .levers_presets import Preset, Setting, levers_spec, preset_for, setting_named
from .robust_baseline import train_until_plateau

__all__ = [
    "JUDGE_BATCH",
    "LeversTraining",
    "NOT_SETTINGS",
    "brought",
    "chosen_classifiers",
    "from_zoo",
    "measured_purifier",
    "model_clipped",
    "refuse_untrained",
    "settings_of",
    "train_levers_classifiers",
    "train_levers_command",
    "training_purifier",
]

#: Images per batch of the S-run ensemble's judgements.
JUDGE_BATCH = 500


def _classes(model) -> int:
    """The classes of one of this package's classifiers (its ``config``), else ten."""
    return getattr(model, "config", {}).get("nb_classes", 10)


def _score_model(kind: str, level: float, x_train, denoiser, device: str = "cpu"):
    from ..score import EDMScore, KernelScore

    if kind == "oracle":
        return KernelScore(x_train, bandwidth=level, chunk_size=2000).to(device)
    return EDMScore(denoiser, sigma=level, data_range=(0.0, 1.0))


def model_clipped(kind: str, denoiser=None) -> bool:
    """Whether the score model ``kind`` was trained on clipped noisy inputs: the exact score (``"oracle"``) is that of
    unclipped Gaussian noise; a DenoiserUNet says so in its checkpoint (``train-denoiser --clip-noise``)."""
    return kind != "oracle" and bool(getattr(denoiser, "training_info", {}).get("clip_noise", False))


def training_purifier(model: str, setting: Setting, x_train, denoiser=None, *, adversarial: bool, eps: float,
                      device: str = "cpu"):  # fmt: skip
    """
    The purifier a classifier trains behind (:class:`~art_adp.ADPPurifier` at ``setting``, ART's ``apply_fit`` on, its
    own generator, which the training seeds): the ``model`` score at the setting's σ -- ``"oracle"``, the exact score
    over ``x_train``, each training image purified with itself left out (within ``eps`` of an adversarial example's
    input), as the oracle purifies unseen images; ``"denoiser"``, the trained DenoiserUNet -- with the full gradient
    for adversarial training through it (PGD on the composed model, one draw per step).
    """
    if model == "denoiser" and denoiser is None:
        raise ValueError("training behind the denoiser needs a train-denoiser checkpoint: give --denoiser PATH.")
    leave_out = (eps if adversarial else 0.0) if model == "oracle" else None
    description = {"gradient": "full" if adversarial else "bpda", "batch_size": 500, "leave_out": leave_out,
                   "apply_fit": True, **setting.purifier_kwargs(model_clipped(model, denoiser))}  # fmt: skip
    return build_defence(description, _score_model(model, setting.sigma, x_train, denoiser, device), seed=0,
                         device=device)  # fmt: skip


def chosen_classifiers(preset: Preset, classifiers: Sequence[str] | None = None,
                       purified: Sequence[str] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:  # fmt: skip
    """The undefended ``classifiers`` a lever table measures (None: the preset's baselines) and those it puts ADP in
    front of (``purified``; None: the preset's classifier).

    :raises ValueError: Naming the classifiers the preset does not have."""
    classifiers = preset.baselines if classifiers is None else tuple(classifiers)
    purified = (preset.classifier,) if purified is None else tuple(purified)
    bad = sorted((set(classifiers) | set(purified)) - set(preset.classifiers))
    if bad:
        raise ValueError(f"Unknown classifiers {bad}; choose from {list(preset.classifiers)}.")
    return classifiers, purified


def train_levers_classifiers(
    data,
    run_dir: str | Path,
    *,
    dataset: str = "mnist",
    classifiers: Sequence[str] | None = None,
    purified: Sequence[str] | None = None,
    denoiser_path: str | Path | None = None,
    eps: float | None = None,
    arch: str | None = None,
    sigmas: Sequence[float] | None = None,
    max_epochs: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
    train_precision: str = "fp32",
    force_precision: bool = False,
) -> None:
    """
    The training stage of a lever table: train every classifier of ``classifiers`` and ``purified`` (the selection of
    :func:`~art_adp.apps.levers.run_levers`, the same defaults) that the preset trains and the run folder does not hold
    yet (``RUN_DIR/NAME.safetensors``), each on the training split of ``data`` by its recipe, and keep it there, where
    :func:`~art_adp.apps.levers.run_levers` reads it (it never trains). Resumable: an interrupted training resumes from
    its last epoch (:func:`~art_adp.apps.robust_baseline.train_until_plateau`'s ``.last`` checkpoint); a classifier the
    folder holds, and a brought one (a recipe of 0 epochs, :func:`brought`), are left as they are.
    ``art-adp train-levers`` runs it (:func:`train_levers_command`); ``art-adp levers`` only measures.

    :param data: A :class:`~art_adp.data.Dataset` of images (its training split is used).
    :param run_dir: The run folder.
    :param dataset: The data set, a key of :data:`~art_adp.data.DATASETS` that names a preset.
    :param classifiers, purified: The classifiers to train, as :func:`~art_adp.apps.levers.run_levers` names those it
        measures (None: the preset's baselines; the preset's classifier).
    :param denoiser_path: The :class:`~art_adp.DenoiserUNet` checkpoint (or zoo name), for a classifier trained behind
        the denoiser.
    :param eps, arch, sigmas, max_epochs: The overrides of the preset that change a training
        (:func:`~art_adp.apps.levers_presets.preset_for`): the radius, the purified classifier's architecture, the σ
        grid (the setting a classifier is trained behind), the cap on the epochs.
    :param seed: Seed of every training (its split, starts and batch order).
    :param device: Where the classifiers train.
    :param progress: Print one line per epoch.
    :param train_precision: The training passes (``precision`` of
        :func:`~art_adp.apps.robust_baseline.train_until_plateau`): ``"fp32"``, or ``"bf16"``, refused on a processor
        without native bf16 (unless ``force_precision``).
    """
    from ..pretrained import bundled_file
    from ..score import load_score_model

    preset = preset_for(dataset, eps=eps, arch=arch, sigmas=sigmas, max_epochs=max_epochs)
    require_native(train_precision, device, force=force_precision)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    todo = [k for k in dict.fromkeys(sum(chosen_classifiers(preset, classifiers, purified), ()))
            if _untrained(k, preset, run_dir)]  # fmt: skip
    denoiser = None
    if denoiser_path is not None and any((preset.classifiers[k].purifier or ("",))[0] == "denoiser" for k in todo):
        denoiser = load_score_model(bundled_file(denoiser_path, "score"), device)
    for k in todo:
        _classifier(k, preset, data, run_dir, seed, progress, denoiser, device, train_precision)


def refuse_untrained(names: Iterable[str], preset: Preset, run_dir: Path, **training) -> None:
    """
    Refuse to measure the classifiers of ``names`` that the preset trains and the run folder ``run_dir`` does not
    hold yet: the measurement never trains.

    :param training: The keywords of :func:`train_levers_classifiers` of the call (dataset, overrides, seed, ...),
        shown in the call that trains them where they differ from its defaults.
    :raises ValueError: Naming them and the call that trains them.
    """
    missing = [k for k in names if _untrained(k, preset, run_dir)]
    if not missing:
        return
    defaults = {k: p.default for k, p in inspect.signature(train_levers_classifiers).parameters.items()}
    given = {"dataset": training.pop("dataset", defaults["dataset"]), "classifiers": tuple(missing), "purified": (),
             **{k: str(v) if isinstance(v, Path) else v for k, v in training.items() if v != defaults[k]}}  # fmt: skip
    call = ", ".join(["data", repr(str(run_dir)), *(f"{k}={v!r}" for k, v in given.items())])
    files = ", ".join(f"{k}.safetensors" for k in missing)
    shipped = _shipped(given["dataset"], missing)
    raise ValueError(
        f"The classifiers {missing} are not trained in {run_dir} (no {files}), and measuring never trains. Train "
        f"them first (resumably): `{training_line(run_dir, given)}` (DIR the data set's folder); in Python: "
        f"art_adp.apps.levers_classifiers.train_levers_classifiers({call}), data the data set given here."
        + (f" The zoo ships {shipped}: --zoo measures its weights instead." if shipped else "")
    )


def _shipped(dataset: str, names: Sequence[str]) -> list[str]:
    """The entries ``DATASET/NAME`` of ``names`` whose weights the model zoo ships (none where there is no zoo)."""
    from .. import zoo

    try:
        entries = zoo.manifest()["entries"]
    except zoo.ZooError:
        return []
    return [f"{dataset}/{k}" for k in names if (entries.get(f"{dataset}/{k}") or {}).get("file")]


def training_line(run_dir: Path, given: dict) -> str:
    """The ``art-adp train-levers`` command line that trains into ``run_dir`` with the keywords ``given`` of
    :func:`train_levers_classifiers` (the data set's folder left as ``DIR``)."""
    flags = {"denoiser_path": "denoiser"}
    words = ["art-adp", "train-levers", "--dataset", given["dataset"], "--data-root", "DIR", "--run-dir", str(run_dir)]
    for k, v in given.items():
        if k == "dataset":
            continue
        words.append("--" + flags.get(k, k).replace("_", "-"))
        words += [str(a) for a in v] if isinstance(v, (tuple, list)) else [str(v)]
    return " ".join(shlex.quote(w) for w in words)


def _untrained(name: str, preset: Preset, run_dir: Path) -> bool:
    """Whether the preset trains the classifier ``name`` (not brought) and the folder does not hold it yet."""
    return bool(preset.classifiers[name].epochs) and not (run_dir / f"{name}.safetensors").exists()


def _classifier(name: str, preset: Preset, data, run_dir: Path, seed: int, progress: bool, denoiser=None,
                device: str = "cpu", precision: str = "fp32"):  # fmt: skip
    """The preset's classifier ``name``, trained once on the training split and kept (``NAME.safetensors``); one
    trained behind a purifier comes back with it recorded (``trained_behind``)."""
    from .. import models

    path = run_dir / f"{name}.safetensors"
    recipe = preset.classifiers[name]
    if not recipe.epochs:
        return brought(name, run_dir)
    if path.exists() and not recipe.patience:
        return _trained(path)
    torch.manual_seed(seed)
    model = _architecture(name, preset) if recipe.init is None else copy.deepcopy(brought(recipe.init, run_dir))
    if recipe.purifier:
        kind, setting = recipe.purifier[0], setting_named(recipe.purifier[1], preset.sigmas)
        mode = "adversarial" if recipe.adversarial else "plain"
        purifier = training_purifier(kind, setting, data.x_train, denoiser, adversarial=recipe.adversarial,
                                     eps=preset.eps, device=device)  # fmt: skip
        names = {"model": kind, "setting": setting.name, "mode": mode}
        return train_until_plateau(model, data.x_train, data.y_train, path, eps=preset.eps, max_iter=recipe.max_iter,
                                   patience=recipe.patience or 5, max_epochs=recipe.epochs,
                                   batch_size=recipe.batch_size, seed=seed, progress=progress, device=device,
                                   purifier=purifier, adversarial=recipe.adversarial, lr=recipe.lr,
                                   val_fraction=recipe.validation, purifier_names=names, method=recipe.method,
                                   precision=precision)[0]  # fmt: skip
    if recipe.patience:
        return train_until_plateau(model, data.x_train, data.y_train, path, eps=preset.eps, max_iter=recipe.max_iter,
                                   patience=recipe.patience, max_epochs=recipe.epochs, batch_size=recipe.batch_size,
                                   seed=seed, progress=progress, device=device, method=recipe.method,
                                   lr=recipe.lr, val_fraction=recipe.validation, precision=precision)[0]  # fmt: skip
    if recipe.adversarial:
        models.train_adversarial_classifier(model, data.x_train, data.y_train, eps=preset.eps, max_iter=recipe.max_iter,
                                            epochs=recipe.epochs, seed=seed, verbose=progress)  # fmt: skip
    else:
        models.train_classifier(model, data.x_train, data.y_train, epochs=recipe.epochs, batch_size=recipe.batch_size,
                                lr=1e-3, seed=seed, progress=progress)  # fmt: skip
    models.save_classifier(model, path)
    return model.eval()


def brought(name: str, run_dir: Path) -> torch.nn.Module:
    """A classifier a preset does not train but is given (a recipe of 0 epochs, e.g. a published one): the run
    folder's ``NAME.safetensors`` (:func:`~art_adp.models.save_classifier`) or ``NAME.pt`` (TorchScript), read as
    ``--classifier`` reads them (:func:`~art_adp.apps.loading.load_classifier_arg`; never unpickled)."""
    from .loading import load_classifier_arg

    found = [run_dir / f"{name}{ext}" for ext in (".safetensors", ".pt") if (run_dir / f"{name}{ext}").exists()]
    if not found:
        raise FileNotFoundError(
            f"The classifier {name!r} is not trained here: put it in {run_dir} as {name}.safetensors "
            f"(art_adp.models.save_classifier) or {name}.pt (TorchScript); examples/cifar10_classifiers.py makes both "
            "published CIFAR-10 classifiers so (docs/cifar10.md)."
        )
    return load_classifier_arg(str(found[0]))[0].eval()


def from_zoo(name: str, run_dir: Path, as_name: str | None = None) -> Path:
    """
    Put the zoo's classifier ``name`` (``"cifar10/adv-resnet20"``; :func:`art_adp.zoo.zoo_file`, checked against the
    manifest) into the run folder under its own name or ``as_name`` (``adv-resnet20.safetensors``, or ``.pt`` for
    TorchScript), where the lever table finds it trained; a folder already holding it is left as it is.

    :raises ValueError: When the folder holds other weights under that name (it measured another model).
    """
    import shutil

    from ..zoo import weights_of, zoo_file

    source = zoo_file(name)
    target = Path(run_dir) / f"{as_name or name.rpartition('/')[2]}{source.suffix}"
    if target.exists():
        if (theirs := weights_of(target)) != (ours := weights_of(source)):
            raise ValueError(f"{target} holds other weights (SHA-256 {theirs}) than zoo:{name} ({ours}): measure the "
                             "zoo's weights in a new run folder.")  # fmt: skip
        return target
    shutil.copyfile(source, target)
    return target


def _held(name: str, preset: Preset, run_dir: Path) -> torch.nn.Module:
    """The classifier ``name`` as the run folder holds it, trained or brought (what a measurement reads), else its
    untrained architecture: the stand-in a price needs (the same cost)."""
    if not preset.classifiers[name].epochs:
        return brought(name, run_dir)
    if _untrained(name, preset, run_dir):
        return _architecture(name, preset).eval()
    return _trained(run_dir / f"{name}.safetensors")


def _trained(path: Path) -> torch.nn.Module:
    """A classifier the folder trained, read back: one trained behind a purifier is checked against the purifier where
    a cell puts it (behind its own, or undefended: :func:`~art_adp.models.checkpoint.check_purifier` warns), not on
    reading."""
    from .. import models

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* was trained behind ", category=UserWarning)
        return models.load_classifier(path).eval()


def _architecture(name: str, preset: Preset) -> torch.nn.Module:
    """The untrained architecture of the preset's classifier ``name`` (the preset's image shape, ten classes)."""
    from .. import models
    from .commands import CLASSIFIERS

    channels, side, _ = preset.image_shape
    architecture = getattr(models, CLASSIFIERS[preset.classifiers[name].arch])
    return architecture(in_channels=channels, image_size=side, nb_classes=10)


def _training_facts(name: str, preset: Preset, run_dir: Path) -> dict:
    from ..serialization import read_checkpoint

    facts = {**asdict(preset.classifiers[name])}
    if not (run_dir / f"{name}.safetensors").exists():  # brought as TorchScript: nothing recorded in it
        return {**facts, "brought": f"{name}.pt (TorchScript)"}
    header = read_checkpoint(run_dir / f"{name}.safetensors")[1]
    for key in ("adversarial_training", "training", "purifier"):
        if key in header:
            facts[key] = header[key]
    if name in (trainings := _trainings(run_dir)):  # trained by art-adp train-levers: its call
        facts["trained_by"] = trainings[name]
    return facts


def measured_purifier(model: str, setting: Setting, x_train, denoiser=None, *, seed: int, device: str = "cpu"):
    """The purifier a defended cell measures: :class:`~art_adp.ADPPurifier` at ``setting`` on the ``model`` score
    (``"oracle"``: the exact score over ``x_train``; ``"denoiser"``: the trained DenoiserUNet), BPDA, seeded."""
    own = setting.purifier_kwargs(model_clipped(model, denoiser))
    description = {"gradient": "bpda", "batch_size": JUDGE_BATCH, **own}
    return build_defence(description, _score_model(model, setting.sigma, x_train, denoiser, device), seed=seed,
                         device=device)  # fmt: skip


#: The keywords of a lever table's stages (:func:`train_levers_classifiers`, :func:`~art_adp.apps.levers.run_levers`)
#: that are not settings of their commands (``art-adp train-levers``, ``art-adp levers``): the data, folder, denoiser,
#: device and output.
NOT_SETTINGS = ("data", "run_dir", "dataset", "denoiser_path", "device", "progress")


def settings_of(stage, name: str, doc: str) -> type:
    """The settings class ``name`` of a stage's command: every keyword of the function ``stage`` but
    :data:`NOT_SETTINGS`, with its annotation and default, read from its signature (one place for each default, the
    flags' included)."""
    keywords = inspect.signature(stage).parameters
    cls = make_dataclass(name, [(n, p.annotation, field(default=p.default)) for n, p in keywords.items()
                                if n not in NOT_SETTINGS], frozen=True)  # fmt: skip
    cls.__module__, cls.__doc__ = stage.__module__, doc
    return cls


LeversTraining = settings_of(train_levers_classifiers, "LeversTraining", "Settings of ``art-adp train-levers``.")


def train_levers_command(
    config: Any,
    *,
    dataset: str = "mnist",
    data_root: str = "",
    denoiser: str | None = None,
    run_dir: str = "runs/levers",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """Train the classifiers of a lever table that its run folder does not hold yet, each by its recipe in the data
    set's preset (adversarially to its plateau, or behind the purifier it names: --denoiser for one behind the
    DenoiserUNet), resumably, into RUN_DIR/NAME.safetensors, where `art-adp levers` reads them (it never trains).
    --classifiers and --purified select them as `art-adp levers` does (default: the preset's)."""
    import time

    from ..data import load_dataset
    from ..runs.provenance import code_diff, code_version, provenance
    from ..runs.records import write_json

    levers_spec(dataset)  # a data set without a preset is refused before anything is read
    started, code = time.monotonic(), code_version()  # the code this training loads now
    diff = code_diff() if code.endswith("-dirty)") else None
    folder = Path(run_dir)
    held = {p.stem for p in folder.glob("*.safetensors")}
    train_levers_classifiers(load_dataset(dataset, data_root), run_dir, dataset=dataset, denoiser_path=denoiser,
                             device=device or "cpu", progress=progress, **asdict(config))  # fmt: skip
    trained = {p.stem: p for p in sorted(folder.glob("*.safetensors")) if p.stem not in held and "." not in p.stem}
    if trained:  # each classifier's training call, as a table records its measuring calls (TRAINED)
        record = provenance(wall_time_s=time.monotonic() - started, device=device or "cpu", models=trained,
                            started_at=code, started_diff=diff)  # fmt: skip
        write_json(folder / TRAINED, {**_trainings(folder), **{k: record for k in trained}}, indent=1)


#: The run folder's record of the ``art-adp train-levers`` call that trained each classifier there (its provenance:
#: command, code, device, wall time, the weights' SHA-256), which the lever table's training facts carry.
TRAINED = "trained.json"


def _trainings(run_dir: Path) -> dict:
    """The folder's :data:`TRAINED` record: classifier → the provenance of the call that trained it."""
    path = Path(run_dir) / TRAINED
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
