"""Import a score network trained by the NCSNv2 reference code (``ermongroup/ncsnv2``) into :class:`NCSNv2`.

The reference saves ``torch.save([score.state_dict(), optimizer.state_dict(), epoch, step, ema.state_dict()],
"checkpoint_<step>.pth")`` (the last entry only with ``model.ema: true``), where ``score`` is wrapped in
``torch.nn.DataParallel`` (its names start with ``module.`` and include the ``sigmas`` buffer) and the EMA
entry maps the bare parameter names to their exponential moving averages. Its ``NCSNv2`` network is the one of
:class:`~art_adp.NCSNv2`, parameter for parameter, with two differences of naming and one of convention:

* RCU blocks name their convolutions ``"{block}_{stage}_conv"`` (1-based); here ``blocks.{block-1}.{stage-1}``;
* the reference keeps its σ schedule as a buffer ``sigmas``; here it goes to the checkpoint header;
* the reference returns ``net(x) / sigmas[y]``; :class:`~art_adp.NCSNv2` returns ``h(x) = net(x)`` (the score at
  σ is ``h(x) / σ``), so the weights carry over unchanged.

Inputs: the reference feeds ``2 x - 1`` for x in [0, 1] when ``data.rescaled`` and ``data.logit_transform`` are
both false (its CIFAR-10 config), exactly as :class:`~art_adp.NCSNv2` does. A network trained with
``rescaled: true`` or ``logit_transform: true`` has another input space (and σ scale) and is refused, as are the
``NCSNv2Deeper``/``NCSNv2Deepest`` networks of the LSUN and FFHQ configs and any normalisation or activation
other than InstanceNorm++ and ELU.

Nothing is unpickled beyond ``torch.load(weights_only=True)`` (tensors and plain containers); the YAML config
is read with ``yaml.safe_load``, after dropping the ``!!python/object:argparse.Namespace`` tags of the
``config.yml`` the reference writes into its log folder (their nodes are plain mappings; every other Python tag
is refused).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..serialization import read_torch_file
from .checkpoint import save_score_model
from .ncsnv2 import NCSNv2

__all__ = ["import_ncsnv2", "convert_ncsnv2_checkpoint", "read_ncsnv2_config", "reference_to_art_adp_name"]

PREFIX = "module."
_RCU = re.compile(r"\.(\d+)_(\d+)_conv\.")
_DEEPER = re.compile(r"^(res5|res31|refine5|refine31)\.")
_NAMESPACE_TAG = re.compile(r"!!python/object:argparse\.Namespace(?=\s)")


def read_ncsnv2_config(config: str | os.PathLike | Mapping) -> dict:
    """
    Read an NCSNv2 reference config (``configs/cifar10.yml`` or the ``config.yml`` of a log folder).

    :param config: A path to the YAML file, or the already-parsed mapping.
    :return: The config as nested dicts.
    :raises ValueError: For a file that is not a YAML mapping, or YAML with Python object tags other than
        ``argparse.Namespace`` (they are never constructed).
    """
    if isinstance(config, Mapping):
        return dict(config)
    import yaml

    path = Path(config)
    if not path.is_file():
        raise FileNotFoundError(
            f"No NCSNv2 config at {path}: pass the configs/<dataset>.yml the model was trained "
            "with, or the config.yml of its log folder."
        )
    # The log folder's config.yml is yaml.dump of an argparse.Namespace: drop exactly that tag (its nodes are
    # plain mappings) and parse with yaml.safe_load, which refuses every other Python tag.
    text = _NAMESPACE_TAG.sub("", path.read_text(encoding="utf-8"))
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(
            f"{path} is not a YAML file the importer can read safely ({err}). Only plain YAML and "
            "argparse.Namespace tags are accepted."
        ) from None
    if not isinstance(parsed, Mapping):
        raise ValueError(f"{path} is not an NCSNv2 config: expected a YAML mapping with 'data' and 'model' sections.")
    return dict(parsed)


def _section(config: Mapping, name: str) -> Mapping:
    value = config.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(
            f"The NCSNv2 config has no {name!r} section; pass the reference's configs/<dataset>.yml "
            "(e.g. configs/cifar10.yml) or the config.yml of the checkpoint's log folder."
        )
    return value


def _int(section: Mapping, where: str, key: str) -> int:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"The NCSNv2 config's {where}.{key} must be an integer, got {value!r}.")
    return value


def _architecture(config: Mapping) -> tuple[dict[str, int], list[float]]:
    """Check that the config describes a network :class:`NCSNv2` reproduces; return its arguments and σs."""
    data, model = _section(config, "data"), _section(config, "model")
    dataset = str(data.get("dataset", ""))
    if dataset.upper() in ("LSUN", "FFHQ"):
        deeper = "NCSNv2Deepest" if dataset.upper() == "FFHQ" else "NCSNv2Deeper"
        raise ValueError(
            f"The {dataset} config trains the reference's {deeper}, which art_adp does not implement; "
            "only the NCSNv2 network of the CIFAR-10 and CelebA configs can be imported."
        )
    for key in ("rescaled", "logit_transform"):
        if data.get(key, False):
            raise ValueError(
                f"The config sets data.{key}: true, so the network was trained on transformed inputs, "
                "not on images in [0, 1] mapped to 2x - 1 as ADP and art_adp's NCSNv2 assume. Only "
                "models trained with data.rescaled: false and data.logit_transform: false (the "
                "reference CIFAR-10 config) can be imported."
            )
    if data.get("centered", False):
        raise ValueError(
            "The config sets data.centered: true (a score_sde config); only NCSNv2 reference configs "
            "with inputs in [0, 1] can be imported."
        )
    norm, act = model.get("normalization", "InstanceNorm++"), str(model.get("nonlinearity", "elu")).lower()
    if norm != "InstanceNorm++" or act != "elu":
        raise ValueError(
            f"The config uses normalization {norm!r} and nonlinearity {act!r}; art_adp's NCSNv2 has "
            "InstanceNorm++ and ELU (the reference defaults)."
        )
    args = {
        "in_channels": _int(data, "data", "channels"),
        "image_size": _int(data, "data", "image_size"),
        "ngf": _int(model, "model", "ngf"),
    }
    n = _int(model, "model", "num_classes")
    begin, end, dist = model.get("sigma_begin"), model.get("sigma_end"), model.get("sigma_dist", "geometric")
    positive = [v for v in (begin, end) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    if len(positive) != 2 or n < 1:
        raise ValueError(
            f"The config's model.sigma_begin/sigma_end/num_classes must be positive, got {begin!r}, " f"{end!r}, {n!r}."
        )
    begin, end = positive
    if dist == "geometric":
        sigmas = [math.exp(math.log(begin) + (math.log(end) - math.log(begin)) * i / max(n - 1, 1)) for i in range(n)]
    elif dist == "uniform":
        sigmas = [begin + (end - begin) * i / max(n - 1, 1) for i in range(n)]
    else:
        raise ValueError(f"model.sigma_dist must be 'geometric' or 'uniform', got {dist!r}.")
    return args, sigmas


def reference_to_art_adp_name(name: str) -> str:
    """Map one reference parameter name (no ``module.`` prefix) to :class:`NCSNv2`'s, e.g.
    ``refine1.adapt_convs.0.2_1_conv.weight`` -> ``refine1.adapt_convs.0.blocks.1.0.weight``."""
    return _RCU.sub(lambda m: f".blocks.{int(m.group(1)) - 1}.{int(m.group(2)) - 1}.", name)


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def _pick_weights(obj: Any, ema: bool) -> tuple[Mapping[str, torch.Tensor], str, int | None]:
    """``(state dict, "ema" | "raw", step)`` from the reference's checkpoint list or a bare state dict."""
    if _is_state_dict(obj):
        return obj, "raw", None
    layout = (
        "expected the NCSNv2 reference's checkpoint [score state dict, optimizer state dict, epoch, step"
        "(, EMA state dict)] or a bare state dict of tensors"
    )
    if not isinstance(obj, (list, tuple)):
        raise ValueError(f"The checkpoint holds a {type(obj).__name__}; {layout}.")
    if len(obj) not in (4, 5) or not _is_state_dict(obj[0]):
        raise ValueError(
            f"The checkpoint is a list of {len(obj)} entries ({', '.join(type(o).__name__ for o in obj)});"
            f" {layout}."
        )
    step = obj[3] if isinstance(obj[3], int) and not isinstance(obj[3], bool) else None
    if ema and len(obj) == 5:
        if not _is_state_dict(obj[4]):
            raise ValueError(
                f"The checkpoint's fifth entry (the EMA state) is a {type(obj[4]).__name__}, not a dict "
                "of tensors; pass --raw-weights (ema=False) to import the trained weights instead."
            )
        return obj[4], "ema", step
    return obj[0], "raw", step


def _strip_prefix(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    prefixed = [k.startswith(PREFIX) for k in weights]
    if any(prefixed) and not all(prefixed):
        raise ValueError(
            f"Some parameter names start with the DataParallel prefix {PREFIX!r} and others do not "
            f"(e.g. {next(k for k in weights if not k.startswith(PREFIX))!r}); not an NCSNv2 checkpoint."
        )
    return {(k[len(PREFIX) :] if all(prefixed) else k): v for k, v in weights.items()}


def convert_ncsnv2_checkpoint(obj: Any, config: str | os.PathLike | Mapping, *, ema: bool = True) -> NCSNv2:
    """
    Build :class:`NCSNv2` from an already-loaded reference checkpoint (see :func:`import_ncsnv2`).

    :param obj: What ``torch.load(..., weights_only=True)`` returned.
    """
    args, sigmas = _architecture(read_ncsnv2_config(config))
    weights, source, step = _pick_weights(obj, ema)
    trained = obj if _is_state_dict(obj) else obj[0]  # holds the reference's sigmas buffer, whichever weights we take
    stored_sigmas = trained.get(PREFIX + "sigmas", trained.get("sigmas"))
    weights = _strip_prefix(weights)
    weights.pop("sigmas", None)
    deeper = sorted(k for k in weights if _DEEPER.match(k))
    if deeper:
        raise ValueError(
            f"The checkpoint has {deeper[0]!r} and other layers of the reference's NCSNv2Deeper/"
            "NCSNv2Deepest, which art_adp does not implement; only NCSNv2 (CIFAR-10, CelebA) imports."
        )
    if stored_sigmas is not None:
        ok = (
            stored_sigmas.ndim == 1
            and len(stored_sigmas) == len(sigmas)
            and torch.allclose(stored_sigmas.double(), torch.tensor(sigmas, dtype=torch.float64), rtol=1e-4)
        )
        if not ok:
            raise ValueError(
                f"The checkpoint's sigmas buffer ({tuple(stored_sigmas.shape)}, from "
                f"{float(stored_sigmas.flatten()[0]):.4g}) does not match the config's schedule "
                f"({len(sigmas)} sigmas from {sigmas[0]:.4g} to {sigmas[-1]:.4g}): wrong config file?"
            )
    mapped = {reference_to_art_adp_name(k): v for k, v in weights.items()}
    model = NCSNv2(args["in_channels"], args["image_size"], ngf=args["ngf"])
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(mapped)), sorted(set(mapped) - set(expected))
    wrong = [
        f"{k}: {tuple(mapped[k].shape)} instead of {tuple(v.shape)}"
        for k, v in expected.items()
        if k in mapped and mapped[k].shape != v.shape
    ]
    floats = [k for k, v in mapped.items() if k in expected and not torch.is_floating_point(v)]
    if missing or unexpected or wrong or floats:
        raise ValueError(
            f"The checkpoint's {source} weights do not match NCSNv2(in_channels={args['in_channels']}, image_size="
            f"{args['image_size']}, ngf={args['ngf']}) built from the config: {len(missing)} missing {missing[:4]}, "
            f"{len(unexpected)} unexpected {unexpected[:4]}, {len(wrong)} of the wrong shape {wrong[:4]}"
            + (f", non-float {floats[:4]}" if floats else "")
            + ". Is the config the one this checkpoint was "
            "trained with (data.channels, data.image_size, model.ngf)?"
        )
    model.load_state_dict({k: v.float() for k, v in mapped.items()})
    model.training_info = {"sigmas": sigmas, "step": step, "weights": source}
    return model.eval()


def import_ncsnv2(
    checkpoint: str | os.PathLike,
    config: str | os.PathLike | Mapping,
    *,
    ema: bool = True,
    output: str | os.PathLike | None = None,
) -> NCSNv2:
    """
    Import a checkpoint of the NCSNv2 reference code (``ermongroup/ncsnv2``, e.g. their published CIFAR-10
    ``checkpoint_300000.pth`` with ``configs/cifar10.yml``) as an :class:`~art_adp.NCSNv2`, optionally saving it
    with :func:`~art_adp.save_score_model` (safetensors; ``art-adp import-ncsnv2`` does this).

    The EMA weights are taken when the checkpoint has them (what the reference samples with), else the trained
    weights; the ``module.`` prefix of ``DataParallel`` is stripped; names are mapped onto :class:`NCSNv2` and
    every name and shape is checked against the network the config describes.

    | Paper link (NCSNv2): https://arxiv.org/abs/2006.09011

    :param checkpoint: The reference's ``checkpoint_<step>.pth`` (or a file holding a bare state dict), read with
        ``torch.load(weights_only=True)``: nothing but tensors and plain containers is ever unpickled.
    :param config: The reference's YAML config (path or parsed mapping): ``data.channels``, ``data.image_size``,
        ``model.ngf`` give the architecture; ``model.sigma_begin``/``sigma_end``/``num_classes``/``sigma_dist``
        the σ schedule recorded in the header.
    :param ema: Take the EMA weights when present (default); False: the trained weights.
    :param output: Where to save the converted model (``*.safetensors``); None: do not save.
    :return: The network in eval mode, with ``training_info = {"sigmas": [...], "step": n, "weights": "ema"|"raw"}``.
    :raises ValueError: If the file is refused by ``weights_only``, is not a reference checkpoint, the config
        describes a network or input transform art_adp cannot honour, or a name or shape does not match.
    """
    model = convert_ncsnv2_checkpoint(read_torch_file(checkpoint), config, ema=ema)
    if output is not None:
        save_score_model(
            model,
            output,
            imported_from={
                "code": "ermongroup/ncsnv2",
                "file": Path(checkpoint).name,
                "weights": model.training_info["weights"],
            },
        )
    return model
