"""Fast adversarial training (Wong, Rice & Kolter, ICLR 2020, "Fast is better than free"): FGSM from a random start
in the ε-ball, with SGD on a one-cycle learning rate -- PGD adversarial training's robustness at the cost of about
two plain epochs per epoch, what a CPU can afford on CIFAR-10.

One epoch at a time (:func:`fgsm_rs_epoch`), so that :func:`~art_adp.apps.robust_baseline.train_until_plateau` keeps
the epoch whose robust accuracy on held-out images under PGD is highest: the guard against catastrophic overfitting
(FGSM training's robust accuracy collapsing within an epoch), which Wong et al. detect the same way. ART's own
``AdversarialTrainerFBFPyTorch`` runs the same update but trains all epochs in one call, without data augmentation or
a way to resume; this module is its epoch, with the paper's augmentation (random 4-pixel-padded crops and horizontal
flips) and every draw from one seeded generator.

| Paper link: https://arxiv.org/abs/2001.03994
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from torch import nn

from art_adp._checks import integer, number, positive_int
from art_adp.serialization import TRAIN_PREFIX, optimizer_tensors, read_checkpoint, restore_optimizer, write_checkpoint

__all__ = ["cyclic_lr", "fgsm_rs_epoch", "random_crop_flip"]


def cyclic_lr(t: float, epochs: int, lr_max: float) -> float:
    """The one-cycle schedule at ``t`` epochs of ``epochs`` (fractions count): 0 → ``lr_max`` linearly over the first
    two fifths, back to 0 at the end (Wong et al.; ART's ``AdversarialTrainerFBF``)."""
    return float(np.interp(t, [0, epochs * 2 / 5, epochs], [0, lr_max, 0]))


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Each image shifted by a random crop of its ``pad``-pixel zero-padded copy and flipped left-right with
    probability ½ (the standard CIFAR augmentation), the draws from ``generator``."""
    n, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    dy, dx = (torch.randint(0, 2 * pad + 1, (n,), generator=generator).tolist() for _ in range(2))
    out = torch.stack([padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])
    flip = (torch.rand(n, generator=generator) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def fgsm_rs_epoch(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    *,
    eps: float,
    epoch: int,
    epochs: int,
    alpha: float | None = None,
    lr_max: float = 0.2,
    batch_size: int = 128,
    momentum: float = 0.9,
    weight_decay: float = 5e-4,
    augment: bool = True,
    seed: int = 0,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    every: int = 25,
    generators: Sequence[torch.Generator] = (),
) -> dict:
    """
    Epoch ``epoch`` (1-based) of ``epochs`` of FGSM adversarial training from a random start, in place.

    Per mini-batch (shuffled; augmented with :func:`random_crop_flip` when ``augment``): δ uniform in [−ε, ε]
    (clipped so that x + δ stays in [0, 1]), one signed gradient step of ``alpha`` on the cross-entropy (model in
    training mode), δ projected back onto the ε-ball and x + δ into [0, 1]; then one SGD step (``momentum``,
    ``weight_decay``, the learning rate of :func:`cyclic_lr` at that point of training) on the cross-entropy of
    x + δ. Every draw comes from a generator seeded with ``seed`` and ``epoch``, so an epoch is reproducible on
    its own (the optimiser's momentum starts at zero each epoch: a resumed run equals an uninterrupted one).

    :param model: A classifier of [0, 1] images ``N×C×H×W``, trained on the device of its parameters.
    :param x: Training images in [0, 1]; ``y`` their integer labels.
    :param eps, alpha: ℓ∞ radius of the training attack; its FGSM step (None: 1.25 ε, Wong et al.'s).
    :param epoch: This epoch, from 1, of ``epochs``, the schedule's length.
    :param lr_max: The schedule's peak learning rate (0.2 in Wong et al. at batch 128).
    :param batch_size, momentum, weight_decay, augment: Images per step; SGD's momentum and weight decay; random
        crops and flips.
    :param seed: The run's seed.
    :param progress: A tqdm bar over the epoch's mini-batches (an epoch through a purifier takes an hour on a CPU).
    :param checkpoint: None, or a file where the epoch keeps its progress every ``every`` mini-batches and at its
        end (the weights, SGD's momentum, the ``generators``' states and its own, the running totals), so that a
        call for the same epoch resumes there, equal to an uninterrupted epoch (an epoch through a purifier outlasts
        a CPU session). A file of another epoch is overwritten, one of other settings refused; the caller deletes it
        once the epoch's outcome is saved.
    :param generators: Other generators the model draws from (a purifier's noise).
    :return: ``{"loss": mean training loss, "accuracy": training accuracy on x + δ}`` of the epoch.
    """
    number("eps", eps, low=0, low_open=True)
    epochs = positive_int("epochs", epochs)
    integer("epoch", epoch, low=1, high=epochs)
    alpha = 1.25 * eps if alpha is None else number("alpha", alpha, low=0, low_open=True)
    number("lr_max", lr_max, low=0, low_open=True)
    batch_size, every = positive_int("batch_size", batch_size), positive_int("every", every)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=momentum, weight_decay=weight_decay)
    order, batches = torch.randperm(len(xt), generator=generator), (len(xt) + batch_size - 1) // batch_size
    loss_sum, correct, start, generators = 0.0, 0, 0, (generator, *generators)
    settings = {"epoch": epoch, "epochs": epochs, "eps": eps, "alpha": alpha, "lr_max": lr_max, "seed": seed,
                "batch_size": batch_size, "momentum": momentum, "weight_decay": weight_decay, "augment": augment,
                "n": len(xt)}  # fmt: skip
    if checkpoint is not None and Path(checkpoint).exists():
        start, loss_sum, correct = _resume(checkpoint, settings, model, optimizer, generators)
    model.train()
    for b in tqdm(range(start, batches), disable=not progress, desc=f"epoch {epoch}/{epochs}", unit="batch",
                  initial=start, total=batches, leave=False):  # fmt: skip
        idx = order[b * batch_size : (b + 1) * batch_size]
        x_adv, yb = _fgsm_rs(model, xt[idx], yt[idx], eps, alpha, generator, augment)
        optimizer.param_groups[0]["lr"] = cyclic_lr(epoch - 1 + (b + 1) / batches, epochs, lr_max)  # one group
        logits = model(x_adv)
        loss = F.cross_entropy(logits, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(idx)
        correct += int((logits.argmax(1) == yb).sum())
        if checkpoint is not None and (b + 1 == batches or (b + 1) % every == 0):
            _keep(checkpoint, settings, b + 1, loss_sum, correct, model, optimizer, generators)
    model.eval()
    return {"loss": loss_sum / len(xt), "accuracy": correct / len(xt)}


def _fgsm_rs(model, xb, yb, eps: float, alpha: float, generator, augment: bool):
    """A mini-batch's training examples (on the model's device) and labels: augmented, then one FGSM step of
    ``alpha`` from a uniform start in the ε-ball (Wong et al.), projected back onto it and into [0, 1]."""
    device = next(model.parameters()).device
    if augment:
        xb = random_crop_flip(xb, generator)
    delta = (2 * torch.rand(xb.shape, generator=generator) - 1) * eps
    xb, yb = xb.to(device), yb.to(device)
    delta = ((xb + delta.to(device)).clamp(0, 1) - xb).requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(xb + delta), yb), delta)
    delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
    return (xb + delta).clamp(0, 1), yb


def _keep(path, settings: dict, batch: int, loss_sum: float, correct: int, model, optimizer, generators) -> None:
    """Write an epoch's progress after ``batch`` mini-batches to ``path``."""
    tensors = {**model.state_dict(), **optimizer_tensors(optimizer)}
    tensors.update({f"{TRAIN_PREFIX}generator/{i}": g.get_state() for i, g in enumerate(generators)})
    write_checkpoint(path, tensors, {"fgsm_rs_epoch": settings, "batch": batch, "loss_sum": loss_sum,
                                     "correct": correct})  # fmt: skip


def _resume(path, settings: dict, model, optimizer, generators) -> tuple[int, float, int]:
    """Restore an epoch's progress from ``path`` into the model, optimiser and generators: ``(batches done, loss
    sum, correct)``; ``(0, 0, 0)`` for a file of another epoch."""
    tensors, header = read_checkpoint(path)
    held = header.get("fgsm_rs_epoch") or {}
    if held.get("epoch") != settings["epoch"]:
        return 0, 0.0, 0
    if held != settings:
        raise ValueError(
            f"{path} holds an epoch of other settings ({held}, now {settings}): delete it to train this epoch anew."
        )
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)})
    restore_optimizer(optimizer, tensors)
    for i, g in enumerate(generators):
        g.set_state(tensors[f"{TRAIN_PREFIX}generator/{i}"])
    return int(header["batch"]), float(header["loss_sum"]), int(header["correct"])
