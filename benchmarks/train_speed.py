"""DSM training throughput of the digits NCSNv2 (ngf=16, 1×8×8), one process.

    OMP_NUM_THREADS=1 python benchmarks/train_speed.py --out benchmarks/results/train_speed.json
"""

from __future__ import annotations

import argparse
import time

import torch
from common import setup, write

from art_adp import NCSNv2, geometric_sigmas, train_score_model
from art_adp.data import load_digits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/train_speed.json")
    args = parser.parse_args()
    result = {"machine": setup(args.threads), "batch_size": args.batch_size, "network": "NCSNv2(1, 8, ngf=16)"}
    x = load_digits().x_train
    sigmas = geometric_sigmas(1.0, 0.01, 10)
    times = {}
    for steps in (5, 5 + args.steps):  # the difference removes the set-up and the first, slower steps
        torch.manual_seed(0)
        start = time.perf_counter()
        train_score_model(NCSNv2(1, 8, ngf=16), x, sigmas, steps, batch_size=args.batch_size, seed=0, progress=False)
        times[steps] = time.perf_counter() - start
    seconds = times[5 + args.steps] - times[5]
    result.update({"steps_timed": args.steps, "seconds": seconds, "steps_per_s": args.steps / seconds,
                   "images_per_s": args.steps * args.batch_size / seconds})
    print({k: v for k, v in result.items() if k != "machine"})
    write(args.out, result)


if __name__ == "__main__":
    main()
