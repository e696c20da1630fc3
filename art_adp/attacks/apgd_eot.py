"""APGD-EOT: Croce et al.'s protocol against randomized defences (APGD-CE, then APGD-DLR, both with EOT), as a loop of
its own that offers every iterate to the best-iterate rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import memory_budget as check_memory_budget, number, one_of, positive_int
from ._core import (
    DEFAULT_GRADIENT,
    EOT_TARGETS,
    GRADIENTS,
    JUDGE_DRAWS,
    LOSSES,
    IterativeAttack,
    Offer,
    eot_loss_gradient,
    normalize,
    project,
)
from .purified_state_loss import DEV_WEIGHT, PurifiedStateLoss

__all__ = ["APGDEOT", "APGDEOTDev", "APGDEOTEnsemble", "MOMENTUM", "RHO", "checkpoints"]

#: Croce & Hein's reference code, whose lines the comments below cite: ``fra31/auto-attack``,
#: ``autoattack/autopgd_base.py`` (``APGDAttack.attack_single_run``, at commit a392200).
REFERENCE = "fra31/auto-attack autoattack/autopgd_base.py"
#: APGD's momentum α: x_{k+1} = x_k + α (z_{k+1} − x_k) + (1 − α)(x_k − x_{k−1}), none at the first step
#: (autopgd_base.py:326, ``a = 0.75 if i > 0 else 1.0``).
MOMENTUM = 0.75
#: APGD's ρ: at a checkpoint the step is halved where at most ρ of the steps since the last one raised the loss
#: (autopgd_base.py:166-171 and 406-408, ``check_oscillation``'s ``k3 = thr_decr = rho = .75``, line 115).
RHO = 0.75


def checkpoints(max_iter: int) -> list[int]:
    """The iterations (from 0) after which APGD checks its progress (Croce & Hein 2020, §3.2, as their code counts
    them): the first after ⌈0.22 N⌉ iterations, each later one 0.03 N sooner than the last, at least 0.06 N apart."""
    first, least, shrink = (max(int(f * max_iter), 1) for f in (0.22, 0.06, 0.03))
    out, at, k = [], -1, first
    while at + k < max_iter:
        at += k
        out.append(at)
        k = max(k - shrink, least)
    return out


class APGDEOT(IterativeAttack):
    """
    Croce et al. (2022)'s evaluation of randomized test-time defences: APGD (Croce & Hein 2020: from their random start
    on the surface of the ε-ball, momentum 0.75, the step 2ε halved at checkpoints where the loss stopped rising, each
    halving restarting from the best-loss point; where the loop differs from their code, :meth:`_loop` says), with the
    loss gradient averaged over ``eot_samples`` purifications through the full purification graph
    (``gradient="full"``), run first with the cross-entropy and then with the DLR loss; with ``num_random_init`` > 1
    (ART's ``nb_random_init``) both are repeated from fresh random starts.

    What it returns is chosen by the one rule of :mod:`art_adp.attacks.best_iterate`: every iterate of every run is
    offered (judged every ``check_every`` iterations, by default ``"auto"``: every iterate where a judgement costs
    under a quarter of an iteration), each image keeping the one its judgement (``judgement`` on ``judge_draws``
    purification draws of its own, never the gradients') finds most broken; each run after the first attacks the
    images still unbroken. Every image is attacked by the first run: unlike ART's ``AutoProjectedGradientDescent``,
    which returned its last iterate and skipped the images its EOT view's own draws called broken at the start.

    ``eot_target="ensemble"`` (:class:`APGDEOTEnsemble`) differentiates the losses of the ensemble the tables judge --
    CE and DLR of the log of the mean softmax over the draws (:func:`~art_adp.ensemble.ensemble_gradient`) -- instead
    of the mean of the per-draw losses.

    | Paper link: https://arxiv.org/abs/2202.13711 (ADP: 33.7 % on CIFAR-10, APGD with 200 EOT samples);
      https://arxiv.org/abs/2003.01690 (APGD, DLR)

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])`` (any PyTorch
        preprocessing defence works; ADPPurifiers are switched to ``gradient=gradient`` while attacking).
    :param norm: ``np.inf`` or ``2``.
    :param eps: Radius of the threat model.
    :param eps_step: Initial step (None: 2ε, Croce & Hein's).
    :param max_iter: Iterations per loss (100 in Croce et al.).
    :param eot_samples: Draws per gradient (200 in Croce et al. against ADP).
    :param losses: Losses run in turn, from ``("ce", "dlr", "margin")``.
    :param eot_target: ``"draws"`` (the default, Croce et al.'s: the mean of per-draw losses) or ``"ensemble"`` (the
        losses of the judged ensemble's log mean softmax; :class:`APGDEOTEnsemble`).
    :param gradient: ``"full"`` (through purification; the default,
        :data:`~art_adp.preprocessor.DEFAULT_GRADIENT`) or ``"bpda"``.
    :param batch_size: Images per forward pass (examples × EOT copies).
    :param memory_budget: MiB of autograd graph per block of EOT draws (None:
        :func:`art_adp.ensemble.default_memory_budget`): memory does not grow with ``eot_samples``.
    :param seed: Seed of the random starts and of the judgement's draws. Purification noise of the gradients comes
        from the purifiers' ``generator``.
    :param dev_weight: λ ≥ 0: add λ × the deviation of each draw's purification states (every intermediate state and
        the output) from their clean references to each loss (DiffAttack,
        :class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`); 0, the default: the losses alone.
        :class:`APGDEOTDev` is this attack with it on.
    :param num_random_init: Runs of the losses, each from a fresh random start.
    :param check_every, judgement, judge_draws: The best iterate, as in
        :class:`~art_adp.attacks._core.IterativeAttack`.
    :param verbose: Show a progress bar over the batches.
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot"
    #: The losses ``losses`` may name, by name (a subclass with losses of its own, e.g. APGD-T's targeted DLR, gives
    #: its table here: :meth:`_loss` reads it).
    known_losses: Mapping[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = LOSSES

    attack_params = IterativeAttack.attack_params + [
        "eot_samples",
        "losses",
        "eot_target",
        "gradient",
        "memory_budget",
        "seed",
        "dev_weight",
    ]

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
        eot_target: str = "draws",
        gradient: str = DEFAULT_GRADIENT,
        batch_size: int = 512,
        memory_budget: float | None = None,
        seed: int | None = 0,
        dev_weight: float = 0.0,
        verbose: bool = False,
        num_random_init: int = 1,
        check_every: int | str = "auto",
        judgement: str = "mean",
        judge_draws: int = JUDGE_DRAWS,
    ) -> None:
        self.eot_samples = eot_samples
        self.losses = tuple(losses)
        self.eot_target = eot_target
        self.gradient = gradient
        self.memory_budget = memory_budget
        self.seed = 0 if seed is None else seed
        self.dev_weight = dev_weight
        self._loss_name = self.losses[0] if self.losses else "ce"
        self._state_loss: PurifiedStateLoss | None = None
        super().__init__(
            estimator,
            norm=norm,
            eps=eps,
            eps_step=2 * eps if eps_step is None else eps_step,
            max_iter=max_iter,
            random_start=True,
            generator=torch.Generator().manual_seed(int(self.seed) % 2**63),
            batch_size=batch_size,
            verbose=verbose,
            num_random_init=num_random_init,
            check_every=check_every,
            judgement=judgement,
            judge_draws=judge_draws,
        )

    @property
    def mode(self) -> str:
        """The purifier gradient mode set while attacking: ``gradient``."""
        return self.gradient

    def _check_params(self) -> None:
        super()._check_params()
        unknown = [name for name in self.losses if name not in self.known_losses]
        if unknown or not self.losses:
            raise ValueError(
                f"losses must be a non-empty sequence from {tuple(self.known_losses)}, got {self.losses!r}."
            )
        one_of("gradient", self.gradient, GRADIENTS)
        one_of("eot_target", self.eot_target, EOT_TARGETS)
        positive_int("eot_samples", self.eot_samples)
        check_memory_budget(self.memory_budget)
        number("dev_weight", self.dev_weight, low=0)
        if self.eot_target == "ensemble" and self.dev_weight:
            raise ValueError("dev_weight (DiffAttack's state loss, per draw) needs eot_target='draws'.")

    # -- the runs: every loss, then again from fresh random starts ------------------------------------------------

    @property
    def runs(self) -> int:
        """Runs per image: each loss, ``num_random_init`` times."""
        return self.num_random_init * len(self.losses)

    def _one_run(self, r, x, y, clip, run, best, fresh=None):
        self._loss_name = self.losses[r % len(self.losses)]
        return super()._one_run(r, x, y, clip, run, best, fresh)

    def _loss(self):
        """The run's loss, ``(logits, labels) -> N`` losses: its entry of :attr:`known_losses` (the hook a subclass
        with losses of its own fills)."""
        return self.known_losses[self._loss_name]

    def _start(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        loss = self._loss()
        self._state_loss = PurifiedStateLoss(loss, reference=x, dev_weight=self.dev_weight) if self.dev_weight else None
        return super()._start(x, y, clip)

    def _loss_gradient(self, x_adv: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The EOT gradient and loss (per image) of the run's loss at ``x_adv``."""
        states = self._state_loss is not None
        return eot_loss_gradient(self.estimator, x_adv, y, self._state_loss if states else self._loss(),
                                 self.eot_samples, target=self.eot_target, batch_size=self.batch_size,
                                 memory_budget=self.memory_budget, states=states)  # fmt: skip

    def _random_point(self, x: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """
        Croce & Hein's random start (autopgd_base.py:206-213): ℓ∞, ``t`` uniform in [−1, 1]^d scaled so that
        ``‖δ‖∞ = ε`` (``x + eps * normalize(t)``: a point on the box's surface, not inside it); ℓ2, a Gaussian
        direction at radius ε; clipped to the input range (line 230). Drawn on the CPU from ``generator``.
        """
        if self.norm == np.inf:
            t = 2 * torch.rand(x.shape, generator=self.generator) - 1
            size = t.flatten(1).abs().amax(1)
        else:
            t = torch.randn(x.shape, generator=self.generator)
            size = t.flatten(1).norm(dim=1)
        delta = self.eps * t / (size.view(-1, *([1] * (x.ndim - 1))) + 1e-12)
        return project(x + delta.to(x.device), x, self.eps, self.norm, clip)

    def _loop(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float], offer: Offer) -> torch.Tensor:
        """
        One APGD run (Croce & Hein 2020, Algorithm 1, as their code runs it) from a random start, offering every
        iterate.

        Two differences from the reference (:data:`REFERENCE`), both kept on purpose:

        - **The loss the step-size rule reads is the mean over the EOT draws** (the loss whose gradient the step
          follows). The reference's ``loss_indiv`` is overwritten by each pass of its EOT loop (lines 364-370), so
          its rule reads the last draw's loss (line 395): with its default ``eot_iter=1`` the two are one; with many
          draws, one draw's loss is a noisy reading of the progress the mean gradient makes (and the ensemble's loss,
          ``eot_target="ensemble"``, has no per-draw loss at all).
        - **The first checkpoint counts the first step as a rise when its loss exceeds the start's**, as Croce &
          Hein's §3.2 condition does (Σ from the start of 1[f(x⁽ⁱ⁺¹⁾) > f(x⁽ⁱ⁾)]). The reference's first
          ``check_oscillation`` (line 169, ``x[j - counter5 - 1]`` at ``j - counter5 = 0``) reads
          ``loss_steps[-1]``, Python's wrap-around to the last row of a table of zeros not yet written (line 233):
          it compares the first step's loss with 0.
        """
        n, view = len(x), (-1,) + (1,) * (x.ndim - 1)
        x_adv = self._start(x, y, clip)
        offer(x_adv, 0)
        grad, loss = self._loss_gradient(x_adv, y)
        step = torch.full((n,), float(self.eps_step), device=x.device)
        x_best, grad_best, loss_best = x_adv.clone(), grad.clone(), loss.clone()
        losses = [loss]  # the start's, then each iteration's
        best_at_check, reduced_at_check = loss_best.clone(), torch.ones(n, dtype=torch.bool, device=x.device)
        checks, last_check = set(checkpoints(self.max_iter)), -1
        x_old = x_adv.clone()
        for i in range(self.max_iter):
            momentum = MOMENTUM if i > 0 else 1.0
            z = project(x_adv + step.view(view) * normalize(grad, self.norm), x, self.eps, self.norm, clip)
            z = project(x_adv + momentum * (z - x_adv) + (1 - momentum) * (x_adv - x_old), x, self.eps, self.norm, clip)
            x_old, x_adv = x_adv, z.detach()
            offer(x_adv, i + 1)
            grad, loss = self._loss_gradient(x_adv, y)
            losses.append(loss)  # the mean over the EOT draws (autopgd_base.py:395 reads the last draw's: see above)
            better = loss > loss_best
            x_best[better], grad_best[better], loss_best[better] = x_adv[better], grad[better], loss[better]
            if i in checks:
                k = i - last_check  # the first check counts from the start's loss (line 169 compares with 0)
                rises = torch.stack([losses[j + 1] > losses[j] for j in range(len(losses) - 1 - k, len(losses) - 1)])
                oscillating = rises.float().sum(0) <= RHO * k
                stalled = ~reduced_at_check & (best_at_check >= loss_best)
                reduce = oscillating | stalled
                reduced_at_check, best_at_check, last_check = reduce, loss_best.clone(), i
                step[reduce] /= 2
                x_adv[reduce], grad[reduce] = x_best[reduce], grad_best[reduce]
        return x_adv

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs within ε of ``x``: per example the iterate, over every run, that the judgement
            found most broken.
        """
        self.generator = torch.Generator().manual_seed(int(self.seed) % 2**63)  # each call: the same starts
        return super().generate(x, y, **kwargs)


class APGDEOTDev(APGDEOT):
    """
    :class:`APGDEOT` with DiffAttack's loss on the purification states on (``dev_weight`` = λ =
    :data:`~art_adp.attacks.purified_state_loss.DEV_WEIGHT` by default): each loss (CE, then DLR) plus
    λ · mean_t ‖x'_t − x_t‖₂ per draw over every intermediate state and the output
    (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`), the purifiers checkpointed step by step --
    DiffAttack's Algorithm 2 (APGD, CE then DLR, momentum 0.75, step 2ε). What differs from the paper: the loss is
    taken at every state rather than at sampled time steps, and the output is chosen by the best-iterate rule.
    Registered as ``"apgd-eot-dev"``; every other parameter is APGDEOT's.

    | Paper link: Kang, Song & Li, NeurIPS 2023, https://arxiv.org/abs/2311.16124
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot-dev"

    def __init__(self, estimator: PyTorchClassifier, *, dev_weight: float = DEV_WEIGHT, **kwargs) -> None:
        super().__init__(estimator, dev_weight=dev_weight, **kwargs)


class APGDEOTEnsemble(APGDEOT):
    """
    :class:`APGDEOT` on the losses of the ensemble the tables judge (``eot_target="ensemble"``: CE, then DLR, of the
    log of the mean softmax over the EOT draws). On MNIST's exact-score row it breaks images Croce et al.'s mean of
    per-draw losses leaves, and the other way round (docs/attacks.md): the strongest preset runs both. Registered as
    ``"apgd-eot-ensemble"``; every other parameter is APGDEOT's.
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot-ensemble"

    def __init__(self, estimator: PyTorchClassifier, *, eot_target: str = "ensemble", **kwargs) -> None:
        super().__init__(estimator, eot_target=eot_target, **kwargs)
