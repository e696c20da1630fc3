"""ADPPurifier inside an unchanged ART pipeline: predictions, BPDA and full gradients, ART's PGD."""

import re

import numpy as np
import pytest
import torch
from art.attacks.evasion import ProjectedGradientDescent
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, NCSNv2, purify


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    score = NCSNv2(1, 8, ngf=4)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10))
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1)).numpy()
    y = np.eye(10, dtype=np.float32)[np.arange(6) % 10]  # ART's loss_gradient takes one-hot labels
    return score, clf, x, y


def art_classifier(clf, defences=None):
    return PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                             clip_values=(0.0, 1.0), device_type="cpu", preprocessing_defences=defences)


def purifier(score, seed=0, **kwargs):
    kwargs.setdefault("tau", 0.0)  # an untrained score model would otherwise stop at once; we want every step
    return ADPPurifier(score, generator=torch.Generator().manual_seed(seed), device_type="cpu", **kwargs)


def test_predict_is_the_classifier_on_purified_inputs(nets):
    score, clf, x, _ = nets
    defended = art_classifier(clf, [purifier(score, seed=3)])
    pred = defended.predict(x)
    purified = purify(score, torch.from_numpy(x), tau=0.0, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert np.allclose(pred, clf(purified).numpy(), atol=1e-6)
    assert pred.shape == (6, 10)


def test_bpda_gradient_is_the_classifier_gradient_at_the_purified_point(nets):
    score, clf, x, y = nets
    grad = art_classifier(clf, [purifier(score, seed=5, gradient="bpda")]).loss_gradient(x, y)
    purified, _ = purifier(score, seed=5)(x)  # ART's numpy __call__, same seed → same noise
    expected = art_classifier(clf).loss_gradient(purified, y)
    assert np.allclose(grad, expected, atol=1e-7)
    assert np.abs(grad).sum() > 0
    assert not np.allclose(expected, art_classifier(clf).loss_gradient(x, y), atol=1e-4)  # purification mattered


def test_full_gradient_matches_finite_differences_with_fixed_noise(nets):
    score, clf, x, y = nets
    x, y = x[:2], y[:2]
    grad = art_classifier(clf, [purifier(score, seed=7, gradient="full")]).loss_gradient(x, y)

    def loss(xv: np.ndarray) -> float:  # the same noise every time: a fresh generator with the same seed
        p = purifier(score, seed=7, gradient="full")
        with torch.no_grad():
            out = clf(p.forward(torch.from_numpy(xv).double().float())[0])
            return float(torch.nn.functional.cross_entropy(out.double(), torch.from_numpy(y.argmax(1))))

    for seed in range(3):
        v = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        v /= np.linalg.norm(v)
        h = 1e-2
        fd = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
        assert float((grad * v).sum()) == pytest.approx(fd, rel=0.05, abs=1e-4)
    bpda = art_classifier(clf, [purifier(score, seed=7, gradient="bpda")]).loss_gradient(x, y)
    assert not np.allclose(grad, bpda, rtol=0.05)  # the purifier's Jacobian is not the identity


def test_estimate_forward_agrees_with_forward(nets):
    score, _, x, _ = nets
    xt = torch.from_numpy(x)
    for mode in ("bpda", "full"):
        a = purifier(score, seed=2, gradient=mode).estimate_forward(xt)
        b = purifier(score, seed=2, gradient=mode).forward(xt)[0]
        assert torch.equal(a, b)


@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_art_pgd_runs_unchanged(nets, gradient):
    score, clf, x, y = nets
    defended = art_classifier(clf, [purifier(score, gradient=gradient, steps=3)])
    eps = 0.05
    adv = ProjectedGradientDescent(defended, eps=eps, eps_step=0.02, max_iter=3, verbose=False).generate(x, y=y)
    assert adv.shape == x.shape and adv.dtype == np.float32
    assert np.abs(adv - x).max() <= eps + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert np.abs(adv - x).max() > eps / 2  # it moved


def test_numpy_call_purifies_and_keeps_labels(nets):
    score, _, x, y = nets
    out, labels = purifier(score, sigma=0.0, steps=0)(x, y)
    assert np.array_equal(out, x) and labels is y or np.array_equal(labels, y)
    out, _ = purifier(score, seed=1)(x)
    assert out.shape == x.shape and out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1
    assert not np.allclose(out, x)


def test_chunking_does_not_change_results(nets):
    score, _, x, _ = nets
    a, _ = purifier(score, seed=4, batch_size=2)(x)
    b, _ = purifier(score, seed=4, batch_size=64)(x)
    # The same generator draws the noise per chunk in order, so chunked and unchunked runs see the same noise.
    assert np.allclose(a, b, atol=1e-6)


def test_channels_last_agrees_with_the_default_format(nets):
    score, _, x, _ = nets
    a, _ = purifier(score, seed=4)(x)
    b, _ = purifier(score, seed=4, channels_last=True)(x)
    assert np.allclose(a, b, atol=1e-4)


def test_set_params_validates_and_is_atomic(nets):
    score = nets[0]
    p = purifier(score)
    p.set_params(sigma=0.1, gradient="full")
    assert p.sigma == 0.1 and p.gradient == "full"
    with pytest.raises(ValueError, match=re.escape("sigma must be a number >= 0, got -1.")):
        p.set_params(sigma=-1, steps=3)
    assert p.sigma == 0.1 and p.steps == 10
    with pytest.raises(ValueError, match=re.escape("Unknown ADPPurifier parameter(s) ['sigmaa']")):
        p.set_params(sigmaa=0.2)


@pytest.mark.parametrize("kwargs, message", [
    ({"gradient": "exact"}, "gradient must be one of 'bpda', 'full', got 'exact'."),
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0."),
    ({"steps": -1}, "steps must be an integer >= 0, got -1."),
    ({"lam": 0}, "lam must be a number in (0, 1), got 0."),
    ({"generator": 3}, "generator must be a torch.Generator or None, got int."),
])
def test_constructor_errors(nets, kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        ADPPurifier(nets[0], device_type="cpu", **kwargs)


def test_score_model_must_be_a_module():
    with pytest.raises(ValueError, match=re.escape("score_model must be a torch.nn.Module, got function.")):
        ADPPurifier(lambda x: x)


def test_integer_inputs_are_refused(nets):
    with pytest.raises(ValueError, match=re.escape("ADPPurifier expects floating-point inputs in (0.0, 1.0), got torch.uint8.")):
        purifier(nets[0]).forward(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_device_type_uses_cuda(nets):
    score, clf, x, y = nets
    p = ADPPurifier(score, device_type="gpu")
    assert p.device.type == "cuda" and next(p.score_model.parameters()).is_cuda
    out = p.forward(torch.from_numpy(x).cuda())[0]
    assert out.is_cuda and out.shape == x.shape


def test_0_255_images_are_refused_through_art(nets):
    score, clf, x, _ = nets
    with pytest.raises(ValueError, match="divide 0-255 images by 255"):
        art_classifier(clf, [purifier(score)]).predict(x * 255)


def test_a_sigma_conditional_denoiser_is_taken_at_the_purifiers_sigma():
    """ADPPurifier(DenoiserUNet) purifies as ADPPurifier(EDMScore(unet, σ)) does: h at its own σ, not a TypeError."""
    from art_adp import DenoiserUNet, EDMScore

    torch.manual_seed(0)
    unet = DenoiserUNet(1, channels=(4, 8), emb_dim=8).eval()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    outs = []
    for score in (unet, EDMScore(unet, sigma=0.2, data_range=(0.0, 1.0))):
        purifier = ADPPurifier(score, sigma=0.2, steps=2, generator=torch.Generator().manual_seed(5), device_type="cpu")
        outs.append(purifier.forward(x)[0])
    assert isinstance(ADPPurifier(unet, sigma=0.2, device_type="cpu").score_model, EDMScore)
    torch.testing.assert_close(outs[0], outs[1])
