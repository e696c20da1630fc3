"""BPDA+EOT-15×40 throughput on digits: a plain L∞ PGD loop (40 iterations) over DefendedModel(ensemble_size=15) with
the purifier in BPDA mode, timed on a few images and iterations and extrapolated to the 360-image test split.

    OMP_NUM_THREADS=1 python benchmarks/eot_speed.py --out benchmarks/results/eot_speed.json
"""

from __future__ import annotations

import argparse
import time

import torch
from common import digits_models, setup, write

from art_adp import ADPPurifier, DefendedModel


def pgd(model, x, y, *, eps, step, iterations):
    """L∞ PGD from x: ascend the cross-entropy of ``model``'s log-mean-softmax (BPDA gradients here)."""
    x_adv = x.clone()
    for _ in range(iterations):
        x_adv.requires_grad_(True)
        loss = torch.nn.functional.nll_loss(model(x_adv), y)
        (grad,) = torch.autograd.grad(loss, x_adv)
        x_adv = (x + (x_adv.detach() + step * grad.sign() - x).clamp(-eps, eps)).clamp(0, 1)
    return x_adv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--iterations", type=int, default=2, help="PGD iterations timed (the attack has 40)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/eot_speed.json")
    args = parser.parse_args()
    result = {"machine": setup(args.threads), "images": args.images, "iterations_timed": args.iterations,
              "attack": "L_inf PGD eps=0.175 step=0.04375, 40 iterations, EOT 15 "
                        "(DefendedModel ensemble_size=15), BPDA"}
    score, clf, x_test, y_test = digits_models()
    x, y = x_test[: args.images], y_test[: args.images]
    for name, kw in {"default": {}, "channels_last": {"channels_last": True}}.items():
        purifier = ADPPurifier(score, gradient="bpda", device_type="cpu", batch_size=4096,
                               generator=torch.Generator().manual_seed(0), **kw)
        model = DefendedModel(clf, purifier, ensemble_size=15)
        pgd(model, x[:4], y[:4], eps=0.175, step=0.04375, iterations=1)  # warm-up
        start = time.perf_counter()
        pgd(model, x, y, eps=0.175, step=0.04375, iterations=args.iterations)
        seconds = time.perf_counter() - start
        per_image_iteration = seconds / (args.images * args.iterations)
        result[name] = {"seconds": seconds, "seconds_per_image_iteration": per_image_iteration,
                        "score_evaluations_per_s": args.images * args.iterations * 15 * 20 / seconds,
                        "extrapolated_360x40_s": per_image_iteration * 360 * 40}
        print(name, {k: round(v, 4) for k, v in result[name].items()}, flush=True)
    write(args.out, result)


if __name__ == "__main__":
    main()
