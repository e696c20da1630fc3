"""The demo pipeline on real data: at small training budgets in the suite (the table, its files, the attack, the
reuse of its models); at the demo's default training end to end (marked ``e2e``: CI runs it after the suite,
``python -m pytest -m e2e``), where its score model really denoises digits and ADP keeps the clean accuracy."""

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


@pytest.mark.e2e
def test_purification_moves_noisy_digits_closer_to_the_clean_ones(demo_run):
    run_dir, _, _ = demo_run
    score = load_score_model(run_dir / "score.safetensors")
    x = torch.from_numpy(load_digits().x_test)
    noisy = (x + 0.25 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    with torch.no_grad():
        purified = purify(score, x, generator=torch.Generator().manual_seed(0))  # the same noise, then 10 steps
    ratio = ((noisy - x) ** 2).mean() / ((purified - x) ** 2).mean()
    assert ratio >= 1.5, f"MSE(noisy)/MSE(purified) = {ratio:.3f}"


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_demo_reuses_its_trained_models(demo_run):
    run_dir, _, _ = demo_run
    before = (run_dir / "score.safetensors").stat().st_mtime_ns, (run_dir / "classifier.safetensors").stat().st_mtime_ns
    results = run_demo(DemoConfig(n_examples=10, ensemble_size=1, max_iter=1), run_dir=run_dir, progress=False, log=lambda s: None)
    assert results["seconds"]["training"] < 30
    assert (run_dir / "classifier.safetensors").stat().st_mtime_ns == before[1]


def test_demo_at_small_training_budgets_prints_the_table_writes_its_outputs_and_reuses_its_models(tmp_path):
    """The whole pipeline in seconds: 5 DSM steps and 5 classifier epochs (the score model's quality is the e2e
    tests' business; the classifier's, and the attack's effect on it, are checked here too)."""
    lines = []
    config = DemoConfig(score_iterations=5, classifier_epochs=5, n_examples=30, ensemble_size=2, max_iter=2)
    results = run_demo(config, run_dir=tmp_path, progress=False, log=lines.append)
    text = "\n".join(lines)
    assert "Threat model: l_inf eps = " in text and "| Attack | Undefended | ADP |" in text
    assert "score model NCSNv2(ngf=8), 5 DSM steps of 64" in text
    for row in ("Clean", "Clf-PGD (preprocessor-blind)", "BPDA PGD"):
        assert f"| {row} |" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["accuracy"] == results["accuracy"] and saved["n_examples"] == 30
    assert (tmp_path / "digits.png").stat().st_size > 1000
    acc = results["accuracy"]
    assert acc["Clean"]["undefended"] > 0.9
    assert acc["Clf-PGD (preprocessor-blind)"]["undefended"] < acc["Clean"]["undefended"] - 0.3
    models = [tmp_path / name for name in ("score.safetensors", "classifier.safetensors")]
    before = [p.stat().st_mtime_ns for p in models]
    config = DemoConfig(score_iterations=5, classifier_epochs=5, n_examples=10, ensemble_size=1, max_iter=1)
    again = run_demo(config, run_dir=tmp_path, progress=False, log=lambda s: None)
    assert again["seconds"]["training"] < 30 and again["n_examples"] == 10
    assert [p.stat().st_mtime_ns for p in models] == before
