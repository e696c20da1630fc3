"""Render docs/notebooks.md from executed notebooks, so that the page shows what the notebooks printed and nothing else.

    python examples/render_notebooks_doc.py runs/notebooks/*.ipynb     # collect into docs/notebooks.json, render
    python examples/render_notebooks_doc.py                            # render docs/notebooks.json again

The notebooks are executed by ``examples/execute.py --output ...``, which stores in each executed notebook its
overrides, wall time, load averages and git commit. Collecting keeps, per notebook, that record, the defaults of its
``parameters`` cell, its printed (stdout) output and the figures it saved into ``FIGURE_DIR``, in
``docs/notebooks.json``; rendering turns that file into ``docs/notebooks.md``. ``tests/test_notebooks.py`` checks
that the page is the rendering of the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "notebooks.json"
PAGE = ROOT / "docs" / "notebooks.md"

HEADER = """# The example notebooks, executed

This page is rendered by `examples/render_notebooks_doc.py` from `docs/notebooks.json`, which holds what each
notebook printed when it was executed (with `examples/execute.py`), its settings, wall time, machine load and git
commit. Nothing below is typed by hand. Each section says whether the notebook ran at its full settings (its
`parameters` cell) or at reduced ones, and which. The figures are the ones the runs saved (`FIGURE_DIR=../docs`).

All runs use sklearn's bundled 8×8 digits (the demo's split: 1,437 training / 360 test images) and, except notebook
05 (which trains its own), digits models trained with the recipe of `art-adp demo` (NCSNv2, ngf = 16, 1000 DSM steps;
DigitsCNN; each section's output names the folder they were loaded from), notebook 07 also the DenoiserUNet of
`art-adp train-denoiser` in `runs/digits-denoiser`; on a CPU without GPU, one thread per notebook, on a machine shared with other work (the load
averages say how loaded: each wall time is then several times what an idle machine takes). They are small-model
results on 8×8 digits under a large ε (0.175 of the pixel range), shown to say what each notebook computes: none
is a robustness claim for ADP in general (see the README and `docs/evaluation.md`). CI runs the same notebooks at
much smaller settings (`tests/test_notebooks.py`).

Re-make the page from the repository root:

```bash
# 01 trains the digits models (in runs/digits-models/, a sub-folder per training setting); the others load them
art-adp train-denoiser --dataset digits --run-dir runs/digits-denoiser --minutes 8 --channels 32,64,64 --precision fp32
for nb in examples/0*.ipynb; do
    OMP_NUM_THREADS=1 python examples/execute.py $nb -p FIGURE_DIR=../docs --output runs/notebooks/$(basename $nb)
done
python examples/render_notebooks_doc.py runs/notebooks/*.ipynb
```

(add `-p NAME=value` overrides for reduced settings, as listed per notebook below).
"""


def parameter_defaults(nb) -> dict:
    """The values the cell tagged ``parameters`` assigns (as source text), in order."""
    cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    values = {}
    for line in cell.source.splitlines():
        if "=" in line and not line.startswith((" ", "#")):
            name, _, value = line.partition("=")
            values[name.strip()] = value.split("  #")[0].strip()
    return values


def collect(path: str | Path) -> dict:
    """What the page shows of one executed notebook."""
    nb = nbformat.read(path, as_version=4)
    record = nb.metadata.get("art_adp_execution")
    if record is None:
        raise ValueError(f"{path} has no execution record: execute it with examples/execute.py --output.")
    title = next(c.source.splitlines()[0].lstrip("# ") for c in nb.cells if c.cell_type == "markdown")
    output = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code" and "injected-parameters" not in cell.get("metadata", {}).get("tags", [])
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream" and out.get("name") == "stdout"
    )
    errors = [
        out.get("ename") for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"
    ]
    if errors:
        raise ValueError(f"{path} stopped with {errors[0]}: the page shows complete runs only.")
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    figures = re.findall(r'save_figure\(fig, "([^"]+)"', sources) if record["parameters"].get("FIGURE_DIR") else []
    return {
        "name": Path(record["notebook"]).stem,
        "title": title,
        "execution": record,
        "defaults": parameter_defaults(nb),
        "output": output.rstrip(),
        "figures": figures,
    }


def settings_line(entry: dict) -> str:
    overrides = {k: v for k, v in entry["execution"]["parameters"].items() if k != "FIGURE_DIR"}
    if not overrides:
        return "**Full settings** (the notebook's `parameters` cell, unchanged)."
    changed = ", ".join(f"`{k} = {v!r}` (full: `{entry['defaults'].get(k, '?')}`)" for k, v in overrides.items())
    return f"**Reduced settings**: {changed}; everything else as in the `parameters` cell."


def machine_line(entry: dict) -> str:
    e = entry["execution"]
    before, after = e.get("loadavg_before") or ["?"], e.get("loadavg_after") or ["?"]
    return (
        f"Wall time {e['wall_s']:.0f} s ({e['wall_s'] / 60:.1f} min), started {e['started_utc']}; CPU "
        f"({e.get('processor') or 'processor not recorded'}), {e['cpu_count']} cores, "
        f"OMP_NUM_THREADS = {e['omp_num_threads']}, no GPU; load average (1 min) "
        f"{before[0]} before, {after[0]} after; commit `{(e.get('commit') or 'unknown')[:12]}`."
    )


def render(entries: list[dict]) -> str:
    parts = [HEADER]
    for entry in sorted(entries, key=lambda e: e["name"]):
        parts.append(f"## {entry['name']}: {entry['title']}\n")
        parts.append(settings_line(entry) + " " + machine_line(entry) + "\n")
        parts.append("What it printed:\n\n```text\n" + entry["output"] + "\n```\n")
        parts.extend(f"![{name}]({name})\n" for name in entry["figures"])
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="executed notebooks to collect (none: render the record again)")
    args = parser.parse_args()
    if args.notebooks:
        entries = {e["name"]: e for e in json.loads(RECORD.read_text())} if RECORD.exists() else {}
        entries.update({e["name"]: e for e in map(collect, args.notebooks)})
        current = {p.stem for p in (ROOT / "examples").glob("*.ipynb")}
        entries = {name: e for name, e in entries.items() if name in current}  # no sections of removed notebooks
        RECORD.write_text(
            json.dumps(sorted(entries.values(), key=lambda e: e["name"]), indent=1, ensure_ascii=False) + "\n"
        )
    PAGE.write_text(render(json.loads(RECORD.read_text())))
    print(f"wrote {PAGE.relative_to(ROOT)} from {RECORD.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
