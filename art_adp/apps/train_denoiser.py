"""Train a :class:`~art_adp.DenoiserUNet` on a data set within a wall-time budget, measuring its one-step
denoising MSE at every milestone: resumable (the trainer's checkpoint and the curve's records), with samples/s.

The curve is written to ``RUN_DIR/curve.jsonl`` (one record per milestone: step, samples seen, training seconds
so far, samples/s of that stretch, MSE per level) and the result with its provenance to ``RUN_DIR/result.json``.
The MSE is measured on the data set's *test* split, with fixed noise (one seed per level), as
mean((D(x + σz, σ) − x)²) over pixels in [0, 1].
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._hardware import resolve_precision
from ..runs.provenance import code_diff, code_version, provenance
from ..runs.records import append_records, read_jsonl, write_json
from ..runs.seeds import derive_seed
from ..serialization import read_checkpoint
from ..score.sigmas import geometric_sigmas
from ..score.train import train_score_model
from ..score.unet import DenoiserUNet

__all__ = [
    "LEVELS",
    "DenoiserTraining",
    "denoising_mse",
    "linear_denoising_mse",
    "train_denoiser",
    "train_denoiser_command",
]

#: The levels (in [0, 1] pixel units) at which the curve measures one-step denoising.
LEVELS = (0.05, 0.1, 0.25, 0.5)


@torch.no_grad()
def denoising_mse(denoiser, x, levels: Sequence[float] = LEVELS, *, seed: int = 0, batch_size: int = 250,
                  clip_noise: bool = False) -> dict:  # fmt: skip
    """
    One-step denoising MSE of ``denoiser(x̃, σ)`` on clean images ``x`` at each level (fixed noise per level).

    :param denoiser: A σ-conditional denoiser ``D(x, sigma)`` on [0, 1] pixels.
    :param x: Clean images, ``N×C×H×W`` in [0, 1] (numpy or tensor).
    :param levels: Noise levels σ in [0, 1] pixel units.
    :param seed: Seed of the noise (each level draws from ``derive_seed(seed, σ)``).
    :param batch_size: Images per forward pass.
    :param clip_noise: Give the denoiser x + σz clipped into [0, 1] (ADP's noise injection), not x + σz.
    :return: ``{σ as str: MSE}``, the MSE averaged over pixels and images.
    """
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    device = next(iter([*denoiser.parameters(), *denoiser.buffers()])).device
    out = {}
    for level in levels:
        gen = torch.Generator().manual_seed(derive_seed(seed, "denoise", float(level)))
        total = 0.0
        for start in range(0, len(x), batch_size):
            xb = x[start : start + batch_size]
            noisy = xb + level * torch.randn(xb.shape, generator=gen)
            noisy = noisy.clamp(0, 1) if clip_noise else noisy
            total += float((denoiser(noisy.to(device), level).cpu() - xb).square().sum())
        out[f"{level:g}"] = total / x.numel()
    return out


@torch.no_grad()
def linear_denoising_mse(x_train, x_test, levels: Sequence[float] = LEVELS, *, seed: int = 0) -> dict:
    """
    The yardstick of :func:`denoising_mse`: the best *linear* denoiser of the training images, the Wiener filter
    x̂ = μ + C (C + σ² I)⁻¹ (x̃ − μ) with μ and C their mean and covariance, on the same images and the same noise.
    Any denoiser worth training beats it; the MMSE denoiser (what a perfect score model gives) beats it by the
    images' non-Gaussian structure.

    :param x_train: Training images ``N×C×H×W`` in [0, 1] (μ and C; float64).
    :param x_test: The images measured (as :func:`denoising_mse` takes them).
    :return: ``{σ as str: MSE}``.
    """
    flat = torch.as_tensor(np.asarray(x_train), dtype=torch.float64).flatten(1)
    mean = flat.mean(0)
    centred = flat - mean
    values, vectors = torch.linalg.eigh(centred.T @ centred / len(flat))
    values = values.clamp_min(0)

    class Wiener(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", mean)
            self.register_buffer("vectors", vectors)
            self.register_buffer("values", values)

        def forward(self, noisy, level):
            z = (noisy.flatten(1).double() - self.mean) @ self.vectors
            out = self.mean + (z * (self.values / (self.values + level**2))) @ self.vectors.T
            return out.float().view_as(noisy)

    return denoising_mse(Wiener(), x_test, levels, seed=seed)


def train_denoiser(
    x_train,
    x_test,
    run_dir: str | Path,
    *,
    minutes: float = 60.0,
    milestone: int = 500,
    batch_size: int = 128,
    lr: float = 2e-3,
    channels: Sequence[int] = (32, 64, 64),
    sigma_min: float = 0.01,
    sigma_max: float = 1.0,
    n_test: int = 500,
    seed: int = 0,
    precision: str = "fp32",
    clip_noise: bool = False,
    augment: str | None = None,
    init: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """
    Train until ``minutes`` of training time are spent (summed over resumptions), measuring at each milestone.

    :param x_train: Training images ``N×C×H×W`` in [0, 1].
    :param x_test: Held-out images for the MSE curve (the first ``n_test``).
    :param run_dir: Holds ``denoiser.safetensors`` (the trainer's checkpoint: resumable), ``curve.jsonl``,
        ``result.json``.
    :param minutes: Training-time budget; a run stops at the first milestone past it. Measuring is not counted.
    :param milestone: Optimiser steps between measurements (and checkpoints).
    :param batch_size: Samples per step.
    :param lr: Adam learning rate (100-step warm-up).
    :param channels: The UNet's widths (:class:`~art_adp.DenoiserUNet`).
    :param sigma_min: Smallest training level (pixel units); ln σ is drawn uniformly from 256 geometric levels.
    :param sigma_max: Largest training level.
    :param n_test: Test images in the MSE measurement.
    :param seed: The trainer's seed (the curve's noise uses :func:`derive_seed` of it).
    :param precision: The trainer's ``precision``: ``"fp32"``, ``"bf16"`` or ``"auto"`` (bf16 where ``device``
        computes it natively, else fp32; a resumed run keeps its own: :func:`~art_adp._hardware.resolve_precision`).
        The first line printed names the precision used and why; ``result.json`` records both.
    :param clip_noise: Train on noisy images clipped into [0, 1], the input ADP's paper-style noise injection gives
        (``ADPPurifier(clip_noise=True)``), so that form has a matched model; the curve measures that form too.
    :param augment: The paper's augmented perturbations (its common-corruption models), as ``train-score --augment``
        trains them: x̃ ~ N(F(x), σ²I) with ``"dct"`` (F drops the lowest-energy DCT coefficients, target x) or
        ``"augmix"`` (F is AugMix, target (x + F(x))/2): :func:`~art_adp.score.augment.augment_targets`. The levels
        stay those given: σ is an input of the denoiser, so the paper's σ_L × 10 (which keeps a noise-level-free
        network from reading F(x) as x) is not applied; pass ``sigma_min`` for that.
    :param init: A DenoiserUNet checkpoint of the same widths to start from (a fine-tune, e.g. of the bundled
        CIFAR-10 purifier); its SHA-256 is recorded. Ignored when resuming (the run's own checkpoint is read).
    :param device: Where to train.
    :param progress: Show the trainer's progress bar.
    :return: The result written to ``result.json``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = run_dir / "denoiser.safetensors"
    curve_path = run_dir / "curve.jsonl"
    curve = read_jsonl(curve_path)
    stored = next((r["settings"] for r in curve if "settings" in r), None)  # on the run's first record of any kind
    held = (stored or {}).get("precision")
    if held is None and checkpoint.exists():
        held = (read_checkpoint(checkpoint)[1].get("train") or {}).get("precision")
    precision, precision_reason = resolve_precision(precision, device, held=held)
    print(f"precision: {precision} ({precision_reason}); threads: {torch.get_num_threads()}", flush=True)
    settings = {
        "n_train": len(x_train), "batch_size": batch_size, "lr": lr, "channels": list(channels),
        "sigma_min": sigma_min, "sigma_max": sigma_max, "seed": seed, "precision": precision, "milestone": milestone,
    }  # fmt: skip
    if clip_noise:  # recorded only when on: a run from before the option trained on unclipped noise
        settings["clip_noise"] = True
    if augment is not None:  # likewise: a run from before the option trained on x + σz
        settings["augment"] = augment
    if init is not None:
        settings["init_sha256"] = _init_weights(init, channels, x_train.shape[1])[1]
    if stored is not None and stored != settings:
        raise ValueError(f"{run_dir} holds a run with other settings ({stored}); use another run_dir.")
    sigmas = geometric_sigmas(sigma_max, sigma_min, 256)
    torch.manual_seed(seed)  # the initial weights too: the same command gives the same model
    model = DenoiserUNet(x_train.shape[1], channels=channels).to(device)
    if init is not None and not checkpoint.exists():
        model.load_state_dict(_init_weights(init, channels, x_train.shape[1])[0].state_dict())
    x_eval = np.asarray(x_test[:n_test])
    spent = curve[-1]["train_seconds"] if curve else 0.0
    step = curve[-1]["step"] if curve else 0
    started, code = time.monotonic(), code_version()  # the code this run loads now, whatever the checkout is later
    diff = code_diff() if code.endswith("-dirty)") else None
    held = read_checkpoint(checkpoint)[1].get("step", 0) if checkpoint.exists() else 0
    if held != step:  # an interrupted stretch whose time was not recorded: its steps count, its seconds do not
        rec = {"step": held, "samples": held * batch_size, "train_seconds": round(spent, 1), "unrecorded": True}
        if stored is None:
            rec["settings"] = stored = settings
        curve.append(rec)
        append_records(curve_path, [rec])
        step = held
    while spent < minutes * 60:
        t0 = time.monotonic()
        target = (step // milestone + 1) * milestone
        try:
            ema = train_score_model(
                model, x_train, sigmas, target, batch_size=batch_size, lr=lr, checkpoint_path=checkpoint,
                seed=seed, progress=progress, checkpoint_every=milestone, device=device, precision=precision,
                lr_warmup=100, clip_noise=clip_noise, augment=augment,
            )  # fmt: skip
        except KeyboardInterrupt:  # the trainer saved its state: record how far it got and how long it took
            held = read_checkpoint(checkpoint)[1]["step"]
            seconds = time.monotonic() - t0
            rec = {"step": held, "samples": held * batch_size, "train_seconds": round(spent + seconds, 1),
                   "interrupted": True}  # fmt: skip
            if stored is None:
                rec["settings"] = settings
            append_records(curve_path, [rec])
            raise
        seconds = time.monotonic() - t0
        done, step = target - step, target
        spent += seconds
        rec = {
            "step": step,
            "samples": step * batch_size,
            "train_seconds": round(spent, 1),
            "samples_per_s": round(done * batch_size / seconds, 1),
            "mse": denoising_mse(ema, x_eval, seed=seed, clip_noise=clip_noise),
            "threads": torch.get_num_threads(),
        }
        if stored is None:
            rec["settings"] = stored = settings
        curve.append(rec)
        append_records(curve_path, [rec])
        if progress:
            print(json.dumps({k: rec[k] for k in ("step", "train_seconds", "samples_per_s", "mse")}), flush=True)
    result = {
        "settings": settings,
        "parameters": sum(p.numel() for p in model.parameters()),
        "curve": [{k: v for k, v in r.items() if k != "settings"} for r in curve],
        "final": next((r for r in reversed(curve) if "mse" in r), None),
        "linear_mse": linear_denoising_mse(x_train, x_eval, seed=seed),  # the yardstick: the best linear denoiser
        "precision_reason": precision_reason,  # the precision itself: settings["precision"]
        "provenance": provenance(
            wall_time_s=time.monotonic() - started,
            device=device,
            models={"denoiser": checkpoint},
            precision=precision,
            started_at=code,
            started_diff=diff,
        ),
    }
    write_json(run_dir / "result.json", result, indent=1)
    return result


def _init_weights(path, channels: Sequence[int], in_channels: int) -> tuple[DenoiserUNet, str]:
    """The DenoiserUNet a fine-tune starts from, and the SHA-256 of its weights; refused unless its widths and
    channels are the run's."""
    from ..score import load_score_model
    from ..serialization import module_sha256

    model = load_score_model(str(path))
    if not isinstance(model, DenoiserUNet):
        raise ValueError(f"--init {path}: a {type(model).__name__}, not a DenoiserUNet (a train-denoiser checkpoint).")
    config: dict = model.config
    held = (list(config["channels"]), config["in_channels"])
    if held != (list(channels), in_channels):
        widths = ",".join(map(str, held[0]))
        raise ValueError(f"--init {path}: a DenoiserUNet of widths {held[0]} on {held[1]} channels; this run trains "
                         f"{list(channels)} on {in_channels}: give --channels {widths}.")  # fmt: skip
    return model, module_sha256(model)


@dataclass(frozen=True)
class DenoiserTraining:
    """Settings of ``art-adp train-denoiser`` (see :func:`train_denoiser` for each; the command's defaults: a
    one-hour run of the three-level UNet in fp32; ``--precision auto`` picks bf16 where the device computes it natively,
    an explicit choice recorded in the result, as the default may not depend on the hardware)."""

    minutes: float = 60.0
    milestone: int = 500
    batch_size: int = 128
    lr: float = 2e-3
    channels: tuple[int, ...] = (32, 64, 128)
    precision: str = "fp32"
    seed: int = 0
    clip_noise: bool = False
    augment: str | None = None
    init: str | None = None
    sigma_min: float = 0.01
    sigma_max: float = 1.0


def train_denoiser_command(
    config: DenoiserTraining,
    *,
    dataset: str = "digits",
    data_root: str | None = None,
    run_dir: str = "runs/denoiser",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """Train a DenoiserUNet (a sigma-conditional UNet denoiser with EDM preconditioning; ADP's score at any level
    through EDMScore) for --minutes of training time, measuring its one-step denoising MSE on the test split at
    every milestone; resumes from --run-dir (curve.jsonl, denoiser.safetensors, result.json)."""
    from dataclasses import asdict

    from ..data import load_dataset

    data = load_dataset(dataset, data_root)
    result = train_denoiser(
        data.x_train, data.x_test, run_dir, **asdict(config), device=device or "cpu", progress=progress
    )
    print(json.dumps(result["final"]))
