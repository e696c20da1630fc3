"""End to end on real data: the demo's score model really denoises digits, and the demo pipeline runs."""

import json

import pytest
import torch

from art_adp import load_score_model, purify
from art_adp.data import load_digits
from art_adp.apps.demo import DemoConfig, run_demo


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo with its default training (score model and classifier) and a small attack budget."""
    run_dir = tmp_path_factory.mktemp("demo")
    lines = []
    results = run_demo(DemoConfig(n_examples=60, ensemble_size=3, max_iter=3), run_dir=run_dir, progress=False, log=lines.append)
    return run_dir, results, lines


def test_purification_moves_noisy_digits_closer_to_the_clean_ones(demo_run):
    run_dir, _, _ = demo_run
    score = load_score_model(run_dir / "score.safetensors")
    x = torch.from_numpy(load_digits().x_test)
    noisy = (x + 0.25 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    with torch.no_grad():
        purified = purify(score, x, generator=torch.Generator().manual_seed(0))  # the same noise, then 10 steps
    ratio = ((noisy - x) ** 2).mean() / ((purified - x) ** 2).mean()
    assert ratio >= 1.5, f"MSE(noisy)/MSE(purified) = {ratio:.3f}"


def test_demo_prints_the_table_and_writes_its_outputs(demo_run):
    run_dir, results, lines = demo_run
    text = "\n".join(lines)
    assert "Threat model: l_inf eps = " in text and "| Attack | Undefended | ADP |" in text
    for row in ("Clean", "Clf-PGD (preprocessor-blind)", "BPDA PGD"):
        assert f"| {row} |" in text
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["accuracy"] == results["accuracy"]
    assert (run_dir / "digits.png").stat().st_size > 1000
    acc = results["accuracy"]
    assert acc["Clean"]["undefended"] > 0.9 and acc["Clean"]["adp"] > 0.8
    # The attack works on the undefended classifier (a no-op attack would leave it near its clean accuracy).
    assert acc["Clf-PGD (preprocessor-blind)"]["undefended"] < acc["Clean"]["undefended"] - 0.3


def test_demo_reuses_its_trained_models(demo_run):
    run_dir, _, _ = demo_run
    before = (run_dir / "score.safetensors").stat().st_mtime_ns, (run_dir / "classifier.safetensors").stat().st_mtime_ns
    results = run_demo(DemoConfig(n_examples=10, ensemble_size=1, max_iter=1), run_dir=run_dir, progress=False, log=lambda s: None)
    assert results["seconds"]["training"] < 30
    assert (run_dir / "classifier.safetensors").stat().st_mtime_ns == before[1]
