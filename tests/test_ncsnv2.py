"""Tests for the NCSNv2 score network (art_adp.score.ncsnv2)."""
import json
import re

import pytest
import torch

from art_adp.score.ncsnv2 import InstanceNorm2dPlus, NCSNv2

SHAPES = [(1, 8), (1, 28), (3, 32)]
# Parameter count of the reference ermongroup/ncsnv2 NCSNv2 at ngf=128, 3 x 32 x 32 (CIFAR-10 config), obtained by a
# literal transcription of the reference code; the paper quotes 29.7 M.
REFERENCE_PARAMS_CIFAR10 = 29_694_083


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # Tiny models: one thread is fastest and avoids oversubscription slow-downs on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("in_channels,image_size", SHAPES)
def test_output_shape_and_finite(in_channels, image_size):
    model = NCSNv2(in_channels, image_size, ngf=8)
    x = torch.rand(2, in_channels, image_size, image_size)
    out = model(x)
    assert out.shape == x.shape
    assert torch.isfinite(out).all()
    assert out.abs().sum() > 0


@pytest.mark.parametrize("in_channels,image_size", SHAPES)
def test_rebuild_from_config_is_bit_identical(in_channels, image_size):
    model = NCSNv2(in_channels, image_size, ngf=8)
    config = json.loads(json.dumps(model.config))
    assert config == {"in_channels": in_channels, "image_size": image_size, "ngf": 8}
    rebuilt = NCSNv2(**config)
    rebuilt.load_state_dict(model.state_dict())
    x = torch.rand(3, in_channels, image_size, image_size)
    assert torch.equal(model(x), rebuilt(x))


def test_fresh_model_differs_without_state_dict():
    # Guards the test above: two independently initialised models must not agree by accident.
    a, b = NCSNv2(1, 8, ngf=8), NCSNv2(1, 8, ngf=8)
    x = torch.rand(2, 1, 8, 8)
    assert not torch.equal(a(x), b(x))


def test_param_count_cifar10_reference():
    n = _n_params(NCSNv2(3, 32, ngf=128))  # ~0.5 s on CPU (the meta device has a ~3 s first-use cost)
    assert abs(n - REFERENCE_PARAMS_CIFAR10) <= 0.01 * REFERENCE_PARAMS_CIFAR10
    assert abs(n - 29.7e6) <= 0.01 * 29.7e6  # paper's figure


def test_param_count_independent_of_image_size():
    # Fully convolutional: the image size only changes the (parameter-free) padding choices.
    assert _n_params(NCSNv2(1, 8, ngf=8)) == _n_params(NCSNv2(1, 28, ngf=8))


def test_instance_norm_plus_reduces_to_instance_norm():
    norm = InstanceNorm2dPlus(4)
    with torch.no_grad():
        norm.alpha.zero_()
        norm.gamma.fill_(1.0)
        norm.beta.zero_()
    x = torch.randn(2, 4, 5, 5) * 3 + 2
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = x.var(dim=(2, 3), unbiased=False, keepdim=True)
    torch.testing.assert_close(norm(x), (x - mean) / torch.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)


def test_instance_norm_plus_mean_term():
    # A constant per-channel shift c_k only survives through the alpha term: with gamma=1, beta=0, alpha=1 the
    # output of channel k is the standardised channel mean (c_k - mean(c)) / sqrt(var(c) + 1e-5).
    norm = InstanceNorm2dPlus(3)
    with torch.no_grad():
        norm.alpha.fill_(1.0)
        norm.gamma.fill_(1.0)
        norm.beta.zero_()
    shifts = torch.tensor([0.0, 1.0, 5.0])
    x = torch.randn(1, 1, 4, 4).expand(1, 3, 4, 4) + shifts[None, :, None, None]
    out = norm(x) - norm.instance_norm(x)
    expected = (shifts - shifts.mean()) / torch.sqrt(shifts.var() + 1e-5)  # unbiased var over channels
    torch.testing.assert_close(out[0], expected[:, None, None].expand(3, 4, 4), rtol=1e-4, atol=1e-4)


def test_input_mapping_uses_2x_minus_1():
    # The first conv must see 2x - 1: compare against feeding the mapped input through begin_conv directly.
    model = NCSNv2(1, 8, ngf=8)
    seen = {}

    def hook(module, inputs, output):
        seen["inp"] = inputs[0]  # returns None: output unchanged

    model.begin_conv.register_forward_hook(hook)
    x = torch.rand(2, 1, 8, 8)
    model(x)
    torch.testing.assert_close(seen["inp"], 2 * x - 1)


def test_gradient_flows_to_input():
    model = NCSNv2(1, 8, ngf=8)
    x = torch.rand(2, 1, 8, 8, requires_grad=True)
    model(x).pow(2).sum().backward()
    assert x.grad is not None
    assert torch.isfinite(x.grad).all()
    assert x.grad.abs().sum() > 0


@pytest.mark.parametrize("in_channels,image_size", [(1, 8), (3, 32)])
def test_batch_independence(in_channels, image_size):
    model = NCSNv2(in_channels, image_size, ngf=8)
    x = torch.rand(4, in_channels, image_size, image_size)
    batch_out = model(x)
    for i in range(4):
        torch.testing.assert_close(batch_out[i : i + 1], model(x[i : i + 1]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"in_channels": 0, "image_size": 8}, re.escape("in_channels must be an integer >= 1, got 0.")),
        ({"in_channels": 1, "image_size": 8, "ngf": 0}, re.escape("ngf must be an integer >= 2, got 0.")),
        ({"in_channels": 1, "image_size": 8, "ngf": 1}, re.escape("ngf must be an integer >= 2, got 1.")),
        ({"in_channels": 1, "image_size": 7}, r"Unsupported image_size 7.*even integer >= 4 \(e.g. 8, 28, 32\)"),
        ({"in_channels": 1, "image_size": 2}, "Unsupported image_size 2"),
        ({"in_channels": 1.0, "image_size": 8}, re.escape("in_channels must be an integer >= 1, got 1.0.")),
        ({"in_channels": 1, "image_size": "8"}, re.escape("image_size must be an integer, got '8'.")),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NCSNv2(**kwargs)


def test_constructor_is_keyword_only_after_two_args():
    with pytest.raises(TypeError):
        NCSNv2(1, 8, 8)  # type: ignore[misc]


@pytest.mark.parametrize(
    "shape,match",
    [
        ((1, 8, 8), r"Expected input of shape N x 1 x 8 x 8 \(N x C x H x W\), got \(1, 8, 8\)"),
        ((2, 3, 8, 8), r"N x 1 x 8 x 8 .*got \(2, 3, 8, 8\)"),
        ((2, 1, 16, 16), r"N x 1 x 8 x 8 .*got \(2, 1, 16, 16\)"),
        ((2, 1, 8, 6), r"N x 1 x 8 x 8 .*got \(2, 1, 8, 6\)"),
    ],
)
def test_bad_input_shape(shape, match):
    model = NCSNv2(1, 8, ngf=8)
    with pytest.raises(ValueError, match=match):
        model(torch.rand(*shape))
