"""DSM training throughput of the MNIST recipe's NCSNv2 (1×28×28): samples/s and achieved TFLOP/s of
`train_score_model` itself, for fp32, bf16, bf16 + channels_last and bf16 + channels_last + torch.compile (plain and
with CUDA graphs), over ngf and batch.

    python benchmarks/train_speed.py --device cuda --budget 480 --profile bf16+channels_last:32:512 \\
        --out benchmarks/results/train_speed_cuda.json
    OMP_NUM_THREADS=1 python benchmarks/train_speed.py --device cpu --threads 1 --ngf 16 --batch 128 \\
        --modes fp32,bf16 --warmup 2 --steps 5 --out benchmarks/results/train_speed_cpu.json
    python benchmarks/train_speed.py --smoke --out /tmp/train_speed_smoke.json     # CPU, seconds

What is timed is the trainer (`train_score_model`, progress bar on, no checkpoint): its progress bar is replaced by a
stopwatch that synchronises the device after the warm-up steps (compilation, cuDNN autotuning and allocator growth
fall there) and at the end, so the figure is the steady state of the real loop, host overheads included. FLOPs are
counted with `torch.utils.flop_counter.FlopCounterMode` over one forward + backward of the network (on the meta
device, scaled to the batch; matrix products and convolutions only: elementwise work, the norms and Adam are not
counted, so "achieved TFLOP/s" is the useful convolution work per second). Results are written after every
configuration, so a run stopped by its budget or a timeout keeps what it measured.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from common import ROOT, setup, sync, write

import art_adp.score.train as train_module
from art_adp import NCSNv2, dsm_loss, geometric_sigmas, train_score_model

MODES = {  # name: keyword arguments of train_score_model
    "fp32": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "bf16+channels_last": {"precision": "bf16", "channels_last": True},
    "bf16+channels_last+compile": {"precision": "bf16", "channels_last": True, "compile": True},
    "bf16+channels_last+compile+cudagraphs": {"precision": "bf16", "channels_last": True, "compile": "reduce-overhead"},
}
SIGMAS = geometric_sigmas(1.0, 0.01, 20)  # the MNIST recipe's schedule (MnistRecipe defaults)


class _Stopwatch:
    """Stands in for the trainer's tqdm bar: starts the clock after `warmup` steps and stops it at close()."""

    warmup = 0
    device = "cpu"
    last: dict = {}

    def __init__(self, *args, **kwargs) -> None:  # pylint: disable=unused-argument
        self.n = 0
        type(self).last = self.times = {}

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n == self.warmup:
            sync(self.device)
            self.times["start"], self.times["start_step"] = time.perf_counter(), self.n

    def set_postfix(self, **kwargs) -> None:
        pass

    def close(self) -> None:
        sync(self.device)
        self.times["stop"], self.times["stop_step"] = time.perf_counter(), self.n


@functools.lru_cache(maxsize=None)
def count_flops(ngf: int, batch: int) -> int:
    """Matrix/convolution FLOPs of one forward + backward of the network at ``batch`` (counted on the meta device
    at batch 2 and scaled: every counted operation is linear in the batch; the DSM loss around the network and
    autocast add none)."""
    with torch.device("meta"):
        model, x = NCSNv2(1, 28, ngf=ngf), torch.rand(2, 1, 28, 28)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return int(counter.get_total_flops()) // 2 * batch


class _Traffic(TorchDispatchMode):
    """Counts the ATen operations of a step (≈ kernels launched in eager mode) and the bytes of the batch-shaped
    tensors they read and write (≈ the activation traffic to memory, if nothing stays in cache)."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.ops, self.bytes = batch, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func not in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            self.ops += 1
            for t in torch.utils._pytree.tree_leaves((args, kwargs, out)):  # pylint: disable=protected-access
                if isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[0] == self.batch:
                    self.bytes += t.numel() * t.element_size()
        return out


@functools.lru_cache(maxsize=None)
def eager_traffic(ngf: int, precision: str) -> dict:
    """ATen operations per forward + backward of the DSM loss, and activation bytes per sample, in eager mode (on
    the CPU at batch 8: a property of the graph, not of the device)."""
    model, batch = NCSNv2(1, 28, ngf=ngf), 8
    x = torch.rand(batch, 1, 28, 28)
    counter = _Traffic(batch)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    with counter:
        with autocast:
            loss = dsm_loss(model, x, SIGMAS, generator=torch.Generator().manual_seed(0))
        loss.backward()
    return {"eager_ops_per_step": counter.ops, "eager_activation_bytes_per_sample": counter.bytes / batch}


def profile(mode: str, ngf: int, batch: int, args, x: torch.Tensor) -> str:
    """torch.profiler's table of the most expensive operations over warm-up + timed steps of one configuration."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _Stopwatch.warmup, _Stopwatch.device = args.warmup, args.device
    torch.manual_seed(0)
    with torch.profiler.profile(activities=activities) as prof:
        train_score_model(
            NCSNv2(1, 28, ngf=ngf),
            x,
            SIGMAS,
            args.warmup + args.steps,
            batch_size=batch,
            seed=0,
            device=args.device,
            **MODES[mode],
        )
    key = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=25)


def measure(mode: str, ngf: int, batch: int, args, x: torch.Tensor) -> dict:
    _Stopwatch.warmup, _Stopwatch.device = args.warmup, args.device
    torch.manual_seed(0)
    if "compile" in mode:
        torch._dynamo.reset()  # pylint: disable=protected-access  # each configuration compiles afresh
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    train_score_model(
        NCSNv2(1, 28, ngf=ngf),
        x,
        SIGMAS,
        args.warmup + args.steps,
        batch_size=batch,
        seed=0,
        progress=True,
        device=args.device,
        **MODES[mode],
    )
    t = _Stopwatch.last
    seconds = t["stop"] - t["start"]
    steps = t["stop_step"] - t["start_step"]
    flops = count_flops(ngf, batch)
    return {
        "mode": mode,
        "ngf": ngf,
        "batch_size": batch,
        "status": "ok",
        "warmup_steps": args.warmup,
        "steps_timed": steps,
        "seconds_timed": seconds,
        "seconds_with_warmup": time.perf_counter() - start,
        "steps_per_s": steps / seconds,
        "samples_per_s": steps * batch / seconds,
        "flops_per_step": flops,
        "flops_per_sample": flops / batch,
        "tflops_per_s": flops * steps / seconds / 1e12,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None,
        **eager_traffic(ngf, MODES[mode]["precision"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=480.0, help="seconds; configurations past it are skipped")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--ngf", default="32,16,64", help="comma-separated, in the order to measure")
    parser.add_argument("--batch", default="512,2048,1024,256,128", help="comma-separated, in the order to measure")
    parser.add_argument("--warmup", type=int, default=10, help="steps run before the clock starts")
    parser.add_argument("--steps", type=int, default=40, help="steps timed")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-cudnn-benchmark", action="store_true", help="leave cuDNN's autotuner off")
    parser.add_argument(
        "--profile", default=None, help="MODE:NGF:BATCH, e.g. bf16:32:512: also store torch.profiler's table for it"
    )
    parser.add_argument("--smoke", action="store_true", help="CPU, ngf 8, batch 16, 1 + 2 steps, no compile")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.modes, args.ngf, args.batch = "cpu", "fp32,bf16,bf16+channels_last", "8", "16"
        args.warmup, args.steps, args.threads = 1, 2, args.threads or 1
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"Unknown modes {unknown}; known: {list(MODES)}.")
    if args.warmup < 1 or args.steps < 1:
        raise SystemExit("--warmup and --steps must be >= 1.")
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    bar, train_module.tqdm = train_module.tqdm, _Stopwatch  # the trainer's bar becomes the stopwatch
    try:
        run(args, modes)
    finally:
        train_module.tqdm = bar


def run(args, modes: list[str]) -> None:
    """Measure every configuration and write the JSON after each."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_commit": commit,
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "CPU (shared, loaded)",
        "torch": torch.__version__,
        "machine": setup(args.threads),
        "network": "NCSNv2(1, 28, ngf) as in `reproduce mnist`; sigmas geometric(1.0, 0.01, 20)",
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if args.device == "cuda" else None,
        "smoke": args.smoke,
        "budget_s": args.budget,
        "results": [],
    }
    x = torch.rand(4096, 1, 28, 28, generator=torch.Generator().manual_seed(0))  # speed does not depend on content
    start = time.perf_counter()
    configs = list(itertools.product([int(n) for n in args.ngf.split(",")], [int(b) for b in args.batch.split(",")]))
    plain = [m for m in modes if "compile" not in m]
    compiled = [m for m in modes if "compile" in m]
    # Every plain mode at every size first, then the compiled ones (each compiles for minutes on a CPU, ~1 on a GPU).
    for mode, (ngf, batch) in [(m, c) for c in configs for m in plain] + [(m, c) for c in configs for m in compiled]:
        elapsed = time.perf_counter() - start
        if elapsed > args.budget:
            row = {"mode": mode, "ngf": ngf, "batch_size": batch, "status": f"skipped: budget {args.budget} s spent"}
        else:
            try:
                row = measure(mode, ngf, batch, args, x)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                row = {"mode": mode, "ngf": ngf, "batch_size": batch, "status": "out of memory"}
            except Exception as err:  # pylint: disable=broad-exception-caught  # one failing mode keeps the rest
                row = {"mode": mode, "ngf": ngf, "batch_size": batch, "status": f"failed: {type(err).__name__}: {err}"}
        result["results"].append(row)
        result["wall_s"] = time.perf_counter() - start
        if row["status"] == "ok":
            print(
                f"{mode:20s} ngf {ngf:3d} batch {batch:5d}: {row['samples_per_s']:10.0f} samples/s "
                f"{row['steps_per_s']:7.2f} it/s {row['tflops_per_s']:7.3f} TFLOP/s "
                f"({row['flops_per_sample'] / 1e6:.1f} MFLOP/sample)",
                flush=True,
            )
        else:
            print(f"{mode:20s} ngf {ngf:3d} batch {batch:5d}: {row['status']}", flush=True)
        write(args.out, result)
    if args.profile and time.perf_counter() - start <= args.budget:
        mode, ngf, batch = args.profile.split(":")
        table = profile(mode, int(ngf), int(batch), args, x)
        print(table)
        result["profile"] = {"config": args.profile, "table": table.splitlines()}
        result["wall_s"] = time.perf_counter() - start
        write(args.out, result)


if __name__ == "__main__":
    main()
