"""The generative side: the score network, σ schedules, the DSM loss, training and checkpoints,
and adapters that turn pretrained diffusion models into one (:mod:`art_adp.score.diffusion`) or into a
pixel-space denoiser D(x, σ) for the diffusion purifiers (:mod:`art_adp.score.denoiser`).

Nothing here knows about ART, attacks or the CLI; everything downstream sees only ``score_model(x) -> h(x)``.
"""

from .checkpoint import load_score_model, save_score_model
from .denoiser import Denoiser
from .diffusers_folder import load_diffusers
from .diffusion import DiffusersScore, DiffusionScore, EDMScore, VPScore, from_diffusers, score_at
from .dsm import dsm_loss
from .ffdnet import FFDNet
from .import_ncsnv2 import import_ncsnv2
from .kernel import KernelScore
from .ncsnv2 import NCSNv2
from .sigmas import geometric_sigmas, median_heuristic_sigma, recommend_sigmas
from .train import large_batch_lr, train_score_model
from .unet import DenoiserUNet

__all__ = [
    "Denoiser",
    "DenoiserUNet",
    "DiffusersScore",
    "DiffusionScore",
    "EDMScore",
    "FFDNet",
    "KernelScore",
    "NCSNv2",
    "VPScore",
    "dsm_loss",
    "from_diffusers",
    "geometric_sigmas",
    "import_ncsnv2",
    "large_batch_lr",
    "load_diffusers",
    "load_score_model",
    "median_heuristic_sigma",
    "recommend_sigmas",
    "save_score_model",
    "score_at",
    "train_score_model",
]
