"""The evaluation harness: records survive a SIGKILL and a re-run completes them exactly, and torchrun with 2 gloo
processes gives the 1-process records (both end to end, marked ``e2e``: CI runs them after the suite); records know
their settings (a changed setting is refused, by name); the card's statistics and confidence intervals match hand
computations; every sanity check is tripped by a planted defence and left alone by a benign one; the header says
what ran. Tiny models (an MLP trained on digits, NCSNv2(1, 8, ngf=4))."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from scipy.stats import norm

import art_adp
from art_adp import save_score_model
from art_adp.apps.evaluation import EvalConfig, evaluate
from art_adp.apps.evaluation import report, sanity
from art_adp.runs.records import append_records, load_records, read_jsonl, write_json
from art_adp.apps.evaluation.run import Setting, _dominant, compression, plan, price_of
from art_adp.runs.engine import frozen_noise, unit_seconds
from art_adp.models import MLP, save_classifier
from evalsuite_models import tiny_models

ROOT = Path(__file__).resolve().parents[1]
# SPSA and APGD draw from torch's and numpy's global generators: both must be seeded per unit for the records of
# a resumed or sharded run to match.
ARGS = ["--dataset", "digits", "--preset", "smoke", "--n-examples", "6", "--chunk-size", "3", "--sigma", "0.1",
        "--steps", "1", "--attacks", "clf-pgd,spsa,full-pgd-eot,apgd-eot", "--eps", "0.2", "--max-iter", "2",
        "--eot-samples", "2", "--spsa-max-iter", "2", "--spsa-samples-per-step", "8", "--apgd-max-iter", "2",
        "--apgd-eot-samples", "2",
        "--sanity-examples", "3", "--threads", "1", "--quiet"]
# main: clean + 4 attacks on 6 examples; fixed noise: clean + 3; undefended baseline: clean, PGD, APGD, SPSA;
# sanity on the first chunk of 3: flags, eps = 1, eps/2, 1 and 4 iterations, EOT 1 and 4
EXPECTED = 6 * (5 + 4 + 4) + 3 * 7
QUIET = dict(progress=False, log=lambda line: None)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    mlp, score, _, _ = tiny_models()
    folder = tmp_path_factory.mktemp("models")
    save_score_model(score, folder / "score.safetensors")
    save_classifier(mlp, folder / "classifier.safetensors")
    return ["--score", str(folder / "score.safetensors"), "--classifier", str(folder / "classifier.safetensors")]


def command(run_dir, checkpoints, launcher=(sys.executable, "-m", "art_adp", "evaluate"), extra=()):
    return [*launcher, *ARGS, *checkpoints, "--run-dir", str(run_dir), *extra]


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def lines(run_dir):
    return [line for f in sorted((Path(run_dir) / "records").glob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def baseline(checkpoints, tmp_path_factory):
    from art_adp.apps.cli import main

    run_dir = tmp_path_factory.mktemp("baseline")
    assert main(command(run_dir, checkpoints, launcher=("evaluate",))) == 0
    return run_dir


def test_one_process_run_writes_every_record_once_and_the_card(baseline):
    records = lines(baseline)
    assert len(records) == EXPECTED == len(load_records((baseline / "records").glob("*.jsonl")))
    for name in ("report.md", "report.json", "accuracy_vs_eps.png", "settings.json"):
        assert (baseline / name).stat().st_size > 0
    result = json.loads((baseline / "report.json").read_text())
    assert result["schema"] == "art-adp/evaluation-card/1" and result["scale"] == "smoke" and not result["claim"]
    assert result["results"]["main/clean"]["n"] == 6 and result["strongest"] is None
    assert [r["attack"] for r in result["card"]] == ["clean", "clf-pgd", "spsa", "full-pgd-eot", "apgd-eot"]
    main = [json.loads(r) for r in records if json.loads(r)["setting"] == "main"]
    assert len(main) == 6 * 5 and max(r["linf"] for r in main) <= 0.2 + 1e-6
    cells = json.loads((baseline / "settings.json").read_text())  # the one guard: each cell's settings, by its key
    assert {f"{r['setting']} / {r['attack']}" for r in map(json.loads, records)} <= set(cells)
    spsa = cells["main / spsa"]
    assert spsa["budget"] == {"eps": 0.2, "eps_step": 0.05, "norm": "inf", "max_iter": 2, "samples_per_step": 8}
    assert spsa["defences"][0]["sigma"] == 0.1 and len(spsa["classifier_sha256"]) == 64
    assert result["provenance"]["data_sha256"] == spsa["data_sha256"]  # the images measured, as the records say


def test_a_folder_of_the_digest_guard_is_refused_until_migrated_then_resumes_whole(baseline, checkpoints, tmp_path,
                                                                                  capsys):  # fmt: skip
    """A folder written before the one guard (each record naming its settings by digest, settings.json keyed by
    digest) is refused, naming ``art-adp migrate``; converted, it resumes with every record reused."""
    import shutil

    from art_adp.apps.cli import main

    run = tmp_path / "run"
    shutil.copytree(baseline, run)
    cells = json.loads((run / "settings.json").read_text())
    digest = {k: f"{i:016x}" for i, k in enumerate(cells)}  # the old layout, rebuilt
    (run / "settings.json").write_text(json.dumps({digest[k]: v for k, v in cells.items()}))
    for f in (run / "records").glob("*.jsonl"):
        old = [{**r, "settings": digest[f"{r['setting']} / {r['attack']}"]} for r in map(json.loads, f.read_text().splitlines())]
        f.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in old))
    assert main(command(run, checkpoints, launcher=("evaluate",))) == 2
    assert f"convert it once with art-adp migrate {run}, then resume" in capsys.readouterr().err
    assert main(["migrate", str(run)]) == 0
    assert json.loads((run / "settings.json").read_text()) == cells
    before = sorted(lines(run))
    assert main(command(run, checkpoints, launcher=("evaluate",))) == 0
    assert sorted(lines(run)) == before == sorted(lines(baseline))  # nothing measured again


@pytest.mark.e2e  # the CLI in its own interpreter, killed (CI: python -m pytest -m e2e)
def test_killed_run_resumes_to_the_same_records_and_table(baseline, checkpoints, tmp_path, capsys):
    from art_adp.apps.cli import main

    proc = subprocess.Popen(command(tmp_path, checkpoints), env=env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (tmp_path / "records").exists() and len(lines(tmp_path)) >= 15:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    partial = len(lines(tmp_path))
    assert 15 <= partial < EXPECTED
    assert main(command(tmp_path, checkpoints, launcher=("evaluate",))) == 0  # the same command again
    assert "Sanity report" in capsys.readouterr().out
    assert len(lines(tmp_path)) == EXPECTED  # nothing duplicated, nothing missing
    assert sorted(lines(tmp_path)) == sorted(lines(baseline))
    assert (tmp_path / "report.md").read_text() == (baseline / "report.md").read_text()


@pytest.mark.e2e  # a whole torchrun launch (CI: python -m pytest -m e2e)
def test_torchrun_two_gloo_processes_give_the_one_process_records(baseline, checkpoints, tmp_path):
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                "art_adp", "evaluate")
    done = subprocess.run(command(tmp_path, checkpoints, launcher), env=env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "records").glob("*.jsonl")) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert sorted(lines(tmp_path)) == sorted(lines(baseline))
    assert (tmp_path / "report.md").read_text() == (baseline / "report.md").read_text()


def test_a_changed_setting_in_the_same_run_dir_is_refused_by_name(baseline, checkpoints, tmp_path, capsys):
    import shutil

    from art_adp.apps.cli import main

    shutil.copytree(baseline, tmp_path / "run")
    before = sorted(lines(tmp_path / "run"))
    assert main(command(tmp_path / "run", checkpoints, launcher=("evaluate",), extra=("--max-iter", "3"))) == 2
    err = capsys.readouterr().err
    assert "holds records for main / clf-pgd made with other settings: budget.max_iter 2 (now 3)" in err
    assert "Use another run folder (--run-dir), or the same settings to resume." in err
    assert main(command(tmp_path / "run", checkpoints, launcher=("evaluate",), extra=("--sigma", "0.2"))) == 2
    assert "defences.0.sigma 0.1 (now 0.2)" in capsys.readouterr().err
    assert sorted(lines(tmp_path / "run")) == before  # nothing reused, nothing written


def test_adding_an_attack_resumes_the_others_and_runs_only_the_new_one(tmp_path):
    mlp, _, x, y = tiny_models()
    config = EvalConfig.preset("smoke", attacks=("clf-pgd",), eps=0.2, n_examples=6, chunk_size=6, sanity=False)
    evaluate(mlp, [Identity()], x, y, config=config, run_dir=tmp_path, **QUIET)
    first = sorted(lines(tmp_path))
    evaluate(mlp, [Identity()], x, y, config=EvalConfig.preset(
        "smoke", attacks=("clf-pgd", "full-pgd-eot"), eps=0.2, n_examples=6, chunk_size=6, sanity=False),
        run_dir=tmp_path, **QUIET)
    after = lines(tmp_path)
    assert set(first) <= set(after) and len(after) == len(first) + 6  # on the undefended model it is PGD: reused


def test_records_ignore_and_cut_a_partial_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = {"setting": "main", "attack": "clean", "index": 0, "pred": [1]}
    append_records(path, [rec])
    with open(path, "a") as f:
        f.write('{"setting": "main", "attack": "cle')  # a writer killed mid-line
    assert list(load_records([path])) == [("main", "clean", 0)]
    append_records(path, [{**rec, "index": 1}])
    assert [json.loads(line)["index"] for line in path.read_text().splitlines()] == [0, 1]  # valid JSONL
    assert [r["index"] for r in read_jsonl(path)] == [0, 1]
    append_records(tmp_path / "other.jsonl", [{**rec, "pred": [2]}])
    with pytest.raises(ValueError, match="mixes evaluations with different settings"):
        load_records([path, tmp_path / "other.jsonl"])


def test_write_json_replaces_a_file_whole_or_not_at_all(tmp_path, monkeypatch):
    path = write_json(tmp_path / "run" / "table.json", {"accuracy": 0.5}, indent=1)
    assert json.loads(path.read_text()) == {"accuracy": 0.5} and path.read_text() == '{\n "accuracy": 0.5\n}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_json(path, {"accuracy": object()})  # fails before writing: the old file stays
    assert json.loads(path.read_text()) == {"accuracy": 0.5}

    def killed(src, dst):
        raise KeyboardInterrupt  # a process stopped between writing the new file and putting it in place

    monkeypatch.setattr("art_adp.runs.records.os.replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"accuracy": 0.75})
    assert json.loads(path.read_text()) == {"accuracy": 0.5} and sorted(p.name for p in path.parent.iterdir()) == [
        "table.json"
    ]  # the old file whole, no temporary left beside it


def test_the_interval_matches_the_hand_formula():
    z, p, n = norm.ppf(0.975), 0.7, 10
    centre, half = (p + z * z / 20) / (1 + z * z / n), z / (1 + z * z / n) * math.sqrt(p * 0.3 / n + z * z / 400)
    assert report.wilson(0.7, 10) == pytest.approx((centre - half, centre + half))
    assert report.wilson(0.7, 10) == pytest.approx((0.3968, 0.8922), abs=1e-4)


def test_mean_worst_majority_and_undefended_over_repeats_by_hand():
    rows = [{"label": 1, "pred": [1, 1, 1], "undefended_pred": 0, "linf": 0.1, "l2": 0.2},
            {"label": 2, "pred": [2, 0, 2], "undefended_pred": 2, "linf": 0.1, "l2": 0.2},
            {"label": 3, "pred": [0, 0, 0], "undefended_pred": 0, "linf": 0.1, "l2": 0.2},
            {"label": 4, "pred": [4, 0, 1], "undefended_pred": 4, "linf": 0.1, "l2": 0.2},
            {"label": 5, "pred": [5, 0, 0], "undefended_pred": 5, "linf": 0.1, "l2": 0.3}]
    s = report._accuracies(rows)
    assert s["mean"] == pytest.approx(7 / 15)  # 3 + 2 + 0 + 1 + 1 correct of 15 judgements
    assert s["worst"] == pytest.approx(1 / 5)  # only the first is correct in every repeat
    assert s["majority"] == pytest.approx(2 / 5)  # 1 and 2; [4, 0, 1] is a three-way tie, [5, 0, 0] votes 0
    assert s["per_repeat"] == pytest.approx([4 / 5, 1 / 5, 2 / 5]) and s["undefended"] == pytest.approx(3 / 5)
    # one interval for every accuracy, counts and the fractional mean over R alike
    for key, p in (("mean", 7 / 15), ("worst", 1 / 5), ("majority", 2 / 5), ("undefended", 3 / 5)):
        assert s["ci"][key] == pytest.approx(list(report.wilson(p, 5)))
    assert s["max_l2"] == 0.3 and s["repeats"] == 3
    once = report._accuracies([{**r, "pred": r["pred"][:1]} for r in rows])  # R = 1: the three judgements agree
    assert once["mean"] == once["worst"] == once["majority"] == 4 / 5 and once["ci"]["worst"] == once["ci"]["mean"]


def test_a_card_names_the_intervals_it_recorded():
    """Cards written before every accuracy's interval was Wilson keep their exact intervals, and say so."""
    old = [{"worst": {"value": 0.5, "ci": [0.1, 0.9], "method": "clopper-pearson"}}]
    assert report._methods(old) == "Clopper–Pearson; Wilson for the mean over R, whose count is fractional"
    assert report._methods([{"worst": {"value": 0.5, "ci": [0.2, 0.8], "method": "wilson"}}]) == "Wilson"


def test_each_check_passes_and_fails_where_it_should():
    assert sanity.check_unbounded(0.02) is None and "93.0 %" in sanity.check_unbounded(0.93)
    assert sanity.check_monotone([(0.1, 0.8), (0.2, 0.5), (1.0, 0.0)], "eps") is None
    assert "rises with eps" in sanity.check_monotone([(0.1, 0.5), (0.2, 0.7)], "eps")
    assert sanity.check_monotone([(0.1, 0.5), (0.2, 0.53)], "eps") is None  # within 5 points
    assert sanity.check_converged([(1, 0.5), (5, 0.40), (15, 0.39)], "EOT draws") is None  # 1 point at the end
    assert "40.0 % at EOT draws = 5, 36.0 % at EOT draws = 15" in sanity.check_converged(
        [(1, 0.5), (15, 0.36), (5, 0.40)], "EOT draws")  # sorted by count
    assert sanity.check_black_box(0.30, 0.33) is None and "beats" in sanity.check_black_box(0.20, 0.33)
    assert sanity.check_randomness(1.0, eot_samples=15, repeats=3) is None and sanity.check_randomness(0.0, eot_samples=1, repeats=1) \
        is None
    assert "R = 1 time(s)" in sanity.check_randomness(0.5, eot_samples=15, repeats=1)
    assert sanity.check_zero_gradients(0.0) is None and "25 % of inputs" in sanity.check_zero_gradients(0.25)


class Identity(PreprocessorPyTorch):
    """A benign deterministic defence: the identity."""

    def __init__(self) -> None:
        super().__init__(device_type="cpu", apply_fit=False, apply_predict=True)

    def forward(self, x, y=None):
        return x, y


class Rounding(Identity):
    """Gradient masking: quantises its input to 5 levels (zero gradient almost everywhere)."""

    def forward(self, x, y=None):
        return torch.round(x * 4) / 4, y


class NoisyGradient(Identity):
    """Output x exactly; the gradient of each call is (1 + s·r) ⊙ ∇ with r ~ N(0, 1) per pixel: one draw points
    the wrong way on many pixels, the EOT mean of k draws on fewer and fewer, so accuracy keeps falling with EOT."""

    def forward(self, x, y=None):
        r = 5.0 * torch.randn_like(x)
        return x + (r * x - (r * x).detach()), y


class SparseGradient(Identity):
    """Output x exactly; each call passes the gradient of 10 % of the pixels (a random mask), so every iteration
    moves few pixels and accuracy keeps falling with iterations."""

    def forward(self, x, y=None):
        mask = (torch.rand_like(x) < 0.1).to(x.dtype)
        return x.detach() + mask * (x - x.detach()), y


class Jitter(Identity):
    """A random defence: adds small Gaussian noise, so the same input judged twice gives different outputs."""

    def forward(self, x, y=None):
        return (x + 0.05 * torch.randn_like(x)).clamp(0, 1), y


def run(defence, tmp_path, n=16, **overrides):
    mlp, _, x, y = tiny_models()
    torch.manual_seed(0)
    config = EvalConfig.preset("smoke", **{"attacks": ("full-pgd-eot",), "eps": 0.2, "max_iter": 3, "eot_samples": 1,
                                           "n_examples": n, "chunk_size": n, "sanity_examples": n,
                                           "sanity_iterations": (1.0,), "sanity_eot_samples": (1,), **overrides})
    return evaluate(mlp, [defence], x, y, config=config, run_dir=tmp_path, **QUIET)


def warned(result, text):
    return any(text in w for w in result["sanity"]["warnings"])


def test_rounding_trips_eps_1_zero_gradients_and_spsa_at_the_paper_budget(tmp_path):
    result = run(Rounding(), tmp_path, attacks=("full-pgd-eot", "spsa"), spsa_max_iter=40, spsa_samples_per_step=1280)
    assert warned(result, "unbounded attack (eps = 1)") and warned(result, "loss gradient through the defence is "
                                                                           "exactly zero for 100 %")
    assert warned(result, "black-box SPSA") and "SPSA vs white-box" in result["sanity"]["ran"]
    # and SPSA breaks images no gradient attack broke (the gradients are zero): the card names them
    only = result["sanity"]["inputs"]["only_black_box"]
    assert only and warned(result, f"the gradient-free SPSA breaks {len(only)} of 16 images no gradient attack broke")
    text = (tmp_path / "report.md").read_text()
    assert text.count("WARNING: GRADIENT MASKING?") == 4 and "no sign of gradient masking" not in text
    assert f"broken by SPSA and by no gradient attack: images {', '.join(map(str, only))}" in text


def test_spsa_below_the_paper_budget_is_not_compared(tmp_path):
    result = run(Rounding(), tmp_path, attacks=("full-pgd-eot", "spsa"), spsa_max_iter=2, spsa_samples_per_step=16)
    assert not warned(result, "black-box SPSA")
    assert any(s.startswith("SPSA vs white-box: SPSA's budget is below the paper's (spsa_max_iter 2 < 40, "
                            "spsa_samples_per_step 16 < 1280)") for s in result["sanity"]["skipped"])


def test_accuracy_still_falling_with_eot_trips_eot_convergence(tmp_path):
    result = run(NoisyGradient(), tmp_path, n=32, eot_samples=4, sanity_eot_samples=(1, 4, 64))
    points = dict(result["sanity"]["inputs"]["eot_points"])
    assert points[4] - points[64] > 0.02, points
    assert warned(result, "NOT CONVERGED: accuracy still falls with EOT draws")


def test_accuracy_still_falling_with_iterations_trips_iterations_convergence(tmp_path):
    result = run(SparseGradient(), tmp_path, n=32, max_iter=4, sanity_iterations=(0.5, 1.0, 5.0))
    points = dict(result["sanity"]["inputs"]["iteration_points"])
    assert points[4] - points[20] > 0.02, points
    assert warned(result, "NOT CONVERGED: accuracy still falls with iterations")


def test_a_random_defence_trips_the_randomness_check_unless_eot_and_repeats_are_used(tmp_path):
    result = run(Jitter(), tmp_path / "a", n=8)
    assert result["sanity"]["inputs"]["random_fraction"] == 1.0
    assert warned(result, "RANDOMIZED DEFENCE: the same input judged twice gives different outputs (100 % of inputs), "
                          "but the attacks use EOT 1")
    assert not warned(run(Jitter(), tmp_path / "b", n=8, eot_samples=2, sanity_eot_samples=(2,)), "RANDOMIZED DEFENCE")


def test_a_benign_defence_trips_no_check(tmp_path):
    result = run(Identity(), tmp_path, max_iter=6, sanity_iterations=(0.5, 1.0, 2.0), sanity_eot_samples=(1, 2))
    assert result["sanity"]["warnings"] == [] and result["sanity"]["inputs"]["random_fraction"] == 0.0
    assert result["sanity"]["verdict"] is None  # smoke budgets: no verdict either way
    text = (tmp_path / "report.md").read_text()
    assert "no verdict on gradient masking: budgets below the reference" in text
    assert "no sign of gradient masking" not in text and "No strongest attack named" in text


def test_reference_budgets_and_every_check_give_the_verdict_and_name_the_strongest(tmp_path):
    mlp, _, x, y = tiny_models()
    config = EvalConfig.preset("paper", attacks=("clf-pgd", "full-pgd-eot"), eps=0.2, n_examples=6, chunk_size=6,
                               sanity_examples=6, sanity_eot_samples=(1, 15), sanity_iterations=(0.5, 1.0))
    result = evaluate(mlp, [Identity()], x, y, config=config, run_dir=tmp_path, **QUIET)
    text = (tmp_path / "report.md").read_text()
    assert result["claim"] and result["scale"] == "reference" and result["strongest"] in ("clf-pgd", "full-pgd-eot")
    assert text.startswith("Budgets meet the reference") and "SMOKE-SCALE" not in text
    assert "- no sign of gradient masking (randomness, zero gradients, eps = 1, monotone in eps" in text
    assert "Strongest attack:" in text


def test_header_and_rows_say_what_ran_no_sanity_gives_no_verdict_and_the_step_follows_eps(checkpoints, tmp_path):
    from art_adp.apps.cli import main

    argv = ["evaluate", *checkpoints, "--run-dir", str(tmp_path), "--preset", "smoke", "--n-examples", "4",
            "--chunk-size", "4", "--eps", "0.1", "--attacks", "clf-pgd,spsa", "--spsa-samples-per-step", "16", "--no-sanity",
            "--steps", "1", "--quiet"]
    assert main(argv) == 0
    text = (tmp_path / "report.md").read_text()
    head = text.splitlines()
    assert head[0].startswith("SMOKE-SCALE RUN, NOT A ROBUSTNESS CLAIM: budgets below the reference")
    assert "clf-pgd: max_iter 2 < 40" in head[0] and "S = 2 < 10; R = 2 < 10" in head[0]
    assert head[1] == ("Preset: smoke, overridden: attacks = ['clf-pgd', 'spsa'], chunk_size = 4, eps = 0.1, "
                       "n_examples = 4, sanity = False, spsa_samples_per_step = 16")
    assert head[2].startswith("Threat model: l_inf eps = 0.1, step 0.025 (eps/4, following eps)")
    spsa_row = next(line for line in head if line.startswith("| SPSA"))
    assert "2 it of 0.025, 16 samples/step" in spsa_row and "(overridden: spsa_samples_per_step)" in spsa_row
    assert "steps of 0.025" in text and "no sign of gradient masking" not in text
    assert "no verdict on gradient masking: budgets below the reference and the sanity checks did not run" in text
    result = json.loads((tmp_path / "report.json").read_text())
    assert result["sanity"]["verdict"] is None and result["strongest"] is None
    assert result["overridden"]["spsa_samples_per_step"] == 16 and result["config"]["step"] == 0.025
    assert max(r["linf"] for r in read_jsonl(tmp_path / "records" / "rank-0.jsonl")) <= 0.1 + 1e-6


def test_presets_and_overrides_from_python():
    assert EvalConfig() == EvalConfig.preset("paper") and EvalConfig.preset("paper").overridden == ()
    c = EvalConfig.preset("smoke", eps=0.1, spsa_samples_per_step=8)
    assert c.step == 0.025 and c.overridden == ("eps",)  # spsa_samples_per_step = 8 is the smoke preset's own value
    croce = EvalConfig.preset("croce")
    assert (croce.attacks, croce.apgd_max_iter, croce.apgd_eot_samples, croce.repeats) == (("apgd-eot",), 100, 200, 10)
    # every preset but smoke judges R = 10 times (DiffHammer's Wor.Rob@10), as do levers and reproduce mnist
    from art_adp.apps.evaluation.config import PRESETS
    from art_adp.apps.levers import LeversConfig
    from art_adp.apps.reproduce import MnistRecipe

    assert {n: PRESETS[n].repeats for n in PRESETS} == {"strongest": 10, "paper": 10, "croce": 10, "smoke": 2}
    assert MnistRecipe().repeats == LeversConfig().repeats == 10
    paper = EvalConfig.preset("paper")
    assert (paper.max_iter, paper.eot_samples, paper.spsa_samples_per_step, paper.ensemble_size, paper.step) == (40, 15, 1280, 10, 2 / 255)
    message = "Unknown plan 'fast' for evaluate; choose from strongest, paper, croce, smoke."
    with pytest.raises(ValueError, match=re.escape(message)):
        EvalConfig.preset("fast")


def test_the_strongest_preset_runs_the_strongest_of_each_protocol_at_the_reference_budgets():
    from art_adp.apps.evaluation.config import judging_shortfalls, shortfalls

    from art_adp.attacks.registry import names

    top = EvalConfig.preset("strongest")
    assert names(strongest=True)[:7] == ("full-pgd-eot", "full-pgd-eot-ensemble", "apgd-eot", "apgd-eot-ensemble",
                                         "lowfreq-vote", "apgd-eot-dev", "selective-eot")  # fmt: skip
    assert top.attacks == ("bpda-eot", *names(strongest=True))  # and BPDA+EOT, the paper's adaptive attack
    # APGD's family at 8 draws, where measured strength stops growing (plans.PLATEAU), not Croce et al.'s 200
    assert (top.max_iter, top.eot_samples, top.apgd_max_iter, top.apgd_eot_samples) == (40, 15, 100, 8)
    assert (top.selective_max_iter, top.selective_eot_samples, top.lowfreq_max_iter) == (50, 10, 100)  # their papers'
    assert (top.ensemble_size, top.repeats) == (10, 10)  # DiffHammer's N = 10 resubmissions: the worst of R = 10
    # the PGD rows at full strength: from a random start, the step halved at 1/2 and 3/4 of the iterations
    assert (top.random_start, top.step_schedule) == (True, "halving")
    b = top.budget("full-pgd-eot")
    assert (b.random_start, b.step_schedule, top.budget("full-pgd-eot-ensemble").random_start) == (True, "halving", True)
    assert all(shortfalls(a, top) == [] for a in top.attacks) and judging_shortfalls(top) == []
    assert judging_shortfalls(replace(top, repeats=5)) == ["R = 5 < 10"]  # Wor.Rob@10 for every attack
    assert judging_shortfalls(replace(top, repeats=5, attacks=("apgd-eot-dev",))) == ["R = 5 < 10"]
    names = [s.name for s in plan(top)]
    assert names[:3] == ["main", "fixed", "sanity:flags"] and "sanity:eps=1" in names  # white box: full-pgd-eot
    probe = {"forward": 1.0, "full": 3.0}
    main = plan(top)[0]
    judge = 10 * 10 * 1.0
    # the best iterate judged on S = 10 draws: 9 times in 40 iterations (every 5, the start included); APGD at the
    # start and after CE and DLR; the vote attack its own votes
    # selective EOT at DiffHammer's own budget: 50 iterations per loss, N = 10 draws
    assert unit_seconds(price_of(main, "selective-eot", top), probe) == 3 * 50 * (2 * 10 * 1.0 + 3.0) + judge
    # APGD's CE and DLR runs: 100 iterations x 8 draws, each forward + backward (3.0); the step-wise checkpointing
    # recomputes each of those 2 x 100 x 8 draws' forward (1.0) once more; every 5th iterate judged (a judgement of 10
    # draws is not under a quarter of an iteration of 8): 21 judgements per loss of 10 draws forward
    assert unit_seconds(price_of(main, "apgd-eot-dev", top), probe) == (
        2 * 100 * 8 * 3.0 + 2 * 100 * 8 * 1.0 + 2 * 21 * 10 * 1.0 + judge
    )
    # the vote attack at DiffBreak's own 100 iterations: each step 15 draws through the purification and a judgement
    # of S = 10 draws of its own, and the start's
    assert unit_seconds(price_of(main, "lowfreq-vote", top), probe) == 100 * (15 * 3.0 + 10 * 1.0) + 10 * 1.0 + judge


def test_cli_estimate_only_prices_the_strongest_preset(checkpoints, tmp_path, capsys):
    from art_adp.apps.cli import main

    argv = ["evaluate", *checkpoints, "--dataset", "digits", "--preset", "strongest", "--estimate-only", "--steps", "1",
            "--n-examples", "4", "--threads", "1", "--run-dir", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Estimated time on this device (cpu" in out
    assert "Smaller: --preset paper, --preset croce, --preset smoke" in out
    assert not (tmp_path / "records").exists()


def test_the_card_names_the_strongest_among_the_new_attacks(tmp_path):
    mlp, _, x, y = tiny_models()
    config = EvalConfig.preset("smoke", attacks=("clf-pgd", "selective-eot", "full-pgd-eot-dev"), eps=0.2, max_iter=3,
                               eot_samples=2, n_examples=6, chunk_size=6, sanity=False, fixed_noise=False,
                               compression_examples=0)
    result = evaluate(mlp, [Identity()], x, y, config=config, run_dir=tmp_path, **QUIET)
    rows = {r["attack"]: r for r in result["card"]}
    assert set(rows) == {"clean", "clf-pgd", "selective-eot", "full-pgd-eot-dev"}
    assert rows["selective-eot"]["label"] == "Selective EOT (DiffHammer)"
    worst = min(rows[a]["worst"]["value"] for a in rows if a != "clean")
    assert result["strongest_candidate"] in rows and rows[result["strongest_candidate"]]["worst"]["value"] == worst
    assert worst < rows["clean"]["worst"]["value"]


def test_plan_and_the_time_estimate_count_what_runs():
    c = EvalConfig.preset("paper", attacks=("bpda-eot", "spsa"))
    names = [s.name for s in plan(c)]
    assert names == ["main", "fixed", "sanity:flags", "sanity:eps=1", "sanity:eps/2", "sanity:iterations=10",
                     "sanity:iterations=20", "sanity:iterations=100", "sanity:eot=1", "sanity:eot=5", "sanity:eot=50"]
    probe = {"forward": 1.0, "full": 3.0}
    main = plan(c)[0]
    # attack + its best iterate judged 9 times on S draws + S x R judgements
    assert unit_seconds(price_of(main, "bpda-eot", c), probe) == 40 * 15 * 1.0 + 9 * 10 + 10 * 10 * 1.0
    # + its 41 iterates judged on S draws
    assert unit_seconds(price_of(main, "spsa", c), probe) == 40 * 2 * 1280 + 41 * 10 + 100
    fixed = Setting("fixed", ("bpda-eot",), {"eot_samples": 1}, judge="fixed")
    assert unit_seconds(price_of(fixed, "bpda-eot", c), probe) == 40 + 9 * 10 + 1


def test_estimate_only_logs_the_estimate_and_attacks_nothing(tmp_path, monkeypatch):
    import art_adp.compression

    def refuse(*args, **kwargs):
        raise AssertionError("the compression rate ran under estimate_only")

    monkeypatch.setattr(art_adp.compression, "compression_rate", refuse)
    mlp, score, x, y = tiny_models()
    logged = []
    out = evaluate(mlp, art_adp.ADPPurifier(score, steps=1), x, y, config=EvalConfig.preset("paper"),
                   run_dir=tmp_path, progress=False, log=logged.append, estimate_only=True)
    assert out["estimate_seconds"] > 0 and not (tmp_path / "records").exists()
    assert logged[0].startswith("Estimated time on this device (cpu") and "Smaller: --preset croce, --preset smoke, --n-examples N" in logged[0]


def test_estimate_only_prices_each_attack_by_the_cost_model(tmp_path, monkeypatch):
    from art_adp.runs import engine

    monkeypatch.setattr(engine, "probe", lambda *a: {"forward": 1.0, "full": 3.0, "rows": 4, "graph_row_bytes": 1.0})
    mlp, score, x, y = tiny_models()
    config = EvalConfig.preset("paper", attacks=("bpda-eot", "full-pgd-eot"), n_examples=4, sanity=False,
                               fixed_noise=False, compression_examples=0)
    logged = []
    out = evaluate(mlp, art_adp.ADPPurifier(score, steps=1), x, y, config=config, run_dir=tmp_path, progress=False,
                   log=logged.append, estimate_only=True)
    judge = 10 * 10 * 1.0  # S x R forward passes per image
    # 40 iterations x 15 draws, each a forward pass (BPDA) or a full-gradient pass (3.0); judgements of 10 draws, "auto":
    # 9 for BPDA (every 5: a judgement is not under a quarter of its iteration), 41 for the full gradient (every one)
    assert out["by_attack"]["bpda-eot"] == 4 * (40 * 15 * 1.0 + 9 * 10 * 1.0 + judge)
    assert out["by_attack"]["full-pgd-eot"] == 4 * (40 * 15 * 3.0 + 41 * 10 * 1.0 + judge)
    assert out["estimate_seconds"] == sum(out["by_attack"].values())  # the clean row costs its judgement only
    assert "By attack: clean 7 min, bpda-eot 53 min, full-pgd-eot 2.6 h, clf-pgd 0 s." in logged[0]  # 3,160 s, 9,240 s


def test_the_estimate_names_an_attack_taking_over_half_of_it_and_the_flags_that_shrink_it(tmp_path, monkeypatch):
    from art_adp.runs import engine

    monkeypatch.setattr(engine, "probe", lambda *a: {"forward": 1.0, "full": 3.0, "rows": 4, "graph_row_bytes": 1.0})
    mlp, score, x, y = tiny_models()
    logged = []
    for own in ({}, {"selective_max_iter": 50, "selective_eot_samples": 10}):  # smoke's, DiffHammer's
        config = EvalConfig.preset("smoke", n_examples=4, compression_examples=0, **own)
        evaluate(mlp, art_adp.ADPPurifier(score, steps=1), x, y, config=config, run_dir=tmp_path / str(len(own)),
                 progress=False, log=logged.append, estimate_only=True)  # fmt: skip
    assert " takes " not in logged[0] and "selective-eot 5 min," in logged[0]  # no attack over half of it
    # 4 images x 3 losses x 50 iterations x (2 x N draws forward + one grafted full pass): N = 10 in the table (+ S x R
    # = 4 judging draws), N = 1 in the fixed-noise view (+ its one draw): 16,820 s
    assert ("with a full gradient in 4). selective-eot takes 4.7 h of it: lower --selective-max-iter (now 50) "
            "or --selective-eot-samples (now 10) to shrink it. Smaller: --n-examples N") in logged[1]
    smoke = EvalConfig.preset("smoke")
    assert _dominant({"clean": 50.0, "spsa": 1.0}, 51.0, smoke) == ""  # a run of under a minute: nothing to shrink
    assert _dominant({"clean": 70.0, "spsa": 1.0}, 71.0, smoke) == (  # the clean row costs its judgements
        "clean takes 70 s of it: lower --ensemble-size (now 2) or --repeats (now 2) to shrink it. ")
    assert _dominant({"clean": 70.0, "spsa": 71.0}, 141.0, smoke) == (
        "spsa takes 71 s of it: lower --spsa-max-iter (now 2) or --spsa-samples-per-step (now 8) to shrink it. ")


def test_the_estimate_draws_nothing_the_run_would_draw(tmp_path):
    from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

    class Noisy(PreprocessorPyTorch):  # a user's randomized defence: its own generator and torch's global RNG
        def __init__(self):
            super().__init__(device_type="cpu", apply_fit=False, apply_predict=True)
            self.generator = torch.Generator().manual_seed(4)

        def forward(self, x, y=None):
            noise = torch.randn(x.shape, generator=self.generator) + torch.randn(x.shape)
            return (x + 0.01 * noise).clamp(0, 1), y

    mlp, _, x, y = tiny_models()
    noisy = Noisy()
    states = (torch.random.get_rng_state(), noisy.generator.get_state())
    evaluate(mlp, [noisy], x, y, config=EvalConfig.preset("smoke", sanity=False), run_dir=tmp_path, progress=False,
             log=lambda line: None, estimate_only=True)
    assert torch.equal(states[0], torch.random.get_rng_state())
    assert torch.equal(states[1], noisy.generator.get_state())


def test_fixed_noise_gives_the_attack_and_the_judge_the_same_draw():
    mlp, score, x, y = tiny_models()
    from art_adp.ensemble import logits as defended_logits
    from art_adp.apps.evaluation.run import _as_estimator

    est = _as_estimator(mlp, x[:8], 10, (0, 1), torch.device("cpu"), [art_adp.ADPPurifier(score, sigma=0.3, steps=1)])
    xt = torch.as_tensor(x[:8])
    with torch.no_grad():
        assert not torch.equal(defended_logits(est, xt), defended_logits(est, xt))  # random
        with frozen_noise(est, 7):
            a, b = defended_logits(est, xt), art_adp.EOTClassifier(est, ensemble_size=1).predict(xt)
            assert torch.equal(a, defended_logits(est, xt))
            np.testing.assert_allclose(a.log_softmax(1).numpy(), b, atol=1e-5)
        assert "forward" not in vars(est.preprocessing_operations[0])  # restored


def test_baselines_are_attacked_the_same_way_and_judged_once(tmp_path):
    mlp, score, x, y = tiny_models()
    torch.manual_seed(3)
    other = MLP(1, 8, 10, hidden=(16,)).eval()  # an untrained classifier: clean accuracy by hand below
    config = EvalConfig.preset("smoke", attacks=("clf-pgd", "bpda-eot"), eps=0.2, n_examples=8, chunk_size=8,
                               sanity=False, fixed_noise=False)
    result = evaluate(mlp, art_adp.ADPPurifier(score, sigma=0.1, steps=1), x, y, config=config,
                      run_dir=tmp_path, baselines={"other": other}, **QUIET)
    with torch.no_grad():
        clean = float((other(torch.as_tensor(x[:8])).argmax(1).numpy() == y[:8]).mean())
        bare = float((mlp(torch.as_tensor(x[:8])).argmax(1).numpy() == y[:8]).mean())
    rows = {r["attack"]: r for r in result["card"]}
    assert rows["clean"]["baselines"]["other"]["value"] == clean and rows["clean"]["baselines"]["undefended"][
        "value"] == bare
    assert rows["bpda-eot"]["baselines"]["other"] == rows["clf-pgd"]["baselines"]["other"]  # both PGD on it
    assert rows["clf-pgd"]["baselines"]["other"]["as"] == "clf-pgd"
    recs = [r for r in read_jsonl(tmp_path / "records" / "rank-0.jsonl") if r["setting"] == "baseline:other"]
    assert {r["attack"] for r in recs} == {"clean", "clf-pgd"} and all(len(r["pred"]) == 1 for r in recs)
    header = (tmp_path / "report.md").read_text().splitlines()
    assert any(line.startswith("| Attack | Budget | Undefended | other (baseline) | ADP mean |") for line in header)


def test_cli_adversarial_training_baseline(checkpoints, tmp_path):
    pytest.importorskip("art_adp.models.adversarial")
    from art_adp.apps.cli import main

    argv = ["evaluate", *checkpoints, "--run-dir", str(tmp_path), "--preset", "smoke", "--n-examples", "4",
            "--chunk-size", "4", "--attacks", "clf-pgd", "--no-sanity", "--no-fixed-noise", "--steps", "1", "--quiet",
            "--baseline", "adversarial-training", "--adv-epochs", "1", "--adv-max-iter", "1"]
    assert main(argv) == 0
    assert (tmp_path / "adv_classifier.safetensors").stat().st_size > 0
    result = json.loads((tmp_path / "report.json").read_text())
    assert result["baselines"] == ["undefended", "adv. training"] and "Baseline" in result["description"]
    assert main(argv) == 0  # reuses the saved classifier and the records


def test_bad_configuration_is_refused():
    mlp, score, x, y = tiny_models()
    with pytest.raises(ValueError, match="Unknown attack\\(s\\) \\['pgd'\\]"):
        evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(attacks=("pgd",)))
    with pytest.raises(ValueError, match="SPSA \\(torchattacks\\) is an l_inf attack"):
        evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(norm=2))
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(repeats=0))
    with pytest.raises(ValueError, match="compression_examples must be an integer >= 0, got -1"):
        evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(compression_examples=-1))
    with pytest.raises(ValueError, match="compression_directions must be an integer >= 1, got 0"):
        evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(compression_directions=0))


def test_cli_names_the_missing_checkpoint(tmp_path, capsys):
    from art_adp.apps.cli import main

    assert main(["evaluate", "--score", str(tmp_path / "none.safetensors"), "--run-dir", str(tmp_path)]) == 2
    assert "art-adp demo" in capsys.readouterr().err


def test_evaluate_lives_in_the_applications_not_in_the_library():
    import art_adp.apps.evaluation.run as run

    assert evaluate is run.evaluate and callable(evaluate)
    assert not hasattr(art_adp, "evaluate") and not hasattr(art_adp, "EvalConfig")


def test_sweeps_write_tables_and_plots_and_leave_the_purifier_as_it_was(tmp_path):
    mlp, score, x, y = tiny_models()
    generator = torch.Generator().manual_seed(5)
    purifier = art_adp.ADPPurifier(score, sigma=0.1, steps=1, generator=generator)
    config = EvalConfig.preset("smoke", attacks=("clf-pgd",), eps=0.2, max_iter=2, ensemble_size=1, repeats=2, n_examples=6,
                               chunk_size=6, sanity=False, fixed_noise=False, sigma_sweep=(0.05, 0.3),
                               eot_sweep=(1, 2), eps_sweep=(0.1,))
    result = evaluate(mlp, purifier, x, y, config=config, run_dir=tmp_path, **QUIET)
    assert purifier.sigma == 0.1 and purifier.generator is generator
    assert {"sigma=0.05/bpda-eot", "sigma=0.3/clean", "eot=2/bpda-eot", "eps=0.1/clf-pgd"} <= set(result["results"])
    text = (tmp_path / "report.md").read_text()
    assert "| 0.05 |" in text and "| BPDA+EOT |" in text
    for name in ("sigma_sweep.png", "eot_sweep.png", "accuracy_vs_eps.png"):
        assert (tmp_path / name).stat().st_size > 0
    curve = report.eps_curves(result)["Clf-PGD (preprocessor-blind)"]
    assert [p[0] for p in curve] == [0.0, 0.1, 0.2]  # clean, the swept eps, the main eps


def test_card_reports_the_compression_rate_which_a_resume_may_change_or_drop(tmp_path):
    from art_adp.compression import compression_rate
    from art_adp.runs.seeds import derive_seed

    mlp, score, x, y = tiny_models()
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    purifier = art_adp.ADPPurifier(score, sigma=0.1, steps=1, generator=generator)
    config = EvalConfig.preset("smoke", attacks=("clf-pgd",), eps=0.2, max_iter=1, ensemble_size=1, repeats=1, n_examples=6,
                               chunk_size=6, sanity=False, fixed_noise=False, sigma_sweep=(0.05,),
                               compression_examples=4, compression_directions=3)
    result = evaluate(mlp, purifier, x, y, config=config, run_dir=tmp_path, **QUIET)
    assert purifier.sigma == 0.1 and purifier.generator is generator and torch.equal(generator.get_state(), state)

    def direct(sigma):
        p = art_adp.ADPPurifier(score, sigma=sigma, steps=1)
        return compression_rate(p, x[:4], radius=0.2, norm="inf", nb_directions=3,
                                seed=derive_seed(0, "compression"), batch_size=config.batch_size).summary

    main, swept = direct(0.1), direct(0.05)
    assert result["compression"] == main and main["nb_examples"] == 4 and main["norm"] == "inf"
    assert result["compression_sweep"] == {"sigma=0.05": swept} and swept["median"] != main["median"]
    assert json.loads((tmp_path / "report.json").read_text())["compression"] == main
    text = (tmp_path / "report.md").read_text()
    rate = f"{main['median']:.3f} [{main['q25']:.3f}, {main['q75']:.3f}]"
    assert (f"Compression rate (Liu & Wei 2025, reconstructed; gradient-free): {rate} (median [q25, q75] over 4 "
            "images) at radius 0.2 (l_inf directions, ratios in l_2), 3 directions") in text
    assert "| sigma | Standard | BPDA+EOT | Clf-PGD (preprocessor-blind) | Compression rate |" in text
    sweep_row = next(line for line in text.splitlines() if line.startswith("| 0.05 |"))
    assert sweep_row.endswith(f" {swept['median']:.3f} [{swept['q25']:.3f}, {swept['q75']:.3f}] |")
    assert "the attack that art_adp.attacks.FixedNoisePGD gives users" in text
    # a measurement the indicator refuses is named on the card instead of costing it
    class Unseeded(art_adp.ADPPurifier):
        def forward(self, x, y=None):
            return super().forward(x, y)[0] + 0.1 * torch.rand_like(x), y

    refused, refused_sweep = compression(Unseeded(score, sigma=0.1, steps=1), x[:6], config, plan(config))
    assert refused["error"].startswith("The purifier is not deterministic: two passes on the same inputs differ.")
    assert refused_sweep == {"sigma=0.05": refused}
    assert ("Compression rate (Liu & Wei 2025, reconstructed): not measured: The purifier is not deterministic"
            in "\n".join(report.header({**result, "compression": refused})))
    # not a setting of the records: a resume with other compression settings reuses every record
    before, settings = sorted(lines(tmp_path)), (tmp_path / "settings.json").read_text()
    again = evaluate(mlp, purifier, x, y, config=replace(config, compression_examples=0), run_dir=tmp_path,
                             **QUIET)
    assert sorted(lines(tmp_path)) == before and (tmp_path / "settings.json").read_text() == settings
    assert again["compression"] is None and again["compression_sweep"] == {} and again["results"] == result["results"]
    text = (tmp_path / "report.md").read_text()
    assert "Compression rate" not in text and "| sigma | Standard | BPDA+EOT | Clf-PGD (preprocessor-blind) |" in text


def test_a_new_evaluation_folder_derives_its_seeds_apart_and_an_old_one_resumes_with_its_own(tmp_path):
    """A new folder records the "apart" seed scheme; one whose settings name none (measured before it) resumes
    under "shared": the records of an interrupted run come back as one run's; asking it for another scheme is
    refused, naming the scheme."""
    from art_adp.runs.engine import folder_scheme

    mlp, score, x, y = tiny_models()
    config = EvalConfig.preset("paper", attacks=("bpda-eot",), n_examples=4, chunk_size=2, max_iter=1, eot_samples=1,
                               ensemble_size=2, repeats=1, sanity=False, fixed_noise=False, compression_examples=0)

    def run(folder, **kw):
        evaluate(mlp, art_adp.ADPPurifier(score, steps=1), x, y, config=config, run_dir=tmp_path / folder,
                 progress=False, log=lambda line: None, **kw)  # fmt: skip
        records = read_jsonl(tmp_path / folder / "records" / "rank-0.jsonl")
        return sorted(records, key=lambda r: (r["attack"], r["index"]))

    whole = run("whole", seed_scheme="shared")
    new = run("new")
    assert folder_scheme(tmp_path / "new" / "settings.json") == "apart"
    assert folder_scheme(tmp_path / "whole" / "settings.json") == "shared"
    old = tmp_path / "old"
    (old / "records").mkdir(parents=True)
    (old / "settings.json").write_text((tmp_path / "whole" / "settings.json").read_text())
    append_records(old / "records" / "rank-0.jsonl", [r for r in whole if r["index"] < 2])  # killed after a block
    assert run("old") == whole  # the second block made again under its own scheme
    schemes = [{v.get("seed_scheme") for v in json.loads((tmp_path / f / "settings.json").read_text()).values()}
               for f in ("new", "whole")]  # fmt: skip
    assert schemes == [{"apart"}, {None}]  # a folder measured before the scheme was recorded names none
    with pytest.raises(ValueError, match="made with other settings: seed_scheme"):
        run("old", seed_scheme="apart")
