"""σ schedules, the DSM loss, training (EMA, resume) and checkpoints."""

import math
import re

import numpy as np
import pytest
import torch
from scipy.stats import norm
from safetensors.torch import save_file

from art_adp import (
    NCSNv2,
    dsm_loss,
    geometric_sigmas,
    load_score_model,
    median_heuristic_sigma,
    recommend_sigmas,
    save_score_model,
    train_score_model,
)


def test_geometric_sigmas_values_and_errors():
    s = geometric_sigmas(1.0, 0.01, 3)
    assert torch.allclose(s, torch.tensor([1.0, 0.1, 0.01]))
    with pytest.raises(ValueError, match=re.escape("Need 0 < sigma_end < sigma_begin, got sigma_begin=0.1, sigma_end=1.")):
        geometric_sigmas(0.1, 1, 5)
    with pytest.raises(ValueError, match=re.escape("num must be an integer >= 2, got 1.")):
        geometric_sigmas(1, 0.1, 1)


def test_median_heuristic_by_hand():
    # Three points in D = 4: distances 2 (a-b), 4 (a-c), 2·√5 (b-c); the median is 4, σ = 4/√4 = 2.
    x = np.zeros((3, 1, 2, 2), dtype=np.float32)
    x[1, 0, 0, 0] = 2
    x[2, 0, 1, 1] = 4
    assert median_heuristic_sigma(x) == pytest.approx(2.0)


def test_recommend_sigmas_follows_techniques_1_and_2():
    rng = np.random.default_rng(0)
    x = rng.random((50, 1, 8, 8)).astype(np.float32)
    flat = x.reshape(50, -1).astype(np.float64)
    max_dist = max(np.linalg.norm(a - b) for a in flat for b in flat)
    s = recommend_sigmas(x, sigma_end=0.01)
    assert s[0].item() == pytest.approx(max_dist, rel=1e-5)  # Technique 1
    assert s[-1].item() == pytest.approx(0.01, rel=1e-5)
    # Technique 2: the ratio solves Φ(√(2D)(γ−1)+3γ) − Φ(√(2D)(γ−1)−3γ) = 0.5; rounding L up makes γ a bit smaller.
    gamma = (s[0] / s[1]).item()
    a = math.sqrt(2 * 64) * (gamma - 1)
    overlap = norm.cdf(a + 3 * gamma) - norm.cdf(a - 3 * gamma)
    assert 0.5 <= overlap < 0.56
    assert torch.all(s[:-1] > s[1:])


def test_dsm_loss_is_zero_for_the_optimal_denoiser_and_half_d_for_zero():
    # Data = one point x; at a single level σ the optimal h is −(x̃ − x)/σ = −z, so the loss vanishes.
    x = torch.rand(64, 1, 4, 4)
    sigma = 0.3
    optimal = lambda xt: -(xt - x) / sigma  # noqa: E731
    assert dsm_loss(optimal, x, torch.tensor([sigma])).item() == pytest.approx(0.0, abs=1e-9)
    # h = 0: loss = ½ E‖z‖² = D/2 = 8 (within sampling error for 64 × 16 normals).
    zero = dsm_loss(torch.zeros_like, x, torch.tensor([0.1, 1.0]), generator=torch.Generator().manual_seed(0))
    assert zero.item() == pytest.approx(8.0, rel=0.1)


def test_dsm_loss_matches_a_hand_computation_with_the_same_draws():
    x = torch.rand(5, 1, 3, 3)
    sigmas = torch.tensor([1.0, 0.5, 0.1])
    h = lambda z: 0.3 * z - 0.1  # noqa: E731
    loss = dsm_loss(h, x, sigmas, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(3, (5,), generator=g)
    z = torch.randn(x.shape, generator=g)
    xt = x + sigmas[idx].view(-1, 1, 1, 1) * z
    expected = 0.5 * ((h(xt) + z) ** 2).flatten(1).sum(1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_ema_is_kept_returned_and_differs_from_raw(tiny):
    x, sigmas = tiny
    torch.manual_seed(0)
    model = NCSNv2(1, 8, ngf=4)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ema = train_score_model(model, x, sigmas, 1, batch_size=8, seed=0, progress=False)
    d = 1 / 10  # the warm-up decay at the first step: min(0.999, (1 + 0)/(10 + 0))
    for k, v in model.state_dict().items():
        assert torch.allclose(ema.state_dict()[k], d * init[k] + (1 - d) * v, atol=1e-6), k
    assert not ema.training and ema.training_info["step"] == 1
    assert any(not torch.equal(ema.state_dict()[k], v) for k, v in model.state_dict().items())


def test_resume_continues_step_count_ema_and_rng_exactly(tiny, tmp_path):
    x, sigmas = tiny
    path = tmp_path / "score.safetensors"
    torch.manual_seed(0)
    a = NCSNv2(1, 8, ngf=4)
    b = NCSNv2(1, 8, ngf=4)
    b.load_state_dict(a.state_dict())
    straight = train_score_model(a, x, sigmas, 6, batch_size=8, seed=1, progress=False)
    train_score_model(b, x, sigmas, 3, batch_size=8, seed=1, progress=False, checkpoint_path=path)
    assert load_score_model(path).training_info["step"] == 3
    fresh = NCSNv2(1, 8, ngf=4)  # other weights and seed: everything must come from the checkpoint
    resumed = train_score_model(fresh, x, sigmas, 6, batch_size=8, seed=999, progress=False, checkpoint_path=path)
    assert resumed.training_info["step"] == 6
    for k, v in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k  # EMA
    for k, v in a.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k  # raw weights
    assert load_score_model(path).training_info["step"] == 6


def test_resume_refuses_another_architecture(tiny, tmp_path):
    x, sigmas = tiny
    path = tmp_path / "s.safetensors"
    train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 1, batch_size=4, seed=0, progress=False, checkpoint_path=path)
    with pytest.raises(ValueError, match=r"Cannot resume from .*: it holds NCSNv2\(\{'in_channels': 1, 'image_size': 8, 'ngf': 4\}\)"):
        train_score_model(NCSNv2(1, 8, ngf=6), x, sigmas, 2, progress=False, checkpoint_path=path)


def test_training_reduces_the_dsm_loss(tiny):
    x, sigmas = tiny
    torch.manual_seed(0)
    model = NCSNv2(1, 8, ngf=8)
    g = torch.Generator().manual_seed(5)
    before = dsm_loss(model.eval(), x, sigmas, generator=g).item()
    ema = train_score_model(model, x, sigmas, 40, batch_size=20, seed=0, progress=False)
    after = dsm_loss(ema, x, sigmas, generator=torch.Generator().manual_seed(5)).item()
    assert after < 0.6 * before


@pytest.mark.parametrize("kwargs, message", [
    ({"iterations": -1}, "iterations must be a non-negative integer, got -1."),
    ({"batch_size": 0}, "batch_size must be a positive integer, got 0."),
    ({"ema_decay": 1.0}, "ema_decay must lie in [0, 1), got 1.0."),
])
def test_training_argument_errors(tiny, kwargs, message):
    x, sigmas = tiny
    args = {"iterations": 1, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, progress=False, **args)


def test_training_refuses_0_255_images(tiny):
    _, sigmas = tiny
    with pytest.raises(ValueError, match=re.escape("x_train must be finite and lie in [0, 1] (scale 0-255 images by 1/255).")):
        train_score_model(NCSNv2(1, 8, ngf=4), torch.full((4, 1, 8, 8), 255.0), sigmas, 1, progress=False)


def test_save_load_is_bit_identical(tmp_path):
    model = NCSNv2(1, 8, ngf=4)
    path = tmp_path / "m.safetensors"
    save_score_model(model, path, sigmas=[1.0, 0.1], step=7)
    loaded = load_score_model(path)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(loaded(x), model.eval()(x))
    assert not loaded.training
    assert loaded.training_info == {"sigmas": [1.0, 0.1], "step": 7, "clip_noise": False}
    assert loaded.config == model.config


def test_malicious_pickle_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    torch.save({"weights": Evil()}, path)  # a pickle-based checkpoint that creates `marker` when unpickled
    with pytest.raises(ValueError, match=r"is not a safetensors file .*never unpickles files"):
        load_score_model(path)
    assert not marker.exists()


def test_foreign_safetensors_and_wrong_shapes_are_refused(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(ValueError, match="is a safetensors file but not an art-adp checkpoint"):
        load_score_model(plain)
    path = tmp_path / "m.safetensors"
    save_score_model(NCSNv2(1, 8, ngf=4), path)
    from art_adp.serialization import read_checkpoint, write_checkpoint

    tensors, header = read_checkpoint(path)
    key = next(iter(tensors))
    tensors[key] = torch.zeros(3, 3, 3)
    write_checkpoint(path, tensors, header)
    with pytest.raises(ValueError, match=re.escape(f"wrong shapes ['{key}: (3, 3, 3) !=")):
        load_score_model(path)
    header["architecture"] = "Evil"
    write_checkpoint(path, tensors, header)
    with pytest.raises(ValueError, match=re.escape("names an unknown architecture 'Evil'; known: ['DenoiserUNet', 'DiffusersScore', 'FFDNet', 'NCSNv2']")):
        load_score_model(path)


def test_training_options_are_keyword_only_and_declared_once(tiny):
    import inspect

    from art_adp.score.train import TRAIN_DEFAULTS, TRAIN_OPTIONS

    x, sigmas = tiny
    with pytest.raises(TypeError, match="takes 4 positional arguments but 5 were given"):
        train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 1, 8)  # batch_size by position
    parameters = inspect.signature(train_score_model).parameters
    assert [p.name for p in parameters.values() if p.kind is p.KEYWORD_ONLY] == list(TRAIN_OPTIONS)
    assert all(parameters[name].default == getattr(TRAIN_DEFAULTS, name) for name in TRAIN_OPTIONS)


def test_dsm_loss_on_clipped_noise_targets_the_clipped_input():
    """clip=(0, 1): the network sees clip(x + σz) and its target is −(clip(x + σz) − x)/σ, by hand on the same draws;
    the denoiser that returns x exactly has zero loss on either form."""
    x = torch.rand(6, 1, 3, 3)
    sigmas = torch.tensor([0.5, 0.2])
    h = lambda xt: 0.3 * xt - 0.1  # noqa: E731
    loss = dsm_loss(h, x, sigmas, generator=torch.Generator().manual_seed(2), clip=(0.0, 1.0))
    g = torch.Generator().manual_seed(2)
    sigma = sigmas[torch.randint(2, (6,), generator=g)].view(-1, 1, 1, 1)
    xt = (x + sigma * torch.randn(x.shape, generator=g)).clamp(0, 1)
    expected = 0.5 * ((h(xt) + (xt - x) / sigma) ** 2).flatten(1).sum(1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    oracle = lambda xt, level: x  # noqa: E731  # D(x̃, σ) = x
    for clip in (None, (0.0, 1.0)):
        assert dsm_loss(oracle, x, sigmas, denoiser=True, clip=clip).item() == pytest.approx(0.0, abs=1e-9)
