"""One attack step's gradient on CIFAR-10, in the precisions and compilation the attacks offer: the Gaussian noise,
the bundled DenoiserUNet's one-step denoise (``load_score_model("cifar10")``, σ 0.25, the noisy input unclipped, full
gradient), a ResNet-20, the cross-entropy and the backward pass to the input -- the library's own path
(:func:`art_adp.ensemble.eot_gradient` of the estimator's logits, one draw), on a batch of 64 images.

Four modes, each at 1 and 2 torch threads: eager fp32 (what the attacks ran before), ``bf16`` (the gradient pass under
bf16 autocast, ``Budget(precision="bf16")``), compiled (``Budget(compile=True)``: ``torch.compile`` of the classifier
and of the score network, fixed shapes) and compiled bf16. The modes of one thread count are interleaved round-robin
(``common.compare``), so that load from other processes slows them alike; compilation time is measured apart (the
first calls) and not in the step's time.

Beside the times: the step's FLOPs, counted by ``torch.utils.flop_counter`` on the same call (the two networks'
convolutions and matrix products, forward and backward), and the processor's peak for its instruction set at its
clock, so each figure's distance from the floor (FLOPs / peak) is stated. The peak is the FMA throughput: two FMA
pipes of 8 fp32 lanes a cycle on AVX2 and on AMD's AVX-512 (Zen 4 runs a 512-bit FMA in two halves), 16 lanes on
Intel's AVX-512 server cores; AVX-512-BF16 doubles it for bf16 (two bf16 products per fp32 lane). A floor for the
convolutions alone: the step's elementwise work, normalisation and memory traffic make it unreachable.

    python benchmarks/attack_step.py [--resnet20 runs/c10/resnet20.safetensors] [--batch 64] [--repeats 3]

Writes ``benchmarks/results/attack_step.json`` (rendered in benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import _RUN, compare, setup, write  # noqa: E402  pylint: disable=wrong-import-position

MODES = {"eager fp32": ("fp32", False), "bf16": ("bf16", False), "compiled fp32": ("fp32", True),
         "compiled bf16": ("bf16", True)}  # fmt: skip


def estimator(resnet20: str | None):
    from art.estimators.classification import PyTorchClassifier

    from art_adp import ADPPurifier, load_score_model
    from art_adp.models import CifarResNet, load_classifier

    if resnet20:
        model, _RUN["models"]["resnet20"] = load_classifier(resnet20), resnet20
    else:  # the same architecture and cost, untrained weights
        torch.manual_seed(0)
        model = CifarResNet(depth=20)
    purifier = ADPPurifier(load_score_model("cifar10"), sigma=0.25, steps=1, step_size=0.25, tau=0.0,
                           clip_noise=False, gradient="full", generator=torch.Generator().manual_seed(0),
                           device_type="cpu")  # fmt: skip
    _RUN["models"]["denoiser"] = "art_adp/pretrained/cifar10_score.safetensors"
    return PyTorchClassifier(model.eval(), torch.nn.CrossEntropyLoss(), input_shape=(3, 32, 32), nb_classes=10,
                             clip_values=(0.0, 1.0), preprocessing_defences=[purifier])  # fmt: skip


def step(est, x, y, precision: str, compiled: bool):
    """One gradient of the step, as an attack at ``precision`` (compiled or not) takes it."""
    from contextlib import nullcontext

    from art_adp.ensemble import compiled_networks, eot_gradient, gradient_precision, logits

    loss = torch.nn.CrossEntropyLoss(reduction="none")
    with gradient_precision(precision), compiled_networks(est) if compiled else nullcontext():
        return eot_gradient(lambda z: logits(est, z), x, y, loss, 1)[0]


def flops(est, x, y, precision: str) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        step(est, x, y, precision, False)
    return counter.get_total_flops()


def peak(features: dict, mhz: float) -> dict:
    """FLOP/s per core at ``mhz``: fp32 and, with AVX-512-BF16, bf16 (see the module docstring)."""
    from art_adp._hardware import cpu_model

    intel_512 = features.get("AVX-512") and "AMD" not in cpu_model()
    lanes = 16 if intel_512 else 8 if features.get("AVX2") else 4
    fp32 = 2 * 2 * lanes * mhz * 1e6  # 2 pipes × (multiply + add) × lanes × clock
    bf16 = 2 * fp32 if features.get("AVX-512-BF16") or features.get("AMX") else fp32
    return {"fp32": fp32, "bf16": bf16, "fma_lanes_per_pipe": lanes, "mhz": mhz}


def clock_mhz() -> float:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    found = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    return max(found) if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resnet20", default=None, help="akamaster's ResNet-20 as art-adp saves it (default: untrained)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="benchmarks/results/attack_step.json")
    args = parser.parse_args()
    from art_adp._hardware import cpu_features, cpu_model, instruction_sets

    machine = setup(None)
    est = estimator(args.resnet20)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.rand(args.batch, 3, 32, 32, generator=gen), torch.randint(0, 10, (args.batch,), generator=gen)
    features = cpu_features()
    counted = {p: flops(est, x, y, p) for p in ("fp32", "bf16")}
    ceiling = peak(features, clock_mhz())
    rows, compile_s = [], {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, (precision, compiled) in MODES.items():
            if compiled and (precision, threads) not in compile_s:
                started = time.perf_counter()
                step(est, x, y, precision, True)  # compiles (the graphs are kept on the estimator)
                compile_s[(precision, threads)] = time.perf_counter() - started
        fns = {name: (lambda p=p, c=c: step(est, x, y, p, c)) for name, (p, c) in MODES.items()}
        times = compare(fns, repeats=args.repeats)
        for name, seconds in times.items():
            precision, compiled = MODES[name]
            floor = counted[precision] / (ceiling[precision] * threads)
            rows.append({"mode": name, "threads": threads, "ms_per_image_step": 1000 * seconds / args.batch,
                         "vs_eager_fp32": times["eager fp32"] / seconds, "floor_ms_per_image_step":
                         1000 * floor / args.batch, "ratio_to_floor": seconds / floor,
                         "compile_seconds": compile_s.get((precision, threads)) if compiled else None})  # fmt: skip
            print(f"{threads} thread(s) {name:>14}: {rows[-1]['ms_per_image_step']:6.2f} ms per image-step "
                  f"({rows[-1]['vs_eager_fp32']:.2f}x eager fp32, {rows[-1]['ratio_to_floor']:.1f}x the floor)")
    failed = getattr(getattr(est, "_art_adp_compiled", None), "failed", None)
    write(args.out, {"batch": args.batch, "flops_per_image_step": {p: f / args.batch for p, f in counted.items()},
                     "peak_flops_per_core": ceiling, "cpu": cpu_model(), "instruction_sets": instruction_sets(features),
                     "load_avg_1min_at_start": machine["load_avg_1min"], "resnet20": args.resnet20 or "untrained",
                     "compile_failed": failed, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
