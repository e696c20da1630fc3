"""Supervised training and evaluation of the classifiers (ADP paper, appendix: Adam, lr 1e-3, betas (0.9, 0.999))."""

from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from art_adp._checks import integer, number, positive_int

ArrayLike = Union[np.ndarray, torch.Tensor]
DeviceLike = Union[str, torch.device, None]
_RANGE_TOL = 1e-5  # tolerance on the [0, 1] range of the images


def _device(model: nn.Module, device: DeviceLike) -> torch.device:
    """The requested device, else the one holding the model's parameters (CPU for a parameter-free model)."""
    if device is not None:
        return torch.device(device)
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _images_and_labels(
    x: ArrayLike, y: ArrayLike, x_name: str, y_name: str, value_range: tuple[float, float] = (0.0, 1.0)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Convert to tensors and check shapes, lengths, finiteness, the range (default [0, 1]) and the label dtype."""
    x = x.detach() if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))
    y = y.detach() if isinstance(y, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(y))
    if not x.is_floating_point():
        raise ValueError(f"{x_name} must be a floating-point array, got dtype {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{x_name} must have shape (N, C, H, W), got {tuple(x.shape)}")
    if y.ndim != 1:
        raise ValueError(f"{y_name} must have shape (N,), got {tuple(y.shape)}")
    if len(x) != len(y):
        raise ValueError(f"{x_name} and {y_name} must have the same length, got {len(x)} and {len(y)}")
    if len(x) == 0:
        raise ValueError(f"{x_name} and {y_name} must not be empty")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{x_name} must be finite, got NaN or infinite values")
    lo, hi = float(x.min()), float(x.max())
    low, high = value_range
    if lo < low - _RANGE_TOL or hi > high + _RANGE_TOL:
        raise ValueError(f"{x_name} must lie in [{low:g}, {high:g}], got values in [{lo:.4g}, {hi:.4g}]")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"{y_name} must hold integer class labels, got dtype {y.dtype}")
    return x, y


def _check_labels(model: nn.Module, x: torch.Tensor, y: torch.Tensor, y_name: str, device: torch.device) -> None:
    """Check that y lies in [0, K), K being the number of logits the model returns for one image."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(x[:1].to(device, torch.float32))
    model.train(was_training)
    if logits.ndim != 2:
        raise ValueError(f"model must return logits of shape (N, K), got {tuple(logits.shape)}")
    k, lo, hi = logits.shape[1], int(y.min()), int(y.max())
    if lo < 0 or hi >= k:
        raise ValueError(f"{y_name} must hold class labels in [0, {k}), got labels in [{lo}, {hi}]")


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device) -> float:
    """Accuracy on checked tensors, in eval mode without gradients; restores the model's train/eval mode."""
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            logits = model(x[start : start + batch_size].to(device, torch.float32))
            correct += int((logits.argmax(dim=1) == y[start : start + batch_size].to(device)).sum())
    model.train(was_training)
    return correct / len(x)


def evaluate_accuracy(
    model: nn.Module, x: ArrayLike, y: ArrayLike, *, batch_size: int = 512, device: DeviceLike = None
) -> float:
    """
    Top-1 accuracy of `model` on (x, y), computed in eval mode without gradients (the model's mode is restored).

    :param model: Classifier returning logits of shape (N, K).
    :param x: Images of shape (N, C, H, W), floating point, values in [0, 1]; NumPy array or tensor.
    :param y: Integer labels of shape (N,) in [0, K).
    :param batch_size: Number of images per forward pass.
    :param device: Device to evaluate on (the model is moved there); default: the device of the model's parameters.
    :return: Fraction of correctly classified images, in [0, 1].
    :raises ValueError: On invalid inputs, see :func:`train_classifier`.
    """
    batch_size = positive_int("batch_size", batch_size)
    x, y = _images_and_labels(x, y, "x", "y")
    device = _device(model, device)
    model.to(device)
    _check_labels(model, x, y, "y", device)
    return _accuracy(model, x, y, batch_size, device)


def _epoch(model, optimizer, x, y, *, batch_size: int, generator, device, bar, postfix: dict[str, str]) -> None:
    """One pass over ``(x, y)`` in mini-batches shuffled by ``generator``, showing the running loss on ``bar``."""
    model.train()
    order = torch.randperm(len(x), generator=generator)
    loss_sum, seen = 0.0, 0
    for start in range(0, len(x), batch_size):
        idx = order[start : start + batch_size]
        loss = F.cross_entropy(model(x[idx].to(device, torch.float32)), y[idx].to(device, torch.long))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum, seen = loss_sum + loss.item() * len(idx), seen + len(idx)
        postfix["loss"] = f"{loss_sum / seen:.4f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update()


def train_classifier(
    model: nn.Module,
    x_train: ArrayLike,
    y_train: ArrayLike,
    *,
    epochs: int = 10,
    batch_size: int = 128,
    lr: float = 1e-3,
    device: DeviceLike = None,
    seed: Optional[int] = None,
    progress: bool = True,
    x_val: Optional[ArrayLike] = None,
    y_val: Optional[ArrayLike] = None,
) -> nn.Module:
    """
    Train a classifier with cross-entropy and Adam (lr, betas (0.9, 0.999), no weight decay), as in the ADP paper.

    Each epoch visits the training set once in shuffled mini-batches (the last one may be smaller). The order is drawn
    from a local `torch.Generator` seeded with `seed`, so the global RNGs are neither reseeded nor consumed; with the
    same initial weights and seed, training is reproducible on a deterministic backend such as the CPU. Layers that
    draw random numbers themselves (dropout) still use the global RNG.

    :param model: Classifier mapping images of shape (N, C, H, W) in [0, 1] to logits of shape (N, K); trained in place.
    :param x_train: Training images of shape (N, C, H, W), floating point, values in [0, 1]; NumPy array or tensor.
    :param y_train: Integer training labels of shape (N,) in [0, K).
    :param epochs: Number of passes over the training set.
    :param batch_size: Mini-batch size.
    :param lr: Adam learning rate.
    :param device: Device to train on (the model is moved there); default: the device of the model's parameters.
    :param seed: Seed of the shuffling generator; `None` draws a fresh non-deterministic seed.
    :param progress: Show a tqdm progress bar with the running epoch loss (and validation accuracy).
    :param x_val: Optional validation images, same format as `x_train`; with `progress`, their accuracy is shown
        after every epoch.
    :param y_val: Validation labels, given if and only if `x_val` is.
    :return: The trained model, in eval mode, on `device`.
    :raises ValueError: If an argument is invalid: non-positive `epochs`/`batch_size`/`lr`, images not floating
        point, not 4-D, not finite or outside [0, 1], labels not 1-D integers in [0, K), mismatched or empty arrays.
    """
    epochs = positive_int("epochs", epochs)
    batch_size = positive_int("batch_size", batch_size)
    number("lr", lr, low=0, low_open=True)
    integer("seed", seed, optional=True)
    if (x_val is None) != (y_val is None):
        raise ValueError("x_val and y_val must be given together")

    x, y = _images_and_labels(x_train, y_train, "x_train", "y_train")
    val = None if x_val is None or y_val is None else _images_and_labels(x_val, y_val, "x_val", "y_val")
    device = _device(model, device)
    model.to(device)
    _check_labels(model, x, y, "y_train", device)
    if val is not None:
        _check_labels(model, *val, "y_val", device)

    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0)
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    postfix: dict[str, str] = {}
    with tqdm(total=epochs * math.ceil(len(x) / batch_size), disable=not progress, desc="train", unit="batch") as bar:
        for epoch in range(epochs):
            postfix["epoch"] = f"{epoch + 1}/{epochs}"
            _epoch(
                model,
                optimizer,
                x,
                y,
                batch_size=batch_size,
                generator=generator,
                device=device,
                bar=bar,
                postfix=postfix,
            )
            if val is not None and progress:  # only shown, so only computed with the progress bar
                postfix["val_acc"] = f"{_accuracy(model, *val, 512, device):.4f}"
                bar.set_postfix(postfix)
    return model.eval()
