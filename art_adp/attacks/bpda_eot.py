"""BPDA+EOT: identity backward through purification, expectation over the purifier's noise (Table 1, "BPDA")."""

from __future__ import annotations

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from ._core import IterativeAttack, cross_entropy, defended_logits, eot_gradient, normalize

__all__ = ["BPDAEOT"]

AGGREGATES = ("mean", "sign")


class BPDAEOT(IterativeAttack):
    """
    x_{i+1} = Π(x_i + α sign E_k[∇_x L(g_φ(x), y)|_{x = f_θ^{(k)}(x_i)}]): the classifier's gradient at each of
    ``eot_samples`` purifications of x_i (BPDA, Athalye et al. 2018: f_θ's backward pass is the identity), averaged
    (EOT). The k purifications run as one stacked batch per pass. The estimator's ADPPurifiers are switched to
    ``gradient="bpda"`` while attacking and restored afterwards.

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 3: 40 iterations, 15 EOT samples,
      ℓ∞ ε = 8/255, α = 2/255)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``.
    :param eot_samples: Purifications per gradient (15 in the paper).
    :param aggregate: ``"mean"`` (mean of the EOT gradients, the expected loss's gradient) or ``"sign"`` (the
        authors' code: a vote, Σ_k sign ∇_k).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.ClassifierPGD`;
        ``batch_size`` counts images per forward pass (examples × EOT copies).
    """

    attack_params = IterativeAttack.attack_params + ["eot_samples", "aggregate"]
    mode = "bpda"

    def __init__(self, estimator: PyTorchClassifier, *, norm=np.inf, eps: float = 8 / 255,
                 eps_step: float = 2 / 255, max_iter: int = 40, eot_samples: int = 15, aggregate: str = "mean",
                 batch_size: int = 512, verbose: bool = False) -> None:
        self.eot_samples = eot_samples
        self.aggregate = aggregate
        super().__init__(estimator, norm=norm, eps=eps, eps_step=eps_step, max_iter=max_iter, batch_size=batch_size,
                         verbose=verbose)

    def _check_params(self) -> None:
        super()._check_params()
        if isinstance(self.eot_samples, bool) or not (isinstance(self.eot_samples, int) and self.eot_samples >= 1):
            raise ValueError(f"eot_samples must be an integer >= 1, got {self.eot_samples!r}.")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {self.aggregate!r}.")

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        g, _ = eot_gradient(lambda z: defended_logits(self.estimator, z), x_adv, y, cross_entropy, self.eot_samples,
                            max_batch=self.batch_size, aggregate=self.aggregate)
        return normalize(g, self.norm)
