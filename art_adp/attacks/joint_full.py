"""Joint attack (full): half a step along the purification displacement, half along the classifier gradient."""

from __future__ import annotations

import torch

from ._core import JointAttack, cross_entropy, eot_gradient, normalize

__all__ = ["JointFull"]


class JointFull(JointAttack):
    """
    x_{i+1} = Π(x_i + α (w · sign E_k[f_θ^{(k)}(x_i) − x_i] + (1 − w) · sign ĝ_i)): move x_i where purification
    would take it anyway, while ĝ_i, the classifier's gradient at the same ``eot_samples`` purifications (BPDA),
    averaged, ascends the loss. Each step purifies the k stacked copies once and reuses them for both terms.

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1 and Table 3, "Joint (full)+EOT"; w = 0.5)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``.
    :param weight: w in [0, 1], the share of the displacement direction (0.5 in the paper).
    :param eot_samples: Purifications per step (≥ 1).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.BPDAEOT`.
    """

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n, k = x_adv.shape[0], self.eot_samples
        with torch.no_grad():
            copies = x_adv.repeat(k, *([1] * (x_adv.ndim - 1)))
            purified = torch.cat([self.purifier.forward(c)[0] for c in copies.split(max(self.batch_size, n))])
        displacement = (purified.view(k, *x_adv.shape) - x_adv).mean(0)
        g, _ = eot_gradient(self.estimator.model, purified, y.repeat(k), cross_entropy, 1, max_batch=len(purified))
        g = g.view(k, *x_adv.shape).mean(0)
        return self.weight * normalize(displacement, self.norm) + (1 - self.weight) * normalize(g, self.norm)
