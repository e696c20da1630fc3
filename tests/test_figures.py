"""No unsourced figure in what a user reads (docs/figures.py), and the README's Status names every GPU result."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("figures", ROOT / "docs" / "figures.py")
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def test_every_figure_outside_a_rendered_block_is_a_parameter_a_cited_figure_or_sourced():
    problems = figures.check()
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("the classifier took 11 min 19 s to train", ["11 min", "19 s"]),
        ("about 2.6 days for 100 digits, about 18 h with fewer samples", ["2.6 days", "18 h"]),
        ("8,000 samples/s at batch 512, 22.7 TFLOP/s", ["8,000 samples/s", "22.7 TFLOP/s"]),
        ("47.6 ms per step, 43 µs per sample, 1,234 img/s", ["47.6 ms", "43 µs", "1,234 img/s"]),
        ("a second, 5.5 GB torch build; 469 MiB peak", ["5.5 GB", "469 MiB"]),
        ("slower by 70×, cut to 0.19×) and 2× faster", ["70×", "0.19×", "2×"]),
        ("levels lie 5–10 % apart, 33.7 % robust", ["5–10 %", "33.7 %"]),
        ("8×8 digits, 1×8×8 inputs, 40 × 1,280 samples, 2 × T steps, σ_L ×10", []),
        ("10 steps of 64, 3 samples, 2 h(x) evaluations, σ = 0.25, t = 144, ngf 32", []),
    ],
)
def test_what_counts_as_a_figure(text, expected):
    assert [f for _, _, f in figures.figures(text)] == expected


def test_rendered_blocks_and_code_are_not_prose(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "Runs in 3 s.\n\n<!-- render: demo -->\nwall time 4 s\n<!-- end render -->\n\n```bash\nsleep 5 s\n```\n\n"
        "Type `timeout 6 s` here.\n\n    indented 7 s\n"
    )
    assert [f for _, _, f in figures.figures(figures.prose(page))] == ["3 s"]


def _copy_pages(to: Path) -> None:
    for path in figures.pages():
        target = to / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)


def test_a_planted_unsourced_figure_fails(tmp_path):
    _copy_pages(tmp_path)
    assert figures.check(tmp_path) == []
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text() + "\nOn a laptop ADP purifies 1,234 img/s.\n")
    problems = figures.check(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("README.md:")
    assert "'1,234 img/s' without a source" in problems[0]


def test_a_planted_figure_in_a_notebook_fails(tmp_path):
    _copy_pages(tmp_path)
    path = tmp_path / "examples" / "01_quickstart.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["It takes 2.6 days."]})
    path.write_text(json.dumps(notebook))
    assert [p.split(":")[0] for p in figures.check(tmp_path)] == ["examples/01_quickstart.ipynb"]


def test_the_allow_list_cannot_go_stale_or_drift_from_its_result(tmp_path):
    (tmp_path / "README.md").write_text("The adversarially trained classifier (3.14159 %) wins.\n")
    allowed = [
        ("README.md", "adversarially trained classifier (3.14159 %)", "result", "card-digits-paper-20"),
        ("README.md", "a phrase that is not there, 9 s", "parameter", "nothing"),
    ]
    assert figures.check(tmp_path, allowed) == [
        "allow-list entry 'adversarially trained classifier (3.14159 %)': '3.14159 %' is not in "
        "card-digits-paper-20's result",
        "allow-list entry 'a phrase that is not there, 9 s' (README.md) matches no figure: delete it",
    ]
    (tmp_path / "README.md").write_text("The adversarially trained classifier (75 %) wins.\n")  # 75.0 in the card
    assert figures.check(tmp_path, [("README.md", "adversarially trained classifier (75 %)", "result",
                                     "card-digits-paper-20")]) == []


def _devices(value) -> list[str]:
    """Every string under a key named "device" in a JSON document (provenance's, or a script's own)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in ([v] if k == "device" and isinstance(v, str) else _devices(v))]
    return [s for v in value for s in _devices(v)] if isinstance(value, list) else []


def _gpu_result_files() -> set[str]:
    """Every committed result file that names a CUDA device."""
    out = set()
    for path in [*ROOT.glob("docs/**/*.json"), *ROOT.glob("benchmarks/results/*.json")]:
        devices = _devices(json.loads(path.read_text(encoding="utf-8")))
        if any(re.search(r"NVIDIA|Tesla|H100|H200|A100|^cuda", d, re.I) for d in devices):
            out.add(str(path.relative_to(ROOT)))
    return out


def test_gpu_results_are_recognised_by_their_device():
    assert _devices({"provenance": {"device": "NVIDIA H100 80GB HBM3, torch 2.8.0"}, "rows": [{"device": "cuda"}]}) == [
        "NVIDIA H100 80GB HBM3, torch 2.8.0", "cuda"]
    assert _devices({"device": "CPU x86_64, 1 thread(s)", "n": 3}) == ["CPU x86_64, 1 thread(s)"]


def test_the_gpu_section_lists_exactly_the_gpu_results():
    """benchmarks/README.md's "The GPU runs so far" (the README's measured status links it) lists every CUDA result."""
    page = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    start = page.index("## The GPU runs so far")
    line = page[start : page.index("\n## ", start + 1)]
    listed = set(re.findall(r"`((?:docs|benchmarks)/[^`]+\.json)`", line))
    gpu = _gpu_result_files()
    assert listed == gpu, f"the GPU section lists {sorted(listed)}; CUDA result files: {sorted(gpu)}"
    assert ("no figure yet" in line) == (not gpu)
    assert "benchmarks/README.md#the-gpu-runs-so-far" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_check_figure_must_be_in_its_committed_report(tmp_path):
    """A figure of an ``art-adp check`` run is sourced by its report in docs/checks/: a time or an accuracy the report
    does not hold fails (the report holds the seconds unrounded and the accuracy as a fraction)."""
    report = "docs/checks/cifar10_baseline-autoattack.json"
    held = json.loads((ROOT / report).read_text())["cells"][0]
    seconds, measured = round(held["seconds"]), round(100 * held["measured"], 1)
    for shown, ok in (((seconds, measured), True), ((seconds + 1, measured), False), ((seconds, measured + 1), False)):
        (tmp_path / "README.md").write_text(f"The check took {shown[0]:,} s and measured {shown[1]} %.\n")
        allowed = [("README.md", f"took {shown[0]:,} s and measured {shown[1]} %", "check", report)]
        problems = figures.check(tmp_path, allowed)
        assert (problems == []) is ok, problems
