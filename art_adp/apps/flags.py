"""How the command line turns a settings dataclass into flags: one flag per field, its parser read from the field's
annotation, its default (shown in the help) the dataclass's. See :mod:`~art_adp.apps.cli` and docs/architecture.md.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .._hardware import PRECISION_CHOICES
from .commands import COMPILE_MODES

__all__ = [
    "COMPILE",
    "CONFIG",
    "PRECISION",
    "PRECISION_HELP",
    "THREADS_HELP",
    "TRAINER_HELP",
    "add_fields",
    "interval",
    "split",
]

CONFIG = "config."  # the dest prefix of a flag that sets a field of the command's settings


def split(kind: Callable[[str], Any]) -> Callable[[str], tuple]:
    """A parser of comma-separated values: ``"1,2,"`` -> ``(1, 2)``."""
    return lambda text: tuple(kind(v.strip()) for v in text.split(",") if v.strip())


def interval(text: str) -> int | str:
    """The parser of a best-iterate check interval: an integer, or ``auto``."""
    return text if text == "auto" else int(text)


def _kind(annotation: str) -> Callable[[str], Any]:
    """The parser of a settings field from its annotation: ``"int | None"`` -> int, ``"tuple[float, ...]"`` ->
    comma-separated floats."""
    base = {"int": int, "float": float}
    first = next((k for k in ("int", "float") if k in annotation), None)
    if annotation.startswith("tuple"):
        return split(base[first] if first else str)
    return base[first] if first and annotation.split()[0] in base else str


def add_fields(p, cls: type, helps: Mapping[str, str] = {}, *, skip=(), **options: dict) -> None:
    """One flag per field of the settings dataclass ``cls`` (but ``skip``): ``--max-iter`` sets ``max_iter``; its
    default, shown in the help, is the field's (read from ``cls`` alone); ``options[name]`` are further keywords of
    ``add_argument`` (choices, nargs, action, flag)."""
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.name not in skip:
            default, extra = getattr(defaults, f.name), _options(f, getattr(defaults, f.name), options.get(f.name, {}))
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            text = f"{helps.get(f.name, '')} (default: {shown})".strip()
            flag = extra.pop("flag", "--" + f.name.replace("_", "-"))
            p.add_argument(flag, dest=CONFIG + f.name, default=argparse.SUPPRESS, help=text, **extra)


def _options(f: dataclasses.Field, default: Any, given: Mapping) -> dict:
    """``add_argument``'s keywords for the field ``f``: a switch for a boolean, else a parser from its annotation."""
    extra = dict(given)
    if "action" not in extra and "nargs" not in extra and isinstance(default, bool):
        extra["action"] = "store_true"
    elif "action" not in extra:
        extra.setdefault("type", _kind(str(f.type)))
    if "choices" not in extra and extra.get("action") not in ("store_true", "store_false"):
        extra.setdefault("metavar", f.name.upper())
    return extra


# -- the flags and help texts several commands share -----------------------------------------------------------------

#: ``--precision`` of the trainers, and ``--compile`` (torch.compile's modes).
PRECISION = {"choices": list(PRECISION_CHOICES)}
COMPILE = {"nargs": "?", "const": True, "choices": COMPILE_MODES, "metavar": "MODE"}

THREADS_HELP = (
    "torch CPU threads (default: OMP_NUM_THREADS when set, else the cores free to this process: min(CPU affinity, "
    "cgroup CPU quota) minus the cores the 1-minute load average keeps busy, at least 1)"
)


TRAINER_HELP = {
    "lr": "Adam's; auto: large_batch_lr(batch)",
    "lr_warmup": "steps of linear lr warm-up",
    "precision": "forward pass, loss; fp32 (the default), bf16, or auto: bf16 where the device computes it natively "
    "(a CUDA GPU with bf16, a CPU with AVX-512-BF16 or AMX), else fp32, a resume keeping the run's",
    "channels_last": "channels_last weights and batches (tensor-core convolutions)",
    "compile": "torch.compile (alone: on)",
}


PRECISION_HELP = {
    "attack_precision": "the gradient attacks' gradient passes (purifier and classifier forward, and backward): fp32, "
    "or bf16 autocast where the processor computes it natively; every judged prediction stays fp32",
    "force_precision": "run bf16 even on a processor that emulates it (about 10x slower)",
}
