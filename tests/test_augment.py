"""Augmented DSM (the ADP paper's DCT and AugMix training): each augmentation against its definition on a
hand-made image, the loss against its formula, and the training option."""

import re

import numpy as np
import pytest
import scipy.fft
import torch

from art_adp.score import NCSNv2, dsm_loss, train_score_model
from art_adp.score.augment import augment_targets, augmix, dct_drop, dct_matrix


def test_dct_matrix_is_the_orthonormal_dct_ii():
    d = dct_matrix(8)
    torch.testing.assert_close(d @ d.T, torch.eye(8, dtype=torch.float64))
    x = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    np.testing.assert_allclose((d @ x @ d.T).numpy(), scipy.fft.dctn(x.numpy(), axes=(2, 3), norm="ortho"), atol=1e-12)


def test_dct_drop_removes_the_lowest_energy_coefficients_up_to_five_percent():
    # Coefficient energies 100, 4, 2.25, 1, 0.25, 0.09 and ten zeros: total 107.59, 5 % = 5.38. Ascending, the
    # cumulative sums are 0 (the zeros), 0.09, 0.34, 1.34, 3.59, 7.59: everything up to the 2.25 coefficient goes
    # (3.59 <= 5.38), the 4 and the 100 stay.
    coef = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    coef[0, 0, 0, 0], coef[0, 0, 0, 1], coef[0, 0, 1, 0], coef[0, 0, 1, 1] = 10, 2, 1.5, 1
    coef[0, 0, 2, 2], coef[0, 0, 3, 3] = 0.5, 0.3
    d = dct_matrix(4)
    x = d.T @ coef @ d
    kept = torch.zeros_like(coef)
    kept[0, 0, 0, 0], kept[0, 0, 0, 1] = 10, 2
    torch.testing.assert_close(dct_drop(x), d.T @ kept @ d)
    removed = ((dct_drop(x) - x) ** 2).sum() / (x**2).sum()
    assert removed.item() == pytest.approx(3.59 / 107.59)
    torch.testing.assert_close(dct_drop(x, energy=0.0), x)
    with pytest.raises(ValueError, match=re.escape("energy must lie in [0, 1), got 1.0.")):
        dct_drop(x, energy=1.0)


def test_augmix_is_the_mixture_of_its_definition():
    # With the single deterministic operation autocontrast every chain gives the same image A(x), and since the
    # Dirichlet weights sum to 1, x_aug = m·x + (1 − m)·A(x) with m the Beta draw that follows the Dirichlet draw.
    # Autocontrast of {64, 128, 192} stretches to {0, 127, 255} (PIL: int(v·255/128 − 127.5)).
    x = np.full((1, 4, 4), 128 / 255, dtype=np.float32)
    x[0, 0], x[0, 3] = 64 / 255, 192 / 255
    a = np.full((1, 4, 4), 127 / 255)
    a[0, 0], a[0, 3] = 0.0, 1.0
    replay = np.random.default_rng(11)
    replay.dirichlet([1.0] * 3)
    m = replay.beta(1.0, 1.0)
    out = augmix(x, np.random.default_rng(11), depth=1, ops=("autocontrast",))
    np.testing.assert_allclose(out, m * x + (1 - m) * a, atol=1e-6)
    assert out.shape == x.shape and out.dtype == np.float32


def test_augmix_full_op_set_stays_in_range_and_is_seeded():
    x = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    a, b = augmix(x, np.random.default_rng(3)), augmix(x, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert a.shape == x.shape and 0 <= a.min() and a.max() <= 1 and not np.allclose(a, x)


def test_augment_targets_dct_target_is_x_and_augmix_target_is_the_midpoint():
    x = torch.rand(4, 1, 8, 8)
    gen = torch.Generator().manual_seed(0)
    dct = augment_targets(x, "dct", gen)
    assert dct["target"] is x
    torch.testing.assert_close(dct["center"], dct_drop(x))
    mix = augment_targets(x, "augmix", gen)
    torch.testing.assert_close(mix["target"], (x + mix["center"]) / 2)
    assert not torch.allclose(mix["center"], x)


def test_dsm_loss_with_center_and_target_is_the_papers_objective():
    # ½‖h(x̃) + (x̃ − target)/σ‖² with x̃ = center + σz: the paper's ‖x̃ + σ²s(x̃) − target‖²/(2σ⁴) weighted by σ².
    torch.manual_seed(0)
    x, fx = torch.rand(5, 1, 4, 4), torch.rand(5, 1, 4, 4)
    sigmas = torch.tensor([0.5, 0.1])
    h = lambda t: -0.3 * t  # noqa: E731
    target = (x + fx) / 2
    loss = dsm_loss(h, x, sigmas, generator=torch.Generator().manual_seed(1), center=fx, target=target)
    gen = torch.Generator().manual_seed(1)
    sigma = sigmas[torch.randint(2, (5,), generator=gen)].view(-1, 1, 1, 1)
    z = torch.randn(x.shape, generator=gen)
    xt = fx + sigma * z
    expected = 0.5 * (h(xt) + (xt - target) / sigma).flatten(1).pow(2).sum(1).mean()
    torch.testing.assert_close(loss, expected)
    plain = dsm_loss(h, x, sigmas, generator=torch.Generator().manual_seed(1))  # unchanged: ½‖h(x + σz) + z‖²
    assert plain.item() == (0.5 * (h(x + sigma * z) + z).flatten(1).pow(2).sum(1).mean()).item()


@pytest.mark.parametrize("augment", ["dct", "augmix"])
def test_train_score_model_with_augment_and_resume_guard(tmp_path, augment):
    x = np.random.default_rng(0).random((16, 1, 8, 8)).astype(np.float32)
    path = tmp_path / "s.safetensors"
    torch.manual_seed(0)
    ema = train_score_model(NCSNv2(1, 8, ngf=4), x, [1.0, 0.1], 2, batch_size=4, checkpoint_path=path, seed=0,
                            progress=False, augment=augment)
    assert ema.training_info["step"] == 2
    with pytest.raises(ValueError, match=re.escape(f"Cannot resume from {path}: it was trained with "
                                                   f"augment={augment!r}, not None.")):
        train_score_model(NCSNv2(1, 8, ngf=4), x, [1.0, 0.1], 3, batch_size=4, checkpoint_path=path, progress=False)
    with pytest.raises(ValueError, match=re.escape("augment must be None, 'dct' or 'augmix', got 'mixup'.")):
        train_score_model(NCSNv2(1, 8, ngf=4), x, [1.0, 0.1], 1, progress=False, augment="mixup")
