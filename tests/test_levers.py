"""The lever-by-lever measurement (art-adp levers: MNIST, Fashion-MNIST presets) on a tiny synthetic 28×28 data
set."""

import functools
import importlib.util
import inspect
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from art_adp.runs.statistics import flags_of, per_image
from art_adp.runs.plans import PLANS, Plan, plan
from art_adp import data as datasets
from art_adp.apps import levers, levers_classifiers, levers_presets, levers_table, robust_baseline
from art_adp.apps.evaluation.report import wilson
from art_adp.apps.levers import run_levers
from art_adp.apps.levers_presets import SETTINGS, ClassifierRecipe, Preset, Row, Setting, preset_for, row_label
from art_adp.apps.levers_table import render_levers, table_markdown
from art_adp.attacks.registry import AUTOATTACK, BLIND_ATTACK, FULL_ATTACK, REGISTRY, SWEEP_ATTACK, Budget
from art_adp.data import Dataset, DatasetSpec, load_dataset
from art_adp.runs import engine
from art_adp.runs.engine import defended_estimator
from art_adp.runs.records import array_sha256
from art_adp.serialization import weights_sha256
from art_adp.runs.seeds import SeedPlan, derive_seed
from levers_stages import train_and_measure


@pytest.fixture(scope="module")
def tiny():
    rng = np.random.default_rng(0)
    protos = (rng.random((10, 1, 28, 28)) > 0.7).astype(np.float32)
    y_train, y_test = np.arange(40) % 10, np.arange(6) % 10
    noisy = lambda y: np.clip(protos[y] + 0.1 * rng.standard_normal((len(y), 1, 28, 28)), 0, 1).astype(np.float32)
    return Dataset("tiny", noisy(y_train), y_train, noisy(y_test), y_test, tuple(map(str, range(10))))


def test_one_step_is_one_fixed_step_of_size_sigma_never_stopped():
    # the denoise takes its model's noise form: unclipped for a model trained on unclipped noise, clipped for one
    # trained on clipped noise; ADP's schedules keep the paper's clip whatever the model
    assert Setting("x", sigma=0.1, one_step=True).purifier_kwargs() == {
        "sigma": 0.1, "steps": 1, "step_size": 0.1, "tau": 0.0, "clip_noise": False
    }  # fmt: skip
    assert Setting("x", sigma=0.1, one_step=True).purifier_kwargs(model_clipped=True) == {
        "sigma": 0.1, "steps": 1, "step_size": 0.1, "tau": 0.0
    }  # fmt: skip
    assert SETTINGS[0].purifier_kwargs() == {"sigma": 0.25, "steps": 10, "lam": 0.05, "tau": 1e-3}  # released
    assert SETTINGS[0].purifier_kwargs(model_clipped=False) == SETTINGS[0].purifier_kwargs(model_clipped=True)
    clipped = next(s for s in SETTINGS if s.name == "one-step denoise, clipped noise")
    assert "clip_noise" not in clipped.purifier_kwargs() and clipped.record() == {
        "name": "one-step denoise, clipped noise", "sigma": 0.25, "steps": 10, "lam": 0.05, "tau": 1e-3,
        "one_step": True}  # fmt: skip
    assert SETTINGS[5].record()["clip_noise"] is False and "clip_noise" not in SETTINGS[0].record()


def test_render_levers_counts_and_intervals():
    records = [{"model": "m", "setting": "s", "attack": "clean", "index": i, "label": 1, "pred": [1 if i < 3 else 2],
                "ensemble_size": 2} for i in range(4)]  # fmt: skip
    (cell,) = render_levers(records)["cells"]
    assert cell["accuracy"] == 0.75 and cell["n"] == 4
    assert cell["ci95"] == pytest.approx(list(wilson(0.75, 4)))
    assert "| m | s | 75.0 [30–95] (4) |" in table_markdown({"cells": [cell]})
    assert "precision" not in cell  # fp32, the default, goes unsaid


def test_a_cells_per_image_flags_are_kept_in_runs_and_read_back_and_the_worst_case_needs_only_them():
    flags = {0: True, 1: False, 2: True, 7: False, 8: True, 5: True}
    kept = per_image(flags)
    assert kept == {"images": [[0, 3], [5, 6], [7, 9]], "flags": "101101"} and flags_of(kept) == flags
    with pytest.raises(ValueError, match=r"flags \(5\) do not match its images \(6\)"):
        flags_of({**kept, "flags": "10110"})
    rec = lambda attack, i, ok: {"model": "m", "setting": "s", "attack": attack, "index": i, "label": 0,
                                 "pred": [0 if ok else 1]}  # fmt: skip
    records = [rec("a", i, ok) for i, ok in enumerate([True, False, True])]
    records += [rec("b", i, ok) for i, ok in enumerate([True, True, False, True])]
    cells = render_levers(records)["cells"]
    attacked = [c for c in cells if c["attack"] != levers_table.WORST_CASE]
    assert levers_table.worst_over_attacks(attacked) == [c for c in cells if c["attack"] == levers_table.WORST_CASE]
    (worst,) = levers_table.worst_over_attacks(attacked)
    assert flags_of(worst) == {0: True, 1: False, 2: False} and worst["accuracy"] == 1 / 3  # image 3: b alone


def test_a_published_table_is_given_its_flags_only_where_its_run_folder_gives_its_figures(tmp_path):
    spec = importlib.util.spec_from_file_location("publish", Path(__file__).parents[1] / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(publish)
    records = [{"model": "m", "setting": "s", "attack": a, "index": i, "label": 0, "pred": [int(i % k != 0)]}
               for a, k in (("a", 2), ("b", 3)) for i in range(6)]  # fmt: skip
    (tmp_path / "run" / "records").mkdir(parents=True)
    (tmp_path / "run" / "records" / "rank-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cells = [{k: v for k, v in c.items() if k not in ("images", "flags")} for c in render_levers(records)["cells"]]
    result = {"cells": cells, "provenance": {"command": "art-adp levers --run-dir run --attacks a b"}}
    out, given = publish.with_flags(result, root=tmp_path)
    assert given == 3 and out["schema"] == levers_table.TABLE_SCHEMA  # a, b and their worst case
    assert [{k: v for k, v in c.items() if k not in ("images", "flags")} for c in out["cells"]] == cells  # verbatim
    assert flags_of(out["cells"][0]) == {i: i % 2 == 0 for i in range(6)}
    stale = {**result, "cells": [{**cells[0], "n": 5}, *cells[1:]]}  # published from fewer images than the folder holds
    out, given = publish.with_flags(stale, root=tmp_path)
    assert given == 2 and "schema" not in out and "flags" not in out["cells"][0]


def test_a_cell_of_bf16_gradient_passes_says_so_and_the_rendered_cell_too():
    records = [{"model": "m", "setting": "s", "attack": "full-pgd-eot", "index": i, "label": 1, "pred": [2 - (i < 1)],
                "ensemble_size": 2, "options": {"check_every": "auto", "precision": "bf16"}} for i in range(2)]  # fmt: skip
    (cell,) = render_levers(records)["cells"]
    assert cell["precision"] == "bf16"
    fp32 = [{**r, "attack": "apgd-eot", "options": {"check_every": "auto"}} for r in records]
    worst = {c["attack"]: c for c in render_levers(records + fp32)["cells"]}["worst-case"]
    assert worst["precision"] == "bf16 and fp32"  # the per-image worst case names both attacks' precisions
    spec = importlib.util.spec_from_file_location("render", Path(__file__).parents[1] / "docs" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    assert render.cell(cell).endswith("(2; bf16 gradient passes)")


def test_a_run_measures_resumes_and_extends(tiny, tmp_path, one_thread):
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], attacks=("clean", "clf-pgd", "bpda-eot"),
                  ensemble_size=2, repeats=2, eot_samples=1, progress=False)  # fmt: skip
    table = train_and_measure(tiny, tmp_path, n_examples=3, **kwargs)
    records = [json.loads(line) for line in (tmp_path / "records" / "rank-0.jsonl").read_text().splitlines()]
    # 2 undefended classifiers × (clean, clf-pgd) + the oracle × (clean, clf-pgd, bpda-eot), 3 digits each
    assert len(records) == (2 * 2 + 3) * 3
    cell = {(c["model"], c["setting"], c["attack"]): c for c in table["cells"]}
    delta = np.abs(np.load(tmp_path / "clf-pgd.npy") - tiny.x_test[:3])
    assert 0.05 < delta.max() <= 0.3 + 1e-6  # the Clf-PGD examples moved, inside ε = 0.3
    bpda = "bpda-eot-40it-r1"  # the preset's row with its best iterate (the default: one run)
    assert cell[("oracle", "one-step denoise", bpda)]["repeats"] == 2
    # the adversarial examples are kept, block by block, for a later judgement
    kept = np.load(tmp_path / "examples" / f"mlp__oracle__one-step_denoise__{bpda}__0.npz")
    assert kept["indices"].tolist() == [0, 1, 2] and kept["images"].shape == (3, 1, 28, 28)
    assert 0 < np.abs(kept["images"] - tiny.x_test[:3]).max() <= 0.3 + 1e-6
    with_options = [json.loads(line) for line in (tmp_path / "records" / "rank-0.jsonl").read_text().splitlines()]
    assert {json.dumps(r.get("options")) for r in with_options if r["attack"] == bpda} == {
        json.dumps(levers_presets.row_budgets([levers_presets.with_restarts(levers_presets.MNIST.rows[4], 1)], 0.3,
                                              eot_samples=1, ensemble_size=2)[bpda].recorded)}  # fmt: skip
    assert table["provenance"]["models"].keys() == {"mlp", "adv-mlp"}
    assert table["provenance"]["data_sha256"] == array_sha256(tiny.x_test[:3], tiny.y_test[:3])  # the images measured
    first = json.loads((tmp_path / "table.json").read_text())["provenance"]
    again = run_levers(tiny, tmp_path, n_examples=3, **kwargs)  # nothing left to do
    assert len((tmp_path / "records" / "rank-0.jsonl").read_text().splitlines()) == len(records)
    assert again["provenance"]["calls"] == [first]  # every earlier call into the folder, kept in order
    table = run_levers(tiny, tmp_path, n_examples=5, **kwargs)  # two more digits per cell
    assert {c["n"] for c in table["cells"]} == {5}
    other = r"bpda-eot-40it-r1 / ensemble made with other settings: "  # the one guard's refusal
    with pytest.raises(ValueError, match=other + r".*eot_samples 1 \(now 2\)"):
        run_levers(tiny, tmp_path, n_examples=5, **{**kwargs, "eot_samples": 2})  # another budget: its own folder
    with pytest.raises(ValueError, match=other + r".*loss ce \(now margin\)"):
        run_levers(tiny, tmp_path, n_examples=5, **kwargs, loss="margin")
    (tmp_path / "settings.json").unlink()  # records older than their folder's settings file: their fields are checked
    with pytest.raises(ValueError, match=r" / ensemble made with other settings: eot_samples 1 \(now 2\)\. Use"):
        run_levers(tiny, tmp_path, n_examples=5, **{**kwargs, "eot_samples": 2})
    with pytest.raises(ValueError, match=other + r"options\.loss \(unset\) \(now margin\)\."):
        run_levers(tiny, tmp_path, n_examples=5, **kwargs, loss="margin")
    assert not (tmp_path / "settings.json").exists()  # refused before anything is written


def test_run_levers_never_trains_it_names_the_classifier_not_trained_and_the_command_that_trains_it(
        tiny, tmp_path, one_thread, monkeypatch):  # fmt: skip
    """Measuring a classifier the folder has not trained is refused, naming it, the `art-adp train-levers` line and
    the library call that train it (with the call's training keywords); nothing is trained or written. That command
    line trains it, and then it is measured."""
    from art_adp.apps import cli

    kwargs = dict(models=("oracle",), settings=["one-step denoise"], attacks=("clean",), classifiers=(),
                  purified=("mlp",), n_examples=2, ensemble_size=2, seed=3, progress=False)  # fmt: skip
    with pytest.raises(ValueError, match=r"^The classifiers \['mlp'\] are not trained in .*, and measuring never "
                                         r"trains\. Train them first") as refused:  # fmt: skip
        run_levers(tiny, tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())  # nothing trained, measured or recorded
    estimate = run_levers(tiny, tmp_path, **kwargs, estimate_only=True)  # priced with its untrained architecture
    assert estimate["estimate_seconds"] > 0 and not list(tmp_path.glob("*.safetensors"))
    call = re.search(r"levers_classifiers\.(train_levers_classifiers\(.*\)), data the data", str(refused.value))[1]
    assert call == (f"train_levers_classifiers(data, {str(tmp_path)!r}, dataset='mnist', classifiers=('mlp',), "
                    "purified=(), seed=3)")  # fmt: skip
    line = re.search(r"resumably\): `(art-adp train-levers .*)` \(DIR the data", str(refused.value))[1]
    assert line == f"art-adp train-levers --dataset mnist --data-root DIR --run-dir {tmp_path} --classifiers mlp " \
                   "--purified --seed 3"  # fmt: skip
    monkeypatch.setitem(datasets.DATASETS, "mnist", replace(datasets.DATASETS["mnist"], load=lambda root: tiny))
    assert cli.main([*line.split()[1:], "--quiet", "--threads", "1"]) == 0  # the command line trains it
    assert (tmp_path / "mlp.safetensors").exists()
    table = run_levers(tiny, tmp_path, **kwargs)
    assert [(c["model"], c["attack"], c["n"]) for c in table["cells"]] == [("oracle", "clean", 2)]


def test_the_command_lines_train_then_measure_and_levers_never_trains(tiny, tmp_path, one_thread, monkeypatch):
    """``art-adp train-levers`` runs the training stage, ``art-adp levers`` the measurement alone, each with the
    settings its stage takes (one default for each); levers on a folder whose classifier is not trained is refused
    with the command that trains it, before anything is measured, and a request it refuses is refused before the data
    is read."""
    from art_adp.apps import cli

    monkeypatch.setitem(datasets.DATASETS, "mnist", replace(datasets.DATASETS["mnist"], load=lambda root: tiny))
    stages, train, measure = [], levers_classifiers.train_levers_classifiers, levers.run_levers
    spy = lambda stage, name: functools.wraps(stage)(lambda *a, **k: stages.append(name) or stage(*a, **k))  # noqa
    monkeypatch.setattr(levers_classifiers, "train_levers_classifiers", spy(train, "train"))
    monkeypatch.setattr(levers, "run_levers", spy(measure, "measure"))
    run = tmp_path / "run"
    common = ["--data-root", "R", "--run-dir", str(run), "--device", "cpu", "--quiet", "--classifiers",
              "--threads", "1"]  # fmt: skip
    argv = ["levers", *common, "--models", "oracle", "--settings", "one-step denoise", "--attacks", "clean",
            "--n-examples", "2", "--ensemble-size", "2"]  # fmt: skip
    assert cli.main(argv) == 2 and stages == ["measure"] and not (run / "mlp.safetensors").exists()  # refused
    assert cli.main(["train-levers", *common]) == 0 and stages == ["measure", "train"]
    trained = json.loads((run / "trained.json").read_text())["mlp"]  # the training call's provenance, kept
    assert trained["models"] == {"mlp": weights_sha256(run / "mlp.safetensors")} and trained["code_version"]
    assert cli.main(argv) == 0 and stages == ["measure", "train", "measure"]
    table = json.loads((run / "table.json").read_text())
    assert table["provenance"]["models"].keys() == {"mlp"} and (run / "mlp.safetensors").exists()
    assert table["classifiers"]["mlp"]["trained_by"] == trained  # the table names the call that trained it
    with pytest.raises(ValueError, match="give denoiser_path"):
        levers.levers_command(levers.LeversConfig(models=("denoiser",)), run_dir=str(tmp_path / "other"))
    assert len(stages) == 3 and not (tmp_path / "other").exists()
    for stage, config in ((measure, levers.LeversConfig()), (train, levers_classifiers.LeversTraining())):
        for name, p in inspect.signature(stage).parameters.items():  # each command's settings: its stage's defaults
            if name not in levers_classifiers.NOT_SETTINGS:
                assert getattr(config, name) == p.default, name


def measured(seen: dict):
    """A stand-in for ``run_levers`` that notes its keywords in ``seen`` and writes the run folder's ``table.md``, which
    ``art-adp levers`` prints."""

    def run_levers(data, run_dir, **keywords):
        seen.update(keywords, data=data, run_dir=run_dir)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / "table.md").write_text("| the table |")
        return {"cells": []}

    return run_levers


def test_the_command_line_takes_setting_names_with_commas(monkeypatch, tmp_path, capsys):
    """`art-adp levers` hands the library the settings it was given, one name per argument (names hold commas), and
    prints the table it wrote."""
    from art_adp.apps import cli, levers

    seen = {}
    monkeypatch.chdir(tmp_path)  # the default run folder, runs/levers, under it
    monkeypatch.setattr(levers, "run_levers", measured(seen))
    monkeypatch.setitem(datasets.DATASETS, "mnist", replace(datasets.DATASETS["mnist"], load=lambda root: root))
    argv = [
        "levers",
        "--data-root",
        "D",
        "--denoiser",
        "d.safetensors",
        "--models",
        "oracle",
        "--settings",
        "T 10, λ 0.5",
        "one-step denoise",
        "--attacks",
        "clean",
        "clf-pgd-eps/256",
        "--n-examples",
        "7",
        "--quiet",
    ]
    assert cli.main(argv) == 0 and capsys.readouterr().out == "| the table |\n"
    assert seen["models"] == ("oracle",) and seen["settings"] == ("T 10, λ 0.5", "one-step denoise")
    assert seen["attacks"] == ("clean", "clf-pgd-eps/256") and seen["n_examples"] == 7
    assert seen["denoiser_path"] == "d.safetensors" and seen["run_dir"] == "runs/levers"
    with pytest.raises(SystemExit):  # argparse refuses an unknown setting
        cli.build_parser().parse_args(["levers", "--data-root", "D", "--settings", "T 99"])


@pytest.mark.parametrize(
    "name, known",
    [("σ 0.125, one-step", True), ("σ 0.3, T 10, λ 0.5", True), ("one-step denoise", True), ("σ 0.25, one-step", False),
     ("σ -1, one-step", False), ("σ x, one-step", False), ("σ 0.125, T 30, λ 0.05", False), ("T 99", False)],
)  # fmt: skip
def test_the_command_line_takes_the_settings_of_a_sigma_grid_given_with_sigmas(monkeypatch, name, known):
    """--sigmas 0.125 0.25 names 'σ 0.125, one-step': the command line takes any grid's names and run_levers checks
    them against the grid it runs."""
    from art_adp.apps import cli

    assert levers_presets.is_setting_name(name) is known
    argv = ["levers", "--data-root", "D", "--sigmas", "0.125", "0.25", "--settings", name]
    if known:
        assert cli.build_parser().parse_args(argv).__dict__["config.settings"] == [name]
    else:
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(argv)


def test_a_setting_of_another_grid_is_refused_naming_the_grid(tiny, tmp_path):
    with pytest.raises(
        ValueError, match=r"Unknown settings \['σ 0.125, one-step'\]; the σ grid \(0.1, 0.25, 0.5\) has"
    ):
        run_levers(tiny, tmp_path, models=("oracle",), settings=["σ 0.125, one-step"], progress=False)


# --- presets -------------------------------------------------------------------------------------------------------


def test_the_sigma_grid_gives_mnists_settings_in_their_order():
    assert [s.name for s in SETTINGS] == [
        "released (T 10, λ 0.05)", "T 10, λ 0.2", "T 10, λ 0.5", "T 30, λ 0.05", "T 30, λ 0.5, τ 0",
        "one-step denoise", "one-step denoise, clipped noise", "σ 0.1, T 10, λ 0.5", "σ 0.5, T 10, λ 0.5",
        "σ 0.1, one-step", "σ 0.5, one-step",
    ]  # fmt: skip
    assert SETTINGS[-1] == Setting("σ 0.5, one-step", sigma=0.5, one_step=True)


def test_mnist_preset_is_the_committed_table():
    p, rows = preset_for("mnist"), {r.name: r for r in preset_for("mnist").rows}
    assert (p.eps, p.classifier, p.classifiers["mlp"].arch, p.baselines) == (0.3, "mlp", "mlp", ("mlp", "adv-mlp"))
    blind = rows[BLIND_ATTACK]
    assert (blind.eps_step, blind.max_iter, blind.random_start) == (0.01, 40, False)
    assert (rows["clf-pgd-strong"].eps_step, rows["clf-pgd-strong"].max_iter) == (0.025, 100)
    assert rows["clf-pgd-eps/256"].eps_step == 0.3 / 256 / 4 and rows[SWEEP_ATTACK].eps_step == 0.01
    assert not rows[FULL_ATTACK].random_start and rows[f"{FULL_ATTACK} (rs)"].random_start


def test_fashion_mnist_preset_runs_clf_pgd_as_foolbox_linfpgd_rel_stepsize_quarter():
    """foolbox 3's LinfPGD: steps=40, random_start=True, abs step = rel_stepsize · ε (every 3.x release)."""
    p = preset_for("fashion-mnist")
    rows = {r.name: r for r in p.rows}
    eps = 8 / 255
    assert p.eps == eps and p.classifiers[p.classifier].arch == "cnn" and p.sigmas == (0.1, 0.25, 0.5)
    assert (rows[BLIND_ATTACK].max_iter, rows[BLIND_ATTACK].eps_step, rows[BLIND_ATTACK].random_start) == (
        40, 0.25 * eps, True)  # fmt: skip
    assert (rows["clf-pgd-strong"].max_iter, rows["clf-pgd-strong"].eps_step) == (100, eps / 8)
    for name in (SWEEP_ATTACK, FULL_ATTACK):
        assert (rows[name].max_iter, rows[name].eps_step, rows[name].random_start, rows[name].adaptive) == (
            40, eps / 4, True, True)  # fmt: skip
    assert not rows[BLIND_ATTACK].adaptive and p.classifiers["adv-cnn"].adversarial
    assert row_label(rows[BLIND_ATTACK], eps).endswith(", 40 × ε/4, random start")


def test_cifar10_preset_defends_resnet20_beside_its_fast_adversarial_training():
    p = preset_for("cifar10")
    assert p.eps == 8 / 255 and p.image_shape == (3, 32, 32) and p.classifier == "resnet20"
    adv = p.classifiers["adv-resnet20"]
    assert (adv.arch, adv.adversarial, adv.method, adv.lr, adv.batch_size) == ("resnet20", True, "fgsm-rs", 0.2, 128)
    assert p.classifiers["resnet20"].epochs == 0  # brought, not trained here
    model = levers_classifiers._architecture("adv-resnet20", p)
    assert model.config["in_channels"] == 3 and model.config["image_size"] == 32
    assert levers._classes(model) == 10 and model(torch.zeros(1, *p.image_shape)).shape == (1, 10)


SUPPORTED = r"supported: mnist, fashion-mnist, cifar10\.$"


@pytest.mark.parametrize("dataset", ["cifar100", "digits", "svhn"])
def test_levers_refuses_a_data_set_without_a_preset_before_reading_or_training(dataset, tmp_path, monkeypatch,
                                                                              capsys):  # fmt: skip
    """No fallback to another data set's preset: a data set without one (or unknown) is refused with the list of those
    that have one, on the command line and in the library, before its files are read or anything is built."""
    from art_adp.apps import cli

    def untouched(*args, **kwargs):
        raise AssertionError("read or measured")

    for name in ("cifar100", "digits"):  # their loaders would fail the test if called
        monkeypatch.setitem(datasets.DATASETS, name, replace(datasets.DATASETS[name], load=untouched))
    run_levers_ = levers.run_levers
    monkeypatch.setattr(levers, "run_levers", untouched)
    with pytest.raises(SystemExit):
        cli.main(["levers", "--dataset", dataset, "--data-root", str(tmp_path), "--run-dir", str(tmp_path / "run")])
    choices = r"'?mnist'?, '?fashion-mnist'?, '?cifar10'?"  # quoted or not, by Python version
    assert re.search(rf"invalid choice: '{dataset}' \(choose from {choices}\)", capsys.readouterr().err)
    message = rf"^art-adp levers has no preset for the data set '{dataset}'; {SUPPORTED}"
    with pytest.raises(ValueError, match=message):
        levers.levers_command(levers.LeversConfig(), dataset=dataset, data_root=str(tmp_path))
    with pytest.raises(ValueError, match=message):
        preset_for(dataset)
    with pytest.raises(ValueError, match=message):  # the library's entry too, before its run folder is made
        run_levers_(None, tmp_path / "run", dataset=dataset)
    assert not (tmp_path / "run").exists()


def _toy(n_train=40, n_test=4):
    """A toy data set of 8×8 images: ten random binary prototypes, lightly noised."""
    rng = np.random.default_rng(0)
    protos = (rng.random((10, 1, 8, 8)) > 0.5).astype(np.float32)
    y_train, y_test = np.arange(n_train) % 10, np.arange(n_test) % 10
    noisy = lambda y: np.clip(protos[y] + 0.05 * rng.standard_normal((len(y), 1, 8, 8)), 0, 1).astype(np.float32)
    return Dataset("toy", noisy(y_train), y_train, noisy(y_test), y_test, tuple(map(str, range(10))))


def test_a_data_set_added_in_one_place_runs_through_the_loader_the_preset_and_levers(tmp_path, monkeypatch,
                                                                                     one_thread):  # fmt: skip
    """Adding a data set is one DatasetSpec in art_adp.data.DATASETS: load_dataset reads its loader, art-adp levers
    offers it and measures it with the preset it names, at its own ε, σ grid and image shape."""
    from art_adp.apps import cli
    from art_adp.models import load_classifier

    roots = []
    toy = DatasetSpec(lambda root: roots.append(root) or _toy(), (1, 8, 8), 0.1, sigmas=(0.2, 0.25), levers="mnist")
    monkeypatch.setitem(datasets.DATASETS, "toy", toy)
    assert load_dataset("toy", "R").x_train.shape == (40, 1, 8, 8) and roots == ["R"]
    p = preset_for("toy")
    assert (p.eps, p.sigmas, p.image_shape, p.classifier) == (0.1, (0.2, 0.25), (1, 8, 8), "mlp")
    mnist = {r.name: r for r in plan("levers:mnist").values.rows}
    for row in p.rows:  # MNIST's rows, their steps scaled from its ε 0.3 to the toy's 0.1
        assert row.eps_step == pytest.approx(mnist[row.name].eps_step / 3) and row.max_iter == mnist[row.name].max_iter
    assert preset_for("mnist") == plan("levers:mnist").values
    assert levers_presets.levers_datasets() == ("mnist", "fashion-mnist", "cifar10", "toy")
    run = tmp_path / "run"
    argv = ["levers", "--dataset", "toy", "--data-root", "R", "--run-dir", str(run), "--device", "cpu", "--quiet",
            "--models", "oracle", "--settings", "σ 0.2, one-step", "--attacks", "clean", "--classifiers",
            "--n-examples", "4", "--ensemble-size", "2", "--threads", "1"]  # fmt: skip
    assert cli.main(["train-levers", *argv[1:9], "--classifiers", "--threads", "1"]) == 0 and roots == ["R", "R"]
    assert cli.main(argv) == 0 and roots == ["R", "R", "R"]
    table = json.loads((run / "table.json").read_text())
    assert (table["dataset"], table["eps"], table["classifier"]) == ("toy", 0.1, "mlp")
    assert [(c["model"], c["setting"], c["attack"], c["n"]) for c in table["cells"]] == [
        ("oracle", "σ 0.2, one-step", "clean", 4)]  # fmt: skip
    mlp = load_classifier(run / "mlp.safetensors")  # the preset's classifier, built for the toy's 1×8×8 images
    assert (mlp.config["in_channels"], mlp.config["image_size"]) == (1, 8)


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist", "cifar10"])
def test_attacks_named_from_the_registry_run_at_their_own_or_the_presets_full_budget(dataset):
    """APGD's row and its variants at Croce et al.'s 100 iterations per loss (an overridden --max-iter moves them with
    the other adaptive rows); selective EOT at DiffHammer's 50 × N = 10 and the vote attack at DiffBreak's 100, their
    own whatever --max-iter says; another registry attack at the preset's first random-start row's budget."""
    for max_iter, apgd in ((None, 100), (7, 7)):
        p = preset_for(dataset, max_iter=max_iter)
        known = {r.name: r for r in p.rows}
        default = next(r for r in p.rows if r.adaptive and r.random_start)

        def named(name):
            return levers_presets._row_named(name, known, default)

        assert [named(a).max_iter for a in ("apgd-eot", "apgd-eot-ensemble", "apgd-eot-dev")] == [apgd] * 3
        assert (named("selective-eot").max_iter, named("selective-eot").eot_samples) == (50, 10)
        assert named("lowfreq-vote").max_iter == 100 and named("lowfreq-vote").eot_samples is None
        assert named("full-pgd-eot-ensemble").max_iter == default.max_iter == (max_iter or 40)


def test_preset_overrides():
    p = preset_for("fashion-mnist", eps=16 / 255, arch="mlp", sigmas=(0.2, 0.25), max_iter=7, eps_step=0.01)
    rows = {r.name: r for r in p.rows}
    assert p.eps == 16 / 255 and p.classifiers["cnn"].arch == "mlp" and p.classifiers["adv-cnn"].arch == "cnn"
    assert rows[BLIND_ATTACK].eps_step == pytest.approx(16 / 255 / 4) and rows[BLIND_ATTACK].max_iter == 40
    assert (rows[SWEEP_ATTACK].max_iter, rows[SWEEP_ATTACK].eps_step) == (7, 0.01)
    names = [s.name for s in levers.sigma_settings(p.sigmas)]
    assert "σ 0.2, one-step" in names and "σ 0.1, one-step" not in names


# --- judgements ------------------------------------------------------------------------------------------------------


def test_each_judgement_from_hand_made_per_draw_records():
    preds = [[1, 1, 1], [1, 0, 1], [0, 2, 1], [2, 0, 0]]  # label 1, R = 3
    records = [{"model": "m", "setting": "s", "attack": "a", "index": i, "label": 1, "pred": p,
                "correct": all(v == 1 for v in p)} for i, p in enumerate(preds)]  # fmt: skip
    records += [{"model": "m", "setting": "s", "attack": "a", "index": i, "label": 1, "pred": [p], "correct": p == 1,
                 "judge": "fixed"} for i, p in enumerate([1, 0, 1, 1])]  # fmt: skip
    cells = {c.get("judge", "ensemble"): c for c in render_levers(records)["cells"]}
    j = cells["ensemble"]["judgements"]
    # mean over 12 draws: 3 + 2 + 1 + 0 = 6 correct; worst: image 0 only; majority: images 0 and 1 (2 of 3 votes)
    assert (j["mean"]["accuracy"], j["worst"]["accuracy"], j["majority"]["accuracy"]) == (0.5, 0.25, 0.5)
    assert cells["ensemble"]["accuracy"] == 0.25  # the headline cell: correct in every judgement
    assert j["majority"]["ci95"] == pytest.approx(list(wilson(0.5, 4)))
    assert cells["fixed"]["accuracy"] == 0.75 and "judgements" not in cells["fixed"]  # one draw


def test_a_tie_counts_against_the_defence():
    records = [{"model": "m", "setting": "s", "attack": "a", "index": 0, "label": 1, "pred": [1, 2], "correct": False}]
    (cell,) = render_levers(records)["cells"]
    assert cell["judgements"]["majority"]["accuracy"] == 0.0 and cell["judgements"]["mean"]["accuracy"] == 0.5


# --- the robust baseline: early stopping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "curve, patience, expected",
    [
        ([0.1, 0.2, 0.3], 2, (2, False)),
        ([0.1, 0.3, 0.2, 0.25], 2, (1, True)),
        ([0.1, 0.3, 0.3, 0.3], 2, (1, True)),  # equal is not higher: the first best stays
        ([0.1, 0.3, 0.2, 0.31], 3, (3, False)),
    ],
)
def test_plateau_rule(curve, patience, expected):
    assert robust_baseline.plateau(curve, patience) == expected


def test_training_stops_on_a_scripted_validation_curve_keeps_the_best_epoch_and_resumes(tmp_path, monkeypatch):
    curve = [0.2, 0.4, 0.5, 0.45, 0.48, 0.3, 0.9]  # best at epoch 3; patience 3 stops after epoch 6
    scripted = lambda m, x, y, **kw: (1.0, curve[int(m.net[-1].bias[0]) - 1])  # the bias counts the epochs
    monkeypatch.setattr(robust_baseline, "robust_accuracy", scripted)
    x, y = np.zeros((20, 1, 2, 2), np.float32), np.zeros(20, np.int64)
    seen = []

    def epoch(model, xt, yt, k):  # the model's bias counts its epochs
        seen.append((k, len(xt)))
        if k == 5 and len(seen) == 5:
            raise KeyboardInterrupt  # interrupted during epoch 5
        with torch.no_grad():
            model.net[-1].bias.fill_(k)

    from art_adp.models import MLP

    def fresh():
        return MLP(1, 2, 2, hidden=())

    path = tmp_path / "adv.safetensors"
    kw = dict(eps=0.1, patience=3, val_fraction=0.1, train_epoch=epoch, progress=False)
    with pytest.raises(KeyboardInterrupt):
        robust_baseline.train_until_plateau(fresh(), x, y, path, **kw)
    model, facts = robust_baseline.train_until_plateau(fresh(), x, y, path, **kw)  # resumes at epoch 5
    assert [k for k, _ in seen] == [1, 2, 3, 4, 5, 5, 6] and seen[0][1] == 18  # 10 % held out
    assert (facts["best_epoch"], facts["epochs_trained"], facts["n_validation"]) == (3, 6, 2)
    assert [c["robust"] for c in facts["curve"]] == curve[:6]
    assert model.net[-1].bias.tolist() == [3.0, 3.0]  # the best epoch's weights
    again, _ = robust_baseline.train_until_plateau(fresh(), x, y, path, **kw)  # finished: loaded, not trained
    assert len(seen) == 7 and again.net[-1].bias.tolist() == [3.0, 3.0]
    assert facts["stopped_by"] == "plateau"
    capped = tmp_path / "capped.safetensors"
    model, facts = robust_baseline.train_until_plateau(fresh(), x, y, capped, **{**kw, "max_epochs": 2})
    assert (facts["best_epoch"], facts["epochs_trained"], facts["stopped_by"]) == (2, 2, "max_epochs")


def test_bf16_training_runs_each_epoch_under_autocast_judges_in_fp32_and_refuses_another_precision(
    tmp_path, monkeypatch
):
    """precision="bf16": every training epoch runs under bf16 autocast, the validation outside it (fp32); the facts
    record it, and a run interrupted in bf16 is not resumed in fp32."""
    judged = []

    def scripted(m, x, y, **kw):
        judged.append(torch.is_autocast_enabled("cpu"))
        return 1.0, 0.5

    monkeypatch.setattr(robust_baseline, "robust_accuracy", scripted)
    x, y = np.zeros((20, 1, 2, 2), np.float32), np.zeros(20, np.int64)
    trained = []

    def epoch(model, xt, yt, k):
        trained.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        if k == 2:
            raise KeyboardInterrupt

    from art_adp.models import MLP

    kw = dict(eps=0.1, patience=3, max_epochs=3, val_fraction=0.1, train_epoch=epoch, progress=False)
    path = tmp_path / "bf16.safetensors"
    with pytest.raises(KeyboardInterrupt):
        robust_baseline.train_until_plateau(MLP(1, 2, 2, hidden=()), x, y, path, precision="bf16", **kw)
    assert trained == [(True, torch.bfloat16)] * 2 and judged == [False]
    with pytest.raises(ValueError, match="was trained in bf16, not fp32: resume it in its own precision"):
        robust_baseline.train_until_plateau(MLP(1, 2, 2, hidden=()), x, y, path, **kw)
    _, facts = robust_baseline.train_until_plateau(
        MLP(1, 2, 2, hidden=()),
        x,
        y,
        tmp_path / "fp32.safetensors",
        **{**kw, "train_epoch": lambda *a: trained.append("fp32")},
    )
    assert "precision" not in facts and trained[-1] == "fp32" and judged == [False] * 4
    with pytest.raises(ValueError, match="precision must be 'fp32' or 'bf16', got 'fp16'"):
        robust_baseline.train_until_plateau(MLP(1, 2, 2, hidden=()), x, y, path, precision="fp16", **kw)


def test_max_epochs_caps_only_the_adversarially_trained_classifiers():
    p, default = preset_for("fashion-mnist", max_epochs=3), plan("levers:fashion-mnist").values
    assert p.classifiers["adv-cnn"].epochs == 3 and p.classifiers["cnn"] == default.classifiers["cnn"]


# --- baselines and the Fashion-MNIST preset, wired through a run ---------------------------------------------------


def test_baseline_rows_wiring(tiny, tmp_path, one_thread, monkeypatch):
    """Undefended classifiers get clean, white-box PGD and AutoAttack; ADP goes in front of the robust one; adaptive
    rows start at random and are judged R times and with fixed noise."""
    eps = 8 / 255
    preset = Preset(
        eps=eps, classifier="cnn",
        classifiers={"cnn": ClassifierRecipe("cnn", epochs=1),
                     "adv-cnn": ClassifierRecipe("cnn", adversarial=True, epochs=2, patience=1, max_iter=1)},
        baselines=("cnn", "adv-cnn"), sigmas=(0.25,),
        rows=(Row("clean"), Row(BLIND_ATTACK, BLIND_ATTACK, eps / 4, 2, True),
              levers_presets.adaptive_row(FULL_ATTACK, eps / 4, max_iter=1), Row(AUTOATTACK, AUTOATTACK)),
        attacks=("clean", BLIND_ATTACK),
    )  # fmt: skip
    monkeypatch.setitem(PLANS, "levers:tiny", Plan("levers", "a tiny table", preset))
    monkeypatch.setitem(datasets.DATASETS, "tiny", DatasetSpec(lambda root: tiny, (1, 28, 28), eps, sigmas=(0.25,),
                                                               levers="tiny"))  # fmt: skip
    monkeypatch.setattr(robust_baseline, "robust_accuracy", lambda *a, **k: (1.0, 0.5))
    calls = []

    class Spy:  # AutoAttack's registry entry, recording its radius
        def __init__(self, estimator, budget, seed):
            calls.append(budget.eps)

        def generate(self, x, y=None):
            return x

    monkeypatch.setattr(engine, "REGISTRY", {**REGISTRY, AUTOATTACK: replace(REGISTRY[AUTOATTACK], build=Spy)})
    table = train_and_measure(tiny, tmp_path, dataset="tiny", models=("oracle",), settings=["one-step denoise"],
                              attacks=("clean", BLIND_ATTACK, FULL_ATTACK, AUTOATTACK), purified=("adv-cnn",),
                              judges=("ensemble", "fixed"), n_examples=2, ensemble_size=1, repeats=2, eot_samples=1,
                              progress=False)  # fmt: skip
    cells = {(c.get("classifier", c["setting"]), c["attack"], c.get("judge", "ensemble")): c for c in table["cells"]}
    full = f"{FULL_ATTACK}-1it-r1"  # every adaptive row keeps its best iterate (one run) by default
    assert calls == [eps, eps]  # AutoAttack on the two undefended classifiers only
    assert {k for k in cells if k[0] in ("cnn", "adv-cnn") and cells[k]["n"] == 2} >= {
        ("cnn", "clean", "ensemble"),
        ("adv-cnn", AUTOATTACK, "ensemble"),
        ("adv-cnn", full, "ensemble"),
        ("adv-cnn", full, "fixed"),
        ("adv-cnn", "clean", "fixed"),
    }
    assert ("adv-cnn", BLIND_ATTACK, "fixed") not in cells  # fixed noise: clean and adaptive rows
    assert cells[("adv-cnn", full, "ensemble")]["repeats"] == 2
    assert "judgements" in cells[("adv-cnn", full, "ensemble")]
    assert (tmp_path / f"{BLIND_ATTACK}@adv-cnn.npy").exists()  # Clf-PGD against the robust classifier itself
    facts = table["classifiers"]["adv-cnn"]["adversarial_training"]
    assert (facts["best_epoch"], facts["epochs_trained"]) == (1, 2) and table["eps"] == eps
    assert {r["name"]: r["label"] for r in table["rows"]}[BLIND_ATTACK].endswith("2 × ε/4, random start")


def test_a_random_start_row_starts_inside_the_ball_seeded_by_its_record(tiny):
    from art_adp.attacks.registry import Budget

    budget = Budget(eps=0.05, eps_step=1e-6, max_iter=1, random_start=True, eot_samples=1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    attack = REGISTRY[BLIND_ATTACK].build(defended_estimator(model, input_shape=(1, 28, 28)), budget, 3)
    x = tiny.x_test[:2]
    again = REGISTRY[BLIND_ATTACK].build(defended_estimator(model, input_shape=(1, 28, 28)), budget, 3)
    a, b = attack.generate(x, tiny.y_test[:2]), again.generate(x, tiny.y_test[:2])
    inside = np.abs(a - x).max() <= 0.05 + 1e-6 and ((a >= 0) & (a <= 1)).all()
    assert inside and np.abs(a - x).max() > 0.04 and np.array_equal(a, b)  # seeded by the record's seed


def test_the_command_line_takes_a_data_set_and_overrides(monkeypatch, tmp_path):
    from art_adp.apps import cli

    seen, trained = {}, {}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(levers, "run_levers", measured(seen))
    monkeypatch.setattr(levers_classifiers, "train_levers_classifiers",
                        lambda data, run_dir, **kw: trained.update(kw, data=data))  # fmt: skip
    fmnist = replace(datasets.DATASETS["fashion-mnist"], load=lambda root: f"fmnist:{root}")
    monkeypatch.setitem(datasets.DATASETS, "fashion-mnist", fmnist)
    overrides = ["--dataset", "fashion-mnist", "--data-root", "D", "--eps", "0.1", "--sigmas", "0.1", "0.25", "--arch",
                 "mlp", "--purified", "adv-cnn", "--quiet"]  # fmt: skip
    argv = ["levers", *overrides, "--models", "oracle", "--judges", "ensemble", "fixed", "--attacks", "clean", APGD]
    assert cli.main(argv) == 0 and not trained  # the measurement alone
    assert seen["data"] == "fmnist:D" and seen["dataset"] == "fashion-mnist" and seen["eps"] == 0.1
    assert seen["sigmas"] == (0.1, 0.25) and seen["arch"] == "mlp" and seen["judges"] == ("ensemble", "fixed")
    assert seen["purified"] == ("adv-cnn",) and seen["attacks"] == ("clean", APGD) and seen["classifiers"] is None
    # the training command takes the same data set, overrides and classifiers
    assert cli.main(["train-levers", *overrides, "--max-epochs", "3"]) == 0 and trained["max_epochs"] == 3
    assert {k: trained[k] for k in ("data", "dataset", "eps", "sigmas", "arch", "purified", "classifiers")} == {
        k: seen[k] for k in ("data", "dataset", "eps", "sigmas", "arch", "purified", "classifiers")}  # fmt: skip


APGD = levers_presets.APGD_ATTACK


def test_render_of_a_fake_fashion_mnist_result():
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("render", root / "docs" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    eps = 8 / 255
    rows = [{"name": r.name, "label": row_label(r, eps), "adaptive": r.adaptive}
            for r in plan("levers:fashion-mnist").values.rows]  # fmt: skip
    cell = lambda **kw: {"accuracy": 0.5, "n": 4, "ci95": list(wilson(0.5, 4)), "ensemble_size": 10, **kw}
    j = {k: {"accuracy": 0.25, "ci95": list(wilson(0.25, 4))} for k in ("mean", "worst", "majority")}
    result = {
        "eps": eps, "rows": rows, "dataset": "fashion-mnist",
        "classifiers": {"cnn": {"arch": "cnn"}, "adv-cnn": {"arch": "cnn", "adversarial_training": {
            "best_epoch": 7, "epochs_trained": 12, "n_train": 2700, "n_validation": 300, "max_iter": 10,
            "eps_step": eps / 4, "patience": 5, "validation_attack": "PGD 20"}}},
        "cells": [cell(model="none", setting="cnn", attack="clean"),
                  cell(model="oracle", setting="released (T 10, λ 0.05)", attack=BLIND_ATTACK),
                  cell(model="none", setting="adv-cnn", attack=AUTOATTACK),
                  cell(model="oracle", setting="one-step denoise", attack=FULL_ATTACK, repeats=2, eot_samples=8,
                       judgements=j),
                  cell(model="oracle", setting="one-step denoise", attack=FULL_ATTACK, judge="fixed"),
                  cell(model="denoiser", setting="one-step denoise", attack="clean", classifier="adv-cnn"),
                  {**cell(model="oracle", setting="one-step denoise", attack=levers_table.WORST_CASE), "accuracy": 0.25}],
        "provenance": {"command": "art-adp levers", "code_version": "x", "models": {}, "device": "CPU",
                       "wall_time_s": 3.0},
    }  # fmt: skip
    text = render.levers_page(result, "docs/results/x.json")
    assert "93.19" in text and "86.62" in text  # the paper's row beside the measured ones
    assert "best epoch 7 of 12" in text and "AutoAttack (standard: APGD-CE, APGD-T, FAB-T, Square)" in text
    assert "| 4 | 8 | 2 | 25.0 [5–70] | 25.0 [5–70] | 25.0 [5–70] | 50.0 [15–85] |" in text  # n, EOT, R, 4 judges
    assert "Adaptive attacks: EOT 8 draws per gradient" in text
    assert "**worst over every attack measured** (per image) |" in text and "no attack of its line broke it" in text
    assert text.count("| 25.0 [") == 4 and "| 25.0 [15–85] (4) |" in text  # the worst case: main table only
    assert "DenoiserUNet → adv-cnn" in text
    capped = {**result["classifiers"]["adv-cnn"]["adversarial_training"], "stopped_by": "max_epochs", "max_epochs": 12}
    assert "stopped by the cap of 12 epochs, not by a plateau" in render._training(
        "adv-cnn", {"arch": "cnn", "adversarial_training": capped}, "8/255"
    )


def test_each_full_strength_cell_is_set_against_the_earlier_suites_strongest_and_worst_case():
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("render", root / "docs" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    c = lambda attack, acc, n=200, **kw: {"model": "oracle", "setting": "one-step denoise", "attack": attack,
                                           "accuracy": acc, "n": n, "ci95": list(wilson(acc, n)), **kw}  # fmt: skip
    earlier = {"classifier": "cnn", "cells": [
        c("clean", 0.74), c(FULL_ATTACK, 0.60), c("selective-eot", 0.585), c(FULL_ATTACK, 0.40, n=20),
        c(FULL_ATTACK, 0.30, judge="fixed"), c(FULL_ATTACK, 0.20, classifier="adv-cnn"), c(levers_table.WORST_CASE, 0.58),
    ]}  # fmt: skip
    new = {"classifier": "cnn", "rows": [{"name": "full-pgd-eot-100it-r2", "adaptive": True}],
           "cells": [c("full-pgd-eot-100it-r2", 0.565)]}  # fmt: skip
    (line,) = [r for r in render.against_earlier(new, earlier, "old.json") if r.startswith("| oracle")]
    # the strongest single attack on the same defence, classifier, judge and images is selective EOT (58.5), not the
    # 20-image, fixed-noise or adv-cnn cells; the per-image worst case is 58.0
    # and the same attack as it ran before is the 200-image ensemble-judged full-pgd-eot of cnn (60.0)
    assert line == ("| oracle (exact score) → cnn | one-step denoise | full-pgd-eot-100it-r2 | 56.5 [50–63] (200) | "
                    "full-pgd-eot: 60.0 [53–67] (200) | -3.5 | selective-eot: 58.5 [52–65] (200) | -2.0 | "
                    "58.0 [51–65] (200) | -1.5 |")  # fmt: skip
    vote = {
        **new,
        "rows": [{"name": "lowfreq-vote-40it-r1", "adaptive": True}],
        "cells": [c("lowfreq-vote-40it-r1", 0.6)],
    }
    old_vote = {**earlier, "cells": [*earlier["cells"], c("systemic-lowfreq", 0.63)]}
    assert "| systemic-lowfreq: 63.0 [56–69] (200) | -3.0 |" in render.against_earlier(vote, old_vote, "old.json")[-2]
    assert render.against_earlier(new, {"cells": []}, "old.json") == []
    # a retrained classifier (another hash of its weights) is not set against the earlier one's cells
    hashed = lambda r, h: {**r, "provenance": {"models": {"cnn": h}}}  # noqa: E731
    assert render.against_earlier(hashed(new, "b"), hashed(earlier, "a"), "old.json") == []
    assert render.against_earlier(hashed(new, "a"), hashed(earlier, "a"), "old.json")[-2] == line


def test_restarts_and_the_best_iterate_are_rows_of_their_own(tiny, tmp_path, one_thread, monkeypatch):
    # the rows recorded before the rule keep their meaning: one run, the last iterate
    row = Row(SWEEP_ATTACK, SWEEP_ATTACK, 0.01, 40)
    old = levers_presets.row_budgets([row], 0.3, eot_samples=1)[row.name].ensemble
    assert (old.num_random_init, old.check_every) == (1, 0)
    strong = levers_presets.with_restarts(row, 2, 100)
    assert strong.name == "bpda-eot-100it-r2" and levers_presets.VARIANT.match(strong.name)["runs"] == "2"
    budget = levers_presets.row_budgets([strong], 0.3, eot_samples=16, ensemble_size=10)[strong.name].ensemble
    assert (budget.max_iter, budget.num_random_init, budget.check_every, budget.judge_draws) == (100, 2, "auto", 10)
    assert row_label(strong, 0.3) == "BPDA+EOT, 100 × ε/30, best iterate, 2 runs"
    with pytest.raises(ValueError, match="restarts apply to an adaptive row with runs >= 1"):
        levers_presets.with_restarts(Row("clean"), 2)
    built, attacked = [], []
    real, adaptive = levers.row_budgets, engine.registry_attack

    def spied(*a, **k):
        out = real(*a, **k)
        built.extend(b.ensemble for b in out.values() if b.ensemble)
        return out

    monkeypatch.setattr(levers, "row_budgets", spied)
    monkeypatch.setattr(
        engine, "registry_attack", lambda name, b: attacked.append((name, b.max_iter)) or adaptive(name, b)
    )
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], classifiers=(), ensemble_size=2, eot_samples=1,
                  max_iter=2, progress=False)  # fmt: skip
    table = train_and_measure(tiny, tmp_path, n_examples=2, attacks=(SWEEP_ATTACK,), restarts=2, **kwargs)
    assert {c["attack"] for c in table["cells"]} == {"bpda-eot-2it-r2"}
    assert {(b.max_iter, b.num_random_init, b.check_every, b.judge_draws) for b in built} == {(2, 2, "auto", 2)}
    assert attacked == [(SWEEP_ATTACK, 2)]  # the variant: the registry's attack at its 2 iterations, one block
    assert any(r.get("variant") and r["name"] == "bpda-eot-2it-r2" for r in table["rows"])
    # the variant asked by name is the same row: nothing left to measure
    run_levers(tiny, tmp_path, n_examples=2, attacks=("bpda-eot-2it-r2",), **kwargs)
    assert attacked == [(SWEEP_ATTACK, 2)]


def test_estimate_only_prices_the_rows_left_by_the_cost_model_and_measures_nothing(tiny, tmp_path, monkeypatch):

    from art_adp.runs import engine

    monkeypatch.setattr(engine, "probe", lambda *a: {"forward": 1.0, "full": 3.0, "rows": 4, "graph_row_bytes": 1})
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], classifiers=(), ensemble_size=2, repeats=3,
                  eot_samples=4, max_iter=10, progress=False, estimate_only=True)  # fmt: skip
    out = run_levers(tiny, tmp_path, n_examples=5, attacks=("clean", FULL_ATTACK), restarts=2, **kwargs)
    prices = {k.split(" | ")[-1]: v for k, v in out["by_row"].items()}
    # clean: the S-ensemble judges each image once (2 forwards); the variant: 2 runs x 10 iterations x 4 full-gradient
    # draws (3.0), every iterate judged (a judgement of S = 2 draws is under a quarter of an iteration of 4: 11 times a
    # run) on S = 2 draws, then R = 3 judgements of the S = 2 ensemble
    assert prices == {
        "clean": 5 * 2.0,
        f"{FULL_ATTACK}-10it-r2": 5 * (2 * 10 * 4 * 3.0 + 2 * 11 * 2 * 1.0 + 3 * 2 * 1.0),
    }
    assert out["estimate_seconds"] == sum(prices.values())
    assert not (tmp_path / "records" / "rank-0.jsonl").exists() and not list(tmp_path.glob("*.safetensors"))  # nothing trained
    # the estimate is kept beside the run, with its provenance, so a table can say what the rows not run would cost
    kept = json.loads((tmp_path / "estimate.json").read_text())
    assert kept["by_row"] == out["by_row"] and kept["n_examples"] == 5
    assert {"command", "code_version", "device", "wall_time_s"} <= set(kept["provenance"])


def test_estimate_only_prices_a_clf_pgd_row_without_making_its_examples(tiny, tmp_path, monkeypatch):
    """A Clf-PGD row's examples are made against the bare classifier when measuring; an estimate makes none and prices
    the purified cell's one S-ensemble judgement per image."""
    from art_adp.runs import engine

    monkeypatch.setattr(engine, "probe", lambda *a: {"forward": 1.0, "full": 3.0, "rows": 4, "graph_row_bytes": 1})
    out = run_levers(tiny, tmp_path, n_examples=5, attacks=("clf-pgd",), models=("oracle",),
                     settings=["one-step denoise"], classifiers=(), ensemble_size=2, progress=False,
                     estimate_only=True)  # fmt: skip
    assert {k.split(" | ")[-1]: v for k, v in out["by_row"].items()} == {"clf-pgd": 5 * 2.0}
    assert not list(tmp_path.glob("*.npy")) and not (tmp_path / "records" / "rank-0.jsonl").exists()


def test_an_adaptive_row_cut_short_resumes_from_its_last_whole_block(tiny, tmp_path, one_thread, monkeypatch):
    """Each block of images is attacked, judged and recorded before the next: a row interrupted in its second block
    keeps its first, and the resumed row's records equal an uninterrupted run's."""
    monkeypatch.setattr(levers, "BLOCK", 2)
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], classifiers=(), attacks=(SWEEP_ATTACK,),
                  ensemble_size=2, repeats=2, eot_samples=1, max_iter=2, n_examples=5, progress=False)  # fmt: skip
    whole = train_and_measure(tiny, tmp_path / "whole", **kwargs)
    real, calls = engine.registry_attack, []

    def cut(name, budget):
        def run(est, x, y, idx, seeds):
            calls.append(len(x))
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(name, budget)(est, x, y, idx, seeds)

        return run

    monkeypatch.setattr(engine, "registry_attack", cut)
    with pytest.raises(KeyboardInterrupt):
        train_and_measure(tiny, tmp_path / "cut", **kwargs)
    kept = [json.loads(line) for line in (tmp_path / "cut" / "records" / "rank-0.jsonl").read_text().splitlines()]
    assert calls == [2, 2] and [r["index"] for r in kept] == [0, 1]  # images 0-1 recorded, 2-3 lost with the cut
    monkeypatch.setattr(engine, "registry_attack", real)
    resumed = run_levers(tiny, tmp_path / "cut", **kwargs)
    key = lambda d: sorted(
        (r["index"], r["label"], tuple(r["pred"]))
        for r in map(json.loads, (d / "records" / "rank-0.jsonl").read_text().splitlines())  # noqa: E731
    )
    assert key(tmp_path / "cut") == key(tmp_path / "whole") and len(key(tmp_path / "whole")) == 5
    assert [c["accuracy"] for c in resumed["cells"]] == [c["accuracy"] for c in whole["cells"]]
    first, later = SeedPlan("levers", 7, ("r",))(0, 0), SeedPlan("levers", 7, ("r",))(2, 0)
    assert first.attack == derive_seed(7, "r") and later.attack != first.attack  # the first block: the run's seed


def test_a_recipe_with_init_fine_tunes_the_brought_classifier(tiny, tmp_path, monkeypatch):
    """init: the classifier trained behind the purifier starts from the brought one's weights (fine-tuned), with the
    recipe's learning rate and held-out fraction."""
    from art_adp.models import MLP, save_classifier

    torch.manual_seed(3)
    base = MLP(hidden=(8,))
    save_classifier(base, tmp_path / "base.safetensors")
    preset = levers.Preset(eps=0.1, classifier="base", sigmas=(0.25,), rows=(Row("clean"),), attacks=("clean",),
                           baselines=(), classifiers={
                               "base": ClassifierRecipe("mlp", epochs=0),
                               "tuned": ClassifierRecipe("mlp", epochs=2, patience=1, lr=1e-4, validation=0.25,
                                                         purifier=("oracle", levers_presets.ONE_STEP), init="base")})  # fmt: skip
    seen = {}

    def train(model, x, y, path, **kw):
        seen.update(kw, weights={k: v.clone() for k, v in model.state_dict().items()})
        return model, {}

    monkeypatch.setattr(levers_classifiers, "train_until_plateau", train)
    levers_classifiers._classifier("tuned", preset, tiny, tmp_path, 0, False)
    assert all(torch.equal(seen["weights"][k], v) for k, v in base.state_dict().items())
    assert (seen["lr"], seen["val_fraction"], seen["adversarial"]) == (1e-4, 0.25, False)
    assert levers_classifiers._classifier("base", preset, tiny, tmp_path, 0, False).config == base.config  # brought


def test_a_cell_run_again_with_other_settings_is_refused(tiny, tmp_path, one_thread):
    """The folder's settings.json keeps each cell's settings: another radius (the rows' budgets with it) or another S is
    refused before anything runs, naming what differs; the same settings resume, and a new row is added."""
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], classifiers=(), attacks=("clean", SWEEP_ATTACK),
                  ensemble_size=2, repeats=2, eot_samples=1, max_iter=1, n_examples=2, progress=False)  # fmt: skip
    train_and_measure(tiny, tmp_path, **kwargs)
    held = json.loads((tmp_path / "settings.json").read_text())
    assert sorted(held) == ["mlp / oracle / one-step denoise / bpda-eot-1it-r1 / ensemble",
                            "mlp / oracle / one-step denoise / clean / ensemble"]  # fmt: skip
    before = (tmp_path / "records" / "rank-0.jsonl").read_text()
    with pytest.raises(ValueError, match=r"holds records for mlp / oracle / one-step denoise / clean / ensemble made "
                                         r"with other settings: eps 0.3 \(now 0.2\)\."):  # fmt: skip
        run_levers(tiny, tmp_path, eps=0.2, **kwargs)
    with pytest.raises(ValueError, match=r"bpda-eot-1it-r1 / ensemble made with other settings: budget.eps_step "
                                         r"0.01 \(now 0.05\), row.eps_step 0.01 \(now 0.05\)"):  # fmt: skip
        run_levers(tiny, tmp_path, eps_step=0.05, **kwargs)
    with pytest.raises(
        ValueError, match=r"clean / ensemble made with other settings: judgement.ensemble_size 2 \(now 3\)"
    ):
        run_levers(tiny, tmp_path, **{**kwargs, "ensemble_size": 3})
    assert (tmp_path / "records" / "rank-0.jsonl").read_text() == before  # nothing ran
    run_levers(tiny, tmp_path, **{**kwargs, "attacks": ("clean", SWEEP_ATTACK, BLIND_ATTACK)})
    assert len(json.loads((tmp_path / "settings.json").read_text())) == 3


def test_a_new_folder_seeds_its_cells_apart_and_an_older_one_resumes_with_its_own_scheme(tiny, tmp_path, one_thread,
                                                                                         monkeypatch):  # fmt: skip
    """A new folder names the ``apart`` scheme in every cell's settings, and each block of an adaptive row is seeded
    from the cell's key and the block's first image; a folder measured before it (no scheme named) resumes under
    levers' own schemes, its new images as a one-call run of them gives; another scheme there is refused."""
    monkeypatch.setattr(levers, "BLOCK", 2)
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], classifiers=("mlp",),
                  attacks=("clean", BLIND_ATTACK, SWEEP_ATTACK), ensemble_size=2, repeats=2, eot_samples=1, max_iter=1,
                  progress=False)  # fmt: skip
    real, seen = engine.registry_attack, []

    def spy(name, budget):
        def run(est, x, y, idx, seeds):
            seen.append((name, int(idx[0]), seeds))
            return real(name, budget)(est, x, y, idx, seeds)

        return run

    monkeypatch.setattr(engine, "registry_attack", spy)
    train_and_measure(tiny, tmp_path / "new", n_examples=4, **kwargs)
    held = json.loads((tmp_path / "new" / "settings.json").read_text())
    assert {v["seed_scheme"] for v in held.values()} == {"apart"} and len(held) == 5  # 2 bare, 3 behind the purifier
    row = "bpda-eot-1it-r1"
    key = ("mlp", "oracle", "one-step denoise", row, "ensemble")
    assert [(i, s) for n, i, s in seen if n == SWEEP_ATTACK] == [
        (0, SeedPlan("apart", 0, key, 2)(0, 0)), (2, SeedPlan("apart", 0, key, 2)(1, 2))]  # fmt: skip
    assert seen[-1][2].attack != seen[-1][2].noise  # the attack's seed and the noise's derived apart
    monkeypatch.setattr(engine, "registry_attack", real)
    train_and_measure(tiny, tmp_path / "old", n_examples=2, seed_scheme="levers", **kwargs)
    assert not any("seed_scheme" in v for v in json.loads((tmp_path / "old" / "settings.json").read_text()).values())
    run_levers(tiny, tmp_path / "old", n_examples=4, **kwargs)  # resumed: the folder's own scheme
    train_and_measure(tiny, tmp_path / "once", n_examples=4, seed_scheme="levers", **kwargs)
    records = lambda d: sorted(
        (r["attack"], r["index"], str(r["pred"]))  # noqa: E731
        for r in map(json.loads, (tmp_path / d / "records" / "rank-0.jsonl").read_text().splitlines())
    )
    assert records("old") == records("once") and len(records("once")) == 4 * 5
    with pytest.raises(ValueError, match=r"made with other settings: seed_scheme"):
        run_levers(tiny, tmp_path / "old", n_examples=4, seed_scheme="apart", **kwargs)
    with pytest.raises(ValueError, match=r"Unknown seed scheme 'shared'; choose from \['apart', 'levers'\]"):
        run_levers(tiny, tmp_path / "old", n_examples=4, seed_scheme="shared", **kwargs)
