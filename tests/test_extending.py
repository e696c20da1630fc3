"""The recipes of docs/architecture.md, each a change in one place, each tried here with a toy one: a data set (an
entry of ``art_adp.data.DATASETS``), an attack (``art_adp.attacks.registry.register``), a judgement (an entry of
``art_adp.runs.engine.JUDGES``) and a plan (``art_adp.runs.plans.register``). Nothing else is edited: the plans, the
command line and the re-judgement find them by name."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from art_adp import data as datasets
from art_adp.attacks import registry
from art_adp.attacks.registry import AttackSpec
from art_adp.runs import engine
from art_adp.runs.engine import JudgeKind, Judgement, evaluate_robustness, rejudge
from art_adp.runs.records import read_jsonl

EPS = 0.1


@pytest.fixture(scope="module")
def digits():
    """An untrained linear classifier of the 8×8 digits and 12 of them."""
    d = datasets.load_dataset("digits")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval(), d.x_test[:12], d.y_test[:12]


def _predict(clf, x) -> np.ndarray:
    with torch.no_grad():
        return clf(torch.as_tensor(x)).argmax(1).numpy()


class ShiftUp(EvasionAttack):
    """A toy attack: every pixel up by ε, clipped to [0, 1]."""

    name = "toy-shift"
    attack_params = EvasionAttack.attack_params + ["eps"]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(self, estimator, eps: float):
        super().__init__(estimator=estimator)
        self.eps = eps

    def generate(self, x, y=None, **kwargs):
        return np.clip(x + self.eps, 0.0, 1.0).astype(np.float32)


@pytest.fixture
def toy_attack():
    spec = registry.register(AttackSpec(ShiftUp.name, "Toy shift", lambda est, b, seed=0: ShiftUp(est, b.eps),
                                        ("max_iter",), cost=lambda b, f, g: 0.0, describe=lambda b: "shift by ε",
                                        gradient=False))  # fmt: skip
    yield spec
    registry.unregister(spec.name)


def test_an_attack_is_one_registered_entry_every_plan_takes_by_name(digits, toy_attack, tmp_path):
    from art_adp.apps.levers_presets import _row_named, preset_for, row_label

    clf, x, y = digits
    res = evaluate_robustness(clf, None, x, y, eps=EPS, attacks=(toy_attack.name,), ensemble_size=1, repeats=1,
                              run_dir=tmp_path, progress=False)  # fmt: skip
    broken = _predict(clf, np.clip(x + EPS, 0, 1)) == y
    assert res["robust"].tolist() == broken.tolist()
    assert res["attacks"][toy_attack.name]["accuracy"] == pytest.approx(broken.mean())
    assert engine.kept(tmp_path, (toy_attack.name,))  # its examples kept, to judge again
    assert registry.LABELS[toy_attack.name] == "Toy shift"
    rows = preset_for("mnist").rows  # levers: an adaptive row at the preset's adaptive budget
    row = _row_named(toy_attack.name, {r.name: r for r in rows}, next(r for r in rows if r.adaptive))
    assert row is not None and row.adaptive and row_label(row, EPS).startswith("Toy shift, ")
    with pytest.raises(ValueError, match=r"^An attack named 'toy-shift' is registered already"):
        registry.register(toy_attack)
    with pytest.raises(ValueError, match=r"^protocol must be one of"):
        registry.register(AttackSpec("toy-2", "Toy 2", toy_attack.build, (), toy_attack.cost, toy_attack.describe,
                                     protocol="mine"))  # fmt: skip


def test_an_unregistered_attack_is_gone_and_named_in_the_refusal(digits, tmp_path):
    clf, x, y = digits
    spec = registry.register(AttackSpec("toy-gone", "Gone", lambda est, b, seed=0: ShiftUp(est, b.eps), (),
                                        lambda b, f, g: 0.0, lambda b: ""))  # fmt: skip
    registry.unregister(spec.name)
    with pytest.raises(ValueError, match=r"Unknown attacks \['toy-gone'\]"):
        evaluate_robustness(clf, None, x, y, eps=EPS, attacks=("toy-gone",), run_dir=tmp_path, progress=False)
    with pytest.raises(KeyError, match="No attack named 'toy-gone' is registered"):
        registry.unregister("toy-gone")


def test_a_judgement_is_one_entry_of_judges_and_rejudges_kept_examples_without_attacking(digits, monkeypatch,
                                                                                         tmp_path):  # fmt: skip
    """A toy judgement -- the classifier's label plus one -- judges the kept examples of a run again: forward
    passes only, every record its prediction."""
    clf, x, y = digits
    evaluate_robustness(clf, None, x, y, eps=EPS, attacks=("clf-pgd",), max_iter=2, ensemble_size=1, repeats=1,
                        block_size=6, run_dir=tmp_path, progress=False)  # fmt: skip

    def plus_one(estimator, xb, judgement, seeds):
        return ((estimator.predict(xb).argmax(1) + 1) % 10)[None]

    monkeypatch.setitem(engine.JUDGES, "plus-one", JudgeKind(plus_one))
    labels = {(("clf-pgd",), r["index"]): r["label"] for r in read_jsonl(tmp_path / "records" / "rank-0.jsonl")
              if r["attack"] == "clf-pgd"}  # fmt: skip
    estimator = engine.defended_estimator(clf, None, input_shape=x.shape[1:])
    summary = rejudge(tmp_path, {("clf-pgd",): ("bare", lambda first: ())}, lambda _: estimator, labels,
                      Judgement("plus-one"), name="plus-one", progress=False)  # fmt: skip
    adv = np.concatenate([np.load(p)["images"] for p in engine.kept(tmp_path, ("clf-pgd",))])
    want = (_predict(clf, adv) + 1) % 10
    records = sorted(read_jsonl(tmp_path / "plus-one.jsonl"), key=lambda r: r["index"])
    assert [r["pred"] for r in records] == [[int(p)] for p in want]
    assert summary["cells"][0]["accuracy"] == pytest.approx(np.mean(want == y))
    listed = r"judgement must be one of \['ensemble', 'fixed', 'once', 'none', 'plus-one'\], got 'nope'"
    with pytest.raises(ValueError, match=listed):
        Judgement("nope")


def test_a_data_set_is_one_entry_of_datasets_read_by_the_loader_and_the_commands(monkeypatch, capsys):
    from art_adp.apps.cli import build_parser
    from art_adp.apps.levers_presets import levers_spec

    def small_digits(**options):
        d = datasets.load_digits(**options)
        return datasets.Dataset("small-digits", d.x_train[:50], d.y_train[:50], d.x_test[:20], d.y_test[:20],
                                d.classes)  # fmt: skip

    monkeypatch.setitem(datasets.DATASETS, "small-digits", datasets.DatasetSpec(small_digits, (1, 8, 8), 0.2,
                                                                                files=False))  # fmt: skip
    d = datasets.load_dataset("small-digits")
    assert (len(d.x_train), len(d.x_test), d.x_test.shape[1:]) == (50, 20, (1, 8, 8))
    args = build_parser().parse_args(["evaluate", "--dataset", "small-digits"])
    assert args.dataset == "small-digits"
    with pytest.raises(ValueError, match=r"no preset for the data set 'small-digits'; supported: mnist, "):
        levers_spec("small-digits")  # a data set without a levers preset is refused, naming those with one
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--dataset", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_a_plan_is_one_entry_that_evaluate_and_the_python_entry_point_select_by_name(digits, tmp_path, capsys):
    from art_adp.apps.cli import main, parse
    from art_adp.apps.evaluation.config import EvalConfig
    from art_adp.attacks.registry import budget_settings
    from art_adp.runs import plans

    clf, x, y = digits
    values = {"attacks": ("clf-pgd",), "max_iter": 2, "ensemble_size": 1, "repeats": 3}
    plans.register("toy", plans.Plan("evaluate", "a toy plan", values))
    try:
        res = evaluate_robustness(clf, None, x, y, eps=EPS, preset="toy", block_size=6, run_dir=tmp_path,
                                  progress=False)  # fmt: skip
        assert list(res["attacks"]) == ["clf-pgd"]
        assert {len(r["pred"]) for r in read_jsonl(tmp_path / "records" / "rank-0.jsonl")} == {3}  # R = 3, the plan's
        held = [v["budget"] for v in json.loads((tmp_path / "settings.json").read_text()).values()
                if isinstance(v, dict) and v.get("budget")]  # fmt: skip
        same = replace(EvalConfig.preset("toy", eps=EPS).budget("clf-pgd"), batch_size=6)  # evaluate's, per block
        assert held == [{**budget_settings(same), "norm": "inf"}] and held[0]["max_iter"] == 2
        assert parse(["evaluate", "--preset", "toy", "--dataset", "digits"])[1].attacks == ("clf-pgd",)
        assert main(["plans", "--command", "evaluate"]) == 0
        listed = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in listed] == ["strongest", "paper", "croce", "smoke", "toy"]
        assert listed[-1].split(None, 2)[1:] == ["evaluate", "a toy plan"]
        with pytest.raises(ValueError, match=r"^A plan named 'toy' is registered already \(evaluate: a toy plan\)"):
            plans.register("toy", plans.Plan("levers", "another", {}))
    finally:
        plans.PLANS.pop("toy")
    message = "Unknown plan 'toy' for evaluate; choose from strongest, paper, croce, smoke."
    with pytest.raises(ValueError, match=f"^{message}$"):
        evaluate_robustness(clf, None, x, y, eps=EPS, preset="toy", run_dir=tmp_path / "gone", progress=False)
    with pytest.raises(ValueError, match=r"^Unknown plan 'levers:mnist' for evaluate"):
        EvalConfig.preset("levers:mnist")
    with pytest.raises(ValueError, match=r"^A plan's command must be one of \('evaluate', 'levers', 'reproduce'\)"):
        plans.Plan("train", "a plan of no command")
