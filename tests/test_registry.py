"""The attack registry: one record per attack, read by the harness, the reproductions, the report and the CLI; and a
source check that no other module keeps its own table of attack labels or budgets."""

import ast
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, NCSNv2
from art_adp.apps.evaluation import EvalConfig, report
from art_adp.apps.evaluation.config import (ATTACKS, GRADIENT_ATTACKS, PAPER_ATTACKS, PRESETS, attack_budget,
                                            budget_fields, budget_text)
from art_adp.apps.evaluation.run import plan, price_of
from art_adp.runs.engine import unit_seconds
from art_adp.attacks._core import IterativeAttack
from art_adp.attacks.registry import (BLIND_ATTACK, FULL_ATTACK, LABELS, REGISTRY, SWEEP_ATTACK, Budget,
                                     registered_name)

ROOT = Path(__file__).resolve().parents[1] / "art_adp"


def _estimator() -> PyTorchClassifier:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    purifier = ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), steps=1)
    return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                             clip_values=(0.0, 1.0), preprocessing_defences=[purifier])


def test_the_harness_tables_are_the_registry_in_the_order_they_always_had():
    assert ATTACKS == ("clf-pgd", "bpda-eot", "joint-score", "joint-full", "spsa", "full-pgd-eot",
                       "full-pgd-eot-ensemble", "apgd-eot", "apgd-eot-ensemble", "lowfreq-vote", "full-pgd-eot-dev",
                       "apgd-eot-dev", "selective-eot", "apgd-eot-t")
    assert PAPER_ATTACKS == ATTACKS[:6] and GRADIENT_ATTACKS == ("full-pgd-eot", "apgd-eot", "bpda-eot")
    assert PRESETS["croce"].attacks == ("apgd-eot",)
    assert {a: REGISTRY[a].protocol for a in REGISTRY if a not in ATTACKS} == {"autoattack": "baseline"}
    assert {a: budget_fields(a) for a in ("clean", *ATTACKS, "flags")} == {
        "clean": (), "clf-pgd": ("max_iter",), "bpda-eot": ("max_iter", "eot_samples", "eot_aggregate"),
        "joint-score": ("max_iter", "eot_samples", "weight"), "joint-full": ("max_iter", "eot_samples", "weight"),
        "full-pgd-eot": ("max_iter", "eot_samples", "eot_aggregate"), "apgd-eot": ("apgd_max_iter", "apgd_eot_samples"),
        "full-pgd-eot-ensemble": ("max_iter", "eot_samples", "eot_aggregate"),
        "apgd-eot-ensemble": ("apgd_max_iter", "apgd_eot_samples"),
        "spsa": ("spsa_max_iter", "spsa_samples_per_step"), "flags": (),
        "lowfreq-vote": ("lowfreq_max_iter", "eot_samples", "cutoff"),
        "full-pgd-eot-dev": ("max_iter", "eot_samples", "eot_aggregate"),
        "apgd-eot-dev": ("apgd_max_iter", "apgd_eot_samples"),
        "selective-eot": ("selective_max_iter", "selective_eot_samples"),
        "apgd-eot-t": ("apgd_max_iter", "apgd_eot_samples"),
    }
    assert report.LABELS["bpda-eot"] == "BPDA+EOT" and report.LABELS["clean"] == "Natural (clean)"
    assert report.BASELINE_ATTACK == {"clean": "clean", "clf-pgd": "clf-pgd", "bpda-eot": "clf-pgd",
                                      "joint-score": "clf-pgd", "joint-full": "clf-pgd", "spsa": "spsa",
                                      "full-pgd-eot": "clf-pgd", "full-pgd-eot-ensemble": "clf-pgd",
                                      "apgd-eot": "apgd-eot", "apgd-eot-ensemble": "apgd-eot",
                                      "lowfreq-vote": "lowfreq-vote",
                                      "full-pgd-eot-dev": "clf-pgd", "apgd-eot-dev": "apgd-eot",
                                      "selective-eot": "clf-pgd", "autoattack": "autoattack",
                                      "apgd-eot-t": "apgd-eot-t"}


@pytest.mark.parametrize("name, cls, expected", [
    ("clf-pgd", A.ClassifierPGD, {"max_iter": 7, "eps_step": 0.01, "eps": 0.1}),
    ("bpda-eot", A.PGDEOT, {"gradient": "bpda", "max_iter": 7, "eot_samples": 3, "aggregate": "sign"}),
    ("full-pgd-eot", A.PGDEOT, {"gradient": "full", "max_iter": 7, "eot_samples": 3, "batch_size": 32}),
    ("joint-score", A.JointScore, {"max_iter": 7, "eot_samples": 3, "weight": 0.25}),
    ("joint-full", A.JointFull, {"max_iter": 7, "eot_samples": 3, "weight": 0.25}),
    ("apgd-eot", A.APGDEOT, {"max_iter": 9, "eot_samples": 4, "seed": 5}),
    ("spsa", A.BlackBoxSPSA, {"max_iter": 2, "samples_per_step": 16, "eps_step": 0.01, "seed": 5}),
    ("lowfreq-vote", A.LowFrequencyVote, {"gradient": "full", "max_iter": 8, "eot_samples": 3, "cutoff": 0.25,
                                          "seed": 5, "judgement": "mean"}),
    ("full-pgd-eot-dev", A.PGDEOTDev, {"gradient": "full", "max_iter": 7, "eot_samples": 3, "dev_weight": 1.0}),
    ("apgd-eot-dev", A.APGDEOTDev, {"max_iter": 9, "eot_samples": 4, "seed": 5, "dev_weight": 1.0}),
    ("apgd-eot-t", A.APGDEOTT, {"max_iter": 9, "eot_samples": 4, "seed": 5, "n_target_classes": 9,
                                "losses": ("dlr-targeted",), "eot_target": "draws"}),
    ("selective-eot", A.SelectiveEOT, {"gradient": "full", "graft": True, "max_iter": 6, "eot_samples": 2, "seed": 5,
                                       "em_steps": 5, "em_lambda": 5.0, "eps_step": None, "judgement": "mean",
                                       "losses": ("margin", "ce", "dlr")}),
])
def test_each_record_builds_its_attack_from_the_configs_budget(name, cls, expected):
    c = EvalConfig(eps=0.1, eps_step=0.01, max_iter=7, eot_samples=3, eot_aggregate="sign", weight=0.25, cutoff=0.25,
                   apgd_max_iter=9, apgd_eot_samples=4, spsa_max_iter=2, spsa_samples_per_step=16, batch_size=32,
                   selective_max_iter=6, selective_eot_samples=2, lowfreq_max_iter=8)  # fmt: skip
    attack = REGISTRY[name].build(_estimator(), c.budget(name), 5)
    assert type(attack) is cls
    assert {k: getattr(attack, k) for k in expected} == expected


def test_cost_model_and_budget_text_per_attack():
    c = EvalConfig(max_iter=4, eot_samples=3, apgd_max_iter=5, apgd_eot_samples=2, spsa_max_iter=2,
                   spsa_samples_per_step=8, ensemble_size=2, repeats=3)
    main = plan(c, randomized=True)[0]
    probe = {"forward": 1.0, "full": 10.0}
    judge = 2 * 3 * 1.0
    costs = {a: unit_seconds(price_of(main, a, c), probe) - judge for a in ATTACKS}
    # SPSA's iterates judged, each of 2 steps and the start, on S = 2 draws: 6 forward passes;
    # the best iterate ("auto") of BPDA and the joint attacks judged at the start and the last of 4 iterations (a
    # judgement of S = 2 draws is not under a quarter of an iteration of 3 forward passes) on S = 2 draws: 4 forward
    # passes; full-gradient PGD+EOT's every iterate (under a quarter of 3 forward and backward passes): 10 forward
    # passes; APGD (each draw forward + backward, the loss with it) at its own interval, "auto": a judgement of 2
    # draws is not under a quarter of an iteration of 2 draws, so every 5 of its 5: twice per loss, 8 forward passes;
    # the vote attack: its own budget (DiffBreak's 100 iterations), each step 3 draws forward and backward and a
    # judgement of S = 2 draws of its own, and the start's
    assert costs == {"clf-pgd": 0.0, "bpda-eot": 12.0 + 4, "joint-score": 12.0 + 4, "joint-full": 12.0 + 4,
                     "spsa": 32.0 + 3 * 2, "full-pgd-eot": 120.0 + 10, "full-pgd-eot-ensemble": 120.0 + 10,
                     "apgd-eot": 200.0 + 8, "apgd-eot-ensemble": 200.0 + 8,
                     "lowfreq-vote": 100 * (3 * 10.0 + 2 * 1.0) + 2 * 1.0, "full-pgd-eot-dev": 132.0 + 10,
                     "apgd-eot-dev": 220.0 + 8,  # + the checkpoints' forward recompute
                     # its own budget (50 it/loss, N = 10): 3 losses x 50 it x (N + N judging, 1 graft)
                     "selective-eot": 3 * 50 * (2 * 10 * 1.0 + 10.0),
                     # APGD-EOT's cost of one loss per target (at most 9, AutoAttack's), and the targets ranked on
                     # the 2 EOT draws of the clean image, forward
                     "apgd-eot-t": 9 * (100.0 + 4) + 2 * 1.0}
    # three runs: each run's passes and judgements three times (an upper bound: restarts attack the unbroken only)
    r3 = replace(c, num_random_init=3)
    assert unit_seconds(price_of(main, "bpda-eot", r3), probe) - judge == 3 * (12.0 + 4)
    assert unit_seconds(price_of(main, "apgd-eot", r3), probe) - judge == 3 * (200.0 + 8)
    ens = ", CE of the ensemble's log mean softmax"  # the ensemble variant's EOT loss, said: not the first records'
    assert budget_text("full-pgd-eot", r3) == f"4 it of {r3.step:.4g}, best of 3 runs, EOT 3 (mean)"
    assert budget_text("full-pgd-eot-ensemble", r3) == f"4 it of {r3.step:.4g}, best of 3 runs, EOT 3 (mean){ens}"
    assert budget_text("apgd-eot", r3) == "CE+DLR, 5 it/loss, EOT 2, best of 3 runs"
    assert budget_text("apgd-eot-ensemble", r3) == (
        "CE+DLR, 5 it/loss, EOT 2, best of 3 runs, losses of the ensemble's log mean softmax")
    # a recorded budget names restarts and the check interval only where they differ from the first records' (one
    # run, the last iterate), so records made before them keep their meaning
    last = replace(c, check_every=0)
    assert "check_every" not in attack_budget("full-pgd-eot", last)
    assert "num_random_init" not in attack_budget("full-pgd-eot", last)
    assert budget_text("full-pgd-eot", last) == f"4 it of {c.step:.4g}, last iterate, EOT 3 (mean)"
    assert attack_budget("full-pgd-eot", r3)["num_random_init"] == 3
    assert attack_budget("full-pgd-eot", c)["check_every"] == "auto"
    assert "check_every" not in attack_budget("apgd-eot", r3) and attack_budget("apgd-eot", r3)["num_random_init"] == 3
    assert "num_random_init" not in attack_budget("spsa", r3)
    assert budget_text("apgd-eot", c) == "CE+DLR, 5 it/loss, EOT 2"
    assert budget_text("joint-full", c) == f"4 it of {c.step:.4g}, EOT 3, w = 0.5"
    assert budget_text("clean", c) == "-"
    assert budget_text("selective-eot", c) == (
        "margin, CE, DLR; 50 it/loss, 10 draws, EM-weighted, grafted, aimed at the mean judgement")
    assert budget_text("apgd-eot-dev", c) == "CE+DLR + 1 x mean state deviation, 5 it/loss, EOT 2"
    targets = "targeted DLR, top 9 runner-ups of the clean mean softmax in turn"
    assert budget_text("apgd-eot-t", r3) == f"{targets}, 5 it/target, EOT 2, best of 3 runs"
    assert budget_text("apgd-eot-t", replace(c, eot_target="ensemble")) == (
        f"{targets}, 5 it/target, EOT 2, loss of the ensemble's log mean softmax")


def test_a_budget_has_the_attacks_parameter_names():
    b = Budget(eps=0.3, eps_step=0.01, max_iter=40)
    assert (b.norm, b.eot_samples, b.eot_aggregate) == (math.inf, 1, "mean")
    attack = REGISTRY["bpda-eot"].build(_estimator(), b, 0)
    assert (attack.eps, attack.eps_step, attack.max_iter, attack.eot_samples) == (0.3, 0.01, 40, 1)


@pytest.mark.parametrize("name", ["joint-score", "joint-full", "full-pgd-eot", "bpda-eot"])
def test_the_pgd_family_takes_the_budgets_random_start_and_the_records_seed(name):
    """A budget's random start reaches the attack, its draws seeded by the seed the record builds it with: the same
    seed, the same start; another seed, another start; without it the run starts at the image."""
    x = torch.full((2, 1, 8, 8), 0.5)
    b = Budget(eps=0.1, eps_step=0.01, max_iter=1, eot_samples=1, random_start=True)

    def start(budget, seed):
        attack = REGISTRY[name].build(_estimator(), budget, seed)
        return attack._start(x, torch.zeros(2, dtype=torch.long), (0.0, 1.0))

    first = start(b, 3)
    assert (first - x).abs().max() > 0.05 and (first - x).abs().max() <= 0.1 + 1e-6
    assert torch.equal(start(b, 3), first) and not torch.equal(start(b, 4), first)
    assert torch.equal(start(replace(b, random_start=False), 3), x)


def test_a_random_start_is_the_default_outside_the_papers_own_protocols():
    """A budget and the PGD family's classes start at a random point unless told otherwise; the ``paper`` and
    ``croce`` plans keep their papers' start at the image (and ``smoke``, whose records are golden files), and each
    row's budget says which start its attack took."""
    from art_adp.runs.plans import PAPER
    from art_adp.runs.plans import plan as named_plan

    assert Budget(eps=0.1, eps_step=0.01, max_iter=1).random_start is True, "a Budget starts at the image by default"
    est = _estimator()
    assert A.ClassifierPGD(est).num_random_init == 1, "Clf-PGD starts at the image by default"
    for cls in (A.PGDEOT, A.PGDEOTDev, A.PGDEOTEnsemble, A.JointScore, A.JointFull, A.FixedNoisePGD):
        assert cls(est).random_start is True, cls.__name__
    starts = {p: {**PAPER, **named_plan(p, "evaluate").values}["random_start"] for p in PRESETS}
    assert starts == {"strongest": True, "paper": False, "croce": False, "smoke": False}
    assert budget_text("full-pgd-eot", PRESETS["strongest"]).startswith("40 it of 0.007843, random start, ")
    assert "random start" not in budget_text("full-pgd-eot", PRESETS["paper"])


@pytest.mark.parametrize("name", ["bpda-eot", "joint-score", "joint-full", "full-pgd-eot", "full-pgd-eot-ensemble",
                                  "full-pgd-eot-dev"])
@pytest.mark.parametrize("random_start", [True, False])
def test_the_records_seed_reaches_the_judge_with_or_without_a_random_start(name, random_start):
    """The best-iterate rule's draws are seeded from the seed the record builds the attack with: two seeds, two sets
    of judging draws -- from the image too, where no generator draws a start."""
    from art_adp.attacks.best_iterate import derived_seed

    b = Budget(eps=0.1, eps_step=0.01, max_iter=1, eot_samples=1, random_start=random_start)
    attacks = {s: REGISTRY[name].build(_estimator(), b, s) for s in (3, 4)}
    bases = {s: a._seed_base() for s, a in attacks.items()}
    assert bases == {3: 3, 4: 4}, f"records seeded 3 and 4 judge {name}'s iterates from the seeds {bases}"
    y = torch.zeros(2, dtype=torch.long)
    assert {s: a._best_iterate(y, 0).seed for s, a in attacks.items()} == {
        s: derived_seed(s, "best-iterate", 0) for s in (3, 4)}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_attack_carries_the_name_the_registry_files_it_under(name):
    attack = REGISTRY[name].build(_estimator(), Budget(eps=0.1, eps_step=0.01, max_iter=1), 0)
    assert attack.name == name


def test_pgd_eot_is_named_by_its_gradient_mode_and_a_nameless_class_is_refused():
    attack = A.PGDEOT(_estimator(), gradient="bpda")
    assert attack.name == "bpda-eot"
    attack.set_params(gradient="full")
    assert attack.name == "full-pgd-eot"
    assert (BLIND_ATTACK, SWEEP_ATTACK, FULL_ATTACK) == ("clf-pgd", "bpda-eot", "full-pgd-eot")

    class Nameless(IterativeAttack):  # an attack that never says its name
        pass

    with pytest.raises(ValueError, match=r"^Nameless carries no registry name: give the class a string attribute"):
        registered_name(Nameless)
    with pytest.raises(ValueError, match=r"^PGDEOT carries no registry name: "):  # one name per mode: needs the mode
        registered_name(A.PGDEOT)
    with pytest.raises(ValueError, match=r"^PGDEOT carries no registry name for gradient='sign': "):
        registered_name(A.PGDEOT, "sign")


# --- no table of attack facts outside the registry ---------------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def attack_tables(source: str) -> list[str]:
    """Attack labels spelled out (a string, or a cell of a markdown row, equal to a registry label) and tables keyed
    by attack names (a dict literal with three or more registry names as keys) in ``source``."""
    tree = ast.parse(source)
    docs, found = _docstrings(tree), []
    labels = set(LABELS.values())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            cells = {cell.strip() for cell in node.value.split("|")}
            found += [f"line {node.lineno}: label {cell!r}" for cell in sorted(cells & labels)]
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in REGISTRY]
            if len(keys) >= 3:
                found.append(f"line {node.lineno}: table keyed by {keys}")
    return found


def test_no_attack_label_or_budget_table_outside_the_registry():
    found = {str(p.relative_to(ROOT)): attack_tables(p.read_text()) for p in sorted(ROOT.rglob("*.py"))
             if p != ROOT / "attacks" / "registry.py"}
    assert {k: v for k, v in found.items() if v} == {}


def attack_names(source: str) -> list[str]:
    """Registry names spelled out in ``source``: a string literal (docstrings aside; an f-string's literal parts
    included) holding one as a word, e.g. ``"bpda-eot"`` or ``f"eot={k}/bpda-eot"``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [f"line {n.lineno}: {w!r}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs
            for w in re.split(r"[^A-Za-z0-9-]+", n.value) if w in REGISTRY]


def test_no_module_outside_the_attacks_spells_an_attack_name():
    found = {str(p.relative_to(ROOT)): attack_names(p.read_text()) for p in sorted(ROOT.rglob("*.py"))
             if p.parent != ROOT / "attacks"}
    assert {k: v for k, v in found.items() if v} == {}
    old = 'def f(k):\n    """bpda-eot in prose."""\n    return ("clean", "clf-pgd"), f"eot={k}/bpda-eot", "clf-pgd-strong"\n'
    assert attack_names(old) == ["line 3: 'clf-pgd'", "line 3: 'bpda-eot'"]


def test_the_table_check_finds_the_old_tables():
    old = ('LABELS = {"clean": "Natural (clean)", "clf-pgd": "Clf-PGD (preprocessor-blind)"}\n'
           'FIELDS = {"clf-pgd": ("iterations",), "bpda-eot": ("iterations", "eot"), "spsa": ("spsa_iterations",)}\n'
           'def f():\n    """BPDA+EOT in a docstring is prose."""\n    return "| BPDA+EOT | 3 |"\n')
    assert sorted(attack_tables(old)) == [
        "line 1: label 'Clf-PGD (preprocessor-blind)'",
        "line 1: label 'Natural (clean)'",
        "line 2: table keyed by ['clf-pgd', 'bpda-eot', 'spsa']",
        "line 5: label 'BPDA+EOT'",
    ]


def test_wilson_is_one_function_and_reproduce_summarises_with_the_one_summary():
    import art_adp.apps.reproduce_report as reproduce
    from art_adp.runs import statistics

    assert report.wilson is statistics.wilson and reproduce.summary is statistics.summary
    assert all(np.isnan(report.wilson(0.0, 0)))


def test_the_registry_speaks_the_budgets_names_only():
    """Every parameter an attack record reads is a Budget field; an EvalConfig field of the same name (or the
    attack's short name and it, for what it counts on its own) sets it: no table between the two."""
    from dataclasses import fields

    budget = {f.name for f in fields(Budget)}
    config = {f.name for f in fields(EvalConfig)}
    for spec in REGISTRY.values():
        assert set(spec.fields) <= budget and set(spec.own) <= set(spec.fields), spec.name
        assert set(budget_fields(spec.name)) <= config, spec.name
    c = EvalConfig(max_iter=7, eot_samples=3, apgd_max_iter=9, apgd_eot_samples=4, memory_budget=64)
    assert (c.budget("bpda-eot").max_iter, c.budget("bpda-eot").eot_samples) == (7, 3)
    assert (c.budget("apgd-eot").max_iter, c.budget("apgd-eot").eot_samples) == (9, 4)
    assert c.budget("full-pgd-eot").memory_budget == 64  # MiB, as the attacks take it
    assert tuple(s.name for s in REGISTRY.values() if s.full) == (
        "full-pgd-eot", "full-pgd-eot-ensemble", "apgd-eot", "apgd-eot-ensemble", "lowfreq-vote", "full-pgd-eot-dev",
        "apgd-eot-dev", "selective-eot", "apgd-eot-t")  # fmt: skip


def test_protocols_and_the_strongest_of_each():
    from art_adp.attacks.registry import PROTOCOLS, names

    assert {s.protocol for s in REGISTRY.values()} <= set(PROTOCOLS)
    assert names(protocol="croce") == ("apgd-eot",) and names(protocol="diffattack") == ("full-pgd-eot-dev",
                                                                                            "apgd-eot-dev")
    assert names(strongest=True) == ("full-pgd-eot", "full-pgd-eot-ensemble", "apgd-eot", "apgd-eot-ensemble",
                                     "lowfreq-vote", "apgd-eot-dev", "selective-eot", "apgd-eot-t")  # fmt: skip
    assert names(protocol="autoattack") == ("apgd-eot-t",)
    # every protocol has its strongest attack, and one only -- but the ensemble's loss, on which PGD+EOT and APGD-EOT
    # each break images their papers' mean of per-draw losses leaves (and the other way round): both
    for protocol in set(PROTOCOLS) - {"baseline"}:  # the undefended baselines' attacks aim at no purification
        assert len(names(protocol=protocol, strongest=True)) == (2 if protocol == "ensemble" else 1), protocol


def test_clf_pgd_is_arts_own_pgd_on_the_bare_classifier_seeded_and_leaves_numpys_draws_alone():
    """The one Clf-PGD: ART's ``ProjectedGradientDescent`` on the estimator without its defences (a purifier that
    would change every gradient is left out; the standardisation is kept), its random start drawn from the record's
    seed, the caller's NumPy state untouched."""
    from art.attacks.evasion import ProjectedGradientDescent

    class Flip(PreprocessorPyTorch):  # a defence whose gradient would point the other way
        def __init__(self):
            super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)

        def forward(self, x, y=None):
            return 1 - x, y

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    kw = dict(input_shape=(1, 8, 8), nb_classes=3, clip_values=(0.0, 1.0), preprocessing=(0.5, 0.25))
    bare = PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), **kw)
    defended = PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), preprocessing_defences=[Flip()], **kw)
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1)).numpy()
    y = np.arange(6) % 3
    b = Budget(eps=0.1, eps_step=0.02, max_iter=3, random_start=True, batch_size=4)
    np.random.seed(123)
    state = np.random.get_state()
    a = REGISTRY[BLIND_ATTACK].build(defended, b, 7).generate(x, y=y)
    assert np.array_equal(np.random.get_state()[1], state[1])  # the caller's NumPy draws are untouched
    np.random.seed(7)
    ref = ProjectedGradientDescent(bare, eps=0.1, eps_step=0.02, max_iter=3, num_random_init=1, batch_size=4,
                                   verbose=False).generate(x, y=y)  # fmt: skip
    assert np.array_equal(a, ref) and np.abs(a - x).max() <= 0.1 + 1e-6
    np.random.seed(7)
    through = ProjectedGradientDescent(defended, eps=0.1, eps_step=0.02, max_iter=3, num_random_init=1, batch_size=4,
                                       verbose=False).generate(x, y=y)  # fmt: skip
    assert not np.array_equal(a, through)  # ART's PGD through the defence is another attack
    assert not np.array_equal(a, REGISTRY[BLIND_ATTACK].build(defended, b, 8).generate(x, y=y))  # another start
    start = REGISTRY[BLIND_ATTACK].build(defended, replace(b, random_start=False, max_iter=1), 7).generate(x, y=y)
    np.testing.assert_allclose(np.abs(start - x).max(), 0.02, atol=1e-6)  # from the image: one step of 0.02
