"""Where a result came from: the command, the code version, the models' SHA-256, the device and the wall time.

Every application that writes a result file (the demo, the evaluation card, the benchmarks, the reproductions) puts
:func:`provenance` under its ``"provenance"`` key; ``docs/render.py`` renders published figures only from files that
carry it, and prints it under each figure.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import torch

from .records import file_sha256, module_sha256

__all__ = ["code_version", "device_description", "provenance"]

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


def device_description(device: str | torch.device | None = None) -> str:
    """The device in words: the GPU's name, or the CPU with its thread count and the load average when it ran."""
    dev = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"CPU {platform.machine()}, {torch.get_num_threads()} thread(s){load}, torch {torch.__version__}"


def provenance(
    *,
    wall_time_s: float,
    device: str | torch.device | None = None,
    models: Mapping[str, str | os.PathLike | torch.nn.Module] | None = None,
    command: str | None = None,
) -> dict:
    """
    The ``"provenance"`` record of a result file.

    :param wall_time_s: Wall time of the run that produced the result, in seconds.
    :param device: The device it ran on (default: CUDA if available, else the CPU).
    :param models: Name → checkpoint file or module; each is recorded by its SHA-256 (the file's bytes, or the
        module's state dict as :func:`~art_adp.runs.records.module_sha256` hashes it).
    :param command: The command line (default: this process's, as ``python``/``art-adp`` would be typed).
    :return: ``{"command", "code_version", "models", "device", "wall_time_s"}``.
    """
    if command is None:
        program = Path(sys.argv[0]).name
        head = ["art-adp"] if program in ("art-adp", "__main__.py") else ["python", sys.argv[0]]
        command = shlex.join([*head, *sys.argv[1:]])
    hashes = {
        name: module_sha256(m) if isinstance(m, torch.nn.Module) else file_sha256(m)
        for name, m in (models or {}).items()
    }
    return {
        "command": command,
        "code_version": code_version(),
        "models": hashes,
        "device": device_description(device),
        "wall_time_s": round(float(wall_time_s), 1),
    }
