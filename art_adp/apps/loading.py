"""The models ``evaluate``, ``detect`` and ``certify`` take (``--classifier``, ``--score``), read from disk in one
place.

``--classifier`` is an art-adp checkpoint (``.safetensors``), a TorchScript file (``torch.jit.save``; read with
``torch.jit.load``), or ``package.module:factory``, importable from the working directory or ``PYTHONPATH``: the
factory is called with no arguments and returns an ``nn.Module``, into which ``--weights FILE`` (safetensors, or a
``torch.save`` state dict read with ``weights_only=True``) is loaded, every name and shape checked. ``--mean`` and
``--std`` standardise the classifier's input per channel after the purification, as ART's
``PyTorchClassifier(preprocessing=(mean, std), preprocessing_defences=...)`` does (defences first, then
standardisation): :class:`Standardised`.

``--score`` is an art-adp score checkpoint (``train-score``, ``train-denoiser``, ``import-ncsnv2``, or a diffusers
model saved with :func:`~art_adp.save_score_model`), a checkpoint of the NCSNv2 reference code
(``checkpoint_<step>.pth``, imported on the fly with ``import-ncsnv2``'s checks; its YAML config from
``--score-config`` or the ``config.yml`` beside it) or a diffusers folder
(:func:`~art_adp.score.diffusers_folder.load_diffusers`). Nothing is ever unpickled beyond
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..pretrained import BUNDLED, bundled_file
from ..serialization import check_state_dict, is_safetensors, read_weights
from ..zoo import zoo_name

__all__ = [
    "CLASSIFIER_HELP",
    "SCORE_HELP",
    "STANDARDISATION_HELP",
    "Standardised",
    "load_classifier_arg",
    "load_score_arg",
]

CLASSIFIER_HELP = (
    "an art-adp checkpoint (.safetensors), a TorchScript file (torch.jit.save), zoo:NAME (the model zoo's weights, "
    "checked against its manifest), or package.module:factory (importable from the working directory or PYTHONPATH; "
    "called with no arguments, returns an nn.Module) with --weights"
)
SCORE_HELP = (
    "an art-adp score checkpoint (.safetensors), an NCSNv2 reference checkpoint (checkpoint_<step>.pth, imported as "
    "import-ncsnv2 does; config: --score-config or config.yml beside it), or a diffusers folder (model_index.json, "
    "unet/, scheduler/; or a UNet2DModel folder with scheduler_config.json), zoo:NAME, or a bundled name (digits)"
)
STANDARDISATION_HELP = (
    "the classifier's input standardisation (x - mean) / std, applied after the purification as ART's "
    "preprocessing=(mean, std) is (defences first, then standardisation)"
)
FACTORY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
DEMO_HINT = "; `art-adp demo` trains the digits demo's models into runs/demo (the defaults)"


class Standardised(nn.Module):
    """
    ``model((x − mean) / std)`` per channel: ART's standardisation (``PyTorchClassifier(preprocessing=(mean, std))``,
    ``StandardisationMeanStdPyTorch``) made part of the model. An estimator applies its preprocessing defences to
    ``x`` first and then calls this model, so the order is ART's: defences (purification, on the images in
    ``clip_values``), then standardisation, then the network.
    """

    mean: torch.Tensor  # 1×C×1×1 buffers
    std: torch.Tensor

    def __init__(self, model: nn.Module, mean: Sequence[float], std: Sequence[float]) -> None:
        """
        :param model: The classifier, which expects standardised inputs.
        :param mean: One value per channel (or one for all).
        :param std: As many values as ``mean``, each > 0.
        :raises ValueError: For lengths that differ, a std that is not > 0, or a value that is not finite.
        """
        super().__init__()
        mean, std = [float(v) for v in mean], [float(v) for v in std]
        if not mean or len(mean) != len(std):
            raise ValueError(f"--mean and --std need one value per channel each, got {len(mean)} and {len(std)}.")
        if not all(math.isfinite(v) for v in mean) or not all(math.isfinite(s) and s > 0 for s in std):
            raise ValueError(f"--mean must be finite and --std > 0, got mean {mean} and std {std}.")
        self.model = model
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: ``N×C×H×W`` purified images. :return: ``model((x − mean) / std)``."""
        if self.mean.shape[1] not in (1, x.shape[1]):
            raise ValueError(f"--mean/--std give {self.mean.shape[1]} values; the images have {x.shape[1]} channels.")
        return self.model((x - self.mean) / self.std)


def _sha(path: str | os.PathLike) -> str:
    from ..runs.records import file_sha256

    return file_sha256(path)[:12]


def load_classifier_arg(
    spec: str,
    *,
    weights: str | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> tuple[nn.Module, str]:
    """
    The classifier ``--classifier spec`` names (see the module's description), on the CPU in eval mode.

    :param spec: A file (art-adp checkpoint, TorchScript) or ``package.module:factory``.
    :param weights: ``--weights``: the state dict for a factory's model.
    :param mean: ``--mean``: wrap the classifier in :class:`Standardised` (with ``std``).
    :param std: ``--std`` (with ``mean``).
    :return: ``(classifier, what it is in words, with the SHA-256 of the file read)``.
    :raises ValueError: For a file that is none of the formats, a factory that cannot be imported or called, weights
        whose names or shapes do not match, or ``--weights`` / ``--mean`` / ``--std`` where they do not apply.
    """
    path = Path(spec)
    named = not path.exists() and (zoo_name(spec) or spec in BUNDLED and "classifier" in BUNDLED[spec])
    if named:  # by name: described by it, not by where this machine keeps the file
        path = bundled_file(spec, "classifier")
    if path.is_file():
        if weights is not None:
            raise ValueError(
                f"--weights goes with --classifier package.module:factory; {spec} is a file that holds its own "
                "weights."
            )
        model, what = _classifier_file(path)
        what = what.replace(str(path), spec, 1) if named else what
    elif FACTORY.match(spec):
        model, what = _from_factory(spec, weights)
    else:
        raise ValueError(_not_a_classifier(spec))
    if (mean is None) != (std is None):
        raise ValueError("--mean and --std go together: give both (one value per channel each) or neither.")
    if mean is not None and std is not None:
        model = Standardised(model, mean, std)
        what += f", inputs standardised after purification by mean {tuple(mean)} and std {tuple(std)}"
    return model.eval(), what


def _not_a_classifier(spec: str) -> str:
    dotted = re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", spec)
    if dotted and Path(spec).suffix not in (".pt", ".pth", ".safetensors", ".ts"):  # "usermodels.make_cnn"
        module, _, name = spec.rpartition(".")
        return (
            f"--classifier {spec}: no such file, and not package.module:factory (a ':' separates the module from "
            f"the factory): write {module}:{name}."
        )
    return (
        f"--classifier {spec}: no such file. Give an art-adp checkpoint (.safetensors), a TorchScript file "
        f"(torch.jit.save) or package.module:factory with --weights FILE{DEMO_HINT}."
    )


def _is_torchscript(path: Path) -> bool:
    """A TorchScript archive: torch's zip format with the serialized code (``<name>/code/``) inside."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any("/code/" in name for name in archive.namelist())


def _classifier_file(path: Path) -> tuple[nn.Module, str]:
    from ..models import load_classifier

    if is_safetensors(path):
        try:
            model = load_classifier(path)
        except ValueError as err:
            if "not an art-adp checkpoint" not in str(err):
                raise
            raise ValueError(
                f"{path} is a safetensors file but not an art-adp checkpoint: for the weights of your own "
                f"architecture give --classifier package.module:factory --weights {path}."
            ) from None
        return model, f"{path} ({type(model).__name__}, sha256 {_sha(path)})"
    if _is_torchscript(path):
        try:
            model = torch.jit.load(str(path), map_location="cpu")
        except RuntimeError as err:
            raise ValueError(f"{path} is not a TorchScript file torch.jit.load can read ({err}).") from None
        return model, f"{path} (TorchScript, sha256 {_sha(path)})"
    raise ValueError(
        f"{path} is neither an art-adp checkpoint (.safetensors) nor TorchScript (torch.jit.save); a torch.save "
        f"file is never unpickled: export the model with torch.jit.trace(model, x).save(...), or give "
        f"--classifier package.module:factory --weights {path} for a state dict."
    )


def _import(module_name: str):
    """Import ``module_name`` with the working directory on the path (as ``python -m`` has it)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is None or not module_name.startswith(err.name):
            raise ValueError(f"importing {module_name} failed: {err}.") from None
        raise ValueError(
            f"cannot import {module_name} (no module named {err.name!r}): put it in the working directory ({cwd}) "
            "or on PYTHONPATH."
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)


def _from_factory(spec: str, weights: str | None) -> tuple[nn.Module, str]:
    module_name, _, attr = spec.partition(":")
    factory = _import(module_name)
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ValueError(
                f"{module_name} ({getattr(factory, '__file__', '?')}) has no {attr!r} (--classifier {spec})."
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise ValueError(f"--classifier {spec}: {attr} is a {type(factory).__name__}, not a factory to call.")
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise ValueError(
            f"--classifier {spec}: the factory is called with no arguments, but its signature is "
            f"{attr}{inspect.signature(factory)}; wrap it, e.g. def make(): return {attr}(...)."
        ) from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass
    model = factory()
    if not isinstance(model, nn.Module):
        raise ValueError(f"--classifier {spec}: the factory returned a {type(model).__name__}, not a torch.nn.Module.")
    if weights is None:
        return model, f"{spec}() (weights as the factory made them: no --weights)"
    state = read_weights(weights)
    check_state_dict(model, state, f"--weights {weights} does not match the model of {spec}")
    model.load_state_dict(state)
    return model, f"{spec}() with weights {weights} (sha256 {_sha(weights)})"


def load_score_arg(spec: str, *, config: str | None = None) -> tuple[nn.Module, str]:
    """
    The score model ``--score spec`` names (see the module's description), on the CPU in eval mode. A diffusers
    model comes at the first step of its schedule: the commands put every score model at their σ with
    :func:`~art_adp.score.diffusion.score_at`.

    :param spec: An art-adp checkpoint, an NCSNv2 reference checkpoint or a diffusers folder.
    :param config: ``--score-config``: the YAML config of an NCSNv2 reference checkpoint.
    :return: ``(score model, what it is in words)``.
    :raises ValueError: For a path that is none of the formats, or what the importers refuse.
    """
    from ..runs.records import module_sha256
    from ..score import import_ncsnv2, load_diffusers, load_score_model

    path = Path(spec)
    named = not path.exists() and (zoo_name(spec) or spec in BUNDLED and "score" in BUNDLED[spec])
    if named:  # by name: described by it, not by where this machine keeps the file
        path = bundled_file(spec, "score")
    model: nn.Module
    if not path.exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not path.suffix:  # a Hub id, say
        raise ValueError(
            f"--score {spec}: no such folder. art-adp reads diffusers models from disk and downloads nothing; if "
            f"{spec} is a Hub id: hf download {spec} --local-dir {path.name}, then --score {path.name}."
        )
    if not path.exists():
        raise ValueError(f"--score {spec}: no such file or folder. Give {SCORE_HELP}{DEMO_HINT}.")
    if config is not None and (path.is_dir() or is_safetensors(path)):
        raise ValueError(f"--score-config is the YAML config of an NCSNv2 reference checkpoint; {spec} is not one.")
    if path.is_dir():
        model = load_diffusers(path, timestep=0)
        return model, f"{path} (diffusers UNet2DModel, weights sha256 {module_sha256(model)[:12]})"
    if is_safetensors(path):
        model = load_score_model(path)
        return model, f"{spec if named else path} ({type(model).__name__}, sha256 {_sha(path)})"
    beside = path.parent / "config.yml"
    if config is None and not beside.is_file():
        raise ValueError(
            f"--score {spec} is not an art-adp checkpoint (.safetensors) or a diffusers folder; read as a checkpoint "
            "of the NCSNv2 reference code it needs its YAML config: pass --score-config FILE (configs/cifar10.yml) "
            "or put config.yml beside it."
        )
    imported = import_ncsnv2(path, config or beside)
    return imported, f"{path} (NCSNv2 reference checkpoint, imported; sha256 {_sha(path)})"
