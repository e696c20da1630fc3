"""Full-gradient peak memory through T = 10 purification steps, with and without per-step checkpointing (CPU:
peak resident memory of a fresh process above its level before the forward pass; `benchmarks/gpu.py` reports
the CUDA figure).

    OMP_NUM_THREADS=1 python benchmarks/memory.py --out benchmarks/results/memory.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from common import digits_models, setup, write

from art_adp import purify


def worker(checkpoint: bool, images: int) -> dict:
    torch.set_num_threads(1)
    score, _, x_test, _ = digits_models()
    x = x_test[:1].repeat(images, 1, 1, 1).requires_grad_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.perf_counter()
    out = purify(score, x, tau=0.0, generator=torch.Generator().manual_seed(0), gradient_checkpointing=checkpoint)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_above_start_mib": (peak - before) / 1024, "seconds": seconds, "grad_sum": float(grad.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--out", default="benchmarks/results/memory.json")
    parser.add_argument("--worker", choices=["plain", "checkpoint"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker == "checkpoint", args.images)))
        return
    result = {"machine": setup(1), "images": args.images, "steps": 10, "network": "digits NCSNv2(1, 8, ngf=16)"}
    for mode in ("plain", "checkpoint"):
        done = subprocess.run([sys.executable, __file__, "--worker", mode, "--images", str(args.images)],
                              capture_output=True, text=True, check=True)
        result[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        print(mode, result[mode], flush=True)
    result["memory_ratio"] = result["checkpoint"]["peak_above_start_mib"] / result["plain"]["peak_above_start_mib"]
    result["time_ratio"] = result["checkpoint"]["seconds"] / result["plain"]["seconds"]
    result["same_gradient"] = result["checkpoint"]["grad_sum"] == result["plain"]["grad_sum"]
    write(args.out, result)


if __name__ == "__main__":
    main()
