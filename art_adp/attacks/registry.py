"""One record per attack: its name, its label, how to build it from a budget, which budget parameters it reads,
what it costs, and its flags. The evaluation harness, the reproductions, the evaluation card, the command line's
help and the tests all read this table; adding an attack is one module (its class carrying its name) plus one
:class:`AttackSpec` here. The registry speaks the attacks' own parameter names (:class:`Budget`) and knows nothing
of the applications' settings.

    from art_adp.attacks.registry import REGISTRY, Budget
    attack = REGISTRY["bpda-eot"].build(estimator, Budget(eps=8 / 255, eps_step=2 / 255, max_iter=40, eot_samples=15))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from types import MappingProxyType

import torch
from art.attacks.attack import EvasionAttack

from .._checks import one_of
from ..ensemble import compiled_networks, gradient_precision
from ._core import AUTO, EOT_TARGETS, JUDGE_DRAWS, STEP_SCHEDULES, check_interval
from .apgd_eot import APGDEOT, APGDEOTDev, APGDEOTEnsemble
from .apgd_eot_t import N_TARGET_CLASSES, APGDEOTT
from .autoattack import AutoAttackStandard
from .classifier_pgd import ClassifierPGD
from .joint_full import JointFull
from .joint_score import JointScore
from .pgd_eot import PGDEOT, PGDEOTDev, PGDEOTEnsemble
from .purified_state_loss import DEV_WEIGHT
from .selective_eot import SelectiveEOT
from .spsa import BlackBoxSPSA
from .systemic_lowfreq import LowFrequencyVote

__all__ = [
    "ATTACKS",
    "register",
    "unregister",
    "AttackSpec",
    "AUTOATTACK",
    "BLIND_ATTACK",
    "Budget",
    "CLEAN_LABEL",
    "budget_settings",
    "consumed",
    "consumed_view",
    "FULL_ATTACK",
    "LABELS",
    "OLD_BEHAVIOUR",
    "OPTION_CHOICES",
    "OPTION_HELP",
    "PROTOCOLS",
    "REGISTRY",
    "RETIRED",
    "SILENT",
    "STARTS",
    "SWEEP_ATTACK",
    "gradient_attacks",
    "judgements",
    "names",
    "recorded",
    "registered_name",
]


def registered_name(cls: type, gradient: str | None = None) -> str:
    """
    The registry name an attack class carries: its class attribute ``name``, or for a class that serves one name
    per purifier gradient mode (:class:`~art_adp.attacks.PGDEOT`) the entry of its ``names`` for ``gradient``.

    :raises ValueError: The class carries no such name.
    """
    name = getattr(cls, "names", {}).get(gradient) if gradient is not None else getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        mode = "" if gradient is None else f" for gradient={gradient!r}"
        raise ValueError(
            f"{cls.__name__} carries no registry name{mode}: give the class a string attribute `name` (or, for one "
            "name per gradient mode, a mapping `names` from the mode to the name)."
        )
    return name


#: The preprocessor-blind attack (ART's PGD on the bare classifier): the baseline of the PGD family (on an undefended
#: classifier, white-box PGD), a row of the σ sweep, the paper's MNIST row and the lever tables' PGD rows.
BLIND_ATTACK = registered_name(ClassifierPGD)
#: The adaptive attack of the paper's σ and EOT sweeps (Tables 5-6) and the MNIST recipe's BPDA row.
SWEEP_ATTACK = registered_name(PGDEOT, "bpda")
#: The MNIST recipe's default full-gradient row.
FULL_ATTACK = registered_name(PGDEOT, "full")
#: The published evaluations the attacks come from (:attr:`AttackSpec.protocol`): Yoon et al.'s Table 3, Croce et
#: al. 2022, DiffAttack (Kang et al. 2023), DiffHammer (Wang et al. 2024), DiffBreak (Kassis et al. 2025);
#: ``"ensemble"``: the PGD family on the loss of the ensemble the tables judge rather than the papers' mean of
#: per-draw losses; ``"baseline"``: the white-box attack of the undefended baselines (AutoAttack); and
#: ``"autoattack"``: AutoAttack's targeted APGD (APGD-T, Croce & Hein 2020) through the purification, with EOT.
PROTOCOLS = ("paper", "croce", "diffattack", "diffhammer", "diffbreak", "ensemble", "baseline", "autoattack")
#: AutoAttack's standard version: the adversarially trained baselines' attack.
AUTOATTACK = registered_name(AutoAttackStandard)


@dataclass(frozen=True)
class Budget:
    """
    What an attack may spend, in the attacks' own parameter names (ART's and torchattacks': ``eps``, ``eps_step``,
    ``max_iter``, ``batch_size``; ``eot_samples`` as :class:`~art_adp.EOTClassifier` names the EOT draws). The
    evaluation's :class:`~art_adp.apps.evaluation.EvalConfig` and the command line's flags carry the same names.

    :param eps: Radius of the threat model.
    :param eps_step: Step of the PGD-type attacks, SPSA's learning rate (APGD sets its own).
    :param max_iter: Iterations (SPSA: steps; APGD: iterations per loss).
    :param norm: ``math.inf`` or 2.
    :param eot_samples: EOT draws per gradient.
    :param eot_aggregate: ``"mean"`` of the EOT gradients or the authors' ``"sign"`` vote (PGD+EOT's
        ``aggregate``, not the ``aggregate`` of the S-draw ensemble, which averages predictions).
    :param weight: The Joint attacks' weight w.
    :param cutoff: The low-frequency vote attack's band: the fraction of the DCT frequencies along each side its
        perturbation lives in.
    :param samples_per_step: SPSA's samples per step.
    :param random_start: The PGD family (Clf-PGD, BPDA+EOT, full-gradient PGD+EOT, the Joint attacks) starts from a
        uniform draw in the ε-ball, seeded by the ``seed`` its record builds it with (APGD always starts at a random
        point, as Croce & Hein's does; the low-frequency vote attack from a random point of its band of the ball).
        On by default (measured stronger: docs/attacks.md); False starts at the image, as the papers' own protocols
        do (the ``paper`` and ``croce`` plans, the MNIST reproduction).
    :param batch_size: Images per forward pass.
    :param memory_budget: MiB of autograd graph per block of EOT draws in the gradients of the attacks that take
        it (PGD+EOT, APGD-EOT; None: :func:`art_adp.ensemble.default_memory_budget`). It changes how the draws are
        blocked, not the result (to float rounding), so it is not part of an attack's recorded budget.
    :param num_random_init: Runs per image (ART's name): every run after the first starts from a fresh uniform point
        of the ε-ball and attacks the images the judgement still finds unbroken (APGD: the CE and DLR runs again).
    :param check_every: Iterations between judgements of the iterates by the best-iterate rule (each image returns
        the iterate its judgement found most broken); 0: each run's last iterate only -- with one run, the last
        iterate, as every attack returned before the rule (:data:`OLD_BEHAVIOUR`).
    :param judge_draws: Purification draws per judgement of the iterates (the applications pass their S).
    :param loss: PGD+EOT's loss, ``"ce"`` or ``"margin"`` (APGD runs CE then DLR).
    :param eot_target: What the EOT gradients of PGD+EOT and APGD-EOT differentiate: ``"ensemble"``, the loss of the
        S-draw ensemble the tables judge (the log of the mean softmax over the draws), or ``"draws"``, the mean of the
        per-draw losses (:data:`~art_adp.attacks._core.EOT_TARGETS`).
    :param step_schedule: The PGD family's steps: ``"constant"`` or ``"halving"`` (halved after half and again after
        three quarters of the iterations; :data:`~art_adp.attacks._core.STEP_SCHEDULES`).
    :param judgement: The judgement the attacks that choose theirs (selective EOT, the low-frequency vote attack) are
        aimed at, judge their iterates by and stop or restart on: the tables' S-draw ensemble, ``"mean"``.
    :param precision: The gradient passes' precision (forward through purification and classifier, and backward):
        ``"fp32"``, or ``"bf16"`` autocast (:func:`~art_adp.ensemble.gradient_precision`); every judgement, the
        projection and the clip stay fp32.
    :param compile: The compiled step: the classifier and the purifier's score network through ``torch.compile`` at
        fixed shapes while the attack runs (:func:`~art_adp.ensemble.compiled_networks`; eager where compilation
        fails). It changes values only to float rounding, so it is not part of a recorded budget.
    """

    eps: float
    eps_step: float
    max_iter: int
    norm: float = math.inf
    eot_samples: int = 1
    eot_aggregate: str = "mean"
    weight: float = 0.5
    cutoff: float = 0.5
    samples_per_step: int = 1280
    random_start: bool = True
    batch_size: int = 512
    memory_budget: float | None = None
    num_random_init: int = 1
    check_every: int | str = AUTO
    judge_draws: int = JUDGE_DRAWS
    loss: str = "ce"
    eot_target: str = "draws"
    step_schedule: str = "constant"
    judgement: str = "mean"
    precision: str = "fp32"
    compile: bool = False


#: The values of the :class:`Budget` parameters that came after the first records, as those records were made (one
#: run, the last iterate, constant steps, the mean of per-draw cross-entropies): a recorded budget names them only
#: where they differ (:func:`recorded`), so a record without them keeps its meaning.
OLD_BEHAVIOUR: Mapping[str, int | str] = MappingProxyType(
    {
        "num_random_init": 1,
        "check_every": 0,
        "loss": "ce",
        "eot_target": "draws",
        "step_schedule": "constant",
        "judgement": "mean",
        "precision": "fp32",
    }
)


#: The values of the :class:`Budget` options the command lines offer, and their help.
OPTION_CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"loss": ("ce", "margin"), "eot_target": EOT_TARGETS, "step_schedule": STEP_SCHEDULES}
)
OPTION_HELP: Mapping[str, str] = MappingProxyType({
    "loss": "PGD+EOT's loss",
    "eot_target": "what the EOT gradients of PGD+EOT and APGD-EOT differentiate: ensemble, the loss of the judged "
    "ensemble's log mean softmax; draws, the mean of the per-draw losses",
    "step_schedule": "the PGD family's steps: constant, or halving (halved at 1/2 and 3/4 of the iterations)",
})  # fmt: skip


#: :class:`Budget` fields added after run folders kept whole budgets as their settings, with the value those budgets
#: ran at: :func:`budget_settings` names them only where they differ, so those folders' settings stay equal.
LATER_FIELDS: Mapping[str, str] = MappingProxyType({"precision": "fp32"})


def budget_settings(b: Budget) -> dict:
    """A budget as a run folder's settings keep it: its fields, those of :data:`LATER_FIELDS` only where they differ
    from the value the earlier budgets ran at, and not ``compile`` (float rounding only: a run resumes either way)."""
    return {k: v for k, v in asdict(b).items() if k != "compile" and (k not in LATER_FIELDS or LATER_FIELDS[k] != v)}


def target(b: Budget) -> str:
    """The EOT target a budget's attack runs with: ``b.eot_target``, except for the authors' sign vote of the per-draw
    gradients (``eot_aggregate="sign"``), which is a vote of per-draw losses (``"draws"``)."""
    return b.eot_target if b.eot_aggregate == "mean" else "draws"


def recorded(b: Budget, spec: "AttackSpec") -> dict:
    """The budget parameters that came after the first records and that a record of ``spec``'s attack must carry:
    those of :data:`OLD_BEHAVIOUR` the attack takes (restarts and the best iterate with ``spec.best_iterate``, the
    interval with ``spec.checks``, its ``options``) whose value differs from it; ``{}`` for the old behaviour."""
    b = replace(b, eot_target=target(b))
    fields: tuple[str, ...] = (
        (("num_random_init", "check_every") if spec.checks else ("num_random_init",)) if spec.best_iterate else ()
    )
    fields += spec.options + (() if spec.black_box else ("precision",))
    old = {**OLD_BEHAVIOUR, **dict(spec.first)}
    return {k: getattr(b, k) for k in fields if getattr(b, k) != old[k]}


@dataclass(frozen=True)
class AttackSpec:
    """
    One attack as the applications see it.

    :param name: The name in configurations, records and on the command line (``"bpda-eot"``), the one its attack
        class carries (:func:`registered_name`).
    :param label: The row title in every table and figure.
    :param build: ``(estimator, budget, seed) -> EvasionAttack``.
    :param fields: The :class:`Budget` parameters, beyond the threat model (``eps``, ``eps_step``, ``norm``), that
        change its result, in the order the budget is shown (``("max_iter", "eot_samples", "eot_aggregate")``).
    :param cost: ``(budget, forward, full) -> seconds per example``, from the seconds per image of one defended
        forward pass and of one forward+backward pass through the purification.
    :param describe: ``budget -> str``, the budget in a table cell.
    :param gradient: Gradient-based on the defended model (white box); the sanity checks use such attacks.
    :param protocol: The published evaluation the attack comes from, one of :data:`PROTOCOLS`: ``"paper"`` (the
        paper's Table 3, the ``paper`` preset), ``"croce"`` (Croce et al. 2022, the ``croce`` preset), or a later
        attack on diffusion purification.
    :param strongest: The strongest attack of its protocol at the reference budget: the ``strongest`` preset runs
        these.
    :param baseline: The attack an undefended (baseline) classifier gets for this row: the PGD family reduces to
        ``"clf-pgd"`` (:data:`BLIND_ATTACK`); APGD and SPSA run as they are.
    :param own_step: APGD chooses its step itself, starting at ``own_step × eps``; ``None``: ``budget.eps_step``.
    :param norms: The threat models the attack supports.
    :param sanity: Preference of this attack as the white-box attack of the sanity checks (lower first; ``None``:
        never chosen): the full-gradient attacks first, then BPDA.
    :param own: The :class:`Budget` parameters this attack counts apart from the other attacks (APGD's iterations and
        EOT draws follow Croce et al., SPSA's steps and samples its own protocol); an application keeps them under
        ``short`` (e.g. ``apgd_max_iter``).
    :param short: The attack's short name, which prefixes its ``own`` parameters (``"apgd"``).
    :param full: Exact gradients through the purification (the full-gradient attacks).
    :param black_box: Queries outputs only (no EOT, no gradient): left out of the fixed-randomness view and the ε
        sweep.
    :param best_iterate: Keeps each image's best iterate and restarts (the :class:`Budget`'s ``num_random_init``,
        ``check_every``, ``judge_draws``).
    :param checks: Judges its iterates every ``check_every`` iterations (False: APGD, which judges by its own
        interval, and the attacks that keep their own best point within a run and are judged between runs only).
    :param options: The :class:`Budget` options beyond restarts and the best iterate that it takes, from ``loss``,
        ``eot_target``, ``step_schedule``, ``judgement``.
    :param first: ``(option, value)`` pairs: its first records' values of options where they are not
        :data:`OLD_BEHAVIOUR`'s (selective EOT was aimed at DiffHammer's N-evaluation).
    :param start: Where its runs start, one of :data:`STARTS`: ``"budget"``, the budget's ``random_start``;
        ``"random"``, always at a random point of the ε-ball (APGD, as Croce & Hein's; selective EOT, as DiffHammer's);
        ``"own"``, its library's own rule (SPSA, AutoAttack).
    :param consumes: The :class:`Budget` parameters its ``build`` reads beyond the threat model (``eps``, ``norm``)
        and the execution (``batch_size``, ``memory_budget``, ``compile``); the only ones its ``describe`` is shown
        (:func:`consumed_view`). None, the default: derived from the record (:func:`consumed`).
    """

    name: str
    label: str
    build: Callable[..., EvasionAttack]
    fields: tuple[str, ...]
    cost: Callable[[Budget, float, float], float]
    describe: Callable[[Budget], str]
    gradient: bool = True
    protocol: str = "paper"
    strongest: bool = False
    baseline: str = BLIND_ATTACK
    own_step: float | None = None
    norms: tuple[float, ...] = (math.inf, 2)
    sanity: int | None = None
    own: tuple[str, ...] = ()
    short: str = ""
    full: bool = False
    black_box: bool = False
    best_iterate: bool = True
    checks: bool = True
    options: tuple[str, ...] = ()
    first: tuple[tuple[str, str], ...] = ()
    start: str = "budget"
    consumes: tuple[str, ...] | None = None

    def __post_init__(self):
        one_of("start", self.start, STARTS)
        if self.consumes is None:
            object.__setattr__(self, "consumes", consumed(self))
        unknown = sorted(set(self.consumes) - set(_BUDGET_FIELDS))
        if unknown:
            raise ValueError(f"{self.name}: consumes names {unknown}, which are no Budget fields: name only fields of "
                             f"Budget ({', '.join(_BUDGET_FIELDS)}).")  # fmt: skip


#: Where an attack's runs start (:attr:`AttackSpec.start`).
STARTS = ("budget", "random", "own")
_BUDGET_FIELDS = tuple(f.name for f in dataclass_fields(Budget))
#: The value of each :class:`Budget` option at which no budget text names it: what :func:`consumed_view` shows of an
#: option an attack does not consume.
SILENT: Mapping[str, object] = MappingProxyType({
    "random_start": False, "step_schedule": "constant", "num_random_init": 1, "check_every": AUTO, "loss": "ce",
    "eot_target": "draws", "eot_aggregate": "mean", "judgement": "mean", "precision": "fp32",
})  # fmt: skip


def consumed(spec: AttackSpec) -> tuple[str, ...]:
    """The :class:`Budget` parameters ``spec``'s build reads, from the record: the step (unless it sets its own,
    ``own_step``), its ``fields``, the random start (``start="budget"``), restarts (``best_iterate``) and the check
    interval (``checks``), the judgement's draws (the best-iterate rule, or SPSA's judged iterates), its ``options``,
    and the gradient passes' precision (all but the black-box attacks: :func:`_as_registered`)."""
    step = ("eps_step",) if spec.own_step is None else ()
    start = ("random_start",) if spec.start == "budget" else ()
    runs = (("num_random_init", "check_every") if spec.checks else ("num_random_init",)) if spec.best_iterate else ()
    judged = ("judge_draws",) if spec.best_iterate or spec.black_box else ()
    precision = () if spec.black_box else ("precision",)
    return tuple(dict.fromkeys(step + spec.fields + start + runs + judged + spec.options + precision))


def consumed_view(b: Budget, spec: AttackSpec) -> Budget:
    """``b`` as ``spec``'s budget text sees it: every option of :data:`SILENT` that the attack does not consume
    (:attr:`AttackSpec.consumes`) at the value no text names, so its row names only what its attack runs with (the
    low-frequency vote attack's Adam loop no halving steps, SPSA no random start)."""
    consumes = spec.consumes or ()
    return replace(b, **{k: v for k, v in SILENT.items() if k not in consumes})  # type: ignore[arg-type]


def _restarts(b: Budget) -> str:
    """Restarts in words (nothing for one run)."""
    return f", best of {b.num_random_init} runs" if b.num_random_init > 1 else ""


def _steps_text(b: Budget) -> str:
    return f"{b.max_iter} it of {b.eps_step:.4g}" + (", random start" if b.random_start else "")


def _iterations(b: Budget) -> str:
    """The projected loop's budget: its steps, restarts and (``check_every=0``, one run) the last iterate."""
    last = ", last iterate" if b.check_every == 0 and b.num_random_init == 1 else ""
    halving = ", steps halved at 1/2 and 3/4" if b.step_schedule == "halving" else ""
    return _steps_text(b) + halving + _restarts(b) + last


def _target(b: Budget) -> str:
    """The EOT loss in words, where it is not the first records' (the mean of per-draw cross-entropies)."""
    if b.eot_target == "draws" and b.loss == "ce":
        return ""
    of = "of the ensemble's log mean softmax" if b.eot_target == "ensemble" else "per draw"
    return f", {b.loss.upper() if b.loss == 'ce' else b.loss} {of}"


def _with_eot(b: Budget) -> str:
    return f"{_iterations(b)}, EOT {b.eot_samples} ({b.eot_aggregate}){_target(replace(b, eot_target=target(b)))}"


def _ensemble_text(b: Budget) -> str:
    """An attack on the ensemble's loss whatever the budget's EOT target."""
    return _with_eot(replace(b, eot_target="ensemble"))


def _joint_text(b: Budget) -> str:
    return f"{_iterations(b)}, EOT {b.eot_samples}, w = {b.weight:g}"


def _steps(b: Budget) -> dict:
    """The arguments every iterative attack takes from a budget."""
    return {"eps": b.eps, "eps_step": b.eps_step, "max_iter": b.max_iter, "batch_size": b.batch_size}


def _start(b: Budget, seed: int) -> dict:
    """The PGD family's random start, on or off, and its generator seeded by the record's ``seed``, with or without
    a random start: it draws the start and the restarts' starts, and the seed of the best-iterate rule's judging
    draws derives from its seed (:meth:`~art_adp.attacks._core.IterativeAttack._seed_base`)."""
    return {"random_start": b.random_start, "generator": torch.Generator().manual_seed(seed % 2**63)}


def _best(b: Budget) -> dict:
    """Restarts and the best iterate (:class:`~art_adp.attacks._core.IterativeAttack`'s parameters)."""
    return {"num_random_init": b.num_random_init, "check_every": b.check_every, "judge_draws": b.judge_draws}


def _pgd_eot(gradient: str, cls=PGDEOT) -> Callable[..., EvasionAttack]:
    """The builder of a PGD+EOT record: the budget's EOT target (the ensemble variant: its own)."""

    def build(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
        own = {"eot_target": target(b)} if cls is PGDEOT else {}
        return cls(
            estimator,
            gradient=gradient,
            norm=b.norm,
            eot_samples=b.eot_samples,
            loss=b.loss,
            **own,
            aggregate=b.eot_aggregate,
            memory_budget=b.memory_budget,
            step_schedule=b.step_schedule,
            **_start(b, seed),
            **_steps(b),
            **_best(b),
        )

    return build


def _joint(cls) -> Callable[..., EvasionAttack]:
    def build(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
        return cls(estimator, norm=b.norm, eot_samples=b.eot_samples, weight=b.weight, step_schedule=b.step_schedule,
                   **_start(b, seed), **_steps(b), **_best(b))  # fmt: skip

    return build


def _pgd_eot_dev(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    return PGDEOTDev(
        estimator,
        gradient="full",
        norm=b.norm,
        eot_samples=b.eot_samples,
        aggregate=b.eot_aggregate,
        memory_budget=b.memory_budget,
        **_start(b, seed),
        **_steps(b),
        **_best(b),
    )


#: Selective EOT's restarts, in order (DiffHammer's ``LOSS_NAMES``).
SELECTIVE_LOSSES = ("margin", "ce", "dlr")


def _selective(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    if b.num_random_init != 1:
        raise ValueError(
            f"selective-eot restarts by its losses (margin, then CE, then DLR, on the images left), got "
            f"num_random_init={b.num_random_init}: give it 1."
        )
    steps = {k: v for k, v in _steps(b).items() if k != "eps_step"}  # APGD's step control sets its own (2ε)
    losses = SELECTIVE_LOSSES if getattr(estimator, "nb_classes", 3) >= 3 else SELECTIVE_LOSSES[:2]  # DLR: 3 classes
    return SelectiveEOT(
        estimator,
        gradient="full",
        graft=True,
        norm=b.norm,
        eot_samples=b.eot_samples,
        losses=losses,
        memory_budget=b.memory_budget,
        seed=seed,
        judge_samples=b.judge_draws,
        judgement=b.judgement,
        **steps,
    )


def _selective_cost(b: Budget, forward: float, full: float) -> float:
    """Per loss and iteration: the N draws forward (the classifier's own gradients are not counted), one grafted
    forward + backward pass through purification, and the N judging draws forward; every loss runs on every image
    (an upper bound: the restarts run on the images left)."""
    return len(SELECTIVE_LOSSES) * b.max_iter * (2 * b.eot_samples * forward + full)


def _clf_pgd(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    return ClassifierPGD(estimator, seed=seed, norm=b.norm, num_random_init=int(b.random_start), verbose=False,
                         **_steps(b))  # fmt: skip


def _apgd_text(b: Budget) -> str:
    ensemble = ", losses of the ensemble's log mean softmax" if b.eot_target == "ensemble" else ""
    return f"CE+DLR, {b.max_iter} it/loss, EOT {b.eot_samples}{_restarts(b)}{ensemble}"


def _apgd(cls) -> Callable[..., EvasionAttack]:
    def build(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
        steps = {k: v for k, v in _steps(b).items() if k != "eps_step"}  # APGD sets its own step
        own = {"eot_target": b.eot_target} if cls in (APGDEOT, APGDEOTT) else {}  # the variants' are their own
        return cls(estimator, norm=b.norm, eot_samples=b.eot_samples, memory_budget=b.memory_budget, seed=seed,
                   num_random_init=b.num_random_init, judge_draws=b.judge_draws, **own, **steps)  # fmt: skip

    return build


def _apgd_t_text(b: Budget) -> str:
    ensemble = ", loss of the ensemble's log mean softmax" if b.eot_target == "ensemble" else ""
    targets = f"targeted DLR, top {N_TARGET_CLASSES} runner-ups of the clean mean softmax in turn"
    return f"{targets}, {b.max_iter} it/target, EOT {b.eot_samples}{_restarts(b)}{ensemble}"


def _apgd_t_cost(b: Budget, forward: float, full: float) -> float:
    # APGD-EOT's cost of one loss per target (at most N_TARGET_CLASSES: each target after the first attacks the
    # images left), and the targets ranked on eot_samples clean draws forward
    runs = b.num_random_init * N_TARGET_CLASSES * b.max_iter * b.eot_samples * full
    judged = judgements(replace(b, check_every=AUTO))
    return runs + b.num_random_init * N_TARGET_CLASSES * judged * b.judge_draws * forward + b.eot_samples * forward


def _lowfreq_vote(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    if b.num_random_init != 1:
        raise ValueError(
            f"lowfreq-vote runs DiffBreak's loop once (its best iterate and early stop by the vote of its own draws), "
            f"got num_random_init={b.num_random_init}: give it 1, or restart another attack."
        )
    return LowFrequencyVote(
        estimator,
        gradient="full",
        norm=b.norm,
        eot_samples=b.eot_samples,
        cutoff=b.cutoff,
        random_start=b.random_start,
        memory_budget=b.memory_budget,
        seed=seed,
        judge_draws=b.judge_draws,
        judgement=b.judgement,
        **_steps(b),
    )


def _lowfreq_text(b: Budget) -> str:
    """DiffBreak's Adam loop: no step schedule, one run (its own best iterate and early stop)."""
    start = ", random start" if b.random_start else ""
    aim = "" if b.judgement == "majority" else f", aimed at the {b.judgement} judgement"
    return f"{b.max_iter} it of {b.eps_step:.4g} (Adam){start}, EOT {b.eot_samples}, DCT cutoff {b.cutoff:g}{aim}"


def _spsa(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
    return BlackBoxSPSA(estimator, samples_per_step=b.samples_per_step, seed=seed, judge_draws=b.judge_draws,
                        **_steps(b))  # fmt: skip


def judgements(b: Budget, full: bool = True) -> int:
    """Judgements of the iterates per image and run of the projected loop: the start, every ``check_every``-th
    iterate and the last (``check_every=0``: the last, and only when there are restarts to decide); ``"auto"``
    resolved for an attack with (``full``) or without backward passes through the purification."""
    every = check_interval(b.check_every, eot_samples=b.eot_samples, judge_draws=b.judge_draws, full=full)
    if every == 0:
        return int(b.num_random_init > 1)
    return b.max_iter // every + 1 + int(b.max_iter % every != 0)


def _judged(b: Budget, forward: float, per_run: int) -> float:
    """Seconds per image of ``per_run`` judgements in each of the runs: ``judge_draws`` forward passes each."""
    return b.num_random_init * per_run * b.judge_draws * forward


def _free(b: Budget, forward: float, full: float) -> float:  # pylint: disable=unused-argument
    return 0.0  # Clf-PGD never runs the purifier (nor does its judgement: the bare classifier)


def _per_draw(b: Budget, forward: float, full: float) -> float:  # pylint: disable=unused-argument
    runs = b.num_random_init * b.max_iter * b.eot_samples * forward  # BPDA and the Joint attacks: forward passes only
    return runs + _judged(b, forward, judgements(b, full=False))


def _per_full_draw(b: Budget, forward: float, full: float) -> float:
    return b.num_random_init * b.max_iter * b.eot_samples * full + _judged(b, forward, judgements(b))


def _apgd_cost(b: Budget, forward: float, full: float) -> float:
    # CE then DLR in every run, each draw forward + backward (the loss comes with the gradient); its iterates judged
    # at APGD's own interval ("auto")
    runs = b.num_random_init * 2 * b.max_iter * b.eot_samples * full
    judged = judgements(replace(b, check_every=AUTO))
    return runs + b.num_random_init * 2 * judged * b.judge_draws * forward


_CLF = ("max_iter",)
#: The options each kind of attack takes (:attr:`AttackSpec.options`).
_PGD_OPTIONS = ("loss", "eot_target", "step_schedule")
_APGD = ("max_iter", "eot_samples")
_PGD = ("max_iter", "eot_samples", "eot_aggregate")
_JOINT = ("max_iter", "eot_samples", "weight")

ATTACKS: tuple[AttackSpec, ...] = (
    AttackSpec(
        BLIND_ATTACK,
        "Clf-PGD (preprocessor-blind)",
        _clf_pgd,
        _CLF,
        _free,
        _steps_text,
        gradient=False,
        best_iterate=False,
        checks=False,
    ),  # fmt: skip
    AttackSpec(SWEEP_ATTACK, "BPDA+EOT", _pgd_eot("bpda"), _PGD, _per_draw, _with_eot, sanity=2, options=_PGD_OPTIONS),
    *(
        AttackSpec(registered_name(c), label, _joint(c), _JOINT, _per_draw, _joint_text, options=("step_schedule",))
        for c, label in ((JointScore, "Joint (score)+EOT"), (JointFull, "Joint (full)+EOT"))
    ),
    AttackSpec(
        registered_name(BlackBoxSPSA),
        "SPSA (black-box)",
        _spsa,
        ("max_iter", "samples_per_step"),
        # 2 × samples_per_step forward passes a step; every iterate (the start's too) judged on judge_draws draws
        cost=lambda b, f, g: b.max_iter * 2 * b.samples_per_step * f + (b.max_iter + 1) * b.judge_draws * f,
        describe=lambda b: f"{_steps_text(b)}, {b.samples_per_step} samples/step, best iterate",
        gradient=False,
        baseline=registered_name(BlackBoxSPSA),
        norms=(math.inf,),
        own=("max_iter", "samples_per_step"),
        short="spsa",
        black_box=True,
        best_iterate=False,
        start="own",
    ),
    AttackSpec(
        FULL_ATTACK,
        "Full-gradient PGD+EOT",
        _pgd_eot("full"),
        _PGD,
        _per_full_draw,
        _with_eot,
        strongest=True,
        sanity=0,
        full=True,
        options=_PGD_OPTIONS,
    ),
    AttackSpec(
        registered_name(PGDEOTEnsemble, "full"),
        "Full-gradient PGD+EOT on the ensemble's loss",
        _pgd_eot("full", PGDEOTEnsemble),
        _PGD,
        _per_full_draw,
        _ensemble_text,
        protocol="ensemble",
        strongest=True,
        full=True,
        options=("loss", "step_schedule"),
    ),
    AttackSpec(
        registered_name(APGDEOT),
        "APGD-EOT (CE, then DLR)",
        _apgd(APGDEOT),
        _APGD,
        cost=_apgd_cost,
        describe=_apgd_text,
        protocol="croce",
        strongest=True,
        baseline=registered_name(APGDEOT),
        own_step=2.0,
        sanity=1,
        own=_APGD,
        short="apgd",
        full=True,
        checks=False,
        options=("eot_target",),
        start="random",
    ),
    AttackSpec(
        registered_name(APGDEOTEnsemble),
        "APGD-EOT on the ensemble's losses",
        _apgd(APGDEOTEnsemble),
        _APGD,
        cost=_apgd_cost,
        describe=lambda b: _apgd_text(replace(b, eot_target="ensemble")),
        protocol="ensemble",
        strongest=True,
        baseline=registered_name(APGDEOT),  # without a purifier the ensemble is one draw: APGD-EOT
        own_step=2.0,
        own=_APGD,
        short="apgd",
        full=True,
        checks=False,
        start="random",
    ),
    AttackSpec(
        registered_name(LowFrequencyVote),
        "Low-frequency vote attack (DiffBreak's loop, DCT band of the ε-ball)",
        _lowfreq_vote,
        ("max_iter", "eot_samples", "cutoff"),
        # at most: each step the draws forward + backward through the purification and a judgement of judge_draws
        # draws of its own; one more judges the start (images stopped early cost less; the fresh draws that confirm a
        # win before a stop are not counted)
        cost=lambda b, f, g: b.max_iter * (b.eot_samples * g + b.judge_draws * f) + b.judge_draws * f,
        describe=_lowfreq_text,
        protocol="diffbreak",
        strongest=True,
        baseline=registered_name(LowFrequencyVote),
        own=("max_iter",),  # DiffBreak's 100 iterations, apart from PGD's budget
        short="lowfreq",
        full=True,
        checks=False,  # its own best iterate and stop by its judgement within a run; the rule between runs
        options=("judgement",),
        first=(("judgement", "majority"),),
    ),
    AttackSpec(
        registered_name(PGDEOTDev, "full"),
        "Full-gradient PGD+EOT, DiffAttack's loss on every purification state",
        _pgd_eot_dev,
        _PGD,
        # each draw forward + backward, plus the forward the step-wise checkpointing recomputes
        lambda b, f, g: _per_full_draw(b, f, g) + b.num_random_init * b.max_iter * b.eot_samples * f,
        lambda b: f"{_with_eot(b)}, CE + {DEV_WEIGHT:g} x mean state deviation",
        protocol="diffattack",
        full=True,
    ),
    AttackSpec(
        registered_name(APGDEOTDev),
        "APGD-EOT, DiffAttack's loss on every purification state",
        _apgd(APGDEOTDev),
        _APGD,
        cost=lambda b, f, g: _apgd_cost(b, f, g) + 2 * b.max_iter * b.eot_samples * f,  # + the checkpoints' recompute
        describe=lambda b: (
            f"CE+DLR + {DEV_WEIGHT:g} x mean state deviation, {b.max_iter} it/loss, EOT {b.eot_samples}{_restarts(b)}"
        ),
        protocol="diffattack",
        strongest=True,
        baseline=registered_name(APGDEOT),  # without a purifier APGD-EOT is the reduced attack
        own_step=2.0,
        own=_APGD,
        short="apgd",
        full=True,
        checks=False,
        start="random",
    ),
    AttackSpec(
        registered_name(SelectiveEOT),
        "Selective EOT (DiffHammer)",
        _selective,
        ("max_iter", "eot_samples"),
        _selective_cost,
        lambda b: f"margin, CE, DLR; {b.max_iter} it/loss, {b.eot_samples} draws, EM-weighted, grafted"
        + ("" if b.judgement == "worst" else f", aimed at the {b.judgement} judgement"),
        protocol="diffhammer",
        strongest=True,
        own_step=2.0,
        own=("max_iter", "eot_samples"),  # DiffHammer's N = 10 draws and 50 iterations, apart from PGD's budget
        short="selective",
        full=True,
        checks=False,  # its own best iterate within a run, its losses as restarts
        options=("judgement",),
        first=(("judgement", "worst"),),
        start="random",
    ),
    AttackSpec(
        AUTOATTACK,
        "AutoAttack (standard: APGD-CE, APGD-T, FAB-T, Square)",
        lambda estimator, b, seed=0: AutoAttackStandard(estimator, eps=b.eps, seed=seed),
        (),
        # at most: APGD-CE's 100 iterations, APGD-T's and FAB-T's 9 targets × 100, forward + backward, and Square's
        # 5,000 queries (each attack runs on the images the previous left robust: usually far fewer)
        cost=lambda b, f, g: 1900 * g + 5000 * f,
        describe=lambda b: "standard version (torchattacks)",
        gradient=False,
        protocol="baseline",
        baseline=AUTOATTACK,
        norms=(math.inf,),
        best_iterate=False,
        checks=False,
        start="own",
        consumes=("precision",),  # torchattacks' standard version: ε only, its own steps and iterations
    ),
    AttackSpec(
        registered_name(APGDEOTT),
        f"APGD-EOT-T (targeted DLR, top {N_TARGET_CLASSES} runner-ups in turn)",
        _apgd(APGDEOTT),
        _APGD,
        cost=_apgd_t_cost,
        describe=_apgd_t_text,
        protocol="autoattack",
        strongest=True,
        baseline=registered_name(APGDEOTT),  # without a purifier: AutoAttack's APGD-T
        own_step=2.0,
        own=_APGD,
        short="apgd",
        full=True,
        checks=False,
        options=("eot_target",),
        start="random",
    ),
)


def _check_precision(estimator, b: Budget) -> None:
    """bf16 gradient passes through ADP's finite-difference step rule would drown h(x + δh) − h(x) in bf16 rounding
    (as ``purify(amp=...)`` refuses): refused, naming the fix."""
    from ._core import purifiers
    from ..preprocessor import ADPPurifier

    one_of("precision", b.precision, ("fp32", "bf16"))
    rule = [p for p in purifiers(estimator) if isinstance(p, ADPPurifier) and p.steps and p.step_size == "adaptive"]
    if b.precision == "bf16" and rule:
        raise ValueError(
            "precision='bf16' runs the purification under bf16 autocast, where ADP's adaptive step (h(x + δh) − h(x) "
            "with δ = 1e-3) drowns in rounding: use step_size='adaptive-jvp' or a fixed schedule (the one-step "
            "denoise), or precision='fp32'."
        )


def _as_registered(spec: AttackSpec) -> AttackSpec:
    """``spec`` as :data:`REGISTRY` keeps it: its budget text made from the parameters its attack consumes only
    (:func:`consumed_view`), and its attacks running their gradient passes at the budget's ``precision`` (the
    black-box ones have none), which the text names where it is not fp32."""
    build, describe = spec.build, spec.describe
    if spec.black_box:
        return replace(spec, describe=lambda b: describe(consumed_view(b, spec)))

    def at(estimator, b: Budget, seed: int = 0) -> EvasionAttack:
        _check_precision(estimator, b)
        attack = build(estimator, b, seed)
        if b.precision != "fp32" or b.compile:
            plain = attack.generate

            def generate(x, y=None, **kwargs):
                with gradient_precision(b.precision), compiled_networks(estimator) if b.compile else nullcontext():
                    return plain(x, y=y, **kwargs)

            attack.generate = generate  # type: ignore[method-assign]
        return attack

    def text(b: Budget) -> str:
        return describe(consumed_view(b, spec)) + ("" if b.precision == "fp32" else f", {b.precision} gradient passes")

    return replace(spec, build=at, describe=text)


#: Attacks that records on file name but the registry no longer builds, with the label their rows keep: the
#: ``"systemic-lowfreq"`` rows were measured by the low-frequency vote attack before it followed DiffBreak's loop
#: (sign steps, margin capped at 1, the best iterate chosen on the gradient's own draws, no early stop).
RETIRED: Mapping[str, str] = MappingProxyType(
    {"systemic-lowfreq": "Systemic low-frequency (vote; retired: sign steps, margin capped at 1)"}
)
CLEAN_LABEL = "Natural (clean)"
_SPECS: dict[str, AttackSpec] = {}
_LABELS: dict[str, str] = {"clean": CLEAN_LABEL, **RETIRED}
#: Every attack by name, in table order: read-only; :func:`register` adds one.
REGISTRY: Mapping[str, AttackSpec] = MappingProxyType(_SPECS)
#: Every row's title by record name: the clean row, the retired attacks and the registry's.
LABELS: Mapping[str, str] = MappingProxyType(_LABELS)


def register(spec: AttackSpec) -> AttackSpec:
    """
    Add the attack ``spec`` to :data:`REGISTRY`: the one place a new attack is named. Every plan then takes it by
    name -- ``evaluate_robustness(attacks=(NAME,))``, ``levers --attacks NAME`` (an adaptive row at the preset's
    budget), and ``evaluate --attacks NAME`` for an attack registered before :mod:`art_adp.apps` is imported -- its
    gradient passes at the budget's precision, its cost priced by ``spec.cost``.

    :return: The registered spec (its ``build`` runs at the budget's precision; its ``describe`` names only the
        parameters it consumes, :func:`consumed_view`).
    :raises ValueError: If the name is taken (by an attack or a retired one) or the protocol is not one of
        :data:`PROTOCOLS`.
    """
    if spec.name in _LABELS:
        raise ValueError(f"An attack named {spec.name!r} is registered already: give yours another name.")
    if spec.protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {spec.protocol!r}.")
    _SPECS[spec.name], _LABELS[spec.name] = _as_registered(spec), spec.label
    return _SPECS[spec.name]


def unregister(name: str) -> None:
    """Take the attack ``name`` out of :data:`REGISTRY` (one a caller registered, say).

    :raises KeyError: If no attack of that name is registered."""
    if name not in _SPECS:
        raise KeyError(f"No attack named {name!r} is registered; registered: {list(_SPECS)}.")
    del _SPECS[name], _LABELS[name]


for _spec in ATTACKS:
    register(_spec)
ATTACKS = tuple(REGISTRY.values())  # the attacks this module defines


def names(*, protocol: str | None = None, full: bool | None = None, strongest: bool | None = None) -> tuple[str, ...]:
    """The attacks' names in table order (``protocol="paper"``: those of the paper's table only; ``full=True``: the
    full-gradient attacks only; ``strongest=True``: the strongest of each protocol)."""
    return tuple(
        s.name
        for s in REGISTRY.values()
        if protocol in (None, s.protocol) and full in (None, s.full) and strongest in (None, s.strongest)
    )


def gradient_attacks() -> tuple[str, ...]:
    """The white-box attacks the sanity checks may run, the preferred first."""
    chosen = sorted((s for s in REGISTRY.values() if s.sanity is not None), key=lambda s: s.sanity or 0)
    return tuple(s.name for s in chosen)
