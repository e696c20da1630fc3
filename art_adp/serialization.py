"""Serialization: checkpoint files are safetensors tensors + a JSON header, written atomically. Nothing is ever
unpickled.

A checkpoint is one ``.safetensors`` file. Its tensors are a network's ``state_dict`` (plus, under the
``train/`` prefix, whatever a trainer needs to resume); its safetensors metadata holds one JSON document
under the key ``"art_adp"`` with the architecture name and its constructor arguments (``model.config``), so
:func:`load_module` rebuilds the network from a fixed table of known classes. Writes go to a temporary file
that is renamed over the target, so a killed process never leaves a torn file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

__all__ = ["write_checkpoint", "read_checkpoint", "save_module", "load_module", "TRAIN_PREFIX"]

FORMAT = "art_adp/1"
TRAIN_PREFIX = "train/"


def write_checkpoint(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], header: dict[str, Any]) -> None:
    """Atomically write ``tensors`` and the JSON-serialisable ``header`` to ``path`` (safetensors)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"art_adp": json.dumps({"format": FORMAT, **header})})
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the checkpoint ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """
    Read a checkpoint written by :func:`write_checkpoint`.

    :return: ``(tensors, header)``.
    :raises FileNotFoundError: If ``path`` does not exist.
    :raises ValueError: If the file is not an art-adp safetensors checkpoint (a pickle, say): it is refused
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
            f"{path} is not a safetensors file ({err}). art-adp loads only safetensors checkpoints it wrote "
            "itself and never unpickles files (a .pt/.pth pickle can run code when loaded)."
        ) from None
    try:
        header = json.loads(meta["art_adp"])
        if header.get("format") != FORMAT:
            raise ValueError
    except (KeyError, ValueError, AttributeError):
        raise ValueError(
            f"{path} is a safetensors file but not an art-adp checkpoint (no 'art_adp' header of format {FORMAT!r})."
        ) from None
    return tensors, header


def save_module(
    model: torch.nn.Module,
    path: str | os.PathLike,
    architectures: Mapping[str, type],
    *,
    tensors: Mapping[str, torch.Tensor] | None = None,
    **header: Any,
) -> None:
    """
    Save ``model`` (whose class is in ``architectures`` and which records ``config``) with extra header fields.

    :param tensors: Extra tensors to store beside the weights (use the ``train/`` prefix).
    """
    arch = type(model).__name__
    if architectures.get(arch) is not type(model) or not hasattr(model, "config"):
        raise ValueError(f"Cannot save a {arch}: known architectures are {sorted(architectures)}.")
    all_tensors = dict(model.state_dict())
    all_tensors.update(tensors or {})
    config = cast(Mapping[str, Any], model.config)  # the architectures in the table keep their arguments here
    write_checkpoint(path, all_tensors, {"architecture": arch, "config": dict(config), **header})


def load_module(
    path: str | os.PathLike,
    architectures: Mapping[str, Callable[..., torch.nn.Module]],
    device: str | torch.device | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """
    Rebuild a network saved by :func:`save_module` from the fixed table ``architectures``.

    :return: ``(model in eval mode on device, header)``.
    :raises ValueError: For an unknown architecture, an invalid config, or weights whose names or shapes do
        not match the architecture.
    """
    tensors, header = read_checkpoint(path)
    arch = header.get("architecture")
    if not isinstance(arch, str) or arch not in architectures:
        raise ValueError(f"{path} names an unknown architecture {arch!r}; known: {sorted(architectures)}.")
    try:
        model = architectures[arch](**header["config"])
    except (TypeError, ValueError, KeyError) as err:
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
    return model.to(device or "cpu").eval(), header
