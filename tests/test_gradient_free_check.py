"""The gradient-free masking check of the strongest plan: where the defence clips its noisy input (the clamp of
x + σε passes no gradient for the clipped pixels), SPSA runs on the first ``masking_examples`` images, ``--estimate-only``
prices it, and the card reports it as run with the images only it broke; without the clamp the card says why it did not
run. The planted defence: 5-level rounding (zero gradient almost everywhere) before an ADPPurifier that clips its noisy
input (σ = 0, T = 0: the identity), so the gradient attacks are blind and SPSA's finite differences are not."""

from __future__ import annotations

import numpy as np

from art_adp import ADPPurifier
from art_adp.apps.evaluation import EvalConfig, evaluate
from art_adp.runs.records import read_jsonl
from evalsuite_models import tiny_models
from test_evaluate import QUIET, Rounding

#: The strongest plan at a test's size: one gradient attack, its sanity ladders at one point, SPSA's check cheap.
SMALL = dict(attacks=("full-pgd-eot",), eps=0.2, max_iter=3, eot_samples=1, n_examples=24, chunk_size=12,
             sanity_examples=12, sanity_iterations=(1.0,), sanity_eot_samples=(1,), ensemble_size=2, repeats=2,
             spsa_max_iter=20, spsa_samples_per_step=64, fixed_noise=False, compression_examples=0)  # fmt: skip


def _defence(score, clip_noise: bool) -> list:
    return [Rounding(), ADPPurifier(score, sigma=0.0, steps=0, clip_noise=clip_noise, device_type="cpu")]


def _broken(rows: list[dict]) -> set[int]:
    """The images any of whose R judgements got wrong."""
    return {r["index"] for r in rows if any(p != r["label"] for p in r["pred"])}


def test_the_card_runs_the_gradient_free_check_where_the_noise_is_clipped_and_names_the_images_only_spsa_broke(
    tmp_path,
):
    mlp, score, x, y = tiny_models()
    config = EvalConfig.preset("strongest", **SMALL)
    assert config.masking_examples == 16  # the plan's subset, not the test's
    lines: list[str] = []
    priced = evaluate(mlp, _defence(score, True), x, y, config=config, run_dir=tmp_path, progress=False,
                      log=lines.append, estimate_only=True)  # fmt: skip
    assert priced["gradient_free"] > 0 and priced["by_attack"]["spsa"] == priced["gradient_free"]
    assert "Gradient-free masking check (the defence clips its noisy input): spsa on the first 16 examples" in lines[0]

    result = evaluate(mlp, _defence(score, True), x, y, config=config, run_dir=tmp_path, **QUIET)
    records = list(read_jsonl(tmp_path / "records" / "rank-0.jsonl"))
    spsa = [r for r in records if r["setting"] == "gradient-free" and r["attack"] == "spsa"]
    assert sorted(r["index"] for r in spsa) == list(range(16))  # the first 16 of 24, and no SPSA row in the table
    assert "spsa" not in {r["attack"] for r in result["card"]}
    pgd = _broken([r for r in records if r["setting"] == "main" and r["attack"] == "full-pgd-eot"])
    only = sorted(_broken(spsa) - pgd)
    assert only, "the planted case: SPSA breaks images the blind gradient attack leaves"

    check = result["sanity"]["inputs"]["gradient_free"]
    assert (check["attack"], check["n"], check["only_broken"]) == ("spsa", 16, only)
    assert "gradient-free check" in result["sanity"]["ran"]
    assert not any("SPSA" in s or "gradient-free" in s for s in result["sanity"]["skipped"])
    assert any(f"the gradient-free SPSA breaks {len(only)} of 16 images no gradient attack broke" in w
               for w in result["sanity"]["warnings"])  # fmt: skip
    text = (tmp_path / "report.md").read_text()
    line = next(t for t in text.splitlines() if t.startswith("- gradient-free check"))
    assert "spsa (20 it of 0.05, 64 samples/step, best iterate) on the first 16 examples" in line
    assert line.endswith(f"broken by spsa and by no gradient attack: images {', '.join(map(str, only))}")
    assert "no sign of gradient masking" not in text


def test_without_the_clamp_the_card_says_why_the_gradient_free_check_did_not_run(tmp_path):
    mlp, score, x, y = tiny_models()
    config = EvalConfig.preset("strongest", **{**SMALL, "n_examples": 4, "chunk_size": 4, "sanity_examples": 4})
    result = evaluate(mlp, _defence(score, False), x, y, config=config, run_dir=tmp_path, **QUIET)
    assert "gradient-free" not in {k.split("/")[0] for k in result["results"]}
    assert "gradient_free" not in result["sanity"]["inputs"] and "gradient-free check" not in result["sanity"]["ran"]
    assert result["sanity"]["skipped"][-1:] == ["SPSA vs white-box: SPSA not among the attacks, and the gradient-free check "
                                           "did not run: the defence does not clip its noisy input (no clamp to mask "
                                           "the gradients)"]  # fmt: skip
    assert result["config"]["masking_examples"] == 16 and np.isfinite(result["results"]["main/clean"]["mean"])


def test_a_plan_told_to_skip_the_gradient_free_check_writes_its_card(tmp_path):
    """``--masking-examples 0`` over the strongest plan (its value before the check existed, which a card's config leaves
    out) is still named among the overrides."""
    mlp, score, x, y = tiny_models()
    config = EvalConfig.preset("strongest", **{**SMALL, "n_examples": 4, "chunk_size": 4, "sanity_examples": 4,
                                               "masking_examples": 0})  # fmt: skip
    result = evaluate(mlp, _defence(score, True), x, y, config=config, run_dir=tmp_path, **QUIET)
    assert result["overridden"]["masking_examples"] == 0 and "masking_examples" not in result["config"]
    assert "gradient-free" not in {k.split("/")[0] for k in result["results"]}
