"""Joint attack (full): half a step along the purification displacement, half along the classifier gradient."""

from __future__ import annotations

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from ._core import IterativeAttack, cross_entropy, eot_gradient, normalize, the_purifier

__all__ = ["JointFull"]


class JointFull(IterativeAttack):
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

    attack_params = IterativeAttack.attack_params + ["weight", "eot_samples"]
    mode = "bpda"

    def __init__(self, estimator: PyTorchClassifier, *, norm=np.inf, eps: float = 8 / 255,
                 eps_step: float = 2 / 255, max_iter: int = 40, weight: float = 0.5, eot_samples: int = 15,
                 batch_size: int = 512, verbose: bool = False) -> None:
        self.weight = weight
        self.eot_samples = eot_samples
        super().__init__(estimator, norm=norm, eps=eps, eps_step=eps_step, max_iter=max_iter, batch_size=batch_size,
                         verbose=verbose)
        self.purifier = the_purifier(estimator, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        if not 0 <= self.weight <= 1:
            raise ValueError(f"weight must lie in [0, 1], got {self.weight!r}.")
        if isinstance(self.eot_samples, bool) or not (isinstance(self.eot_samples, int) and self.eot_samples >= 1):
            raise ValueError(f"eot_samples must be an integer >= 1, got {self.eot_samples!r}.")

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n, k = x_adv.shape[0], self.eot_samples
        with torch.no_grad():
            copies = x_adv.repeat(k, *([1] * (x_adv.ndim - 1)))
            purified = torch.cat([self.purifier.forward(c)[0] for c in copies.split(max(self.batch_size, n))])
        displacement = (purified.view(k, *x_adv.shape) - x_adv).mean(0)
        g, _ = eot_gradient(self.estimator.model, purified, y.repeat(k), cross_entropy, 1, max_batch=len(purified))
        g = g.view(k, *x_adv.shape).mean(0)
        return self.weight * normalize(displacement, self.norm) + (1 - self.weight) * normalize(g, self.norm)
