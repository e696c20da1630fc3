"""Where a model lives, and inputs placed there: the one helper every entry point uses before a forward pass.

On a CPU-only machine a device mismatch cannot show up, so the entry points (``reproduce``, ``evaluate``,
``corruptions``, ``certify``, ``detect``, ``demo``) never build input tensors with a bare ``torch.as_tensor(x)``:
they call :func:`to_model` with the module the tensor is for.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["model_device", "model_dtype", "to_model", "resolve_device"]


def _first_tensor(module: torch.nn.Module) -> torch.Tensor | None:
    return next(iter((*module.parameters(), *module.buffers())), None)


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter (or buffer); CPU for a module that holds neither."""
    tensor = _first_tensor(module)
    return torch.device("cpu") if tensor is None else tensor.device


def model_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype of ``module``'s first floating-point parameter (or buffer); float32 for a module without any."""
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def to_model(x: np.ndarray | torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
    """
    ``x`` (numpy or torch) as a tensor on ``module``'s device; floating-point inputs in ``module``'s dtype, integer
    ones (labels) keep theirs. No copy when ``x`` is already there.

    :param x: Images or labels.
    :param module: The network the tensor is for.
    :return: The tensor, ready for ``module``.
    """
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise ValueError(f"x must be a numpy array or a torch tensor, got {type(x).__name__}; wrap it in np.asarray.")
    t = torch.as_tensor(np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x)
    if t.is_floating_point():
        return t.to(model_device(module), model_dtype(module))
    return t.to(model_device(module))


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a :class:`torch.device`; ``None`` means CUDA when available, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for but torch sees no CUDA device; pass --device cpu.")
    return dev
