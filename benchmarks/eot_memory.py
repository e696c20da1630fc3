"""Peak memory of full-gradient PGD+EOT against EOT draws, before and after EOT gradients in blocks of a memory
budget (issue 19, part 2b).

Runs ``art-adp evaluate --eps 0.1 --n-examples N --attacks full-pgd-eot --max-iter 1 --ensemble-size 10 --repeats 1
--no-sanity --eot-samples K`` on the digits demo models for K in 4, 16, 50, once with each source tree given (``--tree
NAME=PATH``: the package imported from PATH), one thread, each in a fresh process whose peak RSS is read from
``os.wait4`` (``ru_maxrss``). With ``--estimate`` it also records what ``--estimate-only`` says about the sanity
stage on the last tree. Writes ``benchmarks/results/eot_memory.json``.

    ART_ADP_DIGITS=runs/demo python benchmarks/eot_memory.py --tree before=/path/to/main --tree after=.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DIGITS, ROOT, setup  # noqa: E402  pylint: disable=wrong-import-position


def commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return out.stdout.strip() + ("+uncommitted" if dirty else "")


def run(tree: Path, args: list[str]) -> dict:
    """One ``python -m art_adp evaluate`` from ``tree``: wall seconds, peak RSS (bytes), return code, its log."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [
            sys.executable,
            "-m",
            "art_adp",
            "evaluate",
            "--run-dir",
            run_dir,
            "--quiet",
            "--threads",
            "1",
            "--score",
            str(DIGITS / "score.safetensors"),
            "--classifier",
            str(DIGITS / "classifier.safetensors"),
            *args,
        ]
        start = time.perf_counter()
        # cwd: the run folder, so that `python -m` imports the package from PYTHONPATH, not from the current folder
        with subprocess.Popen(
            cmd, env=env, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            log = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
    return {
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "rc": proc.returncode,
        "log_tail": log.strip().splitlines()[-3:] if proc.returncode else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (repeatable)")
    parser.add_argument("--eot", default="4,16,50")
    parser.add_argument("--n-examples", type=int, default=4)
    parser.add_argument("--batch-size", type=int, help="rows per block (--batch-size of evaluate; default: its own)")
    parser.add_argument("--append", action="store_true", help="add the runs to the results file already there")
    parser.add_argument("--estimate", action="store_true", help="also record --estimate-only's sanity statement")
    parser.add_argument(
        "--sanity-run",
        action="store_true",
        help="also run the sanity-checked evaluation (clf-pgd,bpda-eot,full-pgd-eot, 2 iterations, "
        "EOT 4) on the last tree",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eot_memory.json"))
    opts = parser.parse_args()
    trees = dict(t.split("=", 1) for t in opts.tree)
    base = [
        "--eps",
        "0.1",
        "--n-examples",
        str(opts.n_examples),
        "--attacks",
        "full-pgd-eot",
        "--max-iter",
        "1",
        "--ensemble-size",
        "10",
        "--repeats",
        "1",
        "--no-sanity",
    ]
    if opts.batch_size:
        base += ["--batch-size", str(opts.batch_size)]
    result = {
        "machine": setup(1),
        "device": "cpu",
        "models": str(DIGITS),
        "command": "python -m art_adp evaluate " + " ".join(base) + " --eot-samples K (one thread, fresh process)",
        "trees": {name: {"path": str(Path(p).resolve()), "commit": commit(Path(p))} for name, p in trees.items()},
        "runs": [],
    }
    start = time.perf_counter()
    for k in [int(v) for v in opts.eot.split(",") if v]:
        for name, path in trees.items():
            row = {
                "tree": name,
                "eot": k,
                "batch_size": opts.batch_size or "default",
                **run(Path(path).resolve(), [*base, "--eot-samples", str(k)]),
            }
            print(json.dumps(row), flush=True)
            result["runs"].append(row)
    if opts.sanity_run:
        name, path = list(trees.items())[-1]
        args = [
            "--eps",
            "0.1",
            "--n-examples",
            str(opts.n_examples),
            "--attacks",
            "clf-pgd,bpda-eot,full-pgd-eot",
            "--max-iter",
            "2",
            "--eot-samples",
            "4",
        ]
        row = {
            "tree": name,
            "sanity": True,
            "command": "python -m art_adp evaluate " + " ".join(args),
            **run(Path(path).resolve(), args),
        }
        print(json.dumps(row), flush=True)
        result["runs"].append(row)
    if opts.estimate:
        name, path = list(trees.items())[-1]
        args = [
            "--eps",
            "0.1",
            "--n-examples",
            "16",
            "--attacks",
            "clf-pgd,bpda-eot,full-pgd-eot",
            "--max-iter",
            "2",
            "--eot-samples",
            "4",
            "--estimate-only",
        ]
        env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()), OMP_NUM_THREADS="1")
        with tempfile.TemporaryDirectory() as run_dir:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "art_adp",
                    "evaluate",
                    "--run-dir",
                    run_dir,
                    "--threads",
                    "1",
                    "--score",
                    str(DIGITS / "score.safetensors"),
                    "--classifier",
                    str(DIGITS / "classifier.safetensors"),
                    *args,
                ],
                env=env,
                cwd=run_dir,
                capture_output=True,
                text=True,
                check=False,
            )
        said = [line for line in (out.stdout + out.stderr).splitlines() if "Estimated time" in line]
        result["estimate"] = {"tree": name, "command": "python -m art_adp evaluate " + " ".join(args), "said": said}
    result["wall_s"] = round(time.perf_counter() - start, 1)
    if opts.append and Path(opts.out).exists():
        old = json.loads(Path(opts.out).read_text())
        result = {"parts": [*old.get("parts", [old]), result]}
    else:
        result = {"parts": [result]}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
