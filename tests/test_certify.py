"""certify (Cohen et al.'s CERTIFY), the paper's approximate variant, and ADP smoothing inside ART's
PyTorchRandomizedSmoothing."""

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binomtest, chi2_contingency, norm

from art_adp import ADPPurifier, NCSNv2
from art_adp.apps.certify_run import CertifyConfig, run_certify
from art_adp.certification import (Certificate, _counts, adp_base_classifier, approximate_radius, certified_accuracy,
                             certify, certify_approximate)

SIGMA = 0.25


class HalfSpace(torch.nn.Module):
    """Class 1 iff w·x > b, with ‖w‖ = 1: the smoothed classifier's p_A is Φ(|w·x − b| / σ) and its exact
    certified radius σΦ⁻¹(p_A) = |w·x − b|, the distance to the hyperplane."""

    def forward(self, x):
        s = x.flatten(1).sum(1) / 8 - 4.0  # w = ones(64)/8, b = 4
        return torch.stack([-s, s], 1)


class Constant(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.one_hot(torch.full((len(x),), 3), 5).float()


def at_distance(d) -> torch.Tensor:
    """Inputs 1×8×8 at signed distance d from the half-space's boundary."""
    d = torch.as_tensor(d, dtype=torch.float32)
    return (0.5 + d / 8).view(-1, 1, 1, 1).expand(-1, 1, 8, 8).contiguous()


def test_constant_base_classifier_gives_the_closed_form_radius():
    cert = certify(Constant(), torch.zeros(2, 1, 8, 8), sigma=0.5, n0=10, n=100, alpha=0.001, progress=False)
    expected = 0.5 * norm.ppf(0.001 ** (1 / 100))  # Clopper–Pearson lower bound for 100 of 100 is α^(1/n)
    np.testing.assert_array_equal(cert.prediction, [3, 3])
    np.testing.assert_allclose(cert.radius, [expected, expected], rtol=1e-9)
    np.testing.assert_array_equal(cert.counts[:, 3], [100, 100])
    assert not cert.approximate


@pytest.mark.parametrize("d", [0.1, 0.3, 0.6, -0.3])
def test_half_space_radius_matches_the_distance_within_the_confidence_bound(d):
    n, alpha = 4000, 0.001
    cert = certify(HalfSpace(), at_distance([d]), sigma=SIGMA, n0=100, n=n, alpha=alpha,
                   generator=torch.Generator().manual_seed(0), progress=False)
    assert cert.prediction[0] == (1 if d > 0 else 0)
    count = int(cert.counts[0, cert.prediction[0]])
    upper = binomtest(count, n).proportion_ci(1 - 2 * alpha, method="exact").high
    assert cert.radius[0] <= abs(d) <= SIGMA * norm.ppf(upper)  # the true radius lies in the confidence interval
    assert abs(d) - cert.radius[0] < 0.1 * SIGMA + 0.02


def test_abstains_on_the_boundary():
    cert = certify(HalfSpace(), at_distance([0.0, 0.0, 0.0]), sigma=SIGMA, n0=50, n=1000,
                   generator=torch.Generator().manual_seed(1), progress=False)
    np.testing.assert_array_equal(cert.prediction, [-1, -1, -1])
    np.testing.assert_array_equal(cert.radius, [0.0, 0.0, 0.0])
    assert (cert.p_a < 0.5).all()


def test_clopper_pearson_bound_covers_the_true_probability():
    # 300 independent repeats (fresh noise per input): P(p_A_lower > p_A) <= alpha, and the radius <= the distance.
    # n0 = 50 selects class 1 (p = 0.8) except with probability ~1e-5, so p_A is 0.8 for every repeat.
    p_a, alpha, reps = 0.8, 0.05, 300
    d = SIGMA * norm.ppf(p_a)
    cert = certify(HalfSpace(), at_distance([d] * reps), sigma=SIGMA, n0=50, n=50, alpha=alpha,
                   generator=torch.Generator().manual_seed(2), progress=False)
    assert set(cert.prediction) <= {-1, 1}
    slack = 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert np.mean(cert.p_a > p_a) <= alpha + slack
    assert np.mean(cert.radius > d + 1e-9) <= alpha + slack
    assert np.mean(cert.p_a > p_a) > 0 or np.mean(cert.p_a > 0.7) > 0.3  # not vacuous: bounds sit near p_A


def test_approximate_radius_is_the_two_class_formula():
    n, d = 20000, 0.3
    cert = certify_approximate(HalfSpace(), at_distance([d]), sigma=SIGMA, n=n,
                               generator=torch.Generator().manual_seed(3), progress=False)
    p_a = norm.cdf(d / SIGMA)
    sd = SIGMA * math.sqrt(p_a * (1 - p_a) / n) / norm.pdf(norm.ppf(p_a))  # delta method
    assert cert.approximate and cert.prediction[0] == 1
    assert abs(cert.radius[0] - d) < 5 * sd
    unanimous = certify_approximate(HalfSpace(), at_distance([5.0]), sigma=SIGMA, n=100, progress=False)
    assert unanimous.radius[0] == pytest.approx(SIGMA * norm.ppf(1 - 1 / 200))  # half-count clamp, not inf


def test_certified_accuracy_counts_correct_predictions_at_radius():
    cert = Certificate(np.array([1, 2, -1, 0]), np.array([0.5, 0.1, 0.0, 0.3]), np.zeros(4), np.zeros((4, 3)),
                       0.25, False)
    np.testing.assert_allclose(certified_accuracy(cert, [1, 2, 2, 1], [0.0, 0.1, 0.2, 0.6]), [0.5, 0.5, 0.25, 0.0])


@pytest.mark.parametrize("kwargs, match", [
    ({"n0": 200, "n": 100}, r"n0 \(samples to select the class, 200\) must not exceed n"),
    ({"alpha": 0.0}, re.escape("alpha must be a number in (0, 1), got 0.0.")),
    ({"alpha": 1.0}, re.escape("alpha must be a number in (0, 1), got 1.0.")),
    ({"sigma": 0.0}, "sigma must be a number > 0"),
    ({"sigma": -0.25}, "sigma must be a number > 0"),
    ({"n": 0}, "n must be an integer >= 1"),
    ({"batch_size": 2.5}, "batch_size must be an integer >= 1"),
])
def test_bad_inputs(kwargs, match):
    args = {"sigma": SIGMA, "n0": 10, "n": 100, **kwargs}
    with pytest.raises(ValueError, match=match):
        certify(HalfSpace(), at_distance([0.1]), progress=False, **args)


def test_adp_base_classifier_refuses_its_own_noise():
    with pytest.raises(ValueError, match="adp_base_classifier sets sigma itself"):
        adp_base_classifier(HalfSpace(), torch.nn.Identity(), sigma=0.25)


@pytest.fixture(scope="module")
def adp_models():
    torch.manual_seed(0)
    score = NCSNv2(1, 8, ngf=4).eval()
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()
    with torch.no_grad():
        classifier[1].weight.mul_(4.0)
    return score, classifier


@pytest.mark.filterwarnings("ignore::UserWarning:art.estimators.certification.randomized_smoothing.pytorch")
def test_art_randomized_smoothing_hosts_adp_as_a_denoiser(adp_models):
    from art.estimators.certification.randomized_smoothing import PyTorchRandomizedSmoothing

    score, classifier = adp_models
    sigma, n, steps = 0.5, 150, 2  # 2 purification steps keep the test fast; the pipeline is the same for any T
    rs = PyTorchRandomizedSmoothing(
        model=classifier, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
        clip_values=(0.0, 1.0), device_type="cpu", sample_size=n, scale=sigma,
        preprocessing_defences=[ADPPurifier(score, sigma=0.0, steps=steps, clip_inputs=True, device_type="cpu")])
    base = adp_base_classifier(classifier, score, steps=steps, device_type="cpu")
    x = torch.rand(3, 1, 8, 8)
    np.random.seed(0)  # ART's smoothing draws from numpy's global generator
    # same noise -> the same predictions: ART's pipeline and certify's base classifier are one function
    noisy = rs._noisy_samples(x[0].numpy(), n=64)
    art_pred = rs._predict_classifier(noisy, batch_size=64, training_mode=False).argmax(1)
    with torch.no_grad():
        np.testing.assert_array_equal(art_pred, base(torch.from_numpy(noisy)).argmax(1).numpy())
    # fresh noise on each side: the class counts agree in distribution (chi-square homogeneity)
    for xi in x:
        art_counts = rs._prediction_counts(xi.numpy(), n=n, batch_size=n)
        with torch.no_grad():
            ours = _counts(base, xi, n, sigma, n, torch.Generator().manual_seed(4)).numpy()
        table = np.stack([art_counts, ours])
        table = table[:, table.sum(0) > 0]
        if table.shape[1] > 1:
            assert chi2_contingency(table).pvalue > 1e-3
        else:
            assert art_counts.argmax() == ours.argmax()
    # and the smoothed predictions agree with certify's where certify does not abstain
    cert = certify(base, x, sigma=sigma, n0=20, n=n, alpha=0.001, generator=torch.Generator().manual_seed(5),
                   progress=False)
    art_smoothed = rs.predict(x.numpy(), batch_size=n)
    for pred, row in zip(cert.prediction, art_smoothed):
        if pred >= 0 and row.sum() > 0:
            assert row.argmax() == pred


def test_approximate_radius_from_counts_by_hand():
    cert = approximate_radius(np.array([[70, 20, 10], [0, 100, 0]]), 0.5)
    np.testing.assert_array_equal(cert.prediction, [0, 1])
    np.testing.assert_allclose(cert.radius, [0.25 * (norm.ppf(0.7) - norm.ppf(0.2)),
                                             0.25 * (norm.ppf(0.995) - norm.ppf(0.005))])
    assert cert.approximate


def test_run_certify_resumes_an_interrupted_run(tmp_path):
    x, y = at_distance([0.1, 0.3, -0.2, 0.05]), np.array([1, 1, 0, 0])
    config = CertifyConfig(sigmas=(0.25,), n0=20, n=200, alpha=0.01, n_approximate=20, radii=(0.0, 0.1), seed=3)
    full = run_certify(tmp_path / "a", lambda s: HalfSpace(), x, y, config=config, progress=False)
    records = (tmp_path / "a" / "certify_sigma0.25.jsonl").read_text().splitlines()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "certify_sigma0.25.jsonl").write_text("\n".join(records[:2]) + "\n" + records[2][:30])
    resumed = run_certify(tmp_path / "b", lambda s: HalfSpace(), x, y, config=config, progress=False)
    assert resumed["table"] == full["table"]
    assert full["table"]["0.25"]["certify"][0] == 0.75  # input 3 (true class 0) is on the wrong side
    assert (tmp_path / "b" / "certify.md").read_text() == (tmp_path / "a" / "certify.md").read_text()
    assert (tmp_path / "b" / "certify.png").stat().st_size > 0


def test_cli_certify_writes_table_curve_and_records(tmp_path, adp_models):
    from art_adp import save_score_model
    from art_adp.apps.cli import main
    from art_adp.models import DigitsCNN, save_classifier

    score, _ = adp_models
    torch.manual_seed(1)
    save_score_model(score, tmp_path / "score.safetensors")
    save_classifier(DigitsCNN(nb_classes=10), tmp_path / "classifier.safetensors")
    run = tmp_path / "run"
    argv = ["certify", "--score", str(tmp_path / "score.safetensors"), "--classifier",
            str(tmp_path / "classifier.safetensors"), "--run-dir", str(run), "--sigmas", "0.25", "--n0", "5", "--n",
            "20", "--n-approximate", "5", "--n-examples", "2", "--steps", "1", "--device", "cpu", "--quiet"]
    assert main(argv) == 0
    assert {p.name for p in run.iterdir()} == {"certify.md", "certify.png", "certify.json", "certify_sigma0.25.jsonl",
                                               "settings.json"}
    assert len((run / "certify_sigma0.25.jsonl").read_text().splitlines()) == 2
    assert main(argv[:-3] + ["--n", "4", "--quiet"]) == 2  # n0 > n: a clear error, exit status 2
    assert main(argv[:-3] + ["--n", "30", "--quiet"]) == 2  # other settings than the records in run-dir


def test_run_certify_cuts_a_torn_last_line_before_appending_and_names_changed_settings(tmp_path):
    x, y = at_distance([0.1, 0.3, -0.2, 0.05]), np.array([1, 1, 0, 0])
    config = CertifyConfig(sigmas=(0.25,), n0=20, n=200, alpha=0.01, n_approximate=20, radii=(0.0, 0.1), seed=3)
    run_certify(tmp_path, lambda s: HalfSpace(), x[:2], y[:2], config=config, progress=False)
    path = tmp_path / "certify_sigma0.25.jsonl"
    whole = path.read_text()
    path.write_text(whole + '{"index": 2, "label": 0, "predic')  # a writer killed mid-line
    run_certify(tmp_path, lambda s: HalfSpace(), x, y, config=config, progress=False)
    lines = path.read_text().splitlines()
    assert path.read_text().startswith(whole) and path.read_text().endswith("\n")
    assert sorted(json.loads(line)["index"] for line in lines) == [0, 1, 2, 3]  # valid JSONL, nothing lost
    with pytest.raises(ValueError, match=r"holds records for the certificates made with other settings: n 200 \(now 300\)\."):
        run_certify(tmp_path, lambda s: HalfSpace(), x, y, config=replace(config, n=300), progress=False)
