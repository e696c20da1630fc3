"""The cost of the ensemble's loss against the mean of per-draw losses in full-gradient EOT gradients: seconds and
peak resident memory of one PGD+EOT direction (``eot_target="ensemble"`` against ``"draws"``) on the digits models
shipped with the package (ADP, the released schedule, full gradient), for K EOT draws.

Each (target, K) runs in a fresh process (peak RSS from ``os.wait4``), the two targets interleaved per K so that a
busy machine slows both alike: the ratio is the figure. Writes ``benchmarks/results/eot_target.json``.

    python benchmarks/eot_target.py [--images 20] [--draws 4 16 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, setup, write  # noqa: E402  pylint: disable=wrong-import-position

CHILD = """
import json, sys, time, numpy as np, torch
torch.set_num_threads(1)
from art.estimators.classification import PyTorchClassifier
from art_adp import ADPPurifier, load_score_model
from art_adp.attacks import PGDEOT
from art_adp.data import load_digits
from art_adp.models import load_classifier
target, draws, images, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
purifier = ADPPurifier(load_score_model("digits"), gradient="full", generator=torch.Generator().manual_seed(0))
est = PyTorchClassifier(load_classifier("digits"), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                        clip_values=(0, 1), preprocessing_defences=[purifier])
data = load_digits()
x, y = torch.as_tensor(data.x_test[:images]), torch.as_tensor(data.y_test[:images])
attack = PGDEOT(est, eot_samples=draws, eot_target=target)
attack._start(x, y, (0.0, 1.0))
attack._direction(x, y)  # warm-up
times = []
for _ in range(repeats):
    t = time.perf_counter()
    attack._direction(x, y)
    times.append(time.perf_counter() - t)
print(json.dumps({"seconds": sorted(times)[len(times) // 2]}))
"""


def child(target: str, draws: int, images: int, repeats: int) -> dict:
    """One fresh process: the median seconds of a direction and the process's peak RSS."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, target, str(draws), str(images), str(repeats)],
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read() if proc.stdout else ""
    if status != 0:
        raise RuntimeError(f"{target}, EOT {draws}: exit status {status}")
    return {"target": target, "eot": draws, **json.loads(out.strip().splitlines()[-1]),
            "peak_rss_mib": round(usage.ru_maxrss / 1024)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--draws", type=int, nargs="+", default=[4, 16, 50])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    info = setup(1)
    runs = [child(t, k, args.images, args.repeats) for k in args.draws for t in ("draws", "ensemble")]
    for k in args.draws:
        by = {r["target"]: r for r in runs if r["eot"] == k}
        print(f"EOT {k}: ensemble/draws time {by['ensemble']['seconds'] / by['draws']['seconds']:.2f}, "
              f"peak RSS {by['draws']['peak_rss_mib']} / {by['ensemble']['peak_rss_mib']} MiB")
    write(ROOT / "benchmarks" / "results" / "eot_target.json", {"images": args.images, "runs": runs, **info})


if __name__ == "__main__":
    main()
