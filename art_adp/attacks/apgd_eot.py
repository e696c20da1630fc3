"""APGD-EOT: Croce et al.'s protocol against randomized defences (APGD-CE, then APGD-DLR, both with EOT)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from ..eot import EOTClassifier, tag_rows
from .._checks import memory_budget as check_memory_budget, number, one_of, positive_int
from ._core import (
    DEFAULT_GRADIENT,
    GRADIENTS,
    JUDGE_DRAWS,
    check_norm,
    cross_entropy,
    dlr,
    gradient_mode,
    labels,
)
from .best_iterate import JUDGEMENTS, BestIterate, derived_seed
from .purified_state_loss import DEV_WEIGHT, PurifiedStateLoss

__all__ = ["APGDEOT", "APGDEOTDev"]

LOSSES = {"ce": cross_entropy, "dlr": dlr}


class APGDEOT(EvasionAttack):
    """
    Croce et al. (2022)'s evaluation of randomized test-time defences: ART's ``AutoProjectedGradientDescent``
    (Croce & Hein 2020: step-size halving at checkpoints, momentum 0.75), with the loss gradient averaged over
    ``eot_samples`` purifications through the full purification graph (``gradient="full"``), run first with the
    cross-entropy loss and then with the DLR loss on the examples the first run left unbroken; with
    ``num_random_init`` > 1 (ART's ``nb_random_init``) the CE and DLR runs are repeated from fresh random starts on the
    examples still unbroken. Within a run ART's APGD keeps its best-loss point; between runs (the clean start, each
    loss, each restart) every example keeps the point the best-iterate rule finds most broken
    (:class:`~art_adp.attacks.best_iterate.BestIterate`: ``judgement`` on ``judge_draws`` purification draws of its
    own, seeded from ``seed``, not the draws of the gradients nor the EOT view's prediction).
    APGD attacks an :class:`~art_adp.EOTClassifier` of the estimator with the per-example loss (its loss gradient
    and loss are means over ``eot_samples`` draws of the estimator's whole chain, standardisation included; its
    prediction the ensemble of as many draws). EOT samples are stacked copies of the batch, in blocks of
    ``batch_size`` images per pass, so hundreds of samples fit in memory.

    | Paper link: https://arxiv.org/abs/2202.13711 (ADP: 33.7 % on CIFAR-10, APGD with 200 EOT samples);
      https://arxiv.org/abs/2003.01690 (APGD, DLR)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])`` (any PyTorch
        preprocessing defence works; ADPPurifiers are switched to ``gradient=gradient`` while attacking).
    :param norm: ``np.inf`` or ``2``.
    :param eps: Radius of the threat model.
    :param eps_step: Initial APGD step (Croce & Hein: 2ε).
    :param max_iter: Iterations per loss (100 in Croce et al.).
    :param eot_samples: Draws per gradient (200 in Croce et al. against ADP).
    :param losses: Losses run in turn, from ``("ce", "dlr")``.
    :param gradient: ``"full"`` (through purification; the default,
        :data:`~art_adp.preprocessor.DEFAULT_GRADIENT`) or ``"bpda"``.
    :param batch_size: Images per forward pass (examples × EOT copies).
    :param memory_budget: MiB of autograd graph per block of EOT draws (None:
        :func:`art_adp.ensemble.default_memory_budget`): memory does not grow with ``eot_samples``.
    :param seed: Seed of APGD's random start (ART draws it from numpy's global generator; it is seeded inside a
        saved-and-restored state, so the caller's numpy state is left as it was), or None to use that generator as
        it is. Purification noise comes from the purifiers' ``generator``.
    :param dev_weight: λ ≥ 0: add λ × the deviation of each draw's purification states (every intermediate state and
        the output) from their clean references to each loss (DiffAttack,
        :class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`; the rows' indices ride in the labels,
        :func:`~art_adp.eot.tag_rows`, so ART's subsets of the batch keep their clean images); 0, the default: the
        losses alone. :class:`APGDEOTDev` is this attack with it on.
    :param num_random_init: Runs of the losses, each after the first from a fresh random start (ART's
        ``nb_random_init``), on the examples the judgement still finds unbroken.
    :param judgement: What the runs' outputs are judged by, one of
        :data:`~art_adp.attacks.best_iterate.JUDGEMENTS` (``"mean"``: the ensemble of ``judge_draws`` draws).
    :param judge_draws: Purification draws per judgement (the paper's S = 10).
    :param verbose: Show ART's progress bars.
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot"

    attack_params = EvasionAttack.attack_params + [
        "norm",
        "eps",
        "eps_step",
        "max_iter",
        "eot_samples",
        "losses",
        "gradient",
        "batch_size",
        "memory_budget",
        "seed",
        "dev_weight",
        "verbose",
        "num_random_init",
        "judgement",
        "judge_draws",
    ]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float | None = None,
        max_iter: int = 100,
        eot_samples: int = 200,
        losses: tuple[str, ...] = ("ce", "dlr"),
        gradient: str = DEFAULT_GRADIENT,
        batch_size: int = 512,
        memory_budget: float | None = None,
        seed: int | None = 0,
        dev_weight: float = 0.0,
        verbose: bool = False,
        num_random_init: int = 1,
        judgement: str = "mean",
        judge_draws: int = JUDGE_DRAWS,
    ) -> None:
        super().__init__(estimator=estimator)
        self.norm = np.inf if norm in ("inf", np.inf, float("inf")) else norm
        self.eps = eps
        self.eps_step = 2 * eps if eps_step is None else eps_step
        self.max_iter = max_iter
        self.eot_samples = eot_samples
        self.losses = tuple(losses)
        self.gradient = gradient
        self.batch_size = batch_size
        self.memory_budget = memory_budget
        self.seed = seed
        self.dev_weight = dev_weight
        self.verbose = verbose
        self.num_random_init = num_random_init
        self.judgement = judgement
        self.judge_draws = judge_draws
        self._check_params()

    def _check_params(self) -> None:
        check_norm(self.norm)
        unknown = [name for name in self.losses if name not in LOSSES]
        if unknown or not self.losses:
            raise ValueError(f"losses must be a non-empty sequence from {tuple(LOSSES)}, got {self.losses!r}.")
        one_of("gradient", self.gradient, GRADIENTS)
        for name in ("max_iter", "eot_samples", "batch_size", "num_random_init", "judge_draws"):
            positive_int(name, getattr(self, name))
        one_of("judgement", self.judgement, JUDGEMENTS)
        check_memory_budget(self.memory_budget)
        number("dev_weight", self.dev_weight, low=0)

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs within ε of ``x``: per example the point, among the clean input and every run's
            output, that the judgement found most broken.
        """
        y = labels(self.estimator, x, y)
        dtype, x = x.dtype, x.astype(np.float32)
        device = self.estimator.device
        best = BestIterate(
            self.estimator,
            torch.as_tensor(y, device=device),
            judgement=self.judgement,
            draws=self.judge_draws,
            seed=derived_seed(0 if self.seed is None else self.seed, "best-iterate"),
            batch_size=self.batch_size,
        )
        state = np.random.get_state()
        try:
            if self.seed is not None:
                np.random.seed(self.seed % 2**32)
            with gradient_mode(self.estimator, self.gradient):
                best.offer(torch.as_tensor(x, device=device))
                for _ in range(self.num_random_init):
                    for name in self.losses:
                        rows = torch.nonzero(~best.broken)[:, 0]
                        if len(rows) == 0:
                            break
                        idx = rows.cpu().numpy()
                        x_run = self._run(name, x[idx], y[idx])
                        best.offer(torch.as_tensor(x_run, device=device), rows)
        finally:
            np.random.set_state(state)
        assert best.x is not None
        return best.x.cpu().numpy().astype(dtype, copy=False)

    def _run(self, name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One run of ART's APGD with the loss ``name`` on the EOT view of the estimator, from a random start."""
        from art.attacks.evasion import AutoProjectedGradientDescent

        loss: Callable[..., torch.Tensor] = LOSSES[name]
        y_art = np.eye(self.estimator.nb_classes)[y]
        if self.dev_weight:  # each draw's loss plus its states' deviation; the labels carry the row index
            clean = torch.as_tensor(x, dtype=torch.float32, device=self.estimator.device)
            loss = PurifiedStateLoss(loss, reference=clean, dev_weight=self.dev_weight)
            y_art = tag_rows(y, self.estimator.nb_classes)
        view = EOTClassifier(
            self.estimator,
            ensemble_size=self.eot_samples,
            eot_samples=self.eot_samples,
            batch_size=self.batch_size,
            loss=loss,
            memory_budget=self.memory_budget,
            states=bool(self.dev_weight),
        )
        apgd = AutoProjectedGradientDescent(
            view,
            norm=self.norm,
            eps=self.eps,
            eps_step=self.eps_step,
            max_iter=self.max_iter,
            targeted=False,
            nb_random_init=1,
            batch_size=max(1, min(len(x), self.batch_size)),
            loss_type=None,
            verbose=self.verbose,
        )
        return apgd.generate(x, y=y_art).astype(np.float32)


class APGDEOTDev(APGDEOT):
    """
    :class:`APGDEOT` with DiffAttack's loss on the purification states on (``dev_weight`` = λ =
    :data:`~art_adp.attacks.purified_state_loss.DEV_WEIGHT` by default): each loss (CE, then DLR) plus
    λ · mean_t ‖x'_t − x_t‖₂ per draw over every intermediate state and the output
    (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`), the purifiers checkpointed step by step --
    DiffAttack's Algorithm 2 (APGD, CE then DLR, momentum 0.75, step 2ε). What differs from the paper: ART's APGD
    attacks only the examples still correctly classified (the paper keeps optimising all), and the loss is taken at
    every state rather than at sampled time steps. Registered as ``"apgd-eot-dev"``; every other parameter is
    APGDEOT's.

    | Paper link: Kang, Song & Li, NeurIPS 2023, https://arxiv.org/abs/2311.16124
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot-dev"

    def __init__(self, estimator: PyTorchClassifier, *, dev_weight: float = DEV_WEIGHT, **kwargs) -> None:
        super().__init__(estimator, dev_weight=dev_weight, **kwargs)
