"""Score-model checkpoints: safetensors tensors + a JSON header. Nothing is ever unpickled.

A checkpoint is one ``.safetensors`` file. Its tensors are the network's ``state_dict`` (for a training
checkpoint: the EMA weights, which are what purification should use) and, under the ``train/`` prefix, the
state needed to resume training. Its safetensors metadata holds one JSON document under the key
``"art_adp"``: the architecture name, its constructor arguments, the σ schedule and the training step.
Writes are atomic (temporary file + ``os.replace``), so a killed process never leaves a torn file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .ncsnv2 import NCSNv2

__all__ = ["save_score_model", "load_score_model", "read_checkpoint", "write_checkpoint", "ARCHITECTURES"]

FORMAT = "art_adp.score/1"
ARCHITECTURES: dict[str, type[torch.nn.Module]] = {"NCSNv2": NCSNv2}
TRAIN_PREFIX = "train/"


def write_checkpoint(path: str | os.PathLike, tensors: dict[str, torch.Tensor], header: dict[str, Any]) -> None:
    """Atomically write ``tensors`` and the JSON ``header`` to ``path`` (safetensors)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"art_adp": json.dumps({"format": FORMAT, **header})})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """
    Read a checkpoint written by :func:`write_checkpoint`.

    :return: ``(tensors, header)``.
    :raises FileNotFoundError: If ``path`` does not exist.
    :raises ValueError: If the file is not an art-adp safetensors checkpoint (a pickle, say); it is refused
        without executing anything.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}.")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(
            f"{path} is not a safetensors file ({err}). art-adp loads only safetensors checkpoints written by "
            "save_score_model/train_score_model and never unpickles files (a .pt/.pth pickle can run code)."
        ) from None
    try:
        header = json.loads(meta["art_adp"])
        assert header.get("format") == FORMAT
    except (KeyError, ValueError, AssertionError):
        raise ValueError(
            f"{path} is a safetensors file but not an art-adp checkpoint (its metadata lacks the "
            f"'art_adp' header of format {FORMAT!r})."
        ) from None
    return tensors, header


def _model_header(model: torch.nn.Module, sigmas=None, step: int | None = None) -> dict[str, Any]:
    arch = type(model).__name__
    if arch not in ARCHITECTURES or not hasattr(model, "config"):
        raise ValueError(f"Cannot save a {arch}: known architectures are {sorted(ARCHITECTURES)}.")
    info = getattr(model, "training_info", {})
    sigmas = info.get("sigmas") if sigmas is None else sigmas
    step = info.get("step") if step is None else step
    return {
        "architecture": arch,
        "config": dict(model.config),
        "sigmas": None if sigmas is None else [float(s) for s in torch.as_tensor(sigmas).tolist()],
        "step": None if step is None else int(step),
    }


def save_score_model(model: torch.nn.Module, path: str | os.PathLike, *, sigmas=None, step: int | None = None):
    """
    Save a score network as safetensors weights + a JSON header (architecture, constructor arguments,
    σ schedule, training step).

    :param model: An :class:`~art_adp.NCSNv2` (its ``config`` rebuilds it).
    :param path: Output file, conventionally ``*.safetensors``; written atomically.
    :param sigmas: The training σ schedule; defaults to ``model.training_info["sigmas"]`` if present.
    :param step: The training step; defaults to ``model.training_info["step"]`` if present.
    """
    write_checkpoint(path, dict(model.state_dict()), _model_header(model, sigmas, step))


def load_score_model(path: str | os.PathLike, device: str | torch.device | None = None) -> torch.nn.Module:
    """
    Load a score network saved by :func:`save_score_model` or :func:`~art_adp.train_score_model` (which
    stores its EMA weights as the network's weights).

    :param path: The ``.safetensors`` checkpoint.
    :param device: Where to put the network (default CPU).
    :return: The network in eval mode, with ``training_info = {"sigmas": [...], "step": n}``.
    :raises ValueError: For a file that is not an art-adp safetensors checkpoint, an unknown architecture, or
        weights whose names or shapes do not match the architecture.
    """
    tensors, header = read_checkpoint(path)
    arch = header.get("architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{path} names an unknown architecture {arch!r}; known: {sorted(ARCHITECTURES)}.")
    try:
        model = ARCHITECTURES[arch](**header["config"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path} has an invalid {arch} config {header.get('config')!r}: {err}") from None
    weights = {k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)}
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    wrong = [
        f"{k}: {tuple(weights[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if missing or unexpected or wrong:
        raise ValueError(
            f"{path} does not match {arch}({header['config']}): missing {missing[:5]}, unexpected "
            f"{unexpected[:5]}, wrong shapes {wrong[:5]}."
        )
    model.load_state_dict(weights)
    model.training_info = {"sigmas": header.get("sigmas"), "step": header.get("step")}
    return model.to(device or "cpu").eval()
