"""art-adp: ADP adversarial purification (Yoon, Hwang & Lee, ICML 2021, https://arxiv.org/abs/2106.06041)
as a defence plugin for IBM's Adversarial Robustness Toolbox and torchattacks.

    from art_adp import ADPPurifier
    classifier = PyTorchClassifier(model, ..., preprocessing_defences=[ADPPurifier(score_model)])
"""

from .certify import certify, certify_approximate
from .defended import DefendedModel
from .diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
from .detect import ScoreNormDetector
from .eot import EOTClassifier
from .preprocessor import ADPPurifier
from .purify import purify
from .score import (
    EDMScore,
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

__version__ = "0.1.0"

# The evaluation harness writes run directories and plots: it loads on first use, so that importing the library
# loads no harness, plotting or command-line module.
_LAZY = {"EvalConfig": "apps.evaluation", "evaluate": "apps.evaluation"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ADPPurifier",
    "DefendedModel",
    "DenoisedSmoothingPurifier",
    "EDMScore",
    "EOTClassifier",
    "EvalConfig",
    "NCSNv2",
    "ReverseDiffusionPurifier",
    "ScoreNormDetector",
    "VPScore",
    "certify",
    "certify_approximate",
    "dsm_loss",
    "evaluate",
    "from_diffusers",
    "geometric_sigmas",
    "load_score_model",
    "median_heuristic_sigma",
    "purify",
    "recommend_sigmas",
    "save_score_model",
    "train_score_model",
]
