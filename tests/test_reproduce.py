"""``reproduce mnist`` end to end on tiny synthetic idx files: stages, resume, the table, snapshots. The tests of one
whole run are marked ``e2e`` (CI runs them after the suite, ``python -m pytest -m e2e``); the suite runs the same
program at tiny size against its golden files (tests/test_golden.py)."""

import gzip
import json
import struct

import numpy as np
import pytest
import torch

from art_adp.apps.evaluation.report import wilson
from art_adp.apps.reproduce import MnistRecipe, reproduce_mnist
from art_adp.apps.snapshots import read_snapshot_log, train_with_snapshots
from art_adp.models import load_classifier
from art_adp.runs.engine import correct
from art_adp.score import NCSNv2, load_score_model, train_score_model

TINY = MnistRecipe(hidden=(16,), clf_epochs=30, clf_batch_size=8, ngf=2, num_sigmas=4, batch_size=4, budgets=(2, 4),
                   curve_milestones=(2, 4), checkpoint_every=1, steps=2, ensemble_size=2, repeats=2, max_iter=2,
                   bpda_max_iter=2, eot_samples=1, full_max_iter=1, full_eot_samples=1, n_examples=6, n_bpda=3, n_full=2, n_curve=4,
                   chunk_size=4)


def _write_idx(path, array, magic):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes())


def _fake_mnist(root, n_train=40, n_test=8, seed=0):
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        y = rng.integers(0, 10, n).astype(np.uint8)
        x = (rng.random((n, 28, 28)) * 60).astype(np.uint8)
        for i, label in enumerate(y):  # a bright bar whose row encodes the class: learnable
            x[i, 2 + 2 * label : 4 + 2 * label, 4:24] = 255
        _write_idx(root / f"{prefix}-images-idx3-ubyte.gz", x, 0x803)
        _write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", y, 0x801)
    return root


@pytest.fixture(scope="module")
def done_run(tmp_path_factory):
    root = _fake_mnist(tmp_path_factory.mktemp("mnist"))
    run = tmp_path_factory.mktemp("run")
    logs = []
    report = reproduce_mnist(root, run, TINY, device="cpu", progress=False, log=logs.append)
    return root, run, report, logs


def test_wilson_interval_matches_the_formula():
    lo, hi = wilson(0.8, 10)
    z = 1.959963984540054
    centre, half = (0.8 + z * z / 20) / (1 + z * z / 10), z * np.sqrt(0.016 + z * z / 400) / (1 + z * z / 10)
    assert (lo, hi) == pytest.approx((centre - half, centre + half), abs=1e-9)
    assert all(np.isnan(wilson(0.0, 0)))


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_reproduce_writes_the_table_with_the_papers_numbers(done_run):
    root, run, report, _ = done_run
    table = (run / "table.md").read_text()
    clean_line = next(line for line in table.splitlines() if line.startswith("| Natural (clean) |"))
    pgd_line = next(line for line in table.splitlines() if line.startswith("| Clf-PGD"))
    assert "98.07" in clean_line and "96.41" in pgd_line
    assert "ADP, score 2 it" in table and "ADP, score 4 it" in table
    rows = report["rows"]
    assert set(rows) == {"clean", "clf-pgd", "bpda-eot", "full-pgd-eot"}
    assert [rows[r]["4"]["n"] for r in ("clean", "clf-pgd", "bpda-eot", "full-pgd-eot")] == [6, 6, 3, 2]
    # the undefended clean column is the MLP's own accuracy on those images, recomputed here
    from art_adp.data import load_mnist

    data = load_mnist(root)
    mlp = load_classifier(run / "classifier.safetensors")
    with torch.no_grad():
        acc = (mlp(torch.as_tensor(data.x_test[:6])).argmax(1).numpy() == data.y_test[:6]).mean()
    assert rows["clean"]["2"]["undefended"] == pytest.approx(acc)
    records = [json.loads(line) for line in (run / "records" / "rank-0.jsonl").read_text().splitlines()]
    k = sum(correct(r) for r in records if r["budget"] == 4 and r["row"] == "bpda-eot")
    assert rows["bpda-eot"]["4"]["correct"] == k and tuple(rows["bpda-eot"]["4"]["ci95"]) == wilson(k / 3, 3)
    for row in ("clf-pgd", "bpda-eot", "full-pgd-eot"):
        assert 0 < rows[row]["2"]["max_linf"] <= TINY.eps + 1e-6  # attacked, inside the ε-ball
    assert rows["clean"]["2"]["max_linf"] == 0
    curve = report["curve"]
    assert [c["step"] for c in curve] == [2, 4]
    assert all(c["denoising_ratio"] > 0 and c["attack_ratio"] > 0 for c in curve)
    assert (run / "learning_curve.png").stat().st_size > 0
    assert [r["step"] for r in read_snapshot_log(run / "score")] == [2, 4]


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_second_call_reuses_every_stage(done_run):
    root, run, report, _ = done_run
    files = ["classifier.safetensors", "score/score.safetensors", "records/rank-0.jsonl", "denoise.jsonl"]
    before = {f: (run / f).read_bytes() for f in files}
    logs = []
    again = reproduce_mnist(root, run, TINY, device="cpu", progress=False, log=logs.append)
    assert {f: (run / f).read_bytes() for f in files} == before
    assert any("[classifier] reusing" in m for m in logs) and any("[score] reusing" in m for m in logs)
    assert any("[eval] reusing every record" in m for m in logs)
    assert json.loads(json.dumps(again["rows"])) == json.loads(json.dumps(report["rows"]))


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_interrupted_table_redoes_only_missing_chunks(done_run, tmp_path):
    root, run, report, _ = done_run
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    lines = (copy / "records" / "rank-0.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["row"] != "bpda-eot"]
    (copy / "records" / "rank-0.jsonl").write_text("\n".join(kept) + "\n")
    # a curve measured before the compression rate existed gains it, its other ratios kept
    old = [{k: v for k, v in json.loads(line).items() if k != "compression_rate"}
           for line in (copy / "denoise.jsonl").read_text().splitlines()]
    (copy / "denoise.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    logs = []
    again = reproduce_mnist(root, copy, TINY, device="cpu", progress=False, log=logs.append)
    assert "[eval] 6 image judgement(s) of 2 (snapshot, row) cell(s) to make" in logs  # bpda-eot at 2 and 4: 3 images
    assert len((copy / "records" / "rank-0.jsonl").read_text().splitlines()) == len(lines)
    for row in ("clean", "clf-pgd", "full-pgd-eot"):
        assert json.loads(json.dumps(again["rows"][row])) == json.loads(json.dumps(report["rows"][row]))
    assert [(c["compression_rate"], c["attack_ratio"]) for c in again["curve"]] == [
        (c["compression_rate"], c["attack_ratio"]) for c in report["curve"]]
    assert sum("compression rate" in m for m in logs) == 2


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_another_recipe_in_the_same_folder_is_refused(done_run):
    root, run, _, _ = done_run
    with pytest.raises(ValueError, match=r"holds records for the recipe made with other settings: ngf 2 \(now 4\)\."):
        reproduce_mnist(root, run, MnistRecipe(**{**TINY.__dict__, "ngf": 4}), device="cpu", progress=False)


def test_a_new_folder_seeds_its_cells_apart_and_an_older_one_keeps_its_own_scheme(done_run, tmp_path):
    """The seed scheme a recipe leaves open (None) is the folder's: ``apart`` for a new one (recorded), the stored one,
    and ``reproduce`` for a recipe measured before it was recorded; a cell's seeds come from it."""
    from art_adp.apps.reproduce import _cell, folder_recipe
    from art_adp.runs.seeds import SeedPlan

    _, run, _, _ = done_run
    assert json.loads((run / "settings.json").read_text())["seed_scheme"] == "apart"
    assert folder_recipe(TINY, run / "settings.json", "cpu")[0].seed_scheme == "apart"
    assert folder_recipe(TINY, tmp_path / "new.json", "cpu")[0].seed_scheme == "apart"
    old = {k: v for k, v in json.loads((run / "settings.json").read_text()).items() if k != "seed_scheme"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    recipe = folder_recipe(TINY, tmp_path / "old.json", "cpu")[0]
    assert recipe.seed_scheme == "reproduce" and folder_recipe(recipe, tmp_path / "new.json", "cpu")[0] == recipe
    cell = _cell(2, "clean", 4, recipe, None)
    assert cell.seeds == SeedPlan("reproduce", 0, (2, "clean"), TINY.repeats)
    assert cell.seeds(0, 4) != _cell(2, "clean", 4, TINY, None).seeds(0, 4)  # None: apart
    with pytest.raises(ValueError, match=r"Unknown seed scheme 'shared'; choose from \['apart', 'reproduce'\]"):
        MnistRecipe(seed_scheme="shared").check()


def test_snapshots_follow_one_uninterrupted_run(tmp_path):
    x = torch.rand(12, 1, 8, 8)
    sig = torch.tensor([0.5, 0.1])
    torch.manual_seed(1)
    straight = train_score_model(NCSNv2(1, 8, ngf=2), x, sig, 5, batch_size=3, seed=3, progress=False)
    torch.manual_seed(1)
    train_with_snapshots(NCSNv2(1, 8, ngf=2), x, sig, [2, 5], tmp_path, batch_size=3, seed=3, checkpoint_every=2,
                         progress=False, ema_decay=0.999)
    last = load_score_model(tmp_path / "snapshots" / "score_0000005.safetensors")
    for a, b in zip(straight.state_dict().values(), last.state_dict().values()):
        assert torch.equal(a, b)
    torch.manual_seed(1)
    two = train_score_model(NCSNv2(1, 8, ngf=2), x, sig, 2, batch_size=3, seed=3, progress=False)
    first = load_score_model(tmp_path / "snapshots" / "score_0000002.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(two.state_dict().values(), first.state_dict().values()))
    assert [r["step"] for r in read_snapshot_log(tmp_path)] == [2, 5]
    with pytest.raises(ValueError, match="past the milestone 3 that has no snapshot"):
        train_with_snapshots(NCSNv2(1, 8, ngf=2), x, sig, [3, 6], tmp_path, batch_size=3, seed=3, progress=False)


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_cli_maps_every_option_onto_the_recipe(done_run, capsys):
    from art_adp.apps.cli import main

    root, run, _, _ = done_run
    argv = ["reproduce", "mnist", "--data-root", str(root), "--run-dir", str(run), "--quiet", "--device", "cpu",
            "--hidden", "16", "--clf-epochs", "30", "--clf-batch-size", "8", "--ngf", "2", "--num-sigmas", "4",
            "--batch-size", "4", "--budgets", "2,4", "--curve-milestones", "2,4", "--checkpoint-every", "1",
            "--steps", "2", "--ensemble-size", "2", "--repeats", "2", "--max-iter", "2", "--bpda-max-iter", "2",
            "--eot-samples", "1", "--full-max-iter", "1", "--full-eot-samples", "1", "--n-examples", "6", "--n-bpda", "3",
            "--n-full", "2", "--n-curve", "4", "--chunk-size", "4"]
    assert main(argv) == 0  # the same recipe as TINY: every stage is reused, nothing is recomputed
    out = capsys.readouterr().out
    assert "[eval] reusing every record" in out and f"table: {run / 'table.md'}" in out
    assert main(argv[:-2] + ["--chunk-size", "5"]) == 2
    assert "holds records for the recipe made with other settings: chunk_size 4 (now 5)" in capsys.readouterr().err


class _TowardsGrey(torch.nn.Module):
    """h(x) = (0.5 − x)/0.25: the exact noise-level-free score of a point mass at 0.5 seen at noise 0.25."""

    def forward(self, x):
        return (0.5 - x) / 0.25


def test_denoising_ratio_of_a_linear_score_is_the_adaptive_rules_contraction():
    from art_adp.apps.reproduce import denoising_ratio

    # α = λ·0.25 every step, so each step removes λ = 5 % of the distance to 0.5: 10 steps leave 0.95¹⁰ of it
    x = torch.full((6, 1, 8, 8), 0.5)
    assert denoising_ratio(_TowardsGrey(), x, sigma=0.25, steps=10) == pytest.approx(0.95 ** -20, rel=1e-3)
    d = 0.1 * torch.sign(torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(0)))
    ratio = denoising_ratio(_TowardsGrey(), x, sigma=0.0, steps=10, x_start=x + d)
    assert ratio == pytest.approx(0.95 ** -20, rel=1e-3)
    assert denoising_ratio(_TowardsGrey(), x, sigma=0.0, steps=0, x_start=x + d) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="x_start must have the shape of x"):
        denoising_ratio(_TowardsGrey(), x, x_start=x[:2])


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_report_carries_the_diagnostics(done_run):
    _, run, report, _ = done_run
    diag = report["diagnostics"]
    assert [r["step"] for r in diag["per_step"]] == [2, 4]
    assert all(r[k][row]["n"] == 4 for r in diag["per_step"] for k in ("noise", "denoise1") for row in ("clean", "clf_pgd"))
    assert [(s["steps"], s["lam"], s["step"]) for s in diag["sweep"]] == [
        (t, lam, 4) for t in (10, 20, 50) for lam in (0.05, 0.1)
    ]
    assert "## Diagnostics (first 4 test images, S = 2)" in (run / "table.md").read_text()


@pytest.mark.e2e  # the whole reproduce run (CI: python -m pytest -m e2e); test_golden.py runs it in the suite
def test_curve_points_carry_the_snapshots_compression_rate(done_run):
    from art_adp.apps.reproduce import CURVE_DIRECTIONS, _purifier, _snapshot
    from art_adp.compression import compression_rate
    from art_adp.data import load_mnist
    from art_adp.runs.seeds import derive_seed

    root, run, report, _ = done_run
    data = load_mnist(root)
    mlp = load_classifier(run / "classifier.safetensors")
    table = (run / "table.md").read_text()
    assert f"| compression rate (median, l_inf radius 0.3, {CURVE_DIRECTIONS} directions) |" in table
    for point in report["curve"]:
        purifier = _purifier(_snapshot(run, point["step"], "cpu"), TINY, "cpu")
        direct = compression_rate(purifier, data.x_test[:4], radius=0.3, norm="inf", nb_directions=CURVE_DIRECTIONS,
                                  seed=derive_seed(TINY.seed, "compression"))
        assert point["compression_rate"] == round(direct.summary["median"], 4) > 0
        line = next(row for row in table.splitlines() if row.startswith(f"| {point['step']:,} | 4 |"))
        assert line.endswith(f" {point['compression_rate']:.3f} |")
