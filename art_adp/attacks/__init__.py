"""Attacks on ADP, one per module, as ART ``EvasionAttack`` subclasses (Table 1 of https://arxiv.org/abs/2106.06041,
plus the strongest adaptive attacks of Croce et al. 2022, https://arxiv.org/abs/2202.13711, and of the later
re-evaluations of diffusion purification: DiffAttack's purified-state loss, DiffHammer's selective EOT, a low-frequency
attack on the majority vote run with DiffBreak's loop, Kassis et al. 2025, https://arxiv.org/abs/2411.16598).

Every attack takes an ART ``PyTorchClassifier`` -- with ``preprocessing_defences=[ADPPurifier(...)]`` for the
defended model -- sets the purifier gradient mode it needs while it runs and restores it, and returns inputs
inside the ε-ball and ``clip_values``.
"""

from .apgd_eot import APGDEOT, APGDEOTDev, APGDEOTEnsemble
from .apgd_eot_t import APGDEOTT
from .autoattack import AutoAttackStandard
from .classifier_pgd import ClassifierPGD
from .fixed_noise_pgd import FixedNoisePGD
from .joint_full import JointFull
from .joint_score import JointScore
from .pgd_eot import PGDEOT, PGDEOTDev, PGDEOTEnsemble
from .purified_state_loss import PurifiedStateLoss
from .selective_eot import SelectiveEOT
from .evade_detector import EvadeDetectorLoss
from .spsa import BlackBoxSPSA
from .systemic_lowfreq import LowFrequencyVote, SystemicLowFrequency

__all__ = [
    "APGDEOT",
    "APGDEOTDev",
    "APGDEOTEnsemble",
    "APGDEOTT",
    "AutoAttackStandard",
    "BlackBoxSPSA",
    "ClassifierPGD",
    "EvadeDetectorLoss",
    "FixedNoisePGD",
    "JointFull",
    "JointScore",
    "LowFrequencyVote",
    "PGDEOT",
    "PGDEOTDev",
    "PGDEOTEnsemble",
    "PurifiedStateLoss",
    "SelectiveEOT",
    "SystemicLowFrequency",
]
