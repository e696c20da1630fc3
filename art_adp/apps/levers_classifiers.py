"""The classifiers and purifiers of a lever table: each :class:`~art_adp.apps.levers_presets.ClassifierRecipe` trained
(adversarially, or behind the purifier it names) or brought into the run folder, the facts of its training for the
table, and the purifier a defended cell measures."""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict
from pathlib import Path

import torch

from ..runs.engine import (
    build_defence,
)
from .levers_presets import Preset, Setting, setting_named
from .robust_baseline import train_until_plateau

__all__ = [
    "JUDGE_BATCH",
    "brought",
    "from_zoo",
    "measured_purifier",
    "model_clipped",
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


def _stand_in(name: str, preset: Preset, run_dir: Path) -> torch.nn.Module:
    """The classifier ``name`` if trained (or brought), else its untrained architecture: what a price needs (the
    same cost)."""
    path = run_dir / f"{name}.safetensors"
    if not preset.classifiers[name].epochs:
        return brought(name, run_dir)
    return _trained(path) if path.exists() else _architecture(name, preset).eval()


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
    return facts


def measured_purifier(model: str, setting: Setting, x_train, denoiser=None, *, seed: int, device: str = "cpu"):
    """The purifier a defended cell measures: :class:`~art_adp.ADPPurifier` at ``setting`` on the ``model`` score
    (``"oracle"``: the exact score over ``x_train``; ``"denoiser"``: the trained DenoiserUNet), BPDA, seeded."""
    own = setting.purifier_kwargs(model_clipped(model, denoiser))
    description = {"gradient": "bpda", "batch_size": JUDGE_BATCH, **own}
    return build_defence(description, _score_model(model, setting.sigma, x_train, denoiser, device), seed=seed,
                         device=device)  # fmt: skip
