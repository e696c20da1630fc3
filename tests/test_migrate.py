"""``art-adp migrate``: the golden tests' three old record layouts (evaluate's, levers', reproduce's, as
``tests/golden/legacy/`` keeps them from before the one layout) become the one layout the engine writes today
(``tests/golden/<engine>/records.jsonl``): every field they held unchanged, the derived ones checked and dropped, the
old file kept beside; nothing is invented and nothing converts twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from art_adp.apps.cli import main
from art_adp.runs.migrate import migrate, migrated
from art_adp.runs.records import read_jsonl

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("engine", ["evaluate", "levers", "reproduce"])
def test_the_old_layouts_become_the_one_the_engine_writes(engine, tmp_path):
    old = GOLDEN / "legacy" / f"{engine}.records.jsonl"
    records = tmp_path / ("records/rank-0.jsonl" if engine == "evaluate" else "records.jsonl")
    records.parent.mkdir(exist_ok=True)
    shutil.copy(old, records)
    if engine == "evaluate":  # its settings by digest, as the records name them
        shutil.copy(GOLDEN / "legacy" / "evaluate.settings.json", tmp_path / "settings.json")
    done = migrate(tmp_path)
    assert done[str(records.relative_to(tmp_path))] == len(read_jsonl(old))
    now = [json.loads(line) for line in (GOLDEN / engine / "records.jsonl").read_text().splitlines()]
    mine = read_jsonl(tmp_path / "records" / "rank-0.jsonl")  # in the one folder layout
    assert len(mine) == len(now)
    for r in mine:  # each converted record is a record the engine writes today, less the fields it never held
        assert not {"correct", "undefended_correct", "settings"} & set(r)
        assert any(all(g.get(k) == v for k, v in r.items()) for g in now), r
    if engine == "evaluate":  # keyed by cell, exactly the settings file the one guard writes today
        assert done["settings.json"] == 20
        converted = json.loads((tmp_path / "settings.json").read_text())
        for cell, held in converted.items():  # Clf-PGD's former loop took a check interval; ART's PGD takes none
            if held["attack"] == "clf-pgd":
                assert held["budget"].pop("check_every") == "auto", cell
        assert converted == json.loads((GOLDEN / "evaluate" / "settings.json").read_text())
        assert (tmp_path / "settings.json.v0").read_bytes() == (GOLDEN / "legacy" / "evaluate.settings.json").read_bytes()
    assert records.with_name(records.name + ".v0").read_bytes() == old.read_bytes()  # the old file kept beside
    if engine != "evaluate":  # moved into the one folder layout
        assert done["records.jsonl -> records/rank-0.jsonl"] == 1 and not records.exists()
    assert migrate(tmp_path) == {}  # once


def test_a_record_that_contradicts_its_predictions_or_a_digest_without_settings_is_refused(tmp_path):
    assert migrated({"label": 3, "pred": [3, 3], "correct": True}) == {"label": 3, "pred": [3, 3]}
    with pytest.raises(ValueError, match=r"^line 7: its correct True contradicts its predictions"):
        migrated({"label": 3, "pred": [3, 2], "correct": True}, 7)
    with pytest.raises(ValueError, match="its undefended_correct False contradicts"):
        migrated({"label": 3, "pred": [3], "undefended_pred": 3, "undefended_correct": False})
    with pytest.raises(ValueError, match=r"holds no predictions \(\['correct', 'index'\]\).*measure it again"):
        migrated({"index": 0, "correct": True})
    lines = ['{"index": 0, "label": 1, "pred": [1], "correct": true}', '{"index": 1, "correct": false}']
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"records.jsonl: line 2 holds no predictions"):
        migrate(tmp_path)
    assert not (tmp_path / "records.jsonl.v0").exists()  # nothing written
    (tmp_path / "records.jsonl").write_text('{"index": 0, "setting": "main", "attack": "clean", "settings": "ab"}\n')
    with pytest.raises(ValueError, match=r"holds no settings for the digests \['ab'\] its records name"):
        migrate(tmp_path)
    curve = {"step": 100, "settings": {"lr": 0.001}}  # a training curve's settings, by value: left alone
    assert migrated(curve) == curve
    with pytest.raises(FileNotFoundError, match="holds no records"):
        migrate(tmp_path / "nowhere")


def test_the_command_converts_once_and_says_so(tmp_path, capsys):
    shutil.copy(GOLDEN / "legacy" / "levers.records.jsonl", tmp_path / "records.jsonl")
    assert main(["migrate", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        f"{tmp_path}/records.jsonl: 72 records converted (the old file kept beside as records.jsonl.v0)\n"
        f"{tmp_path}: moved records.jsonl -> records/rank-0.jsonl (the one folder layout)\n")  # fmt: skip
    assert main(["migrate", str(tmp_path)]) == 0
    assert "in the one layout already; nothing converted" in capsys.readouterr().out
    assert main(["migrate", str(tmp_path / "nowhere")]) == 2


@pytest.mark.parametrize("settings", ["cells.json", "recipe.json", "certify_settings.json"])
def test_a_folder_of_an_earlier_layout_is_refused_until_migrate_moves_it_into_the_one(settings, tmp_path):
    """Every command writes ``records/rank-<r>.jsonl`` and ``settings.json``: a folder of an earlier layout (a lever
    table's ``records.jsonl`` and ``cells.json``, reproduce's ``recipe.json``, the certificates' settings) is refused
    by the writers, naming the command that moves it; the readers take both; migrate moves it once, content unchanged,
    and refuses a folder holding both layouts."""
    from art_adp.runs.records import held_settings, read_records, records_path, settings_path

    records = [{"attack": "clean", "index": i, "label": 1, "pred": [1]} for i in range(3)]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / settings).write_text('{"a / clean": {"eps": 0.1}}')
    for writer in (records_path, settings_path):
        with pytest.raises(ValueError, match=rf"holds a run written in an earlier folder layout \(records.jsonl, "
                                             rf"{settings}\): .*`art-adp migrate {tmp_path}`"):  # fmt: skip
            writer(tmp_path)
    assert read_records(tmp_path) == records and held_settings(tmp_path) == tmp_path / settings
    assert migrate(tmp_path) == {"records.jsonl -> records/rank-0.jsonl": 1, f"{settings} -> settings.json": 1}
    assert records_path(tmp_path) == tmp_path / "records" / "rank-0.jsonl" and read_records(tmp_path) == records
    assert json.loads(settings_path(tmp_path).read_text()) == {"a / clean": {"eps": 0.1}}
    assert migrate(tmp_path) == {}
    (tmp_path / "records.jsonl").write_text(json.dumps(records[0]) + "\n")  # a second run in the old layout
    with pytest.raises(ValueError, match=r"holds files of both layouts \(records.jsonl and records/rank-0.jsonl\)"):
        migrate(tmp_path)
