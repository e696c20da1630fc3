"""Joint attack (score): half a step along the score, half along the classifier gradient (Table 1)."""

from __future__ import annotations

import torch

from ..ensemble import eot_gradient, logits
from ._core import JointAttack, cross_entropy, normalize

__all__ = ["JointScore"]


class JointScore(JointAttack):
    """
    x_{i+1} = Π(x_i + α (w · sign s_θ(x_i) + (1 − w) · sign ĝ_i)): the score direction drives x_i where the score
    norm is low, so purification leaves it alone, while ĝ_i ascends the classifier loss. ĝ_i is the BPDA+EOT
    gradient (the classifier's gradient at ``eot_samples`` purifications of x_i, averaged), as in the paper's
    "Joint (score)+EOT" row; Table 1 writes the gradient at x_i itself, which ``eot_samples=0`` selects (the
    classifier behind the estimator's standardisation, without the purifier).

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1 and Table 3; w = 0.5)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``.
    :param weight: w in [0, 1], the share of the score direction (0.5 in the paper).
    :param eot_samples: Purifications per classifier gradient (0: gradient at x_i, no purification).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.PGDEOT`.
    :param num_random_init, check_every, judgement, judge_draws: Restarts and the best iterate, judged on draws of
        its own, as in :class:`~art_adp.attacks._core.IterativeAttack` (defaults: one run, every
        :data:`~art_adp.attacks._core.CHECK_EVERY` iterations, the ensemble's mean of
        :data:`~art_adp.attacks._core.JUDGE_DRAWS` draws).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "joint-score"

    min_eot_samples = 0

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            score = self.purifier.score_model(x_adv.to(self.purifier.device)).to(x_adv)
        if self.eot_samples == 0:
            g, _ = eot_gradient(
                lambda z: logits(self.estimator, z, defended=False), x_adv, y, cross_entropy, 1, batch_size=len(x_adv)
            )
        else:
            g, _ = eot_gradient(
                lambda z: logits(self.estimator, z),
                x_adv,
                y,
                cross_entropy,
                self.eot_samples,
                batch_size=self.batch_size,
            )
        return self.weight * normalize(score, self.norm) + (1 - self.weight) * normalize(g, self.norm)
