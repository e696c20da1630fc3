"""Peak memory of purification and of EOT prediction as the input batch grows (chunked by ``batch_size``).

    python benchmarks/memory_chunks.py [--out benchmarks/results/memory_chunks.json]

Each measurement runs in a fresh process and reads its peak resident memory (``ru_maxrss``); the figure
reported is the peak above what the process held once its inputs existed, minus the bytes of the result it
returns -- the working memory of the computation, which chunking should keep flat. CPU, one thread, an
the demo's NCSNv2(ngf=16) on 1×8×8 digits-sized images with random weights (memory does not depend on the weights), T = 10 steps.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import resource, sys, json
import torch
torch.set_num_threads(1)
from art_adp import ADPPurifier, EOTClassifier, NCSNv2
from art.estimators.classification import PyTorchClassifier
kind, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
score = NCSNv2(1, 8, ngf=16)
purifier = ADPPurifier(score, tau=0.0, batch_size=batch, device_type="cpu", generator=torch.Generator().manual_seed(0))
x = torch.rand(n, 1, 8, 8)
clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                        clip_values=(0.0, 1.0), preprocessing_defences=[purifier], device_type="cpu")
eot = EOTClassifier(art, ensemble_size=4, batch_size=batch)
with torch.no_grad():  # warm up allocator and kernels on one chunk
    purifier.forward(x[:batch])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    out = purifier.forward(x)[0] if kind == "purify" else torch.from_numpy(eot.predict(x.numpy()))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "peak_kib": peak, "result_kib": out.numel() * 4 // 1024}))
"""


def measure(kind: str, n: int, batch: int) -> dict:
    result = subprocess.run([sys.executable, "-c", CHILD, kind, str(n), str(batch)], capture_output=True, text=True,
                            check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    r = json.loads(result.stdout.strip().splitlines()[-1])
    input_kib = n * 64 * 4 // 1024
    working = (r["peak_kib"] - r["before_kib"] - r["result_kib"]) / 1024
    return {"kind": kind, "n": n, "batch_size": batch, "input_mib": input_kib / 1024,
            "peak_mib": r["peak_kib"] / 1024, "working_mib": max(working, 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default="benchmarks/results/memory_chunks.json")
    args = parser.parse_args()
    rows = [measure(kind, n, args.batch_size) for kind in ("purify", "eot-predict") for n in args.sizes]
    print("| call | N images | batch_size | input (MiB) | peak RSS (MiB) | working memory above inputs and result (MiB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['n']} | {r['batch_size']} | {r['input_mib']:.0f} | {r['peak_mib']:.0f} | "
              f"{r['working_mib']:.0f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "maxrss_self_kib": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss}, indent=2))


if __name__ == "__main__":
    main()
