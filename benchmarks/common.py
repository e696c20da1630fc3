"""Shared helpers of the benchmarks: timing, the digits models, JSON output, the released-code baseline."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The digits models (score.safetensors, classifier.safetensors): what `art-adp demo` writes, or $ART_ADP_DIGITS.
DIGITS = Path(os.environ.get("ART_ADP_DIGITS", ROOT / "runs" / "demo"))
# What `write` records as the result's provenance: when the run started and the checkpoints it loaded.
_RUN = {"start": time.perf_counter(), "models": {}}


def setup(threads: int | None) -> dict:
    """Pin the thread count (the figures say which) and describe the machine."""
    if threads:
        torch.set_num_threads(threads)
    _RUN["start"] = time.perf_counter()
    return {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "load_avg_1min": os.getloadavg()[0], "command": " ".join([Path(sys.executable).name, *sys.argv])}


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timeit(fn, *, repeats: int = 3, warmup: int = 1, device="cpu") -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(fns: dict, *, repeats: int = 3, warmup: int = 1, device="cpu") -> dict:
    """Median wall time of each ``fns[name]()``, the runs interleaved round-robin so that a busy machine
    slows every candidate alike (the ratios are what the figures claim)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def digits_models():
    from art_adp import load_score_model
    from art_adp.data import load_digits
    from art_adp.models import load_classifier

    if not (DIGITS / "score.safetensors").is_file():
        raise SystemExit(f"No digits models in {DIGITS}: run `art-adp demo` first (it writes runs/demo), or point "
                         "$ART_ADP_DIGITS at a folder with score.safetensors and classifier.safetensors.")
    data = load_digits()
    _RUN["models"].update(score=DIGITS / "score.safetensors", classifier=DIGITS / "classifier.safetensors")
    return (load_score_model(DIGITS / "score.safetensors"), load_classifier(DIGITS / "classifier.safetensors"),
            torch.as_tensor(data.x_test, dtype=torch.float32), torch.as_tensor(data.y_test))


def write(path: str | os.PathLike, result: dict, *, device=None) -> None:
    """Write ``result`` as JSON with its provenance (command, code version, the checkpoints loaded through
    :func:`digits_models`, device, wall time since :func:`setup`)."""
    from art_adp.runs.provenance import provenance

    threads = os.environ.get("OMP_NUM_THREADS")
    command = " ".join([*([f"OMP_NUM_THREADS={threads}"] if threads else []), "python", *sys.argv])
    result = {**result, "provenance": provenance(wall_time_s=time.perf_counter() - _RUN["start"], device=device,
                                                 models=_RUN["models"], command=command)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
