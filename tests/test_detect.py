"""ScoreNormDetector (threshold for a target FPR, report, AUC) and detection-driven two-level ADP noise."""

import math
import re

import numpy as np
import pytest
import torch
from art.defences.detector.evasion import EvasionDetector

from art_adp import ADPPurifier, NCSNv2, purify
from art_adp.detect import ScoreNormDetector, roc_auc, score_norms
from art_adp.attacks import EvadeDetectorLoss
from art_adp.detect import ScoreNormHead


def with_norms(norms) -> np.ndarray:
    """1×8×8 images with ‖x‖₂ = each value (a constant image c/8 has norm c): h = identity has known norms."""
    return (np.asarray(norms, dtype=np.float32)[:, None, None, None] / 8 * np.ones((1, 8, 8), np.float32))


@pytest.fixture(scope="module")
def tiny_score():
    torch.manual_seed(0)
    return NCSNv2(1, 8, ngf=4).eval()


def test_is_an_art_evasion_detector_and_reports_score_norms():
    det = ScoreNormDetector(torch.nn.Identity(), threshold=3.0, device_type="cpu")
    assert isinstance(det, EvasionDetector)
    report, flags = det.detect(with_norms([1.0, 2.9, 3.1, 7.5]))
    np.testing.assert_allclose(report["score_norms"], [1.0, 2.9, 3.1, 7.5], rtol=1e-6)
    assert report["threshold"] == 3.0
    np.testing.assert_array_equal(flags, [False, False, True, True])
    np.testing.assert_array_equal(det.flag(torch.from_numpy(with_norms([1.0, 7.5]))).numpy(), [False, True])
    assert det.get_params()["threshold"] == 3.0


@pytest.mark.parametrize("n, fpr, flagged", [(200, 0.05, 10), (200, 0.123, 24), (37, 0.05, 1), (10, 0.01, 0)])
def test_fit_flags_at_most_fpr_of_the_clean_data(n, fpr, flagged):
    norms = np.random.default_rng(n).uniform(0.5, 7.5, n)
    det = ScoreNormDetector(torch.nn.Identity(), device_type="cpu")
    det.fit(with_norms(norms), fpr=fpr)
    _, flags = det.detect(with_norms(norms))
    assert flags.sum() == flagged == math.floor(n * fpr)


def test_fitted_threshold_achieves_the_fpr_on_fresh_clean_data():
    rng = np.random.default_rng(1)
    det = ScoreNormDetector(torch.nn.Identity(), device_type="cpu")
    det.fit(with_norms(rng.gamma(4.0, 0.5, 4000)), fpr=0.05)
    _, flags = det.detect(with_norms(rng.gamma(4.0, 0.5, 8000)))
    assert abs(flags.mean() - 0.05) < 4 * math.sqrt(0.05 * 0.95 / 8000) + 0.005


def test_roc_auc_is_the_fraction_of_correctly_ordered_pairs():
    det = ScoreNormDetector(torch.nn.Identity(), device_type="cpu")
    assert roc_auc(det, with_norms([1.0, 3.0]), with_norms([2.0, 4.0])) == pytest.approx(0.75)
    assert roc_auc(det, with_norms([1.0, 2.0]), with_norms([3.0, 4.0])) == 1.0


def test_score_norms_match_the_network(tiny_score):
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        expected = tiny_score(x).flatten(1).norm(dim=1)
    torch.testing.assert_close(score_norms(tiny_score, x, batch_size=2), expected)


@pytest.mark.parametrize("kwargs, match", [
    ({"threshold": float("nan")}, "threshold must be a finite number or None"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"clip_values": (1.0, 0.0)}, "clip_values must be"),
])
def test_bad_detector_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScoreNormDetector(torch.nn.Identity(), **kwargs)


def test_detector_errors():
    det = ScoreNormDetector(torch.nn.Identity(), device_type="cpu")
    with pytest.raises(ValueError, match=r"no threshold yet: call fit\(x_clean, fpr=...\)"):
        det.detect(with_norms([1.0]))
    with pytest.raises(ValueError, match=re.escape("fpr must be a number in (0, 1), got 1.0.")):
        det.fit(with_norms([1.0, 2.0]), fpr=1.0)
    with pytest.raises(ValueError, match="scale the images"):
        det.fit(255 * with_norms([1.0, 2.0]))
    with pytest.raises(ValueError, match="score_model must be a torch.nn.Module"):
        ScoreNormDetector(lambda x: x)


def test_two_level_noise_sigma_for_flagged_beta_sigma_for_the_rest():
    # steps=0: the purified output is clip(x + σ_i ε); h = identity only drives the detector
    det = ScoreNormDetector(torch.nn.Identity(), threshold=4.0, device_type="cpu")
    x = torch.from_numpy(with_norms([2.0, 6.0, 3.0, 5.0]))  # flags: F T F T
    pur = ADPPurifier(torch.nn.Identity(), sigma=0.3, steps=0, detector=det, beta=0.2,
                      generator=torch.Generator().manual_seed(7), device_type="cpu")
    out = pur.forward(x)[0]
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    sig = torch.tensor([0.06, 0.3, 0.06, 0.3]).view(-1, 1, 1, 1)
    torch.testing.assert_close(out, (x + sig * eps).clamp(0, 1))
    pur.set_params(detector=None, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(pur.forward(x)[0], (x + 0.3 * eps).clamp(0, 1))  # same ε, σ everywhere


def test_per_sample_sigma_equal_values_equals_scalar_sigma(tiny_score):
    x = torch.rand(3, 1, 8, 8)
    a = purify(tiny_score, x, sigma=0.25, steps=3, generator=torch.Generator().manual_seed(1))
    b = purify(tiny_score, x, sigma=torch.full((3,), 0.25), steps=3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("sigma, match", [
    (torch.tensor([0.1, -0.1]), "sigma as a tensor must be 1-D, floating point, finite and >= 0"),
    (torch.tensor([[0.1, 0.1]]), "sigma as a tensor must be 1-D"),
    (torch.tensor([0.1, 0.1, 0.1]), "A per-sample sigma needs one value per input, got 3 for 2 inputs"),
])
def test_bad_per_sample_sigma(sigma, match):
    with pytest.raises(ValueError, match=match):
        purify(torch.nn.Identity(), torch.rand(2, 1, 8, 8), sigma=sigma, steps=0)


def test_full_gradient_flows_through_the_branch_each_sample_takes(tiny_score):
    x = torch.rand(4, 1, 8, 8) * 0.8 + 0.1
    norms = score_norms(tiny_score, x)
    det = ScoreNormDetector(tiny_score, threshold=float(norms.median()), device_type="cpu")
    flags = det.flag(x)
    assert 0 < flags.sum() < 4
    pur = ADPPurifier(tiny_score, sigma=0.25, steps=3, gradient="full", detector=det,
                      generator=torch.Generator().manual_seed(3), device_type="cpu")
    xg = x.clone().requires_grad_(True)
    (pur.forward(xg)[0] ** 2).sum().backward()
    sigma = torch.where(flags, 0.25, 0.05)
    xr = x.clone().requires_grad_(True)
    (purify(tiny_score, xr, sigma=sigma, steps=3, generator=torch.Generator().manual_seed(3)) ** 2).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)
    xs = x.clone().requires_grad_(True)
    (purify(tiny_score, xs, sigma=0.25, steps=3, generator=torch.Generator().manual_seed(3)) ** 2).sum().backward()
    assert not torch.allclose(xg.grad[~flags], xs.grad[~flags])  # low branch: not the σ-everywhere gradient
    torch.testing.assert_close(xg.grad[flags], xs.grad[flags])  # high branch: same as plain ADP


def test_purifier_detector_settings_are_validated():
    det = ScoreNormDetector(torch.nn.Identity(), threshold=1.0, device_type="cpu")
    with pytest.raises(ValueError, match=r"beta must be a number in \[0, 1\], got 1.5"):
        ADPPurifier(torch.nn.Identity(), detector=det, beta=1.5)
    with pytest.raises(ValueError, match="detector must be a ScoreNormDetector"):
        ADPPurifier(torch.nn.Identity(), detector="yes")
    pur = ADPPurifier(torch.nn.Identity(), detector=ScoreNormDetector(torch.nn.Identity(), device_type="cpu"))
    with pytest.raises(ValueError, match="no threshold yet"):
        pur.forward(torch.rand(2, 1, 8, 8))


def test_clip_inputs_accepts_noisy_inputs_that_purify_would_refuse():
    x = torch.tensor([-0.5, 0.3, 1.7]).view(3, 1, 1, 1).expand(3, 1, 8, 8).contiguous()
    with pytest.raises(ValueError, match="outside clip_values"):
        ADPPurifier(torch.nn.Identity(), sigma=0.0, steps=0).forward(x)
    out = ADPPurifier(torch.nn.Identity(), sigma=0.0, steps=0, clip_inputs=True).forward(x)[0]
    torch.testing.assert_close(out, x.clamp(0, 1))
    with pytest.raises(ValueError, match="NaN or Inf"):
        ADPPurifier(torch.nn.Identity(), sigma=0.0, steps=0, clip_inputs=True).forward(x * float("inf"))


def test_detector_aware_loss_rewards_a_low_score_norm():
    det = ScoreNormDetector(torch.nn.Identity(), threshold=4.0, device_type="cpu")
    head = ScoreNormHead(torch.nn.Flatten(), det, margin=0.5)  # offset 2.0
    x = torch.from_numpy(with_norms([3.0])).requires_grad_(True)
    out = head(x)
    assert out.shape == (1, 65) and out[0, -1].item() == pytest.approx(1.0, rel=1e-5)
    loss = EvadeDetectorLoss(kappa=2.0)(out, torch.tensor([0]))
    expected = torch.nn.functional.cross_entropy(out[:, :-1], torch.tensor([0])) - 2.0 * 1.0
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    torch.autograd.grad(loss, x)  # differentiable in x


def test_detect_demo_runs_every_attack_and_writes_its_outputs(tmp_path, tiny_score):
    from art_adp.apps.detect_demo import DetectConfig, run_detect_demo
    from art_adp.models import DigitsCNN

    torch.manual_seed(2)
    config = DetectConfig(n_calibration=10, n_examples=3, max_iter=1, steps=1, ensemble_size=1, eot_samples=1, full_eot_samples=1,
                          auc_eps=(0.05,))
    classifier = DigitsCNN(nb_classes=10).eval()
    results = run_detect_demo(tmp_path, tiny_score, classifier, config=config, progress=False, device="cpu",
                              log=lambda line: None)
    assert {p.name for p in tmp_path.iterdir()} == {"detect.json", "detect.md", "score_norms.png"}
    assert len(results["accuracy"]) == 5 and all(len(row) == 2 for row in results["accuracy"].values())
    assert set(results["roc_auc_by_eps"]) == {"0.05", "0.175"}
    with pytest.raises(ValueError, match=r"Unknown attack\(s\) \['cw'\]"):
        run_detect_demo(tmp_path, tiny_score, DigitsCNN(nb_classes=10), config=DetectConfig(attacks=("cw",)),
                        device="cpu")
