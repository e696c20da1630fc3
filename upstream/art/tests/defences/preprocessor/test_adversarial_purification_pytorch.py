# MIT License
#
# Copyright (C) The Adversarial Robustness Toolbox (ART) Authors 2025
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

import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import art
from art.defences.preprocessor import AdversarialPurificationPyTorch
from tests.utils import ARTTestException

logger = logging.getLogger(__name__)

pytestmark = pytest.mark.skip_framework("tensorflow", "keras", "kerastf", "huggingface", "jax", "non_dl_frameworks")

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
def image_batch():
    return np.random.RandomState(0).uniform(0.1, 0.9, size=(4, 1, 6, 6)).astype(np.float32)


@pytest.mark.parametrize(
    "k, step_size, fraction",
    [
        (1.0, "adaptive", 0.05),  # alpha = lam / k = 0.05
        (0.25, "adaptive", 0.025),  # alpha = lam / k = 0.2, clamped to 0.1
        (100.0, "adaptive", 0.0),  # alpha = lam / k = 5e-4 < tau: every sample stops at once
        (1.0, 0.1, 0.1),  # constant step size, no stopping
    ],
)
def test_purification_matches_closed_form(art_warning, linear_score, image_batch, k, step_size, fraction):
    try:
        purifier = AdversarialPurificationPyTorch(
            linear_score(k), sigma=0.0, steps=STEPS, step_size=step_size, device_type="cpu"
        )
        y = np.arange(4)
        x_purified, y_out = purifier(image_batch, y)

        expected = CENTRE + (1 - fraction) ** STEPS * (image_batch - CENTRE)
        np.testing.assert_allclose(x_purified, expected, atol=1e-5)
        assert x_purified.dtype == image_batch.dtype
        np.testing.assert_array_equal(y_out, y)
    except ARTTestException as e:
        art_warning(e)


def test_noise_generator_and_clip_values(art_warning, linear_score, image_batch):
    try:
        import torch

        x = image_batch.astype(np.float64)
        noise = 0.3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).numpy().astype(np.float64)

        def purify(clip_values, seed=7):
            purifier = AdversarialPurificationPyTorch(
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


def test_samples_are_purified_independently(art_warning, tiny_score, image_batch):
    try:
        purifier = AdversarialPurificationPyTorch(tiny_score, sigma=0.0, steps=STEPS, device_type="cpu")
        batched = purifier(image_batch)[0]
        assert not np.allclose(batched, image_batch)
        purifier.set_params(batch_size=1)
        alone = np.concatenate([purifier(image_batch[i : i + 1])[0] for i in range(len(image_batch))])
        np.testing.assert_allclose(batched, alone, atol=1e-6)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.parametrize("gradient, factor", [("bpda", 1.0), ("full", 0.95**STEPS)])
def test_estimate_gradient(art_warning, linear_score, image_batch, gradient, factor):
    try:
        purifier = AdversarialPurificationPyTorch(
            linear_score(1.0), sigma=0.0, steps=STEPS, gradient=gradient, device_type="cpu"
        )
        grad = np.random.RandomState(1).randn(*image_batch.shape).astype(np.float32)
        np.testing.assert_allclose(purifier.estimate_gradient(image_batch, grad), factor * grad, rtol=1e-4, atol=2e-5)
    except ARTTestException as e:
        art_warning(e)


@pytest.mark.parametrize("gradient, factor", [("bpda", 1.0), ("full", 0.95**STEPS)])
def test_classifier_loss_gradient_follows_gradient_mode(art_warning, linear_score, image_batch, gradient, factor):
    try:
        import torch

        from art.estimators.classification import PyTorchClassifier

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 3))
        purifier = AdversarialPurificationPyTorch(
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
        x_purified = purifier(image_batch)[0]
        expected = factor * classifier(None).loss_gradient(x_purified, y)
        np.testing.assert_allclose(classifier([purifier]).loss_gradient(image_batch, y), expected, rtol=1e-4, atol=1e-7)
    except ARTTestException as e:
        art_warning(e)


def test_full_gradient_matches_finite_differences(art_warning, tiny_score, image_batch):
    try:
        import torch

        purifier = AdversarialPurificationPyTorch(
            tiny_score.double(), sigma=0.0, steps=3, clip_values=None, gradient="full", device_type="cpu"
        )
        rng = np.random.RandomState(2)
        x = torch.tensor(image_batch[:2], dtype=torch.float64, requires_grad=True)
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


def test_user_score_model_is_not_changed(art_warning, tiny_score, image_batch):
    try:
        import torch

        tiny_score.train()
        state = {name: value.clone() for name, value in tiny_score.state_dict().items()}
        purifier = AdversarialPurificationPyTorch(tiny_score, sigma=0.25, gradient="full", device_type="cpu")
        x = torch.tensor(image_batch, requires_grad=True)
        purifier.forward(x)[0].sum().backward()

        assert x.grad is not None
        assert tiny_score.training
        assert all(p.requires_grad and p.grad is None for p in tiny_score.parameters())
        assert all(torch.equal(state[name], value) for name, value in tiny_score.state_dict().items())
        assert purifier.score_model is not tiny_score and not purifier.score_model.training
    except ARTTestException as e:
        art_warning(e)


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
            AdversarialPurificationPyTorch(tiny_score, device_type="cpu", **params)
        purifier = AdversarialPurificationPyTorch(tiny_score, device_type="cpu")
        with pytest.raises(ValueError, match=re.escape(message)):
            purifier.set_params(**params)
    except ARTTestException as e:
        art_warning(e)


def test_input_errors(art_warning, tiny_score):
    try:
        import torch

        with pytest.raises(ValueError, match=re.escape("`score_model` must be a `torch.nn.Module`.")):
            AdversarialPurificationPyTorch(lambda x: -x, device_type="cpu")
        purifier = AdversarialPurificationPyTorch(tiny_score, device_type="cpu")
        message = "Adversarial purification needs floating-point inputs, got torch.int64."
        with pytest.raises(ValueError, match=re.escape(message)):
            purifier.forward(torch.zeros((1, 1, 6, 6), dtype=torch.int64))
    except ARTTestException as e:
        art_warning(e)


def test_set_params_and_verbose(art_warning, linear_score, image_batch):
    try:
        purifier = AdversarialPurificationPyTorch(linear_score(1.0), sigma=0.0, steps=STEPS, device_type="cpu")
        purifier.set_params(gradient="full", steps=1, verbose=True)
        assert (purifier.gradient, purifier.steps, purifier.verbose) == ("full", 1, True)
        expected = CENTRE + 0.95 * (image_batch - CENTRE)
        np.testing.assert_allclose(purifier(image_batch)[0], expected, atol=1e-5)
    except ARTTestException as e:
        art_warning(e)


def test_module_imports_without_torch(art_warning):
    try:
        code = """
import importlib.machinery
import sys


class PathFinderWithoutTorch(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == "torch" or fullname.startswith("torch."):
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path = [PathFinderWithoutTorch if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
from art.defences.preprocessor import AdversarialPurificationPyTorch

print("imported", "torch" in sys.modules)
"""
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(art.__file__)))
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "imported False"
    except ARTTestException as e:
        art_warning(e)
