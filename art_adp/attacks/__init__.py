"""Attacks on ADP, one per module, as ART ``EvasionAttack`` subclasses (Table 1 of https://arxiv.org/abs/2106.06041,
plus the strongest adaptive attacks of Croce et al. 2022, https://arxiv.org/abs/2202.13711).

Every attack takes an ART ``PyTorchClassifier`` -- with ``preprocessing_defences=[ADPPurifier(...)]`` for the
defended model -- sets the purifier gradient mode it needs while it runs and restores it, and returns inputs
inside the ε-ball and ``clip_values``.
"""

from .apgd_eot import APGDEOT
from .bpda_eot import BPDAEOT
from .classifier_pgd import ClassifierPGD
from .full_pgd_eot import FullGradientPGDEOT
from .joint_full import JointFull
from .joint_score import JointScore
from .spsa import SPSA

__all__ = ["APGDEOT", "BPDAEOT", "ClassifierPGD", "FullGradientPGDEOT", "JointFull", "JointScore", "SPSA"]
