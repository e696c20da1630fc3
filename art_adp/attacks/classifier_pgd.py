"""Clf-PGD: the paper's preprocessor-blind attack (Table 1, "Classifier PGD"), ART's own PGD on the bare classifier."""

from __future__ import annotations

import numpy as np
from art.attacks.evasion import ProjectedGradientDescent

from .._checks import number
from ..ensemble import undefended
from ._core import seeded_numpy

__all__ = ["ClassifierPGD"]


class ClassifierPGD(ProjectedGradientDescent):
    """
    PGD on the bare classifier g_φ, blind to the purifier: x_{i+1} = Π(x_i + α sign ∇_x L(g_φ(x_i), y)), ART's
    ``ProjectedGradientDescent`` on the estimator without its preprocessing defences (:func:`~art_adp.ensemble.
    undefended`: its standardisation kept). Judge its output on the defended estimator: a transfer attack from g_φ to
    g_φ ∘ f_θ; on an undefended estimator it is ART's white-box PGD. Its random start is drawn from ``seed``
    (:func:`~art_adp.attacks._core.seeded_numpy`: the caller's NumPy draws are left as they were).

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 2's preprocessor-blind row)

    :param estimator: A ``PyTorchClassifier``, defended or not.
    :param seed: The seed of the random start.
    :param num_random_init: ART's: runs from a random start, the best kept (0: one run from the image); 1 by default,
        as every PGD of this package starts at random unless told otherwise.
    Every other parameter is ART's (``norm``, ``eps``, ``eps_step``, ``max_iter``, ``batch_size``, ...).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "clf-pgd"

    attack_params = ProjectedGradientDescent.attack_params + ["seed"]

    def __init__(self, estimator, *, seed: int = 0, num_random_init: int = 1, **kwargs):
        number("eps", kwargs.get("eps", 0.3), low=0, low_open=True)  # ART's PGD takes ε = 0 (no attack): refused
        super().__init__(undefended(estimator), num_random_init=num_random_init, **kwargs)
        self.seed = seed

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        with seeded_numpy(self.seed):
            return super().generate(x, y=y, **kwargs).astype(np.float32)
