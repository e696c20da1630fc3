"""The presets' budgets: an attack's own budget (:attr:`~art_adp.attacks.registry.AttackSpec.own`) is at its paper's
value in every preset that claims strength (``strongest``'s APGD draws where measured strength stops growing,
:data:`~art_adp.runs.plans.PLATEAU`) and sized with the rest in ``smoke``, by one rule in the preset table; the smoke
preset's cost, from the cost model, stays a small share of the strongest preset's; ``strongest`` runs BPDA+EOT and the
gradient-free masking check, and its digits run is priced at days, not weeks."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from art_adp.apps.evaluation import EvalConfig
from art_adp.apps.evaluation.config import PRESETS
from art_adp.runs.plans import ATTACKS, COUNTS, PLATEAU, SMOKE_COUNTS, budget_fields, sized_counts
from art_adp.apps.evaluation.run import _cells, _images_left, plan
from art_adp.runs import engine
from art_adp.attacks.registry import REGISTRY

#: Seconds per image of one defended forward pass and of one with a full gradient through the purification, in the
#: digits' proportion (the probe measures about 8 ms and 53 ms on a CPU).
DIGITS_PROBE = {"forward": 1.0, "full": 6.0}
#: The most any attack may cost in smoke, per image, as a share of its cost at the strongest preset's budget.
ATTACK_SHARE = 1 / 20
#: The most the smoke preset's whole plan may cost, per image, as a share of the strongest preset's (1/200 while the
#: strongest ran APGD's family at 200 draws, 95 % of its price; at 8 draws smoke is about 1/110 of it).
PLAN_SHARE = 1 / 100

OWN = [(a, field, param) for a in ATTACKS for field, param in zip(budget_fields(a), REGISTRY[a].fields)
       if param in REGISTRY[a].own]  # fmt: skip


def _per_image(c: EvalConfig, n: int = 16) -> float:
    """Estimated seconds per image of ``c``'s whole plan (the main table, the fixed-noise view, the sanity checks) on
    ``n`` digits, from the cost model at :data:`DIGITS_PROBE`."""
    units = [(s, a, np.arange(min(n, c.sanity_examples) if s.subset else n)) for s in plan(c) for a in s.attacks]
    return _estimate(plan(c), units, c) / n


def _estimate(settings, units, c: EvalConfig) -> float:
    """The engine's one estimate of ``units`` (setting, attack, examples) of ``settings`` at :data:`DIGITS_PROBE`, as
    ``evaluate`` logs it."""
    cells = _cells(settings, c, {}, np.empty(0), "shared")
    return sum(engine.estimate(cells, _images_left(units), lambda target: DIGITS_PROBE).values())


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
    assert [getattr(PRESETS[p], field) for p in ("paper", "croce")] == [default] * 2
    assert getattr(PRESETS["strongest"], field) == PLATEAU.get(field, default)
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


def test_the_strongest_runs_the_apgd_family_where_strength_stops_growing_and_croce_keeps_200_draws():
    """The strongest plan's APGD family at Croce et al.'s 100 iterations per loss and 8 EOT draws (the lever tables'
    budget; Fashion-MNIST's budget curve is flat from EOT 8), its PGD rows at the paper's 40 × EOT 15; ``croce`` keeps
    Croce et al.'s 200 draws; every count meets the reference, so the card may name a claim."""
    from art_adp.apps.evaluation.config import shortfalls

    top, croce = PRESETS["strongest"], PRESETS["croce"]
    assert dict(PLATEAU) == {"apgd_max_iter": 100, "apgd_eot_samples": 8}
    assert (top.apgd_max_iter, top.apgd_eot_samples, top.max_iter, top.eot_samples) == (100, 8, 40, 15)
    assert (croce.apgd_max_iter, croce.apgd_eot_samples) == (100, 200)
    apgd = [a for a in top.attacks if REGISTRY[a].short == "apgd"]
    assert {"apgd-eot", "apgd-eot-ensemble", "apgd-eot-dev"} <= set(apgd)
    assert {(top.budget(a).max_iter, top.budget(a).eot_samples) for a in apgd} == {(100, 8)}
    assert all(shortfalls(a, top) == [] for a in top.attacks)
    # below the plateau a count falls short, named against the papers' reference
    assert shortfalls("apgd-eot", dataclasses.replace(top, apgd_eot_samples=7)) == ["apgd_eot_samples 7 < 200"]


def test_the_strongest_adds_bpda_eot_at_its_budget_and_the_gradient_free_check_where_the_noise_is_clipped():
    """BPDA+EOT is a row of the strongest plan at the PGD rows' budget (40 × EOT 15, random start, halving); SPSA at
    the paper's budget checks for masking on the first 16 images where the defence clips its noisy input, and only
    there (not with SPSA among the attacks, with the sanity checks off, or without the clamp)."""
    from art_adp.apps.evaluation.config import GRADIENT_FREE

    top = PRESETS["strongest"]
    assert "bpda-eot" in top.attacks and "spsa" not in top.attacks
    b = top.budget("bpda-eot")
    assert (b.max_iter, b.eot_samples, b.random_start, b.step_schedule) == (40, 15, True, "halving")
    assert top.masking_examples == 16 and (top.spsa_max_iter, top.spsa_samples_per_step) == (40, 1280)
    checks = [s for s in plan(top, clipped=True) if s.name == GRADIENT_FREE]
    assert [(s.attacks, s.examples, s.judge) for s in checks] == [(("spsa",), 16, "ensemble")]
    for c, clipped in ((top, False), (dataclasses.replace(top, sanity=False), True),
                       (dataclasses.replace(top, attacks=(*top.attacks, "spsa")), True),
                       (dataclasses.replace(top, masking_examples=0), True),
                       (PRESETS["paper"], True), (PRESETS["smoke"], True)):  # fmt: skip
        assert GRADIENT_FREE not in [s.name for s in plan(c, clipped=clipped)], (c.preset_name, clipped)


def test_the_strongest_digits_run_costs_a_sixth_of_croces_draws_and_its_gradient_free_check_is_capped():
    """The strongest plan on the 360 test digits at the probe's proportion (a full-gradient pass 6 defended forward
    passes), APGD-EOT-T aside (its price is its own record's): under a sixth of the same plan with Croce et al.'s 200
    APGD draws; the gradient-free check costs its 16 images × (40 × 2 × 1,280 queries + 41 judgements of S = 10 +
    the table's R × S = 100), what ``--estimate-only`` prints as its share."""
    from art_adp.apps.evaluation.run import _chunks

    def price(c: EvalConfig, setting: str | None = None) -> float:
        chunks = [np.arange(s, min(s + c.chunk_size, 360)) for s in range(0, 360, c.chunk_size)]
        first = [ch for ch in chunks if ch[0] < c.sanity_examples]
        units = [(s, a, ch) for s in plan(c, clipped=True) if setting in (None, s.name) for a in s.attacks
                 for ch in _chunks(s, chunks, first)]  # fmt: skip
        return _estimate(plan(c, clipped=True), units, c)

    top = dataclasses.replace(PRESETS["strongest"], attacks=tuple(a for a in PRESETS["strongest"].attacks
                                                                  if a != "apgd-eot-t"))  # fmt: skip
    assert price(top, "gradient-free") == 16 * (40 * 2 * 1280 + 41 * 10 + 10 * 10)
    assert price(top) < price(dataclasses.replace(top, apgd_eot_samples=200)) / 6
