"""The generative side: the score network, σ schedules, the DSM loss, training and checkpoints.

Nothing here knows about ART, attacks or the CLI; everything downstream sees only ``score_model(x) -> h(x)``.
"""

from .checkpoint import load_score_model, save_score_model
from .dsm import dsm_loss
from .import_ncsnv2 import import_ncsnv2
from .ncsnv2 import NCSNv2
from .sigmas import geometric_sigmas, median_heuristic_sigma, recommend_sigmas
from .train import train_score_model

__all__ = [
    "NCSNv2",
    "dsm_loss",
    "geometric_sigmas",
    "import_ncsnv2",
    "load_score_model",
    "median_heuristic_sigma",
    "recommend_sigmas",
    "save_score_model",
    "train_score_model",
]
