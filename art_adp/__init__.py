"""art-adp: ADP adversarial purification (Yoon, Hwang & Lee, ICML 2021, https://arxiv.org/abs/2106.06041)
as a defence plugin for IBM's Adversarial Robustness Toolbox and torchattacks.

    from art_adp import ADPPurifier
    classifier = PyTorchClassifier(model, ..., preprocessing_defences=[ADPPurifier(score_model)])

The library only: the applications that write run folders (the evaluation harness ``art_adp.apps.evaluation``, the
demos, the command line) live in :mod:`art_adp.apps` and are imported from there.
"""

from .certification import certify, certify_approximate
from .defended import DefendedModel
from .diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
from .detect import ScoreNormDetector
from .eot import EOTClassifier
from .preprocessor import ADPPurifier
from .purification import purify
from .score import (
    DenoiserUNet,
    EDMScore,
    KernelScore,
    NCSNv2,
    VPScore,
    dsm_loss,
    from_diffusers,
    geometric_sigmas,
    load_score_model,
    median_heuristic_sigma,
    recommend_sigmas,
    save_score_model,
    train_score_model,
)

__version__ = "0.2.0.dev0"  # a development version until the "Unreleased" changes of CHANGELOG.md are released

__all__ = [
    "ADPPurifier",
    "DefendedModel",
    "DenoisedSmoothingPurifier",
    "DenoiserUNet",
    "EDMScore",
    "EOTClassifier",
    "KernelScore",
    "NCSNv2",
    "ReverseDiffusionPurifier",
    "ScoreNormDetector",
    "VPScore",
    "certify",
    "certify_approximate",
    "dsm_loss",
    "from_diffusers",
    "geometric_sigmas",
    "load_score_model",
    "median_heuristic_sigma",
    "purify",
    "recommend_sigmas",
    "save_score_model",
    "train_score_model",
]
