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
from art_adp.serialization import TRAIN_PREFIX, read_checkpoint, write_checkpoint

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

With a ``checkpoint`` file the epoch also resumes within itself: every ``every`` mini-batches, and once at its end,
the file takes the weights, SGD's momentum, the generators' states and the running totals, and a call for the same
epoch picks up from there (an epoch through a purifier outlasts a CPU session), equal to an uninterrupted epoch. A
file of another epoch is overwritten; one of other settings is refused. The caller deletes it once the epoch's
outcome is saved.

    :param model: A classifier of [0, 1] images ``N×C×H×W``, trained on the device of its parameters.
    :param x: Training images in [0, 1]; ``y`` their integer labels.
    :param eps: ℓ∞ radius of the training attack.
    :param epoch: This epoch, from 1.
    :param epochs: The schedule's length in epochs.
    :param alpha: FGSM step (None: 1.25 ε, Wong et al.'s).
    :param lr_max: The schedule's peak learning rate (0.2 in Wong et al. at batch 128).
    :param batch_size: Images per step.
    :param momentum: SGD momentum.
    :param weight_decay: SGD weight decay.
    :param augment: Random crops and flips.
    :param seed: The run's seed.
    :param progress: A tqdm bar over the epoch's mini-batches (an epoch through a purifier takes an hour on a CPU).
    :param checkpoint: Where the epoch keeps its progress (a safetensors file), or None.
    :param every: Mini-batches between two writes of ``checkpoint``.
    :param generators: Other generators the model draws from (a purifier's noise), kept in ``checkpoint`` too.
    :return: ``{"loss": mean training loss, "accuracy": training accuracy on x + δ}`` of the epoch.
    """
    number("eps", eps, low=0, low_open=True)
    epochs = positive_int("epochs", epochs)
    integer("epoch", epoch, low=1, high=epochs)
    alpha = 1.25 * eps if alpha is None else number("alpha", alpha, low=0, low_open=True)
    number("lr_max", lr_max, low=0, low_open=True)
    batch_size = positive_int("batch_size", batch_size)
    every = positive_int("every", every)
    device = next(model.parameters()).device
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=momentum, weight_decay=weight_decay)
    order = torch.randperm(len(xt), generator=generator)
    batches = (len(xt) + batch_size - 1) // batch_size
    loss_sum, correct, start = 0.0, 0, 0
    settings = {"epoch": epoch, "epochs": epochs, "eps": eps, "alpha": alpha, "lr_max": lr_max, "batch_size": batch_size,
                "momentum": momentum, "weight_decay": weight_decay, "augment": augment, "seed": seed, "n": len(xt)}  # fmt: skip
    generators = (generator, *generators)
    if checkpoint is not None and Path(checkpoint).exists():
        start, loss_sum, correct = _resume(checkpoint, settings, model, optimizer, generators)
    model.train()
    for b in tqdm(range(start, batches), disable=not progress, desc=f"epoch {epoch}/{epochs}", unit="batch",
                  initial=start, total=batches, leave=False):  # fmt: skip
        idx = order[b * batch_size : (b + 1) * batch_size]
        xb, yb = xt[idx], yt[idx]
        if augment:
            xb = random_crop_flip(xb, generator)
        delta = (2 * torch.rand(xb.shape, generator=generator) - 1) * eps
        xb, yb = xb.to(device), yb.to(device)
        delta = ((xb + delta.to(device)).clamp(0, 1) - xb).requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(model(xb + delta), yb), delta)
        delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
        x_adv = (xb + delta).clamp(0, 1)
        for group in optimizer.param_groups:
            group["lr"] = cyclic_lr(epoch - 1 + (b + 1) / batches, epochs, lr_max)
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


def _keep(path, settings: dict, batch: int, loss_sum: float, correct: int, model, optimizer, generators) -> None:
    """Write an epoch's progress after ``batch`` mini-batches to ``path``."""
    tensors = dict(model.state_dict())
    for i, state in optimizer.state_dict()["state"].items():
        tensors.update({f"{TRAIN_PREFIX}optim/{i}/{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
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
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith(f"{TRAIN_PREFIX}optim/"):
            i, name = k.split("/")[2:]
            state.setdefault(int(i), {})[name] = v
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})
    for i, g in enumerate(generators):
        g.set_state(tensors[f"{TRAIN_PREFIX}generator/{i}"])
    return int(header["batch"]), float(header["loss_sum"]), int(header["correct"])
