"""One record per attack: its name, its label, how to build it from a budget, which settings make up its budget,
what it costs, and its flags. The evaluation harness, the reproductions, the evaluation card and the command line's
help all read this table; adding an attack is one module plus one :class:`AttackSpec` here.

    from art_adp.attacks.registry import REGISTRY, Budget
    attack = REGISTRY["bpda-eot"].build(estimator, Budget(eps=8 / 255, eps_step=2 / 255, max_iter=40, eot_samples=15))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from art.attacks.attack import EvasionAttack

from .apgd_eot import APGDEOT
from .classifier_pgd import ClassifierPGD
from .joint_full import JointFull
from .joint_score import JointScore
from .pgd_eot import PGDEOT
from .spsa import BlackBoxSPSA

__all__ = ["ATTACKS", "AttackSpec", "Budget", "CLEAN_LABEL", "LABELS", "REGISTRY", "gradient_attacks", "names"]


@dataclass(frozen=True)
class Budget:
    """
    What an attack may spend, in the attacks' own parameter names (ART's and torchattacks': ``eps``, ``eps_step``,
    ``max_iter``, ``batch_size``; ``eot_samples`` as :class:`~art_adp.EOTClassifier` names the EOT draws).

    :param eps: Radius of the threat model.
    :param eps_step: Step of the PGD-type attacks, SPSA's learning rate (APGD sets its own).
    :param max_iter: Iterations (SPSA: steps; APGD: iterations per loss).
    :param norm: ``math.inf`` or 2.
    :param eot_samples: EOT draws per gradient.
    :param aggregate: ``"mean"`` of the EOT gradients or the authors' ``"sign"`` vote.
    :param weight: The Joint attacks' weight w.
    :param samples_per_step: SPSA's samples per step.
    :param batch_size: Images per forward pass.
    """

    eps: float
    eps_step: float
    max_iter: int
    norm: float = math.inf
    eot_samples: int = 1
    aggregate: str = "mean"
    weight: float = 0.5
    samples_per_step: int = 1280
    batch_size: int = 512


@dataclass(frozen=True)
class AttackSpec:
    """
    One attack as the applications see it.

    :param name: The name in configurations, records and on the command line (``"bpda-eot"``).
    :param label: The row title in every table and figure.
    :param build: ``(estimator, budget, seed) -> EvasionAttack``.
    :param fields: Budget parameter -> the :class:`~art_adp.apps.evaluation.EvalConfig` field that sets it, in the
        order the budget is shown (``{"max_iter": "iterations", "eot_samples": "eot"}``).
    :param cost: ``(budget, forward, full) -> seconds per example``, from the seconds per image of one defended
        forward pass and of one forward+backward pass through the purification.
    :param describe: ``budget -> str``, the budget in a table cell.
    :param gradient: Gradient-based on the defended model (white box); the sanity checks use such attacks.
    :param paper: In the paper's Table 3 (the ``paper`` preset).
    :param baseline: The attack an undefended (baseline) classifier gets for this row: the PGD family reduces to
        ``"clf-pgd"``; APGD and SPSA run as they are.
    :param own_step: APGD chooses its step itself, starting at ``own_step × eps``; ``None``: ``budget.eps_step``.
    :param norms: The threat models the attack supports.
    :param sanity: Preference of this attack as the white-box attack of the sanity checks (lower first; ``None``:
        never chosen): the full-gradient attacks first, then BPDA.
    """

    name: str
    label: str
    build: Callable[..., EvasionAttack]
    fields: Mapping[str, str]
    cost: Callable[[Budget, float, float], float]
    describe: Callable[[Budget], str]
    gradient: bool = False
    paper: bool = False
    baseline: str = ""
    own_step: float | None = None
    norms: tuple[float, ...] = (math.inf, 2)
    sanity: int | None = None


def _iterations(b: Budget) -> str:
    return f"{b.max_iter} it of {b.eps_step:.4g}"


def _pgd_eot(gradient: str) -> Callable[..., EvasionAttack]:
    def build(estimator, b: Budget, seed: int = 0) -> EvasionAttack:  # pylint: disable=unused-argument
        return PGDEOT(
            estimator,
            gradient=gradient,
            norm=b.norm,
            eps=b.eps,
            eps_step=b.eps_step,
            max_iter=b.max_iter,
            eot_samples=b.eot_samples,
            aggregate=b.aggregate,
            batch_size=b.batch_size,
        )

    return build


def _joint(cls) -> Callable[..., EvasionAttack]:
    def build(estimator, b: Budget, seed: int = 0) -> EvasionAttack:  # pylint: disable=unused-argument
        return cls(
            estimator,
            norm=b.norm,
            eps=b.eps,
            eps_step=b.eps_step,
            max_iter=b.max_iter,
            eot_samples=b.eot_samples,
            weight=b.weight,
            batch_size=b.batch_size,
        )

    return build


def _clf_pgd(estimator, b: Budget, seed: int = 0) -> EvasionAttack:  # pylint: disable=unused-argument
    return ClassifierPGD(
        estimator, norm=b.norm, eps=b.eps, eps_step=b.eps_step, max_iter=b.max_iter, batch_size=b.batch_size
    )


def _apgd(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    return APGDEOT(
        estimator,
        norm=b.norm,
        eps=b.eps,
        max_iter=b.max_iter,
        eot_samples=b.eot_samples,
        batch_size=b.batch_size,
        seed=seed,
    )


def _spsa(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    return BlackBoxSPSA(
        estimator,
        eps=b.eps,
        eps_step=b.eps_step,
        max_iter=b.max_iter,
        samples_per_step=b.samples_per_step,
        batch_size=b.batch_size,
        seed=seed,
    )


_PGD_FIELDS = {"max_iter": "iterations", "eot_samples": "eot", "aggregate": "eot_aggregate"}
_JOINT_FIELDS = {"max_iter": "iterations", "eot_samples": "eot", "weight": "joint_weight"}

ATTACKS: tuple[AttackSpec, ...] = (
    AttackSpec(
        "clf-pgd",
        "Clf-PGD (preprocessor-blind)",
        _clf_pgd,
        {"max_iter": "iterations"},
        cost=lambda b, f, g: 0.0,
        describe=_iterations,
        paper=True,
        baseline="clf-pgd",
    ),
    AttackSpec(
        "bpda-eot",
        "BPDA+EOT",
        _pgd_eot("bpda"),
        _PGD_FIELDS,
        cost=lambda b, f, g: b.max_iter * b.eot_samples * f,
        describe=lambda b: f"{_iterations(b)}, EOT {b.eot_samples} ({b.aggregate})",
        gradient=True,
        paper=True,
        baseline="clf-pgd",
        sanity=2,
    ),
    AttackSpec(
        "joint-score",
        "Joint (score)+EOT",
        _joint(JointScore),
        _JOINT_FIELDS,
        cost=lambda b, f, g: b.max_iter * b.eot_samples * f,
        describe=lambda b: f"{_iterations(b)}, EOT {b.eot_samples}, w = {b.weight:g}",
        gradient=True,
        paper=True,
        baseline="clf-pgd",
    ),
    AttackSpec(
        "joint-full",
        "Joint (full)+EOT",
        _joint(JointFull),
        _JOINT_FIELDS,
        cost=lambda b, f, g: b.max_iter * b.eot_samples * f,
        describe=lambda b: f"{_iterations(b)}, EOT {b.eot_samples}, w = {b.weight:g}",
        gradient=True,
        paper=True,
        baseline="clf-pgd",
    ),
    AttackSpec(
        "spsa",
        "SPSA (black-box)",
        _spsa,
        {"max_iter": "spsa_iterations", "samples_per_step": "spsa_samples"},
        cost=lambda b, f, g: b.max_iter * 2 * b.samples_per_step * f,
        describe=lambda b: f"{_iterations(b)}, {b.samples_per_step} samples/step",
        paper=True,
        baseline="spsa",
        norms=(math.inf,),
    ),
    AttackSpec(
        "full-pgd-eot",
        "Full-gradient PGD+EOT",
        _pgd_eot("full"),
        _PGD_FIELDS,
        cost=lambda b, f, g: b.max_iter * b.eot_samples * g,
        describe=lambda b: f"{_iterations(b)}, EOT {b.eot_samples} ({b.aggregate})",
        gradient=True,
        paper=True,
        baseline="clf-pgd",
        sanity=0,
    ),
    AttackSpec(
        "apgd-eot",
        "APGD-EOT (CE, then DLR)",
        _apgd,
        {"max_iter": "apgd_iterations", "eot_samples": "apgd_eot"},
        cost=lambda b, f, g: 2 * b.max_iter * b.eot_samples * (g + f),
        describe=lambda b: f"CE+DLR, {b.max_iter} it/loss, EOT {b.eot_samples}",
        gradient=True,
        baseline="apgd-eot",
        own_step=2.0,
        sanity=1,
    ),
)
REGISTRY: Mapping[str, AttackSpec] = MappingProxyType({spec.name: spec for spec in ATTACKS})
CLEAN_LABEL = "Natural (clean)"
LABELS: Mapping[str, str] = MappingProxyType({"clean": CLEAN_LABEL, **{s.name: s.label for s in ATTACKS}})


def names(*, paper: bool | None = None) -> tuple[str, ...]:
    """The attacks' names in table order (``paper=True``: those of the paper's table only)."""
    return tuple(s.name for s in ATTACKS if paper is None or s.paper == paper)


def gradient_attacks() -> tuple[str, ...]:
    """The white-box attacks the sanity checks may run, the preferred first."""
    chosen = sorted((s for s in ATTACKS if s.sanity is not None), key=lambda s: s.sanity)
    return tuple(s.name for s in chosen)
