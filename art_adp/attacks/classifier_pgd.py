"""Classifier PGD: the paper's preprocessor-blind attack (Table 1, "Classifier PGD")."""

from __future__ import annotations

import torch

from ..ensemble import eot_gradient, logits
from ._core import IterativeAttack, cross_entropy, normalize

__all__ = ["ClassifierPGD"]


class ClassifierPGD(IterativeAttack):
    """
    PGD on the bare classifier g_φ, blind to the purifier: x_{i+1} = Π(x_i + α sign ∇_x L(g_φ(x_i), y)).
    Judge its output on the defended estimator (a transfer attack from g_φ to g_φ ∘ f_θ).

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 2's preprocessor-blind row)

    :param estimator: A ``PyTorchClassifier``; its preprocessing defences are ignored, its model is attacked as the
        estimator sees it (behind its standardisation ``preprocessing=(mean, std)``).
    :param norm: ``np.inf`` or ``2``.
    :param eps: Radius ε of the threat model.
    :param eps_step: Step α per iteration.
    :param max_iter: Iterations.
    :param random_start: Start from a uniform draw in the ε-ball (the default) instead of x₀.
    :param generator: The ``torch.Generator`` of that draw (CPU; default: torch's).
    :param batch_size: Examples per batch.
    :param verbose: Show progress.
    :param num_random_init, check_every, judgement, judge_draws: Restarts and the best iterate, judged on draws of
        its own, as in :class:`~art_adp.attacks._core.IterativeAttack` (defaults: one run, every
        :data:`~art_adp.attacks._core.CHECK_EVERY` iterations, the bare classifier: the
        attack's aim).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "clf-pgd"
    #: The iterates are judged on the bare classifier, the one this attack is aimed at.
    judged_defended = False

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        g, _ = eot_gradient(
            lambda z: logits(self.estimator, z, defended=False), x_adv, y, cross_entropy, 1, batch_size=len(x_adv)
        )
        return normalize(g, self.norm)
