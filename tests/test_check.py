"""``art-adp check``: a published lever table's cells re-measured with the zoo's weights, verdict by verdict."""

import json
import sys

import numpy as np
import pytest

from art_adp.apps import check as checking
from art_adp.apps.check import Check, call_of, cell_label, check_result
from art_adp.apps.cli import main, parse
from art_adp.data import Dataset
from art_adp.runs.provenance import code_version
from art_adp.runs.statistics import flags_of
from art_adp.serialization import file_sha256, weights_sha256
from art_adp.zoo import SCHEMA

ARGS = ["levers", "--dataset", "mnist", "--data-root", "DIR", "--quiet", "--models", "oracle", "--settings",
        "one-step denoise", "--n-examples", "50", "--ensemble-size", "2", "--seed-scheme", "levers", "--eps", "0.02"]  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    """Fifty test digits (a record block) of ten noisy prototypes, and forty to train on."""
    rng = np.random.default_rng(0)
    protos = 0.4 + 0.1 * (rng.random((10, 1, 28, 28)) > 0.7).astype(np.float32)  # close: some verdicts turn
    y_train, y_test = np.arange(40) % 10, np.arange(50) % 10
    noisy = lambda y: np.clip(protos[y] + 0.3 * rng.standard_normal((len(y), 1, 28, 28)), 0, 1).astype(np.float32)
    return Dataset("tiny", noisy(y_train), y_train, noisy(y_test), y_test, tuple(map(str, range(10))))


@pytest.fixture(scope="module")
def published(digits, tmp_path_factory):
    """A lever table measured by two calls through the command line (clean, then BPDA+EOT judged R = 2 times), as
    a result file is, and a zoo holding the classifier it trained."""
    folder = tmp_path_factory.mktemp("published")
    mp = pytest.MonkeyPatch()
    mp.setattr("art_adp.data.load_dataset", lambda name, root: digits)
    run = ["--run-dir", str(folder / "run"), "--threads", "1"]
    train = ["train-levers", "--dataset", "mnist", "--data-root", "DIR", "--quiet", "--eps", "0.02", *run,
             "--classifiers", "mlp", "--purified", "mlp"]  # fmt: skip
    assert main(train) == 0  # the classifier first: levers never trains
    for more in (["--classifiers", "mlp", "--purified", "mlp", "--attacks", "clean", "clf-pgd"],
                 ["--classifiers", "--purified", "mlp", "--attacks", "bpda-eot", "--repeats", "2", "--eot-samples",
                  "1", "--max-iter", "5"]):  # fmt: skip
        mp.setattr(sys, "argv", ["art-adp", *ARGS, *run, *more])
        assert main([*ARGS, *run, *more]) == 0
    mp.undo()
    trained = folder / "run" / "mlp.safetensors"
    zoo = folder / "zoo"
    (zoo / "mnist").mkdir(parents=True)
    (zoo / "mnist" / "mlp.safetensors").write_bytes(trained.read_bytes())
    entry = {"kind": "classifier", "dataset": "mnist", "file": "mnist/mlp.safetensors",
             "sha256": file_sha256(trained), "weights_sha256": weights_sha256(trained)}  # fmt: skip
    (zoo / "manifest.json").write_text(json.dumps({"schema": SCHEMA, "entries": {"mnist/mlp": entry}}))
    return folder / "run" / "table.json", zoo


@pytest.fixture
def setting(published, digits, monkeypatch):
    monkeypatch.setenv("ART_ADP_ZOO", str(published[1]))
    monkeypatch.setattr("art_adp.data.load_dataset", lambda name, root: digits)
    return published[0]


def test_each_cell_is_found_in_the_call_that_measured_it(published):
    table = json.loads(published[0].read_text())
    labels = {cell_label(c, table["classifier"]): c for c in table["cells"]}
    assert set(labels) >= {"mlp|none|-|clean", "mlp|oracle|one-step denoise|clean",
                           "mlp|oracle|one-step denoise|bpda-eot-5it-r1"}  # fmt: skip
    first, second = table["provenance"]["calls"][0], table["provenance"]
    assert call_of(table, labels["mlp|oracle|one-step denoise|clean"]) == (first, "clean")
    call, attack = call_of(table, labels["mlp|oracle|one-step denoise|bpda-eot-5it-r1"])
    assert attack == "bpda-eot" and call["command"] == second["command"]
    with pytest.raises(ValueError, match="No call recorded .* measured the cell mlp|oracle|one-step denoise|pgd"):
        call_of(table, {**labels["mlp|oracle|one-step denoise|clean"], "attack": "pgd"})


def test_a_re_measurement_from_the_zoo_gives_the_published_verdicts_back(setting, tmp_path, one_thread):
    out = check_result(setting, Check(n=50), data_root="DIR", parse=parse, run_dir=tmp_path, progress=False)
    assert out["data"]["same"] is True and out["passed"] is True
    assert out["code_version"] == code_version() and out["device"].startswith("CPU ")  # what the seconds were on
    published = {cell_label(c, "mlp"): c for c in json.loads(setting.read_text())["cells"]}
    assert len(out["cells"]) == 5  # every measured cell: bare and behind the oracle, clean and Clf-PGD; BPDA+EOT
    assert 0 < published["mlp|oracle|one-step denoise|bpda-eot-5it-r1"]["accuracy"] < 1  # verdicts of both kinds
    for cell in out["cells"]:
        assert cell["agreement"] == 1.0 and cell["differ"] == [] and cell["in_interval"]
        assert cell["measured"] == pytest.approx(published[cell["cell"]]["accuracy"])
    assert {c["cell"] for c in out["cells"]} == {k for k in published if not k.endswith("worst-case")}


def test_a_verdict_that_differs_is_named_and_fails_below_the_tolerance(setting, tmp_path, one_thread, capsys):
    table = json.loads(setting.read_text())
    label = "mlp|oracle|one-step denoise|bpda-eot-5it-r1"
    cell = next(c for c in table["cells"] if cell_label(c, "mlp") == label)
    flags = flags_of(cell)
    cell["flags"] = "".join(("0" if flags[i] else "1") if i in (3, 7) else ("1" if flags[i] else "0")
                            for i in sorted(flags))  # two images published with the other verdict
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(table))
    out = check_result(edited, Check(cells=(label,), n=50, tolerance=0.97), data_root="DIR", parse=parse, run_dir=tmp_path / "a",
                       progress=False)  # fmt: skip
    assert out["cells"][0]["differ"] == [3, 7] and out["cells"][0]["agreement"] == 0.96 and out["passed"] is False
    assert main(["check", str(edited), "--data-root", "DIR", "--cell", label, "--tolerance", "0.97", "--run-dir",
                 str(tmp_path / "b"), "--quiet"]) == 1  # fmt: skip
    assert "DISAGREES, 96.0% of 50 images equal" in capsys.readouterr().out
    assert main(["check", str(edited), "--data-root", "DIR", "--cell", label, "--run-dir", str(tmp_path / "c"),
                 "--quiet"]) == 0  # within the default tolerance  # fmt: skip


def test_other_data_is_refused_before_anything_runs(setting, digits, tmp_path, monkeypatch, capsys):
    other = Dataset("tiny", digits.x_train, digits.y_train, digits.x_test, (digits.y_test + 1) % 10, digits.classes)
    monkeypatch.setattr("art_adp.data.load_dataset", lambda name, root: other)
    monkeypatch.setattr(checking, "_rerun", lambda *a, **k: pytest.fail("measured"))
    assert main(["check", str(setting), "--data-root", "DIR", "--run-dir", str(tmp_path), "--quiet"]) == 3
    assert "DATA DIFFERS: the images' SHA-256 is" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 40}, "--n 40: give a positive multiple of 50"),
    ({"n": 100}, "published on 50 images, fewer than --n 100"),
    ({"cells": ("mlp|oracle|T 10|clean",)}, "No cell 'mlp|oracle|T 10|clean'"),
])  # fmt: skip
def test_bad_requests_are_named(setting, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("|", "\\|")):
        check_result(setting, Check(**kwargs), data_root="DIR", parse=parse, run_dir=tmp_path, progress=False)


def test_weights_in_no_zoo_entry_and_tables_without_flags_are_refused(setting, tmp_path, monkeypatch):
    table = json.loads(setting.read_text())
    table["provenance"]["models"]["mlp"] = "00" * 32
    (tmp_path / "other.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match="The classifier 'mlp' .* is in no zoo entry"):
        check_result(tmp_path / "other.json", Check(cells=("mlp|none|-|clean",)), data_root="DIR", parse=parse,
                     run_dir=tmp_path / "r", progress=False)  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps({**table, "schema": None}))
    with pytest.raises(ValueError, match="not a lever table with per-image flags"):
        check_result(tmp_path / "old.json", Check(), data_root="DIR", parse=parse, progress=False)


def test_the_code_version_of_the_call_is_compared_with_todays():
    assert "cannot tell" in checking.code_changes({"code_version": "art-adp 0.1 (0000000)"}) or \
        "changed" in checking.code_changes({"code_version": "art-adp 0.1 (0000000)"})  # fmt: skip
    head = checking._git("rev-parse", "--short", "HEAD")
    if head is None or head.returncode:
        pytest.skip("not a git checkout")
    first = checking._git("rev-list", "--max-parents=0", "HEAD").stdout.split()[0]
    said = checking.code_changes({"code_version": f"art-adp 0.1 ({first[:7]}-dirty)"})
    assert said.startswith(f"the measuring code changed since the recorded call ({first[:7]}): ")
    assert "art_adp/attacks" in said


def test_a_cell_whose_setting_purifies_otherwise_today_is_refused(setting, tmp_path):
    table = json.loads(setting.read_text())
    label = "mlp|oracle|one-step denoise|clean"
    cell = next(c for c in table["cells"] if cell_label(c, "mlp") == label)
    assert cell["clip_noise"] is False  # the exact score's one-step denoise takes an unclipped noisy input today
    del cell["clip_noise"]  # as a table measured before the clip was a choice records its clipped input
    (tmp_path / "clipped.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match="purified a clipped noisy input; 'one-step denoise' purifies an unclipped one "
                                         "today"):  # fmt: skip
        check_result(tmp_path / "clipped.json", Check(cells=(label,)), data_root="DIR", parse=parse,
                     run_dir=tmp_path / "r", progress=False)  # fmt: skip


def test_a_cell_drawn_for_its_whole_call_is_measured_again_on_the_calls_images(published):
    """Clean and Clf-PGD cells, and every bare classifier's, draw their noise (and starts) for the whole call at once:
    re-measured on fewer images, an image would meet another's draws. An adaptive cell behind the purifier draws per
    block of 50."""
    table = json.loads(published[0].read_text())
    cells = {cell_label(c, "mlp"): c for c in table["cells"]}
    assert not checking._in_blocks(table, cells["mlp|none|-|clean"])
    assert not checking._in_blocks(table, cells["mlp|none|-|clf-pgd"])
    assert not checking._in_blocks(table, cells["mlp|oracle|one-step denoise|clf-pgd"])
    assert checking._in_blocks(table, cells["mlp|oracle|one-step denoise|bpda-eot-5it-r1"])
