"""Score-model checkpoints (safetensors + JSON header; see :mod:`art_adp.serialization`).

A training checkpoint stores the EMA weights as the network's weights -- what purification should use -- and
the raw weights, optimiser and RNG state under ``train/`` for resuming.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ..pretrained import bundled_file
from ..serialization import load_module, save_module
from .diffusion import DiffusersScore
from .ffdnet import FFDNet
from .ncsnv2 import NCSNv2
from .unet import DenoiserUNet

__all__ = ["save_score_model", "load_score_model", "ARCHITECTURES"]

ARCHITECTURES: dict[str, type[torch.nn.Module]] = {
    "NCSNv2": NCSNv2,
    "DenoiserUNet": DenoiserUNet,
    "DiffusersScore": DiffusersScore,  # a diffusers UNet2DModel at one step of its schedule (needs diffusers)
    "FFDNet": FFDNet,  # KAIR's FFDNet, a sigma-conditional denoiser like DenoiserUNet (examples/ffdnet_denoiser.py)
}
# a diffusers UNet is built from its config, not a module of this package
BUILDERS: dict[str, Callable[..., torch.nn.Module]] = {**ARCHITECTURES, "DiffusersScore": DiffusersScore.from_config}


def save_score_model(
    model: torch.nn.Module, path: str | os.PathLike, *, sigmas=None, step: int | None = None, tensors=None, **header
) -> None:
    """
    Save a score network as safetensors weights + a JSON header (architecture, constructor arguments, σ
    schedule, training step). Written atomically.

    :param model: An :class:`~art_adp.NCSNv2`, a :class:`~art_adp.DenoiserUNet`, a
        :class:`~art_adp.score.diffusion.DiffusersScore` (:func:`~art_adp.from_diffusers`) or a
        :class:`~art_adp.score.ffdnet.FFDNet`.
    :param path: Output file, conventionally ``*.safetensors``.
    :param sigmas: The training σ schedule (default: ``model.training_info["sigmas"]`` if present).
    :param step: The training step (default: ``model.training_info["step"]`` if present).
    """
    info = getattr(model, "training_info", {})
    sigmas = info.get("sigmas") if sigmas is None else sigmas
    step = info.get("step") if step is None else step
    sigmas = None if sigmas is None else [float(s) for s in torch.as_tensor(sigmas, dtype=torch.float64).tolist()]
    save_module(model, path, ARCHITECTURES, tensors=tensors, sigmas=sigmas, step=step, **header)


def load_score_model(path: str | os.PathLike, device: str | torch.device | None = None) -> torch.nn.Module:
    """
    Load a score network saved by :func:`save_score_model` or :func:`~art_adp.train_score_model` (its EMA
    weights), a diffusers model saved from :func:`~art_adp.from_diffusers` (needs diffusers), or one shipped with
    the package by name (``"digits"``; :mod:`art_adp.pretrained`). Never unpickles
    anything.

    :param path: The ``.safetensors`` checkpoint, or a bundled model's name.
    :param device: Where to put the network (default CPU).
    :return: The network in eval mode, with ``training_info = {"sigmas": [...], "step": n, "clip_noise": bool}``
        (``clip_noise``: trained on clipped noisy inputs; False for a checkpoint that does not say).
    :raises FileNotFoundError: For a path that does not exist and is no bundled name (the message lists the names).
    :raises ValueError: For a file that is not an art-adp safetensors checkpoint, an unknown architecture, or
        weights whose names or shapes do not match.
    """
    model, header = load_module(bundled_file(path, "score"), BUILDERS, device)
    clip_noise = bool((header.get("train") or {}).get("clip_noise", False))
    setattr(model, "training_info", {"sigmas": header.get("sigmas"), "step": header.get("step"),
                                     "clip_noise": clip_noise})  # not a tensor  # fmt: skip
    return model
