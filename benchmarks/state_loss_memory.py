"""Peak memory of one gradient of DiffAttack's loss on every purification state (issue 37, item 3), against the number
of purification steps, with and without the step-wise (segment-wise) checkpointing that
:meth:`art_adp.DefendedModel.draw_states` switches on.

For each purifier (ADP with T fixed steps, NCSNv2 ngf 16 on 28×28 digits; reverse diffusion with K DDIM steps,
a DenoiserUNet) and each number of steps, a fresh process (one thread) draws the states of 16 images once, takes
:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss` and its input gradient, and reports the growth of its
peak RSS over the part measured (``ru_maxrss`` after minus before, the model built and warmed up before) and the
bytes the autograd graph saved (:class:`~art_adp.ensemble.GraphMemory`). "checkpointed": through ``draw_states``;
"stored": the same states recorded with the purifier's ``gradient_checkpointing`` off (every step's activations kept).
Writes ``benchmarks/results/state_loss_memory.json``.

    python benchmarks/state_loss_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "state_loss_memory.json"
STEPS = (2, 8, 32)
ROWS = 16


def processor() -> str:
    """The processor's model name as /proc/cpuinfo gives it (or the platform's word for it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def child(family: str, steps: int, checkpointed: bool) -> dict:
    """One measurement, in this process: the growth of peak RSS (KiB) and the graph's saved bytes."""
    # pylint: disable=import-outside-toplevel  # imported here: the parent process measures nothing
    import torch

    from art_adp import (
        ADPPurifier,
        DefendedModel,
        NCSNv2,
        ReverseDiffusionPurifier,
    )
    from art_adp.attacks._core import cross_entropy
    from art_adp.attacks.purified_state_loss import PurifiedStateLoss
    from art_adp.ensemble import GraphMemory
    from art_adp.preprocessor import PurifierState
    from art_adp.score.unet import DenoiserUNet

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if family == "adp":
        purifier = ADPPurifier(
            NCSNv2(1, 28, ngf=16),
            sigma=0.25,
            steps=steps,
            step_size=0.01,
            gradient="full",
            device_type="cpu",
            generator=torch.Generator().manual_seed(1),
        )
    else:
        purifier = ReverseDiffusionPurifier(
            DenoiserUNet(1, channels=(16, 32), emb_dim=32),
            sigma=0.5,
            steps=steps,
            gradient="full",
            device_type="cpu",
            generator=torch.Generator().manual_seed(1),
        )
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).eval()
    model = DefendedModel(classifier, purifier, ensemble_size=1)
    clean = torch.rand(ROWS, 1, 28, 28)
    loss = PurifiedStateLoss(cross_entropy, reference=clean)
    y = torch.stack([torch.arange(ROWS) % 10, torch.arange(ROWS)], 1)
    with torch.no_grad():
        model.draw_logits(clean)  # warm-up: allocator and kernels
    x = (clean + 0.01).clamp(0, 1).requires_grad_(True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with GraphMemory() as graph:
        if checkpointed:
            draw = model.draw_states(x)
        else:  # the same states, every step's activations stored
            with purifier.recording() as states:
                purified = model.purify(x)
            draw = (classifier(purified), [*states, PurifierState(purified)])
        value = loss(draw, y).sum()
    (grad,) = torch.autograd.grad(value, x)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "family": family,
        "steps": steps,
        "states": len(draw[1]),
        "mode": "checkpointed" if checkpointed else "stored",
        "peak_rss_growth_mib": round((after - before) / 1024, 1),
        "graph_saved_mib": round(graph.nbytes / 2**20, 2),
        "seconds": round(seconds, 2),
        "grad_abs_sum": float(grad.abs().sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--child", nargs=3, metavar=("FAMILY", "STEPS", "CHECKPOINTED"), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.child[2] == "1")))
        return
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for family in ("adp", "reverse-diffusion"):
        for steps in args.steps:
            for checkpointed in (True, False):
                cmd = [sys.executable, __file__, "--child", family, str(steps), "1" if checkpointed else "0"]
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=ROOT)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(rows[-1], flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "command": " ".join(["python benchmarks/state_loss_memory.py", *sys.argv[1:]]),
                "processor": processor(),
                "threads": 1,
                "rows_per_gradient": ROWS,
                "what": "one input gradient of PurifiedStateLoss (CE + 1 x mean deviation over every state), 28x28",
                "note": "peak_rss_growth_mib: ru_maxrss after minus before the measured part, in a fresh process; "
                "graph_saved_mib: bytes autograd saved (GraphMemory), checkpoint regions excluded",
                "results": rows,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
