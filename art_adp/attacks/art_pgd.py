"""ART's own ℓ∞ PGD, seeded: white-box PGD on the estimator as ART attacks it (through its defences' ``forward``, with
their own gradient), the undefended baselines' PGD rows of the lever tables."""

from __future__ import annotations

import numpy as np
from art.attacks.evasion import ProjectedGradientDescent

__all__ = ["SeededPGD"]


class SeededPGD(ProjectedGradientDescent):
    """
    ART's ``ProjectedGradientDescent`` whose random start is drawn from ``seed``: ART draws it from NumPy's global
    generator, which :meth:`generate` seeds with ``seed`` (modulo 2³²) and restores after, so the caller's global
    state is left as it was and the same seed gives the same examples.

    | Paper link: https://arxiv.org/abs/1706.06083

    :param seed: The seed of the random start (with ``num_random_init`` ≥ 1).
    Every other parameter is ART's.
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "art-pgd"

    attack_params = ProjectedGradientDescent.attack_params + ["seed"]

    def __init__(self, estimator, *, seed: int = 0, **kwargs):
        super().__init__(estimator, **kwargs)
        self.seed = seed

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        state = np.random.get_state()
        try:
            np.random.seed(int(self.seed) % 2**32)
            return super().generate(x, y=y, **kwargs).astype(np.float32)
        finally:
            np.random.set_state(state)
