"""``art-adp evaluate --purifier adp,reverse-diffusion,denoised-smoothing``: one card per family on the same examples,
attacks and budgets, and the side-by-side comparison; a tiny DenoiserUNet serves all three."""

import json

import pytest
import torch

from art_adp import save_score_model
from art_adp.apps.cli import main
from art_adp.apps.evaluation import compare
from art_adp.models import save_classifier
from art_adp.score.unet import DenoiserUNet
from evalsuite_models import tiny_models

ARGS = ["evaluate", "--dataset", "digits", "--preset", "smoke", "--n-examples", "4", "--chunk-size", "4",
        "--sigma", "0.25", "--steps", "2", "--attacks", "clf-pgd,bpda-eot,full-pgd-eot", "--eps", "0.2",
        "--max-iter", "1", "--eot-samples", "1", "--ensemble-size", "1", "--repeats", "2", "--no-sanity",
        "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    mlp, score, _, _ = tiny_models()
    torch.manual_seed(0)
    denoiser = DenoiserUNet(1, channels=(4, 8), emb_dim=8).eval()
    folder = tmp_path_factory.mktemp("models")
    save_score_model(denoiser, folder / "denoiser.safetensors")
    save_score_model(score, folder / "score.safetensors")
    save_classifier(mlp, folder / "classifier.safetensors")
    return folder


def test_three_families_are_evaluated_alike_and_compared(models, tmp_path):
    run = tmp_path / "run"
    argv = [*ARGS, "--score", str(models / "denoiser.safetensors"), "--classifier",
            str(models / "classifier.safetensors"), "--run-dir", str(run),
            "--purifier", "adp,reverse-diffusion,denoised-smoothing"]
    assert main(argv) == 0
    cards = {f: json.loads((run / f / "report.json").read_text()) for f in compare.FAMILIES}
    assert [c["purifier"] for c in cards.values()] == ["ADP", "Reverse diffusion", "Denoised smoothing"]
    for family, kind in zip(compare.FAMILIES, ["ADPPurifier", "ReverseDiffusionPurifier", "DenoisedSmoothingPurifier"]):
        settings = json.loads((run / family / "settings.json").read_text())
        defences = {d["type"] for s in settings.values() for d in s["defences"]}
        assert defences == {kind}  # each family's records know their defence (the baseline's: none)
    for card in cards.values():  # the same budgets and the same undefended classifier under the same attacks
        assert card["config"] == cards["adp"]["config"]
        assert [r["baselines"]["undefended"] for r in card["card"]] == [
            r["baselines"]["undefended"] for r in cards["adp"]["card"]]
    result = json.loads((run / "comparison.json").read_text())
    assert result["families"] == list(compare.FAMILIES)
    assert result["provenance"]["models"].keys() == {"classifier", "score"}
    assert {c["provenance"]["data_sha256"] for c in cards.values()} == {result["provenance"]["data_sha256"]}
    for family, card in cards.items():
        assert {a: s["mean"]["value"] for a, s in result["rows"][family]["attacks"].items()} == {
            r["attack"]: r["mean"]["value"] for r in card["card"]}
    text = (run / "comparison.md").read_text()
    assert "| Reverse diffusion | BPDA+EOT |" in text and "| Denoised smoothing | Natural (clean) |" in text
    assert "reverse diffusion to sigma* = 0.25, K = 2 ddim steps" in text
    assert "Compression rate" not in text  # a property of one purifier, left to its card


def test_a_score_model_at_one_level_serves_adp_only(models, tmp_path, capsys):
    argv = [*ARGS, "--score", str(models / "score.safetensors"), "--classifier", str(models / "classifier.safetensors"),
            "--run-dir", str(tmp_path / "run"), "--purifier", "reverse-diffusion"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "art-adp evaluate: error: --purifier reverse-diffusion needs a sigma-conditional denoiser (train one with "
        "`art-adp train-denoiser`) or a diffusion model (a diffusers folder) as --score; NCSNv2 is a score model at "
        "one level, for adp only.\n")
    assert main([*argv[:-1], "adp,diffpure"]) == 2
    assert capsys.readouterr().err == (
        "art-adp evaluate: error: purifier must name distinct families from adp, reverse-diffusion, "
        "denoised-smoothing, got adp,diffpure.\n")


def test_compare_refuses_cards_with_other_budgets():
    card = {"config": {"eps": 0.1}, "scale": "smoke", "shortfalls": {}, "card": [], "description": {}, "sanity": {},
            "seconds": {}}
    with pytest.raises(ValueError, match=r"^The card of 'b' differs from the others in 'config': compare like with "
                                         r"like\.$"):
        compare.compare({"a": card, "b": {**card, "config": {"eps": 0.2}}})


def test_purifier_and_sampler_are_fields_of_the_evaluation_settings():
    from art_adp.apps.cli import parse
    from art_adp.apps.evaluation import EvalConfig
    from art_adp.apps.evaluation.command import build_purifier

    command, config, _ = parse(["evaluate", "--preset", "smoke", "--purifier", "adp,reverse-diffusion",
                                "--sampler", "heun"])
    assert command.__name__ == "evaluate_command"
    assert (config.purifier, config.sampler) == (("adp", "reverse-diffusion"), "heun")
    assert {"purifier", "sampler"} <= set(config.overridden)  # the card's header says so
    default = parse(["evaluate"])[1]
    assert (default.purifier, default.sampler, default.overridden) == (("adp",), "ddim", ())
    torch.manual_seed(0)
    purifier = build_purifier("reverse-diffusion", DenoiserUNet(1, channels=(4, 8), emb_dim=8), sigma=0.3, steps=2,
                              sampler=config.sampler)
    assert (type(purifier).__name__, purifier.sampler, purifier.sigma, purifier.steps) == (
        "ReverseDiffusionPurifier", "heun", 0.3, 2)
    with pytest.raises(ValueError, match=r"^sampler must be one of 'ddim', 'ancestral', 'heun', got 'euler'\.$"):
        EvalConfig.preset("smoke", sampler="euler").check()
    with pytest.raises(ValueError, match=r"^purifier must name distinct families from adp, reverse-diffusion, "
                                         r"denoised-smoothing, got adp,adp\.$"):
        EvalConfig.preset("smoke", purifier=("adp", "adp")).check()
