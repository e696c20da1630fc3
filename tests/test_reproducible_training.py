"""The training commands seed the initial weights as well as the data order: the same command gives the same model,
whatever the process's global RNG held before (torch seeds it afresh in every interpreter)."""

import numpy as np
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
