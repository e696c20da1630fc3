"""PGD with EOT over the purifier's noise: BPDA+EOT or the full gradient through purification (Table 1)."""

from __future__ import annotations

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import memory_budget as check_memory_budget, number, one_of, positive_int
from ._core import DEFAULT_GRADIENT, EOT_TARGETS, GRADIENTS, LOSSES, IterativeAttack, eot_loss_gradient, normalize
from .purified_state_loss import DEV_WEIGHT, PurifiedStateLoss

__all__ = ["PGDEOT", "PGDEOTDev", "PGDEOTEnsemble"]

AGGREGATES = ("mean", "sign")


class PGDEOT(IterativeAttack):
    """
    x_{i+1} = Π(x_i + α sign E_k[∇_x L(g_φ(f_θ^{(k)}(x)), y)]) over ``eot_samples`` purifications f_θ^{(k)}
    of x_i, run as one stacked batch per pass, with the gradient through purification given by ``gradient``:

    - ``"full"``: autograd through every purification step, the injected noise and the adaptive step sizes (the
      white-box attack of Croce et al. 2022). Other PyTorch preprocessors are differentiated as they are (which is
      how a gradient-masking defence shows up: see :mod:`art_adp.apps.evaluation.sanity`). Memory grows with
      the rows of a block × purification steps; the draws run in blocks whose graph fits ``memory_budget``, so it
      does not grow with ``eot_samples`` (:func:`art_adp.ensemble.eot_gradient`).
    - ``"bpda"``: the classifier's gradient at each purified point, f_θ's backward pass the identity (BPDA,
      Athalye et al. 2018) -- the paper's "BPDA+EOT".

    The estimator's ADPPurifiers are switched to ``gradient`` while attacking and restored afterwards.

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1; Table 3: 40 iterations, 15 EOT samples,
      ℓ∞ ε = 8/255, α = 2/255); Croce et al., "Evaluating the Adversarial Robustness of Adaptive Test-time
      Defenses", ICML 2022, https://arxiv.org/abs/2202.13711

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``.
    :param gradient: ``"full"`` (through purification; the default,
        :data:`~art_adp.preprocessor.DEFAULT_GRADIENT`) or ``"bpda"`` (straight-through), as for
        :class:`~art_adp.ADPPurifier` and :class:`~art_adp.attacks.APGDEOT`.
    :param eot_samples: Purifications per gradient (15 in the paper).
    :param loss: ``"ce"`` (cross-entropy) or ``"margin"`` (Carlini & Wagner's max_{j≠y} z_j − z_y), of what
        ``eot_target`` says.
    :param eot_target: ``"draws"`` (the default, the papers'): the mean over the EOT draws of each draw's loss
        (Athalye et al.'s EOT); ``"ensemble"``: the loss of the ensemble the tables judge, the log of the mean softmax
        over the draws (:func:`~art_adp.ensemble.ensemble_gradient`), whose gradient weighs each draw by how much it
        moves the ensemble rather than by how broken it already is (:class:`PGDEOTEnsemble`).
    :param aggregate: ``"mean"`` (mean of the EOT gradients, the expected loss's gradient) or ``"sign"`` (the
        authors' code: a vote, Σ_k sign ∇_k; ``eot_target="draws"`` only).
    :param norm, eps, eps_step, max_iter: ``np.inf`` or ``2``; the radius ε; the step α per iteration; iterations.
    :param random_start: Start from a uniform draw in the ε-ball (the default) instead of x₀.
    :param generator: The ``torch.Generator`` of that draw (CPU; default: torch's).
    :param batch_size: Images per forward pass (examples × EOT copies).
    :param verbose: Show progress.
    :param memory_budget: MiB of autograd graph per block of EOT draws (None:
        :func:`art_adp.ensemble.default_memory_budget`, 512 MiB on a CPU, a quarter of a GPU's free memory).
    :param dev_weight: λ ≥ 0: add λ × the deviation of each draw's purification states (every intermediate state and
        the output) from their clean references to the loss (DiffAttack,
        :class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`); 0, the default: the cross-entropy alone.
        :class:`PGDEOTDev` is this attack with it on.
    :param num_random_init, check_every, judgement, judge_draws: Restarts and the best iterate, judged on draws of
        its own, as in :class:`~art_adp.attacks._core.IterativeAttack` (defaults: one run, every
        :data:`~art_adp.attacks._core.CHECK_EVERY` iterations, the ensemble's mean of
        :data:`~art_adp.attacks._core.JUDGE_DRAWS` draws).
    """

    #: The name in :data:`~art_adp.attacks.registry.REGISTRY` of each gradient mode (:attr:`name`).
    names = {"bpda": "bpda-eot", "full": "full-pgd-eot"}
    attack_params = IterativeAttack.attack_params + [
        "gradient",
        "eot_samples",
        "loss",
        "eot_target",
        "aggregate",
        "memory_budget",
        "dev_weight",
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
        eot_samples: int = 15,
        loss: str = "ce",
        eot_target: str = "draws",
        aggregate: str = "mean",
        random_start: bool = True,
        generator: torch.Generator | None = None,
        batch_size: int = 512,
        memory_budget: float | None = None,
        dev_weight: float = 0.0,
        verbose: bool = False,
        **best,
    ) -> None:
        self.gradient = gradient
        self.dev_weight = dev_weight
        self.loss = loss
        self.eot_target = eot_target
        self._loss: PurifiedStateLoss | None = None
        self.memory_budget = memory_budget
        self.eot_samples = eot_samples
        self.aggregate = aggregate
        super().__init__(
            estimator,
            norm=norm,
            eps=eps,
            eps_step=eps_step,
            max_iter=max_iter,
            random_start=random_start,
            generator=generator,
            batch_size=batch_size,
            verbose=verbose,
            **best,
        )

    @property
    def name(self) -> str:
        """The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`: ``"bpda-eot"`` or
        ``"full-pgd-eot"`` by ``gradient``."""
        return self.names[self.gradient]

    @property
    def mode(self) -> str:
        """The purifier gradient mode set while attacking: ``gradient``."""
        return self.gradient

    def _check_params(self) -> None:
        super()._check_params()
        one_of("gradient", self.gradient, GRADIENTS)
        positive_int("eot_samples", self.eot_samples)
        one_of("aggregate", self.aggregate, AGGREGATES)
        one_of("loss", self.loss, ("ce", "margin"))
        one_of("eot_target", self.eot_target, EOT_TARGETS)
        check_memory_budget(self.memory_budget)
        number("dev_weight", self.dev_weight, low=0)
        if self.eot_target == "ensemble" and (self.aggregate != "mean" or self.dev_weight):
            raise ValueError(
                "eot_target='ensemble' differentiates the ensemble's loss: it takes aggregate='mean' and no "
                "dev_weight (DiffAttack's state loss is per draw); use eot_target='draws' for those."
            )

    def _start(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        weight, loss = self.dev_weight, LOSSES[self.loss]
        self._loss = PurifiedStateLoss(loss, reference=x, dev_weight=weight) if weight else None
        return super()._start(x, y, clip)

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        states = self._loss is not None  # the deviation term: each draw's logits with its purification states
        g, _ = eot_loss_gradient(self.estimator, x_adv, y, self._loss if states else LOSSES[self.loss],
                                 self.eot_samples, target=self.eot_target, batch_size=self.batch_size,
                                 memory_budget=self.memory_budget, aggregate=self.aggregate, states=states)  # fmt: skip
        return normalize(g, self.norm)


class PGDEOTDev(PGDEOT):
    """
    :class:`PGDEOT` with DiffAttack's loss on the purification states on (``dev_weight`` = λ =
    :data:`~art_adp.attacks.purified_state_loss.DEV_WEIGHT` by default): L = CE + λ · mean_t ‖x'_t − x_t‖₂ per draw
    over every intermediate state and the output (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`),
    the purifiers checkpointed step by step. DiffAttack's own optimiser is APGD's (:class:`APGDEOTDev`); this is the
    same loss under PGD's fixed steps. Registered as ``"full-pgd-eot-dev"`` (``gradient="full"``); every other
    parameter is PGDEOT's.

    | Paper link: Kang, Song & Li, NeurIPS 2023, https://arxiv.org/abs/2311.16124
    """

    #: The name in :data:`~art_adp.attacks.registry.REGISTRY` of each gradient mode (:attr:`name`).
    names = {"bpda": "bpda-eot-dev", "full": "full-pgd-eot-dev"}

    def __init__(self, estimator: PyTorchClassifier, *, dev_weight: float = DEV_WEIGHT, **kwargs) -> None:
        super().__init__(estimator, dev_weight=dev_weight, **kwargs)


class PGDEOTEnsemble(PGDEOT):
    """
    :class:`PGDEOT` on the loss of the ensemble the tables judge (``eot_target="ensemble"``: the cross-entropy, or
    ``loss="margin"``, of the log of the mean softmax over the EOT draws) rather than the mean of per-draw losses.
    Neither dominates on the real rows measured here (docs/attacks.md): each breaks images the other leaves, so the
    strongest preset runs both. Registered as ``"full-pgd-eot-ensemble"`` (``gradient="full"``); every other
    parameter is PGDEOT's.
    """

    #: The name in :data:`~art_adp.attacks.registry.REGISTRY` of each gradient mode (:attr:`name`).
    names = {"bpda": "bpda-eot-ensemble", "full": "full-pgd-eot-ensemble"}

    def __init__(self, estimator: PyTorchClassifier, *, eot_target: str = "ensemble", **kwargs) -> None:
        super().__init__(estimator, eot_target=eot_target, **kwargs)
