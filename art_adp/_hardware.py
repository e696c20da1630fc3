"""What this machine's processor can do: the precision a command picks on ``"auto"``, the CPU's model and instruction
sets (for provenance), and the default number of torch threads.

Precision. bf16 autocast is fast only where the hardware computes in bf16: CUDA GPUs that support it
(``torch.cuda.is_bf16_supported()``) and CPUs with AVX-512-BF16 or AMX-BF16. On other CPUs (AVX2 only, as most laptops
and cloud machines) torch emulates it, an order of magnitude slower than fp32. :func:`resolve_precision` turns
``"auto"`` into ``"bf16"`` where it is native and ``"fp32"`` elsewhere, and says why; an explicit ``"fp32"`` or
``"bf16"`` always wins, and a resumed run keeps the precision it was trained in.

Threads. A command runs with ``--threads`` when given, else with ``OMP_NUM_THREADS`` when it is set, else with
:func:`default_threads`, the cores free to this process (:func:`choose_threads`)::

    cores   = min(len(os.sched_getaffinity(0)), floor(cgroup CPU quota))    (the quota: cpu.max, or v1
              cpu.cfs_quota_us / cpu.cfs_period_us; no quota: the affinity alone)
    busy    = min(cores, floor(load + 0.5)), load = os.getloadavg()[0] × cores / os.cpu_count()   (the 1-minute
              load average, scaled to the cores this process may use)
    threads = max(1, cores − busy)

so a machine whose other cores are busy gets one thread (on a loaded 2-core machine two torch threads ran 25-50x
slower than one) and an idle one all of its cores.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Mapping
from pathlib import Path

import torch

__all__ = [
    "PRECISION_CHOICES",
    "autocast",
    "cgroup_cpu_quota",
    "choose_threads",
    "cpu_features",
    "cpu_model",
    "default_threads",
    "instruction_sets",
    "kernel_caps",
    "native_bf16",
    "require_native",
    "resolve_precision",
]

#: What every ``--precision`` accepts: ``auto`` (bf16 where native, else fp32), or a precision itself.
PRECISION_CHOICES = ("auto", "fp32", "bf16")

CPUINFO = "/proc/cpuinfo"
CGROUP = "/sys/fs/cgroup"

# The instruction sets that decide the speed of a CPU run: name -> (torch.cpu's query, /proc/cpuinfo flag).
_FEATURES = {
    "AVX2": ("_is_avx2_supported", "avx2"),
    "AVX-512": ("_is_avx512_supported", "avx512f"),
    "AVX-512-BF16": ("_is_avx512_bf16_supported", "avx512_bf16"),
    "AMX": ("_is_amx_tile_supported", "amx_bf16"),
}


def _cpuinfo(path: str | os.PathLike = CPUINFO) -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo`` ({} where there is none)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def cpu_model(cpuinfo: str | os.PathLike = CPUINFO) -> str:
    """The CPU's model name (``/proc/cpuinfo``), with its family and model numbers where the name is as short as a
    virtual machine's ``AMD EPYC``; else the platform's processor or machine name."""
    info = _cpuinfo(cpuinfo)
    name = info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']}, model {info['model']})"
    return name


def cpu_features(cpuinfo: str | os.PathLike = CPUINFO) -> dict[str, bool]:
    """``{"AVX2", "AVX-512", "AVX-512-BF16", "AMX"}`` → present, as torch's CPU queries (``torch.cpu._is_*``) answer,
    else as the CPU's flags in ``/proc/cpuinfo`` say (AMX: the ``amx_bf16`` flag)."""
    flags = set(_cpuinfo(cpuinfo).get("flags", "").split())
    out = {}
    for name, (query, flag) in _FEATURES.items():
        ask = getattr(torch.cpu, query, None)
        try:
            out[name] = bool(ask()) if ask is not None else flag in flags
        except RuntimeError:
            out[name] = flag in flags
    return out


def instruction_sets(features: dict[str, bool] | None = None) -> str:
    """The instruction sets in words: ``"AVX2; no AVX-512, AVX-512-BF16, AMX"``."""
    features = cpu_features() if features is None else features
    have = [k for k, v in features.items() if v]
    lack = [k for k, v in features.items() if not v]
    return "; ".join(p for p in (", ".join(have) or "no AVX2", "no " + ", ".join(lack) if lack else "") if p)


#: The environment variables that cap the instruction set of torch's CPU kernels: ATen's own, oneDNN's, MKL's.
KERNEL_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def kernel_caps(environ: Mapping[str, str] | None = None) -> str:
    """
    The kernels' instruction set in words where an environment variable caps it, else ``""``: ``"kernels AVX2
    (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2)"``. Float results depend on the kernels, not the processor:
    an AVX-512 processor with its kernels capped at AVX2 trains the weights an AVX2 processor trains, bit for bit, so
    a record names the cap beside the processor's instruction sets.

    :param environ: The environment (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    caps = [f"{name}={environ[name]}" for name in KERNEL_CAPS if environ.get(name)]
    return f"kernels {torch.backends.cpu.get_cpu_capability()} ({', '.join(caps)})" if caps else ""


def native_bf16(device: str | torch.device | None = None, *, features: dict[str, bool] | None = None) -> bool:
    """
    Whether ``device`` computes in bf16 natively: a CUDA GPU with ``torch.cuda.is_bf16_supported()``, a CPU with
    AVX-512-BF16 or AMX.

    :param device: ``"cpu"``, ``"cuda"`` or a :class:`torch.device` (None: CUDA when available, else the CPU).
    :param features: The CPU's instruction sets (default: :func:`cpu_features`).
    """
    dev = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    features = cpu_features() if features is None else features
    return bool(features.get("AVX-512-BF16") or features.get("AMX"))


def resolve_precision(
    precision: str,
    device: str | torch.device | None = None,
    *,
    held: str | None = None,
    features: dict[str, bool] | None = None,
) -> tuple[str, str]:
    """
    The precision a run uses and why.

    :param precision: ``"auto"``, ``"fp32"`` or ``"bf16"``.
    :param device: Where it runs (None: CUDA when available, else the CPU).
    :param held: The precision of the run being resumed, if any: ``"auto"`` keeps it.
    :param features: The CPU's instruction sets (default: :func:`cpu_features`).
    :return: ``(precision, reason)``, e.g. ``("fp32", "auto: this CPU has no native bf16 (AVX2; no AVX-512,
        AVX-512-BF16, AMX); bf16 would be emulated, about 10x slower")``.
    :raises ValueError: For another value.
    """
    if precision not in PRECISION_CHOICES:
        raise ValueError(f"precision must be 'auto', 'fp32' or 'bf16', got {precision!r}.")
    if precision != "auto":
        return precision, "as given"
    if held is not None:
        return held, f"auto: the run being resumed was trained in {held}"
    dev = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev) if torch.cuda.is_available() else "this GPU"
        if native_bf16(dev):
            return "bf16", f"auto: {name} computes in bf16 natively"
        return "fp32", f"auto: {name} has no native bf16"
    features = cpu_features() if features is None else features
    isa = instruction_sets(features)
    if native_bf16(dev, features=features):
        return "bf16", f"auto: this CPU has native bf16 ({isa})"
    return "fp32", f"auto: this CPU has no native bf16 ({isa}); bf16 would be emulated, about 10x slower"


def require_native(
    precision: str,
    device: str | torch.device | None = None,
    *,
    force: bool = False,
    features: dict[str, bool] | None = None,
) -> str:
    """
    ``precision`` (``"fp32"`` or ``"bf16"``) for a run of gradient passes on ``device``, refusing bf16 where the
    processor emulates it (about 10x slower than fp32) unless ``force``.

    :raises ValueError: For another value, or bf16 without native support (the message names the processor).
    """
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}.")
    if precision == "bf16" and not force and not native_bf16(device, features=features):
        dev = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
        where = (
            f"this CPU, {cpu_model()} ({instruction_sets(features)})"
            if dev.type == "cpu"
            else f"this GPU ({torch.cuda.get_device_name(dev) if torch.cuda.is_available() else dev})"
        )
        raise ValueError(
            f"bf16 is not native on {where}: torch would emulate it, about 10x slower than fp32. "
            "Use fp32, or force bf16 (--force-precision / force=True)."
        )
    return precision


def autocast(precision: str, device: str | torch.device = "cpu"):
    """The context of gradient passes at ``precision``: ``torch.autocast`` to bf16 on ``device``'s type (weights
    stay fp32; matmuls and convolutions run in bf16), or nothing for fp32."""
    import contextlib

    if precision == "fp32":
        return contextlib.nullcontext()
    if precision != "bf16":
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}.")
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def cgroup_cpu_quota(root: str | os.PathLike = CGROUP) -> float | None:
    """
    The CPU quota of this process's cgroup, in cores (``1.5``: one and a half cores' time), or None without one.

    Reads cgroup v2's ``cpu.max`` (``"<quota> <period>"`` or ``"max <period>"``), else v1's ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` (quota -1: none), under ``root`` (in a container: its own cgroup).
    """
    root = Path(root)
    try:
        text, period_text = (root / "cpu.max").read_text().split()[:2]
        return None if text == "max" else int(text) / int(period_text)
    except (OSError, ValueError):
        pass
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        try:
            quota = int((root / sub / "cpu.cfs_quota_us").read_text())
            period = int((root / sub / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota <= 0 or period <= 0 else quota / period
    return None


def default_threads(
    *,
    affinity: int | None = None,
    quota: float | None | str = "read",
    load: float | None = None,
    cpu_count: int | None = None,
) -> tuple[int, str]:
    """
    The default number of torch threads: the cores free to this process (see the module docstring for the rule).

    :param affinity: Cores this process may run on (default: ``len(os.sched_getaffinity(0))``).
    :param quota: The cgroup's CPU quota in cores, None for none (default: :func:`cgroup_cpu_quota`).
    :param load: The 1-minute load average (default: ``os.getloadavg()[0]``; 0 where there is none).
    :param cpu_count: The machine's cores (default: ``os.cpu_count()``).
    :return: ``(threads, reason)``, e.g. ``(1, "auto: 2 core(s) for this process, 1 busy (load 1.20)")``.
    """
    total = cpu_count or os.cpu_count() or 1
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    cgroup = cgroup_cpu_quota() if quota == "read" else quota
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cores = max(1, min(affinity, math.floor(float(cgroup))) if cgroup is not None else affinity)
    busy = min(cores, math.floor(float(load) * cores / total + 0.5))
    threads = max(1, cores - busy)
    limit = f"affinity {affinity}" + (f", cgroup quota {cgroup:g}" if cgroup is not None else "")
    return threads, f"auto: {cores} core(s) for this process ({limit}), {busy} busy (load {float(load):.2f})"


def choose_threads(threads: int | None = None) -> tuple[int, str]:
    """
    The torch threads of a command: ``threads`` when given (``--threads``), else ``OMP_NUM_THREADS`` when it is set
    (torch's own choice then), else :func:`default_threads`.

    :return: ``(threads, why)``.
    """
    if threads:
        return int(threads), "as given"
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    return default_threads()
