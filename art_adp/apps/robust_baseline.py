"""The baseline a user would pick instead of ADP: PGD adversarial training (Madry et al.) of the same classifier,
trained as well as the data allows -- epoch after epoch until its robust accuracy on a held-out validation split stops
rising -- and kept at its best epoch.

Each epoch is one call of :func:`~art_adp.models.train_adversarial_classifier` (ART's ``AdversarialTrainer``); the
run resumes per epoch from ``NAME.last.safetensors`` (the last epoch's weights, the validation curve in its header)
and keeps the best epoch's weights in ``NAME.best.safetensors``; the finished classifier is ``NAME.safetensors``
(the best epoch's weights, the curve and the split in its header). Each call builds its own Adam, so the optimiser's
moments restart every epoch.

Behind a purifier (``purifier``): the classifier trains on purified inputs, plainly
(:func:`~art_adp.models.train_purified_classifier`, stopped on its clean validation accuracy through the purifier) or
adversarially through it (:func:`~art_adp.models.train_adversarial_classifier` with the purifier: PGD on the composed
model, stopped on its robust validation accuracy under PGD through the purifier); each epoch, and each validation, seeds
the purifier's generator from ``seed``, so a resumed run equals an uninterrupted one; the header records the purifier.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from art.attacks.evasion import ProjectedGradientDescent

from ..attacks._core import seeded_numpy
from ..attacks.registry import BLIND_ATTACK, REGISTRY
from ..runs.engine import defended_estimator
from ..runs.plans import budget
from ..runs.seeds import derive_seed

__all__ = [
    "METHODS",
    "WHITE_BATCH",
    "plateau",
    "robust_accuracy",
    "split_validation",
    "train_until_plateau",
    "white_box_pgd",
]


#: The adversarial training methods of :func:`train_until_plateau`.
METHODS = ("pgd", "fgsm-rs")


def plateau(curve: Sequence[float], patience: int) -> tuple[int, bool]:
    """
    The early-stopping rule: the best epoch is the first with the highest validation robust accuracy; training stops
    once ``patience`` epochs have followed it without a higher one.

    :param curve: Validation robust accuracy after each epoch so far (epoch 1 first).
    :param patience: Epochs without improvement that end training (≥ 1).
    :return: ``(best, stop)``: the 0-based index of the best epoch, and whether to stop.
    """
    if not curve:
        raise ValueError("curve must hold at least one epoch's validation accuracy.")
    best = max(range(len(curve)), key=lambda i: (curve[i], -i))
    return best, len(curve) - 1 - best >= patience


def split_validation(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` indices of ``n`` training images: a seeded permutation, ``round(fraction · n)`` held
    out (at least one)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}.")
    order = np.random.default_rng(derive_seed(seed, "validation") % 2**32).permutation(n)
    k = max(1, round(fraction * n))
    return np.sort(order[k:]), np.sort(order[:k])


#: Images per batch of the white-box PGD.
WHITE_BATCH = 250


def white_box_pgd(
    model: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    eps: float,
    eps_step: float,
    max_iter: int,
    random_start: bool,
    seed: int,
    device: str = "cpu",
    batch_size: int = WHITE_BATCH,
    purifier=None,
) -> np.ndarray:
    """ART's ℓ∞ PGD on ``model`` (the registry's Clf-PGD, :data:`~art_adp.attacks.registry.BLIND_ATTACK`), or
    through ``purifier`` in front of it as ART attacks a defended estimator (the purifier's ``gradient`` decides the
    gradient: the validation of a training behind a purifier), its random start drawn from ``seed``."""
    with torch.no_grad():
        nb_classes = int(model(torch.as_tensor(x[:1], device=device)).shape[1])
    estimator = defended_estimator(model, purifier, input_shape=x.shape[1:], nb_classes=nb_classes, device=device)
    b = budget(BLIND_ATTACK, eps=eps, eps_step=eps_step, max_iter=max_iter, random_start=random_start,
               batch_size=batch_size)  # fmt: skip
    if purifier is None:
        return REGISTRY[BLIND_ATTACK].build(estimator, b, seed).generate(x, y=y)
    with seeded_numpy(seed):
        return ProjectedGradientDescent(estimator, norm=b.norm, eps=b.eps, eps_step=b.eps_step, max_iter=b.max_iter,
                                        num_random_init=int(b.random_start), batch_size=b.batch_size,
                                        verbose=False).generate(x, y=y).astype(np.float32)  # fmt: skip


def robust_accuracy(
    model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, purifier=None, attack: bool = True, **pgd
) -> tuple[float, float | None]:
    """``(clean, robust)`` accuracy of ``model`` (behind ``purifier``, one draw) on ``x``, robust under
    :func:`white_box_pgd` with ``pgd`` (None without ``attack``)."""
    device = pgd.get("device", "cpu")
    model.eval()

    def correct(images: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            t = torch.as_tensor(images, device=device)
            t = t if purifier is None else torch.cat([purifier.forward(c)[0] for c in t.split(500)])
            return model(t).argmax(1).cpu().numpy() == y

    clean = float(correct(x).mean())
    return clean, float(correct(white_box_pgd(model, x, y, purifier=purifier, **pgd)).mean()) if attack else None


def train_until_plateau(
    model: torch.nn.Module,
    x_train: np.ndarray,
    y_train: np.ndarray,
    path: str | Path,
    *,
    eps: float,
    max_iter: int = 10,
    eps_step: float | None = None,
    val_fraction: float = 0.1,
    val_max_iter: int = 20,
    patience: int = 5,
    max_epochs: int = 100,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
    train_epoch=None,
    purifier=None,
    adversarial: bool = True,
    purifier_names: dict | None = None,
    method: str = "pgd",
    precision: str = "fp32",
) -> tuple[torch.nn.Module, dict]:
    """
    PGD adversarial training of ``model`` (in place) until its robust accuracy on a validation split stops rising
    (:func:`plateau`), resumable per epoch; returns the best epoch's model and the training facts. Behind a
    ``purifier``: adversarially through it, or (``adversarial=False``) plainly on purified inputs until the clean
    validation accuracy through it stops rising.

    :param model: A classifier of :mod:`art_adp.models` (saved by :func:`~art_adp.models.save_classifier`), with
        its initial weights.
    :param x_train: Training images ``N×C×H×W`` in [0, 1]; ``val_fraction`` of them are held out.
    :param y_train: Their labels.
    :param path: The finished classifier's file; ``.last`` and ``.best`` beside it while training (and, for
        ``"fgsm-rs"``, ``.epoch``: the progress within an epoch, so that an interrupted epoch resumes where it was).
    :param eps: ℓ∞ radius of the training attack and of the validation attack.
    :param max_iter: PGD steps per training batch.
    :param eps_step: Training PGD step (None: ``2.5 ε / max_iter``, Madry et al.).
    :param val_fraction: Training images held out to decide when to stop.
    :param val_max_iter: Steps of the validation attack (random start, step ``2.5 ε / val_max_iter``).
    :param patience: Epochs without a higher validation robust accuracy that end training.
    :param max_epochs: The most epochs trained.
    :param batch_size: Mini-batch of training and of its attack.
    :param lr: Adam's learning rate.
    :param seed: Seed of the split, the training attacks' starts and the batch order (each epoch its own).
    :param device: Where it trains.
    :param progress: Print one line per epoch (and, for ``"fgsm-rs"``, a bar over its mini-batches).
    :param train_epoch: ``(model, x, y, epoch) -> None``, one epoch of training (default: one epoch of
        :func:`~art_adp.models.train_adversarial_classifier` with the arguments above, or of
        :func:`~art_adp.models.train_purified_classifier`); a test scripts it.
    :param purifier: None, or the purifier to train behind (``apply_fit=True``, its own generator; for adversarial
        training ``gradient="full"``): validated through it too, recorded in the header
        (:func:`~art_adp.models.purifier_record`, with ``purifier_names``: the application's names for it).
    :param adversarial: PGD adversarial training, stopped on validation robust accuracy; False (with a purifier):
        plain training on purified inputs, stopped on clean validation accuracy.
    :param method: The training attack and optimiser: ``"pgd"`` (Madry et al.: ART's ``AdversarialTrainer``,
        ``max_iter`` PGD steps, Adam at ``lr``) or ``"fgsm-rs"`` (Wong et al.'s fast adversarial training,
        :func:`~art_adp.models.fast_adversarial.fgsm_rs_epoch`: FGSM from a random start, step 1.25 ε, SGD on a
        one-cycle schedule over ``max_epochs`` peaking at ``lr``, random crops and flips; ``max_iter`` unused); behind
        a purifier, FGSM's gradient and the update go through it (one draw per step, the purifier's full gradient).
    :param precision: The training passes' precision: ``"fp32"``, or ``"bf16"`` (autocast, weights fp32;
        :func:`~art_adp._hardware.autocast`); validation stays fp32. A bf16 run records it in the facts.
    :return: ``(model at its best epoch, facts)``: facts holds the curve, the best epoch, the epochs trained, the
        split and the training attack.
    """
    from ..models import load_classifier, purifier_record, save_classifier
    from ..models.adversarial import default_eps_step, train_adversarial_classifier, train_purified_classifier
    from ..defended import DefendedModel
    from ..models.fast_adversarial import fgsm_rs_epoch
    from ..serialization import read_checkpoint

    from .._hardware import autocast

    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}.")
    if not adversarial and purifier is None:
        raise ValueError("adversarial=False trains behind a purifier: give purifier (or adversarial=True).")
    if method not in METHODS or (method != "pgd" and not adversarial):
        raise ValueError(f"method must be one of {METHODS} ('fgsm-rs': adversarial training, bare or through a "
                         f"purifier), got {method!r}.")  # fmt: skip
    path, key = Path(path), "adversarial_training" if adversarial else "training"
    record = None if purifier is None else purifier_record(purifier, **(purifier_names or {}))
    header = {} if record is None else {"purifier": record}
    if path.exists():
        return load_classifier(path, device, purifier=purifier), read_checkpoint(path)[1][key]
    last, best_path = path.with_suffix(".last.safetensors"), path.with_suffix(".best.safetensors")
    within = path.with_suffix(".epoch.safetensors")  # fast adversarial training's progress within an epoch
    eps_step = default_eps_step(eps, max_iter) if eps_step is None else eps_step
    train, val = split_validation(len(x_train), val_fraction, seed)
    facts: dict = {
        "eps": eps, "eps_step": eps_step, "max_iter": max_iter, "batch_size": batch_size, "lr": lr, "seed": seed,
        "patience": patience, "max_epochs": max_epochs, "n_train": len(train), "n_validation": len(val),
        "validation_attack": f"PGD {val_max_iter} × {2.5 * eps / val_max_iter:.4g}, random start"
        + ("" if purifier is None else ", through the purifier"),
        "curve": [],
    }  # fmt: skip
    if precision != "fp32":  # recorded where it differs from the records before the option
        facts["precision"] = precision
    if not adversarial:
        facts.update(validation_attack=None, validation="clean accuracy through the purifier")
    if method == "fgsm-rs":
        del facts["max_iter"]
        facts.update(method=method, eps_step=1.25 * eps, lr_max=lr, optimizer="SGD, momentum 0.9, weight decay 5e-4",
                     schedule=f"one-cycle over {max_epochs} epochs",
                     augmentation="random crop (pad 4), flip")  # fmt: skip
    if last.exists():
        state = load_classifier(last, device, purifier=purifier)
        model.load_state_dict(state.state_dict())
        held = read_checkpoint(last)[1][key]
        if held.get("precision", "fp32") != precision:
            raise ValueError(
                f"{last} was trained in {held.get('precision', 'fp32')}, not {precision}: resume it in "
                "its own precision, or delete it to start again."
            )
        facts["curve"] = held["curve"]
    if train_epoch is None and method == "fgsm-rs":

        def train_epoch(m, x, y, epoch):
            if purifier is not None:  # through it: FGSM's gradient and the update both through the purification
                purifier.generator.manual_seed(derive_seed(seed, "purify", epoch))
                m = DefendedModel(m, purifier, ensemble_size=1)
            fgsm_rs_epoch(m, x, y, eps=eps, epoch=epoch, epochs=max_epochs, lr_max=lr, batch_size=batch_size,
                          seed=derive_seed(seed, "epoch", epoch) % 2**32, progress=progress, checkpoint=within,
                          generators=() if purifier is None else (purifier.generator,))  # fmt: skip

    elif train_epoch is None and adversarial:

        def train_epoch(m, x, y, epoch):
            train_adversarial_classifier(
                m, x, y, eps=eps, eps_step=eps_step, max_iter=max_iter, epochs=1, batch_size=batch_size, lr=lr,
                seed=derive_seed(seed, "epoch", epoch) % 2**32, purifier=purifier,
            )  # fmt: skip

    elif train_epoch is None:

        def train_epoch(m, x, y, epoch):
            train_purified_classifier(m, x, y, purifier, epochs=1, batch_size=batch_size, lr=lr,
                                      seed=derive_seed(seed, "epoch", epoch) % 2**32)  # fmt: skip

    pgd = {"eps": eps, "eps_step": 2.5 * eps / val_max_iter, "max_iter": val_max_iter, "random_start": True,
           "device": device}  # fmt: skip
    model.to(device)
    while True:
        curve = [c["robust" if adversarial else "clean"] for c in facts["curve"]]
        if curve and (plateau(curve, patience)[1] or len(curve) >= max_epochs):
            break
        epoch, started = len(curve) + 1, time.monotonic()
        model.train()
        with autocast(precision, device):
            train_epoch(model, x_train[train], y_train[train], epoch)
        if purifier is not None:  # the validation's purification draws: the epoch's own
            purifier.generator.manual_seed(derive_seed(seed, "val-purify", epoch))
        clean, robust = robust_accuracy(model, x_train[val], y_train[val], seed=derive_seed(seed, "val", epoch),
                                        purifier=purifier, attack=adversarial, **pgd)  # fmt: skip
        facts["curve"].append({"epoch": epoch, "clean": clean, "robust": robust,
                               "seconds": round(time.monotonic() - started, 1)})  # fmt: skip
        judged = robust if adversarial and robust is not None else clean
        if plateau([*curve, judged], patience)[0] == epoch - 1:
            save_classifier(model, best_path, **{key: {**facts, "epoch": epoch}}, **header)
        save_classifier(model, last, **{key: facts}, **header)
        within.unlink(missing_ok=True)
        if progress:
            more = f", robust {robust:.1%}" if robust is not None else " (through the purifier)"
            print(f"{path.stem}: epoch {epoch}: validation clean {clean:.1%}{more}", flush=True)
    best, stopped = plateau(curve, patience)
    facts.update(best_epoch=best + 1, epochs_trained=len(curve), stopped_by="plateau" if stopped else "max_epochs")
    model = load_classifier(best_path, device, purifier=purifier)
    save_classifier(model, path, **{key: facts}, **header)
    return model.eval(), facts
