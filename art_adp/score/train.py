"""Score-network training: multi-level DSM with Adam and an EMA copy, atomic checkpoints, exact resume.

:func:`train_score_model` is the entry point; its options past the data are declared once, with their checks, in
:class:`TrainOptions`; one call is one :class:`_Training` (set-up, the step, checkpoints, the loop).

Speed (what a GPU needs; each lever is tested against the plain path): the data and every random draw live on the
training device; Adam is ``fused`` on CUDA (``foreach`` elsewhere); nothing reads a device value back to the host
during a step (the loss for the bar is summed on the device and read every ``log_every`` steps); checkpoints are
copied to the CPU and written by a background thread while training goes on (one write at a time, atomic, waited
for before :func:`train_score_model` returns or re-raises). ``precision="bf16"`` runs the forward and the loss under
``torch.autocast(dtype=torch.bfloat16)``; the weights, gradients, Adam moments and the EMA stay fp32 (no loss
scaling is needed: bf16 has fp32's exponent range). ``precision="fp16"`` is refused: it would need a GradScaler,
whose skipped steps the EMA and the exact resume would have to follow. The whole step is not captured as one CUDA
graph: the generator's draws, the EMA's step-dependent decay and the learning-rate warm-up are host-side values that
a captured graph would freeze. The network's forward and backward alone can be: ``compile="reduce-overhead"``
(torch.compile's CUDA graphs; the step's outputs are used before the next replay, as that mode requires).

Resume: the checkpoint holds fp32 master weights, Adam moments, the EMA and the generator state exactly, in every
precision. So a run resumed with the same settings reproduces the uninterrupted run bit for bit wherever the
kernels are deterministic: fp32 and bf16 on CPU (both tested); on CUDA only with deterministic algorithms
(``torch.use_deterministic_algorithms``), since cuDNN's convolution backward may sum in a varying order. What is
*not* bit-identical: a bf16 run and an fp32 run (they differ by bf16 rounding and track each other within the
tested tolerance); a resume that switches ``channels_last`` or ``compile`` (other kernels for the same arithmetic:
float rounding, allowed); a resume that switches ``precision`` is refused (other arithmetic), as is one that changes
``augment``.

Data-parallel training: when ``torch.distributed`` is initialised (e.g. under ``torchrun --nproc_per_node=N``; one
process per GPU, ``gloo`` on CPU), the model is wrapped in ``DistributedDataParallel``. Every rank draws the same
global batch of ``batch_size × world_size`` (same generator, seed broadcast from rank 0) and evaluates its own
slice; DDP averages the gradients, so W ranks with ``batch_size`` each take the steps one process would take on the
concatenated batch (to float rounding of the all-reduce). Rank 0 alone writes the checkpoint and shows progress;
every rank resumes from it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
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

__all__ = ["train_score_model", "large_batch_lr", "PRECISIONS", "TrainOptions", "TRAIN_DEFAULTS"]

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
    for group in opt.param_groups:  # the moments in each parameter's memory format (fused Adam requires it)
        for param in group["params"]:
            held = opt.state[param]
            for name, value in held.items():
                if isinstance(value, torch.Tensor) and value.shape == param.shape:
                    held[name] = torch.empty_like(param, dtype=value.dtype).copy_(value)
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


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """
    The options of :func:`train_score_model` past the data, declared once: their defaults (the ADP paper's
    Appendix A where it states them) and their checks (:meth:`check`). :func:`train_score_model` documents each.
    """

    batch_size: int = 128
    lr: float = 1e-3
    ema_decay: float = 0.999
    checkpoint_path: str | os.PathLike | None = None
    resume: bool = True
    seed: int | None = None
    progress: bool = True
    hflip: bool = False
    checkpoint_every: int = 500
    device: str | torch.device | None = None
    augment: str | None = None
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool | str = False
    lr_warmup: int = 0
    log_every: int = 50
    async_checkpoint: bool = True
    clip_noise: bool = False

    def check(self) -> "TrainOptions":
        """
        :return: ``self``, once every option is valid.
        :raises ValueError: Naming the option, the value given and the fix.
        """
        if int(self.batch_size) != self.batch_size or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size}.")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must lie in [0, 1), got {self.ema_decay}.")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every}.")
        if self.augment not in (None, "dct", "augmix"):
            raise ValueError(f"augment must be None, 'dct' or 'augmix', got {self.augment!r}.")
        if self.precision == "fp16":
            raise ValueError(
                "precision='fp16' is not supported: fp16 needs loss scaling (a GradScaler, whose skipped steps the "
                "EMA and the exact resume would have to follow). Use precision='bf16' (the same tensor-core speed, "
                "fp32's exponent range, no scaling) or 'fp32'."
            )
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}.")
        if not (isinstance(self.compile, bool) or self.compile in _COMPILE_MODES):
            raise ValueError(
                f"compile must be True, False or a torch.compile mode in {list(_COMPILE_MODES)}, got {self.compile!r}."
            )
        for name in ("channels_last", "async_checkpoint", "clip_noise"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if int(self.lr_warmup) != self.lr_warmup or self.lr_warmup < 0:
            raise ValueError(f"lr_warmup must be a non-negative integer (steps), got {self.lr_warmup}.")
        if int(self.log_every) != self.log_every or self.log_every < 1:
            raise ValueError(f"log_every must be a positive integer (steps), got {self.log_every}.")
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(f"lr must be a positive number, got {self.lr}.")
        return self


TRAIN_DEFAULTS = TrainOptions()
TRAIN_OPTIONS = tuple(f.name for f in dataclasses.fields(TrainOptions))


def _check_resumable(checkpoint_path, *, augment, precision, clip_noise=False) -> None:
    """Refuse to resume from a checkpoint trained with other arithmetic (augmentation, precision, clipped noise)."""
    held = read_checkpoint(checkpoint_path)[1].get("train") or {}
    if bool(held.get("clip_noise", False)) != clip_noise:
        raise ValueError(
            f"Cannot resume from {checkpoint_path}: it was trained with clip_noise={bool(held.get('clip_noise'))}, "
            f"not {clip_noise}. Use another checkpoint_path or resume=False."
        )
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


def _as_sigmas(sigmas, device) -> torch.Tensor:
    sigmas = torch.as_tensor(sigmas, dtype=torch.float32).to(device)
    if sigmas.ndim != 1 or sigmas.numel() == 0 or not (sigmas > 0).all():
        raise ValueError("sigmas must be a non-empty 1-D sequence of positive noise levels.")
    return sigmas


def _generator(seed: int | None, device: torch.device, distributed: bool) -> torch.Generator:
    """The training generator on ``device``, seeded by ``seed`` (drawn if None; rank 0's under torch.distributed)."""
    seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, ()).item())
    if distributed:  # one seed for all ranks: they draw the same global batches
        seed_t = torch.tensor([seed], dtype=torch.long, device=device)
        dist.broadcast(seed_t, 0)
        seed = int(seed_t.item())
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


class _LossBar:
    """The progress bar: an exponential average of the mean loss of each window of ``log_every`` steps, read from
    the device once per window."""

    def __init__(self, total: int, initial: int, *, enabled: bool, log_every: int, device: torch.device) -> None:
        self.pbar = tqdm(total=total, initial=initial, disable=not enabled, desc="train score", dynamic_ncols=True)
        self.enabled, self.log_every, self.window = enabled, log_every, 0
        self.running: float | None = None
        self.loss_sum = torch.zeros((), device=device)

    def update(self, loss: torch.Tensor, *, last: bool) -> None:
        self.pbar.update(1)
        if not self.enabled:
            return
        self.loss_sum += loss.detach().float()  # on the device: no wait for the step to finish
        self.window += 1
        if self.window == self.log_every or last:
            value = self.loss_sum.item() / self.window  # the one host read per window
            self.running = value if self.running is None else 0.9 * self.running + 0.1 * value
            self.pbar.set_postfix(loss=f"{self.running:.4g}")
            self.loss_sum.zero_()
            self.window = 0

    def close(self) -> None:
        self.pbar.close()


class _Training:
    """One call of :func:`train_score_model`: the run's state (network, EMA, optimiser, generator, step) and its
    parts -- set-up, one optimiser step, a checkpoint, the loop."""

    def __init__(self, model: torch.nn.Module, x_train, sigmas, iterations: int, options: TrainOptions) -> None:
        if int(iterations) != iterations or iterations < 0:
            raise ValueError(f"iterations must be a non-negative integer, got {iterations}.")
        o = self.o = options.check()
        device = self.device = torch.device(o.device) if o.device is not None else next(model.parameters()).device
        self.model, self.iterations = model.to(device).train(), iterations
        if o.channels_last:
            model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if self.distributed else (0, 1)
        x = _as_data(x_train, device)
        self.x = x.contiguous(memory_format=torch.channels_last) if o.channels_last else x
        self.sigmas = _as_sigmas(sigmas, device)
        if self.distributed:  # rank 0's initial weights everywhere (DDP broadcasts them), before the EMA copies them
            for tensor in model.state_dict().values():
                dist.broadcast(tensor.data, 0)
        self.ema = copy.deepcopy(model).eval().requires_grad_(False)
        self.ema_params: list[torch.Tensor] = list(self.ema.parameters())
        self.params: list[torch.Tensor] = list(model.parameters())
        fast = {"fused": True} if device.type == "cuda" else {"foreach": True}
        self.opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=(0.9, 0.999), weight_decay=0.0, **fast)
        self.gen = _generator(o.seed, device, self.distributed)
        self.step = 0
        if o.checkpoint_path is not None and o.resume and Path(o.checkpoint_path).exists():
            _check_resumable(o.checkpoint_path, augment=o.augment, precision=o.precision, clip_noise=o.clip_noise)
            self.step = _restore(o.checkpoint_path, model, self.ema, self.opt, self.gen, self.sigmas)
        self.net = self._wrapped()
        self.writer = _Writer()
        self.ema_cpu: torch.nn.Module | None = None  # the EMA snapshot a background write reads

    def _wrapped(self) -> torch.nn.Module:
        """The network the step calls: ``model``, under DDP when distributed, compiled on request (saved and
        returned is ``model``, never the wrapper)."""
        net: torch.nn.Module = self.model
        if self.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            net = DistributedDataParallel(self.model, device_ids=ids)
        if self.o.compile:
            mode = None if self.o.compile is True else str(self.o.compile)
            net = cast(torch.nn.Module, torch.compile(net, mode=mode))
        return net

    def train_step(self) -> torch.Tensor:
        """One optimiser step on a global batch drawn from the generator, then the EMA update; the loss (on the
        device)."""
        o, gen, device, step = self.o, self.gen, self.device, self.step
        if o.lr_warmup and step <= o.lr_warmup:
            for group in self.opt.param_groups:
                group["lr"] = o.lr * min(1.0, (step + 1) / o.lr_warmup)
        if o.compile in {"reduce-overhead", "max-autotune"}:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
        global_batch = o.batch_size * self.world
        xb = self.x[torch.randint(self.x.shape[0], (global_batch,), generator=gen, device=device)]
        if o.hflip:
            flip = torch.rand(global_batch, generator=gen, device=device) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
        aug = augment_targets(xb, o.augment, gen) if o.augment is not None else {}
        dtype, shard = PRECISIONS[o.precision], (self.rank, self.world) if self.distributed else None
        denoiser = bool(getattr(self.model, "sigma_conditional", False))  # D(x̃, σ) rather than h(x̃): see dsm_loss
        with torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext():
            clip = (0.0, 1.0) if o.clip_noise else None
            loss = dsm_loss(self.net, xb, self.sigmas, generator=gen, shard=shard, denoiser=denoiser, clip=clip, **aug)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            decay = min(o.ema_decay, (1 + step) / (10 + step))  # warm-up: early weights fade fast
            torch._foreach_lerp_(self.ema_params, self.params, 1 - decay)
            for e, b in zip(self.ema.buffers(), self.model.buffers()):
                e.copy_(b)
        self.step += 1
        return loss

    def save(self, wait: bool = False) -> None:
        """Checkpoint the run (rank 0): tensors copied to the CPU now, the file written in the background unless
        ``wait`` or ``async_checkpoint=False``."""
        o = self.o
        if o.checkpoint_path is None or self.rank != 0:
            return
        self.writer.join()  # the previous write is done: its snapshot may be overwritten
        snapshot = self.ema_cpu = copy.deepcopy(self.ema).to("cpu") if self.ema_cpu is None else self.ema_cpu
        snapshot.load_state_dict(self.ema.state_dict())  # copies (to the CPU): training may go on
        tensors, groups = _state_tensors(self.model, self.opt, self.gen)
        tensors = {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}
        train = {"param_groups": copy.deepcopy(groups), "batch_size": o.batch_size, "ema_decay": o.ema_decay}
        train["hflip"] = o.hflip
        if o.augment is not None:
            train["augment"] = o.augment
        if o.clip_noise:  # recorded only when on: a checkpoint from before the option was trained unclipped
            train["clip_noise"] = True
        train.update({"precision": o.precision, "channels_last": o.channels_last, "compile": o.compile})
        at, path, sigmas = self.step, o.checkpoint_path, self.sigmas.cpu()

        def write() -> None:
            save_score_model(snapshot, path, sigmas=sigmas, step=at, tensors=tensors, train=train)

        if o.async_checkpoint and not wait:
            self.writer.submit(write)
        else:
            write()

    def run(self) -> torch.nn.Module:
        """Steps up to ``iterations``, checkpointing every ``checkpoint_every`` steps, at the end and on ^C."""
        o, start = self.o, self.step
        enabled = o.progress and self.rank == 0
        bar = _LossBar(self.iterations, self.step, enabled=enabled, log_every=o.log_every, device=self.device)
        try:
            while self.step < self.iterations:
                loss = self.train_step()
                bar.update(loss, last=self.step == self.iterations)
                if self.step % o.checkpoint_every == 0 and self.step < self.iterations:
                    self.save()
        except KeyboardInterrupt:
            self.save(wait=True)
            raise
        finally:
            bar.close()
            self.writer.join()  # also when training failed: no write outlives the call
        if self.step > start or (o.checkpoint_path is not None and not Path(o.checkpoint_path).exists()):
            self.save(wait=True)
        if self.distributed:
            dist.barrier()  # the checkpoint is on disk before any rank goes on (e.g. to resume from it)
        if o.channels_last:
            self.model.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
            self.ema.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
        info = {"sigmas": self.sigmas.tolist(), "step": self.step, "clip_noise": o.clip_noise}
        setattr(self.ema, "training_info", info)  # not a tensor
        return self.ema


def train_score_model(
    model: ModuleT,
    x_train,
    sigmas,
    iterations: int,
    *,
    batch_size: int = TRAIN_DEFAULTS.batch_size,
    lr: float = TRAIN_DEFAULTS.lr,
    ema_decay: float = TRAIN_DEFAULTS.ema_decay,
    checkpoint_path: str | os.PathLike | None = TRAIN_DEFAULTS.checkpoint_path,
    resume: bool = TRAIN_DEFAULTS.resume,
    seed: int | None = TRAIN_DEFAULTS.seed,
    progress: bool = TRAIN_DEFAULTS.progress,
    hflip: bool = TRAIN_DEFAULTS.hflip,
    checkpoint_every: int = TRAIN_DEFAULTS.checkpoint_every,
    device: str | torch.device | None = TRAIN_DEFAULTS.device,
    augment: str | None = TRAIN_DEFAULTS.augment,
    precision: str = TRAIN_DEFAULTS.precision,
    channels_last: bool = TRAIN_DEFAULTS.channels_last,
    compile: bool | str = TRAIN_DEFAULTS.compile,  # pylint: disable=redefined-builtin  # torch's name of the lever
    lr_warmup: int = TRAIN_DEFAULTS.lr_warmup,
    log_every: int = TRAIN_DEFAULTS.log_every,
    async_checkpoint: bool = TRAIN_DEFAULTS.async_checkpoint,
    clip_noise: bool = TRAIN_DEFAULTS.clip_noise,
) -> ModuleT:
    """
    Train a noise-level-free score network h by multi-level denoising score matching (:func:`dsm_loss`), or a
    σ-conditional denoiser ``D(x̃, σ)`` (``sigma_conditional = True``, e.g. :class:`~art_adp.DenoiserUNet`) by the
    same loss with h = (D − x̃)/σ. Adam(lr, β = (0.9, 0.999)) as in the paper's Appendix A; the exponential moving
    average (EMA) of the weights is *returned* (purify with it). One ``torch.Generator`` seeded by ``seed`` draws
    batches, levels, noise and flips and is checkpointed, so a resumed run reproduces an uninterrupted one exactly.
    Speed, resume and data-parallel training: see :mod:`art_adp.score.train`.

    :param model: The network, e.g. :class:`~art_adp.NCSNv2`; trained in place (raw, non-EMA weights).
    :param x_train: Training images, ``N×C×H×W`` float in [0, 1] (numpy array or tensor).
    :param sigmas: Decreasing 1-D noise schedule, e.g. :func:`~art_adp.geometric_sigmas`.
    :param iterations: Total optimiser steps (a resumed run continues up to this count).
    :param batch_size: Samples per step (per rank when distributed), drawn uniformly with replacement.
    :param lr: Adam learning rate (the paper's 1e-3 whatever the batch; for large batches :func:`large_batch_lr`).
    :param ema_decay: In [0, 1): after step k, ema ← d·ema + (1 − d)·weights, d = min(ema_decay, (1 + k)/(10 + k)).
    :param checkpoint_path: A ``.safetensors`` file written atomically every ``checkpoint_every`` steps, at the end
        and on KeyboardInterrupt; :func:`~art_adp.load_score_model` loads it (as the EMA network).
    :param resume: Continue from ``checkpoint_path`` if it exists (step, weights, EMA, optimiser, generator).
    :param seed: Seed of the training generator (default: drawn from torch's global generator).
    :param progress: Show a tqdm bar with the running loss.
    :param hflip: Randomly flip images horizontally (the paper does for CIFAR, not for MNIST/FMNIST).
    :param checkpoint_every: Steps between checkpoints.
    :param device: Training device (default: the model's).
    :param augment: ``None``, ``"dct"`` or ``"augmix"``: the paper's augmented DSM for common corruptions
        (:mod:`art_adp.score.augment`; pass σ_L ×10 in ``sigmas``); drawn from the training generator.
    :param precision: ``"fp32"`` or ``"bf16"`` (autocast forward and loss; fp32 master weights, optimiser, EMA).
    :param channels_last: Train in ``torch.channels_last`` memory format (returned networks in the ordinary one).
    :param compile: ``torch.compile`` the network: ``True`` or a mode (``"reduce-overhead"``: CUDA graphs,
        ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``); checkpoints keep the plain module's names.
    :param lr_warmup: Steps of linear learning-rate warm-up, lr·(k + 1)/``lr_warmup`` at step k (0: none).
    :param log_every: Steps between reads of the loss for the progress bar (each read waits for the device).
    :param async_checkpoint: Write checkpoints in a background thread (the same files, bit for bit).
    :param clip_noise: Train on x̃ clipped into [0, 1], the input ADP's clipped noise injection gives
        (:func:`dsm_loss`'s ``clip``); recorded in the checkpoint (``training_info["clip_noise"]`` once loaded), so a
        purifier can take the noise form its model was trained on.
    :return: The EMA network in eval mode, with ``training_info = {"sigmas": [...], "step": n}``.
    """
    options = TrainOptions(**{name: value for name, value in locals().items() if name in TRAIN_OPTIONS})
    return cast(ModuleT, _Training(model, x_train, sigmas, iterations, options).run())
