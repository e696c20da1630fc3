"""Copy a result a command wrote under runs/ into docs/results/, with the data folder it read named, not its path.

    python docs/publish.py runs/fm-behind/table.json docs/results/fashion_mnist_adv_behind_purifier.json
    python docs/publish.py EARLIER.json [EARLIER.json ...] runs/fm-den-full/table.json docs/results/NAME.json
    python docs/publish.py --variants runs/cmp-a runs/cmp-b ... docs/results/NAME.json
    python docs/publish.py --flags docs/results/NAME.json [...]
    python docs/publish.py --zoo mnist/cnn-oracle runs/mnist-behind/cnn-oracle.safetensors docs/results/NAME.json
    python docs/publish.py --again docs/results/NAME.json "provenance.calls[0]" runs/c10-p-fp32/table.json
    python docs/publish.py --again docs/results/NAME.json provenance runs/table/corruptions.json --retrained MODEL

A committed result holds no path of the machine that measured it (tests/test_docs_drift.py): the command's
``--data-root PATH`` becomes ``--data-root DIR`` and the folder's name goes to ``provenance.data_root``, from which
``docs/render.py`` names the split (``DATA_SPLITS``); an absolute ``--run-dir /…/NAME`` becomes ``runs/NAME``.
Everything else is copied as the command wrote it.

A run folder measured by several calls (``art-adp levers`` resumes its records and writes one table of them all) has
its last call's provenance in ``table.json``; each earlier call's table, copied aside when that call ended (or its
published file), goes before it, and its command, code version, device and wall time are kept, in order, in
``provenance.calls``, so the published result names every call that measured it, not only the last.

``--flags`` adds to a published lever table the per-image flags of each cell (``images``, ``flags``: the table
schema ``art-adp/levers-table/2``) from the records of the run folder its command names, where that folder is still at
hand: a cell gets them only where the records give its published accuracy and images exactly; nothing else changes
(numbers and provenance are copied verbatim), and the schema is set once every cell has its flags.

``--again`` puts one call of a published lever table measured again (its recorded command, options added at its end
only, in a new run folder: the earlier calls' folder is gone) in place of the call it repeats: the new folder's cells
in place of the same cells on the same images, with the same data and weights, the per-image worst case over attacks
rendered again from the flags, and the call's command, code version, device and wall time in its place, ``replaces``
naming the code version of the call it replaced (a call started on uncommitted code, say). A corruption table takes the
rows the new call measured (the new folder may hold other calls, such as a check of a row against the published
one). ``--retrained MODEL`` lets the new call measure other weights of that model (retrained from a clean commit,
where its earlier weights were gone or trained on uncommitted code): the call's ``retrained`` keeps the earlier hash.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

_DATA_ROOT = re.compile(r"(--data-root[= ])(\S+)")
_ABSOLUTE_RUN_DIR = re.compile(r"(--run-dir[= ])/\S*/([^/\s]+)/?(?=\s|$)")


def data_roots(command: str) -> list[str]:
    """The data folders a command reads (its ``--data-root`` values), in order."""
    return [m[2] for m in _DATA_ROOT.finditer(command)]


def with_dir(command: str) -> str:
    """``command`` with every data folder as ``DIR``, as a user would type it."""
    return _DATA_ROOT.sub(r"\1DIR", command)


def publish(result: dict) -> dict:
    """``result`` with its command's data folder as ``DIR`` and the folder's name in ``provenance.data_root``."""
    p = dict(result["provenance"])
    p["command"] = _ABSOLUTE_RUN_DIR.sub(r"\1runs/\2", p["command"])
    roots = data_roots(p["command"])
    if len(roots) > 1:
        raise ValueError(f"the command reads {len(roots)} data folders; publish takes one")
    if roots and roots[0] != "DIR":
        p["data_root"] = Path(roots[0]).name
        p["command"] = with_dir(p["command"])
    if p.get("calls"):  # the earlier calls a command recorded itself (art-adp corruptions' calls.jsonl): likewise
        p["calls"] = [{**c, "command": with_dir(_ABSOLUTE_RUN_DIR.sub(r"\1runs/\2", c["command"]))} for c in p["calls"]]
    classifiers = {k: {**f, "trained_by": {**f["trained_by"], "command": with_dir(_ABSOLUTE_RUN_DIR.sub(
        r"\1runs/\2", f["trained_by"]["command"]))}} if "trained_by" in f else f  # train-levers' call: likewise
        for k, f in result.get("classifiers", {}).items()}  # fmt: skip
    return {**result, "provenance": p, **({"classifiers": classifiers} if "classifiers" in result else {})}


CALL = ("command", "code_version", "code_version_at_end", "device", "wall_time_s")


def run_dir(command: str) -> str | None:
    """The run folder a command wrote (its ``--run-dir``), or None."""
    m = re.search(r"--run-dir[= ](\S+)", command)
    return m[1] if m else None


def with_calls(result: dict, earlier: list[dict]) -> dict:
    """``result`` (the last call's table) with the earlier calls into the same run folder in ``provenance.calls``."""
    result = publish(result)
    last = run_dir(result["provenance"]["command"])
    calls = [{k: c[k] for k in CALL if k in c} for c in map(lambda c: publish({"provenance": c})["provenance"],
                                                             result["provenance"].get("calls", []))]  # its own
    for e in map(publish, earlier):
        p = e["provenance"]
        if run_dir(p["command"]) != last:
            raise ValueError(f"an earlier call wrote {run_dir(p['command'])!r}, the last {last!r}: one run folder only")
        mine, theirs = result["provenance"].get("models", {}), p.get("models", {})
        shared = set(mine) & set(theirs) if isinstance(mine, dict) and isinstance(theirs, dict) else set()
        if any(theirs[k] != mine[k] for k in shared):
            raise ValueError(f"an earlier call measured other weights ({p['command']}): retrained since, not one result")
        calls.extend(p.get("calls", []))
        calls.append({k: p[k] for k in CALL if k in p})
    own = {k: result["provenance"][k] for k in CALL if k in result["provenance"]}
    # a call listed twice (or the last call's table copied aside too): once, and the last call not among the earlier
    calls = [c for c in {json.dumps(c, sort_keys=True): c for c in calls}.values() if c != own]
    return {**result, "provenance": {**result["provenance"], "calls": calls}} if calls else result


def with_call_measured_again(result: dict, where: str, table: dict, retrained: tuple[str, ...] = ()) -> dict:
    """``result`` (a published lever table with per-image flags, or a corruption table) with the call at ``where``
    (``provenance`` or ``provenance.calls[I]``) measured again by ``table``, a new run folder's (the module's
    ``--again``); ``retrained``: the models whose weights the new call measured retrained (weights that were gone, or
    trained on uncommitted code), their earlier hashes kept in the call's ``retrained``."""
    new, p = publish(table)["provenance"], result["provenance"]
    m = re.fullmatch(r"provenance(?:\.calls\[(\d+)\])?", where)
    if m is None:
        raise ValueError(f"where {where!r}: 'provenance' (the last call) or 'provenance.calls[I]' (an earlier one)")
    old = p if m[1] is None else p["calls"][int(m[1])]
    words = shlex.split(old["command"])
    if shlex.split(new["command"])[: len(words)] != words:
        raise ValueError(f"the new call is not the one at {where} (options added at its end only): {new['command']!r}"
                         f", recorded {old['command']!r}")  # fmt: skip
    if new.get("data_sha256") != p.get("data_sha256"):
        raise ValueError(f"the new call read other data (SHA-256 {new.get('data_sha256')}, the result's "
                         f"{p.get('data_sha256')})")  # fmt: skip
    other = {k: v for k, v in new["models"].items() if p["models"].get(k) != v and k not in retrained}
    if other:
        raise ValueError(f"the new call measured other weights than the result: {other}")
    same = [k for k in retrained if new["models"].get(k) in (None, p["models"].get(k))]
    if same:
        raise ValueError(f"retrained {same}: the new call measured the result's weights of them, or none")
    fresh = {k: new["models"][k] for k in retrained}
    if "cells" in result:
        if new.get("calls"):
            raise ValueError("the new folder was measured by several calls: measure the call again in a folder of its "
                             "own")  # fmt: skip
        result = {**result, "cells": _cells_again(result, table)}
    else:
        result = {**result, "rows": _rows_again(result, table, new)}
        if m[1] is None and "seconds_this_call" in table:  # the last call's time, as the command writes it
            result["seconds_this_call"] = table["seconds_this_call"]
    call = {**{k: v for k, v in old.items() if k not in (*CALL, "replaces", "retrained")},
            **{k: new[k] for k in CALL if k in new}, "replaces": old["code_version"],
            **({"retrained": {k: p["models"][k] for k in retrained}} if retrained else {})}  # fmt: skip
    if "models" in old:
        call["models"] = {**old["models"], **fresh}
    if m[1] is None:
        return {**result, "provenance": call}
    calls = [call if i == int(m[1]) else c for i, c in enumerate(p["calls"])]
    return {**result, "provenance": {**p, "models": {**p["models"], **fresh}, "calls": calls}}


def _cells_again(result: dict, table: dict) -> list[dict]:
    """A lever table's cells with those ``table`` measured again in their place, the per-image worst case over
    attacks rendered again from the flags."""
    from art_adp.apps.levers_table import WORST_CASE, worst_over_attacks

    base = result.get("classifier")

    def key(c: dict) -> tuple:
        return c.get("classifier", base), c["model"], c["setting"], c["attack"], c.get("judge", "ensemble")

    cells = [c for c in result["cells"] if c["attack"] != WORST_CASE]
    held = {key(c): c for c in cells}
    fresh = {key(c): c for c in table["cells"] if c["attack"] != WORST_CASE}
    for k, c in fresh.items():
        if k not in held:
            raise ValueError(f"the new call measured {k}, which is not a cell of the result")
        if c["images"] != held[k]["images"]:
            raise ValueError(f"the new call measured {k} on other images than the result: measure the same N")
    cells = [fresh.get(key(c), c) for c in cells]
    return cells + worst_over_attacks(cells, base)


def _rows_again(result: dict, table: dict, new: dict) -> dict:
    """A corruption table's rows with those the new call measured (its ``rows``, of its classifier) in their place:
    the same settings (images by name, constants, seeds) only."""
    if table["settings"] != result["settings"]:
        raise ValueError(f"the new call measured with other settings than the result: {table['settings']}, the "
                         f"result's {result['settings']}")  # fmt: skip
    clf, rows = new.get("classifier"), dict(result["rows"])

    def named(held: dict, v: str) -> str | None:  # a table of several classifiers names its rows "classifier · row"
        return next((n for n in (f"{clf} · {v}", v) if n in held), None)

    for v in new["rows"]:
        name = named(rows, v)
        if name is None:
            raise ValueError(f"the new call measured {v!r} of {clf!r}, which is not a row of the result")
        rows[name] = table["rows"][named(table["rows"], v)]
    return rows


def option_text(options: dict | None) -> str:
    """A record's attack options in a row's name: ``"ensemble, margin, halving"``; none differing from the row's own
    first records (the registry's defaults for that row: the papers' mean of per-draw losses for ``full-pgd-eot``, the
    ensemble's loss for ``full-pgd-eot-ensemble``, CE, constant steps or APGD's own): ``"defaults"``."""
    shown = [str(v) for k, v in (options or {}).items() if k not in ("num_random_init", "check_every")]
    return ", ".join(shown) or "defaults"


def with_variants(folders: list[Path]) -> dict:
    """
    ``art-adp levers`` run folders that measured the same defence on the same images with other attack options (a
    folder refuses a row measured with other options, so each set has its own), as one result: every folder's records,
    each adaptive row renamed ``ROW [options]``, rendered together by the levers' own rendering (so the per-image worst
    case runs over every variant), the last folder's table for everything else, each folder's call in
    ``provenance.calls`` (``provenance.variants`` says the calls are side by side, not one after another).
    """
    from art_adp.apps.levers_table import render_levers
    from art_adp.runs.records import read_records

    tables = [with_calls(json.loads((f / "table.json").read_text(encoding="utf-8")), []) for f in folders]
    records = []
    for f in folders:
        for r in read_records(f):
            records.append({**r, "attack": f"{r['attack']} [{option_text(r['options'])}]"} if "options" in r else r)
    models = [t["provenance"].get("models", {}) for t in tables]
    if any(m != models[0] for m in models):
        raise ValueError("the folders measured other weights: variants compare attacks on one defence")
    last = tables[-1]
    rendered = render_levers(records, base=last["classifier"])
    calls = [c for t in tables[:-1] for c in [*t["provenance"].get("calls", []),
                                              {k: t["provenance"][k] for k in CALL if k in t["provenance"]}]]
    calls += last["provenance"].get("calls", [])  # the last folder's earlier calls
    names = list(dict.fromkeys(c["attack"] for c in rendered["cells"]))  # in the records' order, not a set's
    rows = [r for r in last["rows"] if r["name"] in names]
    rows += [{**r, "name": n, "label": f"{r['label']} [{n.split(' [', 1)[1]}"} for t in tables for r in t["rows"]
             for n in names if n.startswith(r["name"] + " [")]  # fmt: skip
    rows = list({r["name"]: r for r in rows}.values())
    return {**last, "cells": rendered["cells"], "rows": rows,
            "provenance": {**last["provenance"], "calls": calls, "variants": True}}  # fmt: skip


def with_flags(result: dict, root: Path = Path(".")) -> tuple[dict, int]:
    """``result`` (a published lever table) with each cell's per-image flags from its run folder's records, where they
    give the cell's published accuracy and images exactly: ``(result, cells given flags)``."""
    from art_adp.apps.levers_table import TABLE_SCHEMA, render_levers
    from art_adp.runs.records import read_records

    m = re.search(r"--run-dir (\S+)", result["provenance"]["command"])
    records = read_records(root / m[1]) if m else []
    if not records or result["provenance"].get("variants"):
        return result, 0
    ident = ("classifier", "model", "setting", "attack", "judge", "accuracy", "n")
    rendered = {tuple(c.get(k) for k in ident): c for c in render_levers(records, base=result.get("classifier"))["cells"]}
    cells, given = [], 0
    for c in result["cells"]:
        found = rendered.get(tuple(c.get(k) for k in ident))
        if found is not None and "flags" not in c:
            c, given = {**c, "images": found["images"], "flags": found["flags"]}, given + 1
        cells.append(c)
    out = {**result, "cells": cells}
    if all("flags" in c for c in cells):
        out = {"schema": TABLE_SCHEMA, **out}
    return out, given


#: What a zoo entry says of the data its models were trained on, by data set.
TRAINED_ON = {
    "mnist": "MNIST's official test images t10k 0-5,999 (the development subset); measured on t10k 6,000-7,999. "
    "Official test images: never evaluate this model on the MNIST test set, and never call it a model trained on MNIST.",
    "fashion-mnist": "Fashion-MNIST's official test images 0-2,999 (the development subset); measured on the 943 images "
    "after them. Official test images: never evaluate this model on the Fashion-MNIST test set, and never call it a "
    "model trained on Fashion-MNIST.",
    "cifar10": "CIFAR-10's 50,000 training images; measured on the development half of the test set "
    "(art_adp/cifar10_development.txt).",
}  # fmt: skip


def to_zoo(name: str, weights: Path, result_path: Path, zoo: Path = Path("zoo")) -> dict:
    """
    Ship the classifier ``weights`` (a run folder's ``NAME.safetensors``) as the zoo entry ``name``
    (``DATASET/NAME``): the file copied into ``zoo/``, its entry written from the published result it was measured in
    (``result_path``: the training facts of ``classifiers[NAME]``, the first call that named it), every result file
    recording its weights' hash listed. The result must record those weights, and its training call a clean commit.
    """
    import shutil

    from art_adp.serialization import HALF, file_sha256, read_checkpoint, weights_sha256

    result = json.loads(result_path.read_text(encoding="utf-8"))
    dataset, key = name.split("/", 1)
    digest = weights_sha256(weights)
    recorded = {k: v for k, v in result["provenance"]["models"].items() if v == digest}
    if not recorded:
        raise ValueError(f"{result_path} records no model of the weights {digest} ({weights}): publish it first")
    held = next(iter(recorded))
    calls = [*result["provenance"].get("calls", []), result["provenance"]]
    facts = result["classifiers"][held]
    trained = facts.get("trained_by") or next(  # art-adp train-levers' call, or the levers call that trained it
        c for c in calls if re.search(rf"--(classifiers|purified)( [^-]\S*)* {re.escape(held)}( |$)", c["command"]))
    if trained["code_version"].endswith("-dirty)"):
        raise ValueError(f"its training call started on uncommitted code ({trained['code_version']}): train it again")
    train = facts.get("adversarial_training") or facts.get("training") or {}
    target = zoo / dataset / f"{key.split('/')[-1]}{weights.suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(weights, target)
    results = sorted(p.name for p in Path("docs/results").glob("*.json")
                     if digest in json.loads(p.read_text(encoding="utf-8")).get("provenance", {}).get("models", {})
                     .values())  # fmt: skip
    entry = {
        "kind": "classifier", "dataset": dataset, "weights_sha256": digest, "file": target.relative_to(zoo).as_posix(),
        "sha256": file_sha256(target), "architecture": facts.get("arch"),
        "training": {"recorded_in": result_path.name, "command": trained["command"],
                     "code_version": trained["code_version"], "processor": trained["device"],
                     "wall_time_s": round(sum(e.get("seconds", 0) for e in train.get("curve", [])), 1),
                     "epochs_trained": len(train.get("curve", [])), "init": facts.get("init"),
                     "behind": (facts.get("purifier") or {}).get("describe"),
                     **({"behind_score_sha256": score} if (score := (facts.get("purifier") or {}).get("score_sha256"))
                        else {})},  # the purifier's score model as the classifier's record hashes it
        "trained_on": TRAINED_ON[dataset], "licence": "MIT (art-adp's)", "results": results,
        "status": "shipped: trained from a clean commit by the command above",
    }  # fmt: skip
    if read_checkpoint(weights)[1].get("stored") == HALF:  # kept at half precision: say so, and what was trained
        entry["stored"] = ("fp16: the trained float32 weights (SHA-256 " + ", ".join(trained.get("models", {}).values())
                           + ") rounded to half precision (art_adp.serialization.half_checkpoint); the results were "
                           "measured from these")  # fmt: skip
    manifest_path = zoo / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    start = manifest["entries"].get(f"{dataset}/{facts.get('init')}", {})  # fine-tuned from: its licence's notice
    if start.get("source"):  # third-party weights (akamaster's BSD-2 ResNet-20): the fine-tune carries their notice
        entry["licence"] = f"{start['licence']} (the weights it was fine-tuned from); the fine-tune MIT (art-adp's)"
    manifest["entries"][name] = entry
    manifest["entries"] = dict(sorted(manifest["entries"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return entry


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    if argv[0] == "--flags":
        for target in map(Path, argv[1:]):
            out, given = with_flags(json.loads(target.read_text(encoding="utf-8")))
            if given:
                target.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{target}: {given} of {len(out.get('cells', []))} cells given their per-image flags")
        return 0
    if argv[0] == "--zoo":
        name, weights, result = argv[1:4]
        entry = to_zoo(name, Path(weights), Path(result))
        print(f"zoo:{name}: {entry['file']} (weights {entry['weights_sha256'][:12]}), used by {entry['results']}")
        return 0
    if argv[0] == "--again":
        target, where, table, *rest = argv[1:]
        if rest and rest[0] != "--retrained":
            raise SystemExit(f"--again RESULT WHERE TABLE [--retrained MODEL ...]: {rest[0]!r}?")
        out = with_call_measured_again(json.loads(Path(target).read_text(encoding="utf-8")), where,
                                       json.loads(Path(table).read_text(encoding="utf-8")), tuple(rest[1:]))
        Path(target).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{target}: the call at {where} measured again ({table})")
        return 0
    if argv[0] == "--variants":
        *folders, target = map(Path, argv[1:])
        out = with_variants(folders)
        Path(target).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {target} ({len(folders)} folders)")
        return 0
    *sources, target = map(Path, argv)
    *earlier, last = (json.loads(s.read_text(encoding="utf-8")) for s in sources)
    out = with_calls(last, earlier)
    target.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target} ({out['provenance']['command']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
