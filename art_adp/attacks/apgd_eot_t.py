"""APGD-EOT-T: AutoAttack's targeted APGD (APGD-T: the targeted DLR loss, aimed at the top runner-up classes in turn)
against randomized defences, in APGD-EOT's loop: the runner-ups ranked by the clean mean softmax over EOT draws, the
loss's gradient averaged over EOT draws, every iterate offered to the best-iterate rule."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import positive_int
from ..ensemble import logits, stack_draws
from .apgd_eot import APGDEOT
from .best_iterate import derived_seed, judged_noise

__all__ = ["APGDEOTT", "N_TARGET_CLASSES", "TARGETED_DLR", "runner_ups", "targeted_dlr"]

#: AutoAttack's targets per image in its standard version (``fra31/auto-attack``, ``autoattack/autoattack.py``,
#: ``set_version("standard")``: ``self.apgd_targeted.n_target_classes = 9``, every class but the true one on CIFAR-10).
N_TARGET_CLASSES = 9
#: The name of the targeted DLR loss (the reference's ``loss="dlr-targeted"``).
TARGETED_DLR = "dlr-targeted"


def targeted_dlr(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """
    Croce & Hein's targeted difference-of-logits ratio, per example: −(z_y − z_t)/(z_π1 − (z_π3 + z_π4)/2), with
    z_π1 ≥ z_π2 ≥ … the sorted logits (``autopgd_base.py``, ``APGDAttack_targeted.dlr_loss_targeted``); positive
    exactly when the target ``t`` beats the true class ``y``. Needs four classes.

    :param z: ``N×K`` logits (or the ensemble's log mean softmax).
    :param labels: ``N×2``: per row the true class and the target.
    """
    s = z.sort(dim=1).values
    z_y, z_t = z.gather(1, labels[:, :1])[:, 0], z.gather(1, labels[:, 1:])[:, 0]
    return -(z_y - z_t) / (s[:, -1] - 0.5 * (s[:, -3] + s[:, -4]) + 1e-12)


def runner_ups(p: torch.Tensor, y: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` classes other than ``y`` in the order of ``p`` (``N×K``), the most probable first (ties: the lower
    class first): ``N×k``."""
    others = p.scatter(1, y[:, None], float("-inf"))
    return others.sort(dim=1, descending=True, stable=True).indices[:, :k]


class APGDEOTT(APGDEOT):
    """
    AutoAttack's APGD-T (Croce & Hein 2020) against randomized defences: :class:`APGDEOT`'s loop (the random start on
    the surface of the ε-ball, momentum, the step halved at its checkpoints; the gradient averaged over
    ``eot_samples`` purifications through the full graph) run on the targeted DLR loss (:func:`targeted_dlr`), once
    per target: the ``n_target_classes`` classes other than the true one that the clean image's mean softmax over
    ``eot_samples`` purification draws ranks highest, in that order (AutoAttack's: the runner-ups of the clean
    output, the 2nd, 3rd, … highest class; at most the classes there are less one). With ``num_random_init`` > 1
    each target is run that many times, from fresh random starts, before the next (AutoAttack's order).

    What it returns is chosen by the one rule of :mod:`art_adp.attacks.best_iterate`, as :class:`APGDEOT`'s: every
    iterate of every run is offered and judged on draws of the attack's own, and each run after the first -- the
    next target -- attacks only the images not confirmed broken (unbroken on the judgement's draws, or broken there
    but not again on fresh draws: :func:`~art_adp.attacks.best_iterate.confirmed`). The ranking's draws are the
    attack's own too (seeded from ``seed`` and the batch), so the gradients' draws are those of the attack without it.

    | Paper link: https://arxiv.org/abs/2003.01690 (APGD-T, the targeted DLR loss)

    :param estimator: As :class:`APGDEOT`'s, of at least four classes (the targeted DLR's z_π4).
    :param n_target_classes: Targets per image (AutoAttack's standard version: :data:`N_TARGET_CLASSES`).
    :param kwargs: :class:`APGDEOT`'s parameters (``max_iter``: iterations per target), but ``losses`` (the
        targeted DLR only) and ``dev_weight`` (not taken).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "apgd-eot-t"
    known_losses = MappingProxyType({TARGETED_DLR: targeted_dlr})

    attack_params = APGDEOT.attack_params + ["n_target_classes"]

    def __init__(self, estimator: PyTorchClassifier, *, n_target_classes: int = N_TARGET_CLASSES, **kwargs) -> None:
        self.n_target_classes = n_target_classes
        self._targets: torch.Tensor | None = None
        super().__init__(estimator, losses=(TARGETED_DLR,), **kwargs)

    def _check_params(self) -> None:
        super()._check_params()
        positive_int("n_target_classes", self.n_target_classes)
        if self.dev_weight:
            raise ValueError(
                f"{self.name} takes no dev_weight (DiffAttack's state loss labels each row with its image, the "
                "targeted DLR with its target): use APGDEOTDev for the state loss, or dev_weight=0."
            )

    @property
    def targets(self) -> int:
        """Targets per image: ``n_target_classes``, at most the estimator's classes less one."""
        return min(self.n_target_classes, self.estimator.nb_classes - 1)

    @property
    def runs(self) -> int:
        """Runs per image: each target, ``num_random_init`` times."""
        return self.num_random_init * self.targets

    def runner_ups(self, x: torch.Tensor, y: torch.Tensor, batch: int = 0) -> torch.Tensor:
        """
        The targets of a batch: per image the :attr:`targets` classes other than ``y`` that the mean softmax of the
        clean ``x`` over ``eot_samples`` purification draws ranks highest, in order (:func:`runner_ups`). The draws
        are the attack's own (:func:`~art_adp.attacks.best_iterate.judged_noise`, seeded from ``seed``, ``"targets"``
        and ``batch``): the purifiers' generators are left as they were.

        :return: ``N×targets`` class indices.
        """
        seed = derived_seed(self._seed_base(), "targets", batch)
        with torch.no_grad(), judged_noise(self.estimator, torch.Generator(self.estimator.device), seed):
            z = stack_draws(lambda part: logits(self.estimator, part), x, self.eot_samples, batch_size=self.batch_size)
        return runner_ups(torch.softmax(z.float(), dim=-1).mean(0), y, self.targets)

    def _best_of_runs(self, x, y, clip, run, *, batch: int = 0):
        self._targets = self.runner_ups(x, y, batch)
        try:
            return super()._best_of_runs(x, y, clip, run, batch=batch)
        finally:
            self._targets = None

    def _one_run(self, r, x, y, clip, run, best, fresh=None):
        """Run ``r`` of :meth:`_best_of_runs`: the target ``r // num_random_init``, its labels ``N×2`` (class,
        target) on the images not confirmed broken."""
        assert self._targets is not None
        target = self._targets[:, r // self.num_random_init]
        return super()._one_run(r, x, torch.stack([y, target], 1), clip, run, best, fresh)

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs within ε of ``x``: per example the iterate, over every target's run, that the
            judgement found most broken.
        """
        classes = self.estimator.nb_classes
        if classes < 4:
            raise ValueError(
                f"{self.name}'s targeted DLR divides by z_π1 − (z_π3 + z_π4)/2 and needs at least 4 classes, the "
                f"estimator has {classes}: run apgd-eot (CE, then DLR) on it instead."
            )
        return super().generate(x, y, **kwargs)
