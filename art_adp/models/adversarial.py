"""Adversarial training (Madry et al., ICLR 2018), the defence users would pick instead of ADP.

The training loop is ART's own: :class:`art.defences.trainer.AdversarialTrainer` with ART's l_inf
:class:`art.attacks.evasion.ProjectedGradientDescent` (random start) around a :class:`PyTorchClassifier`, so the
baseline is the one an ART user gets, with the optimiser of :func:`art_adp.models.train_classifier` (Adam,
betas (0.9, 0.999), no weight decay) and the same architectures as the undefended classifiers.

Randomness: ART 1.20 draws the batch order, the replaced subset and the PGD random starts from NumPy's global RNG, and
``PyTorchClassifier.fit`` its in-batch order from torch's global CPU generator. :func:`train_adversarial_classifier`
seeds both with its `seed` while it trains and restores their previous states before returning, so the caller's
random streams are neither reseeded nor consumed. The initial weights are the caller's (seed torch before building
the model); with the same initial weights and `seed`, training is reproducible on a deterministic backend such as
the CPU. Not thread-safe: ART's global RNG and progress bars are shared by the process.

Resume: with a ``checkpoint_path``, training runs one ``AdversarialTrainer.fit`` epoch at a time and writes, after
each epoch, a checkpoint (safetensors, atomic) with the weights, Adam's state, both global RNG states and the
permutation ART's shuffle has reached; a run that finds one continues from its epoch. Each epoch hands ART the data
in the order its previous shuffles left it, so the epochs are ART's own, and an interrupted and resumed run ends with
the weights of an uninterrupted one (on the CPU, bit for bit).

Training behind a purifier is ART's own one-line choice: give the estimator ``preprocessing_defences=[purifier]``
with the purifier's ``apply_fit=True``. :func:`train_purified_classifier` then trains on purified batches (ART's
``PyTorchClassifier.fit`` purifies what it fits on), and :func:`train_adversarial_classifier` with ``purifier`` runs
adversarial training of the composed model: ``AdversarialTrainer`` attacks whatever estimator it is given, so PGD
differentiates through the purifier (its ``gradient="full"``: the full gradient, one noise draw per step) and the
examples are purified again, with a fresh draw, before the classifier's step. The purifier's noise comes from its own
generator, seeded with ``seed + 1`` and checkpointed with the rest, so a resumed run still equals an uninterrupted
one; the checkpoint's header records the purifier (:func:`~art_adp.models.checkpoint.purifier_record`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from tqdm.auto import tqdm

from art_adp._checks import integer, number, positive_int
from art_adp.models.checkpoint import ARCHITECTURES, purifier_record
from art_adp.models.train import _check_labels, _device, _images_and_labels
from art_adp.serialization import TRAIN_PREFIX, optimizer_tensors, read_checkpoint, restore_optimizer, save_module

__all__ = ["default_eps_step", "train_adversarial_classifier", "train_purified_classifier"]


def _positive_real(name: str, value: object) -> float:
    return number(name, value, low=0, low_open=True)


def _clip_values(clip_values: object) -> tuple[float, float]:
    try:
        if not isinstance(clip_values, Iterable):
            raise TypeError
        low, high = (float(v) for v in clip_values)
    except (TypeError, ValueError):
        raise ValueError(f"clip_values must be a pair (min, max) of numbers, got {clip_values!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"clip_values must be a pair (min, max) of finite numbers with min < max, got {clip_values!r}")
    return low, high


@contextmanager
def _seeded_global_rngs(seed: int) -> Iterator[None]:
    """Seed NumPy's global RNG and torch's CPU generator with `seed`; restore both previous states on exit."""
    state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        np.random.seed(seed)
        torch.default_generator.manual_seed(seed)
        try:
            yield
        finally:
            np.random.set_state(state)


@contextmanager
def _art_trainer_progress(verbose: bool) -> Iterator[None]:
    """ART 1.20's ``AdversarialTrainer.fit`` always draws two tqdm bars (a one-step "Precompute adv samples" and the
    epochs); for the duration of the call, hide the first and show the epochs only when `verbose`."""
    from art.defences.trainer import adversarial_trainer as module

    saved = {name: getattr(module, name) for name in ("tqdm", "trange") if hasattr(module, name)}
    if "tqdm" in saved:
        module.tqdm = functools.partial(saved["tqdm"], disable=True)
    if "trange" in saved:
        module.trange = functools.partial(saved["trange"], disable=not verbose, unit="epoch")
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def default_eps_step(eps: float, max_iter: int) -> float:
    """The PGD step of :func:`train_adversarial_classifier` when none is given: ``2.5 * eps / max_iter`` (Madry et
    al.; eps/4 at max_iter = 10)."""
    return 2.5 * eps / max_iter


def _attack_budget(eps, eps_step, max_iter, clip_values) -> tuple[tuple[float, float], dict]:
    """The checked ``clip_values`` and the training attack's ``eps``, ``eps_step`` (default ε·2.5/max_iter) and
    ``max_iter``."""
    low, high = _clip_values(clip_values)
    eps = _positive_real("eps", eps)
    if eps > high - low:
        raise ValueError(
            f"eps must not exceed the pixel range clip_values[1] - clip_values[0] = {high - low:g}, "
            f"got {eps:g}; give eps on the scale of the images"
        )
    max_iter = positive_int("max_iter", max_iter)
    eps_step = default_eps_step(eps, max_iter) if eps_step is None else _positive_real("eps_step", eps_step)
    return (low, high), {"eps": eps, "eps_step": eps_step, "max_iter": max_iter}


def _art_classifier(model, x: torch.Tensor, device, *, lr: float, clip_values, purifier=None):
    """ART's ``PyTorchClassifier`` of ``model`` with Adam, behind ``purifier`` when one is given."""
    from art.estimators.classification import PyTorchClassifier

    with torch.no_grad():
        nb_classes = model.eval()(x[:1].to(device, torch.float32)).shape[1]
    return PyTorchClassifier(
        model=model,
        loss=nn.CrossEntropyLoss(),
        optimizer=torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0),
        input_shape=tuple(x.shape[1:]),
        nb_classes=nb_classes,
        clip_values=clip_values,
        preprocessing_defences=None if purifier is None else [purifier],
        device_type="gpu" if device.type == "cuda" else "cpu",
    )


def _madry_trainer(model, x: torch.Tensor, device, pgd: dict, *, ratio: float, lr: float, clip_values, purifier=None):
    """ART's ``AdversarialTrainer`` of ``model`` (Adam) with l_inf PGD (one random start) as the training attack, on
    the classifier behind ``purifier`` when one is given (the composed model)."""
    from art.attacks.evasion import ProjectedGradientDescent
    from art.defences.trainer import AdversarialTrainer

    classifier = _art_classifier(model, x, device, lr=lr, clip_values=clip_values, purifier=purifier)
    attack = ProjectedGradientDescent(classifier, norm=np.inf, num_random_init=1, verbose=False, **pgd)
    return AdversarialTrainer(classifier, attack, ratio=float(ratio)), classifier.optimizer


def _check_purifier(purifier) -> dict | None:
    """The record of a purifier to train behind (None: none), refusing one ART would not apply while fitting or
    whose noise is not the run's own."""
    if purifier is None:
        return None
    if not getattr(purifier, "apply_fit", False):
        raise ValueError(
            f"purifier.apply_fit is {getattr(purifier, 'apply_fit', None)}: ART's fit would train on unpurified "
            "images; build the purifier with apply_fit=True."
        )
    if not isinstance(getattr(purifier, "generator", None), torch.Generator):
        raise ValueError(
            "the purifier needs its own torch.Generator (generator=torch.Generator()), which training seeds with "
            "seed + 1 and checkpoints, so the run's noise is its own and resumes."
        )
    return purifier_record(purifier, gradient=getattr(purifier, "gradient", None))


def _save_state(path, model, optimizer, *, epoch: int, order: np.ndarray, settings: dict, purifier=None,
                key: str = "adversarial_training") -> None:  # fmt: skip
    """The checkpoint after ``epoch`` epochs: weights, Adam's state, the global RNGs, ART's shuffled order."""
    tensors = optimizer_tensors(optimizer)
    _, mt_key, pos, has_gauss, gauss = np.random.get_state(legacy=True)  # type: ignore[misc]
    tensors[f"{TRAIN_PREFIX}numpy_rng"] = torch.from_numpy(np.asarray(mt_key).astype(np.int64))
    tensors[f"{TRAIN_PREFIX}torch_rng"] = torch.get_rng_state()
    tensors[f"{TRAIN_PREFIX}order"] = torch.from_numpy(order.astype(np.int64))
    if purifier is not None:
        tensors[f"{TRAIN_PREFIX}purifier_rng"] = purifier.generator.get_state()
    groups = optimizer.state_dict()["param_groups"]
    train = {"epoch": epoch, "param_groups": groups, "numpy_rng": [int(pos), int(has_gauss), float(gauss)]}
    extra = {} if settings.get("purifier") is None else {"purifier": settings["purifier"]}
    save_module(model, path, ARCHITECTURES, tensors=tensors, train=train, **{key: settings}, **extra)


def _restore_state(path, model, optimizer, settings: dict, purifier=None,
                   key: str = "adversarial_training") -> tuple[int, np.ndarray]:  # fmt: skip
    """Load the checkpoint at ``path`` into ``model``, ``optimizer`` and the global RNGs: ``(epoch, order)``."""
    tensors, header = read_checkpoint(path)
    if header.get("architecture") != type(model).__name__ or header.get("config") != dict(model.config):
        raise ValueError(
            f"Cannot resume from {path}: it holds {header.get('architecture')}({header.get('config')}), not "
            f"{type(model).__name__}({model.config}). Use another checkpoint_path or resume=False."
        )
    held = {k: v for k, v in (header.get(key) or {}).items() if k != "epochs"}
    if "train" not in header or held != settings:
        raise ValueError(
            f"Cannot resume from {path}: it was trained with other settings ({held}, now {settings}) or holds no "
            "training state. Use another checkpoint_path or resume=False."
        )
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)})
    restore_optimizer(optimizer, tensors, header["train"]["param_groups"])
    pos, has_gauss, gauss = header["train"]["numpy_rng"]
    mt_key = tensors[f"{TRAIN_PREFIX}numpy_rng"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", mt_key, pos, has_gauss, gauss))
    torch.set_rng_state(tensors[f"{TRAIN_PREFIX}torch_rng"])
    if purifier is not None:
        purifier.generator.set_state(tensors[f"{TRAIN_PREFIX}purifier_rng"])
    return int(header["train"]["epoch"]), tensors[f"{TRAIN_PREFIX}order"].numpy()


def train_adversarial_classifier(
    model: nn.Module,
    x_train: np.ndarray,
    y_train: np.ndarray,
    *,
    eps: float,
    eps_step: float | None = None,
    max_iter: int = 10,
    epochs: int = 20,
    batch_size: int = 128,
    ratio: float = 1.0,
    seed: int = 0,
    verbose: bool = False,
    clip_values: tuple[float, float] = (0.0, 1.0),
    lr: float = 1e-3,
    checkpoint_path: str | os.PathLike | None = None,
    resume: bool = True,
    purifier=None,
) -> nn.Module:
    """
    Train `model` in place by l_inf PGD adversarial training (Madry et al.) with ART's ``AdversarialTrainer``.

    Every epoch visits the training set once in shuffled mini-batches of `batch_size`; in each, a fraction `ratio`
    of the images (all of them at the default 1, Madry et al.'s protocol) is replaced by ART
    ``ProjectedGradientDescent`` examples against the current weights (l_inf, radius `eps`, `max_iter` steps of
    `eps_step`, one uniform random start in the ball, clipped to `clip_values`), and Adam (`lr`, betas
    (0.9, 0.999)) takes one cross-entropy step on the batch.

    Randomness: `seed` seeds the global RNGs ART draws from, restored afterwards (see the module docstring).

    :param model: Classifier mapping images of shape (N, C, H, W) in `clip_values` to logits of shape (N, K), e.g.
        ``DigitsCNN``, ``MLP``, ``SmallCNN``; trained in place on the device of its parameters (CUDA: the current
        CUDA device).
    :param x_train: Training images of shape (N, C, H, W), floating point, values in `clip_values`.
    :param y_train: Integer training labels of shape (N,) in [0, K).
    :param eps: l_inf radius of the training attack, in (0, clip_values[1] - clip_values[0]].
    :param eps_step: PGD step size; default ``2.5 * eps / max_iter`` (Madry et al.; eps/4 at max_iter = 10, the
        demo's convention).
    :param max_iter: PGD iterations per training batch.
    :param epochs: Number of passes over the training set.
    :param batch_size: Mini-batch size (of training and of the attack).
    :param ratio: Fraction of each batch replaced by adversarial examples, in (0, 1].
    :param seed: Seed of the global RNGs for the duration of training, in [0, 2**32).
    :param verbose: Show a tqdm progress bar over the epochs.
    :param clip_values: (min, max) of valid pixel values; PGD examples are clipped to it.
    :param lr: Adam learning rate.
    :param checkpoint_path: A ``.safetensors`` file written atomically after every epoch (weights, Adam's state, the
        global RNG states, ART's shuffled order; loadable by :func:`~art_adp.models.load_classifier`), or None.
    :param resume: Continue from ``checkpoint_path`` if it exists (from its epoch up to `epochs`; its settings but
        `epochs` must be these).
    :param purifier: None, or a PyTorch preprocessing defence with ``apply_fit=True`` and its own generator: adversarial
        training of the composed model (PGD through the purifier, its ``gradient`` deciding the gradient; the
        examples purified afresh before each step; see the module docstring).
    :return: The same `model`, trained, in eval mode.
    :raises ValueError: If an argument is invalid: `eps`/`eps_step`/`lr` not positive and finite, `eps` larger than
        the pixel range, non-positive `max_iter`/`epochs`/`batch_size`, `ratio` outside (0, 1], a bad `seed` or
        `clip_values`, images not floating point, not 4-D, not finite or outside `clip_values`, labels not 1-D
        integers in [0, K), mismatched or empty arrays; a checkpoint of another model or other settings.
    """
    (low, high), pgd = _attack_budget(eps, eps_step, max_iter, clip_values)
    epochs = positive_int("epochs", epochs)
    batch_size = positive_int("batch_size", batch_size)
    number("ratio", ratio, low=0, high=1, low_open=True)  # the fraction of each batch made adversarial
    integer("seed", seed, low=0, high=2**32 - 1)
    lr = _positive_real("lr", lr)

    record = _check_purifier(purifier)
    x, y = _images_and_labels(x_train, y_train, "x_train", "y_train", value_range=(low, high))
    device = _device(model, None)
    _check_labels(model.to(device), x, y, "y_train", device)
    pgd["batch_size"] = batch_size
    trainer, optimizer = _madry_trainer(model, x, device, pgd, ratio=ratio, lr=lr, clip_values=(low, high),
                                        purifier=purifier)  # fmt: skip
    settings = {**pgd, "ratio": float(ratio), "lr": lr, "seed": int(seed), "n_train": len(x),
                **({} if record is None else {"purifier": record})}  # fmt: skip
    fit = functools.partial(_one_epoch, trainer, batch_size=batch_size)
    _epochs(fit, model, optimizer, x, y, settings, epochs=epochs, purifier=purifier, verbose=verbose,
            path=checkpoint_path, resume=resume, key="adversarial_training")  # fmt: skip
    return model.eval()


def train_purified_classifier(
    model: nn.Module,
    x_train: np.ndarray,
    y_train: np.ndarray,
    purifier,
    *,
    epochs: int = 10,
    batch_size: int = 128,
    seed: int = 0,
    verbose: bool = False,
    clip_values: tuple[float, float] = (0.0, 1.0),
    lr: float = 1e-3,
    checkpoint_path: str | os.PathLike | None = None,
    resume: bool = True,
) -> nn.Module:
    """
    Train `model` in place on purified inputs: ART's ``PyTorchClassifier(model, preprocessing_defences=[purifier])``
    with the purifier's ``apply_fit=True``, whose ``fit`` purifies what it trains on. One ``fit`` epoch at a time, so
    every epoch purifies every training image with fresh noise (the purifier's generator, seeded with ``seed + 1``),
    then cross-entropy and Adam (`lr`, betas (0.9, 0.999)) over shuffled mini-batches of `batch_size`.

    Randomness and resume as :func:`train_adversarial_classifier`'s (``seed`` seeds ART's shuffle, restored after;
    the checkpoint holds the weights, Adam's state, the RNG states and the purifier's generator).

    :param model: Classifier mapping images of shape (N, C, H, W) in `clip_values` to logits of shape (N, K).
    :param x_train: Training images of shape (N, C, H, W), floating point, values in `clip_values`.
    :param y_train: Integer training labels of shape (N,) in [0, K).
    :param purifier: A PyTorch preprocessing defence with ``apply_fit=True`` and its own ``torch.Generator``, e.g.
        ``ADPPurifier(score_model, generator=torch.Generator(), apply_fit=True)``.
    :param epochs, batch_size, seed, verbose, clip_values, lr, checkpoint_path, resume: As for
        :func:`train_adversarial_classifier`.
    :return: The same `model`, trained, in eval mode.
    :raises ValueError: For the arguments :func:`train_adversarial_classifier` refuses, a purifier with
        ``apply_fit=False`` or without its own generator.
    """
    low, high = _clip_values(clip_values)
    epochs = positive_int("epochs", epochs)
    batch_size = positive_int("batch_size", batch_size)
    integer("seed", seed, low=0, high=2**32 - 1)
    lr = _positive_real("lr", lr)
    record = _check_purifier(purifier)
    x, y = _images_and_labels(x_train, y_train, "x_train", "y_train", value_range=(low, high))
    device = _device(model, None)
    _check_labels(model.to(device), x, y, "y_train", device)
    classifier = _art_classifier(model, x, device, lr=lr, clip_values=(low, high), purifier=purifier)
    settings = {"batch_size": batch_size, "lr": lr, "seed": int(seed), "n_train": len(x), "purifier": record}

    def fit(x_np: np.ndarray, y_np: np.ndarray, order: np.ndarray) -> np.ndarray:
        classifier.fit(x_np, y_np, batch_size=batch_size, nb_epochs=1)  # shuffles with torch's (seeded) generator
        return order

    _epochs(fit, model, classifier.optimizer, x, y, settings, epochs=epochs, purifier=purifier, verbose=verbose,
            path=checkpoint_path, resume=resume, key="training")  # fmt: skip
    return model.eval()


def _epochs(fit, model, optimizer, x, y, settings: dict, *, epochs: int, purifier, verbose: bool, path, resume: bool,
            key: str) -> None:  # fmt: skip
    """``fit(x, y, order) -> order`` epoch after epoch under the seeded global RNGs (and the purifier's generator,
    seeded with ``seed + 1``), resuming from and checkpointing to ``path`` after each."""
    x_np, y_np = x.cpu().numpy().astype(np.float32, copy=False), y.cpu().numpy().astype(np.int64, copy=False)
    path = None if path is None else Path(path)
    seed = settings["seed"]
    if purifier is not None:
        purifier.generator.manual_seed(seed + 1)
    desc = "Adversarial training epochs" if key == "adversarial_training" else "Training epochs (purified)"
    with _seeded_global_rngs(seed), _art_trainer_progress(False):
        resumed = path is not None and resume and path.exists()
        start, order = (_restore_state(path, model, optimizer, settings, purifier, key) if resumed
                        else (0, np.arange(len(x_np))))  # fmt: skip
        for epoch in tqdm(range(start, epochs), initial=start, total=epochs, desc=desc, unit="epoch",
                          disable=not verbose):  # fmt: skip
            order = fit(x_np, y_np, order)
            if path is not None:
                done = {**settings, "epochs": epochs}
                _save_state(path, model, optimizer, epoch=epoch + 1, order=order, settings=done, purifier=purifier,
                            key=key)  # fmt: skip


def _one_epoch(trainer, x_np: np.ndarray, y_np: np.ndarray, order: np.ndarray, *, batch_size: int) -> np.ndarray:
    """One ART ``fit`` epoch on the data in ``order``; returns the order ART's one multi-epoch ``fit`` would have
    reached after it (its shuffle drawn from the same global RNG), so epoch-by-epoch training equals one fit."""
    rng = np.random.RandomState()
    rng.set_state(np.random.get_state())
    shuffle = np.arange(len(x_np))
    rng.shuffle(shuffle)  # the permutation ART's fit is about to draw
    trainer.fit(x_np[order], y_np[order], batch_size=batch_size, nb_epochs=1)
    return order[shuffle]
