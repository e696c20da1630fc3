"""Where a result came from: the command, the code version, the SHA-256 of the models' weights and of the data measured,
the device and the wall time.

Every application that writes a result file (the demo, the evaluation card, the benchmarks, the reproductions) puts
:func:`provenance` under its ``"provenance"`` key; ``docs/render.py`` renders published figures only from files that
carry it, and prints it under each figure. Every field is recorded by the run itself, never typed in afterwards.

Code with uncommitted changes (``git describe`` says ``-dirty``) leaves its changes in the record: ``code_diff`` is
``git diff HEAD`` and ``code_diff_sha256`` its SHA-256, so the result can be traced to the code that produced it;
``docs/render.py`` refuses a ``-dirty`` result without them.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from .._hardware import cpu_model, instruction_sets, kernel_caps
from .records import array_sha256, weights_sha256

__all__ = ["code_diff", "code_version", "device_description", "provenance", "MODELS_HASH"]

# How ``provenance()["models"]`` identifies a model, printed wherever the hashes are.
MODELS_HASH = "SHA-256 of the weights (state dict)"

_PACKAGE = Path(__file__).resolve().parents[1]


def code_version() -> str:
    """``art-adp <version>`` and, in a git checkout, ``git describe --always --dirty`` (e.g. ``be63ae8-dirty``)."""
    from .. import __version__

    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=_PACKAGE,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        described = ""
    return f"art-adp {__version__}" + (f" ({described})" if described else "")


def code_diff() -> str:
    """``git diff HEAD`` of the checkout the package is imported from: the uncommitted changes to tracked files that
    ``git describe --dirty`` reports ("" outside a git checkout or when there are none)."""
    try:
        return subprocess.run(
            ["git", "diff", "HEAD", "--no-color", "--no-ext-diff"],
            cwd=_PACKAGE,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def device_description(device: str | torch.device | None = None, *, precision: str | None = None) -> str:
    """
    The device in words, so that a speed figure names what produced it.

    On a CPU: its model (``/proc/cpuinfo``), the instruction sets that decide the speed (AVX2, AVX-512, AVX-512-BF16,
    AMX), the kernels' where an environment variable caps them (:func:`~art_adp._hardware.kernel_caps`), the torch
    threads in use, the precision, the load average when it ran and torch's version, e.g. ``CPU AMD
    EPYC (family 25, model 1); AVX2; no AVX-512, AVX-512-BF16, AMX; 1 thread(s), fp32, load average 1.1, torch
    2.13.0+cpu``. On a GPU: its name, the precision and the torch and CUDA versions.

    :param device: The device it ran on (default: CUDA if available, else the CPU).
    :param precision: The arithmetic it ran in (``"fp32"``, ``"bf16"``), where the run has one.
    """
    dev = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    arith = f", {precision}" if precision else ""
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)}{arith}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    cpu = "; ".join(filter(None, (f"CPU {cpu_model()}", instruction_sets(), kernel_caps())))
    return f"{cpu}; {torch.get_num_threads()} thread(s){arith}{load}, torch {torch.__version__}"


def provenance(
    *,
    wall_time_s: float,
    device: str | torch.device | None = None,
    models: Mapping[str, str | os.PathLike | torch.nn.Module] | None = None,
    data: Sequence[np.ndarray] | None = None,
    command: str | None = None,
    precision: str | None = None,
    started_at: str | None = None,
    started_diff: str | None = None,
) -> dict:
    """
    The ``"provenance"`` record of a result file.

    :param wall_time_s: Wall time of the run that produced the result, in seconds.
    :param device: The device it ran on (default: CUDA if available, else the CPU).
    :param models: Name → art-adp checkpoint file or module; each is recorded by the SHA-256 of its weights
        (:func:`~art_adp.runs.records.weights_sha256`: a checkpoint and the module loaded from it hash alike).
    :param data: The arrays measured, e.g. ``(x, y)``, the images and their labels: recorded as ``data_sha256``
        (:func:`~art_adp.runs.records.array_sha256` of their shapes, dtypes and bytes, as an evaluation's records
        carry it).
    :param command: The command line (default: this process's, as ``python``/``art-adp`` would be typed).
    :param precision: The arithmetic of the run (``"fp32"``, ``"bf16"``), named in the device string.
    :param started_at: The :func:`code_version` the run read when it started. A long run's code is what it loaded
        then; where the checkout has moved on since, that is its ``code_version`` and the checkout's now is
        ``code_version_at_end``.
    :param started_diff: :func:`code_diff` as the run read it when it started, for a ``started_at`` that is
        ``-dirty``: the diff recorded is the code the run loaded, not the checkout's at its end.
    :return: ``{"command", "code_version", "models", "models_hash", "device", "wall_time_s"}``, ``data_sha256``
        when ``data`` is given, and ``code_diff`` / ``code_diff_sha256`` when the code version is ``-dirty``.
    """
    if command is None:
        program = Path(sys.argv[0]).name
        head = ["art-adp"] if program in ("art-adp", "__main__.py") else ["python", sys.argv[0]]
        command = shlex.join([*head, *sys.argv[1:]])
    version = code_version()
    record: dict[str, object] = {
        "command": command,
        "code_version": started_at or version,
        "models": {name: weights_sha256(m) for name, m in (models or {}).items()},
        "models_hash": MODELS_HASH,
        "device": device_description(device, precision=precision),
        "wall_time_s": round(float(wall_time_s), 1),
    }
    if data is not None:
        record["data_sha256"] = array_sha256(*data)
    if started_at and started_at != version:
        record["code_version_at_end"] = version
    started_dirty = str(record["code_version"]).endswith("-dirty)")
    if started_dirty and started_at and started_diff is None:
        raise ValueError(
            f"the run started at uncommitted code ({started_at}): pass started_diff=code_diff() as read "
            "then, or the result cannot carry the code it ran"
        )
    if started_dirty or version.endswith("-dirty)"):
        diff = started_diff if started_at and started_dirty and started_diff is not None else code_diff()
        record.update(code_diff=diff, code_diff_sha256=hashlib.sha256(diff.encode()).hexdigest())
    return record
