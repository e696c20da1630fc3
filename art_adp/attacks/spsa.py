"""SPSA: the paper's black-box attack, torchattacks' implementation over the defended model."""

from __future__ import annotations

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import number, positive_int
from ..defended import DefendedModel
from ._core import JUDGE_DRAWS, gradient_mode, labels
from .best_iterate import BestIterate, derived_seed

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
    :param judge_draws: Each image returns the iterate the S-draw ensemble's judgement (``judge_draws`` purification
        draws of its own, the same at every step; :mod:`~art_adp.attacks.best_iterate`) finds most broken -- every
        step's, the start's included -- not torchattacks' last iterate. A judgement costs ``judge_draws`` forward
        passes against a step's 2 × ``samples_per_step``.
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
        "judge_draws",
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
        judge_draws: int = JUDGE_DRAWS,
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
        self.judge_draws = judge_draws
        self.verbose = verbose
        self._check_params()

    def _check_params(self) -> None:
        for name in ("eps", "eps_step", "delta"):
            number(name, getattr(self, name), low=0, low_open=True)
        for name in ("max_iter", "samples_per_step", "batch_size", "judge_draws"):
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
        best = BestIterate(self.estimator, yt, draws=self.judge_draws, batch_size=self.batch_size,
                           seed=derived_seed(0 if self.seed is None else self.seed, "best-iterate"))  # fmt: skip
        attack = _OfferingSPSA(
            model,
            best,
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
            best.offer(xt)
            attack(xt, yt)
        assert best.x is not None
        x_adv = (xt + (best.x - xt).clamp(-self.eps, self.eps)).clamp(0, 1)  # exact ball despite float rounding
        return x_adv.detach().cpu().numpy().astype(x.dtype, copy=False)


def _offering_spsa():
    """torchattacks' ``SPSA`` whose every iterate is offered to a best-iterate rule (its loop, unchanged otherwise)."""
    import torchattacks

    class OfferingSPSA(torchattacks.SPSA):
        def __init__(self, model, best: BestIterate, **kwargs) -> None:
            super().__init__(model, **kwargs)
            self.best = best

        def spsa_perturb(self, x, y):  # torchattacks 3.5.1's loop, offering each iterate
            dx = torch.zeros_like(x)
            dx.grad = torch.zeros_like(dx)
            optimizer = torch.optim.Adam([dx], lr=self.lr)
            for _ in range(self.nb_iter):
                optimizer.zero_grad()
                dx.grad = self.spsa_grad(x + dx, y, self.delta, self.nb_sample, self.max_batch_size)
                optimizer.step()
                dx = self.linf_clamp_(dx, x, self.eps)
                self.best.offer(x + dx.detach())
            return x + dx

    return OfferingSPSA


def _OfferingSPSA(model, best, **kwargs):  # noqa: N802 -- built on first use: torchattacks is optional
    return _offering_spsa()(model, best, **kwargs)
