"""``art-adp train-score``: an NCSNv2 score network trained by multi-level DSM, its settings beside it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from ..score.train import train_score_model as _trainer
from .commands import cudnn_autotune, resolve_lr

__all__ = ["ScoreTraining", "train_score_command"]

TRAINER = inspect.signature(_trainer).parameters  # the defaults of the score trainer's levers


@dataclass(frozen=True)
class ScoreTraining:
    """
    Settings of ``art-adp train-score`` (the trainer's levers default to :func:`~art_adp.score.train_score_model`'s).

    :param iterations: DSM training steps (a resume continues up to this count).
    :param batch_size: Samples per step and process.
    :param lr: Adam's learning rate, or ``"auto"``: :func:`~art_adp.score.large_batch_lr` of the batch of all
        processes.
    :param ngf: NCSNv2 width (the paper: 128 for CIFAR).
    :param sigma_begin: Largest training σ (None: Song & Ermon's Techniques 1-2); ``sigma_end``, ``num_sigmas``: the
        rest of the geometric schedule.
    :param precision: ``"fp32"`` (the default: the same command trains the same weights on every machine), ``"bf16"``
        or ``"auto"``: bf16 where the device computes it natively, else fp32, a resume keeping the checkpoint's
        (:func:`~art_adp._hardware.resolve_precision`); the choice and its reason are recorded.
    :param hflip: Random horizontal flips (CIFAR).
    :param augment: ``"dct"`` or ``"augmix"``: augmented DSM for common corruptions (``sigma_end`` × 10, as the paper).
    :param channels_last, compile: Speed levers that leave the model unchanged (to float rounding).
    """

    iterations: int = 600
    batch_size: int = 128
    lr: float | str = TRAINER["lr"].default
    lr_warmup: int = TRAINER["lr_warmup"].default
    precision: str = "fp32"
    ngf: int = 16
    sigma_begin: float | None = None
    sigma_end: float = 0.01
    num_sigmas: int = 10
    hflip: bool = False
    checkpoint_every: int = 500
    augment: str | None = None
    seed: int = 0
    channels_last: bool = TRAINER["channels_last"].default
    compile: bool | str = TRAINER["compile"].default


def train_score_command(
    config: ScoreTraining,
    *,
    dataset: str = "digits",
    data_root: str | None = None,
    run_dir: str = "runs/score",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """Train an NCSNv2 score network by multi-level DSM. Data-parallel on N GPUs (or N CPU processes): torchrun
    --nproc_per_node=N -m art_adp train-score ... (--batch-size is per process; --lr auto is large_batch_lr of the
    batch of all processes: the paper's 1e-3 at 128, square-root scaled, best with --lr-warmup ~500 from 4x the
    paper's batch). --precision bf16 runs the forward pass and the loss in bf16 (weights, Adam and EMA stay fp32);
    fp32 is the default (the same command trains the same weights on any machine); auto picks bf16 where the device
    computes it natively (a CUDA GPU with bf16, a CPU with AVX-512-BF16 or AMX) and fp32 elsewhere, and then a resume
    keeps the checkpoint's precision. The first line printed names the
    precision and why. On CUDA, cuDNN's autotuner picks the convolutions
    (torch.backends.cudnn.benchmark)."""
    import torch

    from .._hardware import resolve_precision
    from ..data import load_dataset
    from ..runs import distributed
    from ..serialization import read_checkpoint
    from ..score import NCSNv2, geometric_sigmas, recommend_sigmas, train_score_model

    c = config
    dev, rank, world = distributed.setup(device)
    path = Path(run_dir) / "score.safetensors"
    held = (read_checkpoint(path)[1].get("train") or {}).get("precision", "fp32") if path.exists() else None
    precision, why = resolve_precision(c.precision, dev, held=held)
    if rank == 0:
        print(f"precision: {precision} ({why}); threads: {torch.get_num_threads()}", flush=True)
    lr = resolve_lr(c.lr, c.batch_size * world)  # large_batch_lr counts the batch of all processes
    data = load_dataset(dataset, data_root)
    sigma_end = c.sigma_end * (10 if c.augment else 1)  # the paper: sigma_L x10 for DCT/AugMix training
    if c.sigma_begin is None:
        sigmas = recommend_sigmas(data.x_train, sigma_end=sigma_end)
    else:
        sigmas = geometric_sigmas(c.sigma_begin, sigma_end, c.num_sigmas)
    _, channels, size, _ = data.x_train.shape
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same model
    cudnn_autotune(dev)
    try:
        ema = train_score_model(
            NCSNv2(channels, size, ngf=c.ngf),
            data.x_train,
            sigmas,
            c.iterations,
            batch_size=c.batch_size,
            lr=lr,
            checkpoint_path=path,
            checkpoint_every=c.checkpoint_every,
            seed=c.seed,
            progress=progress,
            hflip=c.hflip,
            device=dev,
            augment=c.augment,
            lr_warmup=c.lr_warmup,
            precision=precision,
            channels_last=c.channels_last,
            compile=c.compile,
        )
    finally:
        distributed.finish()
    if rank != 0:
        return
    print(
        f"score model: {path} (step {ema.training_info['step']}, "
        f"{len(sigmas)} sigmas from {float(sigmas[0]):.4g} to {float(sigmas[-1]):.4g})"
    )
