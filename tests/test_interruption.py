"""A training killed with SIGKILL leaves a valid checkpoint, and re-running the same command resumes from it (end to
end: the CLI in its own interpreter, killed; marked ``e2e``, which CI runs after the suite); a train-denoiser run
interrupted before its first milestone resumes."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from art_adp import load_score_model
from art_adp.apps.cli import main

ARGS = ["train-score", "--iterations", "24", "--batch-size", "32", "--ngf", "8", "--sigma-begin", "1",
        "--sigma-end", "0.05", "--num-sigmas", "4", "--checkpoint-every", "4", "--seed", "3", "--device", "cpu",
        "--quiet"]


def step_of(path) -> int | None:
    try:
        return load_score_model(path).training_info["step"]
    except (FileNotFoundError, ValueError):
        return None


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_sigkill_mid_training_then_resume_equals_an_uninterrupted_run(tmp_path):
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    checkpoint = killed_dir / "score.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "art_adp", *ARGS, "--run-dir", str(killed_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while (step_of(checkpoint) or 0) < 8:
            assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no checkpoint appeared within 120 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = step_of(checkpoint)
    assert killed_at is not None and killed_at % 4 == 0 and killed_at < 24  # a whole checkpoint, mid-run

    torch.set_num_threads(1)
    main([*ARGS, "--run-dir", str(killed_dir)])  # the same command again: resumes
    main([*ARGS, "--run-dir", str(clean_dir)])
    resumed, clean = load_score_model(checkpoint), load_score_model(clean_dir / "score.safetensors")
    assert resumed.training_info["step"] == clean.training_info["step"] == 24
    for (name, a), (_, b) in zip(resumed.state_dict().items(), clean.state_dict().items()):
        assert torch.equal(a, b), name


def test_train_denoiser_interrupted_before_its_first_milestone_resumes(tmp_path, monkeypatch):
    """Ctrl-C before the first milestone leaves only an `interrupted` record; that record carries the run's settings,
    so the same command resumes (it once refused: "holds a run with other settings (None)") and a changed one is
    still refused."""
    import json

    import numpy as np

    from art_adp.apps import train_denoiser as td

    x = np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32)
    real = td.train_score_model

    def interrupted(model, x_train, sigmas, iterations, **kw):  # trains 2 steps, saves, then Ctrl-C
        real(model, x_train, sigmas, 2, **{**kw, "checkpoint_every": 1})
        raise KeyboardInterrupt

    kw = dict(minutes=1e-6, milestone=4, batch_size=4, channels=(4, 4), n_test=4, precision="fp32", progress=False)
    monkeypatch.setattr(td, "train_score_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        td.train_denoiser(x, x, tmp_path, **kw)
    first = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("interrupted"), r["settings"]["milestone"]) for r in first] == [(2, True, 4)]
    monkeypatch.setattr(td, "train_score_model", real)
    kw["minutes"] = first[0]["train_seconds"] / 60 + 1e-6  # one more stretch: to the first milestone
    result = td.train_denoiser(x, x, tmp_path, **kw)
    assert [r["step"] for r in result["curve"]] == [2, 4] and "mse" in result["curve"][-1]
    with pytest.raises(ValueError, match="holds a run with other settings"):
        td.train_denoiser(x, x, tmp_path, **{**kw, "lr": 1e-3})
