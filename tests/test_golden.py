"""Golden tests of the three commands that measure through the one evaluation engine
(:func:`~art_adp.runs.engine.run_cells`, ``art_adp/runs/engine.py``): a tiny run of each writes its run folder, and
what it writes is compared, byte for byte after a fixed normalisation, with the reference files in ``tests/golden/``:

- ``art-adp levers`` (:func:`~art_adp.apps.levers_classifiers.train_levers_classifiers`, then
  :func:`~art_adp.apps.levers.run_levers`): ``records.jsonl`` (every line, in order), ``table.json`` (normalised) and
  ``table.md``;
- ``art-adp evaluate`` (the command line, into :func:`~art_adp.apps.evaluation.evaluate`): ``records/rank-0.jsonl``
  (its lines sorted: the engine reads its records by key, and torchrun's ranks interleave them), ``settings.json``,
  ``report.json`` (normalised) and ``report.md`` (normalised lines);
- ``reproduce mnist`` (:func:`~art_adp.apps.reproduce.reproduce_mnist`, whose ``_stage_eval`` judges the table):
  ``records.jsonl`` (every line, in order, ``wall_s`` dropped), the table :func:`~art_adp.apps.reproduce.render_table`
  renders, ``table.json`` and ``table.md`` (normalised).

Each run is seconds on one CPU thread: tiny classifiers and score models, a handful of images cut into two blocks or
chunks (so that the seeds of a later block are covered), clean and Clf-PGD rows and adaptive attacks through the
purifier judged R = 2 times; levers adds the fixed-noise judge and the per-image worst case over attacks, evaluate the
fixed-noise view, the sanity checks, the undefended baseline and the compression rate.

Normalisation (what varies between two runs of the same code on the same machine, nothing else):

- wall times and seconds: the values of the keys ``wall_s``, ``wall_time_s``, ``train_wall_s``, ``seconds`` and
  ``estimate_seconds`` become ``"<time>"`` (a dict's keys are kept: which units were timed is compared); the
  reproduce records' ``wall_s`` is dropped; the training minutes in the reproduce table's header, ``(N min)``, become
  ``(<time>)``;
- provenance blocks (command line, code version and diff, model hashes, device, wall time): ``"<provenance>"``;
- host and device descriptions: reproduce's ``device`` and the evaluation card's ``Device`` line become
  ``"<device>"`` (in the JSON and wherever the markdown repeats them);
- absolute paths: the test's temporary folder becomes ``<tmp>``.

The golden files were made on a CPU in fp32 with one torch thread (the ``one_thread`` fixture; reproduce's recipe
says ``precision="fp32"``, since ``"auto"`` is bf16 on a CPU with native bf16). Another CPU instruction set rounds
floats differently (a sixth decimal of an ℓ2 norm, and a classifier adversarially trained for a few steps lands
elsewhere), so each set torch's kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``) has its folder:
``tests/golden/<command>/`` for AVX-512 (where they were first made, an AMD EPYC), ``tests/golden/avx2/<command>/``
for AVX2-only processors (the same commit's runs, made on an AVX2-only AMD EPYC), ``tests/golden/intel-avx512/`` for
AVX-512 on an Intel processor (MKL and oneDNN take Intel's own paths there; made on an Intel Xeon, family 6 model 167,
with AMX, from 11ff991, whose files on the AMD sets are those of the commit before it). On a set with no folder, the test fails naming
the command that writes one: run it at the commit before a change, then test the change against it.

A deliberate change of what the commands write is one command, which rewrites every golden file (each test then
skips, naming the files it wrote); review the change with ``git diff tests/golden``::

    ART_ADP_GOLDEN=update PYTHONPATH=. python -m pytest tests/test_golden.py -q -n 0

An AVX-512 processor writes (and tests) the AVX2 set when torch's, oneDNN's and MKL's kernels are held to AVX2: the
same command behind ``MKL_ENABLE_INSTRUCTIONS=AVX2 MKL_CBWR=AVX2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2`` (checked: the AVX2 files made on an AVX2-only EPYC pass so on an AVX-512 EPYC, family 25
model 17, and fail with torch's alone held).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("ART_ADP_GOLDEN") == "update"
REGENERATE = "ART_ADP_GOLDEN=update PYTHONPATH=. python -m pytest tests/test_golden.py -q -n 0"
#: The golden folder of each CPU instruction set torch dispatches to (``torch.backends.cpu.get_cpu_capability()``),
#: and, on an Intel processor, of that set there: MKL's and oneDNN's kernels take other paths on Intel's processors
#: than on AMD's, where the unlabelled sets were made (AVX-512 on Intel rounds the lever table's ℓ2 norms otherwise).
SETS = {"AVX512": GOLDEN, "AVX2": GOLDEN / "avx2", "AVX512 Intel": GOLDEN / "intel-avx512"}


def instruction_set() -> str:
    """This machine's key of :data:`SETS`: torch's CPU capability, followed by ``Intel`` on an Intel processor."""
    import torch

    try:
        intel = "GenuineIntel" in Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: the capability alone
        intel = False
    return torch.backends.cpu.get_cpu_capability() + (" Intel" if intel else "")


def golden_folder(command: str, capability: str | None = None) -> Path:
    """``tests/golden[/<set>]/<command>``: the reference files of this machine's instruction set (or ``capability``'s);
    a set with none is refused, naming the command that writes them."""
    capability = capability or instruction_set()
    if capability not in SETS:
        pytest.fail(f"No golden files for the CPU instruction set {capability!r} (there are: {sorted(SETS)}): add it "
                    f"to SETS in tests/test_golden.py and write them at the commit before your change with: "
                    f"{REGENERATE}")  # fmt: skip
    return SETS[capability] / command

#: Keys whose values are wall times or seconds: replaced by "<time>" (a dict's keys kept).
TIMES = frozenset({"wall_s", "wall_time_s", "train_wall_s", "seconds", "estimate_seconds"})


# --- normalisation and comparison ----------------------------------------------------------------------------------


def _times(value):
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times(v) for v in value]
    return "<time>"


def normalise(value, tmp: Path, devices: tuple[str, ...] = ()):
    """``value`` (parsed JSON) with the varying fields replaced (the module docstring's list), key order kept."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in TIMES:
                out[k] = _times(v)
            elif k == "provenance":
                out[k] = "<provenance>"
            elif k in ("device", "Device"):
                out[k] = "<device>"
            else:
                out[k] = normalise(v, tmp, devices)
        return out
    if isinstance(value, list):
        return [normalise(v, tmp, devices) for v in value]
    if isinstance(value, str):
        return text(value, tmp, devices)
    return value


def text(s: str, tmp: Path, devices: tuple[str, ...] = ()) -> str:
    """``s`` with the temporary folder as ``<tmp>`` and each of ``devices`` (exact strings) as ``<device>``."""
    for d in devices:
        s = s.replace(d, "<device>")
    return s.replace(str(tmp), "<tmp>")


def dumps(value) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def first_difference(name: str, expected: str, actual: str) -> str:
    """The first line where ``actual`` leaves ``expected``, both lines in full, then a short unified diff."""
    old, new = expected.splitlines(), actual.splitlines()
    i = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    want = old[i] if i < len(old) else "<end of file>"
    got = new[i] if i < len(new) else "<end of file>"
    if i >= min(len(old), len(new)) and len(old) == len(new):  # same lines: only the final newline differs
        want, got = repr(expected[-20:]), repr(actual[-20:])
    diff = list(difflib.unified_diff(old, new, f"golden/{name}", f"this run's {name}", n=1, lineterm=""))
    more = f"\n... ({len(diff) - 40} more diff lines)" if len(diff) > 40 else ""
    return (f"{name}: first difference at line {i + 1} (golden {len(old)} lines, this run {len(new)}):\n"
            f"  golden:   {want}\n  this run: {got}\n" + "\n".join(diff[:40]) + more)  # fmt: skip


def golden(command: str, files: dict[str, str]) -> None:
    """Compare ``files`` (name → normalised text) with this instruction set's ``tests/golden[/<set>]/<command>/``; with
    ``ART_ADP_GOLDEN=update``, write them there instead and skip."""
    folder = golden_folder(command)
    if UPDATE:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (folder / name).write_text(content, encoding="utf-8")
        pytest.skip(f"ART_ADP_GOLDEN=update: wrote {', '.join(str(folder / n) for n in files)}")
    problems = []
    for name, content in files.items():
        path = folder / name
        if not path.exists():
            problems.append(f"{command}/{name}: no golden file ({path}); write it with: {REGENERATE}")
            continue
        expected = path.read_text(encoding="utf-8")
        if content != expected:
            problems.append(first_difference(f"{command}/{name}", expected, content))
    if problems:
        pytest.fail(
            f"The {command} run no longer writes what tests/golden/{command}/ holds.\n\n"
            + "\n\n".join(problems)
            + f"\n\nIf the change is deliberate, regenerate every golden file with:\n    {REGENERATE}",
            pytrace=False,
        )


def jsonl_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# --- levers --------------------------------------------------------------------------------------------------------


def _levers_data():
    """Forty training and four test images of 28×28 per ten noisy grey prototypes: close enough that the attacks
    break some images and the purifier's noise changes some predictions (every outcome varies with the seeds)."""
    from art_adp.data import Dataset

    rng = np.random.default_rng(0)
    protos = rng.random((10, 1, 28, 28)).astype(np.float32)
    y_train, y_test = np.arange(40) % 10, np.arange(4) % 10

    def noisy(y):
        return np.clip(0.3 + 0.4 * protos[y] + 0.3 * rng.standard_normal((len(y), 1, 28, 28)), 0, 1).astype(np.float32)

    x_train, x_test = noisy(y_train), noisy(y_test)
    return Dataset("golden", x_train, y_train, x_test, y_test, tuple(map(str, range(10))))


def test_levers_run_writes_the_golden_records_and_table(tmp_path, one_thread, monkeypatch):
    """MNIST's preset at ε 0.2: the two undefended classifiers (clean, Clf-PGD), and the exact score's one-step
    denoise and converged ADP (T 10, λ 0.5) in front of the MLP under clean, Clf-PGD, BPDA+EOT and full-gradient
    PGD+EOT (2 iterations of 0.03, 2 EOT draws, best iterate), judged on S = 2 draws R = 2 times and with fixed noise;
    four images in two blocks of two."""
    from art_adp.apps import levers, levers_table
    from levers_stages import train_and_measure

    monkeypatch.setattr(levers, "BLOCK", 2)  # two blocks of two images: the second block's seed is derived
    train_and_measure(_levers_data(), tmp_path, dataset="mnist", models=("oracle",),
                      settings=["one-step denoise", "T 10, λ 0.5"],
                      attacks=("clean", "clf-pgd", "bpda-eot", "full-pgd-eot"), judges=("ensemble", "fixed"),
                      n_examples=4, ensemble_size=2, repeats=2, eot_samples=2, eps=0.2, max_iter=2, eps_step=0.03,
                      seed=0, seed_scheme="levers", device="cpu", progress=False)  # fmt: skip
    table = json.loads((tmp_path / "table.json").read_text())
    records = (tmp_path / "records" / "rank-0.jsonl").read_text(encoding="utf-8")
    assert len(records.splitlines()) == 2 * 2 * 4 + 2 * 7 * 4  # undefended: 2 × 2 rows; defended: 2 × 7 columns
    assert any(c["attack"] == levers_table.WORST_CASE for c in table["cells"])
    assert any(c.get("judge") == "fixed" for c in table["cells"])
    golden("levers", {
        "records.jsonl": text(records, tmp_path),
        "table.json": dumps(normalise(table, tmp_path)),
        "table.md": text((tmp_path / "table.md").read_text(encoding="utf-8"), tmp_path),
    })  # fmt: skip


# --- evaluate ------------------------------------------------------------------------------------------------------


def test_evaluate_run_writes_the_golden_records_settings_and_card(tmp_path, one_thread):
    """``art-adp evaluate`` on digits (the digits MLP and the untrained NCSNv2 of tests/evalsuite_models.py): smoke
    preset, six images in two chunks of three, ADP σ 0.1 with T = 2, clean, Clf-PGD, BPDA+EOT, full-gradient PGD+EOT
    and APGD-EOT, judged on S = 2 draws R = 2 times and with fixed noise, the undefended baseline, the sanity checks on
    the first chunk and the compression rate."""
    from art_adp import save_score_model
    from art_adp.apps.cli import main
    from art_adp.models import save_classifier
    from evalsuite_models import tiny_models

    # trained here, under one thread, not taken from tiny_models' cache: whichever test called it first trained it,
    # with that process's threads (one in a pytest-xdist worker, the machine's under -n 0), and the weights differ
    mlp, score, _, _ = tiny_models.__wrapped__()
    save_score_model(score, tmp_path / "score.safetensors")
    save_classifier(mlp, tmp_path / "classifier.safetensors")
    run = tmp_path / "run"
    argv = ["evaluate", "--score", str(tmp_path / "score.safetensors"), "--classifier",
            str(tmp_path / "classifier.safetensors"), "--run-dir", str(run), "--dataset", "digits", "--preset", "smoke",
            "--n-examples", "6", "--chunk-size", "3", "--sigma", "0.1", "--steps", "2",
            "--attacks", "clf-pgd,bpda-eot,full-pgd-eot,apgd-eot", "--eps", "0.2", "--max-iter", "2",
            "--eot-samples", "2", "--apgd-max-iter", "2", "--apgd-eot-samples", "2", "--sanity-examples", "3",
            "--threads", "1", "--device", "cpu", "--quiet",
            "--seed-scheme", "shared"]  # the files were made under the seed scheme before "apart"  # fmt: skip
    assert main(argv) == 0
    assert sorted(p.name for p in (run / "records").iterdir()) == ["rank-0.jsonl"]
    report = json.loads((run / "report.json").read_text())
    devices = (report["description"]["Device"],)  # "cpu, 1 CPU threads": the host, in words
    records = sorted(jsonl_lines(run / "records" / "rank-0.jsonl"))
    md = [text(line, tmp_path, devices) for line in (run / "report.md").read_text(encoding="utf-8").splitlines()]
    golden("evaluate", {
        "records.jsonl": text("".join(line + "\n" for line in records), tmp_path),
        "settings.json": text((run / "settings.json").read_text(encoding="utf-8"), tmp_path),
        "report.json": dumps(normalise(report, tmp_path, devices)),
        "report.md": "".join(line + "\n" for line in md),
    })  # fmt: skip


# --- reproduce -----------------------------------------------------------------------------------------------------


def _reproduce_data(root: Path) -> Path:
    """MNIST idx files as tests/test_reproduce.py writes them (its ``_write_idx``), forty training and twelve test
    images: a bar whose row encodes the class, dimmer than that test's (200 of 255, on noise up to 150) so that the
    classifier is unsure of some purified images and the purifier's noise changes some judgements."""
    from test_reproduce import _write_idx

    rng = np.random.default_rng(0)
    root.mkdir()
    for prefix, n in (("train", 40), ("t10k", 12)):
        y = (np.arange(n) % 10).astype(np.uint8)
        x = (rng.random((n, 28, 28)) * 150).astype(np.uint8)
        for i, label in enumerate(y):
            x[i, slice(2 + 2 * label, 4 + 2 * label), 4:24] = 200
        _write_idx(root / f"{prefix}-images-idx3-ubyte.gz", x, 0x803)
        _write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", y, 0x801)
    return root


def test_reproduce_run_writes_the_golden_records_and_table(tmp_path, one_thread):
    """``reproduce mnist`` on tiny synthetic idx files: an MLP, an NCSNv2 of ngf 2 trained 2 iterations, and the table
    at that snapshot: clean and Clf-PGD on eight images, BPDA+EOT on six, full-gradient PGD+EOT on three, in chunks of
    four; ADP σ 0.25 with T = 2, judged on S = 2 draws, the worst of R = 2."""
    from art_adp.apps.reproduce import MnistRecipe, render_table, reproduce_mnist

    recipe = MnistRecipe(hidden=(16,), clf_epochs=30, clf_batch_size=8, ngf=2, num_sigmas=4, batch_size=4,
                         precision="fp32", budgets=(2,), curve_milestones=(2,), checkpoint_every=1, steps=2,
                         ensemble_size=2, repeats=2, eps_step=0.015, max_iter=2, attack_eps_step=0.015, bpda_max_iter=2,
                         eot_samples=1, full_max_iter=1, full_eot_samples=1, n_examples=8, n_bpda=6, n_full=3,
                         n_curve=4, chunk_size=4, seed=0, seed_scheme="reproduce")  # fmt: skip
    root = _reproduce_data(tmp_path / "mnist")
    run = tmp_path / "run"
    report = reproduce_mnist(root, run, recipe, device="cpu", progress=False, log=lambda line: None,
                             stages=("classifier", "score", "table", "report"))  # fmt: skip
    assert report is not None
    records = [json.loads(line) for line in jsonl_lines(run / "records" / "rank-0.jsonl")]
    assert {(r["row"], r["budget"]) for r in records} == {(row, 2) for row in recipe.rows()}
    lines = "".join(json.dumps({k: v for k, v in r.items() if k != "wall_s"}, sort_keys=True) + "\n" for r in records)
    devices = (report["device"],)

    def minutes(s: str) -> str:  # the score's training time in the table's header
        return re.sub(r"\(\d+ min\)", "(<time>)", s)

    table_md = (run / "table.md").read_text(encoding="utf-8")
    golden("reproduce", {
        "records.jsonl": lines,
        "table.rendered.md": minutes(text(render_table(report), tmp_path, devices)) + "\n",
        "table.json": dumps(normalise(json.loads((run / "table.json").read_text()), tmp_path, devices)),
        "table.md": minutes(text(table_md, tmp_path, devices)),
    })  # fmt: skip


def test_each_instruction_set_has_its_golden_folder_and_another_is_refused_by_name():
    assert golden_folder("levers", "AVX512") == GOLDEN / "levers"
    assert golden_folder("levers", "AVX2") == GOLDEN / "avx2" / "levers"
    assert golden_folder("levers", "AVX512 Intel") == GOLDEN / "intel-avx512" / "levers"
    assert all((golden_folder(e, c) / "records.jsonl").exists() for e in ("levers", "evaluate", "reproduce") for c in SETS)
    with pytest.raises(pytest.fail.Exception, match="No golden files for the CPU instruction set 'SVE256'"):
        golden_folder("levers", "SVE256")
