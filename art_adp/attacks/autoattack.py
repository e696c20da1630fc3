"""AutoAttack, standard version (Croce & Hein 2020), as an ART evasion attack over torchattacks' port of the reference
code: the baseline's attack (an adversarially trained classifier, no randomized defence)."""

from __future__ import annotations

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import number
from ._core import labels

__all__ = ["AutoAttackStandard"]


class AutoAttackStandard(EvasionAttack):
    """
    AutoAttack's standard version at ℓ∞ ``eps``: APGD-CE, APGD-T, FAB-T and Square (5,000 queries), each on the images
    the previous left robust -- torchattacks' ``AutoAttack(version="standard")`` over the estimator's whole chain
    (defences, standardisation, model). On a randomized defence it is no adaptive attack (each query sees a fresh
    draw): use APGD-EOT there.

    | Paper link: https://arxiv.org/abs/2003.01690

    ART's own ``AutoAttack`` defaults to another list (APGD-CE and APGD-DLR × 5 restarts, DeepFool, Square 5 × 5,000)
    whose Square loops over images in Python: 0.36 s per query round for 150 Fashion-MNIST images (AMD EPYC, AVX2, one
    thread, fp32; torchattacks' Square 0.11 s), hours per robust classifier.

    :param estimator: A ``PyTorchClassifier`` with ``clip_values=(0, 1)`` (torchattacks clips to [0, 1]).
    :param eps: ℓ∞ radius.
    :param seed: The seed of its random starts and queries (taken modulo 2³¹); torch's global state is left as it was.
    :param verbose: Unused (torchattacks shows no progress).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "autoattack"

    attack_params = EvasionAttack.attack_params + ["eps", "seed", "verbose"]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(self, estimator, eps: float = 8 / 255, seed: int = 0, verbose: bool = False):
        super().__init__(estimator=estimator)
        self.eps, self.seed, self.verbose = eps, seed, verbose
        self._check_params()

    def _check_params(self) -> None:
        number("eps", self.eps, low=0.0)
        if not isinstance(self.seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {self.seed!r}.")

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """Adversarial examples of ``x`` (labels ``y``: class indices or one-hot; None: the estimator's predictions)."""
        import torchattacks

        from ..ensemble import EstimatorLogits

        est = self.estimator
        model = est.model if not est.preprocessing_operations else EstimatorLogits(est)
        dev = est.device
        y = labels(est, x, y)
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            attack = torchattacks.AutoAttack(model.eval(), norm="Linf", eps=self.eps, version="standard",
                                             n_classes=est.nb_classes, seed=int(self.seed) % 2**31)  # fmt: skip
            xa = attack(torch.as_tensor(x, dtype=torch.float32, device=dev), torch.as_tensor(y, device=dev).long())
        return xa.detach().cpu().numpy().astype(np.float32)
