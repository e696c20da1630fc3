"""The named plans: one table of what art-adp's commands measure, selected by name.

A plan is data -- the command that runs it, a line saying what it measures, and its values -- so a preset is an entry
of :data:`PLANS`, not code in a command. ``art-adp evaluate --preset NAME`` and
:func:`~art_adp.runs.engine.evaluate_robustness` (``preset=NAME``) select an evaluation plan (``paper``, ``croce``,
``strongest``, ``smoke``); ``art-adp levers --dataset D`` selects ``levers:D``; ``art-adp reproduce mnist`` selects
``reproduce:mnist``. Each extends what it selects with its flags and keeps what is its own: evaluate's card and sanity
checks, levers' classifier training, reproduce's stages and curves. ``art-adp plans`` lists the table.

An evaluation plan's values are overrides of :data:`PAPER`, the flat budget table that
:class:`~art_adp.apps.evaluation.EvalConfig` is made of: the shared counts (``max_iter``, ``eot_samples``), each
attack's own under its short name (``apgd_max_iter``), the judging (``ensemble_size``, ``repeats``) and the
evaluate command's own checks (``sanity_*``). :func:`budget` is the one builder of an attack's
:class:`~art_adp.attacks.registry.Budget`: from such a table (the command's; the Python entry point's, or
:data:`ENTRY_POINT` without a preset), and from a lever row's or a recipe's values, given to it. The
lever tables' and reproduce's plans are their commands' own frozen records (a data set's rows and classifiers, a
recipe), registered by their modules (:func:`register`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..attacks import registry
from ..attacks._core import AUTO
from ..attacks.registry import REGISTRY, Budget

__all__ = ["ATTACKS", "COMMANDS", "COUNTS", "ENTRY_POINT", "MASKING_EXAMPLES", "PAPER", "PLANS", "PLATEAU", "Plan",
           "STANDARD", "STRONGEST_ATTACKS", "budget", "budget_fields", "count_fields", "plan", "plan_names",
           "register", "SMOKE_COUNTS", "sized_counts"]  # fmt: skip

COMMANDS = ("evaluate", "levers", "reproduce")
#: The attacks on the purification (the undefended baselines' own, AutoAttack, runs in the lever tables).
ATTACKS = tuple(a for a in registry.names() if REGISTRY[a].protocol != "baseline")
# The counts of a budget (compared with the reference's); the other budget fields are choices (aggregate, weight).
COUNTS = ("max_iter", "eot_samples", "samples_per_step")


@dataclass(frozen=True)
class Plan:
    """
    One named plan.

    :param command: The command that runs it, one of :data:`COMMANDS`.
    :param what: What it measures, in one line (``art-adp plans``, the commands' help).
    :param values: An evaluation plan's values over :data:`PAPER`; a lever table's or reproduction's own record.
    """

    command: str
    what: str
    values: Any = field(default_factory=dict)

    def __post_init__(self):
        if self.command not in COMMANDS:
            raise ValueError(f"A plan's command must be one of {COMMANDS}, got {self.command!r}.")


def budget_fields(attack: str) -> tuple[str, ...]:
    """The names under which a plan keeps ``attack``'s budget: the registry's :class:`Budget` parameters of the
    attack, those it counts on its own prefixed with its short name (``apgd_max_iter``); none for ``"clean"`` and
    ``"flags"``."""
    if attack in ("clean", "flags"):
        return ()
    spec = REGISTRY[attack]
    return tuple(f"{spec.short}_{f}" if f in spec.own else f for f in spec.fields)


def count_fields(attack: str) -> tuple[str, ...]:
    """The names that count ``attack``'s budget (iterations, draws, samples; its own ones prefixed, e.g.
    ``("selective_max_iter", "selective_eot_samples")``): what shrinks its cost."""
    fields = REGISTRY[attack].fields if attack in REGISTRY else ()
    return tuple(k for k, p in zip(budget_fields(attack), fields) if p in COUNTS)


def budget(attack: str, values: Mapping[str, Any] = MappingProxyType({}), /, **given) -> Budget:
    """
    The one builder of a :class:`Budget` (``tests/test_layering.py`` finds any other): ``attack``'s budget from a
    plan's flat ``values`` -- :data:`PAPER`'s names: the attack's parameters (:func:`budget_fields`, its own counts
    under their prefixed names, ``apgd_max_iter``), the choices (random start, restarts, checks, loss, EOT target,
    steps) and S as ``ensemble_size``; a name the plan lacks keeps the :class:`Budget`'s default -- and the ``given``
    :class:`Budget` parameters: those every attack of a run takes alike (ε, step, batch), or all of a lever row's or a
    recipe's budget. The given ones replace the plan's choices and S; the attack's parameters the plan holds stay the
    plan's (a shared ``max_iter`` given does not replace APGD's own ``apgd_max_iter``).
    """
    named = zip(REGISTRY[attack].fields, budget_fields(attack)) if attack in REGISTRY else ()  # a clean row: none
    own = {param: values[name] for param, name in named if name in values}
    choices = {k: values[k] for k in ("num_random_init", "check_every", "loss", "eot_target", "step_schedule",
                                      "random_start") if k in values}  # fmt: skip
    draws = {"judge_draws": values["ensemble_size"]} if "ensemble_size" in values else {}
    return Budget(**{**draws, **choices, **given, **own})


#: The paper's protocol (its Table 3 on CIFAR-10: ℓ∞ 8/255, step ε/4, 40 iterations, 15 EOT draws, SPSA of 1,280
#: samples a step, S = 10) plus full-gradient PGD+EOT at that budget; each attack's own budget at its paper's value
#: (APGD's 100 iterations and 200 draws, Croce et al.; selective EOT's and the low-frequency vote's), judged R = 10
#: times; the PGD family from the image, as the paper ran it (``random_start=False``, not :class:`Budget`'s default:
#: ``paper`` and ``croce`` keep their papers' choices). Every evaluation plan is this with its values over it.
PAPER: Mapping[str, Any] = MappingProxyType(dict(
    attacks=registry.names(protocol="paper"), norm=math.inf, eps=8 / 255, eps_step=None,
    max_iter=40, eot_samples=15, eot_aggregate="mean", weight=0.5, cutoff=0.5, num_random_init=1, check_every=AUTO,
    spsa_max_iter=40, spsa_samples_per_step=1280, apgd_max_iter=100, apgd_eot_samples=200, selective_max_iter=50,
    selective_eot_samples=10, lowfreq_max_iter=100, random_start=False, loss=Budget.loss,
    eot_target=Budget.eot_target, step_schedule=Budget.step_schedule, ensemble_size=10, repeats=10,
    sanity_iterations=(0.25, 0.5, 1.0, 2.5), sanity_eot_samples=(1, 5, 15, 50),
))  # fmt: skip

#: The smoke plan's counts, for every attack alike (shared and own): enough to run each attack end to end, no more.
SMOKE_COUNTS = {"max_iter": 2, "eot_samples": 2, "samples_per_step": 8}


def sized_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Every count of every attack's budget, the attacks' own included, from ``counts`` (keyed by the :class:`Budget`
    parameter), so that no attack's own budget leaks into a plan sized by it."""
    fields = {f: p for a in ATTACKS for f, p in zip(budget_fields(a), REGISTRY[a].fields) if p in COUNTS}
    missing = sorted(set(fields.values()) - set(counts))
    if missing:
        raise ValueError(f"counts must size every count of the attacks' budgets; missing: {missing}.")
    return {f: counts[p] for f, p in fields.items()}


#: Where measured strength stops growing, for the counts the strongest plan runs below the papers' costliest (a count
#: at or above it meets the reference, :func:`~art_adp.apps.evaluation.config.shortfalls`): the APGD-EOT family (its
#: own counts) at Croce et al.'s 100 iterations per loss and 8 EOT draws, the lever tables' budget
#: (docs/attacks.md#measured). Fashion-MNIST's budget curve (docs/fashion_mnist_results.md#is-the-budget-enough;
#: full-gradient PGD+EOT on the exact score's one-step denoise, 100 images, one S = 10 judgement per point) is flat
#: from 40 iterations at EOT 8: at 100 iterations EOT 8, 16 and 32 leave 65.0, 64.0 and 63.0 %, 200 iterations at EOT
#: 8 64.0 %, every point within one another's 95 % intervals (about ±9 points). Croce et al.'s 200 draws (the
#: ``croce`` plan keeps them) cost 25 times the draws for at most the 2 points from EOT 8 to 32 there. APGD-EOT's own
#: draws, measured on two answer rows (docs/attacks.md, 200 images, worst of 10): below 8 it gives up images -- 2 and 4
#: draws leave one Fashion-MNIST image that 8 breaks, 4 draws three CIFAR-10 images, and neither breaks one that 8
#: leaves -- so the family stays at 8.
PLATEAU: Mapping[str, int] = MappingProxyType({"apgd_max_iter": 100, "apgd_eot_samples": 8})
#: The Python entry point's attacks by default: the paper's Clf-PGD, then full-gradient PGD+EOT and APGD-EOT through
#: the purification, each on the per-draw mean and on the ensemble's loss (the strongest preset's gradient attacks).
STANDARD = (
    registry.BLIND_ATTACK,
    *(a for a, spec in REGISTRY.items() if spec.strongest and spec.protocol in ("paper", "croce", "ensemble")),
)
#: What :func:`~art_adp.runs.engine.evaluate_robustness` measures without a preset (its flat values, not a plan of
#: :data:`PLANS`: ``art-adp evaluate`` starts from :data:`PAPER`): :data:`STANDARD`, every attack at the same counts
#: (no attack's own: the engine gives these to each as the run's shared ones) of 100 iterations and 8 EOT draws (the
#: lever tables' budget, where :data:`PLATEAU` finds measured strength stops growing) from a random start, the best
#: iterate judged; S = R = 10. The counts, S and R given beside it replace these.
ENTRY_POINT: Mapping[str, Any] = MappingProxyType(dict(
    attacks=STANDARD, max_iter=100, eot_samples=8, random_start=True, check_every=AUTO, ensemble_size=10, repeats=10,
))  # fmt: skip
#: The strongest plan's attacks: the strongest of each protocol (:attr:`~art_adp.attacks.registry.AttackSpec.strongest`)
#: and BPDA+EOT (the paper's adaptive attack: through the purification's forward pass only, so a clamp or another step
#: without a useful gradient does not stop it), in table order.
STRONGEST_ATTACKS = tuple(a for a in ATTACKS if REGISTRY[a].strongest or a == registry.SWEEP_ATTACK)
#: The strongest plan's gradient-free masking check: SPSA at the paper's budget (40 steps of 1,280 samples, each
#: sample a fresh purification draw) on the first 16 images, run where the defence clips its noisy input (the clamp of
#: x + σε passes no gradient for the clipped pixels); about 16 × 102,810 defended forward passes, priced by
#: ``--estimate-only``.
MASKING_EXAMPLES = 16

#: Every named plan, the evaluation plans largest first (the estimate's log offers the ones after it as smaller); the
#: lever tables' (``levers:<data set>``) and reproduce's (``reproduce:<recipe>``) are registered by their modules.
PLANS: dict[str, Plan] = {
    "strongest": Plan("evaluate", "the strongest attack of each protocol and BPDA+EOT at the reference budgets, APGD's "
                      "family at 100 iterations and EOT 8 (where measured strength stops growing: 4 draws give up "
                      "images on two rows), the PGD rows from a random start with halving steps (one schedule: on the "
                      "rows measured neither breaks more than one image in 200 that the other leaves); SPSA checks for "
                      f"masking on the first {MASKING_EXAMPLES} images where the noisy input is clipped; R = 10, "
                      "DiffHammer's N-evaluation as the worst case",
                      {"attacks": STRONGEST_ATTACKS, "random_start": True, "step_schedule": "halving", **PLATEAU,
                       "masking_examples": MASKING_EXAMPLES}),
    "paper": Plan("evaluate", "the paper's Table 3 protocol (the default): BPDA/Joint 40 iterations of ε/4 with EOT "
                  "15 from the image, SPSA 40 steps of 1,280 samples, full-gradient PGD+EOT; S = 10, R = 10"),
    "croce": Plan("evaluate", "Croce et al. 2022: full-gradient APGD-CE then APGD-DLR, 100 iterations, EOT 200; R = 10",
                  {"attacks": registry.names(protocol="croce"), "sanity_iterations": (0.25, 0.5, 1.0),
                   "sanity_eot_samples": (20, 50, 200)}),
    "smoke": Plan("evaluate", "CI-sized: 16 images, every attack end to end at 2 iterations and 2 draws from the "
                  "image, every attack's own budget too; not a robustness claim",
                  {"attacks": ATTACKS, "ensemble_size": 2, "repeats": 2, "chunk_size": 16, "sanity_examples": 16,
                   "sanity_iterations": (0.5, 1.0, 2.0), "sanity_eot_samples": (1, 2, 4),
                   "compression_examples": 16, "n_examples": 16, **sized_counts(SMOKE_COUNTS),
                   # from the image, as PAPER: tests/golden/evaluate/ holds this plan's records, made so
                   "random_start": False}),
}  # fmt: skip


def register(name: str, p: Plan) -> Plan:
    """Add the plan ``name`` to :data:`PLANS` (a command's module registers its own); a name taken by another plan is
    refused."""
    held = PLANS.get(name)
    if held is not None and held != p:
        raise ValueError(f"A plan named {name!r} is registered already ({held.command}: {held.what}).")
    PLANS[name] = p
    return p


def plan_names(command: str | None = None) -> tuple[str, ...]:
    """The names of the plans ``command`` runs (None: all), in the table's order."""
    return tuple(k for k, p in PLANS.items() if command in (None, p.command))


def plan(name: str, command: str | None = None) -> Plan:
    """The plan called ``name``; an unknown one, or one another command runs, is refused with the names ``command``
    may select."""
    p = PLANS.get(name)
    if p is None or command not in (None, p.command):
        raise ValueError(f"Unknown plan {name!r}{'' if command is None else f' for {command}'}; choose from "
                         f"{', '.join(plan_names(command))}.")  # fmt: skip
    return p
