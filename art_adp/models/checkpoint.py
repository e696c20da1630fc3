"""Classifier checkpoints (safetensors + JSON header; see :mod:`art_adp.serialization`).

A classifier trained behind a purifier (:func:`~art_adp.models.train_purified_classifier`,
:func:`~art_adp.models.train_adversarial_classifier` with ``purifier``) records it in its header
(:func:`purifier_record`: the purifier, its hyperparameters, the score model's class and the SHA-256 of its tensors),
and :func:`load_classifier` warns when it is loaded without that purifier: its accuracy alone is not the defence's.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any

import torch

from ..pretrained import bundled_file
from ..serialization import load_module, save_module
from .cnn import DigitsCNN, SmallCNN
from .mlp import MLP
from .resnet import CifarResNet
from .wrn import WideResNet

__all__ = ["save_classifier", "load_classifier", "ARCHITECTURES", "check_purifier", "purifier_record"]

ARCHITECTURES: dict[str, type[torch.nn.Module]] = {
    c.__name__: c for c in (MLP, SmallCNN, DigitsCNN, WideResNet, CifarResNet)
}
#: The purifier's attributes that decide what it computes (ADP's hyperparameters); the rest (gradient mode, batch
#: size, device, leave-one-out at training) change how, or only while training. ``clip_noise`` is recorded only
#: where it is off (records from before the option, all of clipped noise, compare equal).
PURIFIER_FIELDS = ("sigma", "steps", "step_size", "lam", "delta", "step_clamp", "tau", "clip_values")


def _score_sha256(score_model: torch.nn.Module) -> str:
    """SHA-256 of the score model's tensors (names, dtypes, shapes, bytes, in ``state_dict`` order): its weights, or a
    :class:`~art_adp.KernelScore`'s reference images."""
    digest = hashlib.sha256()
    for name, tensor in score_model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def purifier_record(purifier: Any, **extra: Any) -> dict[str, Any]:
    """
    What a classifier trained behind ``purifier`` records of it: the purifier's class, its hyperparameters
    (:data:`PURIFIER_FIELDS` it has), its description, the score model's class and SHA-256, its leave-one-out radius,
    and ``extra`` (the application's names: score model kind, setting, training mode).
    """
    score = getattr(purifier, "score_model", None)
    record = {
        "purifier": type(purifier).__name__,
        "params": {k: _jsonable(getattr(purifier, k)) for k in PURIFIER_FIELDS if hasattr(purifier, k)}
        | ({"clip_noise": False} if getattr(purifier, "clip_noise", True) is False else {}),
        "describe": purifier.describe() if callable(getattr(purifier, "describe", None)) else type(purifier).__name__,
        "score_model": type(score).__name__ if score is not None else None,
        "score_sha256": _score_sha256(score) if isinstance(score, torch.nn.Module) else None,
        "leave_out": getattr(purifier, "leave_out", None),
    }
    return {**record, **extra}


def _name(record: dict) -> str:
    sha = (record.get("score_sha256") or "")[:12]
    named = ", ".join(f"{k} {record[k]}" for k in ("model", "setting", "mode") if k in record)
    return (
        f"{record.get('describe')} (score model {record.get('score_model')} sha256 {sha}{', ' if named else ''}{named})"
    )


def check_purifier(record: dict | None, purifier: Any = None, *, what: str = "this classifier") -> bool:
    """
    Warn (``UserWarning``) when a classifier that was trained behind the purifier ``record`` describes is evaluated
    without it: ``purifier`` None (bare) or another purifier (other hyperparameters or another score model).

    :return: Whether ``purifier`` is the recorded one (True too when nothing is recorded).
    """
    if not record:
        return True
    if purifier is not None:
        theirs = purifier_record(purifier)
        if theirs["params"] == record.get("params") and theirs["score_sha256"] == record.get("score_sha256"):
            return True
        where = f"behind another purifier, {_name(theirs)}"
    else:
        where = "without a purifier"
    warnings.warn(
        f"{what} was trained behind {_name(record)}; evaluated {where}, its accuracy is not that of the defence it "
        "was trained for. Put that purifier in front (load_classifier(path, purifier=...); art-adp levers measures it "
        "behind its purifier in --purified).",
        UserWarning,
        stacklevel=3,
    )
    return False


def save_classifier(model: torch.nn.Module, path: str | os.PathLike, **header) -> None:
    """Save one of this package's classifiers (weights + constructor arguments + extra JSON ``header`` fields)."""
    save_module(model, path, ARCHITECTURES, **header)


def load_classifier(
    path: str | os.PathLike, device: str | torch.device | None = None, *, purifier: Any = None
) -> torch.nn.Module:
    """
    Rebuild a classifier saved by :func:`save_classifier`, or one shipped with the package by name (``"digits"``;
    :mod:`art_adp.pretrained`), in eval mode. Never unpickles anything.

    A classifier trained behind a purifier (its header's ``purifier``, kept on the model as ``trained_behind``) warns
    when ``purifier`` is not that one (:func:`check_purifier`): give the purifier it will be evaluated behind.

    :raises FileNotFoundError: For a path that does not exist and is no bundled name (the message lists the names).
    """
    model, header = load_module(bundled_file(path, "classifier"), ARCHITECTURES, device)
    record = header.get("purifier")
    if record:
        model.trained_behind = record
        check_purifier(record, purifier, what=str(path))
    return model
