"""``train-denoiser --augment`` and ``--init``: the perturbed input the denoiser trains on is N(F(x), σ²I), the
paper's augmented DSM (not x + σz), and a fine-tune starts from the given weights."""

import numpy as np
import pytest
import torch

from art_adp.apps.train_denoiser import denoising_mse, train_denoiser
from art_adp.score import DenoiserUNet
from art_adp.score.augment import dct_drop
from art_adp.serialization import module_sha256


def _symmetric_image(seed: int = 0) -> np.ndarray:
    """One 1×8×8 image equal to its mirror image, so the trainer's random flips leave it (and F of it) unchanged."""
    a = np.random.default_rng(seed).uniform(0.1, 0.9, size=(1, 8, 8))
    return ((a + a[..., ::-1]) / 2).astype(np.float32)


def _training_inputs(tmp_path, monkeypatch, augment):
    """The noisy inputs and levels the denoiser sees in training (forward passes with gradients) on copies of one
    image at one level σ = 0.05, and that image."""
    seen = []
    forward = DenoiserUNet.forward

    def spy(self, x, sigma):
        if torch.is_grad_enabled():
            seen.append((x.detach().clone(), torch.as_tensor(sigma).detach().clone()))
        return forward(self, x, sigma)

    monkeypatch.setattr(DenoiserUNet, "forward", spy)
    x = np.repeat(_symmetric_image()[None], 64, axis=0)
    train_denoiser(x, x[:4], tmp_path / str(augment), minutes=1e-9, milestone=8, batch_size=32, channels=(8, 16),
                   sigma_min=0.05, sigma_max=0.0500001, n_test=4, augment=augment, progress=False)  # fmt: skip
    noisy = torch.cat([n for n, _ in seen])
    levels = torch.cat([s.reshape(-1) for _, s in seen])
    assert torch.allclose(levels, torch.tensor(0.05)), levels.unique()
    return noisy, torch.from_numpy(x[:1])


def test_dct_augmented_input_is_centred_on_f_of_x(tmp_path, monkeypatch):
    noisy, x = _training_inputs(tmp_path, monkeypatch, "dct")
    fx = dct_drop(x)
    assert (fx - x).abs().max() > 0.02  # F moves the image: the two centres can be told apart at σ = 0.05
    about_fx, about_x = (noisy - fx) / 0.05, (noisy - x) / 0.05
    assert abs(float(about_fx.mean())) < 0.05 and abs(float(about_fx.std()) - 1) < 0.05  # x~ ~ N(F(x), σ²I)
    per_pixel_offset = about_x.mean(0)  # x + σz would centre this on 0 at every pixel
    assert torch.allclose(per_pixel_offset, ((fx - x) / 0.05)[0], atol=0.3)
    assert float(per_pixel_offset.abs().max()) > 0.4


def test_plain_input_is_x_plus_noise(tmp_path, monkeypatch):
    noisy, x = _training_inputs(tmp_path, monkeypatch, None)
    about_x = (noisy - x) / 0.05
    assert abs(float(about_x.std()) - 1) < 0.05 and float(about_x.mean(0).abs().max()) < 0.4


def test_augmix_input_differs_from_x_plus_noise(tmp_path, monkeypatch):
    noisy, x = _training_inputs(tmp_path, monkeypatch, "augmix")
    spread = ((noisy - x) / 0.05).std()
    assert float(spread) > 1.3  # AugMix's F(x) varies per draw: more than the noise's unit spread about x


def test_init_starts_from_the_given_weights_and_records_them(tmp_path):
    x = np.random.default_rng(1).uniform(0, 1, size=(16, 1, 8, 8)).astype(np.float32)
    first = train_denoiser(x, x[:4], tmp_path / "a", minutes=1e-9, milestone=1, batch_size=8, channels=(8, 16),
                           n_test=4, progress=False)  # fmt: skip
    from art_adp.score import load_score_model

    start = load_score_model(str(tmp_path / "a" / "denoiser.safetensors"))
    tuned = train_denoiser(x, x[:4], tmp_path / "b", minutes=1e-9, milestone=1, batch_size=8, channels=(8, 16),
                           n_test=4, progress=False, init=tmp_path / "a" / "denoiser.safetensors", lr=1e-12)  # fmt: skip
    assert tuned["settings"]["init_sha256"] == module_sha256(start)
    assert "init_sha256" not in first["settings"]
    # a step of lr 1e-12 (Adam's update: lr times a bounded ratio) leaves the weights where they started: the
    # fine-tune's curve is the start's own denoising error, not that of fresh weights
    own = denoising_mse(start, x[:4], seed=0)
    assert tuned["final"]["mse"] == pytest.approx(own, rel=1e-4)
    fresh = train_denoiser(x, x[:4], tmp_path / "d", minutes=1e-9, milestone=1, batch_size=8, channels=(8, 16),
                           n_test=4, progress=False, seed=1, lr=1e-12)["final"]["mse"]  # fmt: skip
    assert fresh != pytest.approx(own, rel=1e-2)
    with pytest.raises(ValueError, match=r"widths \[8, 16\] on 1 channels.*give --channels 8,16"):
        train_denoiser(x, x[:4], tmp_path / "c", minutes=1e-9, milestone=1, channels=(8, 8), n_test=4,
                       progress=False, init=tmp_path / "a" / "denoiser.safetensors")  # fmt: skip


def test_the_command_takes_the_training_levels():
    from art_adp.apps.cli import build_parser

    args = build_parser().parse_args(["train-denoiser", "--augment", "dct", "--sigma-min", "0.1", "--sigma-max", "0.5"])
    given = vars(args)
    assert (given["config.sigma_min"], given["config.sigma_max"], given["config.augment"]) == (0.1, 0.5, "dct")


def test_the_result_records_the_code_the_training_started_with(tmp_path, monkeypatch):
    from art_adp.apps import train_denoiser as module

    monkeypatch.setattr(module, "code_version", lambda: "art-adp 0.0 (c0ffee0)")  # the checkout at the start
    x = np.random.default_rng(1).uniform(0, 1, size=(16, 1, 8, 8)).astype(np.float32)
    out = module.train_denoiser(x, x[:4], tmp_path, minutes=1e-9, milestone=1, batch_size=8, channels=(8, 16),
                                n_test=4, progress=False)  # fmt: skip
    assert out["provenance"]["code_version"] == "art-adp 0.0 (c0ffee0)"  # not the checkout's at the end
