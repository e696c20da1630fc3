"""What one full-gradient pass through ADP costs per row, by the rows it is timed at: the bundled digits models
(``load_score_model("digits")``, ``load_classifier("digits")``) behind ADP's defaults (σ 0.25, T = 10 adaptive steps,
the noisy input clipped), one draw per row, forward and backward to the input, on the 360 test digits repeated to the
rows. The attacks stack their EOT draws into blocks as large as the memory budget allows (``RowBlocks``: about 110
rows of this purifier at 512 MiB); the estimate's probe (``art_adp.runs.engine.probe``) timed this pass at 8 rows
before and times it at one block now (at most 128 rows on a CPU). The row counts are timed round-robin
(``common.compare``), so load from other processes slows them alike; the probe's own figures are beside.

    OMP_NUM_THREADS=1 python benchmarks/probe_rows.py --out benchmarks/results/probe_rows.json

Rendered in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
import torch

import common
from common import compare, setup, write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="8,16,32,64,128")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/probe_rows.json")
    args = ap.parse_args()
    machine = setup(1)

    from art_adp import ADPPurifier, load_score_model
    from art_adp.attacks._core import gradient_mode
    from art_adp.data import load_digits
    from art_adp.ensemble import logits
    from art_adp.models import load_classifier
    from art_adp.runs import engine
    from art_adp.runs.provenance import device_description

    digits = load_digits()
    score, classifier = load_score_model("digits"), load_classifier("digits")
    common._RUN["models"].update(score=score, classifier=classifier)  # recorded by their weights' SHA-256
    purifier = ADPPurifier(score, generator=torch.Generator().manual_seed(0))
    estimator = engine.defended_estimator(classifier, purifier, input_shape=(1, 8, 8))
    x = digits.x_test.astype(np.float32)

    def full_pass(rows: int):
        xg = torch.as_tensor(np.resize(x, (rows, *x.shape[1:])))

        def run():
            with gradient_mode(estimator, "full"), torch.enable_grad():
                z = xg.clone().requires_grad_(True)
                logits(estimator, z).sum().backward()

        return run

    counts = [int(r) for r in args.rows.split(",")]
    seconds = compare({r: full_pass(r) for r in counts}, repeats=args.repeats)
    largest = max(counts)
    rows = [{"rows": r, "ms_per_row": 1e3 * seconds[r] / r, "vs_largest": (seconds[r] / r) / (seconds[largest] / largest)}
            for r in counts]  # fmt: skip
    probe = engine.probe(estimator, x[:32], 4096)
    write(args.out, {"rows": rows, "probe": probe, "processor": device_description(torch.device("cpu")),
                     "machine": {**machine, "platform": platform.platform()}})


if __name__ == "__main__":
    main()
