"""The diffusion purifiers as ART preprocessors: ART's PGD through PyTorchClassifier in both gradient modes, the loss
gradient of each mode against its definition, set_params and exact messages, EOT, and denoised smoothing certified by
Cohen et al.'s procedure with a known radius on Gaussian data."""

import math

import numpy as np
import pytest
import torch
from art.attacks.evasion import ProjectedGradientDescent
from art.estimators.classification import PyTorchClassifier
from scipy.stats import norm

from art_adp import DenoisedSmoothingPurifier, EOTClassifier, ReverseDiffusionPurifier, certify
from art_adp.attacks._core import gradient_mode, purifiers
from art_adp.preprocessor import DEFAULT_GRADIENT
from art_adp.certification import denoised_smoothing_classifier
from art_adp.diffusion_purify import one_shot_denoise, reverse_diffusion
from art_adp.score.unet import DenoiserUNet

PURIFIERS = {
    "reverse-diffusion": lambda net, **kw: ReverseDiffusionPurifier(net, **{"sigma": 0.3, "steps": 3, **kw}),
    "denoised-smoothing": lambda net, **kw: DenoisedSmoothingPurifier(net, **{"sigma": 0.3, **kw}),
}


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    net = DenoiserUNet(1, channels=(4, 8), emb_dim=8)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = np.eye(10, dtype=np.float32)[[0, 1, 2, 3]]  # ART's loss_gradient takes one-hot labels
    return net.eval(), clf, x, y


def estimator(clf, purifier):
    return PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                             clip_values=(0.0, 1.0), preprocessing_defences=[purifier], device_type="cpu")


def purified(name, net, x, seed):
    g = torch.Generator().manual_seed(seed)
    if name == "reverse-diffusion":
        return reverse_diffusion(net, x, sigma=0.3, steps=3, generator=g)
    return one_shot_denoise(net, x, sigma=0.3, generator=g)


@pytest.mark.parametrize("name", sorted(PURIFIERS))
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_loss_gradient_of_each_mode_is_its_definition(nets, name, gradient):
    net, clf, x, y = nets
    p = PURIFIERS[name](net, gradient=gradient, device_type="cpu")
    art = estimator(clf, p)
    p.set_params(generator=torch.Generator().manual_seed(3))
    grad = art.loss_gradient(x.numpy(), y)
    xg = x.clone().requires_grad_(True)
    with torch.no_grad() if gradient == "bpda" else torch.enable_grad():
        out = purified(name, net, xg, 3)
    if gradient == "bpda":  # the classifier's gradient at the purified point
        out = out.clone().requires_grad_(True)
        target = out
    else:  # through the purification
        target = xg
    loss = torch.nn.functional.cross_entropy(clf(out), torch.as_tensor(y.argmax(1)))
    (expected,) = torch.autograd.grad(loss, target)
    assert np.allclose(grad, expected.numpy(), atol=1e-6)
    assert np.abs(grad).max() > 1e-4


@pytest.mark.parametrize("name", sorted(PURIFIERS))
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_art_pgd_runs_through_a_pytorch_classifier(nets, name, gradient):
    net, clf, x, y = nets
    p = PURIFIERS[name](net, gradient=gradient, device_type="cpu", generator=torch.Generator().manual_seed(4))
    art = estimator(clf, p)
    eps = 0.1
    x_adv = ProjectedGradientDescent(art, eps=eps, eps_step=0.05, max_iter=2, verbose=False).generate(x.numpy(), y=y)
    assert np.abs(x_adv - x.numpy()).max() <= eps + 1e-6
    assert np.abs(x_adv - x.numpy()).max() > eps / 2  # the gradient moved the inputs
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    preds = art.predict(x_adv)
    assert preds.shape == (4, 10) and np.isfinite(preds).all()


@pytest.mark.parametrize("name", sorted(PURIFIERS))
def test_predict_is_the_classifier_on_purified_inputs_and_chunks_change_nothing(nets, name):
    net, clf, x, _ = nets
    p = PURIFIERS[name](net, device_type="cpu", batch_size=4)
    art = estimator(clf, p)
    p.set_params(generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = clf(purified(name, net, x, 5)).numpy()
    assert np.allclose(art.predict(x.numpy()), expected, atol=1e-6)
    p.set_params(batch_size=1, generator=torch.Generator().manual_seed(5))  # chunks of one draw the noise in turn
    assert np.allclose(art.predict(x.numpy()), expected, atol=1e-6)


@pytest.mark.parametrize("name", sorted(PURIFIERS))
def test_the_attack_machinery_finds_them_and_eot_averages_draws(nets, name):
    net, clf, x, _ = nets
    p = PURIFIERS[name](net, device_type="cpu")
    art = estimator(clf, p)
    assert purifiers(art) == [p]
    assert p.gradient == DEFAULT_GRADIENT == "full"  # the one default gradient mode
    with gradient_mode(art, "bpda"):
        assert p.gradient == "bpda"
    assert p.gradient == DEFAULT_GRADIENT
    eot = EOTClassifier(art, ensemble_size=3)
    p.set_params(generator=torch.Generator().manual_seed(6))
    log_mean = eot.predict(x.numpy())  # the log of the probabilities averaged over 3 draws
    p.set_params(generator=torch.Generator().manual_seed(6))
    draws = [torch.softmax(torch.as_tensor(art.predict(x.numpy())), 1) for _ in range(3)]
    assert not np.allclose(draws[0].numpy(), draws[1].numpy())  # the purifier is random
    assert np.allclose(np.exp(log_mean).sum(1), 1, atol=1e-5)
    spread = np.ptp(np.stack([d.numpy() for d in draws]), axis=0).max()
    assert np.abs(np.exp(log_mean) - draws[0].numpy()).max() < spread + 1e-6  # an average of such draws


def test_checkpointing_in_the_purifier_gives_the_same_gradient(nets):
    net, clf, x, y = nets
    grads = []
    for checkpointing in (False, True):
        p = ReverseDiffusionPurifier(net, sigma=0.3, steps=3, sampler="ancestral", gradient="full",
                                     gradient_checkpointing=checkpointing, device_type="cpu",
                                     generator=torch.Generator().manual_seed(7))
        grads.append(estimator(clf, p).loss_gradient(x.numpy(), y))
    assert np.allclose(grads[0], grads[1], atol=1e-7)


BAD = [
    ("reverse-diffusion", {"sigma": 0}, "sigma must be a number > 0, got 0."),
    ("reverse-diffusion", {"steps": 0}, "steps must be an integer >= 1, got 0."),
    ("reverse-diffusion", {"sampler": "euler"}, "sampler must be one of 'ddim', 'ancestral', 'heun', got 'euler'."),
    ("reverse-diffusion", {"sigma_min": 0.5}, "sigma_min must be below sigma=0.3, got 0.5."),
    ("reverse-diffusion", {"gradient": "exact"}, "gradient must be one of 'bpda', 'full', got 'exact'."),
    ("reverse-diffusion", {"gradient_checkpointing": 1}, "gradient_checkpointing must be True or False, got 1."),
    ("reverse-diffusion", {"batch_size": 0}, "batch_size must be an integer >= 1, got 0."),
    ("reverse-diffusion", {"clip_values": (1, 0)}, "clip_values must be (min, max) with min < max, got (1, 0)."),
    ("reverse-diffusion", {"generator": 3}, "generator must be a torch.Generator or None, got int."),
    ("denoised-smoothing", {"sigma": -1.0}, "sigma must be a number > 0, got -1.0."),
    ("denoised-smoothing", {"add_noise": "no"}, "add_noise must be True or False, got 'no'."),
    ("denoised-smoothing", {"gradient": None}, "gradient must be one of 'bpda', 'full', got None."),
]


@pytest.mark.parametrize("name,kwargs,message", BAD)
def test_bad_parameters_are_refused_in_the_constructor_and_set_params_rolls_back(nets, name, kwargs, message):
    net = nets[0]
    with pytest.raises(ValueError) as error:
        PURIFIERS[name](net, device_type="cpu", **kwargs)
    assert str(error.value) == message
    p = PURIFIERS[name](net, device_type="cpu")
    before = {k: getattr(p, k) for k in p.params}
    with pytest.raises(ValueError) as error:
        p.set_params(**kwargs)
    assert str(error.value) == message
    assert {k: getattr(p, k) for k in p.params} == before


def test_params_are_complete_and_unknown_names_are_refused(nets):
    import inspect

    net = nets[0]
    for cls in (ReverseDiffusionPurifier, DenoisedSmoothingPurifier):
        own = set(inspect.signature(cls.__init__).parameters) - {"self", "model", "apply_fit", "apply_predict",
                                                                   "device_type"}
        assert own == set(cls.params)
    p = ReverseDiffusionPurifier(net, device_type="cpu")
    with pytest.raises(ValueError, match=r"^Unknown ReverseDiffusionPurifier parameter\(s\) \['lam'\]; valid: "):
        p.set_params(lam=0.1)
    p.set_params(sampler="heun", steps=2)
    assert (p.sampler, p.steps) == ("heun", 2)
    assert p.describe() == "reverse diffusion to sigma* = 0.25, K = 2 heun steps"
    assert DenoisedSmoothingPurifier(net, device_type="cpu").describe() == (
        "denoised smoothing sigma = 0.25, one denoiser call")


def test_a_vp_schedule_too_short_for_the_steps_is_refused():
    from art_adp import VPScore

    table = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64), 0)
    score = VPScore(lambda x, t: x, table, prediction_type="epsilon", data_range=(-1.0, 1.0), timestep=0)
    with pytest.raises(ValueError, match=r"^steps=20 exceeds the (\d+) steps of the model's schedule up to "
                                         r"sigma=0\.01 \(t\* = \d+\); use steps <= \d+ or a larger sigma\.$"):
        ReverseDiffusionPurifier(score, sigma=0.01, steps=20, device_type="cpu")
    assert "VP step t* = 144" in ReverseDiffusionPurifier(score, sigma=0.25, steps=5, device_type="cpu").describe()


class GaussianDenoiser(torch.nn.Module):
    """The exact denoiser of data N(μ, s²) per pixel: D(x, σ) = μ + s²/(s² + σ²)(x − μ)."""

    sigma_conditional = True

    def __init__(self, mu, s):
        super().__init__()
        self.mu, self.s = mu, s

    def forward(self, x, sigma):
        sigma = torch.as_tensor(sigma, dtype=x.dtype).view(-1, 1, 1, 1)
        return self.mu + self.s**2 / (self.s**2 + sigma**2) * (x - self.mu)


class Threshold(torch.nn.Module):
    """Class 1 when the first pixel exceeds μ + τ, else class 0 (logits ±(x₀ − μ − τ))."""

    def __init__(self, mu, tau):
        super().__init__()
        self.mu, self.tau = mu, tau
        self.dummy = torch.nn.Parameter(torch.zeros(()))  # DefendedModel reads the classifier's dtype from it

    def forward(self, x):
        margin = x.flatten(1)[:, :1] - self.mu - self.tau
        return torch.cat([-margin, margin], 1)


def test_denoised_smoothing_certifies_the_known_radius_of_gaussian_data():
    # g(x + σε) = 1 ⇔ μ + c(x₀ + σε₀ − μ) > μ + τ, c = s²/(s² + σ²) ⇔ ε₀ > (τ/c − (x₀ − μ))/σ, so P(class 1) =
    # Φ((x₀ − μ − τ/c)/σ) and the smoothed classifier's exact radius is x₀ − μ − τ/c (0.4 here; without the
    # denoiser, c = 1, it would be 0.5): Cohen's certified radius is that, less the Clopper-Pearson margin.
    mu, s, sigma, tau = 0.5, 0.5, 0.5, 0.1
    c = s**2 / (s**2 + sigma**2)
    x = torch.full((1, 1, 2, 2), mu)
    x[0, 0, 0, 0] = mu + 0.6
    exact = 0.6 - tau / c
    assert exact == pytest.approx(0.4)
    base = denoised_smoothing_classifier(Threshold(mu, tau), GaussianDenoiser(mu, s), sigma=sigma,
                                         clip_values=(-10.0, 10.0), device_type="cpu")
    n, alpha = 20000, 0.001
    cert = certify(base, x, sigma=sigma, n0=100, n=n, alpha=alpha, batch_size=5000,
                   generator=torch.Generator().manual_seed(0), progress=False)
    assert cert.prediction.tolist() == [1]
    p = norm.cdf(exact / sigma)
    assert cert.counts[0, 1] / n == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))
    margin = sigma * 4 * math.sqrt(p * (1 - p) / n) / norm.pdf(exact / sigma)  # about 3.1 σ_p̂ below, in radius units
    assert exact - margin < cert.radius[0] < exact
    assert cert.radius[0] < 0.45 < 0.5  # the denoiser's shrinkage shows: the undenoised radius would be 0.5


def test_denoised_smoothing_classifier_refuses_add_noise():
    with pytest.raises(ValueError, match=r"^denoised_smoothing_classifier sets add_noise=False itself"):
        denoised_smoothing_classifier(Threshold(0, 0), GaussianDenoiser(0.5, 0.5), sigma=0.5, add_noise=True)


def test_a_diffusers_unet_runs_under_art_pgd_with_exact_checkpointed_gradients():
    diffusers = pytest.importorskip("diffusers")
    from art_adp import from_diffusers

    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16),
                                 norm_num_groups=4, layers_per_block=1, down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"), add_attention=False)
    score = from_diffusers(unet.eval(), diffusers.DDPMScheduler(num_train_timesteps=1000), timestep=0)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)).numpy()
    y = np.eye(10, dtype=np.float32)[[3, 7]]
    grads = []
    for checkpointing in (False, True):
        p = ReverseDiffusionPurifier(score, sigma=0.25, steps=3, sampler="ancestral", gradient="full",
                                     gradient_checkpointing=checkpointing, device_type="cpu",
                                     generator=torch.Generator().manual_seed(2))
        grads.append(estimator(clf, p).loss_gradient(x, y))
    assert np.allclose(grads[0], grads[1], atol=1e-7) and np.abs(grads[0]).max() > 0
    assert "VP step t* = 144" in p.describe()
    pgd = ProjectedGradientDescent(estimator(clf, p), eps=0.1, eps_step=0.05, max_iter=1, verbose=False)
    x_adv = pgd.generate(x, y=y)
    assert 0.05 - 1e-6 <= np.abs(x_adv - x).max() <= 0.1 + 1e-6

