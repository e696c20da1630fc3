"""Every published measurement is rendered from its committed result file (docs/render.py): a table that differs
from its rendering, a result file without provenance, or a figure that no page shows fails here."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("render", ROOT / "docs" / "render.py")
render = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render)


def test_every_rendered_block_matches_its_result_file():
    assert render.stale() == [], "run `python docs/render.py` after re-running the command that wrote the result"


def test_every_figure_is_shown_and_every_block_names_a_figure():
    shown = {m["name"] for page in render.pages() for m in render.BLOCK.finditer(page.read_text("utf-8"))}
    assert shown <= set(render.FIGURES), shown - set(render.FIGURES)
    assert set(render.FIGURES) <= shown, f"figures no page shows: {set(render.FIGURES) - shown}"


@pytest.mark.parametrize("name", sorted(render.FIGURES))
def test_every_result_file_carries_its_provenance(name):
    path, _ = render.FIGURES[name]
    provenance = json.loads((ROOT / path).read_text("utf-8"))["provenance"]
    assert set(render.PROVENANCE) <= set(provenance)
    assert provenance["command"] and provenance["device"]
    assert provenance["command"] in render.render(name)  # the rendering says how it was measured


def test_an_edited_number_is_caught():
    name = "purify-speed"
    good = f"<!-- render: {name} -->\n{render.render(name)}<!-- end render -->\n"
    assert render.stale_blocks(good) == []
    bad = good.replace("| 0.25 |", "| 0.26 |", 1)
    assert bad != good and render.stale_blocks(bad) == [name]


def test_a_result_file_without_provenance_is_refused(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_text(json.dumps({"images": 1}))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    with pytest.raises(ValueError, match=r"r.json has no provenance \['command', 'code_version', 'models', 'device', "
                       r"'wall_time_s'\]: re-run the command that writes it."):
        render.load("r.json")


def test_an_unknown_figure_is_named():
    with pytest.raises(KeyError, match="unknown figure 'nope'"):
        render.render("nope")
