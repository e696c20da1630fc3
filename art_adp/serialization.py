"""Serialization: checkpoint files are safetensors tensors + a JSON header, written atomically. Nothing is ever
unpickled.

A checkpoint is one ``.safetensors`` file. Its tensors are a network's ``state_dict`` (plus, under the
``train/`` prefix, whatever a trainer needs to resume); its safetensors metadata holds one JSON document
under the key ``"art_adp"`` with the architecture name and its constructor arguments (``model.config``), so
:func:`load_module` rebuilds the network from a fixed table of known classes. Writes go to a temporary file
that is renamed over the target, so a killed process never leaves a torn file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

__all__ = [
    "HALF",
    "TRAIN_PREFIX",
    "check_state_dict",
    "file_sha256",
    "half_checkpoint",
    "is_safetensors",
    "load_module",
    "module_sha256",
    "optimizer_tensors",
    "read_checkpoint",
    "read_torch_file",
    "read_weights",
    "restore_optimizer",
    "save_module",
    "weights_sha256",
    "write_checkpoint",
]

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


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """An optimiser's per-parameter state (Adam's moments, SGD's momentum) as checkpoint tensors under
    ``train/optim/<parameter>/<name>``; its ``param_groups`` (plain numbers) belong in the header."""
    return {f"{TRAIN_PREFIX}optim/{i}/{name}": torch.as_tensor(value)
            for i, state in optimizer.state_dict()["state"].items() for name, value in state.items()
            if value is not None}  # fmt: skip


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor],
                      param_groups: list | None = None) -> None:  # fmt: skip
    """Load the state :func:`optimizer_tensors` wrote into ``optimizer`` (``param_groups``: the header's; None: the
    optimiser's own)."""
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith(f"{TRAIN_PREFIX}optim/"):
            i, name = k.split("/")[2:]
            state.setdefault(int(i), {})[name] = v
    groups = optimizer.state_dict()["param_groups"] if param_groups is None else param_groups
    optimizer.load_state_dict({"state": state, "param_groups": groups})


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
    if header.get("stored") == HALF:  # float32 weights kept at half precision: read back as float32
        tensors = {k: v.float() if v.dtype == torch.float16 else v for k, v in tensors.items()}
    return tensors, header


#: The ``stored`` header value of a checkpoint whose float32 weights are kept at half precision (the zoo's smaller
#: files, :func:`half_checkpoint`): :func:`read_checkpoint` gives them back as float32, so a module loaded from the file
#: and the file itself hash alike (:func:`weights_sha256`), and those are the weights a figure is measured with.
HALF = "fp16"


def half_checkpoint(source: str | os.PathLike, path: str | os.PathLike) -> float:
    """
    Write the weights of the checkpoint ``source`` to ``path`` with every float32 tensor rounded to half precision
    (half the bytes; the trainer's ``train/`` state left out), the header marked ``stored: fp16``: a smaller file whose
    weights are the rounded ones, read back as float32. Figures measured from ``path`` are its own; they are not the
    unrounded weights' figures.

    :return: The largest relative change of a weight by the rounding (over weights of magnitude at least 1e-3).
    :raises ValueError: If a weight is outside half precision's range (its largest finite value is 65,504).
    """
    tensors, header = read_checkpoint(source)
    weights = {k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)}
    half = {k: v.half() if v.dtype == torch.float32 else v for k, v in weights.items()}
    far = sorted(k for k, v in half.items() if v.dtype == torch.float16 and not torch.isfinite(v).all())
    if far:
        raise ValueError(f"{source}: the weights {far[:5]} exceed half precision's range (65,504); keep it at fp32.")
    write_checkpoint(path, half, {**header, "stored": HALF})
    change = [((half[k].float() - w).abs() / w.abs()).masked_select(w.abs() >= 1e-3)
              for k, w in weights.items() if w.dtype == torch.float32]  # fmt: skip
    return max((float(c.max()) for c in change if c.numel()), default=0.0)


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
    check_state_dict(model, weights, f"{path} does not match {arch}({header['config']})")
    model.load_state_dict(weights)
    return model.to(device or "cpu").eval(), header


def check_state_dict(model: torch.nn.Module, weights: Mapping[str, torch.Tensor], what: str) -> None:
    """
    Check that ``weights`` has exactly the names and shapes of ``model.state_dict()``.

    :param model: The network the weights are for.
    :param weights: A state dict.
    :param what: The start of the error message, e.g. ``"w.safetensors does not match Net()"``.
    :raises ValueError: ``"<what>: missing [...], unexpected [...], wrong shapes [...]."`` (five of each at most).
    """
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    wrong = [
        f"{k}: {tuple(weights[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if missing or unexpected or wrong:
        raise ValueError(f"{what}: missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shapes {wrong[:5]}.")


def is_safetensors(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file that starts like a safetensors file (an 8-byte header length, then ``{``)."""
    path = Path(path)
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{" and 0 < int.from_bytes(head[:8], "little") < path.stat().st_size


def read_torch_file(path: str | os.PathLike) -> Any:
    """
    Read a ``torch.save`` file with ``torch.load(weights_only=True)``: tensors and plain containers only, so
    nothing that could run code is ever unpickled.

    :raises FileNotFoundError: If ``path`` does not exist.
    :raises ValueError: For a file that is neither torch.save's zip format nor a pickle, or one that holds anything
        but tensors and plain containers (a pickled ``nn.Module``, say), naming what was refused.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}.")
    with open(path, "rb") as f:
        head = f.read(2)
    if not zipfile.is_zipfile(path) and head[:1] != b"\x80":  # torch.save's zip format, or a legacy pickle
        raise ValueError(f"{path} is not a PyTorch checkpoint (neither torch.save's zip format nor a pickle).")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = next(
            (line for line in lines if line.startswith(("Trying to load", "Unsupported"))), type(err).__name__
        )
        raise ValueError(
            f"{path} was refused: torch.load(weights_only=True) met something other than tensors and "
            f"plain containers ({detail}). art-adp never fully unpickles a checkpoint, since that can "
            "run code; save the weights as a plain state dict (model.state_dict(): tensors, dicts, lists, "
            "numbers) or as safetensors."
        ) from None
    except (RuntimeError, EOFError, OSError) as err:
        raise ValueError(f"{path} is not a PyTorch checkpoint torch.load can read ({err}).") from None


def read_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """
    A state dict from a file: safetensors (an art-adp checkpoint's weights without its ``train/`` tensors), or a
    ``torch.save`` file read by :func:`read_torch_file` holding a state dict -- bare, under ``"state_dict"``,
    ``"model_state_dict"`` or ``"model"``, with or without DataParallel's ``module.`` prefix.

    :raises ValueError: For a file that holds no state dict of tensors, naming what it holds.
    """
    if is_safetensors(path):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                ours = "art_adp" in (f.metadata() or {})
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"{path} is not a readable safetensors file ({err}).") from None
        return {k: v for k, v in tensors.items() if not (ours and k.startswith(TRAIN_PREFIX))}
    obj = read_torch_file(path)
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model_state_dict", "model"):
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not (isinstance(obj, Mapping) and obj and all(isinstance(v, torch.Tensor) for v in obj.values())):
        raise ValueError(
            f"{path} holds a {type(obj).__name__}, not a state dict of tensors: save model.state_dict() with "
            "torch.save or safetensors."
        )
    weights = {str(k): v for k, v in obj.items()}
    if all(k.startswith("module.") for k in weights):  # saved from a DataParallel wrapper
        weights = {k[len("module.") :]: v for k, v in weights.items()}
    return weights


def module_sha256(module: torch.nn.Module) -> str:
    """SHA-256 of a module's state dict (names, shapes, dtypes, values): the weights an evaluation attacked."""
    return _tensors_sha256(module.state_dict())


def _tensors_sha256(tensors: Mapping[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(
            t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        )  # 0-d too (BatchNorm counters)
    return h.hexdigest()


def weights_sha256(model: torch.nn.Module | str | os.PathLike) -> str:
    """
    SHA-256 of a model's weights, as :func:`module_sha256` hashes them, from the module or from an art-adp checkpoint
    file (its tensors without the trainer's ``train/`` ones): a checkpoint and the module loaded from it hash alike,
    whatever else the file holds (header, training state).

    :raises ValueError: If a path is not an art-adp safetensors checkpoint.
    """
    if isinstance(model, torch.nn.Module):
        return module_sha256(model)
    tensors, _ = read_checkpoint(model)
    return _tensors_sha256({k: v for k, v in tensors.items() if not k.startswith(TRAIN_PREFIX)})


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (e.g. a checkpoint)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
