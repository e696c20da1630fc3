"""
A diffusers model read from a folder on disk as ADP's score model (:class:`~art_adp.score.diffusion.DiffusersScore`):
nothing is downloaded.

Three layouts are read, the UNet always an unconditional ``UNet2DModel`` (``config.json`` and its weights,
``diffusion_pytorch_model.safetensors``, or ``.bin`` which diffusers reads with ``torch.load(weights_only=True)``):

- a pipeline folder, as ``DDPMPipeline.save_pretrained`` writes it: ``model_index.json``, ``unet/``, ``scheduler/``;
- a flat folder, as ``hf download google/ddpm-cifar10-32 --local-dir FOLDER`` lays the Hub's repository out: the
  UNet's ``config.json`` and weights with ``scheduler_config.json`` beside them (and ``model_index.json``);
- a bare ``UNet2DModel`` folder (``unet.save_pretrained``, or a pipeline's ``unet/``) whose scheduler config is beside
  it: in the folder, or in a sibling ``scheduler/`` folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .diffusion import DiffusersScore, _diffusers, from_diffusers

__all__ = ["SCHEDULER_CONFIG", "UNET_CONFIG", "load_diffusers"]

UNET_CONFIG, SCHEDULER_CONFIG = "config.json", "scheduler_config.json"  # diffusers' file names
LAYOUTS = (
    "a pipeline folder (model_index.json, unet/, scheduler/: DDPMPipeline.save_pretrained), the Hub's flat folder "
    "(`hf download google/ddpm-cifar10-32 --local-dir FOLDER`: config.json, the weights, scheduler_config.json) or "
    "a UNet2DModel folder with scheduler_config.json in it or in a sibling scheduler/ folder"
)


def _unet_folder(folder: Path) -> Path:
    for candidate in (folder / "unet", folder):
        if (candidate / UNET_CONFIG).is_file():
            return candidate
    raise ValueError(
        f"{folder} is not a diffusers model folder (no unet/{UNET_CONFIG} or {UNET_CONFIG}): give {LAYOUTS}."
    )


def _scheduler_config(folder: Path, unet: Path) -> Path:
    candidates = (
        unet / SCHEDULER_CONFIG,
        folder / "scheduler" / SCHEDULER_CONFIG,
        unet.parent / "scheduler" / SCHEDULER_CONFIG,
    )
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ValueError(
            f"{folder} has a UNet ({unet / UNET_CONFIG}) but no scheduler config ({SCHEDULER_CONFIG} in it or in a "
            "scheduler/ folder beside it): the score needs the noise schedule; save the scheduler there "
            "(scheduler.save_pretrained(...)) or give " + LAYOUTS + "."
        )
    return found


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a JSON file ({err}).") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a diffusers config (a JSON object).")
    return value


def _scheduler(path: Path) -> Any:
    """The scheduler of the class its config names (one of diffusers' ``*Scheduler`` classes) from that config."""
    config = _read_json(path)
    name = config.get("_class_name", "DDPMScheduler")
    cls = getattr(_diffusers("load_diffusers"), str(name), None) if str(name).endswith("Scheduler") else None
    if cls is None or not hasattr(cls, "from_config"):
        raise ValueError(f"{path} names the scheduler class {name!r}, which diffusers does not have.")
    return cls.from_config(config)


def load_diffusers(
    folder: str | os.PathLike,
    *,
    sigma: float | None = None,
    timestep: int | None = None,
    data_range: tuple[float, float] = (-1.0, 1.0),
) -> DiffusersScore:
    """
    ADP's score model from a diffusers model on disk (one of the layouts of :mod:`art_adp.score.diffusers_folder`),
    through :func:`~art_adp.from_diffusers` (its checks, its noise levels). Never downloads.

    :param folder: The folder.
    :param sigma: The noise level of h in [0, 1] pixel units (exactly one of ``sigma`` and ``timestep``).
    :param timestep: The time step t of h instead.
    :param data_range: The UNet's pixel scale (diffusers' pipelines: ``(-1.0, 1.0)``).
    :return: A :class:`~art_adp.score.diffusion.DiffusersScore` in eval mode on the CPU.
    :raises FileNotFoundError: If ``folder`` does not exist.
    :raises ValueError: For a folder in none of the layouts, a UNet that is not an unconditional ``UNet2DModel``
        (a latent or text-conditional pipeline's, say), a scheduler without a VP schedule, or weights diffusers
        cannot read.
    """
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"No diffusers model folder at {folder}.")
    unet_dir = _unet_folder(folder)
    name = _read_json(unet_dir / UNET_CONFIG).get("_class_name")
    if name != "UNet2DModel":
        raise ValueError(
            f"{unet_dir / UNET_CONFIG} describes a {name}; ADP reads unconditional pixel-space UNet2DModels (DDPM "
            "and its kin), not latent or text-conditional pipelines."
        )
    scheduler = _scheduler(_scheduler_config(folder, unet_dir))
    try:
        unet = _diffusers("load_diffusers").UNet2DModel.from_pretrained(unet_dir, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"diffusers could not read the UNet in {unet_dir}: {err}") from None
    return from_diffusers(unet, scheduler, sigma=sigma, timestep=timestep, data_range=data_range).eval()
