# MIT License
#
# Copyright (C) The Adversarial Robustness Toolbox (ART) Authors 2026
#
# Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
# documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
# rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit
# persons to whom the Software is furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
# Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
# WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,
# TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
from __future__ import absolute_import, division, print_function, unicode_literals

import copy
import logging
import re

import numpy as np
import pytest

from art.defences.preprocessor import ScoreBasedPurificationPyTorch
from tests.utils import ARTTestException

logger = logging.getLogger(__name__)

CENTRE = 0.5
STEPS = 10


@pytest.fixture
def linear_score():
    """
    Score network `h(x) = k * (CENTRE - x)` (the scaled score of a Gaussian centred at CENTRE), as a 1x1 convolution.
    Its adaptive step is `alpha = lam / k` exactly, so every step moves a sample by `alpha * k` of its way to CENTRE.
    """
    import torch

    def _linear_score(k):
        net = torch.nn.Conv2d(1, 1, kernel_size=1)
        with torch.no_grad():
            net.weight.fill_(-k)
            net.bias.fill_(k * CENTRE)
        return net

    return _linear_score


@pytest.fixture
def tiny_score():
    """
    A small randomly initialised convolutional score network.
    """
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, kernel_size=3, padding=1),
        torch.nn.Tanh(),
        torch.nn.Conv2d(4, 1, kernel_size=3, padding=1),
    )


@pytest.fixture
def x_batch():
    """
    Four single-channel 6x6 images with values in [0.1, 0.9] (NCHW).
    """
    return np.random.RandomState(0).uniform(0.1, 0.9, size=(4, 1, 6, 6)).astype(np.float32)


@pytest.mark.only_with_platform("pytorch")
@pytest.mark.parametrize(
    "k, step_size, fraction",
    [
        (1.0, "adaptive", 0.05),  # alpha = lam / k = 0.05
        (0.25, "adaptive", 0.025),  # alpha = lam / k = 0.2, clamped to 0.1
        (100.0, "adaptive", 0.0),  # alpha = lam / k = 5e-4 < tau: every sample stops at once
        (1.0, 0.1, 0.1),  # constant step size, no stopping
    ],
)
def test_purification_matches_closed_form(art_warning, linear_score, x_batch, k, step_size, fraction):
    try:
        purifier = ScoreBasedPurificationPyTorch(
            linear_score(k), sigma=0.0, steps=STEPS, step_size=step_size, device_type="cpu"
        )
        y = np.arange(4)
        x_purified, y_out = purifier(x_batch, y)

        expected = CENTRE + (1 - fraction) ** STEPS * (x_batch - CENTRE)
        np.testing.assert_allclose(x_purified, expected, atol=1e-5)
        assert x_purified.dtype == x_batch.dtype
        np.testing.assert_array_equal(y_out, y)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_noise_generator_and_clip_values(art_warning, linear_score, x_batch):
    try:
        import torch

        x = x_batch.astype(np.float64)
        noise = 0.3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).numpy().astype(np.float64)

        def purify(clip_values, seed=7):
            purifier = ScoreBasedPurificationPyTorch(
                linear_score(1.0),
                sigma=0.3,
                steps=0,
                clip_values=clip_values,
                generator=torch.Generator().manual_seed(seed),
                device_type="cpu",
            )
            return purifier(x)[0]

        np.testing.assert_allclose(purify(None), x + noise, atol=1e-6)
        clip_values = (np.zeros((1, 6, 6)), np.full((1, 6, 6), 0.5))
        np.testing.assert_allclose(purify(clip_values), np.clip(x + noise, 0.0, 0.5), atol=1e-6)
        np.testing.assert_array_equal(purify((0.0, 1.0)), purify((0.0, 1.0)))
        assert not np.allclose(purify((0.0, 1.0)), purify((0.0, 1.0), seed=8))
        assert purify(None).dtype == np.float64
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_samples_are_purified_independently(art_warning, tiny_score, x_batch):
    try:
        purifier = ScoreBasedPurificationPyTorch(tiny_score, sigma=0.0, steps=STEPS, device_type="cpu")
        batched = purifier(x_batch)[0]
        assert not np.allclose(batched, x_batch)
        purifier.set_params(batch_size=1)
        alone = np.concatenate([purifier(x_batch[i : i + 1])[0] for i in range(len(x_batch))])
        np.testing.assert_allclose(batched, alone, atol=1e-6)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
@pytest.mark.parametrize("gradient, factor", [("bpda", 1.0), ("full", 0.95**STEPS)])
def test_estimate_gradient(art_warning, linear_score, x_batch, gradient, factor):
    try:
        purifier = ScoreBasedPurificationPyTorch(
            linear_score(1.0), sigma=0.0, steps=STEPS, gradient=gradient, device_type="cpu"
        )
        grad = np.random.RandomState(1).randn(*x_batch.shape).astype(np.float32)
        np.testing.assert_allclose(purifier.estimate_gradient(x_batch, grad), factor * grad, rtol=1e-4, atol=2e-5)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
@pytest.mark.parametrize("gradient, factor", [("bpda", 1.0), ("full", 0.95**STEPS)])
def test_classifier_loss_gradient_follows_gradient_mode(art_warning, linear_score, x_batch, gradient, factor):
    try:
        import torch

        from art.estimators.classification import PyTorchClassifier

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 3))
        purifier = ScoreBasedPurificationPyTorch(
            linear_score(1.0), sigma=0.0, steps=STEPS, gradient=gradient, device_type="cpu"
        )

        def classifier(defences):
            return PyTorchClassifier(
                model,
                loss=torch.nn.CrossEntropyLoss(),
                input_shape=(1, 6, 6),
                nb_classes=3,
                clip_values=(0.0, 1.0),
                preprocessing_defences=defences,
                device_type="cpu",
            )

        y = np.eye(3)[[0, 1, 2, 0]].astype(np.float32)
        x_purified = purifier(x_batch)[0]
        expected = factor * classifier(None).loss_gradient(x_purified, y)
        np.testing.assert_allclose(classifier([purifier]).loss_gradient(x_batch, y), expected, rtol=1e-4, atol=1e-7)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_full_gradient_matches_finite_differences(art_warning, tiny_score, x_batch):
    try:
        import torch

        purifier = ScoreBasedPurificationPyTorch(
            tiny_score.double(), sigma=0.0, steps=3, clip_values=None, gradient="full", device_type="cpu"
        )
        rng = np.random.RandomState(2)
        x = torch.tensor(x_batch[:2], dtype=torch.float64, requires_grad=True)
        weights = torch.tensor(rng.randn(*x.shape))
        direction = torch.tensor(rng.randn(*x.shape))

        def loss(x_in):
            return (purifier.forward(x_in)[0] * weights).sum()

        (grad,) = torch.autograd.grad(loss(x), x)
        eps = 1e-6
        with torch.no_grad():
            numerical = (loss(x + eps * direction) - loss(x - eps * direction)) / (2 * eps)
        np.testing.assert_allclose(float((grad * direction).sum()), float(numerical), rtol=1e-5)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_user_score_model_is_not_changed(art_warning, tiny_score, x_batch):
    try:
        import torch

        tiny_score.train()
        state = {name: value.clone() for name, value in tiny_score.state_dict().items()}
        seen = []  # (training, any parameter requiring gradients) at each call of the network
        tiny_score.register_forward_hook(
            lambda module, inputs, output: seen.append(
                (module.training, any(p.requires_grad for p in module.parameters()))
            )
        )
        purifier = ScoreBasedPurificationPyTorch(tiny_score, sigma=0.25, steps=2, gradient="full", device_type="cpu")
        assert purifier.score_model is tiny_score  # used, not copied
        x = torch.tensor(x_batch, requires_grad=True)
        purifier.forward(x)[0].sum().backward()

        assert x.grad is not None
        assert seen and set(seen) == {(False, False)}  # evaluation mode, frozen parameters while purifying
        assert tiny_score.training
        assert all(p.requires_grad and p.grad is None for p in tiny_score.parameters())
        assert all(torch.equal(state[name], value) for name, value in tiny_score.state_dict().items())
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_set_params_score_model(art_warning, linear_score, x_batch):
    try:
        purifier = ScoreBasedPurificationPyTorch(linear_score(1.0), sigma=0.0, steps=STEPS, device_type="cpu")
        new_score = linear_score(0.25)
        purifier.set_params(score_model=new_score)
        assert purifier.score_model is new_score
        # k = 0.25: alpha = lam / k = 0.2, clamped to 0.1, so each step moves 0.025 of the way to CENTRE
        np.testing.assert_allclose(purifier(x_batch)[0], CENTRE + 0.975**STEPS * (x_batch - CENTRE), atol=1e-5)
        with pytest.raises(ValueError, match=re.escape("`score_model` must be a `torch.nn.Module`.")):
            purifier.set_params(score_model=lambda x: -x)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
@pytest.mark.parametrize(
    "params, message",
    [
        ({"sigma": -0.1}, "`sigma` must be a number >= 0."),
        ({"steps": 2.5}, "`steps` must be an integer >= 0."),
        ({"steps": True}, "`steps` must be an integer >= 0."),
        ({"step_size": "fixed"}, "`step_size` must be 'adaptive' or a number >= 0."),
        ({"step_size": -1.0}, "`step_size` must be 'adaptive' or a number >= 0."),
        ({"lam": 1.0}, "`lam` must lie in (0, 1)."),
        ({"delta": 0.0}, "`delta` must be a number > 0."),
        ({"step_clamp": (0.1, 0.01)}, "`step_clamp` must be a tuple (min, max) with 0 <= min <= max."),
        ({"step_clamp": (0.1,)}, "`step_clamp` must be a tuple (min, max) with 0 <= min <= max."),
        ({"tau": float("nan")}, "`tau` must be a number >= 0."),
        (
            {"clip_values": (0, 1, 2)},
            "'clip_values' should be a tuple of 2 floats or arrays containing the allowed data range.",
        ),
        ({"clip_values": (1, 0)}, "Invalid 'clip_values': min >= max."),
        ({"clip_values": (np.zeros(3), np.array([1, 0, 1]))}, "Invalid 'clip_values': min >= max."),
        ({"gradient": "bpda+eot"}, "`gradient` must be 'bpda' or 'full'."),
        ({"batch_size": 0}, "The batch size `batch_size` has to be positive."),
        ({"generator": 1234}, "`generator` must be a `torch.Generator` or None."),
        ({"verbose": "yes"}, "The argument `verbose` has to be of type bool."),
    ],
)
def test_check_params(art_warning, tiny_score, params, message):
    try:
        with pytest.raises(ValueError, match=re.escape(message)):
            ScoreBasedPurificationPyTorch(tiny_score, device_type="cpu", **params)
        purifier = ScoreBasedPurificationPyTorch(tiny_score, device_type="cpu")
        with pytest.raises(ValueError, match=re.escape(message)):
            purifier.set_params(**params)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_input_errors(art_warning, tiny_score):
    try:
        import torch

        with pytest.raises(ValueError, match=re.escape("`score_model` must be a `torch.nn.Module`.")):
            ScoreBasedPurificationPyTorch(lambda x: -x, device_type="cpu")
        purifier = ScoreBasedPurificationPyTorch(tiny_score, device_type="cpu")
        message = "Score-based purification needs floating-point inputs, got torch.int64."
        with pytest.raises(ValueError, match=re.escape(message)):
            purifier.forward(torch.zeros((1, 1, 6, 6), dtype=torch.int64))
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_set_params_and_verbose(art_warning, linear_score, x_batch):
    try:
        purifier = ScoreBasedPurificationPyTorch(linear_score(1.0), sigma=0.0, steps=STEPS, device_type="cpu")
        purifier.set_params(gradient="full", steps=1, verbose=True)
        assert (purifier.gradient, purifier.steps, purifier.verbose) == ("full", 1, True)
        expected = CENTRE + 0.95 * (x_batch - CENTRE)
        np.testing.assert_allclose(purifier(x_batch)[0], expected, atol=1e-5)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_generator_reproducible_and_global_rng_untouched(art_warning, tiny_score, x_batch):
    try:
        import torch

        purifier = ScoreBasedPurificationPyTorch(
            tiny_score, sigma=0.25, steps=3, generator=torch.Generator().manual_seed(5), device_type="cpu"
        )
        global_state = torch.get_rng_state()
        first = purifier(x_batch)[0]
        second = purifier(x_batch)[0]  # the same generator, advanced: a new draw
        assert torch.equal(torch.get_rng_state(), global_state)
        assert not np.allclose(first, second)

        purifier.set_params(generator=torch.Generator().manual_seed(5))
        np.testing.assert_array_equal(purifier(x_batch)[0], first)
        np.testing.assert_array_equal(purifier(x_batch)[0], second)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_device_type_cpu(art_warning, tiny_score, x_batch):
    try:
        import torch

        purifier = ScoreBasedPurificationPyTorch(tiny_score.double(), sigma=0.0, steps=2, device_type="cpu")
        assert purifier.device == torch.device("cpu")
        assert all(p.device == torch.device("cpu") for p in purifier.score_model.parameters())

        x = torch.tensor(x_batch)  # float32 input, float64 score network: computed in float64, returned as float32
        x_purified = purifier.forward(x)[0]
        assert (x_purified.device, x_purified.dtype, x_purified.shape) == (x.device, x.dtype, x.shape)
        with torch.no_grad():
            expected = x.double()
            for _ in range(2):
                h = purifier.score_model(expected)
                ratio = (h * purifier.score_model(expected + 1e-3 * h)).flatten(1).sum(1) / h.flatten(1).pow(2).sum(1)
                alpha = (0.05 * 1e-3 / (1 - ratio)).clamp(1e-5, 0.1)
                expected = torch.where(
                    (alpha >= 1e-3).view(-1, 1, 1, 1), (expected + alpha.view(-1, 1, 1, 1) * h).clamp(0, 1), expected
                )
        np.testing.assert_allclose(x_purified.numpy(), expected.float().numpy(), atol=1e-6)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
def test_device_type_gpu(art_warning, tiny_score, x_batch):
    try:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("CUDA is not available.")

        score_cpu = copy.deepcopy(tiny_score)
        purifier_cpu = ScoreBasedPurificationPyTorch(
            score_cpu, sigma=0.25, steps=3, generator=torch.Generator().manual_seed(3), device_type="cpu"
        )
        purifier_gpu = ScoreBasedPurificationPyTorch(
            tiny_score, sigma=0.25, steps=3, generator=torch.Generator().manual_seed(3), device_type="gpu"
        )
        assert purifier_gpu.device.type == "cuda"
        assert purifier_gpu.score_model is tiny_score  # moved in place, as PyTorchClassifier moves its model
        assert all(p.device.type == "cuda" for p in tiny_score.parameters())
        assert all(p.device.type == "cpu" for p in score_cpu.parameters())

        # A CPU generator draws the same noise for both; the result comes back on the input's device.
        x = torch.tensor(x_batch)
        x_gpu_purified = purifier_gpu.forward(x)[0]
        assert x_gpu_purified.device == x.device
        np.testing.assert_allclose(x_gpu_purified.numpy(), purifier_cpu.forward(x)[0].numpy(), atol=1e-5)

        # A CUDA generator gives reproducible draws on the GPU.
        purifier_gpu.set_params(generator=torch.Generator(device=purifier_gpu.device).manual_seed(4))
        first = purifier_gpu(x_batch)[0]
        purifier_gpu.set_params(generator=torch.Generator(device=purifier_gpu.device).manual_seed(4))
        np.testing.assert_array_equal(purifier_gpu(x_batch)[0], first)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.only_with_platform("pytorch")
@pytest.mark.parametrize(
    "dtype_name, k, tau, rtol",
    [
        ("bfloat16", 4.0, 1e-3, 0.15),  # 1 - ratio = k * delta = 4e-3, at bfloat16's resolution near 1 (3.9e-3)
        ("float16", 100.0, 1e-4, 1e-3),  # |h|^2 = 36 * (100 * 0.47)^2 = 8e4 overflows float16 (max 65504)
    ],
)
def test_half_precision_network_steps_in_float32(art_warning, linear_score, dtype_name, k, tau, rtol):
    try:
        import torch

        dtype = getattr(torch, dtype_name)
        net = linear_score(k).to(dtype)
        # Inputs near 0, far from CENTRE: the probe x + delta * h stays resolved in the network's dtype.
        x = torch.tensor(np.random.RandomState(3).uniform(0.01, 0.05, size=(4, 1, 6, 6)), dtype=torch.float32)
        try:
            with torch.no_grad():
                net(x.to(dtype))
        except RuntimeError:  # pragma: no cover
            pytest.skip(f"This PyTorch build has no {dtype_name} convolution on the CPU.")
        purifier = ScoreBasedPurificationPyTorch(net, sigma=0.0, steps=1, tau=tau, device_type="cpu")

        # One adaptive step from the network's own outputs, its ratio and step size computed in `work`.
        with torch.no_grad():
            h = net(x.to(dtype))
            h_probe = net((x + 1e-3 * h.float()).to(dtype))

        def step_size(work):
            h_w, h_probe_w = h.to(work), h_probe.to(work)
            ratio = (h_w * h_probe_w).flatten(1).sum(1) / h_w.flatten(1).pow(2).sum(1).clamp_min(1e-30)
            return (0.05 * 1e-3 / (1 - ratio)).clamp(1e-5, 0.1).float()

        alpha = step_size(torch.float32)
        # The closed form lam / k, up to the rounding of the network's outputs (8 significant bits in bfloat16).
        np.testing.assert_allclose(alpha.numpy(), 0.05 / k, rtol=rtol)
        assert bool((alpha >= tau).all())
        expected = (x + alpha.view(-1, 1, 1, 1) * h.float()).clamp(0.0, 1.0)
        x_purified = purifier.forward(x)[0]
        assert x_purified.dtype == torch.float32
        np.testing.assert_allclose(x_purified.numpy(), expected.numpy(), rtol=0, atol=1e-7)

        # The same step computed in the network's dtype is not this step: rounded (bfloat16) or NaN (float16).
        alpha_half = step_size(dtype)
        assert not torch.allclose(alpha_half, alpha, rtol=0.05, atol=0.0)
    except ARTTestException as e:
        art_warning(e)
