"""Run an example notebook top to bottom with its parameters overridden, papermill-style, on nbclient alone.

    python examples/execute.py examples/01_quickstart.ipynb -p N_EXAMPLES=20 --output runs/notebooks/01_quickstart.ipynb

(from the repository root). The kernel runs in the notebook's folder, as in Jupyter, so the notebooks' relative
paths (``MODEL_DIR = "../runs/digits-models"``, ``FIGURE_DIR = "../docs"``) mean the same in both; ``--cwd`` moves it
elsewhere (relative paths then start there), and the notebook's folder stays importable (``_common.py``).

Each notebook has one code cell tagged ``parameters``; the overrides go into a new cell right after it (tagged
``injected-parameters``), so the notebook reads them as if they had been typed there. Values are Python literals
(``-p EOT_DRAWS=[1,2]``); anything that does not parse as one is taken as a string. ``tests/test_notebooks.py``
runs every notebook this way at small settings.
"""

from __future__ import annotations

import argparse
import ast
import os
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient


def inject_parameters(nb: nbformat.NotebookNode, parameters: dict) -> nbformat.NotebookNode:
    """Insert ``NAME = value`` lines after the cell tagged ``parameters`` (a ValueError if there is none)."""
    index = next(
        (i for i, cell in enumerate(nb.cells) if "parameters" in cell.get("metadata", {}).get("tags", [])), None
    )
    if index is None:
        raise ValueError("the notebook has no cell tagged 'parameters'; tag one (View > Cell Toolbar > Tags).")
    if parameters:
        source = "# Parameters injected by examples/execute.py\n" + "".join(
            f"{name} = {value!r}\n" for name, value in parameters.items()
        )
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        nb.cells.insert(index + 1, cell)
    return nb


def execute(
    path: str | Path,
    parameters: dict | None = None,
    *,
    cwd: str | Path | None = None,
    timeout: int = 600,
    output: str | Path | None = None,
) -> tuple[nbformat.NotebookNode, float]:
    """
    Execute a notebook with parameters.

    :param path: The ``.ipynb`` file.
    :param parameters: Overrides of the names the ``parameters`` cell sets.
    :param cwd: Working directory of the kernel (default: the notebook's folder).
    :param timeout: Seconds allowed per cell.
    :param output: Where to write the executed notebook (default: nowhere).
    :return: The executed notebook and its wall time in seconds. Its metadata ``art_adp_execution`` records the
        overrides, the wall time, the start time (UTC), the machine (CPU count, torch threads, load averages before
        and after) and the git commit, for pages rendered from it (``examples/render_notebooks_doc.py``).
    """
    path = Path(path)
    nb = inject_parameters(nbformat.read(path, as_version=4), dict(parameters or {}))
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd if cwd is not None else path.parent)}},
    )
    # the kernel imports examples/_common.py from the notebook's folder wherever it runs
    pythonpath = os.pathsep.join(filter(None, [str(path.resolve().parent), os.environ.get("PYTHONPATH")]))
    record: dict[str, Any] = {
        "notebook": path.name,
        "parameters": dict(parameters or {}),
        "started_utc": _utc_now(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "loadavg_before": _loadavg(),
        "commit": _commit(path.parent),
    }
    start = time.perf_counter()
    try:
        client.execute(env={**os.environ, "PYTHONPATH": pythonpath})
    finally:  # the executed notebook, with the traceback of a failing cell
        record.update(wall_s=round(time.perf_counter() - start, 1), loadavg_after=_loadavg())
        nb.metadata["art_adp_execution"] = record
        if output is not None:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, output)
    return nb, time.perf_counter() - start


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _loadavg() -> list | None:
    """The 1-, 5- and 15-minute load averages (None where the platform has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _commit(folder: Path) -> str | None:
    """The git commit of the checkout (with "+dirty" when art_adp/ or examples/ has changes), or None outside git."""
    import subprocess  # pylint: disable=import-outside-toplevel

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":/art_adp", ":/examples"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook")
    parser.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--cwd", default=None, help="kernel working directory (default: the notebook's folder)")
    parser.add_argument("--output", default=None, help="write the executed notebook here")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    args = parser.parse_args()
    parameters = {}
    for item in args.parameter:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            parser.error(f"-p takes NAME=VALUE, got {item!r}")
        parameters[name] = _literal(value)
    _, seconds = execute(args.notebook, parameters, cwd=args.cwd, timeout=args.timeout, output=args.output)
    print(f"{args.notebook}: ran in {seconds:.1f} s")


if __name__ == "__main__":
    main()
