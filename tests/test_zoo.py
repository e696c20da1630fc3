"""The model zoo (art_adp.zoo): weights by name, checked against the manifest; the repository's manifest against the
result files the data-set pages' answers quote."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from art_adp import zoo
from art_adp.apps.levers_classifiers import from_zoo
from art_adp.apps.loading import load_classifier_arg
from art_adp.models import MLP, load_classifier, save_classifier
from art_adp.serialization import file_sha256, weights_sha256

REPO = Path(__file__).resolve().parents[1]


def _zoo(tmp_path, **more):
    """A zoo of one shipped MLP (``mnist/mlp``), one entry not shipped and one third-party entry not converted."""
    folder = tmp_path / "zoo"
    (folder / "mnist").mkdir(parents=True)
    torch.manual_seed(0)
    save_classifier(MLP(), folder / "mnist" / "mlp.safetensors")
    path = folder / "mnist" / "mlp.safetensors"
    entries = {
        "mnist/mlp": {"kind": "classifier", "dataset": "mnist", "file": "mnist/mlp.safetensors",
                      "sha256": file_sha256(path), "weights_sha256": weights_sha256(path)},
        "mnist/lost": {"kind": "classifier", "dataset": "mnist", "file": None, "weights_sha256": "ab" * 32,
                       "status": "not shipped: its run folder is gone"},
        "cifar10/theirs": {"kind": "classifier", "dataset": "cifar10", "file": "cifar10/theirs.safetensors",
                           "weights_sha256": "cd" * 32, "converter": "python convert.py --out {zoo}/cifar10",
                           "source": {"repository": "someone/models", "path": "theirs.th", "sha256": "ef" * 32}},
        **more,
    }  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps({"schema": zoo.SCHEMA, "entries": entries}))
    return folder


def test_a_zoo_name_loads_its_checked_weights_wherever_a_classifier_is_taken(tmp_path, monkeypatch):
    folder = _zoo(tmp_path)
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    expected = load_classifier(folder / "mnist" / "mlp.safetensors")
    for model in (load_classifier("zoo:mnist/mlp"), load_classifier_arg("zoo:mnist/mlp")[0]):
        assert weights_sha256(model) == weights_sha256(expected)
    assert load_classifier_arg("zoo:mnist/mlp")[1].startswith("zoo:mnist/mlp (MLP, sha256 ")  # by its name
    with pytest.raises(FileNotFoundError, match="zoo:mnist/mlp is a classifier model, not a score model"):
        from art_adp import load_score_model

        load_score_model("zoo:mnist/mlp")


def test_a_half_precision_entry_is_half_the_bytes_read_back_as_float32_its_hash_the_loaded_modules(tmp_path,
                                                                                                  monkeypatch):  # fmt: skip
    """A zoo file kept at half precision (``half_checkpoint``): half the bytes, float32 weights equal to the trained
    ones rounded to fp16 (relative change at most 2^-11, fp16's unit roundoff), and its weights' hash the hash of the
    module loaded from it, so the zoo's check and the result files' provenance agree; a weight outside fp16's range
    is refused."""
    from art_adp.serialization import HALF, half_checkpoint, read_checkpoint

    torch.manual_seed(1)
    trained = MLP()
    save_classifier(trained, tmp_path / "fp32.safetensors")
    folder = tmp_path / "zoo"
    worst = half_checkpoint(tmp_path / "fp32.safetensors", folder / "mnist" / "half.safetensors")
    path = folder / "mnist" / "half.safetensors"
    assert path.stat().st_size < 0.51 * (tmp_path / "fp32.safetensors").stat().st_size
    assert read_checkpoint(path)[1]["stored"] == HALF and 0 < worst <= 2**-11
    entry = {"kind": "classifier", "dataset": "mnist", "file": "mnist/half.safetensors", "sha256": file_sha256(path),
             "weights_sha256": weights_sha256(path)}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps({"schema": zoo.SCHEMA, "entries": {"mnist/half": entry}}))
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    loaded = load_classifier("zoo:mnist/half")  # checked against the entry's hashes
    assert weights_sha256(loaded) == entry["weights_sha256"] != weights_sha256(trained)
    for name, value in loaded.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, trained.state_dict()[name].half().float()), name
    with torch.no_grad():
        next(trained.parameters()).view(-1)[0] = 1e5  # beyond fp16's 65,504
    save_classifier(trained, tmp_path / "far.safetensors")
    with pytest.raises(ValueError, match=r"exceed half precision's range \(65,504\); keep it at fp32"):
        half_checkpoint(tmp_path / "far.safetensors", tmp_path / "far-half.safetensors")


def test_measuring_a_classifier_not_trained_names_the_zoo_entry_that_ships_it(tmp_path, monkeypatch):
    """levers never trains: the refusal names train-levers' line, and --zoo where the zoo ships the classifier."""
    from art_adp.apps.levers_classifiers import refuse_untrained
    from art_adp.apps.levers_presets import preset_for

    monkeypatch.setenv("ART_ADP_ZOO", str(_zoo(tmp_path)))  # ships mnist/mlp, not mnist/adv-mlp
    with pytest.raises(ValueError, match=r"The zoo ships \['mnist/mlp'\]: --zoo measures its weights instead\.$"):
        refuse_untrained(["mlp", "adv-mlp"], preset_for("mnist"), tmp_path / "run", dataset="mnist")
    with pytest.raises(ValueError) as refused:
        refuse_untrained(["adv-mlp"], preset_for("mnist"), tmp_path / "run", dataset="mnist")
    assert "zoo" not in str(refused.value) and "art-adp train-levers --dataset mnist" in str(refused.value)
    monkeypatch.setenv("ART_ADP_ZOO", str(tmp_path / "nowhere"))  # no zoo: the training line alone
    with pytest.raises(ValueError) as refused:
        refuse_untrained(["mlp"], preset_for("mnist"), tmp_path / "run", dataset="mnist")
    assert "zoo" not in str(refused.value)


def test_a_file_whose_hash_differs_from_its_entry_is_refused_naming_both(tmp_path, monkeypatch):
    folder = _zoo(tmp_path)
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    path = folder / "mnist" / "mlp.safetensors"
    listed, listed_weights = file_sha256(path), weights_sha256(path)
    torch.manual_seed(1)
    save_classifier(MLP(), path)  # other weights under the entry's name
    with pytest.raises(zoo.ZooError, match=f"its SHA-256 is {file_sha256(path)}, the manifest's {listed}"):
        load_classifier("zoo:mnist/mlp")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["entries"]["mnist/mlp"]["sha256"]  # no file hash recorded: the weights' hash still decides
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(zoo.ZooError, match=f"not the zoo's weights \\(state dict\\): its SHA-256 is "
                                           f"{weights_sha256(path)}, the manifest's {listed_weights}"):
        zoo.zoo_file("mnist/mlp")


def test_names_the_zoo_cannot_give_say_why_and_what_to_do(tmp_path, monkeypatch):
    folder = _zoo(tmp_path)
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    with pytest.raises(zoo.ZooError, match="its weights are not in the zoo: not shipped: its run folder is gone"):
        zoo.zoo_file("mnist/lost")
    with pytest.raises(zoo.ZooError, match=r"take theirs.th of someone/models \(SHA-256 efef.*python convert.py "
                                           f"--out {folder}/cifar10"):
        zoo.zoo_file("cifar10/theirs")
    with pytest.raises(zoo.ZooError, match=r"No zoo entry 'mnist/nope'; the zoo has \['cifar10/theirs'"):
        load_classifier("zoo:mnist/nope")
    monkeypatch.setenv("ART_ADP_ZOO", str(tmp_path / "elsewhere"))
    with pytest.raises(zoo.ZooError, match="No model zoo at .*elsewhere.*set ART_ADP_ZOO=CLONE/zoo"):
        zoo.zoo_file("mnist/mlp")


def test_levers_takes_the_zoos_weights_into_its_folder_and_refuses_other_weights_there(tmp_path, monkeypatch):
    folder = _zoo(tmp_path)
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    run = tmp_path / "run"
    run.mkdir()
    placed = from_zoo("mnist/mlp", run)
    assert placed == run / "mlp.safetensors" and file_sha256(placed) == file_sha256(folder / "mnist/mlp.safetensors")
    assert from_zoo("mnist/mlp", run, as_name="adv-mlp") == run / "adv-mlp.safetensors"
    torch.manual_seed(2)
    save_classifier(MLP(), run / "mlp.safetensors")  # the folder measured another model under the name
    with pytest.raises(ValueError, match="holds other weights .* than zoo:mnist/mlp"):
        from_zoo("mnist/mlp", run)


def test_a_levers_run_with_zoo_measures_the_zoos_classifier_without_training(tmp_path, monkeypatch, one_thread):
    import numpy as np

    from art_adp.apps.levers import run_levers
    from art_adp.data import Dataset

    folder = _zoo(tmp_path)
    monkeypatch.setenv("ART_ADP_ZOO", str(folder))
    rng = np.random.default_rng(0)
    x = rng.random((12, 1, 28, 28)).astype(np.float32)
    data = Dataset("tiny", x[:8], np.arange(8) % 10, x[8:], np.arange(4) % 10, tuple(map(str, range(10))))
    monkeypatch.setattr("art_adp.apps.levers_classifiers._architecture", lambda *a: pytest.fail("trained"))
    table = run_levers(data, tmp_path / "run", models=("oracle",), settings=["one-step denoise"], attacks=("clean",),
                       classifiers=("mlp",), purified=(), n_examples=4, progress=False, zoo=True)  # fmt: skip
    assert table["provenance"]["models"]["mlp"] == weights_sha256(folder / "mnist" / "mlp.safetensors")


# -- the repository's zoo -------------------------------------------------------------------------------------------


def _quoted_results() -> list[str]:
    """The result files the data-set pages' answers (and so the README) quote: docs/render.py's ANSWERS."""
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from render import ANSWERS
    finally:
        sys.path.remove(str(REPO / "docs"))
    return sorted({Path(f).name for files, _ in ANSWERS.values() for f in files})


def test_the_manifest_covers_every_model_hash_of_the_quoted_results_and_each_entry_names_its_files():
    entries = zoo.manifest(REPO / "zoo")["entries"]
    by_hash = {e["weights_sha256"]: name for name, e in entries.items()}
    missing = []
    for name in _quoted_results():
        for model, digest in json.loads((REPO / "docs/results" / name).read_text())["provenance"]["models"].items():
            if digest not in by_hash:
                missing.append(f"{name}: {model} {digest}")
            else:
                assert name in entries[by_hash[digest]]["results"], (name, by_hash[digest])
    assert missing == []
    for name, e in entries.items():  # each entry's result files record its hash
        for result in e["results"]:
            models = json.loads((REPO / "docs/results" / result).read_text())["provenance"]["models"]
            assert e["weights_sha256"] in models.values(), (name, result)
        assert e["kind"] in ("classifier", "score") and name.startswith(e["dataset"] + "/")
        assert e.get("file") or e.get("bundled") or e.get("status", "").startswith("not shipped"), name


def test_every_file_the_repository_ships_in_the_zoo_matches_its_entry():
    entries = zoo.manifest(REPO / "zoo")["entries"]
    shipped = [n for n, e in entries.items() if e.get("bundled") or e.get("file") and not e.get("source")]
    for name in shipped:
        assert zoo.zoo_file(name, REPO / "zoo").is_file()  # checked against both hashes
    on_disk = {p.relative_to(REPO / "zoo").as_posix() for p in (REPO / "zoo").rglob("*") if p.is_file()}
    third_party = {e["file"] for e in entries.values() if e.get("source")}
    assert on_disk - third_party - {"manifest.json"} == {entries[n]["file"] for n in shipped if not
                                                         entries[n].get("bundled")}  # fmt: skip


def test_a_wheel_install_without_the_zoo_says_where_to_point(monkeypatch, tmp_path):
    monkeypatch.delenv("ART_ADP_ZOO", raising=False)
    monkeypatch.setattr(zoo, "__file__", str(tmp_path / "site-packages" / "art_adp" / "zoo.py"))
    with pytest.raises(zoo.ZooError, match="not of the wheel: clone the repository and set ART_ADP_ZOO"):
        zoo.root()
    copy = tmp_path / "clone-zoo"
    shutil.copytree(REPO / "zoo", copy, ignore=shutil.ignore_patterns("*.safetensors", "*.pt"))
    monkeypatch.setenv("ART_ADP_ZOO", str(copy))
    assert zoo.root() == copy
