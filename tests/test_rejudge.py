"""``art-adp rejudge`` (art_adp.apps.rejudge): a tiny lever table run with its own machinery, then judged again from
its folder alone: at the run's own R and seed its own predictions come back, a larger R adds judgements after them,
and a folder lacking what a judgement needs is refused, naming it."""

import json
import shutil

import numpy as np
import pytest
import torch

from art_adp.runs.statistics import flags_of
from art_adp.apps import cli, levers, levers_classifiers, rejudge
from art_adp.attacks.registry import SWEEP_ATTACK
from art_adp.data import Dataset
from art_adp.models import save_classifier
from art_adp.runs.engine import correct
from art_adp.runs.records import read_jsonl
from levers_stages import train_and_measure

KW = dict(models=("oracle",), settings=["one-step denoise"], classifiers=(), attacks=("clean", SWEEP_ATTACK),
          ensemble_size=2, repeats=2, eot_samples=1, max_iter=2, n_examples=5, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    """Ten noisy binary patterns to learn; test images halfway between two of them, where the purifier's noise
    decides the prediction (so that a judgement on other draws would tell)."""
    rng = np.random.default_rng(0)
    protos = (rng.random((10, 1, 28, 28)) > 0.7).astype(np.float32)
    y_train, y_test = np.arange(40) % 10, np.arange(6) % 10
    noise = lambda y, s: s * rng.standard_normal((len(y), 1, 28, 28))  # noqa: E731
    x_train = np.clip(protos[y_train] + noise(y_train, 0.3), 0, 1).astype(np.float32)
    x_test = np.clip((protos[y_test] + protos[(y_test + 1) % 10]) / 2 + noise(y_test, 0.1), 0, 1).astype(np.float32)
    return Dataset("tiny", x_train, y_train, x_test, y_test, tuple(map(str, range(10))))


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    """A levers run of two blocks of two images and a last of one (the later blocks' seeds derived, not the run's)."""
    folder = tmp_path_factory.mktemp("levers")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(levers, "BLOCK", 2)
        train_and_measure(tiny, folder, seed=3, **KW)
    return folder


def _preds(records, key):
    return {(*key(r), r["index"]): r["pred"] for r in records}


def test_the_runs_own_judgement_comes_back_and_a_larger_r_can_only_lower_the_worst(tiny, run, monkeypatch):
    monkeypatch.setattr(levers, "BLOCK", 2)
    own = [r for r in read_jsonl(run / "records" / "rank-0.jsonl") if r["attack"] != "clean"]
    cell = ("mlp", "oracle", "one-step denoise", own[0]["attack"])
    assert len(own) == 5 and len(rejudge.kept(run, cell)) == 3
    out = rejudge.rejudge_levers(run, data=tiny, progress=False)
    again = read_jsonl(run / "rejudged-S2-R2-seed3.jsonl")
    assert _preds(again, lambda r: tuple(r["cell"])) == _preds(own, lambda r: cell)  # every prediction, exactly
    table = json.loads((run / "table.json").read_text())
    (mine,) = out["cells"]
    (theirs,) = [c for c in table["cells"] if c["attack"] == cell[3]]
    assert (mine["accuracy"], mine["n"], mine["ci95"]) == (theirs["accuracy"], theirs["n"], theirs["ci95"])
    assert flags_of(mine) == {r["index"]: correct(r) for r in own} == flags_of(theirs)  # the run's own flags
    assert json.loads((run / "rejudged-S2-R2-seed3.json").read_text())["cells"] == out["cells"]
    # R = 6: the run's two judgements first, then four more; the worst of 6 is at most the worst of 2
    more = rejudge.rejudge_levers(run, repeats=6, data=tiny, progress=False)
    six = {r["index"]: r["pred"] for r in read_jsonl(run / "rejudged-S2-R6-seed3.jsonl")}
    assert all(six[r["index"]][:2] == r["pred"] and len(six[r["index"]]) == 6 for r in own)
    assert more["cells"][0]["accuracy"] <= theirs["accuracy"]
    assert more["cells"][0]["judgements"]["worst of 2"]["accuracy"] == theirs["accuracy"]
    # another seed: fresh ensembles, a file of their own, and other predictions (the match above is no accident)
    other = rejudge.rejudge_levers(run, seed=4, data=tiny, progress=False)
    fresh = {r["index"]: r["pred"] for r in read_jsonl(run / "rejudged-S2-R2-seed4.jsonl")}
    assert other["settings"]["seed"] == 4 and any(fresh[r["index"]] != r["pred"] for r in own)
    assert len(read_jsonl(run / "records" / "rank-0.jsonl")) == 10  # the run's records untouched


def test_the_command_line_rebuilds_the_run_and_names_what_is_missing(tiny, run, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    monkeypatch.setattr(levers, "BLOCK", 2)
    # the exact score needs the training split: the recorded command (pytest's) names no data folder
    assert cli.main(["rejudge", str(folder), "--threads", "1"]) == 2
    assert "oracle cells take the exact score over mnist's training split" in capsys.readouterr().err
    monkeypatch.setattr("art_adp.data.load_dataset", lambda name, root: tiny if root == "right" else None)
    assert cli.main(["rejudge", str(folder), "--data-root", "right", "--repeats", "3", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "mlp | oracle | one-step denoise | bpda-eot-2it-r1: " in printed and " of 5 [" in printed
    assert len(read_jsonl(folder / "rejudged-S2-R3-seed3.jsonl")) == 5
    wrong = Dataset("wrong", tiny.x_train, tiny.y_train, tiny.x_test[::-1].copy(), tiny.y_test, tiny.classes)
    with pytest.raises(ValueError, match="The data set given is not the one .* measured"):
        rejudge.rejudge_levers(folder, data=wrong, progress=False)
    cells = json.loads((folder / "settings.json").read_text())
    (folder / "settings.json").write_text(json.dumps({k: v for k, v in cells.items() if "bpda" not in k}))
    with pytest.raises(ValueError, match="settings.json holds no settings of mlp / oracle / one-step denoise / bpda-eot"):
        rejudge.rejudge_levers(folder, data=tiny, progress=False)
    (folder / "settings.json").write_text(json.dumps(cells))
    (folder / "mlp.safetensors").replace(folder / "elsewhere.safetensors")
    other = levers_classifiers.brought("elsewhere", folder)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)  # another classifier under the run's name
    save_classifier(other, folder / "mlp.safetensors")
    with pytest.raises(ValueError, match="mlp is not the classifier the run measured"):
        rejudge.rejudge_levers(folder, data=tiny, repeats=4, progress=False)
    (folder / "mlp.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="The classifier 'mlp' is not trained here"):
        rejudge.rejudge_levers(folder, data=tiny, repeats=4, progress=False)
    (folder / "table.json").unlink()
    with pytest.raises(ValueError, match="lacks table.json: a levers run's records, its cells' settings and its table"):
        rejudge.rejudge_levers(folder, data=tiny, progress=False)


def test_a_run_without_kept_examples_is_refused(tiny, tmp_path):
    train_and_measure(tiny, tmp_path, **{**KW, "n_examples": 2, "keep_examples": False})
    assert (tmp_path / "records" / "rank-0.jsonl").exists() and not (tmp_path / "examples").exists()
    with pytest.raises(ValueError, match="holds no kept adversarial examples .* ran without keeping them"):
        rejudge.rejudge_levers(tmp_path, data=tiny, progress=False)
    with pytest.raises(ValueError, match="holds no kept adversarial examples"):
        rejudge.rejudge_levers(tmp_path / "nothing", data=tiny, progress=False)
