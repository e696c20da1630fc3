"""The lever-by-lever MNIST measurement (art-adp levers) on a tiny synthetic 28×28 data set."""

import json

import numpy as np
import pytest

from art_adp.apps.evaluation.report import wilson
from art_adp.apps.levers import SETTINGS, Setting, render_levers, run_levers, table_markdown
from art_adp.data import Dataset


@pytest.fixture(scope="module")
def tiny():
    rng = np.random.default_rng(0)
    protos = (rng.random((10, 1, 28, 28)) > 0.7).astype(np.float32)
    y_train, y_test = np.arange(40) % 10, np.arange(6) % 10
    noisy = lambda y: np.clip(protos[y] + 0.1 * rng.standard_normal((len(y), 1, 28, 28)), 0, 1).astype(np.float32)
    return Dataset("tiny", noisy(y_train), y_train, noisy(y_test), y_test, tuple(map(str, range(10))))


def test_one_step_is_one_fixed_step_of_size_sigma_never_stopped():
    assert Setting("x", sigma=0.1, one_step=True).purifier_kwargs() == {
        "sigma": 0.1, "steps": 1, "step_size": 0.1, "tau": 0.0
    }  # fmt: skip
    assert SETTINGS[0].purifier_kwargs() == {"sigma": 0.25, "steps": 10, "lam": 0.05, "tau": 1e-3}  # released


def test_render_levers_counts_and_intervals():
    records = [{"model": "m", "setting": "s", "attack": "clean", "index": i, "correct": i < 3, "ensemble_size": 2}
               for i in range(4)]  # fmt: skip
    (cell,) = render_levers(records)["cells"]
    assert cell["accuracy"] == 0.75 and cell["n"] == 4
    assert cell["ci95"] == pytest.approx(list(wilson(0.75, 4)))
    assert "| m | s | 75.0 (4) [" in table_markdown({"cells": [cell]})


def test_a_run_measures_resumes_and_extends(tiny, tmp_path, one_thread):
    kwargs = dict(models=("oracle",), settings=["one-step denoise"], attacks=("clean", "clf-pgd", "bpda-eot"),
                  ensemble_size=2, repeats=2, eot_samples=1, progress=False)  # fmt: skip
    table = run_levers(tiny, tmp_path, n_examples=3, **kwargs)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    # 2 undefended classifiers × (clean, clf-pgd) + the oracle × (clean, clf-pgd, bpda-eot), 3 digits each
    assert len(records) == (2 * 2 + 3) * 3
    cell = {(c["model"], c["setting"], c["attack"]): c for c in table["cells"]}
    delta = np.abs(np.load(tmp_path / "clf-pgd.npy") - tiny.x_test[:3])
    assert 0.05 < delta.max() <= 0.3 + 1e-6  # the Clf-PGD examples moved, inside ε = 0.3
    assert cell[("oracle", "one-step denoise", "bpda-eot")]["repeats"] == 2
    assert table["provenance"]["models"].keys() == {"mlp", "adv-mlp"}
    run_levers(tiny, tmp_path, n_examples=3, **kwargs)  # nothing left to do
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == len(records)
    table = run_levers(tiny, tmp_path, n_examples=5, **kwargs)  # two more digits per cell
    assert {c["n"] for c in table["cells"]} == {5}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"settings": ["nope"]}, r"Unknown settings \['nope'\]"),
        ({"attacks": ("clean", "fgsm")}, r"Unknown attack rows \['fgsm'\]"),
        ({"models": ("denoiser",)}, "give denoiser_path"),
    ],
)
def test_bad_requests_are_named(tiny, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_levers(tiny, tmp_path, **{"models": ("oracle",), **kwargs})


def test_the_command_line_takes_setting_names_with_commas(monkeypatch):
    """`art-adp levers` hands the library the settings it was given, one name per argument (names hold commas)."""
    from art_adp.apps import cli, levers

    seen = {}
    monkeypatch.setattr(levers, "run_levers", lambda data, run_dir, **kw: seen.update(kw, run_dir=run_dir) or {"cells": []})
    monkeypatch.setattr("art_adp.data.load_mnist", lambda root: root)
    argv = ["levers", "--data-root", "D", "--denoiser", "d.safetensors", "--models", "oracle", "--settings",
            "T 10, λ 0.5", "one-step denoise", "--attacks", "clean", "clf-pgd-eps/256", "--n-examples", "7", "--quiet"]
    assert cli.main(argv) == 0
    assert seen["models"] == ("oracle",) and seen["settings"] == ("T 10, λ 0.5", "one-step denoise")
    assert seen["attacks"] == ("clean", "clf-pgd-eps/256") and seen["n_examples"] == 7
    assert seen["denoiser_path"] == "d.safetensors" and seen["run_dir"] == "runs/levers"
    with pytest.raises(SystemExit):  # argparse refuses an unknown setting
        cli.build_parser().parse_args(["levers", "--data-root", "D", "--settings", "T 99"])
