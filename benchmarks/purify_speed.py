"""Purification speed on the digits NCSNv2: overhead over the floor, speed-up over the released-code loop,
the CPU levers, the curve against the fraction of samples that stop early, and the cost of the JVP rule.

    OMP_NUM_THREADS=1 python benchmarks/purify_speed.py --out benchmarks/results/purify_speed.json
"""

from __future__ import annotations

import argparse
import torch
from baseline import baseline_purify
from common import compare, digits_models, setup, write

from art_adp import purify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=20, help="digits test images (default 20)")
    parser.add_argument("--runs", type=int, default=5, help="S, purifications per image (default 5)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/purify_speed.json")
    args = parser.parse_args()
    result = {"machine": setup(args.threads), "images": args.images, "runs": args.runs, "steps": args.steps}
    score, _, x_test, _ = digits_models()
    x = x_test[: args.images]
    xs = x.repeat(args.runs, 1, 1, 1)  # the S runs stacked: one pass
    T = args.steps

    def floor(sigma, tau):
        """The bare network forwards the purification needs, replayed on the very inputs it evaluated (forward
        time depends on the data on a CPU): 2 per step over the samples still running, nothing else."""
        inputs = []

        def recorder(z):
            inputs.append(z.clone())
            return score(z)

        with torch.no_grad():
            purify(recorder, xs, sigma=sigma, tau=tau, steps=T, compact=True, generator=torch.Generator().manual_seed(0))

        def go():
            with torch.no_grad():
                for z in inputs:
                    score(z)
        return go

    def ours(sigma, tau, compact, step_size="adaptive", mode=torch.no_grad):
        def go():
            with mode():
                return purify(score, xs, sigma=sigma, tau=tau, steps=T, compact=compact, step_size=step_size,
                              generator=torch.Generator().manual_seed(0), return_info=True)
        return go

    def baseline(sigma, tau):
        return lambda: baseline_purify(score, x, runs=args.runs, sigma=sigma, tau=tau, steps=T,
                                       generator=torch.Generator().manual_seed(0))

    # Levers at the paper's setting (σ = 0.25, τ = 1e-3): almost no sample stops early.
    xs_cl = xs.contiguous(memory_format=torch.channels_last)

    def channels_last():
        score.to(memory_format=torch.channels_last)
        with torch.no_grad():
            purify(score, xs_cl, sigma=0.25, steps=T, generator=torch.Generator().manual_seed(0))
        score.to(memory_format=torch.contiguous_format)

    levers = compare({"floor": floor(0.25, 1e-3), "baseline": baseline(0.25, 1e-3), "no_grad": ours(0.25, 1e-3, False),
                      "inference_mode": ours(0.25, 1e-3, False, mode=torch.inference_mode),
                      "compact": ours(0.25, 1e-3, True), "channels_last": channels_last,
                      "adaptive_jvp": ours(0.25, 1e-3, False, step_size="adaptive-jvp")}, repeats=args.repeats)
    levers["jvp_over_delta"] = levers["adaptive_jvp"] / levers["no_grad"]
    levers["overhead_over_floor"] = levers["compact"] / levers["floor"]
    levers["speedup_over_baseline"] = levers["baseline"] / levers["compact"]
    result["levers_seconds"] = levers
    print({k: round(v, 4) for k, v in levers.items()}, flush=True)

    # The curve: the floor, ours (with and without compaction) and the baseline against the stopped fraction.
    curve = []
    for sigma, tau in [(0.25, 1e-3), (0.25, 5e-3), (0.25, 1e-2), (0.0, 1e-3), (0.0, 3e-3)]:
        _, info = ours(sigma, tau, True)()
        evaluated = torch.clamp(info["steps"] + 1, max=T)  # a sample stopping at step s was evaluated s + 1 times
        row = {"sigma": sigma, "tau": tau, "mean_steps": float(info["steps"].float().mean()),
               "stopped_early_fraction": float((info["steps"] < T).float().mean()),
               "evaluations_needed_fraction": float(evaluated.sum()) / (T * len(xs))}
        times = compare({"floor_s": floor(sigma, tau), "ours_compact_s": ours(sigma, tau, True), "ours_frozen_s": ours(sigma, tau, False),
                         "baseline_s": baseline(sigma, tau)}, repeats=args.repeats)
        row.update(times)
        row["overhead_over_floor"] = row["ours_compact_s"] / row["floor_s"]
        row["speedup_over_baseline"] = row["baseline_s"] / row["ours_compact_s"]
        row["speedup_frozen_over_baseline"] = row["baseline_s"] / row["ours_frozen_s"]
        print({k: round(v, 4) for k, v in row.items()}, flush=True)
        curve.append(row)
    result["curve"] = curve
    print({k: round(v, 4) for k, v in levers.items()})
    write(args.out, result)


if __name__ == "__main__":
    main()
