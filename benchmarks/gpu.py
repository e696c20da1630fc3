"""GPU figures: CIFAR-sized NCSNv2 purification throughput at S = 10, T = 10, batch 100, against the
released-code loop, plus the fast-path options and full-gradient peak memory. Writes JSON to the given path.

    python benchmarks/gpu.py benchmarks/results/gpu.json            # on a CUDA machine, < 5 minutes
    python benchmarks/gpu.py /tmp/gpu_smoke.json --smoke           # anywhere: tiny sizes, checks it runs

The network has RANDOM weights (NCSNv2(3, 32, ngf=128), 29.7 M parameters, torch.manual_seed(0)) and the
images are uniform noise: throughput does not depend on training, but stopping does, so τ = 0 makes every
sample take all T steps (what a well-trained model does at the default τ; random weights would otherwise
stop almost every sample at once and flatter compaction).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import baseline_purify  # noqa: E402
from common import setup, timeit, write  # noqa: E402

from art_adp import NCSNv2, purify  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="where to write the JSON figures")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, runs on CPU too")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds after which optional parts are skipped")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile figure")
    args = parser.parse_args()
    start = time.perf_counter()
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        sys.exit("gpu.py needs CUDA; run with --smoke to check it on a CPU.")
    device = torch.device("cuda" if cuda else "cpu")
    n, runs, T, size, ngf, repeats = (100, 10, 10, 32, 128, 3) if not args.smoke else (4, 2, 2, 8, 8, 1)
    result = {"machine": setup(None), "smoke": args.smoke, "images": n, "runs": runs, "steps": T,
              "network": f"NCSNv2(3, {size}, ngf={ngf}), random weights (seed 0)", "tau": 0.0,
              "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
              "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32, "seconds": {}, "agreement_max_abs": {}}
    torch.manual_seed(0)
    score = NCSNv2(3, size, ngf=ngf).to(device).eval().requires_grad_(False)
    result["parameters"] = sum(p.numel() for p in score.parameters())
    x = torch.rand(n, 3, size, size, device=device, generator=torch.Generator(device).manual_seed(1))
    xs = x.repeat(runs, 1, 1, 1)
    gen = lambda: torch.Generator(device).manual_seed(0)  # noqa: E731
    sec = result["seconds"]

    def save():
        result["elapsed_s"] = time.perf_counter() - start
        write(args.out, result)

    def ours(**kw):
        def go():
            with torch.no_grad():
                return purify(score, xs_fmt[0], sigma=0.25, steps=T, tau=0.0, generator=gen(), **kw)
        return go

    xs_fmt = [xs]  # the input batch in the memory format being measured
    with torch.no_grad():
        sec["forward_batch_1000"] = timeit(lambda: score(xs), repeats=repeats + 2, device=device)
        sec["forward_batch_100"] = timeit(lambda: score(x), repeats=repeats + 2, device=device)
    sec["baseline"] = timeit(lambda: baseline_purify(score, x, runs=runs, steps=T, tau=0.0, generator=gen()),
                             repeats=repeats, device=device)
    sec["ours"] = timeit(ours(), repeats=repeats, device=device)
    sec["ours_compact"] = timeit(ours(compact=True), repeats=repeats, device=device)  # the per-step sync's cost
    result["floor_s"] = 2 * T * sec["forward_batch_1000"]
    result["overhead_over_floor"] = sec["ours"] / result["floor_s"]
    result["speedup_over_baseline"] = sec["baseline"] / sec["ours"]
    result["images_per_s"] = {"baseline": n / sec["baseline"], "ours": n / sec["ours"]}
    save()
    reference = ours()()
    # The fastest path first (a short session keeps it): bf16 autocast with channels_last, against its forward floor.
    score.to(memory_format=torch.channels_last)
    xs_fmt[0] = xs.contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        sec["forward_batch_1000_bfloat16_channels_last"] = timeit(lambda: score(xs_fmt[0]), repeats=repeats + 2,
                                                                  device=device)
    fast = dict(step_size="adaptive-jvp", amp="bfloat16")  # amp needs the JVP step (the δ difference drowns in bf16)
    sec["ours_bfloat16_channels_last"] = timeit(ours(**fast), repeats=repeats, device=device)
    result["agreement_max_abs"]["bfloat16_channels_last"] = float((ours(**fast)() - reference).abs().max())
    result["floor_bfloat16_s"] = 2 * T * sec["forward_batch_1000_bfloat16_channels_last"]
    result["bfloat16_channels_last_over_its_floor"] = sec["ours_bfloat16_channels_last"] / result["floor_bfloat16_s"]
    xs_fmt[0] = xs
    score.to(memory_format=torch.contiguous_format)
    result["images_per_s"]["bfloat16_channels_last"] = n / sec["ours_bfloat16_channels_last"]
    save()
    # Fast paths, each with its agreement with the plain float32 path on the same noise.
    score.to(memory_format=torch.channels_last)
    xs_fmt[0] = xs.contiguous(memory_format=torch.channels_last)
    sec["ours_channels_last"] = timeit(ours(), repeats=repeats, device=device)
    result["agreement_max_abs"]["channels_last"] = float((ours()() - reference).abs().max())
    xs_fmt[0] = xs
    score.to(memory_format=torch.contiguous_format)
    jvp32 = ours(step_size="adaptive-jvp")()
    sec["ours_jvp"] = timeit(ours(step_size="adaptive-jvp"), repeats=repeats, device=device)
    result["agreement_max_abs"]["jvp_vs_delta"] = float((jvp32 - reference).abs().max())
    for amp in ("bfloat16", "float16"):
        sec[f"ours_jvp_{amp}"] = timeit(ours(step_size="adaptive-jvp", amp=amp), repeats=repeats, device=device)
        result["agreement_max_abs"][f"jvp_{amp}_vs_jvp_float32"] = float((ours(step_size="adaptive-jvp", amp=amp)()
                                                                           - jvp32).abs().max())
    score.to(memory_format=torch.channels_last)
    xs_fmt[0] = xs.contiguous(memory_format=torch.channels_last)
    sec["ours_jvp_bfloat16_channels_last"] = timeit(ours(step_size="adaptive-jvp", amp="bfloat16"), repeats=repeats,
                                                    device=device)
    xs_fmt[0] = xs
    score.to(memory_format=torch.contiguous_format)
    result["images_per_s"].update({k[5:]: n / v for k, v in sec.items() if k.startswith("ours_")})
    save()

    # Full-gradient peak memory through T steps, with and without per-step checkpointing (CUDA only).
    if cuda:
        xg_base = x[: max(1, n // 10)]
        for checkpoint in (False, True):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            xg = xg_base.clone().requires_grad_()
            t0 = time.perf_counter()
            purify(score, xg, steps=T, tau=0.0, generator=gen(), gradient_checkpointing=checkpoint).sum().backward()
            torch.cuda.synchronize()
            result[f"full_gradient_{'checkpoint' if checkpoint else 'plain'}"] = {
                "images": len(xg_base), "peak_mib": (torch.cuda.max_memory_allocated() - base) / 2**20,
                "seconds": time.perf_counter() - t0}
        save()

    # torch.compile (inductor) of the network: compile time and steady-state time, if the budget allows.
    if args.no_compile or (time.perf_counter() - start) > args.budget * 0.5:
        result["compile"] = "skipped (budget or --no-compile)"
    else:
        plain = score
        try:
            # compiled in the fastest eager configuration: bf16 autocast, channels_last
            score = torch.compile(plain.to(memory_format=torch.channels_last),
                                  backend="eager" if args.smoke else "inductor")  # smoke: no codegen
            xs_fmt[0] = xs.contiguous(memory_format=torch.channels_last)
            t0 = time.perf_counter()
            out = ours(step_size="adaptive-jvp", amp="bfloat16")()
            result["compile_first_call_s"] = time.perf_counter() - t0
            sec["ours_compiled_bfloat16_channels_last"] = timeit(ours(step_size="adaptive-jvp", amp="bfloat16"),
                                                                  repeats=repeats, device=device)
            result["agreement_max_abs"]["compiled_bfloat16_channels_last"] = float((out - reference).abs().max())
            result["images_per_s"]["compiled_bfloat16_channels_last"] = n / sec["ours_compiled_bfloat16_channels_last"]
            xs_fmt[0] = xs
        except Exception as err:  # a compiler failure is a figure too, not a crash of the benchmark
            result["compile"] = f"failed: {type(err).__name__}: {str(err)[:300]}"
        score = plain
    save()
    print({k: round(v, 4) for k, v in sec.items()})
    print("speed-up over baseline", round(result["speedup_over_baseline"], 3), "overhead", round(result["overhead_over_floor"], 3))


if __name__ == "__main__":
    main()
