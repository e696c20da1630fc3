"""Every published measurement is rendered from its committed result file (docs/render.py): a table that differs
from its rendering, a result file without provenance, or a figure that no page shows fails here."""

import hashlib
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
    known = set(render.FIGURES) | set(render.LISTINGS)
    assert shown <= known, shown - known
    assert known <= shown, f"figures no page shows: {known - shown}"


@pytest.mark.parametrize("name", sorted(render.FIGURES))
def test_every_result_file_carries_its_provenance(name):
    path, _ = render.FIGURES[name]
    provenance = json.loads((ROOT / path).read_text("utf-8"))["provenance"]
    assert set(render.PROVENANCE) <= set(provenance)
    assert provenance["command"] and provenance["device"]
    assert render.command({"provenance": provenance}) in render.render(name)  # the rendering says how it was measured


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


def test_a_levers_page_sets_the_paper_row_its_data_set_states_beside_the_measured_ones(monkeypatch):
    """The paper's row of a levers table is its data set's DatasetSpec's: the numbers and the defence's label; a data
    set the paper did not measure has no paper row."""
    from dataclasses import replace

    from art_adp import data

    path = "docs/results/fashion_mnist_levers.json"
    result = render.load(path)
    assert "| paper (NCSNv2, 60,000 training images) | ADP σ 0.25 | **93.19** | **86.62** |" in render.levers_page(
        result, path)  # fmt: skip
    as_cifar10 = render.levers_page({**result, "dataset": "cifar10"}, path)
    assert "| paper (NCSNv2 of 50,000 training images → WRN-28-10) | ADP σ 0.25 | **86.14** | **80.24** |" in as_cifar10
    monkeypatch.setitem(data.DATASETS, "cifar10", replace(data.DATASETS["cifar10"], paper_row=None))
    assert "| paper (" not in render.levers_page({**result, "dataset": "cifar10"}, path)


def _result(tmp_path, **provenance):
    base = {"command": "c", "code_version": "art-adp 0.1.0 (abc1234-dirty)", "models": {}, "device": "CPU",
            "wall_time_s": 1.0}
    (tmp_path / "r.json").write_text(json.dumps({"provenance": {**base, **provenance}}))


def test_a_result_of_uncommitted_code_without_its_diff_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "ROOT", tmp_path)
    _result(tmp_path)
    message = (r"r.json was produced by uncommitted code \(art-adp 0.1.0 \(abc1234-dirty\)\) and does not carry that "
               r"code's diff: commit the code and re-run the command that writes it.")
    with pytest.raises(ValueError, match=message):
        render.load("r.json")
    _result(tmp_path, code_diff="+x = 2\n", code_diff_sha256="0" * 64)  # a diff that is not the one hashed
    with pytest.raises(ValueError, match=message):
        render.load("r.json")
    diff = "+x = 2\n"
    _result(tmp_path, code_diff=diff, code_diff_sha256=hashlib.sha256(diff.encode()).hexdigest())
    assert render.load("r.json")["provenance"]["code_diff"] == diff


def test_the_hashing_method_is_printed_beside_the_hashes():
    p = {"command": "c", "code_version": "v", "device": "CPU", "wall_time_s": 1.0, "models": {"score": "ab" * 32}}
    assert "models (SHA-256, method not recorded) score abababababab." in render.source("r.json", {"provenance": p})
    p["models_hash"] = "SHA-256 of the weights (state dict)"
    assert "models (SHA-256 of the weights (state dict)) score abab" in render.source("r.json", {"provenance": p})


def test_a_run_the_checkout_moved_under_names_both_code_versions():
    p = {"command": "c", "code_version": "art-adp 1 (aaaaaaa)", "device": "CPU", "wall_time_s": 1.0, "models": {}}
    assert "code art-adp 1 (aaaaaaa) · models" in render.source("r.json", {"provenance": p})
    p["code_version_at_end"] = "art-adp 1 (bbbbbbb)"
    assert "code art-adp 1 (aaaaaaa) (the checkout at its end: art-adp 1 (bbbbbbb)) · " in render.source(
        "r.json", {"provenance": p}
    )


def test_no_committed_result_of_uncommitted_code_lacks_its_diff():
    """Rendered or not: a result file whose code version is -dirty carries that code's diff (or is re-measured)."""
    dirty = []
    for path in sorted([*ROOT.glob("docs/**/*.json"), *ROOT.glob("benchmarks/results/*.json")]):
        p = json.loads(path.read_text("utf-8"))
        p = p.get("provenance", {}) if isinstance(p, dict) else {}
        diff = p.get("code_diff")
        if "-dirty" in str(p.get("code_version", "")) and (
            not isinstance(diff, str) or hashlib.sha256(diff.encode()).hexdigest() != p.get("code_diff_sha256")
        ):
            dirty.append(str(path.relative_to(ROOT)))
    assert dirty == []


def test_no_rendered_page_shows_a_path_of_the_development_machine():
    pages = [*render.pages(), *(ROOT / p for p in render.WHOLE_PAGES)]
    assert len(pages) > 10
    found = [f"{p.relative_to(ROOT)}: {s}" for p in pages for s in ("../shared", "/work/") if s in p.read_text("utf-8")]
    assert found == [], found


def _line(command, device="CPU x86_64, 1 thread(s)", path="r.json", **result):
    p = {"command": command, "code_version": "v", "device": device, "wall_time_s": 1.0, "models": {}}
    return render.source(path, {"provenance": p, **result})


def test_a_data_folder_is_printed_as_a_user_types_it_with_its_split_in_words():
    line = _line("art-adp levers --data-root ../shared/data/mnist-subset --run-dir levers --quiet")
    assert ("`art-adp levers --data-root DIR --run-dir levers --quiet` (DIR: MNIST test images 0–5,999 for training "
            "and 6,000–7,999 for measuring, the development split) · CPU") in line
    assert "shared" not in line
    # the result's own description of its data wins; an unknown folder says the split was not recorded
    described = _line("x --data-root=/work/d/", description="MNIST t10k 0-99")
    assert "`x --data-root=DIR` (DIR: MNIST t10k 0-99) ·" in described
    assert "`x --data-root DIR` (DIR: split not recorded) ·" in _line("x --data-root /tmp/elsewhere")
    # a command that already says DIR is named by the data folder the result recorded
    recorded = _line("x --data-root DIR", data={"root": "../shared/data/mnist-subset"})
    assert "(DIR: MNIST test images 0–5,999" in recorded
    assert ": `art-adp demo --quiet` · CPU" in _line("art-adp demo --quiet")  # no data folder: nothing added


def test_a_device_without_its_processor_says_so():
    assert "· CPU x86_64, 1 thread(s) (processor not recorded) ·" in _line("c")
    named = "CPU AMD EPYC 7B13 (AVX2; no AVX-512), 1 thread, fp32"
    assert f"· {named} ·" in _line("c", device=named)
    assert "· NVIDIA H200, torch 2.13.0 ·" in _line("c", device="NVIDIA H200, torch 2.13.0")
    denoiser = _line("c", path="docs/results/denoiser_mnist.json")
    assert "(processor not recorded: an x86-64 with native bf16, as its bf16 speed shows" in denoiser


def test_an_output_file_under_a_machines_absolute_path_renders_by_its_name():
    result = {"provenance": {"command": "python benchmarks/gpu.py /root/out/gpu.json --budget 130.0"}}
    assert render.command(result) == "python benchmarks/gpu.py gpu.json --budget 130.0"
    kept = {"provenance": {"command": "python benchmarks/gpu.py benchmarks/results/gpu.json"}}
    assert render.command(kept) == "python benchmarks/gpu.py benchmarks/results/gpu.json"  # relative: as typed


def test_a_data_folder_named_in_the_provenance_and_renamed_flags_are_printed():
    p = {"command": "art-adp levers --data-root DIR --ensemble-size 2", "code_version": "v", "device": "CPU",
         "wall_time_s": 1.0, "models": {}, "data_root": "mnist-subset", "flags_renamed": {"--runs": "--ensemble-size"}}
    line = render.source("r.json", {"provenance": p})
    assert "(DIR: MNIST test images 0–5,999 for training" in line
    assert "(flags in today's names; it ran with the earlier `--runs`)" in line


def test_publish_names_the_data_folder_and_keeps_no_path_of_the_machine():
    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)
    result = {"cells": [1], "provenance": {"command": "art-adp levers --data-root /x/y/fashion-mnist-subset --run-dir "
                                                      "/x/runs-elsewhere/fm-behind --n 2", "wall_time_s": 3.0}}  # fmt: skip
    out = publish.publish(result)
    assert out["provenance"] == {"command": "art-adp levers --data-root DIR --run-dir runs/fm-behind --n 2",
                                 "wall_time_s": 3.0, "data_root": "fashion-mnist-subset"}  # fmt: skip
    assert out["cells"] == [1] and result["provenance"]["command"].startswith("art-adp levers --data-root /x")
    assert render.data_split(out).startswith("Fashion-MNIST test images 0–2,999 for training")
    assert publish.publish(out) == out  # published twice: the same
    two = {"provenance": {"command": "x --data-root a --data-root b"}}
    with pytest.raises(ValueError, match="reads 2 data folders"):
        publish.publish(two)
    called = {"provenance": {"command": "c --data-root /x/cifar10 --run-dir /x/t", "calls": [
        {"command": "c --data-root /x/cifar10 --run-dir /x/t --variants a", "wall_time_s": 1.0}]}}  # fmt: skip
    assert publish.publish(called)["provenance"]["calls"] == [
        {"command": "c --data-root DIR --run-dir runs/t --variants a", "wall_time_s": 1.0}]  # the earlier calls too


def test_publish_keeps_every_call_into_the_run_folder_and_the_line_names_them():
    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)

    def call(attack, wall, run="runs/a"):
        return {"cells": [attack], "provenance": {"command": f"art-adp levers --data-root /x/mnist-subset "
                f"--run-dir {run} --attacks {attack}", "code_version": "v1", "device": "CPU", "wall_time_s": wall,
                "models": {}}}  # fmt: skip

    first, second, last = call("pgd", 60.0), call("apgd", 120.0), call("later", 30.0)
    out = publish.with_calls(last, [first, second, last])  # the last call's table copied aside too: not an earlier call
    assert out["cells"] == ["later"]
    assert [c["command"].split()[-1] for c in out["provenance"]["calls"]] == ["pgd", "apgd"]
    assert out["provenance"]["calls"][0]["command"].startswith("art-adp levers --data-root DIR")
    assert publish.with_calls(last, [first, publish.with_calls(second, [first])]) == out  # a published one: the same
    assert publish.with_calls(last, []) == publish.publish(last)  # no earlier call: no list
    own = {**last, "provenance": {**last["provenance"], "calls": [first["provenance"], second["provenance"]]}}
    assert publish.with_calls(own, []) == out  # the calls the run folder kept itself (levers' provenance.calls)
    with pytest.raises(ValueError, match="an earlier call wrote 'runs/b', the last 'runs/a'"):
        publish.with_calls(last, [call("pgd", 1.0, run="runs/b")])
    retrained = call("pgd", 1.0)
    retrained["provenance"]["models"] = {"cnn": "b"}
    with pytest.raises(ValueError, match="an earlier call measured other weights"):
        publish.with_calls({**last, "provenance": {**last["provenance"], "models": {"cnn": "a"}}}, [retrained])
    line = render.source("r.json", out)
    assert "wall time 30 s" in line and "after 2 earlier call(s) into the same run folder, 3 min 30 s in all" in line
    assert "`art-adp levers --data-root DIR --run-dir runs/a --attacks apgd` (2 min 0 s, code v1)" in line


def test_publish_puts_a_call_measured_again_in_place_of_the_one_it_repeats():
    """--again: the new folder's cells replace the same cells, the per-image worst case follows their flags, the call
    is replaced in the provenance (naming the code it replaced) and the line says so; another call, other images,
    other weights, other data or another cell are refused."""
    from art_adp.apps.levers_table import render_levers

    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)

    def records(attack, correct):
        return [{"model": "m", "setting": "s", "attack": attack, "index": i, "label": 0, "pred": [0 if ok else 1]}
                for i, ok in enumerate(correct)]  # fmt: skip

    def prov(attack, version, **kw):
        return {"command": f"art-adp levers --data-root DIR --run-dir runs/a --attacks {attack}", "code_version":
                version, "device": "CPU AMD; AVX2", "wall_time_s": 10.0, **kw}  # fmt: skip

    dirty = prov("a", "art-adp 0.2 (1111111-dirty)")
    result = {"classifier": "cnn", **render_levers(records("a", [1, 1, 0, 1]) + records("b", [1, 0, 1, 1])),
              "provenance": {**prov("b", "art-adp 0.2 (2222222)"), "calls": [dirty], "models": {"cnn": "h"},
                             "data_sha256": "d", "data_root": "mnist-subset"}}  # fmt: skip
    assert {c["attack"]: c["accuracy"] for c in result["cells"]}["worst-case"] == 0.5
    again = {**render_levers(records("a", [1, 1, 1, 0])), "provenance": {
        **prov("a", "art-adp 0.2 (3333333)", models={"cnn": "h"}, data_sha256="d", device="CPU Intel; AVX-512"),
        "command": "art-adp levers --data-root /x/mnist-subset --run-dir /y/runs/a --attacks a --seed-scheme levers"}}
    out = publish.with_call_measured_again(result, "provenance.calls[0]", again)
    cells = {c["attack"]: c for c in out["cells"]}
    assert cells["a"]["flags"] == "1110" and cells["b"] == {c["attack"]: c for c in result["cells"]}["b"]
    assert cells["worst-case"]["flags"] == "1010" and cells["worst-case"]["accuracy"] == 0.5  # images 1 (b), 3 (a)
    assert out["provenance"]["calls"] == [{
        "command": "art-adp levers --data-root DIR --run-dir runs/a --attacks a --seed-scheme levers",
        "code_version": "art-adp 0.2 (3333333)", "device": "CPU Intel; AVX-512", "wall_time_s": 10.0,
        "replaces": "art-adp 0.2 (1111111-dirty)"}]  # fmt: skip
    assert {k: v for k, v in out["provenance"].items() if k != "calls"} == {
        k: v for k, v in result["provenance"].items() if k != "calls"}  # the last call as it was
    line = render.source("r.json", out)
    assert ("(10 s, code art-adp 0.2 (3333333), measured again in a new run folder on CPU Intel, in place of a call "
            "at art-adp 0.2 (1111111-dirty))") in line  # fmt: skip
    last = publish.with_call_measured_again(result, "provenance", {**again, "provenance": {
        **again["provenance"], "command": prov("b", "")["command"]}, "cells": render_levers(records("b", [0] * 4))[
        "cells"]})  # fmt: skip
    assert last["provenance"]["replaces"] == "art-adp 0.2 (2222222)" and last["provenance"]["calls"] == [dirty]
    assert {c["attack"]: c["accuracy"] for c in last["cells"]} == {"a": 0.75, "b": 0.0, "worst-case": 0.0}
    for table, match in [
        ({**again["provenance"], "command": prov("b", "")["command"]}, "is not the one at provenance.calls"),
        ({**again["provenance"], "models": {"cnn": "other"}}, "other weights than the result: {'cnn': 'other'}"),
        ({**again["provenance"], "data_sha256": "e"}, "other data \\(SHA-256 e, the result's d\\)"),
    ]:
        with pytest.raises(ValueError, match=match):
            publish.with_call_measured_again(result, "provenance.calls[0]", {**again, "provenance": table})
    fewer = {**again, **render_levers(records("a", [1, 1, 1]))}
    with pytest.raises(ValueError, match="on other images than the result"):
        publish.with_call_measured_again(result, "provenance.calls[0]", fewer)
    with pytest.raises(ValueError, match="which is not a cell of the result"):
        publish.with_call_measured_again(result, "provenance.calls[0]", {**again, **render_levers(records("c", [1]))})


def test_publish_puts_a_corruption_row_measured_again_with_retrained_weights_in_place():
    """--again on a corruption table: the rows the new call measured (its classifier's) replace the same rows, the
    rest and the earlier calls as they were; --retrained lets that model's weights differ, the call keeping the
    earlier hash and the result's models the new one, and the line says so; any other model's weights, a model named
    retrained that was not, other settings or a row the result lacks are refused."""
    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)
    settings = {"config": {"n_examples": 4, "constants": "cifar10-c"}, "n": 4, "names_sha256": "n"}

    def row(mean):
        return {"clean": 1.0, "fog": mean, "mean": mean}

    def call(variant, version, augmix="old", **kw):
        return {"classifier": "resnet20", "command": f"art-adp corruptions --data-root DIR --run-dir runs/table "
                f"--variants '{variant}'", "code_version": version, "device": "CPU AMD; AVX2", "wall_time_s": 5.0,
                "models": {"resnet20": "r", "score (augmix)": augmix}, "data_sha256": "d", "rows": [variant], **kw}

    earlier = call("undefended", "art-adp 0.2 (1111111)")
    result = {"rows": {"resnet20 · undefended": row(0.5), "resnet20 · ADP σ=0 + AugMix": row(0.25),
                       "adv-resnet20 · undefended": row(0.75)}, "settings": settings,
              "provenance": {**call("ADP σ=0 + AugMix", "art-adp 0.2 (2222222)"), "calls": [earlier],
                             "data_root": "cifar10"}}  # fmt: skip
    new = call("ADP σ=0 + AugMix", "art-adp 0.2 (3333333)", augmix="new", device="CPU Intel; AVX-512")
    new["command"] = new["command"].replace("runs/table", "/w/runs/table").replace("DIR", "/x/cifar10")
    table = {"rows": {"undefended": row(0.5), "ADP σ=0 + AugMix": row(0.5)}, "settings": settings,
             "seconds_this_call": 7.0,
             "provenance": {**new, "calls": [call("undefended", "art-adp 0.2 (3333333)", augmix="-")]}}  # fmt: skip
    out = publish.with_call_measured_again({**result, "seconds_this_call": 5.0}, "provenance", table,
                                           ("score (augmix)",))  # fmt: skip
    assert out["rows"] == {**result["rows"], "resnet20 · ADP σ=0 + AugMix": row(0.5)}
    assert out["seconds_this_call"] == 7.0  # the last call's, now the new one
    p = out["provenance"]
    assert p["models"] == {"resnet20": "r", "score (augmix)": "new"} and p["calls"] == [earlier]
    assert p["retrained"] == {"score (augmix)": "old"} and p["replaces"] == "art-adp 0.2 (2222222)"
    assert p["command"] == "art-adp corruptions --data-root DIR --run-dir runs/table --variants 'ADP σ=0 + AugMix'"
    assert (p["code_version"], p["device"], p["data_root"]) == ("art-adp 0.2 (3333333)", "CPU Intel; AVX-512",
                                                               "cifar10")  # fmt: skip
    assert ("code art-adp 0.2 (3333333) (measured again in a new run folder on CPU Intel, with score (augmix) "
            "retrained (its earlier weights old), in place of a call at art-adp 0.2 (2222222))") in render.source(
        "r.json", out)  # fmt: skip
    with pytest.raises(ValueError, match="other weights than the result: {'score \\(augmix\\)': 'new'}"):
        publish.with_call_measured_again(result, "provenance", table)
    with pytest.raises(ValueError, match="retrained \\['resnet20'\\]: the new call measured the result's weights"):
        publish.with_call_measured_again(result, "provenance", table, ("score (augmix)", "resnet20"))
    with pytest.raises(ValueError, match="with other settings than the result"):
        publish.with_call_measured_again(result, "provenance", {**table, "settings": {**settings, "n": 5}},
                                         ("score (augmix)",))  # fmt: skip
    stray = {**table, "provenance": {**new, "rows": ["ADP σ=0.1"], "command": new["command"] + " --x"}}
    with pytest.raises(ValueError, match="measured 'ADP σ=0.1' of 'resnet20', which is not a row of the result"):
        publish.with_call_measured_again(result, "provenance", stray, ("score (augmix)",))


def test_publish_sets_variants_of_the_attack_options_side_by_side(tmp_path):
    """--variants: each folder's records, adaptive rows renamed by their options, rendered together, so the per-image
    worst case runs over every variant; other weights are refused."""
    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)

    def folder(name, options, correct, models=None):
        d = tmp_path / name
        (d / "records").mkdir(parents=True)
        rec = lambda i, ok, attack, **kw: {"model": "oracle", "setting": "s", "attack": attack, "index": i,  # noqa: E731
                                          "correct": ok, "label": 0, "pred": [0 if ok else 1] * 3, **kw}
        rows = [rec(i, ok, "pgd-r1", options=options, repeats=3) for i, ok in enumerate(correct)]
        (d / "records" / "rank-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        table = {"classifier": "cnn", "rows": [{"name": "pgd-r1", "label": "PGD", "adaptive": True}], "cells": [],
                 "provenance": {"command": f"art-adp levers --data-root /x/mnist-subset --run-dir {d}",
                                "code_version": "v", "device": "CPU", "wall_time_s": 2.0,
                                "models": models or {"cnn": "a"}}}  # fmt: skip
        (d / "table.json").write_text(json.dumps(table))
        return d

    a = folder("a", {"check_every": "auto"}, [True, True, False, True])
    b = folder("b", {"check_every": "auto", "eot_target": "ensemble"}, [True, False, True, True])
    out = publish.with_variants([a, b])
    cells = {c["attack"]: c for c in out["cells"]}
    assert cells["pgd-r1 [defaults]"]["accuracy"] == 0.75
    assert cells["pgd-r1 [ensemble]"]["accuracy"] == 0.75
    assert cells["worst-case"]["accuracy"] == 0.5  # images 1 and 2: each broken by one variant only
    assert {r["label"] for r in out["rows"]} == {"PGD [defaults]", "PGD [ensemble]"}
    assert out["provenance"]["variants"] and len(out["provenance"]["calls"]) == 1
    assert "beside 1 call(s) with other attack options, a run folder each" in render.source("r.json", out)
    c = folder("c", {"check_every": "auto"}, [True] * 4, models={"cnn": "b"})
    with pytest.raises(ValueError, match="measured other weights"):
        publish.with_variants([a, c])


def test_one_step_rows_say_whether_their_noisy_input_was_clipped(tmp_path, monkeypatch):
    """A levers table's one-step rows measured before the clip option (no ``clip_noise``: the input was clipped)
    render as ``…, clipped noise``; those measured unclipped (``clip_noise: false``) and the explicitly clipped
    setting keep their names, so the answer table never merges the two forms into one defence."""
    from art_adp.apps.levers_table import render_levers

    records = [{"model": "oracle", "setting": s, "attack": "clean", "index": 0, "correct": True, "label": 0,
                "pred": [0], **({"purifier": {"clip_noise": False}} if s == "one-step denoise" else {})}
               for s in ("one-step denoise", "σ 0.5, one-step", "one-step denoise, clipped noise", "T 10, λ 0.5")]
    cells = render_levers(records)["cells"]
    assert [c.get("clip_noise") for c in cells] == [False, None, None, None]
    old = {**cells[0]}
    old.pop("clip_noise")
    result = {"cells": [old, *cells], "provenance": {k: "x" for k in render.PROVENANCE}}
    (tmp_path / "r.json").write_text(json.dumps(result))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    assert [c["setting"] for c in render.load("r.json")["cells"]] == [
        "one-step denoise, clipped noise", "one-step denoise", "σ 0.5, one-step, clipped noise",
        "one-step denoise, clipped noise", "T 10, λ 0.5"]  # fmt: skip


def _rechecked(tmp_path, monkeypatch):
    """A zoo of a shipped, a third-party and an unshipped entry, and ``write(name, models, ...)`` writing a result
    file under ``tmp_path`` (a lever table with per-image flags unless told)."""
    from art_adp import zoo

    entries = {"mnist/cnn": {"weights_sha256": "a" * 64, "file": "mnist/cnn.safetensors"},
               "cifar10/theirs": {"weights_sha256": "b" * 64, "file": "cifar10/theirs.pt",
                                  "converter": "python convert.py --out {zoo}/cifar10",
                                  "source": {"repository": "someone/models", "path": "t.th", "sha256": "c" * 64}},
               "mnist/lost": {"weights_sha256": "d" * 64, "file": None, "status": "not shipped"}}  # fmt: skip
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "manifest.json").write_text(json.dumps({"schema": zoo.SCHEMA, "entries": entries}))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(render, "ZOO", tmp_path / "zoo")

    def write(name, models, schema="art-adp/levers-table/2", command="art-adp levers --data-root DIR", cells=True):
        cell = {"model": "none", "setting": "cnn", "attack": "clean", "flags": [1, 0]}
        result = {"schema": schema, "classifier": "cnn", **({"cells": [cell]} if cells else {}),
                  "provenance": {"command": command, "code_version": "v", "device": "CPU", "wall_time_s": 1.0,
                                 "models": models}}  # fmt: skip
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
        return f"{name}.json"

    return write


def test_a_table_whose_weights_the_zoo_holds_says_the_command_that_re_checks_it(tmp_path, monkeypatch):
    write = _rechecked(tmp_path, monkeypatch)
    assert render.recheck_line([write("ok", {"cnn": "a" * 64})]) == (
        "<sub>Re-check: `art-adp check ok.json --data-root DIR --n 50`.</sub>")
    theirs = render.recheck_line([write("theirs", {"cnn": "a" * 64, "resnet20": "b" * 64})])
    assert theirs == ("<sub>Re-check: `art-adp check theirs.json --data-root DIR --n 50`, its third-party weights "
                      "converted first: `python convert.py --out zoo/cifar10`.</sub>")  # fmt: skip


def test_a_table_the_zoo_cannot_re_check_yet_says_why_naming_the_entries_not_shipped(tmp_path, monkeypatch):
    write = _rechecked(tmp_path, monkeypatch)
    lost = render.recheck_line([write("lost", {"cnn": "a" * 64, "denoiser": "d" * 64})])
    assert lost == "<sub>Cannot be re-checked yet: the zoo does not ship `mnist/lost`.</sub>"
    assert "its denoiser weights (SHA-256 eeeeeeeeeeee) are in no zoo entry" in render.recheck_line(
        [write("unknown", {"denoiser": "e" * 64})])
    old = render.recheck_line([write("old", {"cnn": "a" * 64}, schema=None)])
    assert old == f"<sub>Cannot be re-checked yet: {render.NO_FLAGS}.</sub>"
    for other in (write("curve", {}, command="python benchmarks/budget_curve.py"), write("est", {}, cells=False)):
        assert render.recheck_line([other]) == f"<sub>Cannot be re-checked: {render.NOT_LEVERS}.</sub>"
    # shipped later: the same file renders its command
    manifest = json.loads((tmp_path / "zoo" / "manifest.json").read_text())
    manifest["entries"]["mnist/lost"]["file"] = "mnist/lost.safetensors"
    (tmp_path / "zoo" / "manifest.json").write_text(json.dumps(manifest))
    assert render.recheck_line(["lost.json"]).startswith("<sub>Re-check: `art-adp check lost.json --data-root DIR")
    # a table drawn from several files names those that can be re-checked and why not the others
    both = render.recheck_line([write("a", {"cnn": "a" * 64}), write("b", {"cnn": "a" * 64, "x": "f" * 64}),
                                write("c", {"cnn": "a" * 64}, schema=None)])  # fmt: skip
    assert both == ("<sub>Re-check: `art-adp check ./FILE.json --data-root DIR --n 50` for FILE a. Not yet the others: "
                    "its x weights (SHA-256 ffffffffffff) are in no zoo entry: b; no per-image verdicts: c.</sub>")


def test_every_table_of_the_results_pages_says_how_to_re_check_it():
    names = render.rechecked()
    assert {"cifar10-baseline", "mnist-answer", "corruptions-cifar10", "denoiser-mnist"} <= names
    for name in names:
        last = render.render(name).rstrip("\n").splitlines()[-1]
        assert last.startswith(("<sub>Re-check: `art-adp check ", "<sub>Cannot be re-checked")), (name, last)
    assert "cifar10_baseline.json --data-root DIR --n 50`" in render.render("cifar10-baseline")


def test_an_answer_table_sets_only_worst_of_10_judgements_beside_adversarial_training(tmp_path, monkeypatch):
    """A purified defence judged at the worst of fewer than 10 judgements is named under the answer table with its
    judgement, not ranked in it; one judged at the worst of 10 and the bare classifier are in the table."""

    def c(setting, attack, accuracy, repeats=None, model="oracle", classifier="cnn"):
        return {"model": model, "setting": setting, "attack": attack, "accuracy": accuracy, "n": 200,
                "ci95": [accuracy - 0.05, accuracy + 0.05], "classifier": classifier,
                **({"repeats": repeats} if repeats else {})}  # fmt: skip

    provenance = {"command": "art-adp levers", "code_version": "v", "device": "CPU", "wall_time_s": 1.0}
    base = {"cells": [c("adv-cnn", "clean", 0.84, model="none"), c("adv-cnn", "autoattack", 0.74, model="none")],
            "rows": [{"name": "autoattack", "adaptive": True, "label": "AutoAttack"}], "provenance": {**provenance, "models": {"adv-cnn": "a"}}}
    purified = {"cells": [c("T 10, λ 0.5", "clean", 0.80), c("T 10, λ 0.5", "full-pgd-eot", 0.70, repeats=2),
                          c("σ 0.1, T 10, λ 0.5", "clean", 0.78), c("σ 0.1, T 10, λ 0.5", "full-pgd-eot", 0.55, 10)],
                "rows": [{"name": "full-pgd-eot", "adaptive": True, "label": "PGD+EOT"}], "provenance": {**provenance, "models": {}}}
    for name, result in (("base", base), ("purified", purified)):
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(render, "ANSWERS", {"x": (("base.json", "purified.json"), "adv-cnn")})
    out = render.answer("x")
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[3] for row in table[1:]] == ["**74.0 [69–79] (200)**", "**55.0 [50–60] (200)**"]
    assert "worst of R = 10" in table[2] and "score) · T 10, λ 0.5 |" not in out
    assert ("Judged only at the worst of fewer than R = 10 judgements, so not set beside the rows above" in out
            and "oracle (exact score) · T 10, λ 0.5 → cnn 80.0 / 70.0 (200; worst of R = 2, `purified`)." in out)


def test_publish_ships_a_classifier_to_the_zoo_with_the_notice_of_the_weights_it_was_fine_tuned_from(tmp_path,
                                                                                                    monkeypatch):
    """``publish.py --zoo``: the entry names the weights' hashes, the training call and the result files recording
    them; a fine-tune of third-party weights carries their licence notice, one trained here art-adp's licence."""
    import torch

    from art_adp.serialization import file_sha256, weights_sha256, write_checkpoint

    spec_ = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
    publish = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(publish)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "zoo").mkdir()
    notice = "BSD-2-Clause, Copyright (c) 2018 Someone (someone/models)"
    third = {"weights_sha256": "c" * 64, "file": "cifar10/theirs.pt", "licence": notice,
             "source": {"repository": "someone/models", "path": "t.th", "sha256": "d" * 64}}  # fmt: skip
    (tmp_path / "zoo" / "manifest.json").write_text(json.dumps({"entries": {"cifar10/theirs": third}}))
    weights = tmp_path / "run" / "tuned.safetensors"
    write_checkpoint(weights, {"w": torch.arange(4.0)}, {"format": "art_adp/1"})
    digest = weights_sha256(weights)
    trained = {"command": "art-adp train-levers --run-dir runs/x", "code_version": "art-adp (abc1234)",
               "device": "CPU", "models": {"tuned": digest}}  # fmt: skip
    for init in ("theirs", None):
        result = {"provenance": {"models": {"tuned": digest}, "command": "art-adp levers", "code_version": "v"},
                  "classifiers": {"tuned": {"arch": "resnet20", "init": init, "trained_by": trained,
                                            "purifier": {"describe": "ADP", "score_sha256": "e" * 64}}}}  # fmt: skip
        path = tmp_path / "docs" / "results" / "r.json"
        path.write_text(json.dumps(result))
        entry = publish.to_zoo("cifar10/tuned", weights, path, zoo=tmp_path / "zoo")
        assert entry["licence"] == (f"{notice} (the weights it was fine-tuned from); the fine-tune MIT (art-adp's)"
                                    if init else "MIT (art-adp's)")  # fmt: skip
        assert (entry["weights_sha256"], entry["sha256"]) == (digest, file_sha256(tmp_path / "zoo" / entry["file"]))
        assert entry["results"] == ["r.json"] and entry["training"]["command"] == trained["command"]
        assert (entry["training"]["behind"], entry["training"]["behind_score_sha256"]) == ("ADP", "e" * 64)
    result["classifiers"]["tuned"]["trained_by"] = {**trained, "code_version": "art-adp (abc1234-dirty)"}
    path.write_text(json.dumps(result))
    with pytest.raises(ValueError, match="its training call started on uncommitted code"):
        publish.to_zoo("cifar10/tuned", weights, path, zoo=tmp_path / "zoo")


def test_the_zoo_table_lists_every_entry_once_with_the_bytes_the_repository_ships():
    text = render.zoo_table("zoo/manifest.json")
    entries = json.loads((ROOT / "zoo" / "manifest.json").read_text())["entries"]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(entries)
    shipped = [ROOT / "zoo" / e["file"] for e in entries.values() if e.get("file") and not e.get("source")]
    total = sum(p.stat().st_size for p in shipped)
    assert f"ships {len(shipped)} files, {total / 1e6:.1f} MB in all" in text
    unshipped = [n for n, e in entries.items() if not (e.get("file") or e.get("bundled"))]
    assert all(f"| `{n}` | not shipped |" in text or f"| `{n}` | third-party |" in text for n in unshipped)


def test_the_zoo_table_says_where_a_shipped_model_was_trained_on_uncommitted_code(tmp_path, monkeypatch):
    (tmp_path / "zoo").mkdir()
    entries = {f"mnist/{n}": {"file": f"{n}.safetensors", "status": "shipped", "training": {
        "code_version": f"art-adp 0.2 ({v})"}} for n, v in (("clean", "1234567"), ("dirty", "89abcde-dirty"))}
    for e in entries.values():
        (tmp_path / "zoo" / e["file"]).write_bytes(b"x" * 1000)
    (tmp_path / "zoo" / "manifest.json").write_text(json.dumps({"entries": entries}))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(render, "ZOO", tmp_path / "zoo")
    rows = render.zoo_table("zoo/manifest.json").splitlines()
    assert "| `mnist/clean` | shipped | 0.0 | - | trained from a clean commit |  |" in rows
    assert "| `mnist/dirty` | shipped | 0.0 | - | trained on uncommitted code (its record: 89abcde-dirty) |  |" in rows


@pytest.mark.parametrize("processor, short", [
    ("CPU AMD EPYC (family 25, model 1); AVX2; no AVX-512, AVX-512-BF16, AMX; 1 thread(s), torch 2.13.0+cpu",
     "AMD EPYC 25/1, AVX2"),
    ("CPU AMD EPYC (family 25, model 17); AVX2, AVX-512, AVX-512-BF16; no AMX; 1 thread(s), torch 2.13.0+cpu",
     "AMD EPYC 25/17, AVX-512"),
    ("CPU Intel(R) Xeon(R) Processor (family 6, model 167); AVX2, AVX-512, AVX-512-BF16, AMX; 1 thread(s)",
     "Intel(R) Xeon(R) Processor 6/167, AVX-512, AMX"),
    (None, "-"),
])  # fmt: skip
def test_the_zoo_table_names_the_kernels_of_a_first_training(processor, short):
    assert render._kernels(processor) == short
