"""What the ``art-adp`` commands share: the classifiers they name (the data sets they name are
:data:`art_adp.data.DATASETS`), where the digits demo leaves its models, the ``--lr`` parser, and :func:`run`, which
calls a command with its settings.

Each command lives next to its application, with its settings (a dataclass whose defaults are the command line's):
``demo`` in :mod:`~art_adp.apps.demo`, ``evaluate`` in :mod:`~art_adp.apps.evaluation.command`, ``certify`` in
:mod:`~art_adp.apps.certify_run`, and so on; :mod:`~art_adp.apps.cli` parses the flags straight into those settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "CLASSIFIERS",
    "COMPILE_MODES",
    "DEMO_CLASSIFIER",
    "DEMO_SCORE",
    "count_or_all",
    "cudnn_autotune",
    "import_ncsnv2",
    "learning_rate",
    "norm",
    "resolve_lr",
    "run",
]

CLASSIFIERS = {"digits-cnn": "DigitsCNN", "mlp": "MLP", "cnn": "SmallCNN", "wrn": "WideResNet"}
CLASSIFIERS["resnet20"] = "CifarResNet"  # CIFAR-10's ResNet-20
DEMO_SCORE, DEMO_CLASSIFIER = "runs/demo/score.safetensors", "runs/demo/classifier.safetensors"
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's


def run(command: Callable[..., Any], settings: Any, /, *, threads: int | None = None, **keywords: Any) -> Any:
    """Call ``command`` with its ``settings`` (None: a command without settings) and ``keywords`` (paths, run
    folder, device, progress), after setting torch's CPU threads: ``threads`` when given, else
    :func:`~art_adp._hardware.choose_threads` (OMP_NUM_THREADS, else the cores free to this process)."""
    import torch

    from .._hardware import choose_threads

    torch.set_num_threads(choose_threads(threads)[0])
    return command(**keywords) if settings is None else command(settings, **keywords)


def learning_rate(text: str) -> float | str:
    """``--lr``'s parser: a number, or ``"auto"`` (resolved by the command once the batch is known)."""
    return text if text == "auto" else float(text)


def count_or_all(text: str) -> int | None:
    """The parser of a number of test images: an integer, or ``all`` (None)."""
    return None if text.lower() == "all" else int(text)


def norm(text: str) -> float:
    """``--norm``'s parser: ``inf`` (``math.inf``) or an integer (2)."""
    return math.inf if text == "inf" else int(text)


def resolve_lr(lr: float | str, batch_size: int) -> float:
    """``--lr``: a number, or ``"auto"``: :func:`~art_adp.score.train.large_batch_lr` of the batch."""
    from ..score import large_batch_lr

    return large_batch_lr(batch_size) if lr == "auto" else float(lr)


def cudnn_autotune(device) -> None:
    """On CUDA, let cuDNN pick the fastest convolution for the (fixed) training shapes."""
    import torch

    if str(device).startswith("cuda"):
        torch.backends.cudnn.benchmark = True


def import_ncsnv2(*, checkpoint: str, config: str, output: str = "runs/cifar10/score.safetensors",
                  raw_weights: bool = False) -> None:  # fmt: skip
    """Convert a checkpoint_<step>.pth of ermongroup/ncsnv2 (e.g. their published CIFAR-10 model) into an art-adp
    score model (safetensors). Read with torch.load(weights_only=True); EMA weights when present; every name and
    shape checked."""
    from ..score.import_ncsnv2 import import_ncsnv2 as convert

    model = convert(checkpoint, config, ema=not raw_weights, output=output)
    info, cfg = model.training_info, model.config
    sigmas = info["sigmas"]
    print(
        f"score model: {output} (NCSNv2 ngf={cfg['ngf']}, {cfg['in_channels']} x {cfg['image_size']} x "
        f"{cfg['image_size']}, {'EMA' if info['weights'] == 'ema' else 'trained (non-EMA)'} weights, step "
        f"{info['step']}, {len(sigmas)} sigmas from {sigmas[0]:.4g} to {sigmas[-1]:.4g})"
    )
