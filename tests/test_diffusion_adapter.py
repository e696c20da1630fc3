"""Pretrained diffusion models as ADP's score model: known answers for each parameterisation, the noise-level
mapping against diffusers' own schedules, and a random-weight diffusers UNet through purification and attacks."""

import ast
import math
import pathlib
import re
import sys

import numpy as np
import pytest
import torch

from art_adp import ADPPurifier, DefendedModel, EDMScore, VPScore, from_diffusers, purify

RANGES = [(-1.0, 1.0), (0.0, 1.0)]


def linear_alphas_cumprod(n=1000, beta_start=1e-4, beta_end=0.02):
    """DDPM's linear schedule (Ho et al. 2020), written out here: ᾱ_t = Π_{s≤t} (1 − β_s), float64."""
    return torch.cumprod(1 - torch.linspace(beta_start, beta_end, n, dtype=torch.float64), 0)


def gaussian_data(generator):
    """A per-pixel Gaussian data distribution N(μ, diag(s²)) in [0, 1] pixels, and inputs x, all float64."""
    mu = 0.3 + 0.4 * torch.rand(1, 3, 4, 4, generator=generator, dtype=torch.float64)
    s = 0.05 + 0.2 * torch.rand(1, 3, 4, 4, generator=generator, dtype=torch.float64)
    x = torch.rand(5, 3, 4, 4, generator=generator, dtype=torch.float64)
    return mu, s, x


def exact_h(x, mu, s, sigma):
    """σ·∇ₓ log p_σ(x) for p_σ = N(μ, diag(s² + σ²)), by autograd through the log density (the known answer)."""
    x = x.clone().requires_grad_(True)
    log_p = torch.distributions.Normal(mu, (s**2 + sigma**2).sqrt()).log_prob(x).sum()
    (grad,) = torch.autograd.grad(log_p, x)
    return sigma * grad


class AnalyticVP:
    """
    The exact prediction of a VP network for data N(μ', diag(s'²)) on the network's scale (μ' = aμ + b, s' = a·s):
    x_t = √ᾱ x₀' + √(1−ᾱ) ε is Gaussian with mean √ᾱ μ' and variance ᾱ s'² + 1 − ᾱ, Cov(ε, x_t) = √(1−ᾱ), so

        ε*(x_t, t)  = √(1−ᾱ) (x_t − √ᾱ μ') / (ᾱ s'² + 1 − ᾱ)
        x₀*(x_t, t) = (x_t − √(1−ᾱ) ε*) / √ᾱ
        v*(x_t, t)  = √ᾱ ε* − √(1−ᾱ) x₀*
    """

    def __init__(self, alphas_cumprod, mu, s, data_range, prediction_type):
        a, b = data_range[1] - data_range[0], data_range[0]
        self.table, self.mu, self.s, self.kind = alphas_cumprod, a * mu + b, a * s, prediction_type
        self.calls = []

    def __call__(self, x_t, t):
        self.calls.append((x_t.detach().clone(), t.clone()))
        alpha = self.table[t].view(-1, 1, 1, 1).to(x_t)
        eps = (1 - alpha).sqrt() * (x_t - alpha.sqrt() * self.mu) / (alpha * self.s**2 + 1 - alpha)
        x0 = (x_t - (1 - alpha).sqrt() * eps) / alpha.sqrt()
        return {"epsilon": eps, "sample": x0, "v_prediction": alpha.sqrt() * eps - (1 - alpha).sqrt() * x0}[self.kind]


def nearest_step(table, level):
    """The step whose σ_t' = √((1−ᾱ_t)/ᾱ_t) is nearest to ``level`` in log, by a plain loop."""
    best, best_t = math.inf, -1
    for t, alpha in enumerate(table.tolist()):
        gap = abs(math.log(math.sqrt((1 - alpha) / alpha)) - math.log(level))
        if gap < best:
            best, best_t = gap, t
    return best_t


# -- known answers on Gaussian data -------------------------------------------------------------------------------


@pytest.mark.parametrize("data_range", RANGES)
@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
@pytest.mark.parametrize("sigma", [0.02, 0.25, 0.6])
def test_vp_adapter_gives_the_exact_score_of_gaussian_data(prediction_type, data_range, sigma):
    mu, s, x = gaussian_data(torch.Generator().manual_seed(1))
    table = linear_alphas_cumprod()
    model = AnalyticVP(table, mu, s, data_range, prediction_type)
    h = VPScore(model, table, prediction_type=prediction_type, data_range=data_range, sigma=sigma)
    a = data_range[1] - data_range[0]
    t = nearest_step(table, a * sigma)
    realised = math.sqrt((1 - table[t].item()) / table[t].item()) / a  # the step's level in [0, 1] pixels
    assert h.timestep == t
    assert h.sigma == pytest.approx(realised, rel=1e-12)
    # the nearest of 1000 levels, coarsest near t = 0: 0.02 → 0.0190 (t = 2) on a network of range (0, 1), 0.0201
    # (t = 8) on one of range (-1, 1)
    assert h.sigma == pytest.approx(sigma, rel=0.06)
    out = h(x)
    assert torch.allclose(out, exact_h(x, mu, s, realised), rtol=1e-9, atol=1e-12)
    # What the network saw: x_t = √ᾱ_t (a x + b) and t for every row.
    x_t, steps = model.calls[-1]
    assert torch.allclose(x_t, table[t].sqrt() * (a * x + data_range[0]), rtol=1e-12)
    assert steps.tolist() == [t] * len(x) and steps.dtype == torch.long


@pytest.mark.parametrize("data_range", RANGES)
@pytest.mark.parametrize("sigma", [0.01, 0.25, 2.0])
def test_edm_adapter_gives_the_exact_score_of_gaussian_data(data_range, sigma):
    mu, s, x = gaussian_data(torch.Generator().manual_seed(2))
    a, b = data_range[1] - data_range[0], data_range[0]
    seen = []

    def denoiser(x_model, level):  # D*(x', σ') = E[x₀' | x'] = μ' + s'²/(s'² + σ'²) (x' − μ')
        seen.append(level.clone())
        level = level.view(-1, 1, 1, 1)
        return (a * mu + b) + (a * s) ** 2 / ((a * s) ** 2 + level**2) * (x_model - (a * mu + b))

    h = EDMScore(denoiser, sigma=sigma, data_range=data_range)
    assert torch.allclose(h(x), exact_h(x, mu, s, sigma), rtol=1e-9, atol=1e-12)
    assert torch.allclose(seen[-1], torch.full((5,), a * sigma, dtype=torch.float64))  # σ' = a·σ


def test_vp_timestep_gives_that_steps_level_and_score():
    mu, s, x = gaussian_data(torch.Generator().manual_seed(3))
    table = linear_alphas_cumprod()
    h = VPScore(AnalyticVP(table, mu, s, (-1, 1), "epsilon"), table, prediction_type="epsilon",
                data_range=(-1, 1), timestep=300)
    sigma = math.sqrt((1 - table[300].item()) / table[300].item()) / 2
    assert h.timestep == 300 and h.sigma == pytest.approx(sigma, rel=1e-12)
    assert torch.allclose(h(x), exact_h(x, mu, s, sigma), rtol=1e-9, atol=1e-12)


def test_score_of_gaussian_data_is_minus_the_noise_not_a_scaled_copy():
    # The units: with [-1, 1] networks h is −ε̂, not −2ε̂ or −ε̂/2. A network predicting the true ε for an x' built
    # from known x₀' and ε gives h = −ε exactly, whatever data_range.
    g = torch.Generator().manual_seed(4)
    table = linear_alphas_cumprod()
    for lo, hi in RANGES:
        h = VPScore(lambda x_t, t: eps, table, prediction_type="epsilon", data_range=(lo, hi), sigma=0.1)
        eps = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
        assert torch.equal(h(torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64)), -eps)


# -- against diffusers' own tables and definitions ------------------------------------------------------------------


@pytest.fixture(scope="module")
def diffusers():
    return pytest.importorskip("diffusers")


def tiny_unet(diffusers, seed=0, **kwargs):
    torch.manual_seed(seed)
    config = dict(sample_size=8, in_channels=3, out_channels=3, block_out_channels=(8, 16), norm_num_groups=4,
                  layers_per_block=1, down_block_types=("DownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "UpBlock2D"), add_attention=False)
    config.update(kwargs)
    return diffusers.UNet2DModel(**config)


@pytest.mark.parametrize("beta_schedule", ["linear", "scaled_linear", "squaredcos_cap_v2"])
def test_noise_level_mapping_matches_diffusers_schedules(diffusers, beta_schedule):
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule=beta_schedule)
    table = scheduler.alphas_cumprod.double()
    unet = tiny_unet(diffusers)
    if beta_schedule == "linear":
        assert torch.allclose(table, linear_alphas_cumprod(), rtol=1e-5)  # diffusers' table is DDPM's schedule
    for t in (0, 1, 37, 144, 500, 998, 999):
        sigma = math.sqrt((1 - table[t].item()) / table[t].item()) / 2  # [-1, 1] network: σ' = 2σ
        from_sigma = from_diffusers(unet, scheduler, sigma=sigma)
        assert from_sigma.timestep == t  # t chosen for σ
        assert from_sigma.sigma == pytest.approx(sigma, rel=1e-12)
        assert from_diffusers(unet, scheduler, timestep=t).sigma == pytest.approx(sigma, rel=1e-12)  # σ recovered
    for sigma in (0.0123, 0.25, 0.5):
        assert from_diffusers(unet, scheduler, sigma=sigma).timestep == nearest_step(table, 2 * sigma)


def test_linear_ddpm_schedule_puts_sigma_quarter_at_step_144(diffusers):
    # σ = 0.25 in pixels is σ' = 0.5 on [-1, 1], i.e. ᾱ = 1/(1 + 0.25) = 0.8: between steps 144 and 145 of DDPM's
    # schedule, nearer 144.
    scheduler = diffusers.DDPMScheduler()
    h = from_diffusers(tiny_unet(diffusers), scheduler, sigma=0.25)
    assert h.timestep == 144 and h.prediction_type == "epsilon" and not h.learned_variance
    assert scheduler.alphas_cumprod[144] > 0.8 > scheduler.alphas_cumprod[145]
    assert h.sigma == pytest.approx(0.25, rel=2e-3)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
def test_each_prediction_type_of_an_oracle_network_gives_minus_the_noise(diffusers, prediction_type):
    # A network that knows x₀' and ε predicts them exactly, in diffusers' definitions (v from get_velocity).
    scheduler = diffusers.DDPMScheduler(prediction_type=prediction_type)
    g = torch.Generator().manual_seed(5)
    x0 = torch.rand(3, 3, 8, 8, generator=g) * 2 - 1
    eps = torch.randn(3, 3, 8, 8, generator=g)
    read = from_diffusers(tiny_unet(diffusers), scheduler, sigma=0.2)
    assert read.prediction_type == prediction_type
    t = torch.full((3,), read.timestep, dtype=torch.long)
    target = {"epsilon": eps, "sample": x0, "v_prediction": scheduler.get_velocity(x0, eps, t)}[prediction_type]
    h = VPScore(lambda x_t, steps: target, scheduler.alphas_cumprod, prediction_type=read.prediction_type,
                data_range=(-1, 1), timestep=read.timestep)  # the oracle in place of the UNet
    x = (x0 + 2 * h.sigma * eps + 1) / 2  # x' = x₀' + σ'ε with σ' = 2σ, back in [0, 1] pixels
    assert torch.allclose(h(x), -eps, atol=2e-5)


def test_learned_variance_uses_the_first_half_of_the_channels(diffusers):
    scheduler = diffusers.DDPMScheduler(variance_type="learned_range")
    unet = tiny_unet(diffusers, out_channels=6)
    h = from_diffusers(unet, scheduler, sigma=0.25)
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = -unet(math.sqrt(h.alpha_cumprod) * (2 * x - 1), h.timestep).sample[:, :3]
        assert h.learned_variance and torch.allclose(h(x), expected, atol=1e-6)


# -- a random-weight diffusers UNet through purification, BPDA, full gradients, ART and torchattacks ---------------


@pytest.fixture(scope="module")
def unet_score(diffusers):
    return from_diffusers(tiny_unet(diffusers), diffusers.DDPMScheduler(), sigma=0.25).requires_grad_(False)


def classifier():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))


def images(n=6, seed=8):
    g = torch.Generator().manual_seed(seed)
    return 0.3 + 0.4 * torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_purify_runs_with_the_unet_and_follows_h(unet_score):
    x, _ = images()
    out, info = purify(unet_score, x, sigma=0.0, steps=1, step_size=0.01, return_info=True)
    assert torch.allclose(out, (x + 0.01 * unet_score(x)).clamp(0, 1), atol=1e-6)  # one step of x + α h(x)
    out = purify(unet_score, x, steps=3, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    again = purify(unet_score, x, steps=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_full_gradient_through_the_unet_matches_finite_differences(diffusers):
    h = from_diffusers(tiny_unet(diffusers).double(), diffusers.DDPMScheduler(), sigma=0.25).requires_grad_(False)
    x, _ = images(2)
    x = x.double()
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(10), dtype=torch.float64)

    def loss(z):
        return (w * purify(h, z, sigma=0.05, steps=2, step_size=0.01, generator=torch.Generator().manual_seed(0))).sum()

    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(xg), xg)
    eta = 1e-5
    with torch.no_grad():
        numeric = (loss(x + eta * v) - loss(x - eta * v)) / (2 * eta)
    assert (grad * v).sum().item() == pytest.approx(numeric.item(), rel=1e-6)
    assert not torch.allclose(grad, w)  # the UNet's Jacobian is in it: not the straight-through gradient


@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_adp_purifier_gradients_with_the_unet(unet_score, gradient):
    from art.estimators.classification import PyTorchClassifier

    clf = classifier()
    x, y = images()
    purifier = ADPPurifier(unet_score, steps=2, gradient=gradient, device_type="cpu",
                           generator=torch.Generator().manual_seed(11))
    art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(3, 8, 8), nb_classes=10,
                            clip_values=(0.0, 1.0), device_type="cpu", preprocessing_defences=[purifier])
    grad = art.loss_gradient(x.numpy(), np.eye(10, dtype=np.float32)[y.numpy()])
    xg = x.clone().requires_grad_(gradient == "full")
    purified = purify(unet_score, xg, steps=2, generator=torch.Generator().manual_seed(11))
    if gradient == "bpda":  # the classifier's gradient at the purified point
        purified = purified.detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(clf(purified), y, reduction="mean")
    (expected,) = torch.autograd.grad(loss, purified if gradient == "bpda" else xg)
    assert np.allclose(grad, expected.numpy(), atol=1e-5)
    assert np.abs(grad).sum() > 0


def test_art_pgd_on_a_pytorch_classifier_with_the_unet(unet_score):
    from art.attacks.evasion import ProjectedGradientDescent
    from art.estimators.classification import PyTorchClassifier

    clf = classifier()
    x, y = images()
    purifier = ADPPurifier(unet_score, steps=2, device_type="cpu", generator=torch.Generator().manual_seed(12))
    art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(3, 8, 8), nb_classes=10,
                            clip_values=(0.0, 1.0), device_type="cpu", preprocessing_defences=[purifier])
    eps = 8 / 255
    x_adv = ProjectedGradientDescent(art, eps=eps, eps_step=2 / 255, max_iter=3, verbose=False).generate(
        x.numpy(), y=y.numpy()
    )
    gap = np.abs(x_adv - x.numpy()).max(axis=(1, 2, 3))
    assert np.all(gap <= eps + 1e-6) and np.all(gap > eps / 2)

    def loss(z):
        purifier.generator = torch.Generator().manual_seed(13)
        return torch.nn.functional.cross_entropy(torch.from_numpy(art.predict(z)), y).item()

    assert loss(x_adv) > loss(x.numpy())


def test_torchattacks_pgd_on_defended_model_with_the_unet(unet_score):
    torchattacks = pytest.importorskip("torchattacks")
    clf = classifier()
    x, y = images()
    model = DefendedModel(clf, ADPPurifier(unet_score, steps=2, device_type="cpu",
                                           generator=torch.Generator().manual_seed(14)), ensemble_size=2)
    eps = 8 / 255
    x_adv = torchattacks.PGD(model, eps=eps, alpha=2 / 255, steps=3, random_start=False)(x, y)
    gap = (x_adv - x).abs().amax(dim=(1, 2, 3))
    assert bool((gap <= eps + 1e-6).all()) and bool((gap > eps / 2).all())


def test_score_norm_detector_sees_the_unets_h(unet_score):
    from art_adp import ScoreNormDetector

    x, _ = images()
    detector = ScoreNormDetector(unet_score, device_type="cpu")
    with torch.no_grad():
        expected = unet_score(x).flatten(1).norm(dim=1).double().numpy()
    assert np.allclose(detector.score_norms(x.numpy()), expected, rtol=1e-5)


# -- refusals ---------------------------------------------------------------------------------------------------


def vp(**kwargs):
    kwargs = {"prediction_type": "epsilon", "data_range": (-1.0, 1.0), "sigma": 0.25, **kwargs}
    return VPScore(lambda x, t: x, linear_alphas_cumprod(), **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"sigma": None}, "Give exactly one of sigma and timestep, got sigma=None, timestep=None."),
        ({"timestep": 3}, "Give exactly one of sigma and timestep, got sigma=0.25, timestep=3."),
        ({"sigma": 0.0}, "sigma must be a number > 0, got 0.0."),
        ({"sigma": 100.0}, "sigma=100.0 is outside the schedule's noise levels [0.005, 78.7] in [0, 1] pixel units "
                          "(0.01 … 157.4 on the network's scale (-1.0, 1.0)); choose a sigma inside it or give "
                          "timestep=."),
        ({"sigma": None, "timestep": 1000}, "timestep must be an integer in [0, 999], got 1000."),
        ({"prediction_type": "eps"}, "prediction_type must be one of 'epsilon', 'v_prediction', 'sample', got 'eps'."),
        ({"data_range": (1.0, -1.0)}, "data_range must be the (min, max) pixel range the network was trained on, "
                                      "e.g. (-1.0, 1.0), got (1.0, -1.0)."),
        ({"learned_variance": 1}, "learned_variance must be True or False, got 1."),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        vp(**kwargs)


def test_bad_schedules_networks_and_outputs_are_refused():
    with pytest.raises(ValueError, match=re.escape("alphas_cumprod must be strictly decreasing in t")):
        VPScore(lambda x, t: x, [0.5, 0.9], prediction_type="epsilon", data_range=(-1, 1), timestep=0)
    with pytest.raises(ValueError, match=re.escape("alphas_cumprod must be a 1-D table of values in (0, 1), got "
                                                   "shape (2,) with values in [0, 0.5].")):
        VPScore(lambda x, t: x, [0.5, 0.0], prediction_type="epsilon", data_range=(-1, 1), timestep=0)
    with pytest.raises(ValueError, match=re.escape("model must be a callable network, got str.")):
        EDMScore("unet", sigma=0.1, data_range=(-1, 1))
    x = torch.rand(2, 3, 4, 4)
    with pytest.raises(ValueError, match=re.escape("model(x, t) returned shape (2, 6, 4, 4) for input (2, 3, 4, 4); "
                                                   "it must return the prediction in the input's shape (a "
                                                   "learned-variance network: pass learned_variance=True).")):
        VPScore(lambda x, t: x.repeat(1, 2, 1, 1), linear_alphas_cumprod(), prediction_type="epsilon",
                data_range=(-1, 1), sigma=0.1)(x)
    with pytest.raises(ValueError, match=re.escape("model(x, t) must return a tensor, got tuple; for a diffusers "
                                                   "UNet use from_diffusers(unet, scheduler, ...)")):
        VPScore(lambda x, t: (x,), linear_alphas_cumprod(), prediction_type="epsilon", data_range=(-1, 1),
                sigma=0.1)(x)


def test_from_diffusers_refuses_what_it_cannot_read(diffusers):
    scheduler = diffusers.DDPMScheduler()
    with pytest.raises(ValueError, match=re.escape("unet must be a diffusers UNet2DModel, got Linear; for another "
                                                   "network use VPScore(model, alphas_cumprod, ...) or EDMScore")):
        from_diffusers(torch.nn.Linear(2, 2), scheduler, sigma=0.25)
    with pytest.raises(ValueError, match=re.escape("scheduler must be a diffusers DDPM-family scheduler with "
                                                   "alphas_cumprod and config.prediction_type (DDPMScheduler, "
                                                   "DDIMScheduler, ...), got ScoreSdeVeScheduler.")):
        from_diffusers(tiny_unet(diffusers), diffusers.ScoreSdeVeScheduler(), sigma=0.25)
    with pytest.raises(ValueError, match=re.escape("The scheduler's variance_type='learned_range' needs 6 output "
                                                   "channels for 3 input channels; the UNet has 3.")):
        from_diffusers(tiny_unet(diffusers), diffusers.DDPMScheduler(variance_type="learned_range"), sigma=0.25)
    with pytest.raises(ValueError, match=re.escape("unet is class-conditional")):
        from_diffusers(tiny_unet(diffusers, num_class_embeds=10), scheduler, sigma=0.25)


def test_the_module_imports_no_diffusers_and_from_diffusers_says_how_to_install(monkeypatch):
    import art_adp.score.diffusion as module

    top_level = [node for node in ast.parse(pathlib.Path(module.__file__).read_text()).body
                 if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level for alias in node.names] + [
        node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)]
    assert names and not any(name.startswith("diffusers") for name in names)
    monkeypatch.setitem(sys.modules, "diffusers", None)  # as if not installed
    with pytest.raises(ImportError, match=re.escape('from_diffusers needs the optional diffusers package: pip install '
                                                    '"art-adp[diffusion]"')):
        from_diffusers(torch.nn.Linear(2, 2), None, sigma=0.25)
