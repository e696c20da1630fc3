"""Score-network training: multi-level DSM with Adam and an EMA copy, atomic checkpoints, exact resume."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..serialization import TRAIN_PREFIX, read_checkpoint
from .checkpoint import save_score_model
from .augment import augment_targets
from .dsm import dsm_loss

__all__ = ["train_score_model"]

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)  # the network type, returned as its EMA copy


def _as_data(x_train, device) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x_train) if not isinstance(x_train, torch.Tensor) else x_train)
    if x.ndim != 4 or x.shape[0] == 0:
        raise ValueError(f"x_train must be a non-empty N×C×H×W array, got shape {tuple(x.shape)}.")
    if not torch.is_floating_point(x):
        raise ValueError(f"x_train must be floating point in [0, 1], got dtype {x.dtype}; divide by 255 first.")
    if not torch.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise ValueError("x_train must be finite and lie in [0, 1] (scale 0-255 images by 1/255).")
    return x.to(device=device, dtype=torch.float32)


def _state_tensors(model, opt, gen) -> tuple[dict[str, torch.Tensor], list]:
    tensors = {f"{TRAIN_PREFIX}model/{k}": v for k, v in model.state_dict().items()}
    osd = opt.state_dict()
    for i, state in osd["state"].items():
        for name, value in state.items():
            tensors[f"{TRAIN_PREFIX}optim/{i}/{name}"] = torch.as_tensor(value)
    tensors[f"{TRAIN_PREFIX}rng"] = gen.get_state()
    return tensors, osd["param_groups"]


def _restore(path, model, ema, opt, gen, sigmas) -> int:
    tensors, header = read_checkpoint(path)
    if header.get("config") != dict(model.config) or header.get("architecture") != type(model).__name__:
        raise ValueError(
            f"Cannot resume from {path}: it holds {header.get('architecture')}({header.get('config')}), not "
            f"{type(model).__name__}({model.config}). Use another checkpoint_path or resume=False."
        )
    if not np.allclose(header.get("sigmas") or [], sigmas.tolist()):
        raise ValueError(f"Cannot resume from {path}: it was trained with other sigmas. Use resume=False.")
    if "train" not in header:
        raise ValueError(f"Cannot resume from {path}: it holds weights only, no training state.")
    pre = f"{TRAIN_PREFIX}model/"
    model.load_state_dict({k[len(pre) :]: v for k, v in tensors.items() if k.startswith(pre)})
    ema.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)})
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith(f"{TRAIN_PREFIX}optim/"):
            i, name = k.split("/")[2:]
            state.setdefault(int(i), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": header["train"]["param_groups"]})
    gen.set_state(tensors[f"{TRAIN_PREFIX}rng"])
    return int(header["step"])


def train_score_model(
    model: ModuleT,
    x_train,
    sigmas,
    iterations: int,
    batch_size: int = 128,
    lr: float = 1e-3,
    ema_decay: float = 0.999,
    checkpoint_path: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int | None = None,
    progress: bool = True,
    *,
    hflip: bool = False,
    checkpoint_every: int = 500,
    device: str | torch.device | None = None,
    augment: str | None = None,
) -> ModuleT:
    """
    Train a noise-level-free score network h by multi-level denoising score matching (:func:`dsm_loss`).

    Adam(lr, β = (0.9, 0.999), no weight decay) as in the ADP paper's Appendix A; an exponential moving
    average (EMA) of the weights is kept and *returned* -- purification should use it (the authors' released
    code trained an EMA but never loaded it). Batches, noise levels, noise and flips are drawn from one
    ``torch.Generator`` seeded by ``seed``; its state is checkpointed, so an interrupted and resumed run
    reproduces an uninterrupted one exactly.

    Data-parallel training: when ``torch.distributed`` is initialised (e.g. under ``torchrun
    --nproc_per_node=N``; one process per GPU, ``gloo`` on CPU), the model is wrapped in
    ``DistributedDataParallel``. Every rank draws the same global batch of ``batch_size × world_size`` (same
    generator, seed broadcast from rank 0) and evaluates its own slice; DDP averages the gradients, so W ranks
    with ``batch_size`` each take the steps one process would take on the concatenated batch (to float
    rounding of the all-reduce). Rank 0 alone writes the checkpoint and shows progress; every rank resumes
    from it.

    :param model: The network, e.g. :class:`~art_adp.NCSNv2`; trained in place (raw, non-EMA weights).
    :param x_train: Training images, ``N×C×H×W`` float in [0, 1] (numpy array or tensor).
    :param sigmas: Decreasing 1-D noise schedule, e.g. :func:`~art_adp.geometric_sigmas`.
    :param iterations: Total number of optimiser steps (a resumed run continues up to this count).
    :param batch_size: Samples per step (per rank when distributed), drawn uniformly with replacement.
    :param lr: Adam learning rate.
    :param ema_decay: EMA decay in [0, 1): after step k, ema ← d·ema + (1 − d)·weights with
        d = min(ema_decay, (1 + k)/(10 + k)) -- the usual warm-up, so a short run's EMA is not dominated by
        its initial weights (at 0.999 without it, 55 % of the EMA would still be the initialisation after
        600 steps).
    :param checkpoint_path: A ``.safetensors`` file written atomically every ``checkpoint_every`` steps, at the
        end, and on KeyboardInterrupt. Loadable by :func:`~art_adp.load_score_model` (as the EMA network).
    :param resume: Continue from ``checkpoint_path`` if it exists (step count, weights, EMA, optimiser, RNG).
    :param seed: Seed of the training generator (default: drawn from torch's global generator).
    :param progress: Show a tqdm bar with the running loss.
    :param hflip: Randomly flip images horizontally (the paper does for CIFAR, not for MNIST/FMNIST).
    :param checkpoint_every: Steps between checkpoints.
    :param device: Training device (default: the model's).
    :param augment: ``None`` (plain DSM), ``"dct"`` or ``"augmix"``: the ADP paper's augmented DSM for common
        corruptions, x̃ ~ N(F(x), σ²I) with target x (DCT) or the midpoint (x + F(x))/2 (AugMix); see
        :mod:`art_adp.score.augment`. Pass σ_L ×10 in ``sigmas`` as the paper does. Its draws come from the
        training generator, so resume stays exact.
    :return: The EMA network in eval mode, with ``training_info = {"sigmas": [...], "step": n}``.
    """
    if int(iterations) != iterations or iterations < 0:
        raise ValueError(f"iterations must be a non-negative integer, got {iterations}.")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
    if not 0 <= ema_decay < 1:
        raise ValueError(f"ema_decay must lie in [0, 1), got {ema_decay}.")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}.")
    if augment not in (None, "dct", "augmix"):
        raise ValueError(f"augment must be None, 'dct' or 'augmix', got {augment!r}.")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).train()
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    x = _as_data(x_train, device)
    sigmas = torch.as_tensor(sigmas, dtype=torch.float32).to(device)
    if sigmas.ndim != 1 or sigmas.numel() == 0 or not (sigmas > 0).all():
        raise ValueError("sigmas must be a non-empty 1-D sequence of positive noise levels.")

    if distributed:  # rank 0's initial weights everywhere (DDP broadcasts them), before the EMA copies them
        for tensor in model.state_dict().values():
            dist.broadcast(tensor.data, 0)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    ema_params: list[torch.Tensor] = list(ema.parameters())
    params: list[torch.Tensor] = list(model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0, foreach=True)
    gen = torch.Generator(device=device)
    seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, ()).item())
    if distributed:  # one seed for all ranks: they draw the same global batches
        seed_t = torch.tensor([seed], dtype=torch.long, device=device)
        dist.broadcast(seed_t, 0)
        seed = int(seed_t.item())
    gen.manual_seed(seed)
    step = 0
    if checkpoint_path is not None and resume and Path(checkpoint_path).exists():
        held = (read_checkpoint(checkpoint_path)[1].get("train") or {}).get("augment")
        if held != augment:
            raise ValueError(
                f"Cannot resume from {checkpoint_path}: it was trained with augment={held!r}, not "
                f"{augment!r}. Use another checkpoint_path or resume=False."
            )
        step = _restore(checkpoint_path, model, ema, opt, gen, sigmas)
    net: torch.nn.Module = model
    if distributed:
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    shard = (rank, world) if distributed else None
    global_batch = batch_size * world

    def save() -> None:
        if checkpoint_path is None or rank != 0:
            return
        tensors, groups = _state_tensors(model, opt, gen)
        train = {"param_groups": groups, "batch_size": batch_size, "ema_decay": ema_decay, "hflip": hflip}
        if augment is not None:
            train["augment"] = augment
        save_score_model(ema, checkpoint_path, sigmas=sigmas, step=step, tensors=tensors, train=train)

    start_step = step
    progress = progress and rank == 0
    pbar = tqdm(total=iterations, initial=step, disable=not progress, desc="train score", dynamic_ncols=True)
    running = None
    try:
        while step < iterations:
            xb = x[torch.randint(x.shape[0], (global_batch,), generator=gen, device=device)]
            if hflip:
                flip = torch.rand(global_batch, generator=gen, device=device) < 0.5
                xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
            aug = augment_targets(xb, augment, gen) if augment is not None else {}
            loss = dsm_loss(net, xb, sigmas, generator=gen, shard=shard, **aug)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                decay = min(ema_decay, (1 + step) / (10 + step))  # warm-up: early weights fade fast
                torch._foreach_lerp_(ema_params, params, 1 - decay)
                for e, b in zip(ema.buffers(), model.buffers()):
                    e.copy_(b)
            step += 1
            pbar.update(1)
            if progress and (step % 10 == 0 or step == iterations):
                value = loss.item()
                running = value if running is None else 0.9 * running + 0.1 * value
                pbar.set_postfix(loss=f"{running:.4g}")
            if step % checkpoint_every == 0 and step < iterations:
                save()
    except KeyboardInterrupt:
        save()
        raise
    finally:
        pbar.close()
    if step > start_step or (checkpoint_path is not None and not Path(checkpoint_path).exists()):
        save()
    if distributed:
        dist.barrier()  # the checkpoint is on disk before any rank goes on (e.g. to resume from it)
    setattr(ema, "training_info", {"sigmas": sigmas.tolist(), "step": step})  # not a tensor
    return ema
