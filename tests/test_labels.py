"""Each registry attack's budget text is generated from the :class:`Budget` parameters its factory consumes: built
under the ``strongest`` and the ``paper`` plans' budgets, a parameter its row names changes the attack built, and the
parameters a record declares consumed (:attr:`~art_adp.attacks.registry.AttackSpec.consumes`) are the ones that do."""

from dataclasses import replace

import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, NCSNv2
from art_adp.attacks._core import AUTO
from art_adp.attacks.registry import REGISTRY, Budget
from art_adp.runs.plans import PAPER, budget, plan

#: For each :class:`Budget` parameter a budget text could name, another value of it.
OTHER = {
    "eps_step": lambda v: v / 2,
    "max_iter": lambda v: v + 1,
    "eot_samples": lambda v: v + 1,
    "eot_aggregate": lambda v: "sign" if v == "mean" else "mean",
    "weight": lambda v: 0.25 if v != 0.25 else 0.75,
    "cutoff": lambda v: 0.25 if v != 0.25 else 0.5,
    "samples_per_step": lambda v: v * 2,
    "random_start": lambda v: not v,
    "num_random_init": lambda v: 2 if v == 1 else 1,
    "check_every": lambda v: 0 if v != 0 else AUTO,
    "judge_draws": lambda v: v + 1,
    "loss": lambda v: "margin" if v == "ce" else "ce",
    "eot_target": lambda v: "ensemble" if v == "draws" else "draws",
    "step_schedule": lambda v: "halving" if v == "constant" else "constant",
    "judgement": lambda v: "worst" if v != "worst" else "mean",
    "precision": lambda v: "bf16" if v == "fp32" else "fp32",
}


@pytest.fixture(scope="module")
def estimator() -> PyTorchClassifier:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    purifier = ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), steps=1, step_size=0.01)  # a fixed step: bf16 is allowed
    return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                             clip_values=(0.0, 1.0), preprocessing_defences=[purifier])  # fmt: skip


def plan_budget(name: str, attack: str) -> Budget:
    """``attack``'s budget under the evaluation plan ``name`` (CIFAR-10's ε; the shared iterations for the attacks
    that count none of their own, AutoAttack)."""
    values = {**PAPER, **plan(name, "evaluate").values}
    return budget(attack, values, eps=8 / 255, eps_step=2 / 255, batch_size=64, max_iter=values["max_iter"])


def _value(v):
    if isinstance(v, torch.Generator):
        return ("generator", v.initial_seed())
    if v is None or isinstance(v, (bool, int, float, str, tuple)):
        return v
    return type(v).__name__


def built(estimator, attack: str, b: Budget):
    """What the attack built from ``b`` runs with: its parameters (ART's ``attack_params``; a generator by its seed)
    and whether its gradient passes are wrapped (the budget's precision); ``"refused: ..."`` for a budget its
    factory refuses (it read the parameter)."""
    try:
        a = REGISTRY[attack].build(estimator, b, 5)
    except ValueError as e:
        return f"refused: {e}"
    return {k: _value(getattr(a, k, None)) for k in a.attack_params} | {"wrapped": "generate" in vars(a)}


@pytest.mark.parametrize("preset", ["strongest", "paper"])
@pytest.mark.parametrize("attack", list(REGISTRY))
def test_a_row_names_only_what_its_attack_consumes(estimator, attack, preset):
    spec = REGISTRY[attack]
    b = plan_budget(preset, attack)
    text, runs = spec.describe(b), built(estimator, attack, b)
    assert isinstance(runs, dict), runs
    named, ignored, undeclared = [], [], []
    for field, other in OTHER.items():
        changed = replace(b, **{field: other(getattr(b, field))})
        consumes = built(estimator, attack, changed) != runs
        if spec.describe(changed) != text and not consumes:
            named.append(field)
        if consumes != (field in spec.consumes):
            (undeclared if consumes else ignored).append(field)
    assert named == [], f"{attack} under {preset}: its row ({text!r}) names {named}, which its attack ignores"
    assert not ignored, f"{attack}: declares {ignored} consumed, which its attack ignores"
    assert not undeclared, f"{attack}: consumes {undeclared}, which its record does not declare"


def test_the_vote_attacks_adam_loop_and_diffattacks_pgd_are_labelled_as_they_run():
    """The defects the test above finds: under ``strongest`` the low-frequency vote attack's Adam loop was labelled
    with the PGD rows' halving steps, and DiffAttack's PGD with a step schedule, loss and EOT target it never took."""
    vote = REGISTRY["lowfreq-vote"].describe(plan_budget("strongest", "lowfreq-vote"))
    assert vote == "100 it of 0.007843 (Adam), random start, EOT 15, DCT cutoff 0.5, aimed at the mean judgement"
    dev = plan_budget("paper", "full-pgd-eot-dev")
    text = REGISTRY["full-pgd-eot-dev"].describe(dev)
    for option in ({"step_schedule": "halving"}, {"loss": "margin"}, {"eot_target": "ensemble"}):
        assert REGISTRY["full-pgd-eot-dev"].describe(replace(dev, **option)) == text, option
    assert "random start" not in REGISTRY["spsa"].describe(replace(plan_budget("paper", "spsa"), random_start=True))


def test_a_record_names_only_budget_fields_and_a_known_start():
    from art_adp.attacks.registry import AttackSpec

    spec = REGISTRY["clf-pgd"]
    with pytest.raises(ValueError, match=r"^clf-pgd: consumes names \['iterations'\], which are no Budget fields"):
        replace(spec, consumes=("iterations",))
    with pytest.raises(ValueError, match=r"start must be one of"):
        AttackSpec(spec.name, spec.label, spec.build, spec.fields, spec.cost, spec.describe, start="image")
