"""The presets' budgets: an attack's own budget (:attr:`~art_adp.attacks.registry.AttackSpec.own`) is at its paper's
value in every preset that claims strength and sized with the rest in ``smoke``, by one rule in the preset table; the
smoke preset's cost, from the cost model, stays a small share of the strongest preset's."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from art_adp.apps.evaluation import EvalConfig
from art_adp.apps.evaluation.config import PRESETS
from art_adp.runs.plans import ATTACKS, COUNTS, SMOKE_COUNTS, budget_fields, sized_counts
from art_adp.apps.evaluation.run import estimate, plan
from art_adp.attacks.registry import REGISTRY

#: Seconds per image of one defended forward pass and of one with a full gradient through the purification, in the
#: digits' proportion (the probe measures about 8 ms and 53 ms on a CPU).
DIGITS_PROBE = {"forward": 1.0, "full": 6.0}
#: The most any attack may cost in smoke, per image, as a share of its cost at the strongest preset's budget.
ATTACK_SHARE = 1 / 20
#: The most the smoke preset's whole plan may cost, per image, as a share of the strongest preset's.
PLAN_SHARE = 1 / 200

OWN = [(a, field, param) for a in ATTACKS for field, param in zip(budget_fields(a), REGISTRY[a].fields)
       if param in REGISTRY[a].own]  # fmt: skip


def _per_image(c: EvalConfig, n: int = 16) -> float:
    """Estimated seconds per image of ``c``'s whole plan (the main table, the fixed-noise view, the sanity checks) on
    ``n`` digits, from the cost model at :data:`DIGITS_PROBE`."""
    units = [(s, a, np.arange(min(n, c.sanity_examples) if s.subset else n)) for s in plan(c) for a in s.attacks]
    return estimate(units, c, DIGITS_PROBE) / n


def _attack_cost(attack: str, c: EvalConfig) -> float:
    """Seconds per image of ``attack`` at ``c``'s budget, its judgement of the table aside (the registry's cost)."""
    return REGISTRY[attack].cost(c.budget(attack), DIGITS_PROBE["forward"], DIGITS_PROBE["full"])


def test_the_smoke_preset_costs_a_small_share_of_the_strongest_on_the_digits():
    smoke, top = PRESETS["smoke"], PRESETS["strongest"]
    assert set(smoke.attacks) == set(ATTACKS)  # every attack end to end
    dear = {a: f"{_attack_cost(a, smoke) / _attack_cost(a, top):.3f}" for a in ATTACKS
            if _attack_cost(a, smoke) > ATTACK_SHARE * _attack_cost(a, top)}  # fmt: skip
    assert dear == {}, f"attacks costing smoke more than {ATTACK_SHARE:g} of the strongest budget's cost: {dear}"
    assert _per_image(smoke) <= PLAN_SHARE * _per_image(top)


@pytest.mark.parametrize("attack", sorted({a for a, _, _ in OWN}))
def test_an_attacks_own_budget_leaking_into_smoke_fails_the_budget_test(attack):
    top = PRESETS["strongest"]
    leaked = dataclasses.replace(PRESETS["smoke"], **{f: getattr(top, f) for a, f, _ in OWN if a == attack})
    assert _attack_cost(attack, leaked) > ATTACK_SHARE * _attack_cost(attack, top)


@pytest.mark.parametrize(("attack", "field", "param"), OWN, ids=[f"{a}.{f}" for a, f, _ in OWN])
def test_own_budgets_are_the_papers_in_the_presets_that_claim_strength_and_sized_in_smoke(attack, field, param):
    default = getattr(EvalConfig(), field)
    assert [getattr(PRESETS[p], field) for p in ("strongest", "paper", "croce")] == [default] * 3
    if param in COUNTS:
        assert getattr(PRESETS["smoke"], field) == SMOKE_COUNTS[param] < default


def test_sized_sizes_every_count_of_every_budget_or_refuses():
    c = EvalConfig(**sized_counts({"max_iter": 3, "eot_samples": 4, "samples_per_step": 5}))
    counts = {f: p for a in ATTACKS for f, p in zip(budget_fields(a), REGISTRY[a].fields) if p in COUNTS}
    assert {f: getattr(c, f) for f in counts} == {f: {"max_iter": 3, "eot_samples": 4, "samples_per_step": 5}[p]
                                                  for f, p in counts.items()}  # fmt: skip
    assert {"selective_max_iter", "apgd_eot_samples", "spsa_samples_per_step", "max_iter"} <= set(counts)
    message = "counts must size every count of the attacks' budgets; missing: ['samples_per_step']."
    with pytest.raises(ValueError, match=re.escape(message)):
        sized_counts({"max_iter": 3, "eot_samples": 4})
