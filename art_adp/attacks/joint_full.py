"""Joint attack (full): half a step along the purification displacement, half along the classifier gradient."""

from __future__ import annotations

import torch

from ..ensemble import eot_gradient, logits, stack_draws
from ._core import JointAttack, cross_entropy, normalize

__all__ = ["JointFull"]


class JointFull(JointAttack):
    """
    x_{i+1} = Π(x_i + α (w · sign E_k[f_θ^{(k)}(x_i) − x_i] + (1 − w) · sign ĝ_i)): move x_i where purification
    would take it anyway, while ĝ_i, the classifier's gradient at the same ``eot_samples`` purifications (BPDA),
    averaged, ascends the loss. Each step purifies the k stacked copies once and reuses them for both terms; the
    classifier is the one behind the estimator's standardisation (``preprocessing=(mean, std)``).

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1 and Table 3, "Joint (full)+EOT"; w = 0.5)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``.
    :param weight: w in [0, 1], the share of the displacement direction (0.5 in the paper).
    :param eot_samples: Purifications per step (≥ 1).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.PGDEOT`.
    :param num_random_init, check_every, judgement, judge_draws: Restarts and the best iterate, judged on draws of
        its own, as in :class:`~art_adp.attacks._core.IterativeAttack` (defaults: one run, every
        :data:`~art_adp.attacks._core.CHECK_EVERY` iterations, the ensemble's mean of
        :data:`~art_adp.attacks._core.JUDGE_DRAWS` draws).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "joint-full"

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        k = self.eot_samples
        with torch.no_grad():
            purified = stack_draws(lambda rows: self.purifier.forward(rows)[0], x_adv, k, batch_size=self.batch_size)
        displacement = (purified - x_adv).mean(0)
        purified = purified.flatten(0, 1)
        g, _ = eot_gradient(
            lambda z: logits(self.estimator, z, defended=False),
            purified,
            y.repeat(k),
            cross_entropy,
            1,
            batch_size=len(purified),
        )
        g = g.view(k, *x_adv.shape).mean(0)
        return self.weight * normalize(displacement, self.norm) + (1 - self.weight) * normalize(g, self.norm)
