"""SPSA: the paper's black-box attack, torchattacks' implementation over the defended model."""

from __future__ import annotations

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from ..defended import DefendedModel
from ._core import gradient_mode, labels

__all__ = ["SPSA"]


class SPSA(EvasionAttack):
    """
    SPSA (Spall 1992; Uesato et al. 2018): gradient-free, the loss gradient estimated from ``nb_sample`` random
    ±1 directions per step by finite differences of the defended model's output, then an Adam step projected
    onto the ℓ∞ ball. Runs torchattacks' ``SPSA`` (margin loss) over
    ``DefendedModel.from_estimator(estimator, runs=1)`` -- the estimator's whole chain (defences, standardisation,
    model) with one purification per query, so every query sees fresh purification noise, as a black-box attacker
    would.

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 3 uses 1,280 samples per step)

    torchattacks draws the directions from torch's global generator; ``seed`` seeds it inside
    ``torch.random.fork_rng``, so the caller's global state is left as it was.

    :param estimator: A ``PyTorchClassifier`` with ``clip_values=(0, 1)`` (torchattacks clips to [0, 1]).
    :param eps: ℓ∞ radius.
    :param eps_step: Adam learning rate (the step size).
    :param max_iter: SPSA steps (the paper does not state them; 40 as for BPDA).
    :param nb_sample: Finite-difference directions per step (1,280 in the paper); 2 × ``nb_sample`` queries.
    :param delta: Finite-difference radius.
    :param batch_size: Images per forward pass (examples × directions).
    :param seed: Seed of the directions, or None to use torch's global generator as it is.
    :param verbose: Unused (torchattacks shows no progress).
    """

    attack_params = EvasionAttack.attack_params + ["eps", "eps_step", "max_iter", "nb_sample", "delta",
                                                   "batch_size", "seed", "verbose"]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(self, estimator: PyTorchClassifier, *, eps: float = 8 / 255, eps_step: float = 2 / 255,
                 max_iter: int = 40, nb_sample: int = 1280, delta: float = 0.01, batch_size: int = 4096,
                 seed: int | None = 0, verbose: bool = False) -> None:
        super().__init__(estimator=estimator)
        self.eps = eps
        self.eps_step = eps_step
        self.max_iter = max_iter
        self.nb_sample = nb_sample
        self.delta = delta
        self.batch_size = batch_size
        self.seed = seed
        self.verbose = verbose
        self._check_params()

    def _check_params(self) -> None:
        for name in ("eps", "eps_step", "delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be a number > 0, got {value!r}.")
        for name in ("max_iter", "nb_sample", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        clip = self.estimator.clip_values
        if clip is None or tuple(float(c) for c in clip) != (0.0, 1.0):
            raise ValueError(f"SPSA (torchattacks) clips to [0, 1]; the estimator's clip_values are {clip}; rescale "
                             "the data to [0, 1].")

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
        model = DefendedModel.from_estimator(self.estimator, runs=1)  # one purification per query
        attack = torchattacks.SPSA(model, eps=self.eps, delta=self.delta, lr=self.eps_step,
                                   nb_iter=self.max_iter, nb_sample=self.nb_sample,
                                   max_batch_size=max(1, min(self.nb_sample, self.batch_size // max(len(x), 1))))
        devices = [device] if device.type == "cuda" else []
        with gradient_mode(self.estimator, "bpda"), torch.random.fork_rng(devices=devices):
            if self.seed is not None:
                torch.manual_seed(self.seed)
            x_adv = attack(xt, yt)
        x_adv = (xt + (x_adv - xt).clamp(-self.eps, self.eps)).clamp(0, 1)  # exact ball despite float rounding
        return x_adv.detach().cpu().numpy().astype(x.dtype, copy=False)
