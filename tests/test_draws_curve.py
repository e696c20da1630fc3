"""benchmarks/draws_curve.py: one row at several EOT draw counts, collected image by image."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("draws_curve", ROOT / "benchmarks" / "draws_curve.py")
draws_curve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(draws_curve)


def folder(tmp_path: Path, eot: int, flags: str, attack: str = "apgd-eot-100it-r1") -> Path:
    """A run folder whose table holds one cell of ``flags`` (1: robust) on images 10, 11, ..."""
    d = tmp_path / f"eot{eot}"
    d.mkdir()
    cell = {"model": "oracle", "setting": "one-step denoise", "attack": attack, "classifier": "cnn",
            "eot_samples": eot, "accuracy": flags.count("1") / len(flags), "n": len(flags), "ci95": [0.0, 1.0],
            "repeats": 10, "ensemble_size": 10, "images": [[10, 10 + len(flags)]], "flags": flags}  # fmt: skip
    provenance = {"command": f"art-adp levers --data-root /data/fashion-mnist-subset --eot-samples {eot}",
                  "code_version": "art-adp (abc1234)", "device": "CPU", "wall_time_s": 1.0, "models": {}}  # fmt: skip
    table = {"cells": [cell, {**cell, "attack": "clean", "flags": None}], "dataset": "fashion-mnist", "eps": 0.03,
             "provenance": provenance}  # fmt: skip
    (d / "table.json").write_text(json.dumps(table))
    return d


def test_each_point_names_the_images_it_breaks_and_leaves_against_the_most_draws(
    tmp_path,
):
    out = tmp_path / "curve.json"
    folders = [
        folder(tmp_path, 8, "1010"),
        folder(tmp_path, 2, "1110"),
        folder(tmp_path, 4, "0011"),
    ]
    import sys

    argv, sys.argv = sys.argv, ["draws_curve.py", *map(str, folders), "--out", str(out)]
    try:
        assert draws_curve.main() == 0
    finally:
        sys.argv = argv
    r = json.loads(out.read_text())
    assert [p["eot_samples"] for p in r["points"]] == [2, 4, 8]
    two, four, eight = r["points"]
    assert (two["broken_only_here"], two["left_only_here"]) == (
        [],
        [11],
    )  # EOT 8 breaks 11 and 13; EOT 2 only 13
    assert (four["broken_only_here"], four["left_only_here"]) == (
        [10],
        [13],
    )  # it breaks 10 and 11
    assert (eight["broken_only_here"], eight["left_only_here"]) == ([], [])
    assert (
        "--data-root DIR" in two["provenance"]["command"] and two["provenance"]["data_root"] == "fashion-mnist-subset"
    )
    assert r["provenance"]["variants"] and len(r["provenance"]["calls"]) == 2


def test_folders_of_other_rows_are_refused(tmp_path):
    import sys

    folders = [
        folder(tmp_path, 8, "10"),
        folder(tmp_path, 2, "11", attack="full-pgd-eot-100it-r1"),
    ]
    argv, sys.argv = sys.argv, [
        "draws_curve.py",
        *map(str, folders),
        "--out",
        str(tmp_path / "c.json"),
    ]
    try:
        with pytest.raises(SystemExit, match=r"differ in \['attack'\]"):
            draws_curve.main()
    finally:
        sys.argv = argv


def test_a_published_cell_is_a_point_with_the_one_call_that_ran_its_attack(tmp_path):
    cell = {"model": "oracle", "setting": "one-step denoise", "attack": "apgd-eot-100it-r1", "classifier": "cnn",
            "eot_samples": 8, "accuracy": 0.5, "n": 2, "ci95": [0.0, 1.0], "repeats": 10, "ensemble_size": 10,
            "images": [[0, 2]], "flags": "10"}  # fmt: skip
    calls = [{"command": "art-adp levers --attacks clean", "code_version": "a"},
             {"command": "art-adp levers --attacks apgd-eot --eot-samples 8", "code_version": "b"}]  # fmt: skip
    result = {"cells": [cell], "rows": [{"name": "apgd-eot-100it-r1", "attack": "apgd-eot"}], "dataset": "d",
              "eps": 0.1, "provenance": {"command": "art-adp levers --attacks full-pgd-eot", "code_version": "c",
                                         "models": {"cnn": "abc"}, "calls": calls}}  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    p = draws_curve.published_point(path, "apgd-eot-100it-r1")
    assert p["provenance"]["code_version"] == "b" and p["provenance"]["models"] == {"cnn": "abc"}
    assert draws_curve.broken(p) == {1} and p["published"] == "r.json"
    calls.append(dict(calls[1]))  # two calls ran it: which one measured the cell is not known
    path.write_text(json.dumps(result))
    with pytest.raises(SystemExit, match="2 calls running apgd-eot"):
        draws_curve.published_point(path, "apgd-eot-100it-r1")
