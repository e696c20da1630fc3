"""The evaluation harness: records survive a SIGKILL and a re-run completes them exactly; torchrun with 2 gloo
processes gives the 1-process records; the sanity report flags a gradient-masked toy defence; judging, tables and
the checks compute what they should. Tiny models (an MLP trained on digits, NCSNv2(1, 8, ngf=4))."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

import art_adp
from art_adp import EvalConfig, save_score_model
from art_adp.evaluation import report, sanity
from art_adp.evaluation.records import append_records, load_records
from art_adp.models import save_classifier
from evalsuite_models import tiny_models

ROOT = Path(__file__).resolve().parents[1]
# SPSA and APGD draw from torch's and numpy's global generators: both must be seeded per unit for the records of
# a resumed or sharded run to match.
ARGS = ["--dataset", "digits", "--n-examples", "12", "--chunk-size", "3", "--sigma", "0.1", "--steps", "1",
        "--attacks", "clf-pgd,spsa,full-pgd-eot,apgd-eot", "--runs", "2", "--repeats", "2", "--eps", "0.2",
        "--iterations", "2", "--eot", "2", "--spsa-iterations", "2", "--spsa-samples", "8", "--apgd-iterations", "2",
        "--apgd-eot", "2", "--sanity-examples", "3", "--threads", "1", "--quiet"]
EXPECTED = 12 * 5 + 3 * 3  # main: clean + 4 attacks on 12 examples; 3 sanity attacks on the first chunk of 3


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    mlp, score, _, _ = tiny_models()
    folder = tmp_path_factory.mktemp("models")
    save_score_model(score, folder / "score.safetensors")
    save_classifier(mlp, folder / "classifier.safetensors")
    return ["--score", str(folder / "score.safetensors"), "--classifier", str(folder / "classifier.safetensors")]


def command(run_dir, checkpoints, launcher=(sys.executable, "-m", "art_adp.evaluate")):
    return [*launcher, *ARGS, *checkpoints, "--run-dir", str(run_dir)]


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def lines(run_dir):
    return [line for f in sorted((Path(run_dir) / "records").glob("*.jsonl")) for line in f.read_text().splitlines()]


def run_in_process(run_dir, checkpoints, capsys):
    from art_adp.cli import main

    assert main(command(run_dir, checkpoints, launcher=("evaluate",))) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def baseline(checkpoints, tmp_path_factory):
    from art_adp.cli import main

    run_dir = tmp_path_factory.mktemp("baseline")
    assert main(command(run_dir, checkpoints, launcher=("evaluate",))) == 0
    assert "Sanity report" in (run_dir / "report.md").read_text()  # with every run
    return run_dir


def test_one_process_run_writes_every_record_once_and_the_outputs(baseline):
    records = lines(baseline)
    assert len(records) == EXPECTED == len(load_records((baseline / "records").glob("*.jsonl")))
    for name in ("report.md", "report.json", "robustness.png"):
        assert (baseline / name).stat().st_size > 0
    result = json.loads((baseline / "report.json").read_text())
    assert result["results"]["main/clean"]["n"] == 12 and result["strongest"] in art_adp.evaluation.ATTACKS
    main = [json.loads(r) for r in records if json.loads(r)["setting"] == "main"]
    assert len(main) == 12 * 5 and max(r["linf"] for r in main) <= 0.2 + 1e-6


def test_killed_run_resumes_to_the_same_records_and_table(baseline, checkpoints, tmp_path, capsys):
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
    out = run_in_process(tmp_path, checkpoints, capsys)  # the same command again
    assert "Sanity report" in out
    assert len(lines(tmp_path)) == EXPECTED  # nothing duplicated, nothing missing
    assert sorted(lines(tmp_path)) == sorted(lines(baseline))
    assert (tmp_path / "report.md").read_text() == (baseline / "report.md").read_text()


def test_torchrun_two_gloo_processes_give_the_one_process_records(baseline, checkpoints, tmp_path):
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                "art_adp.evaluate")
    done = subprocess.run(command(tmp_path, checkpoints, launcher), env=env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "records").glob("*.jsonl")) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert sorted(lines(tmp_path)) == sorted(lines(baseline))
    assert (tmp_path / "report.md").read_text() == (baseline / "report.md").read_text()


class Rounding(PreprocessorPyTorch):
    """A gradient-masking toy defence: quantises its input to 5 levels (zero gradient almost everywhere)."""

    def __init__(self) -> None:
        super().__init__(device_type="cpu", apply_fit=False, apply_predict=True)

    def forward(self, x, y=None):
        return torch.round(x * 4) / 4, y


def test_planted_gradient_masking_is_flagged(tmp_path):
    mlp, _, x, y = tiny_models()
    config = EvalConfig(attacks=("full-pgd-eot", "spsa"), eps=0.2, eps_step=0.05, iterations=3, eot=1,
                        spsa_iterations=5, spsa_samples=16, runs=1, repeats=1, chunk_size=16, sanity_examples=16)
    lines_out = []
    result = art_adp.evaluate(mlp, [Rounding()], x[:16], y[:16], config=config, run_dir=tmp_path, progress=False,
                              log=lines_out.append)
    warnings = result["sanity"]["warnings"]
    assert any("unbounded attack (eps = 1)" in w for w in warnings)
    assert any("black-box SPSA" in w for w in warnings)
    assert sum("WARNING: GRADIENT MASKING?" in line for line in lines_out) == len(warnings) >= 2


def test_sanity_checks_pass_and_fail_where_they_should():
    assert sanity.check_unbounded(0.02) is None and "93.0 %" in sanity.check_unbounded(0.93)
    assert sanity.check_monotone([(0.1, 0.8), (0.2, 0.5), (1.0, 0.0)], "eps") is None
    assert "rises with eps" in sanity.check_monotone([(0.1, 0.5), (0.2, 0.7)], "eps")
    assert sanity.check_monotone([(0.1, 0.5), (0.2, 0.53)], "eps") is None  # within 5 points
    assert sanity.check_black_box(0.30, 0.33) is None and "beats" in sanity.check_black_box(0.20, 0.33)


def test_mean_and_worst_case_over_repeats():
    rows = [{"label": 1, "pred": [1, 1, 1], "undefended_pred": 0, "linf": 0.1, "l2": 0.2},
            {"label": 2, "pred": [2, 0, 2], "undefended_pred": 2, "linf": 0.1, "l2": 0.2},
            {"label": 3, "pred": [0, 0, 0], "undefended_pred": 0, "linf": 0.1, "l2": 0.2},
            {"label": 4, "pred": [4, 4, 1], "undefended_pred": 4, "linf": 0.1, "l2": 0.2}]
    s = report.summarize(rows)
    assert s["mean"] == pytest.approx(7 / 12)  # 3 + 2 + 0 + 2 correct of 12 judgements
    assert s["worst"] == pytest.approx(1 / 4)  # only the first is correct in every repeat
    assert s["per_repeat"] == pytest.approx([3 / 4, 2 / 4, 2 / 4]) and s["undefended"] == pytest.approx(2 / 4)


def test_records_ignore_and_cut_a_partial_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = {"setting": "main", "attack": "clean", "index": 0, "pred": [1]}
    append_records(path, [rec])
    with open(path, "a") as f:
        f.write('{"setting": "main", "attack": "cle')  # a writer killed mid-line
    assert list(load_records([path])) == [("main", "clean", 0)]
    append_records(path, [{**rec, "index": 1}])
    assert [json.loads(line)["index"] for line in path.read_text().splitlines()] == [0, 1]
    append_records(tmp_path / "other.jsonl", [{**rec, "pred": [2]}])
    with pytest.raises(ValueError, match="mixes evaluations with different settings"):
        load_records([path, tmp_path / "other.jsonl"])


def test_bad_configuration_is_refused():
    mlp, score, x, y = tiny_models()
    with pytest.raises(ValueError, match="Unknown attack\\(s\\) \\['pgd'\\]"):
        art_adp.evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(attacks=("pgd",)))
    with pytest.raises(ValueError, match="SPSA \\(torchattacks\\) is an l_inf attack"):
        art_adp.evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(norm=2))
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        art_adp.evaluate(mlp, art_adp.ADPPurifier(score), x[:4], y[:4], config=EvalConfig(repeats=0))


def test_cli_names_the_missing_checkpoint(tmp_path, capsys):
    from art_adp.cli import main

    assert main(["evaluate", "--score", str(tmp_path / "none.safetensors"), "--run-dir", str(tmp_path)]) == 2
    assert "art-adp demo" in capsys.readouterr().err


def test_evaluate_is_the_function_and_the_harness_is_importable():
    import art_adp.evaluation.run as run

    assert art_adp.evaluate is run.evaluate and callable(art_adp.evaluate)


def test_sweeps_write_tables_and_plots_and_leave_the_purifier_as_it_was(tmp_path):
    mlp, score, x, y = tiny_models()
    generator = torch.Generator().manual_seed(5)
    purifier = art_adp.ADPPurifier(score, sigma=0.1, steps=1, generator=generator)
    config = EvalConfig(attacks=("clf-pgd",), eps=0.2, iterations=2, runs=1, repeats=2, chunk_size=6, sanity=False,
                        sigma_sweep=(0.05, 0.3), eot_sweep=(1, 2))
    result = art_adp.evaluate(mlp, purifier, x[:6], y[:6], config=config, run_dir=tmp_path, progress=False,
                              log=lambda line: None)
    assert purifier.sigma == 0.1 and purifier.generator is generator
    assert {"sigma=0.05/bpda-eot", "sigma=0.3/clean", "eot=2/bpda-eot"} <= set(result["results"])
    text = (tmp_path / "report.md").read_text()
    assert "| 0.05 |" in text and "| BPDA+EOT |" in text and "no sign of gradient masking" in text
    assert (tmp_path / "sigma_sweep.png").stat().st_size > 0 and (tmp_path / "eot_sweep.png").stat().st_size > 0
