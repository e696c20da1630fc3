"""Score-network training: multi-level DSM with Adam and an EMA copy, atomic checkpoints, exact resume."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..serialization import TRAIN_PREFIX, read_checkpoint
from .checkpoint import save_score_model
from .augment import augment_targets
from .dsm import dsm_loss

__all__ = ["train_score_model", "large_batch_lr", "PRECISIONS"]

#: The ``precision`` values :func:`train_score_model` accepts, with their autocast dtype (``None``: plain fp32).
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

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
    # The kernel choice (fused on CUDA, foreach elsewhere) follows the device of this run, not the checkpoint's.
    kernel = ("foreach", "fused", "capturable", "differentiable")
    groups = [
        {**g, **{k: now[k] for k in kernel if k in now}}
        for g, now in zip(header["train"]["param_groups"], opt.param_groups)
    ]
    opt.load_state_dict({"state": state, "param_groups": groups})
    gen.set_state(tensors[f"{TRAIN_PREFIX}rng"])
    return int(header["step"])


def large_batch_lr(batch_size: int, *, base_lr: float = 1e-3, base_batch_size: int = 128, rule: str = "sqrt") -> float:
    """
    Learning rate for a batch larger (or smaller) than the paper's, by square-root scaling.

    The ADP paper trains with Adam at lr 1e-3 and batch 128 (Appendix A). Adam's update is normalised per
    coordinate, so the linear rule of SGD over-shoots; the square-root rule lr = base_lr·√(B / B₀) keeps the
    variance of one epoch's worth of updates constant (Malladi et al., NeurIPS 2022, "On the SDEs and scaling
    rules for adaptive gradient algorithms"). Use it with a linear warm-up (``lr_warmup`` of
    :func:`train_score_model`, e.g. 500 steps) once the batch is ≥ 4× the paper's: the first steps at the full
    rate move the freshly initialised network furthest. :func:`train_score_model`'s ``lr`` is *not* scaled
    for you; its default stays the paper's 1e-3 whatever the batch.

    :param batch_size: The batch of the run (all ranks together when distributed).
    :param base_lr: The learning rate tuned at ``base_batch_size`` (the paper's 1e-3).
    :param base_batch_size: The batch ``base_lr`` was tuned at (the paper's 128).
    :param rule: ``"sqrt"`` (the rule above), ``"linear"`` (lr ∝ B, for SGD-like optimisers) or ``"none"``.
    :return: The learning rate, e.g. 2e-3 at batch 512 and 4e-3 at batch 2,048 with the defaults.
    """
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
    if int(base_batch_size) != base_batch_size or base_batch_size < 1:
        raise ValueError(f"base_batch_size must be a positive integer, got {base_batch_size}.")
    if not math.isfinite(base_lr) or base_lr <= 0:
        raise ValueError(f"base_lr must be positive, got {base_lr}.")
    powers = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}
    if rule not in powers:
        raise ValueError(f"rule must be 'sqrt', 'linear' or 'none', got {rule!r}.")
    return float(base_lr * (batch_size / base_batch_size) ** powers[rule])


class _Writer:
    """
    One checkpoint write at a time in a background thread, so that training goes on while the file is written.

    :meth:`submit` waits for the previous write first (re-raising its error, if any); :meth:`join` waits for
    the pending one. The tensors a write receives must already be private copies on the CPU.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as err:  # re-raised by join()
            self._error = err

    def submit(self, fn: Callable[[], None]) -> None:
        self.join()
        self._thread = threading.Thread(target=self._run, args=(fn,), name="art-adp checkpoint", daemon=False)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def _check_speed_args(precision, lr, lr_warmup, log_every, **flags) -> None:
    """Refuse bad values of :func:`train_score_model`'s speed options with a message naming the fix."""
    if precision == "fp16":
        raise ValueError(
            "precision='fp16' is not supported: fp16 needs loss scaling (a GradScaler, whose skipped steps the EMA "
            "and the exact resume would have to follow). Use precision='bf16' (the same tensor-core speed, fp32's "
            "exponent range, no scaling) or 'fp32'."
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}.")
    compiled = flags.pop("compile")
    if not (isinstance(compiled, bool) or compiled in _COMPILE_MODES):
        raise ValueError(
            f"compile must be True, False or a torch.compile mode in {list(_COMPILE_MODES)}, got {compiled!r}."
        )
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}.")
    if int(lr_warmup) != lr_warmup or lr_warmup < 0:
        raise ValueError(f"lr_warmup must be a non-negative integer (steps), got {lr_warmup}.")
    if int(log_every) != log_every or log_every < 1:
        raise ValueError(f"log_every must be a positive integer (steps), got {log_every}.")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive number, got {lr}.")


def _check_resumable(checkpoint_path, *, augment, precision) -> None:
    """Refuse to resume from a checkpoint trained with other arithmetic (augmentation, precision)."""
    held = read_checkpoint(checkpoint_path)[1].get("train") or {}
    was = held.get("precision", "fp32")  # checkpoints from before the option were all fp32
    if held.get("augment") != augment:
        raise ValueError(
            f"Cannot resume from {checkpoint_path}: it was trained with augment={held.get('augment')!r}, not "
            f"{augment!r}. Use another checkpoint_path or resume=False."
        )
    if was != precision:
        raise ValueError(
            f"Cannot resume from {checkpoint_path}: it was trained with precision={was!r}, not {precision!r}; "
            f"switching changes the arithmetic of every later step. Resume with precision={was!r}, or use another "
            "checkpoint_path or resume=False."
        )


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
    precision: str = "fp32",
    channels_last: bool = False,
    compile: bool | str = False,  # pylint: disable=redefined-builtin  # the name of the lever, as torch calls it
    lr_warmup: int = 0,
    log_every: int = 50,
    async_checkpoint: bool = True,
) -> ModuleT:
    """
    Train a noise-level-free score network h by multi-level denoising score matching (:func:`dsm_loss`), or a
    σ-conditional denoiser ``D(x̃, σ)`` (a model with ``sigma_conditional = True``, e.g.
    :class:`~art_adp.DenoiserUNet`) by the same loss with h = (D − x̃)/σ.

    Adam(lr, β = (0.9, 0.999), no weight decay) as in the ADP paper's Appendix A; an exponential moving
    average (EMA) of the weights is kept and *returned* -- purification should use it (the authors' released
    code trained an EMA but never loaded it). Batches, noise levels, noise and flips are drawn from one
    ``torch.Generator`` seeded by ``seed``; its state is checkpointed, so an interrupted and resumed run
    reproduces an uninterrupted one exactly.

    Speed (what a GPU needs; each lever is tested against the plain path): the data and every random draw
    live on ``device``; Adam is ``fused`` on CUDA (``foreach`` elsewhere); nothing reads a device value back to
    the host during a step (the loss for the bar is summed on the device and read every ``log_every`` steps);
    checkpoints are copied to the CPU and written by a background thread while training goes on (one write
    at a time, atomic as before, waited for before this function returns or re-raises). ``precision="bf16"``
    runs the forward and the loss under ``torch.autocast(dtype=torch.bfloat16)``; the weights, gradients,
    Adam moments and the EMA stay fp32 (no loss scaling is needed: bf16 has fp32's exponent range).
    ``precision="fp16"`` is refused: it would need a GradScaler, whose skipped steps the EMA and the exact
    resume would have to follow.
    The whole step is not captured as one CUDA graph: the generator's draws, the EMA's step-dependent decay and
    the learning-rate warm-up are host-side values that a captured graph would freeze, so that is not trivially
    safe. The network's forward and backward alone can be: ``compile="reduce-overhead"`` (torch.compile's CUDA
    graphs; the step's outputs are used before the next replay, as that mode requires).

    Resume: the checkpoint holds fp32 master weights, Adam moments, the EMA and the generator state exactly, in
    every precision. So a run resumed with the same settings reproduces the uninterrupted run bit for bit
    wherever the kernels are deterministic: fp32 and bf16 on CPU (both tested); on CUDA only with
    deterministic algorithms (``torch.use_deterministic_algorithms``), since cuDNN's convolution backward may
    sum in a varying order. What is *not* bit-identical: a bf16 run and an fp32 run (they differ by bf16
    rounding and track each other within the tested tolerance); a resume that switches ``channels_last`` or
    ``compile`` (other kernels for the same arithmetic: float rounding, allowed); a resume that switches
    ``precision`` is refused (other arithmetic), as is one that changes ``augment``.

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
    :param lr: Adam learning rate (the paper's 1e-3 by default, whatever the batch; for large batches see
        :func:`large_batch_lr`).
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
    :param precision: ``"fp32"`` (default) or ``"bf16"``: the arithmetic of the forward pass and the loss
        (autocast); master weights, optimiser and EMA are fp32 either way. Recorded in the checkpoint.
    :param channels_last: Keep the network's weights (and the batches) in ``torch.channels_last`` memory
        format while training -- faster convolutions on tensor cores; the same maths. The returned networks
        are back in the ordinary format.
    :param compile: Run the network through ``torch.compile``: ``True`` (its default mode) or a mode name,
        ``"reduce-overhead"`` (CUDA graphs), ``"max-autotune"`` or ``"max-autotune-no-cudagraphs"``. The
        checkpoint keeps the plain module's state-dict names; the first steps pay the compilation.
    :param lr_warmup: Steps of linear learning-rate warm-up, lr·(k + 1)/``lr_warmup`` at step k (0: none, the
        default). Derived from the step, so resume stays exact.
    :param log_every: Steps between reads of the loss for the progress bar (each read waits for the device);
        the bar shows an exponential average of the mean loss of each window.
    :param async_checkpoint: Write checkpoints in a background thread (default) rather than in the step; the
        files are the same bit for bit.
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
    _check_speed_args(
        precision,
        lr,
        lr_warmup,
        log_every,
        channels_last=channels_last,
        compile=compile,
        async_checkpoint=async_checkpoint,
    )
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).train()
    if channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    x = _as_data(x_train, device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    sigmas = torch.as_tensor(sigmas, dtype=torch.float32).to(device)
    if sigmas.ndim != 1 or sigmas.numel() == 0 or not (sigmas > 0).all():
        raise ValueError("sigmas must be a non-empty 1-D sequence of positive noise levels.")

    if distributed:  # rank 0's initial weights everywhere (DDP broadcasts them), before the EMA copies them
        for tensor in model.state_dict().values():
            dist.broadcast(tensor.data, 0)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    ema_params: list[torch.Tensor] = list(ema.parameters())
    params: list[torch.Tensor] = list(model.parameters())
    fast = {"fused": True} if device.type == "cuda" else {"foreach": True}
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0, **fast)
    gen = torch.Generator(device=device)
    seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, ()).item())
    if distributed:  # one seed for all ranks: they draw the same global batches
        seed_t = torch.tensor([seed], dtype=torch.long, device=device)
        dist.broadcast(seed_t, 0)
        seed = int(seed_t.item())
    gen.manual_seed(seed)
    step = 0
    if checkpoint_path is not None and resume and Path(checkpoint_path).exists():
        _check_resumable(checkpoint_path, augment=augment, precision=precision)
        step = _restore(checkpoint_path, model, ema, opt, gen, sigmas)
    net: torch.nn.Module = model
    if distributed:
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if compile:
        mode = None if compile is True else str(compile)
        net = cast(torch.nn.Module, torch.compile(net, mode=mode))  # saved and returned: `model`, not the wrapper
    shard = (rank, world) if distributed else None
    global_batch = batch_size * world
    dtype = PRECISIONS[precision]
    denoiser = bool(getattr(model, "sigma_conditional", False))  # D(x̃, σ) rather than h(x̃): see dsm_loss
    sigmas_cpu = sigmas.cpu()

    def autocast() -> contextlib.AbstractContextManager:
        return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    writer = _Writer()
    ema_cpu: torch.nn.Module | None = None  # the EMA snapshot a background write reads

    def save(wait: bool = False) -> None:
        nonlocal ema_cpu
        if checkpoint_path is None or rank != 0:
            return
        writer.join()  # the previous write is done: its snapshot may be overwritten
        if ema_cpu is None:
            ema_cpu = copy.deepcopy(ema).to("cpu")
        ema_cpu.load_state_dict(ema.state_dict())  # copies (to the CPU): training may go on
        tensors, groups = _state_tensors(model, opt, gen)
        tensors = {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}
        groups = copy.deepcopy(groups)
        train = {"param_groups": groups, "batch_size": batch_size, "ema_decay": ema_decay, "hflip": hflip}
        if augment is not None:
            train["augment"] = augment
        train.update({"precision": precision, "channels_last": channels_last, "compile": compile})
        snapshot, at = ema_cpu, step

        def write() -> None:
            save_score_model(snapshot, checkpoint_path, sigmas=sigmas_cpu, step=at, tensors=tensors, train=train)

        if async_checkpoint and not wait:
            writer.submit(write)
        else:
            write()

    start_step = step
    progress = progress and rank == 0
    pbar = tqdm(total=iterations, initial=step, disable=not progress, desc="train score", dynamic_ncols=True)
    running = None
    loss_sum = torch.zeros((), device=device)
    window = 0
    try:
        while step < iterations:
            if lr_warmup and step <= lr_warmup:
                for group in opt.param_groups:
                    group["lr"] = lr * min(1.0, (step + 1) / lr_warmup)
            if compile in {"reduce-overhead", "max-autotune"}:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
            xb = x[torch.randint(x.shape[0], (global_batch,), generator=gen, device=device)]
            if hflip:
                flip = torch.rand(global_batch, generator=gen, device=device) < 0.5
                xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
            aug = augment_targets(xb, augment, gen) if augment is not None else {}
            with autocast():
                loss = dsm_loss(net, xb, sigmas, generator=gen, shard=shard, denoiser=denoiser, **aug)
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
            if progress:
                loss_sum += loss.detach().float()  # on the device: no wait for the step to finish
                window += 1
                if window == log_every or step == iterations:
                    value = loss_sum.item() / window  # the one host read per window
                    running = value if running is None else 0.9 * running + 0.1 * value
                    pbar.set_postfix(loss=f"{running:.4g}")
                    loss_sum.zero_()
                    window = 0
            if step % checkpoint_every == 0 and step < iterations:
                save()
    except KeyboardInterrupt:
        save(wait=True)
        raise
    finally:
        pbar.close()
        writer.join()  # also when training failed: no write outlives the call
    if step > start_step or (checkpoint_path is not None and not Path(checkpoint_path).exists()):
        save(wait=True)
    if distributed:
        dist.barrier()  # the checkpoint is on disk before any rank goes on (e.g. to resume from it)
    if channels_last:
        model.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
        ema.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
    setattr(ema, "training_info", {"sigmas": sigmas.tolist(), "step": step})  # not a tensor
    return ema
