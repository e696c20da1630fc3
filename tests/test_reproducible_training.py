"""The training commands seed the initial weights as well as the data order: the same command gives the same model,
whatever the process's global RNG held before (torch seeds it afresh in every interpreter)."""

import numpy as np
import pytest
import torch

from art_adp.runs.provenance import weights_sha256


def test_train_denoiser_gives_the_same_weights_twice(tmp_path):
    from art_adp.apps.train_denoiser import train_denoiser
    from art_adp.score import load_score_model

    x = np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32)
    kw = dict(minutes=1e-6, milestone=2, batch_size=4, channels=(4, 4), n_test=4, precision="fp32", progress=False)
    hashes = []
    for run, global_seed in (("a", 1), ("b", 2)):  # a different global RNG before each, as two processes have
        torch.manual_seed(global_seed)
        train_denoiser(x, x, tmp_path / run, **kw)
        hashes.append(weights_sha256(load_score_model(tmp_path / run / "denoiser.safetensors")))
    assert hashes[0] == hashes[1]
    train_denoiser(x, x, tmp_path / "c", **kw, seed=1)
    assert weights_sha256(load_score_model(tmp_path / "c" / "denoiser.safetensors")) != hashes[0]  # the seed decides


def test_the_demo_trains_the_same_models_twice(tmp_path):
    from art_adp.apps.demo import DemoConfig, _models
    from art_adp.data import load_digits

    c = DemoConfig(score_iterations=2, classifier_epochs=1)
    data = load_digits(seed=c.seed)
    hashes = []
    for run, global_seed in (("a", 1), ("b", 2)):
        torch.manual_seed(global_seed)
        (tmp_path / run).mkdir()
        score, classifier = _models(data, c, tmp_path / run, torch.device("cpu"), progress=False)
        hashes.append((weights_sha256(score), weights_sha256(classifier)))
    assert hashes[0] == hashes[1]


def test_the_linear_yardstick_is_the_wiener_filters_mse_on_gaussian_images():
    """On Gaussian images the Wiener filter is the MMSE denoiser: its per-pixel MSE at level σ is
    (1/d) Σ λ σ² / (λ + σ²) over the covariance's eigenvalues λ."""
    from art_adp.apps.train_denoiser import linear_denoising_mse

    g = torch.Generator().manual_seed(0)
    mix = torch.randn(4, 4, generator=g) * 0.1
    cov = mix @ mix.T
    sample = lambda n: (0.5 + torch.randn(n, 4, generator=g) @ mix.T).view(n, 1, 2, 2).numpy()  # noqa: E731
    got = linear_denoising_mse(sample(20000), sample(4000), (0.05, 0.2), seed=3)
    values = torch.linalg.eigvalsh(cov.double())
    for level in (0.05, 0.2):
        expected = float((values * level**2 / (values + level**2)).mean())
        assert got[f"{level:g}"] == pytest.approx(expected, rel=0.05)
        assert got[f"{level:g}"] < level**2  # better than the noisy input
