"""Selective EOT: DiffHammer's EM-weighted gradient over purification draws, against the gradient dilemma."""

from __future__ import annotations

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import memory_budget as check_memory_budget, non_negative_int, number, one_of, positive_int
from ..ensemble import draw_gradients, logits
from ._core import DEFAULT_GRADIENT, GRADIENTS, IterativeAttack, cross_entropy, normalize, project

__all__ = ["SelectiveEOT", "selective_gradient"]


def selective_gradient(
    grads: torch.Tensor, losses: torch.Tensor, *, em_steps: int, em_lambda: float, eps_step: float, norm
) -> torch.Tensor:
    """
    DiffHammer's E and M steps over N draws of each example: the direction r starts at the gradient of the draw with
    the largest loss (the one nearest to broken); then ``em_steps`` times

        E:  w_k = softmax_k(λ ℓ̂_k),   ℓ̂_k = ℓ_k + α ⟨d(r), g_k⟩   (draw k's loss predicted after one step along r)
        M:  r = Σ_k w_k g_k

    where d(r) is the step direction (sign r for ℓ∞, r/‖r‖₂ for ℓ2) and α ``eps_step``. The weights put the draws on
    which one step breaks the example first, so draws whose gradients point the other way no longer cancel them
    (EOT's mean, ``em_lambda = 0``, weighs every draw alike).

    :param grads: ``N×B×C×H×W``, the loss gradient of each draw of each example.
    :param losses: ``N×B``, each draw's loss.
    :param em_steps: E/M iterations (0: the largest-loss draw's gradient).
    :param em_lambda: λ ≥ 0, the inverse temperature of the posterior over draws.
    :param eps_step: α, the step the prediction looks ahead.
    :param norm: ``np.inf`` or ``2``.
    :return: ``B×C×H×W``, the selective gradient r.
    """
    n, b = losses.shape
    r = grads[losses.argmax(0), torch.arange(b, device=grads.device)]
    for _ in range(em_steps):
        ahead = losses + eps_step * (grads * normalize(r, norm)).flatten(2).sum(2)  # E: ℓ̂_k
        w = torch.softmax(em_lambda * ahead, dim=0)
        r = (w.view(n, b, *([1] * (grads.ndim - 2))) * grads).sum(0)  # M
    return r


class SelectiveEOT(IterativeAttack):
    """
    DiffHammer's selective attack: PGD from a random start whose direction at each iterate is the
    :func:`selective_gradient` of ``eot_samples`` purification draws -- the per-draw losses and gradients (through
    purification, ``gradient="full"``, or straight-through, ``"bpda"``) weighted by an E-step towards the draws on
    which the example is nearly broken, instead of EOT's mean, in which draws that disagree cancel (the gradient
    dilemma). x_{i+1} = Π(x_i + α d(r_i)).

    Judge it as DiffHammer does, by N-evaluation (broken if any of N resubmissions fails): the evaluation card's
    worst case over R judgements. Per-draw gradients are computed in blocks of draws within ``memory_budget``
    (:func:`art_adp.ensemble.draw_gradients`); they hold ``eot_samples`` input-sized gradients per example.

    | Paper link: Wang, Fu, Han & Xiang, "DiffHammer: Rethinking the Robustness of Diffusion-Based Adversarial
      Purification", NeurIPS 2024 (N = 10 resubmissions; the EM selection of vulnerable purifications). Our
      E-step is a softmax posterior over the draws; the defaults are ours.

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[purifier])`` (ADP, reverse diffusion,
        denoised smoothing; switched to ``gradient`` while attacking).
    :param gradient: ``"full"`` (through purification) or ``"bpda"``.
    :param eot_samples: N, purification draws per iterate.
    :param em_steps: E/M iterations per iterate.
    :param em_lambda: λ, the E-step's inverse temperature on the per-draw (cross-entropy) losses.
    :param seed: Seed of the random start (uniform in the ℓ∞ ball; for ℓ2 a uniform direction at a uniform radius).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.PGDEOT`.
    :param memory_budget: MiB of autograd graph per block of draws (None:
        :func:`art_adp.ensemble.default_memory_budget`).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "selective-eot"
    #: Aimed at DiffHammer's N-evaluation: the best iterate is judged by the worst of ``judge_draws`` draws.
    aim = "worst"
    attack_params = IterativeAttack.attack_params + [
        "gradient",
        "eot_samples",
        "em_steps",
        "em_lambda",
        "memory_budget",
        "seed",
    ]

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        gradient: str = DEFAULT_GRADIENT,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float = 2 / 255,
        max_iter: int = 40,
        eot_samples: int = 10,
        em_steps: int = 3,
        em_lambda: float = 5.0,
        batch_size: int = 512,
        memory_budget: float | None = None,
        seed: int = 0,
        verbose: bool = False,
    ) -> None:
        self.gradient = gradient
        self.eot_samples = eot_samples
        self.em_steps = em_steps
        self.em_lambda = em_lambda
        self.memory_budget = memory_budget
        self.seed = seed
        self._generator: torch.Generator | None = None
        super().__init__(
            estimator, norm=norm, eps=eps, eps_step=eps_step, max_iter=max_iter, batch_size=batch_size, verbose=verbose
        )

    @property
    def mode(self) -> str:
        """The purifier gradient mode set while attacking: ``gradient``."""
        return self.gradient

    def _check_params(self) -> None:
        super()._check_params()
        one_of("gradient", self.gradient, GRADIENTS)
        positive_int("eot_samples", self.eot_samples)
        non_negative_int("em_steps", self.em_steps)
        number("em_lambda", self.em_lambda, low=0)
        check_memory_budget(self.memory_budget)
        non_negative_int("seed", self.seed)

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs, within ε of ``x`` and inside ``clip_values``.
        """
        self._generator = torch.Generator(self.estimator.device).manual_seed(self.seed)
        return super().generate(x, y)

    def _start(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """A random start in the ε-ball (clipped), always (DiffHammer's), from the attack's own seeded generator."""
        if self._generator is None:
            self._generator = torch.Generator(x.device).manual_seed(self.seed)
        shape = (len(x), *x.shape[1:])
        if self.norm == np.inf:
            delta = self.eps * (2 * torch.rand(shape, generator=self._generator, device=x.device) - 1)
        else:
            radius = self.eps * torch.rand(len(x), generator=self._generator, device=x.device)
            delta = normalize(torch.randn(shape, generator=self._generator, device=x.device), 2)
            delta = delta * radius.view(-1, *([1] * (x.ndim - 1)))
        return project(x + delta.to(x.dtype), x, self.eps, self.norm, clip)

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        grads, losses = draw_gradients(
            lambda z: logits(self.estimator, z),
            x_adv,
            y,
            cross_entropy,
            self.eot_samples,
            batch_size=self.batch_size,
            memory_budget=self.memory_budget,
        )
        r = selective_gradient(
            grads, losses, em_steps=self.em_steps, em_lambda=self.em_lambda, eps_step=self.eps_step, norm=self.norm
        )
        return normalize(r, self.norm)
