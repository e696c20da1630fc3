"""
Execute the pull request's notebook against the pull request's code and store it with its outputs.

ART 1.20.1 (installed in the running Python) is copied to a temporary folder and the pull request's patch
(`upstream/score_based_purification.patch`) is applied to its `art/` files with `git apply` (ART 1.20.1's
`art/defences/preprocessor/__init__.py` is dev_1.21.0's); the notebook's kernel imports that tree. The notebook runs
on the CPU with one thread (`OMP_NUM_THREADS=1`, `MKL_NUM_THREADS=1` in the kernel's environment). Its outputs are
stored in the notebook, and its figures (the `results` dictionary and the settings) go to
`upstream/results/notebook.json` with the command, the git commit, the device, the package versions and the wall
time. The patch is then rewritten with the executed notebook (`python upstream/patch.py --write`).

    python upstream/run_notebook.py   # needs nbclient and ipykernel beside ART 1.20.1 and torch
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "art" / "notebooks" / "defence_score_based_purification.ipynb"
RESULT = HERE / "results" / "notebook.json"
SETTINGS = ("SCORE_STEPS", "SIGMA", "STEPS", "NB_DRAWS", "EPS", "EPS_STEP", "MAX_ITER", "NB_PROBE")
DUMP = (
    "import json as _json\n"
    "_sign = lambda a, b: round(float(np.mean(np.sign(a) == np.sign(b))), 2)\n"
    "_grads = {k: {'mean_abs': float('%%.2e' %% np.abs(g).mean()), 'zero_share': round(float(np.mean(g == 0)), 2),"
    " 'same_sign_as_blind': _sign(g, grads['preprocessor-blind']),"
    " 'same_sign_second_draw': _sign(g, second_draw[k]) if k in second_draw else None} for k, g in grads.items()}\n"
    "print(_json.dumps({'results': results, 'settings': {k: globals()[k] for k in %r},"
    " 'gradients': _grads, 'clipped_share_one_draw': round(float(np.mean((noisy < 0) | (noisy > 1))), 2),"
    " 'threads': torch.get_num_threads(), 'versions': {'torch': torch.__version__,"
    " 'art': __import__('art').__version__, 'numpy': np.__version__,"
    " 'scikit-learn': __import__('sklearn').__version__}}))"
) % (SETTINGS,)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def assemble_tree(folder: Path) -> None:
    import art  # pylint: disable=import-outside-toplevel

    if art.__version__ != "1.20.1":
        raise ValueError(f"ART 1.20.1 is needed beside nbclient, found {art.__version__}: install it in this Python.")
    shutil.copytree(Path(art.__file__).parent, folder / "art", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q", "."], cwd=folder, check=True)  # git apply relative to this folder
    subprocess.run(
        ["git", "apply", "--include=art/*", str(HERE / "score_based_purification.patch")], cwd=folder, check=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--timeout", type=int, default=1200, help="Seconds allowed per cell.")
    args = parser.parse_args()

    commit, modified = git("rev-parse", "HEAD"), bool(
        git("status", "--porcelain", "--", "art", "score_based_purification.patch")
    )
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(DUMP))
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        assemble_tree(tree)
        env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        os.environ.update(env)  # the kernel inherits this process's environment
        start = time.time()
        NotebookClient(nb, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        wall = time.time() - start
    dumped = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream"))
    nb.cells.pop()
    nbformat.write(nb, NOTEBOOK)

    record = {
        "what": "the pull request's notebook, executed with its stored outputs; accuracies on the 360 test digits",
        "command": "python upstream/run_notebook.py",
        "notebook": str(NOTEBOOK.relative_to(HERE.parent)),
        "commit": commit,
        "pr_files_modified_since_commit": modified,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": f"CPU ({cpu_name()}), {dumped['threads']} torch thread",
        "python": platform.python_version(),
        "versions": dumped["versions"],
        "wall_time_s": round(wall, 1),
        "settings": dumped["settings"],
        "accuracy": {
            name: {"undefended": round(100 * pair[0], 1), "adp": round(100 * pair[1], 1)}
            for name, pair in dumped["results"].items()
        },
        "gradients_on_first_nb_probe_test_digits": dumped["gradients"],
        "pixels_clipped_after_noise_one_draw": dumped["clipped_share_one_draw"],
        "note": "smoke scale: tiny score network, 10-step PGD without EOT, one seed; not a robustness result",
    }
    record["provenance"] = {  # what docs/render.py prints under the PR description's table
        "command": record["command"],
        "code_version": f"art-adp {commit[:7]}, ART {dumped['versions']['art']}",
        "models": "none (the notebook trains its own score network)",
        "device": record["device"],
        "wall_time_s": record["wall_time_s"],
    }
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    subprocess.run([sys.executable, str(HERE / "patch.py"), "--write"], check=True)


if __name__ == "__main__":
    sys.exit(main())
