"""``art-adp check RESULT.json``: re-measure a published lever table's cells from their recorded settings with the
zoo's weights, on the first N images, and compare each image's verdict with the published flags.

A cell is measured again by the call that measured it (its command in the result's provenance, parsed by today's
``art-adp levers`` parser), narrowed to that cell and to the first N images, its classifiers and score model taken
from the model zoo by the SHA-256 the result records (:mod:`art_adp.zoo`), under the folder's seed scheme. Seeds are
drawn per block of images, so N is a multiple of the cell's block. The data's digest is compared with the one
recorded before anything runs. It runs today's code: where the code of the attacks, the purification or the engine
changed since the recorded call, it says so.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Check", "FLAG_HELP", "HELP", "OPTIONS", "SCHEMA", "TOLERANCE", "call_of", "cell_label", "check_command",
           "check_result", "checkable_cells"]  # fmt: skip

#: The share of images whose re-measured verdict must equal the published one. A re-measurement from the same
#: commit on a processor of the same instruction set gives every flag back; the judgements are random and float
#: kernels differ between processors, so an image at its margin may turn either way elsewhere.
TOLERANCE = 0.9
#: The commits before this one seeded every lever folder by the "levers" scheme (a newer folder draws "apart" unless
#: its command says --seed-scheme).
APART_SINCE = "20f09a2"
#: What decides a cell's verdicts besides the weights: a change here since the recorded call is reported.
MEASURING_CODE = (
    "art_adp/attacks",
    "art_adp/purification.py",
    "art_adp/preprocessor.py",
    "art_adp/eot.py",
    "art_adp/ensemble.py",
    "art_adp/defended.py",
    "art_adp/runs/engine.py",
    "art_adp/runs/seeds.py",
    "art_adp/apps/levers.py",
    "art_adp/apps/levers_presets.py",
    "art_adp/apps/levers_classifiers.py",
)
#: The lever tables ``check`` reads: those with each cell's per-image verdicts (``flags``).
SCHEMA = "art-adp/levers-table/2"
#: Images per record block of the adaptive cells (``levers.BLOCK``).
BLOCK = 50
REPO = Path(__file__).resolve().parents[2]
HELP = "re-measure published cells with the zoo's weights and compare per-image verdicts"


@dataclass(frozen=True)
class Check:
    """Settings of ``art-adp check``."""

    cells: tuple[str, ...] = ()
    n: int = 50
    repeats: int | None = None
    tolerance: float = TOLERANCE
    list_cells: bool = False


#: ``art-adp check``'s flags: the help and the parser options of :class:`Check`'s fields.
FLAG_HELP = {"cells": "cells as CLASSIFIER|MODEL|SETTING|ATTACK (--list-cells); default: every measured one",
             "n": "the first N images, a multiple of 50 (the record block)",
             "repeats": "R, judgements of the adaptive cells; None: the recorded",
             "tolerance": "least share of images whose verdict must equal the published one",
             "list_cells": "list the result's cells and stop"}  # fmt: skip
OPTIONS: dict[str, dict] = {"cells": {"flag": "--cell", "nargs": "+", "type": str}, "n": {"type": int},
                            "tolerance": {"type": float}, "list_cells": {"action": "store_true"}}  # fmt: skip


def cell_label(cell: Mapping, base: str) -> str:
    """``CLASSIFIER|MODEL|SETTING|ATTACK``: a cell's name in ``--cell`` (``MODEL`` ``none`` for a bare classifier,
    whose setting is the classifier)."""
    if cell["model"] == "none":
        return f"{cell['setting']}|none|-|{cell['attack']}"
    return f"{cell.get('classifier', base)}|{cell['model']}|{cell['setting']}|{cell['attack']}"


def checkable_cells(result: Mapping) -> dict[str, dict]:
    """The cells of a lever table that ``check`` can measure again, by :func:`cell_label`: every cell with its
    per-image verdicts but the per-image worst cases (none for a table of another schema than :data:`SCHEMA`)."""
    if result.get("schema") != SCHEMA:
        return {}
    base = result["classifier"]
    return {cell_label(c, base): c for c in result["cells"] if c["attack"] != "worst-case" and "flags" in c}


def _calls(result: Mapping) -> list[dict]:
    """Every call into the result's folder, in order (the earlier ones, then the last)."""
    prov = result["provenance"]
    return [*prov.get("calls", []), {k: v for k, v in prov.items() if k != "calls"}]


def _listed(args: Sequence[str], flag: str) -> list[str] | None:
    """The values after ``flag`` in a command's words (None when the flag is absent)."""
    if flag not in args:
        return None
    out, i = [], args.index(flag) + 1
    while i < len(args) and not args[i].startswith("--"):
        out.append(args[i])
        i += 1
    return out


def _attack_of(cell_attack: str, asked: Sequence[str]) -> str | None:
    """The ``--attacks`` name that measured the row ``cell_attack`` (itself, or a variant ``NAME-{N}it-r{K}``)."""
    for name in asked:
        if cell_attack == name or cell_attack.startswith(name + "-") and cell_attack[len(name) + 1 :][:1].isdigit():
            return name
    return None


def call_of(result: Mapping, cell: Mapping) -> tuple[dict, str]:
    """
    The last call of ``result`` that measured ``cell``, and the ``--attacks`` name it measured it under.

    :raises ValueError: When no recorded call measured it.
    """
    base = result["classifier"]
    bare = cell["model"] == "none"
    name = cell["setting"] if bare else cell.get("classifier", base)
    for call in reversed(_calls(result)):
        args = shlex.split(call["command"])
        attack = _attack_of(cell["attack"], _listed(args, "--attacks") or ())
        if attack is None:
            continue
        if bare and name in (_listed(args, "--classifiers") or ()):
            return call, attack
        settings, models = _listed(args, "--settings"), _listed(args, "--models")
        if (not bare and name in (_listed(args, "--purified") or ()) and (models is None or cell["model"] in models)
                and (settings is None or cell["setting"] in settings)):  # fmt: skip
            return call, attack
    raise ValueError(f"No call recorded in the result's provenance measured the cell {cell_label(cell, base)}.")


def _commit(version: str) -> str | None:
    """The commit of a ``code_version`` (``art-adp 0.2.0.dev0 (c136fcf)`` → ``c136fcf``)."""
    inside = version.rpartition("(")[2].rstrip(")").removesuffix("-dirty")
    return inside or None


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None


def _scheme(call: Mapping) -> str:
    """The seed scheme the call measured under: its ``--seed-scheme``, else that of a folder of its commit."""
    args = shlex.split(call["command"])
    if "--seed-scheme" in args:
        return args[args.index("--seed-scheme") + 1]
    commit = _commit(call["code_version"])
    done = _git("merge-base", "--is-ancestor", APART_SINCE, commit) if commit else None
    return "apart" if done is not None and done.returncode == 0 else "levers"


def code_changes(call: Mapping) -> str:
    """In words: whether the measuring code (:data:`MEASURING_CODE`) changed between the call's commit and now."""
    commit = _commit(call["code_version"])
    diff = _git("diff", "--stat", commit, "--", *MEASURING_CODE) if commit else None
    if diff is None or diff.returncode != 0:
        return f"cannot tell whether the measuring code changed since {call['code_version']} (no git checkout here)"
    changed = [line.split("|")[0].strip() for line in diff.stdout.splitlines() if "|" in line]
    if not changed:
        return f"the measuring code is that of the recorded call ({commit})"
    return f"the measuring code changed since the recorded call ({commit}): {', '.join(changed)}"


def _zoo_by_hash() -> dict[str, str]:
    """Zoo entry name by the SHA-256 of its weights."""
    from ..zoo import by_weights

    return by_weights()


def _rerun(result: Mapping, call: Mapping, attack: str, cell: Mapping, n: int, repeats: int | None, run_dir: Path,
           data, progress: bool, device: str, parse: Callable) -> dict:  # fmt: skip
    """Measure ``cell`` again: the call's settings parsed by today's parser (``parse``, the command line's), narrowed
    to the cell and ``n`` images, the weights from the zoo by their recorded SHA-256; returns the new table's cell."""
    from ..zoo import zoo_file
    from .levers import run_levers, stage_keywords
    from .levers_classifiers import from_zoo

    args = shlex.split(call["command"])[1:]
    i = args.index("--attacks") + 1  # narrowed to the cell's attack: the others' names need not parse today
    j = next((k for k in range(i, len(args)) if args[k].startswith("--")), len(args))
    try:
        _, config, keywords = parse([*args[:i], attack, *args[j:]])
    except SystemExit as exc:
        raise ValueError(
            f"The recorded call no longer parses (art-adp levers printed why above): {call['command']}"
        ) from exc

    by_hash, models = _zoo_by_hash(), result["provenance"].get("models", {})
    bare = cell["model"] == "none"
    name = cell["setting"] if bare else cell.get("classifier", result["classifier"])
    if name not in models or models[name] not in by_hash:
        raise ValueError(f"The classifier {name!r} of {cell_label(cell, result['classifier'])} (SHA-256 "
                         f"{models.get(name, 'not recorded')}) is in no zoo entry: it cannot be measured "
                         "again.")  # fmt: skip
    from_zoo(by_hash[models[name]], run_dir, as_name=name)
    denoiser = None
    if keywords.get("denoiser") is not None or cell["model"] == "denoiser":
        held = models.get("denoiser")
        if held not in by_hash:
            raise ValueError(f"The denoiser the result records (SHA-256 {held}) is in no zoo entry.")
        denoiser = zoo_file(by_hash[held])
    if not bare:
        _same_purification(cell, result["classifier"], name, keywords["dataset"], config.sigmas, denoiser)
    settings = {**asdict(config), "attacks": (attack,), "n_examples": n, "estimate_only": False, "zoo": False,
                "classifiers": (name,) if bare else (), "purified": () if bare else (name,),
                "seed_scheme": _scheme(call)}  # fmt: skip
    if not bare:
        settings.update(models=(cell["model"],), settings=(cell["setting"],))
    if repeats is not None:
        settings["repeats"] = repeats
    settings.update(dataset=keywords["dataset"], denoiser_path=denoiser, device=device, progress=progress)
    table = run_levers(data, run_dir, **stage_keywords(run_levers, settings))  # the zoo's weights: nothing to train
    for new in table["cells"]:
        if cell_label(new, table["classifier"]) == cell_label(cell, result["classifier"]):
            return new
    raise ValueError(f"The re-measurement wrote no cell {cell_label(cell, result['classifier'])}.")


def _same_purification(cell: Mapping, base: str, name: str, dataset: str, sigmas, denoiser) -> None:
    """Refuse a cell whose setting purifies otherwise today than when it was measured: a one-step denoise named
    before the noise clip became a choice was of a clipped noisy input, and today's takes its model's own form (the
    exact score's is unclipped); a classifier trained behind a purification is measured behind its recipe's."""
    from ..score import load_score_model
    from .levers_classifiers import model_clipped
    from .levers_presets import preset_for, setting_named

    preset = preset_for(dataset, sigmas=sigmas)
    own = preset.classifiers[name].purifier
    setting = setting_named(own[1] if own else cell["setting"], preset.sigmas)
    today = setting.clipped(model_clipped(cell["model"], None if denoiser is None else load_score_model(denoiser)))
    then = cell.get("clip_noise", True) is not False  # recorded only where the noisy input was not clipped
    if today != then:
        form = {True: "a clipped", False: "an unclipped"}
        raise ValueError(f"{cell_label(cell, base)} purified {form[then]} noisy input; {setting.name!r} purifies "
                         f"{form[today]} one today: today's code measures another defence under this name, so the "
                         "published cell cannot be re-checked; measure the row again instead.")  # fmt: skip


def _in_blocks(result: Mapping, cell: Mapping) -> bool:
    """Whether the cell's records were drawn per block of :data:`BLOCK` images (an adaptive row behind a purifier),
    not for the whole call at once (clean, Clf-PGD, the bare classifiers' rows)."""
    adaptive = {r["name"]: r.get("adaptive", True) for r in result.get("rows", [])}
    return cell["model"] != "none" and adaptive.get(cell["attack"], True)


def check_result(path: str | Path, config: Check = Check(), *, data_root: str, parse: Callable,
                 run_dir: str | Path | None = None, device: str = "cpu", progress: bool = True) -> dict:  # fmt: skip
    """
    Re-measure the cells of the lever table at ``path`` (:class:`Check`: ``cells`` by :func:`cell_label`, default
    every measured cell but the per-image worst cases) on the first ``config.n`` images (a cell whose records were
    drawn for the whole call at once, not per block: on its call's images, since an image's noise depends on the rest
    of the call); ``parse`` reads a recorded
    command line into its command, settings and keywords (:func:`art_adp.apps.cli.parse`).

    :return: ``{"result", "data", "cells": [{"cell", "n", "published", "published_ci95", "measured", "agreement",
        "differ", "in_interval", "code", "seconds", ...}], "passed"}``: per cell the published and re-measured figures
        on the same images, the published one's Wilson interval there and whether the re-measured lies in it, the
        share of images whose verdict is the same and those that differ; ``data`` says whether the data's digest is
        the recorded one; ``code_version`` and ``device``: what re-measured them, for the ``seconds``.
    :raises ValueError: For a result that is no lever table with per-image flags, an unknown cell, an N that is not a
        multiple of the record blocks or exceeds the published images, weights in no zoo entry.
    """
    import json

    from ..data import load_dataset
    from ..runs.provenance import code_version, device_description
    from ..runs.records import array_sha256
    from ..runs.statistics import flags_of, summary

    result = json.loads(Path(path).read_text(encoding="utf-8"))
    if result.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a lever table with per-image flags ({SCHEMA}): there is no "
                         "published verdict per image to compare with.")  # fmt: skip
    cells = checkable_cells(result)
    chosen = list(config.cells) or list(cells)
    unknown = [c for c in chosen if c not in cells]
    if unknown:
        raise ValueError(f"No cell {unknown[0]!r} in {path}; its cells: {sorted(cells)}.")
    n = config.n
    if n <= 0 or n % BLOCK:
        raise ValueError(f"--n {n}: give a positive multiple of {BLOCK}, the record block (seeds are drawn per block).")
    top = result["provenance"]
    asked = _listed(shlex.split(top["command"]), "--n-examples") or ["1000"]  # the last call's images, digested
    n_recorded = int(asked[0]) if top.get("data_sha256") else None
    data = load_dataset(result["dataset"], data_root)
    out: dict[str, Any] = {"result": str(path), "n": n, "tolerance": config.tolerance, "cells": [],
                           "code_version": code_version(), "device": device_description(device)}  # fmt: skip
    if n_recorded is not None:
        found = array_sha256(data.x_test[:n_recorded], data.y_test[:n_recorded])
        out["data"] = {"recorded": top["data_sha256"], "found": found, "same": found == top["data_sha256"]}
        if found != top["data_sha256"]:
            out["passed"] = False
            return out
    else:
        out["data"] = {"recorded": None, "same": None}
    work = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="art-adp-check-"))
    for label in chosen:
        cell = cells[label]
        published = flags_of(cell)
        if any(i not in published for i in range(n)):
            raise ValueError(f"{label}: published on {len(published)} images, fewer than --n {n}.")
        call, attack = call_of(result, cell)
        # a cell measured as one block draws its noise (and Clf-PGD its starts) for the whole call: measured again
        # on the call's images, else an image's draws would be another's
        size = (
            n
            if _in_blocks(result, cell)
            else int((_listed(shlex.split(call["command"]), "--n-examples") or [str(n)])[0])
        )
        size = min(max(size, n), len(published))
        started = time.monotonic()
        folder = work / label.replace("|", "__").replace("/", "_").replace(" ", "_")
        folder.mkdir(parents=True, exist_ok=True)
        new = flags_of(_rerun(result, call, attack, cell, size, config.repeats, folder, data, progress, device, parse))
        differ = [i for i in range(size) if new[i] != published[i]]
        measured = sum(new[i] for i in range(size)) / size
        before = summary([published[i] for i in range(size)])  # the published figure on the same images
        low, high = before["ci95"]
        out["cells"].append({
            "cell": label, "n": size, "published": before["accuracy"], "published_ci95": [low, high],
            "published_all": {"accuracy": cell["accuracy"], "n": cell["n"], "ci95": cell["ci95"]},
            "measured": measured, "agreement": 1 - len(differ) / size, "differ": differ,
            "in_interval": low <= measured <= high,
            "recorded_call": call["code_version"], "code": code_changes(call), "seconds": time.monotonic() - started,
            "run_dir": str(folder),
        })  # fmt: skip
    out["passed"] = all(c["agreement"] >= config.tolerance for c in out["cells"])
    return out


def _report(out: Mapping) -> str:
    lines = [f"{out['result']}: the first {out['n']} images (a cell measured as one block: its call's)"]
    data = out["data"]
    if data["same"] is False:
        lines.append(f"  DATA DIFFERS: the images' SHA-256 is {data['found']}, the result records {data['recorded']}: "
                     "another data set or split; nothing measured.")  # fmt: skip
    elif data["same"] is None:
        lines.append("  the result records no data digest: the images could not be checked")
    for c in out["cells"]:
        lo, hi = c["published_ci95"]
        verdict = "agrees" if c["agreement"] >= out["tolerance"] else "DISAGREES"
        lines.append(
            f"  {c['cell']}: {verdict}, {c['agreement']:.1%} of {c['n']} images equal "
            f"(tolerance {out['tolerance']:.0%}); "
            f"re-measured {c['measured']:.1%}, {'inside' if c['in_interval'] else 'OUTSIDE'} the published "
            f"{c['published']:.1%} [{lo:.1%}, {hi:.1%}] on these images ({c['published_all']['accuracy']:.1%} of "
            f"{c['published_all']['n']} published); "
            f"differ: {c['differ'] or 'none'}; {c['seconds']:.0f} s\n    {c['code']}"
        )
    return "\n".join(lines)


def check_command(config: Check, *, result: str, data_root: str, parse: Callable, run_dir: str | None = None,
                  device: str | None = None, progress: bool = True) -> int:  # fmt: skip
    """Re-measure published cells of a lever table (docs/results/*.json) with the model zoo's weights on the first N
    images and compare every image's verdict with the published flags. Exit status 1 when a cell agrees on fewer
    images than the tolerance, 3 when the data's digest is not the recorded one; the report goes to
    RUN_DIR/check.json."""
    import json

    from ..runs.records import write_json

    if config.list_cells:
        held = json.loads(Path(result).read_text(encoding="utf-8"))
        for c in held.get("cells", []):
            if c["attack"] != "worst-case" and "flags" in c:
                print(f"{cell_label(c, held['classifier'])}  ({c['accuracy']:.1%} of {c['n']})")
        return 0
    work = Path(run_dir or tempfile.mkdtemp(prefix="art-adp-check-"))
    out = check_result(result, config, data_root=data_root, parse=parse, run_dir=work, device=device or "cpu",
                       progress=progress)  # fmt: skip
    write_json(work / "check.json", out, indent=1)
    print(_report(out))
    print(f"report: {work / 'check.json'}")
    if out["data"]["same"] is False:
        return 3
    return 0 if out["passed"] else 1
