"""Bring two published CIFAR-10 classifiers into an ``art-adp levers --dataset cifar10`` run folder.

    python examples/cifar10_classifiers.py --resnet20 resnet20-12fca82f.th --tiniest DIR --out runs/cifar10

- ``--resnet20``: ``pretrained_models/resnet20-12fca82f.th`` of akamaster/pytorch_resnet_cifar10 (BSD-2): a
  ``torch.save`` dict whose ``state_dict`` has ``torch.nn.DataParallel``'s ``module.`` prefixes; the network was
  trained on inputs standardised by ImageNet's mean and std. Read with ``torch.load(weights_only=True)`` into
  :class:`art_adp.models.CifarResNet` (the same parameter names) with that standardisation, saved as
  ``resnet20.safetensors``.
- ``--tiniest``: a folder holding ``tiniest.py`` and ``tiniest.pt`` of ThalesGroup/scio, branch ``hub`` (MIT): the
  network's code (run here: it is the model's definition) and its state dict (read with ``weights_only=True``); it
  takes ``x − 0.5`` for images in [0, 1]. Saved as TorchScript ``tiniest.pt``, the shift inside.

Each is checked on the development split when ``--data-root`` is given (the CIFAR-10 "python version" batches).
Nothing is downloaded: fetch the two repositories' files yourself.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from pathlib import Path

import torch

from art_adp.apps.loading import Standardised
from art_adp.models import CifarResNet, save_classifier

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def resnet20(path: str | Path) -> CifarResNet:
    """akamaster's ResNet-20 checkpoint as a :class:`~art_adp.models.CifarResNet` (its standardisation inside)."""
    held = torch.load(path, map_location="cpu", weights_only=True)
    state = held.get("state_dict", held)
    model = CifarResNet(depth=20, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    return model.eval()


def tiniest(folder: str | Path) -> torch.nn.Module:
    """Tiniest from its folder (``tiniest.py``, ``tiniest.pt``), taking [0, 1] images (the −0.5 shift inside)."""
    folder = Path(folder)
    spec = importlib.util.spec_from_file_location("tiniest", folder / "tiniest.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{folder / 'tiniest.py'}: no module to import.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Tiniest()
    model.load_state_dict(torch.load(folder / "tiniest.pt", map_location="cpu", weights_only=True))
    return Standardised(model.eval(), mean=(0.5, 0.5, 0.5), std=(1.0, 1.0, 1.0)).eval()


def accuracy(model: torch.nn.Module, data_root: str, n: int = 1000) -> float:
    """Top-1 accuracy on the first ``n`` development images."""
    from art_adp.data import load_cifar10

    data = load_cifar10(data_root)
    with torch.no_grad():
        pred = torch.cat([model(torch.as_tensor(data.x_test[i : i + 250])).argmax(1) for i in range(0, n, 250)])
    return float((pred.numpy() == data.y_test[:n]).mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resnet20", help="akamaster's resnet20-12fca82f.th")
    parser.add_argument("--tiniest", help="the folder with scio's tiniest.py and tiniest.pt")
    parser.add_argument("--out", required=True, help="the levers run folder")
    parser.add_argument("--data-root", help="CIFAR-10 batches: check each on 1,000 development images")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    if args.resnet20:
        made["resnet20"] = model = resnet20(args.resnet20)
        save_classifier(model, out / "resnet20.safetensors", source="akamaster/pytorch_resnet_cifar10 resnet20")
    if args.tiniest:
        made["tiniest"] = model = tiniest(args.tiniest)
        with warnings.catch_warnings():  # Standardised's shape check is traced as the constant it is here
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.jit.trace(model, torch.rand(2, 3, 32, 32)).save(str(out / "tiniest.pt"))
    for name, model in made.items():
        where = f"{out / name}{'.safetensors' if name == 'resnet20' else '.pt'}"
        acc = f", {100 * accuracy(model, args.data_root):.2f} % on 1,000 development images" if args.data_root else ""
        print(f"{name}: {where}{acc}")
    return 0 if made else 2


if __name__ == "__main__":
    sys.exit(main())
