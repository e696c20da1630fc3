"""SPSA: the paper's black-box attack, torchattacks' implementation over the defended model."""

from __future__ import annotations

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import number, positive_int
from ..defended import DefendedModel
from ._core import gradient_mode, labels

__all__ = ["BlackBoxSPSA"]


class BlackBoxSPSA(EvasionAttack):
    """
    SPSA (Spall 1992; Uesato et al. 2018): gradient-free, the loss gradient estimated from ``samples_per_step`` random
    ±1 directions per step by finite differences of the defended model's output, then an Adam step projected
    onto the ℓ∞ ball. Runs torchattacks' ``SPSA`` (margin loss) over
    ``DefendedModel.from_estimator(estimator, ensemble_size=1)`` -- the estimator's whole chain (defences,
    standardisation, model) with one purification per query, so every query sees fresh purification noise, as a
    black-box attacker would.

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 3 uses 1,280 samples per step)

    torchattacks draws the directions from torch's global generator; ``seed`` seeds it inside
    ``torch.random.fork_rng``, so the caller's global state is left as it was.

    :param estimator: A ``PyTorchClassifier`` with ``clip_values=(0, 1)`` (torchattacks clips to [0, 1]).
    :param eps: ℓ∞ radius.
    :param eps_step: Adam learning rate (the step size).
    :param max_iter: SPSA steps (the paper does not state them; 40 as for BPDA).
    :param samples_per_step: Finite-difference directions per step (1,280 in the paper); 2 × ``samples_per_step``
        queries (torchattacks' ``nb_sample``).
    :param delta: Finite-difference radius.
    :param batch_size: Images per forward pass (examples × directions).
    :param seed: Seed of the directions, or None to use torch's global generator as it is.
    :param verbose: Unused (torchattacks shows no progress).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "spsa"

    attack_params = EvasionAttack.attack_params + [
        "eps",
        "eps_step",
        "max_iter",
        "samples_per_step",
        "delta",
        "batch_size",
        "seed",
        "verbose",
    ]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        eps: float = 8 / 255,
        eps_step: float = 2 / 255,
        max_iter: int = 40,
        samples_per_step: int = 1280,
        delta: float = 0.01,
        batch_size: int = 4096,
        seed: int | None = 0,
        verbose: bool = False,
    ) -> None:
        super().__init__(estimator=estimator)
        self.eps = eps
        self.eps_step = eps_step
        self.max_iter = max_iter
        self.samples_per_step = samples_per_step
        self.delta = delta
        self.batch_size = batch_size
        self.seed = seed
        self.verbose = verbose
        self._check_params()

    def _check_params(self) -> None:
        for name in ("eps", "eps_step", "delta"):
            number(name, getattr(self, name), low=0, low_open=True)
        for name in ("max_iter", "samples_per_step", "batch_size"):
            positive_int(name, getattr(self, name))
        clip = self.estimator.clip_values
        if clip is None or tuple(float(c) for c in clip) != (0.0, 1.0):
            raise ValueError(
                f"SPSA (torchattacks) clips to [0, 1]; the estimator's clip_values are {clip}; rescale "
                "the data to [0, 1]."
            )

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in [0, 1].
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs within ε (ℓ∞) of ``x``, in [0, 1].
        """
        import torchattacks

        y = labels(self.estimator, x, y)
        device = self.estimator.device
        xt = torch.as_tensor(x, dtype=torch.float32, device=device)
        yt = torch.as_tensor(y, device=device)
        model = DefendedModel.from_estimator(self.estimator, ensemble_size=1)  # one purification per query
        attack = torchattacks.SPSA(
            model,
            eps=self.eps,
            delta=self.delta,
            lr=self.eps_step,
            nb_iter=self.max_iter,
            nb_sample=self.samples_per_step,
            max_batch_size=max(1, min(self.samples_per_step, self.batch_size // max(len(x), 1))),
        )
        devices = [device] if device.type == "cuda" else []
        with gradient_mode(self.estimator, "bpda"), torch.random.fork_rng(devices=devices):
            if self.seed is not None:
                torch.manual_seed(self.seed)
            x_adv = attack(xt, yt)
        x_adv = (xt + (x_adv - xt).clamp(-self.eps, self.eps)).clamp(0, 1)  # exact ball despite float rounding
        return x_adv.detach().cpu().numpy().astype(x.dtype, copy=False)
