"""Reverse diffusion and one-shot denoising against known answers: the exact denoiser of Gaussian data (closed-form
one-step and ODE results), diffusers' own DDIM step (η = 0 and η = 1), finite differences through a tiny UNet and a
tiny DenoiserUNet, checkpointed against plain gradients, and per-sample independence."""

import math

import pytest
import torch

from art_adp import EDMScore, VPScore
from art_adp.diffusion_purify import one_shot_denoise, reverse_diffusion
from art_adp.score.denoiser import Denoiser
from art_adp.score.unet import DenoiserUNet

MU, S = 0.45, 0.12  # the data: every pixel N(MU, S²), in [0, 1] pixels
WIDE = (-20.0, 20.0)  # clip_values that never clip, for the closed forms and finite differences


def linear_alphas_cumprod(n=1000):
    return torch.cumprod(1 - torch.linspace(1e-4, 0.02, n, dtype=torch.float64), 0)


class GaussianDenoiser(torch.nn.Module):
    """The exact denoiser of N(MU, S²) data on [0, 1] pixels: E[x₀ | x₀ + σε = x] = μ + s²/(s² + σ²)(x − μ)."""

    sigma_conditional = True

    def forward(self, x, sigma):
        sigma = torch.as_tensor(sigma, dtype=x.dtype).view(-1, 1, 1, 1)
        return MU + S**2 / (S**2 + sigma**2) * (x - MU)


class GaussianEps:
    """The exact ε-prediction of a VP network for the same data on the (-1, 1) scale (μ' = 2μ − 1, s' = 2s)."""

    def __init__(self, table):
        self.table = table

    def __call__(self, x_t, t):
        a = self.table[t].view(-1, 1, 1, 1).to(x_t)
        mu, s = 2 * MU - 1, 2 * S
        return (1 - a).sqrt() * (x_t - a.sqrt() * mu) / (a * s**2 + 1 - a)


def vp_gaussian(table=None):
    table = linear_alphas_cumprod() if table is None else table
    return VPScore(GaussianEps(table), table, prediction_type="epsilon", data_range=(-1.0, 1.0), timestep=0)


def posterior_mean(x, sigma):
    return MU + S**2 / (S**2 + sigma**2) * (x - MU)


def images(n=4, seed=0, shape=(1, 4, 4)):
    return MU + 0.2 * torch.randn(n, *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("make", [lambda: GaussianDenoiser(), lambda: EDMScore(GaussianDenoiser(), sigma=0.1,
                                  data_range=(0.0, 1.0)), vp_gaussian], ids=["unet-like", "edm", "vp"])
@pytest.mark.parametrize("sigma", [0.05, 0.3])
def test_denoiser_of_each_adapter_is_the_gaussian_posterior_mean(make, sigma):
    d = Denoiser(make())
    level, _ = d.level(sigma)
    y = images()
    assert torch.allclose(d(y, sigma), posterior_mean(y, level), atol=1e-10)


def test_vp_denoiser_on_another_scale_is_the_same_pixel_posterior_mean():
    table = linear_alphas_cumprod()

    def eps01(x_t, t):  # the exact ε on the (0, 1) scale: μ' = μ, s' = s
        a = table[t].view(-1, 1, 1, 1).to(x_t)
        return (1 - a).sqrt() * (x_t - a.sqrt() * MU) / (a * S**2 + 1 - a)

    d = Denoiser(VPScore(eps01, table, prediction_type="epsilon", data_range=(0.0, 1.0), timestep=5))
    level, t = d.level(0.2)
    assert level == pytest.approx(math.sqrt((1 - table[t]) / table[t]), rel=1e-12)  # a = 1: network level = pixel
    y = images()
    assert torch.allclose(d(y, 0.2), posterior_mean(y, level), atol=1e-10)


@pytest.mark.parametrize("make", [GaussianDenoiser, vp_gaussian], ids=["edm", "vp"])
@pytest.mark.parametrize("sampler", ["ddim", "heun"])
def test_one_step_is_the_denoised_noisy_image_and_equals_one_shot_denoising(make, sampler):
    d = Denoiser(make())
    x = images()
    level, _ = d.level(0.3)
    out = reverse_diffusion(d, x, sigma=0.3, steps=1, sampler=sampler, clip_values=WIDE,
                            generator=torch.Generator().manual_seed(3))
    eps = torch.randn(4, 1, 1, 4, 4, generator=torch.Generator().manual_seed(3)).to(x)[:, 0]
    assert torch.allclose(out, posterior_mean(x + level * eps, level), atol=1e-10)
    shot = one_shot_denoise(d, x, sigma=level, clip_values=WIDE, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(out, shot, atol=1e-12)


def test_samplers_converge_to_the_probability_flow_ode_of_gaussian_data_at_their_order():
    # dx/dσ = (x − D)/σ = σ/(s² + σ²)(x − μ)  ⇒  x(σ) − μ = (x(σ*) − μ)·√((s² + σ²)/(s² + σ*²)); the last step is D at
    # σ_min, so the exact result is μ + (x* − μ)·s²/(√(s² + σ_min²)·√(s² + σ*²)). Heun's error falls 4× per doubling
    # of K (second order), DDIM's (Euler's) 2×.
    x, sigma, sigma_min = images(), 0.3, 0.002
    start = x + sigma * torch.randn(4, 1, 1, 4, 4, generator=torch.Generator().manual_seed(1)).to(x)[:, 0]
    exact = MU + (start - MU) * S**2 / math.sqrt((S**2 + sigma_min**2) * (S**2 + sigma**2))

    def error(sampler, steps):
        out = reverse_diffusion(GaussianDenoiser(), x, sigma=sigma, steps=steps, sampler=sampler, sigma_min=sigma_min,
                                clip_values=WIDE, generator=torch.Generator().manual_seed(1))
        return float((out - exact).abs().max())

    heun, ddim = [error("heun", k) for k in (50, 100, 200)], [error("ddim", k) for k in (50, 100, 200)]
    assert heun[-1] < 2e-5
    for coarse, fine in zip(heun, heun[1:]):
        assert 3.5 < coarse / fine < 4.5
    for coarse, fine in zip(ddim, ddim[1:]):
        assert 1.8 < coarse / fine < 2.2


@pytest.mark.parametrize("sampler,eta", [("ddim", 0.0), ("ancestral", 1.0)])
def test_vp_sampler_equals_diffusers_ddim_step_with_the_same_noise(sampler, eta):
    diffusers = pytest.importorskip("diffusers")
    table = linear_alphas_cumprod()
    scheduler = diffusers.DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", clip_sample=False,
                                        set_alpha_to_one=True, timestep_spacing="leading", steps_offset=0)
    scheduler.set_timesteps(10)
    assert scheduler.timesteps.tolist() == list(range(900, -1, -100))  # DDIM's grid = ours: linspace(t* = 900, 0, 10)
    assert torch.allclose(scheduler.alphas_cumprod.double(), table, rtol=1e-6)
    model, d = GaussianEps(table), Denoiser(vp_gaussian(table))
    x = images().clamp(0, 1)
    sigma = float(d.levels[900])
    out = reverse_diffusion(d, x, sigma=sigma, steps=10, sampler=sampler, generator=torch.Generator().manual_seed(2))
    noise = torch.randn(4, 11 if eta else 1, 1, 4, 4, generator=torch.Generator().manual_seed(2)).to(x)
    a = table[900]
    sample = a.sqrt() * (2 * x - 1) + (1 - a).sqrt() * noise[:, 0]  # x_t* = √ᾱ x₀' + √(1 − ᾱ) ε
    for i, t in enumerate(scheduler.timesteps):
        eps = model(sample, torch.full((4,), int(t)))
        z = noise[:, 1 + i] if eta else None
        sample = scheduler.step(eps, t, sample, eta=eta, variance_noise=z).prev_sample
    assert torch.allclose(out, ((sample + 1) / 2).clamp(0, 1), atol=1e-9)


def test_edm_schedule_is_karras_rho_seven_and_vp_schedule_is_ddim_linspace():
    d = Denoiser(GaussianDenoiser())
    levels = d.schedule(0.5, 4, sigma_min=0.01)
    ramp = [i / 3 for i in range(4)]
    assert levels == pytest.approx([(0.5 ** (1 / 7) + r * (0.01 ** (1 / 7) - 0.5 ** (1 / 7))) ** 7 for r in ramp])
    vp = Denoiser(vp_gaussian())
    level, t = vp.level(0.25)
    assert t == 144  # DDPM's linear schedule puts σ = 0.25 (0.5 on the (-1, 1) scale) at step 144
    assert vp.schedule(0.25, 3) == pytest.approx([level, float(vp.levels[72]), float(vp.levels[0])])
    with pytest.raises(ValueError, match=rf"^steps={t + 2} exceeds the {t + 1} steps of the model's schedule up to "
                                         r"sigma=0.25 \(t\* = \d+\); use steps <= \d+ or a larger sigma\.$"):
        vp.schedule(0.25, t + 2)
    with pytest.raises(ValueError, match=r"^sigma=100 is outside the schedule's noise levels \[0\.005\d*, \d+\.?\d*\] "
                                         r"in \[0, 1\] pixel units; choose a sigma inside it\.$"):
        vp.level(100)


def tiny_denoiser_unet(seed=0):
    torch.manual_seed(seed)
    net = DenoiserUNet(1, channels=(4, 8), emb_dim=8).double()
    with torch.no_grad():
        for p in net.parameters():  # the zero-initialised output layers would make F ≡ 0
            p.add_(0.2 * torch.randn_like(p))
    return net.eval()


class TinyEpsUNet(torch.nn.Module):
    """A tiny ε-network model(x_t, t): two convolutions with a time-dependent gain (smooth in x_t)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Conv2d(4, 1, 3, padding=1)

    def forward(self, x_t, t):
        gain = (1 + t.to(x_t) / 1000).view(-1, 1, 1, 1)
        return self.b(torch.tanh(self.a(x_t) * gain))


def tiny_vp():
    table = linear_alphas_cumprod(200)
    return VPScore(TinyEpsUNet().double(), table, prediction_type="epsilon", data_range=(-1.0, 1.0), timestep=0)


MODELS = {"denoiser-unet": tiny_denoiser_unet, "vp-unet": tiny_vp}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("sampler", ["ddim", "ancestral", "heun"])
def test_full_gradient_matches_finite_differences(model, sampler):
    d = Denoiser(MODELS[model]()).requires_grad_(False)
    x = images(2, seed=4).clamp(0.05, 0.95)
    w = torch.randn_like(x)
    v = torch.randn_like(x)

    def loss(z):
        return (w * reverse_diffusion(d, z, sigma=0.4, steps=3, sampler=sampler, clip_values=WIDE,
                                      generator=torch.Generator().manual_seed(5))).sum()

    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(xg), xg)
    h = 1e-5
    fd = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    assert float((g * v).sum()) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)
    assert float(g.abs().max()) > 1e-3  # the gradient is not trivially zero


def test_one_shot_gradient_matches_finite_differences():
    d = Denoiser(tiny_denoiser_unet()).requires_grad_(False)
    x = images(2, seed=6).clamp(0.05, 0.95)
    w, v = torch.randn_like(x), torch.randn_like(x)

    def loss(z):
        return (w * one_shot_denoise(d, z, sigma=0.3, clip_values=WIDE,
                                     generator=torch.Generator().manual_seed(7))).sum()

    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(xg), xg)
    fd = (loss(x + 1e-5 * v) - loss(x - 1e-5 * v)) / 2e-5
    assert float((g * v).sum()) == pytest.approx(float(fd), rel=1e-6)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("sampler", ["ddim", "ancestral", "heun"])
def test_checkpointed_gradients_equal_plain_gradients(model, sampler):
    d = Denoiser(MODELS[model]())
    x = images(3, seed=8).clamp(0, 1)

    def grad(checkpointing):
        xg = x.clone().requires_grad_(True)
        out = reverse_diffusion(d, xg, sigma=0.4, steps=4, sampler=sampler, gradient_checkpointing=checkpointing,
                                generator=torch.Generator().manual_seed(9))
        (g,) = torch.autograd.grad((out * torch.arange(out.numel()).view_as(out).to(out)).sum(), xg)
        return out.detach(), g

    (out_plain, g_plain), (out_ckpt, g_ckpt) = grad(False), grad(True)
    assert torch.equal(out_plain, out_ckpt)
    assert torch.allclose(g_plain, g_ckpt, rtol=1e-10, atol=1e-12)
    assert float(g_plain.abs().max()) > 0


@pytest.mark.parametrize("sampler", ["ddim", "ancestral", "heun"])
def test_a_sample_alone_equals_the_same_sample_in_a_batch(sampler):
    d = Denoiser(tiny_denoiser_unet())
    x = images(5, seed=10).clamp(0, 1)

    def run(z):
        return reverse_diffusion(d, z, sigma=0.3, steps=3, sampler=sampler, generator=torch.Generator().manual_seed(11))

    batch = run(x)
    assert torch.allclose(run(x[:1]), batch[:1], atol=1e-12)
    other = x.clone()
    other[1:] = 1 - other[1:]  # the neighbours change; the first sample's result does not
    assert torch.allclose(run(other)[:1], batch[:1], atol=1e-12)
    assert not torch.allclose(run(other)[1:], batch[1:])


def test_inputs_are_checked():
    d = Denoiser(GaussianDenoiser())
    with pytest.raises(ValueError, match=r"^sampler must be one of 'ddim', 'ancestral', 'heun', got 'euler'\.$"):
        reverse_diffusion(d, images(), sampler="euler")
    with pytest.raises(ValueError, match=r"outside clip_values \(0\.0, 1\.0\) by more than 0\.1"):
        reverse_diffusion(d, 255 * images().abs())
    with pytest.raises(ValueError, match=r"^x contains NaN or Inf values; denoising needs finite images\.$"):
        one_shot_denoise(d, torch.full((1, 1, 2, 2), math.nan), add_noise=False)
    with pytest.raises(ValueError, match=r"^model must be a VPScore \(a DDPM network, "
                                         r"e\.g\. from_diffusers\(\.\.\.\)\), "
                                         r"an EDMScore or a sigma-conditional denoiser such as DenoiserUNet, got "
                                         r"Linear\.$"):
        Denoiser(torch.nn.Linear(2, 2))
