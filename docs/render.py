"""Render every published measurement from its committed result file: one script, one source of truth.

    python docs/render.py           # rewrite the rendered blocks of README.md, docs/*.md, benchmarks/README.md, upstream/*.md
    python docs/render.py --check   # exit 1 naming every block that differs from its rendering (tests/test_rendered.py)

A figure in a markdown file is a block::

    <!-- render: NAME -->
    ...                    (written by this script: do not edit by hand)
    <!-- end render -->

``NAME`` is a key of :data:`FIGURES`: a result file (JSON) and the function that turns it into markdown. Every
result file carries ``provenance``: the command that produced it, the code version, the SHA-256 of the weights of
the models it used, the device and the wall time; each rendering ends with that line, so no figure is published without its
budget, device and wall time. A result measured before provenance was recorded says "not recorded" where a field
is unknown, and the rendering says so too. A few blocks list a committed file that is no measurement, such as the
zoo's manifest (:data:`LISTINGS`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from art_adp.runs.render import markdown_table

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("publish", ROOT / "docs" / "publish.py")
_publish = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_publish)  # the one place a command's data folder becomes DIR
PAGES = ("README.md", "docs/**/*.md", "benchmarks/README.md", "upstream/*.md")
PROVENANCE = ("command", "code_version", "models", "device", "wall_time_s")
BLOCK = re.compile(r"(?P<indent>[ \t]*)(<!-- render: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)([ \t]*<!-- end render -->)", re.S)


def load(path: str) -> dict:
    """A committed result file, checked for its provenance; a result of uncommitted code (``-dirty``) must carry its
    diff (``code_diff`` and its ``code_diff_sha256``, as ``art_adp.runs.provenance`` records them)."""
    result = json.loads((ROOT / path).read_text(encoding="utf-8"))
    p = result.get("provenance", {})
    missing = [k for k in PROVENANCE if k not in p]
    if missing:
        raise ValueError(f"{path} has no provenance {missing}: re-run the command that writes it.")
    if "-dirty" in str(p["code_version"]):
        diff = p.get("code_diff")
        if not isinstance(diff, str) or hashlib.sha256(diff.encode()).hexdigest() != p.get("code_diff_sha256"):
            raise ValueError(
                f"{path} was produced by uncommitted code ({p['code_version']}) and does not carry that code's diff: "
                "commit the code and re-run the command that writes it."
            )
    for c in result.get("cells", ()):  # a levers table: its one-step rows measured before the clip option clipped
        if "one-step" in c.get("setting", "") and "clipped" not in c["setting"] and c.get("clip_noise") is not False:
            c["setting"] += ", clipped noise"
    return result


def pct(v: float, digits: int = 1) -> str:
    return f"{100 * v:.{digits}f}"


def wall(seconds) -> str:
    if not isinstance(seconds, (int, float)):
        return str(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


# A data folder a command read, named in words: the provenance line prints the command as a user would type it
# (``--data-root DIR``), never the development machine's path (a folder a user's clone does not have), and says which
# split DIR held. A result that records its own ``description`` of the data (``art-adp corruptions --description``)
# is named by it; otherwise by the folder's name (in the command, or, where the command already says DIR, recorded in
# the provenance's ``data_root`` or the result's ``data``), from what that folder's own notes say it holds.
DATA_SPLITS = {
    "mnist-subset": "MNIST test images 0–5,999 for training and 6,000–7,999 for measuring, the development split",
    "fashion-mnist-subset": (
        "Fashion-MNIST test images 0–2,999 for training and 3,000–3,942 for measuring, the development split"
    ),
    "cifar10": (
        "CIFAR-10's 50,000 training images for training; for measuring, the development half of the official test set "
        "(the first 5,000 of its seed-0 shuffle, 500 a class; the other 5,000 are kept for independent checks)"
    ),
}
_ABSOLUTE_OUT = re.compile(r"(?<= )(?:/(?:root|tmp|work|home)/\S*/|\$OUT/)([\w.-]+\.json)\b")
# A device string names its processor when it names a CPU or GPU model; otherwise the line says it was not recorded,
# with what the result itself shows about it where it shows something (no processor is ever guessed by name).
_PROCESSOR = re.compile(r"AMD|Intel|EPYC|Xeon|Ryzen|Core\(TM\)|Apple M\d|Graviton|Neoverse|NVIDIA|Tesla|GeForce|Radeon")
PROCESSOR_NOTES = {
    "docs/results/denoiser_mnist.json": (
        "an x86-64 with native bf16, as its bf16 speed shows (emulated bf16 is an order of magnitude slower than fp32)"
    ),
}


def command(result: dict) -> str:
    """The command of a result as a user would type it: any data folder as ``--data-root DIR``, an output file that
    was written under a machine's absolute path or ``$OUT`` (a lent GPU's output folder) by its name alone."""
    text = _publish.with_dir(result["provenance"]["command"])
    return _ABSOLUTE_OUT.sub(r"\1", text)


def data_split(result: dict) -> str | None:
    """The split the command's ``--data-root`` held, in words (None when it read no data folder)."""
    roots = _publish.data_roots(result["provenance"]["command"])
    if not roots:
        return None
    described = result.get("description")
    if isinstance(described, str) and described:
        return described
    recorded = result["provenance"].get("data_root") or (
        result.get("data", {}).get("root") if isinstance(result.get("data"), dict) else None
    )
    names = [Path(root if root != "DIR" or not recorded else recorded).name for root in roots]
    return "; ".join(dict.fromkeys(DATA_SPLITS.get(name, "split not recorded") for name in names))


def device(path: str, result: dict) -> str:
    """The device of a result, and its processor, or that the processor was not recorded."""
    d = result["provenance"]["device"]
    if _PROCESSOR.search(d):
        return d
    note = PROCESSOR_NOTES.get(path)
    return f"{d} (processor not recorded{': ' + note if note else ''})"


def again(call: dict) -> str:
    """What a call measured again in place of an earlier one says of it (docs/publish.py ``--again``): where it ran, the
    models it measured retrained, and the code version of the call it replaced; nothing for any other call."""
    if not call.get("replaces"):
        return ""
    where = call["device"].split(";")[0]
    earlier = call.get("retrained", {})  # model -> the hash of the weights it replaced
    retrained = "".join(f", with {k} retrained (its earlier weights {v[:12]})" for k, v in earlier.items())
    return f", measured again in a new run folder on {where}{retrained}, in place of a call at {call['replaces']}"


def source(path: str, result: dict) -> str:
    """The provenance line every rendering ends with."""
    p = result["provenance"]
    models = p["models"]
    if isinstance(models, dict):
        # The hashing method is printed beside the hashes (art_adp.runs.provenance records it); older results did not
        # record it, and mixed the checkpoint files' bytes with the weights.
        method = p.get("models_hash", "SHA-256, method not recorded")
        models = f"({method}) " + (", ".join(f"{k} {v[:12]}" for k, v in models.items()) or "none")
    else:  # a note written when the hashes were not recorded: it says what it knows
        models = f"(SHA-256) {models}"
    split = f" (DIR: {data_split(result)})" if data_split(result) else ""
    # A command recorded before flags were renamed is printed in today's names; the line says which it ran with.
    moved = f" (the checkout at its end: {p['code_version_at_end']})" if p.get("code_version_at_end") else ""
    moved += f" ({again(p).removeprefix(', ')})" if p.get("replaces") else ""
    renamed = p.get("flags_renamed") or {}
    if renamed:
        split += " (flags in today's names; it ran with the earlier " + ", ".join(f"`{old}`" for old in renamed) + ")"
    calls, earlier = p.get("calls", []), ""
    if calls:  # the earlier calls into the same run folder (docs/publish.py), each as it ran
        total = wall(p["wall_time_s"] + sum(c["wall_time_s"] for c in calls))
        where = ("beside {n} call(s) with other attack options, a run folder each" if p.get("variants")
                 else "after {n} earlier call(s) into the same run folder")  # fmt: skip
        earlier = (f" · {where.format(n=len(calls))}, {total} in all: " + "; ".join(
            f"`{command({'provenance': c})}` ({wall(c['wall_time_s'])}, code {c['code_version']}"
            + (f", the checkout at its end: {c['code_version_at_end']}" if c.get("code_version_at_end") else "")
            + again(c) + ")" for c in calls))
    return (
        f"<sub>Rendered from `{path}` by `docs/render.py`: `{command(result)}`{split} · {device(path, result)} · "
        f"wall time {wall(p['wall_time_s'])} · code {p['code_version']}{moved}{earlier} · models {models}.</sub>"
    )


# -- how to re-check a table -------------------------------------------------------------------------------------------

#: The model zoo whose manifest says which weights ``art-adp check`` can take (shipped, bundled or converted).
ZOO = ROOT / "zoo"
#: The pages every rendered table of which ends with its re-check line (:func:`recheck_line`): the results appendices
#: and the data-set pages.
RECHECKED = ("docs/*_results.md", "docs/cifar10.md", "docs/mnist.md", "docs/fashion_mnist.md", "docs/corruptions.md")


#: Why ``art-adp check`` cannot re-measure a result file, besides weights the zoo lacks (:func:`recheck`).
NOT_LEVERS = "not a lever table (art-adp check reads lever tables only)"
NO_FLAGS = "no per-image verdicts (a lever table written before it recorded them)"


class Recheck(NamedTuple):
    """What ``art-adp check`` lacks to re-measure a result file (:func:`recheck`): nothing where both are empty."""

    why: list[str]  # besides weights the zoo does not ship, in words
    unshipped: list[str]  # the zoo entries of the weights it needs that the zoo does not ship
    converters: dict[str, str]  # the third-party entries it takes: the command that converts each, to run first


def recheck(path: str, result: dict) -> Recheck:
    """
    Whether ``art-adp check`` can re-measure the result file at ``path`` today, decided from the file and the zoo's
    manifest (:data:`ZOO`) as the check decides: it reads lever tables (the cells of ``art-adp levers`` calls) with
    per-image verdicts, and takes every model the provenance records from the zoo by its SHA-256: shipped, bundled or
    converted by the user from its source.
    """
    from art_adp import zoo
    from art_adp.apps.check import checkable_cells

    p = result["provenance"]
    calls = [c["command"] for c in (*p.get("calls", []), p)]
    if "cells" not in result or any(shlex.split(c)[:2] != ["art-adp", "levers"] for c in calls):
        return Recheck([NOT_LEVERS], [], {})
    out = Recheck([] if checkable_cells(result) else [NO_FLAGS], [], {})
    models = p["models"] if isinstance(p["models"], dict) else {}
    if models is not p["models"]:
        out.why.append("its models' hashes were not recorded")
    named = zoo.by_weights(ZOO)
    for model, digest in models.items():
        if digest not in named:
            out.why.append(f"its {model} weights (SHA-256 {digest[:12]}) are in no zoo entry")
            continue
        entry = zoo.entry(named[digest], ZOO)
        if not entry.get("file") and not entry.get("bundled"):
            out.unshipped.append(named[digest])
        elif entry.get("source"):
            out.converters[named[digest]] = entry["converter"].format(zoo=ZOO.relative_to(ROOT).as_posix())
    return out


def _shipping(names) -> str:
    return "the zoo does not ship " + ", ".join(f"`{name}`" for name in dict.fromkeys(names))


def recheck_line(paths: Sequence[str]) -> str:
    """The line under a table rendered from the result files ``paths``: the ``art-adp check`` command that re-measures
    it, or why it cannot be re-checked yet (:func:`recheck`); for a table drawn from several files, which of them can
    be re-checked, and why not the others."""
    from art_adp.apps.check import Check

    decided = {path: recheck(path, load(path)) for path in paths}
    ready = [path for path, r in decided.items() if not r.why and not r.unshipped]
    converters = {name: c for path in ready for name, c in decided[path].converters.items()}
    run = f"--data-root DIR --n {Check().n}"
    if len(paths) == 1:
        r = decided[paths[0]]
        if ready:
            first = ", its third-party weights converted first: " + ", ".join(f"`{c}`" for c in converters.values())
            return f"<sub>Re-check: `art-adp check {paths[0]} {run}`{first if converters else ''}.</sub>"
        why = r.why + ([_shipping(r.unshipped)] if r.unshipped else [])
        return f"<sub>Cannot be re-checked{'' if r.why == [NOT_LEVERS] else ' yet'}: {'; '.join(why)}.</sub>"
    out = []
    if ready:
        first = f" ({', '.join(f'`{n}`' for n in converters)} converted first: docs/zoo.md)" if converters else ""
        out.append(f"Re-check: `art-adp check {Path(paths[0]).parent.as_posix()}/FILE.json {run}` for FILE "
                   + ", ".join(Path(p).stem for p in ready) + f"{first}.")  # fmt: skip
    by_reason: dict[str, list[str]] = {}
    for path, r in decided.items():
        for reason in r.why:
            by_reason.setdefault("no per-image verdicts" if reason == NO_FLAGS else reason, []).append(Path(path).stem)
    unshipped = [name for r in decided.values() for name in r.unshipped]
    if len(ready) < len(paths):
        out.append(("Not yet the others: " if ready else "Cannot be re-checked yet: ") + "; ".join(
            [f"{reason}: {', '.join(files)}" for reason, files in by_reason.items()]
            + ([_shipping(unshipped)] if unshipped else [])) + ".")  # fmt: skip
    return "<sub>" + " ".join(out) + "</sub>"


def rechecked() -> set[str]:
    """The figures shown on the :data:`RECHECKED` pages."""
    return {m["name"] for pattern in RECHECKED for page in ROOT.glob(pattern)
            for m in BLOCK.finditer(page.read_text("utf-8"))}  # fmt: skip


# -- the figures -------------------------------------------------------------------------------------------------------


def card_table(path: str) -> str:
    """The table of an evaluation card, as the report writes it (``art_adp.apps.evaluation.report.markdown``)."""
    from art_adp.apps.evaluation.report import markdown

    result = load(path)
    lines, block = markdown(result).splitlines(), []
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        block.append(line)
    return "\n".join([*block, "", source(path, result)])


def card_page(path: str) -> str:
    """A whole evaluation card (header, table, sanity report), as the report writes it."""
    from art_adp.apps.evaluation.report import markdown

    result = load(path)
    return markdown(result) + "\n" + source(path, result)


def eot_digits(path: str) -> str:
    result = load(path)
    rows = [
        [r["attack"], r["eot"], pct(r["undefended"]), pct(r["adp"])]
        for r in result["rows"]
    ]
    head = ["Attack", "EOT draws", "Undefended", "ADP (S = 10)"]
    return "\n".join([*markdown_table(head, rows), "", source(path, result)])


CORRUPTION_GROUPS = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "brightness"),
    "digital": ("contrast", "elastic_transform", "pixelate", "jpeg_compression"),
}
CORRUPTION_SHORT = {
    "gaussian_noise": "gauss", "shot_noise": "shot", "impulse_noise": "impulse", "defocus_blur": "defocus",
    "glass_blur": "glass", "motion_blur": "motion", "zoom_blur": "zoom", "snow": "snow", "frost": "frost",
    "fog": "fog", "brightness": "bright", "contrast": "contrast", "elastic_transform": "elastic",
    "pixelate": "pixel", "jpeg_compression": "jpeg",
}


def corruptions(path: str) -> str:
    result = load(path)
    groups = [[name, pct(r["clean"])] + [pct(sum(r[c] for c in cs) / len(cs)) for cs in CORRUPTION_GROUPS.values()]
              + [f"**{pct(r['mean'])}**"] for name, r in result["rows"].items()]
    per = [[name] + [pct(r[c]) for c in CORRUPTION_SHORT] for name, r in result["rows"].items()]
    return "\n".join([
        *markdown_table(["row", "clean", *CORRUPTION_GROUPS, "**mean of 75**"], groups), "",
        "Per corruption (accuracy %, each averaged over severities 1-5):", "",
        *markdown_table(["row", *CORRUPTION_SHORT.values()], per), "", source(path, result),
    ])


# The ADP paper's Table 4 (CIFAR-10-C, all 10,000 test images; its score model NCSNv2, its classifier a WideResNet-28-10;
# "Accuracy" is the mean of the 75 sets): (row, mean, noise, blur, weather, digital), as published.
PAPER_TABLE4 = (
    ("raw WideResNet", 71.89, 42.37, 72.74, 86.23, 78.83),
    ("ADP σ=0.25", 77.45, 84.68, 75.52, 77.98, 73.42),
    ("ADP σ=0.25 + detection", 78.96, 84.57, 71.76, 84.34, 76.60),
    ("ADP σ=0.1", 76.25, 86.88, 68.55, 78.88, 73.36),
    ("ADP σ=0", 80.49, 84.58, 73.12, 86.39, 78.89),
    ("ADP σ=0 + DCT", 80.74, 84.96, 73.11, 87.26, 78.69),
    ("ADP σ=0 + AugMix", 82.63, 87.52, 75.20, 88.82, 80.20),
    ("adversarial training (Zhang et al. 2019)", 75.63, 77.83, 78.37, 74.98, 71.88),
    ("AugMix-trained classifier (Hendrycks et al. 2020)", 88.78, 84.66, 89.68, 90.93, 88.47),
)


def corruptions_with_paper(path: str) -> str:
    """A corruption table (:func:`corruptions`) and, under it, the paper's Table 4 rows as published, in its columns."""
    rows = [[name, "–", *(f"{v:.2f}" for v in groups), f"**{mean:.2f}**"] for name, mean, *groups in PAPER_TABLE4]
    return "\n".join([
        corruptions(path), "",
        "The paper's Table 4 as published (CIFAR-10-C's 10,000 test images, NCSNv2 score model, WideResNet-28-10; no "
        "clean column):", "",
        *markdown_table(["row (paper)", "clean", *CORRUPTION_GROUPS, "**mean of 75**"], rows),
    ])  # fmt: skip


def corruption_constants(path: str) -> str:
    """The undefended classifier per corruption under CIFAR-10-C's own constants and under the ImageNet-C constants of
    the ``imagecorruptions`` package (``path``: the latter's run; the former's row is in the CIFAR-10 table)."""
    imagenet = load(path)
    cifar = load("docs/results/cifar10_corruptions.json")
    a, b = cifar["rows"]["resnet20 · undefended"], imagenet["rows"]["undefended"]
    columns = ["clean", *CORRUPTION_SHORT, "mean"]
    rows = [["CIFAR-10-C's constants (make_cifar_c.py)", *(pct(a[c]) for c in columns)],
            ["ImageNet-C's (imagecorruptions)", *(pct(b[c]) for c in columns)],
            ["difference (points)", *(f"{100 * (b[c] - a[c]):+.1f}" for c in columns)]]  # fmt: skip
    return "\n".join([*markdown_table(["ResNet-20, undefended", "clean", *CORRUPTION_SHORT.values(), "mean"], rows),
                      "", source(path, imagenet)])  # fmt: skip


def corruptions_summary(path: str) -> str:
    result = load(path)
    means = ", ".join(f"{name} {pct(r['mean'])} %" for name, r in result["rows"].items())
    return f"Mean accuracy over the 75 corrupted sets: {means}.\n\n{source(path, result)}"


def purify_speed(path: str) -> str:
    result = load(path)
    rows = [
        [
            f"{c['sigma']:g}", f"{c['tau']:g}", f"{pct(c['stopped_early_fraction'], 0)} %",
            f"{pct(c['evaluations_needed_fraction'], 0)} %", f"{c['overhead_over_floor']:.2f}",
            f"{c['speedup_over_baseline']:.2f}", f"{c['speedup_frozen_over_baseline']:.2f}",
        ]
        for c in result["curve"]
    ]
    head = ["σ", "τ", "samples stopping early", "evaluations needed (of 2·T·N·S)", "ours / floor",
            "speed-up over baseline (`compact=True`)", "speed-up, `compact=False`"]
    lev = result["levers_seconds"]
    base = lev["no_grad"]
    names = {
        "floor": "floor (the network forwards alone)", "baseline": "baseline (released-code loop)",
        "no_grad": "`torch.no_grad` (the default BPDA path)", "inference_mode": "`torch.inference_mode` instead",
        "compact": "`compact=True` with nothing stopping", "channels_last": "`channels_last` (network and input)",
        "adaptive_jvp": '`step_size="adaptive-jvp"` (exact ⟨h, J h⟩)',
    }
    levers = [[label, f"{lev[k]:.2f}", f"{lev[k] / base:.2f}"] for k, label in names.items() if k in lev]
    return "\n".join([
        f"{result['images']} digits test images × S = {result['runs']} runs, T = {result['steps']}.", "",
        *markdown_table(head, rows), "",
        "CPU levers at σ = 0.25, τ = 1e-3, in the same run:", "",
        *markdown_table(["lever", "time (s)", "vs `no_grad`"], levers), "", source(path, result),
    ])


def speed_summary(path: str) -> str:
    """README's one-paragraph summary of the speed figures (purification and checkpointing memory)."""
    result = load(path)
    memory_path = "benchmarks/results/memory.json"
    memory = load(memory_path)
    over = [c["overhead_over_floor"] for c in result["curve"]]
    speed = [c["speedup_over_baseline"] for c in result["curve"]]
    lev = result["levers_seconds"]
    return (
        f"Purification costs {min(over):.2f}–{max(over):.2f}× the network forwards it needs, runs "
        f"{min(speed):.2f}–{max(speed):.2f}× faster than the released code's loop structure, channels-last takes "
        f"{lev['channels_last'] / lev['no_grad']:.2f}× the time on CPU, and per-step gradient checkpointing cuts "
        f"full-gradient peak memory to {memory['memory_ratio']:.2f}×.\n\n{source(path, result)}\n{source(memory_path, memory)}"
    )


def eot_speed(path: str) -> str:
    result = load(path)
    rows = [
        [label, f"{r['seconds_per_image_iteration']:.3f}", f"{r['score_evaluations_per_s']:.0f}",
         f"{r['extrapolated_360x40_s']:,.0f} s ({r['extrapolated_360x40_s'] / 3600:.1f} h)"]
        for label, r in (("default", result["default"]), ("`channels_last=True`", result["channels_last"]))
    ]
    head = ["", "s per image·iteration", "score evaluations / s", "360 images × 40 iterations, extrapolated"]
    return "\n".join([f"{result['attack']}; timed: {result['images']} images × {result['iterations_timed']} "
                      "iterations.", "", *markdown_table(head, rows), "", source(path, result)])


def memory(path: str) -> str:
    result = load(path)
    p, c = result["plain"], result["checkpoint"]
    rows = [
        ["plain", f"{p['peak_above_start_mib']:,.0f} MiB", f"{p['seconds']:.1f} s", "—"],
        ["`gradient_checkpointing=True`", f"**{c['peak_above_start_mib']:,.0f} MiB ({result['memory_ratio']:.2f}×)**",
         f"{c['seconds']:.1f} s ({result['time_ratio']:.2f}×)",
         "identical" if result["same_gradient"] else "DIFFERENT"],
    ]
    return "\n".join([f"{result['images']} images, T = {result['steps']}, {result['network']}.", "",
                      *markdown_table(["", "peak above start", "time (forward + backward)", "gradient"], rows), "",
                      source(path, result)])


def memory_chunks(path: str) -> str:
    result = load(path)
    label = {"purify": "`ADPPurifier.forward`", "eot-predict": "`EOTClassifier.predict` (4 draws)"}
    rows = [[label.get(r["kind"], r["kind"]), f"{r['n']:,}", f"{r['peak_mib']:.0f}", f"{r['working_mib']:.0f}"]
            for r in result["rows"]]
    return "\n".join([*markdown_table(["call", "N images", "peak RSS (MiB)", "working memory above inputs and result (MiB)"],
                             rows), "", source(path, result)])


def preprocessing_chain(path: str) -> str:
    result = load(path)
    before_key = next(k for k in result if k.startswith("before"))
    before, after = result[before_key]["differing_pixel_fraction"], result["after"]["differing_pixel_fraction"]
    rows = [[name, f"{pct(before[name])} %", f"{pct(after[name])} %"] for name in before]
    return "\n".join([*markdown_table(["attack (name then)", before_key, "after (`art_adp.ensemble.logits`)"], rows), "",
                      source(path, result)])


def eot_memory(path: str) -> str:
    """Peak resident memory of one `art-adp evaluate` process against the EOT draws, before and after blocking."""
    result = load(path)
    out = []
    for part in result["parts"]:
        runs = [r for r in part["runs"] if "eot" in r]
        if not runs:
            out += [f"With the sanity checks on (`{r['command']}`): peak {r['peak_rss_mib']:,} MiB, {r['wall_s']:.0f} s."
                    for r in part["runs"]]
            continue
        eots = sorted({r["eot"] for r in runs})
        rows = [[f"{tree} ({part['trees'][tree]['commit'][:7]})",
                 *(f"{next(r['peak_rss_mib'] for r in runs if r['tree'] == tree and r['eot'] == k):,}" for k in eots)]
                for tree in part["trees"]]
        out += [f"`{part['command']}`:", "", *markdown_table(["peak RSS (MiB)", *(f"EOT {k}" for k in eots)], rows), ""]
    return "\n".join([*out, "", source(path, result)])


def eot_target(path: str) -> str:
    """benchmarks/README.md: one PGD+EOT direction with the ensemble's loss against the mean of per-draw losses."""
    result = load(path)
    rows = []
    for k in sorted({r["eot"] for r in result["runs"]}):
        by = {r["target"]: r for r in result["runs"] if r["eot"] == k}
        d, e = by["draws"], by["ensemble"]
        rows.append([k, f"{d['seconds']:.2f} s", f"{e['seconds']:.2f} s ({e['seconds'] / d['seconds']:.2f}×)",
                     f"{d['peak_rss_mib']:,}", f"{e['peak_rss_mib']:,}"])  # fmt: skip
    head = ["EOT draws", "mean of per-draw CE", "CE of the ensemble", "peak RSS, per draw (MiB)",
            "peak RSS, ensemble (MiB)"]  # fmt: skip
    return "\n".join([f"One direction on {result['images']} digits (median of the call's repeats), one thread, a fresh "
                      "process per cell:", "", *markdown_table(head, rows), "", source(path, result)])


def attack_step(path: str) -> str:
    """benchmarks/README.md: one CIFAR-10 attack step's gradient per mode and thread count, beside the FLOP floor."""
    result = load(path)
    rows = [[r["mode"], r["threads"], f"{r['ms_per_image_step']:.2f}", f"{r['vs_eager_fp32']:.2f}×",
             f"{r['floor_ms_per_image_step']:.2f}", f"{r['ratio_to_floor']:.1f}",
             "–" if r["compile_seconds"] is None else f"{r['compile_seconds']:.0f} s"] for r in result["rows"]]
    flops = result["flops_per_image_step"]
    peak = result["peak_flops_per_core"]
    lines = [
        f"Batch of {result['batch']}; the step's counted FLOPs per image: {flops['fp32'] / 1e9:.2f} GFLOP (the two "
        f"networks' convolutions and matrix products, forward and backward); the processor's peak per core at "
        f"{peak['mhz']:.0f} MHz: {peak['fp32'] / 1e9:.0f} GFLOP/s fp32, {peak['bf16'] / 1e9:.0f} GFLOP/s bf16 "
        f"({result['cpu']}; {result['instruction_sets']}); ResNet-20 {result['resnet20']}; load average "
        f"{result['load_avg_1min_at_start']:.1f} at the start" + (f"; compilation failed: {result['compile_failed']}"
                                                                  if result.get("compile_failed") else "") + ".", "",
        *markdown_table(["mode", "threads", "ms per image-step", "vs eager fp32", "floor (ms)", "× the floor", "compilation"],
               rows), "", source(path, result)]  # fmt: skip
    return "\n".join(lines)


def probe_rows(path: str) -> str:
    """benchmarks/README.md: one full-gradient pass through the digits' ADP per row, by the rows it is timed at, and
    the estimate's probe beside."""
    result = load(path)
    rows = [[r["rows"], f"{r['ms_per_row']:.1f}", f"{r['vs_largest']:.2f}×"] for r in result["rows"]]
    probe = result["probe"]
    return "\n".join([
        *markdown_table(["rows", "ms per row", "vs the most rows"], rows), "",
        f"The probe on the same machine: the forward pass timed at {probe['rows']} rows, "
        f"{1e3 * probe['forward']:.1f} ms per row; the full gradient at {probe['full_rows']} rows (one block of the "
        f"memory budget), {1e3 * probe['full']:.1f} ms per row.", "", source(path, result)])  # fmt: skip


def precision_agreement(path: str) -> str:
    """docs/attacks.md: an attack's rows in fp32 and in bf16 gradient passes on the same images and seeds
    (benchmarks/precision_agreement.py), image by image."""
    result = load(path)
    rows = [[r["attack"], r["n"], f"{pct(r['fp32'])} ± {pct(r['half_width']['fp32'])}",
             f"{pct(r['bf16'])} ± {pct(r['half_width']['bf16'])}", pct(r["agree"]),
             f"{len(r['broken_by_fp32_only'])} / {len(r['broken_by_bf16_only'])}", pct(r["worst_case"]),
             "yes" if r["holds"] else "**no**"] for r in result["rows"]]  # fmt: skip
    bf16 = {"provenance": result["runs"]["bf16"]}
    return "\n".join([
        *markdown_table(["row", "images", "fp32 (worst of R)", "bf16 (worst of R)", "agree (%)", "broken by one only: fp32 / bf16",
                "worst case over both", "rule holds"], rows), "",
        f"The bf16 folder's call: `{command(bf16)}` · {device(path, bf16)} · wall time "
        f"{wall(bf16['provenance']['wall_time_s'])}.", "", source(path, result)])  # fmt: skip


def train_speed(path: str) -> str:
    result = load(path)
    rows = [[r["mode"], r["ngf"], r["batch_size"], f"{r['samples_per_s']:,.1f}", f"{r['tflops_per_s']:.3f}",
             "-" if r.get("peak_memory_gib") is None else f"{r['peak_memory_gib']:.1f}"]
            for r in result["results"] if r["status"] == "ok"]
    head = ["mode", "ngf", "batch", "samples/s", "TFLOP/s", "peak GPU memory (GiB)"]
    return "\n".join([f"{result['network']}.", "", *markdown_table(head, rows), "", source(path, result)])


def compression(path: str) -> str:
    """docs/compression.md: the pooled settings table and the rank correlations of each run and of the pool."""
    pooled = load(path)
    runs = [load(r["file"]) for r in pooled["runs"]]
    rows = [[s["score"], f"{s['sigma']:g}", s["steps"], f"{s['compression_rate']['median']:.3f}",
             f"{s['fixed_clean_accuracy']:.3f} ({round(s['fixed_clean_accuracy'] * s['n'])}/{s['n']})",
             f"{s['fixed_attack_accuracy']:.3f} ({round(s['fixed_attack_accuracy'] * s['n'])}/{s['n']})"]
            for s in pooled["settings"]]

    def rho(r: dict) -> str:
        return f"ρ = {r['rho']:+.2f}".replace("+-", "−").replace("-", "−") + (f", p = {r['p_value']:.2f}" if "p_value" in r else "")

    results = [*runs, pooled]
    corr = [["all settings: rate vs attack accuracy", *(rho(r["spearman"]) for r in results)],
            ["all settings: rate vs attack / clean accuracy", *(rho(r["spearman_retained"]) for r in results)]]
    for key, within in pooled["spearman_within_sigma"].items():
        corr.append([f"within {key.replace('sigma=', 'σ = ')} (T = {', '.join(map(str, within['steps']))}; "
                     f"{within['nb_points']} points)", *(rho(r["spearman_within_sigma"][key]) for r in results)])
    heads = ["", *(f"run {i + 1} (images {r.get('first_example') or 0}–{(r.get('first_example') or 0) + r['n_examples'] - 1})"
                   for i, r in enumerate(pooled["runs"])), f"pooled ({pooled['n_examples']} images)"]
    return "\n".join([
        *markdown_table(["score", "σ", "T", "compression rate (median)", "fixed-noise clean", "fixed-noise attack"], rows), "",
        f"Spearman's ρ over {len(pooled['settings'])} settings (within-σ rows: only ρ, 3 or 4 points):", "",
        *markdown_table(heads, corr), "", *(source(r["file"], run) for r, run in zip(pooled["runs"], runs)), source(path, pooled),
    ])


def mnist_diagnostics(path: str) -> str:
    """docs/mnist.md: the learning curve's diagnostics per snapshot and the ADP step sweep of a reproduce run."""
    result = load(path)
    diag = {r["step"]: r for r in result["diagnostics"]["per_step"]}

    def pair(d: dict) -> str:
        return f"{pct(d['clean']['accuracy'], 0)} / {pct(d['clf_pgd']['accuracy'], 0)}"

    rows = [[c["step"], pair(diag[c["step"]]["noise"]), pair(diag[c["step"]]["denoise1"]),
             f"{pct(c['clean'] / c['n'], 0)} / {pct(c['clf_pgd'] / c['n'], 0)}", f"{c['denoising_ratio']:.2f}",
             f"{c['attack_ratio']:.2f}"] for c in result["curve"]]
    sweep = [[f"T {s['steps']}, λ {s['lam']:g}", f"{pct(s['closed'], 1)} %", pair(s)] for s in result["diagnostics"]["sweep"]]
    n, last = result["curve"][-1]["n"], result["curve"][-1]
    size = last.get("ensemble_size", last.get("runs"))  # "runs" in files written before S was ensemble_size
    return "\n".join([
        f"{result['scale']}; first {n} test images, S = {size}; accuracy in % (clean / Clf-PGD).", "",
        *markdown_table(["score iterations", "noise σ alone", "one-step denoise", "ADP (T 10, λ 0.05)", "denoising ratio",
                "attack-removal ratio"], rows), "",
        f"ADP sweep on the {result['curve'][-1]['step']}-iteration model:", "",
        *markdown_table(["steps", "gap closed, 1 − (1 − λ)^T", "clean / Clf-PGD"], sweep), "", source(path, result),
    ])


def upstream_notebook(path: str) -> str:
    result = load(path)
    labels = {"clean": "Clean", "preprocessor-blind": "Preprocessor-blind PGD", "BPDA": "BPDA PGD",
              "full gradient": "Full-gradient PGD (1 draw per step)"}
    rows = [[labels.get(k, k), f"{v['undefended']:.1f}", f"{v['adp']:.1f}"] for k, v in result["accuracy"].items()]
    v, p = result["versions"], result["provenance"]
    grads = [[labels.get(k, k).replace(" PGD", "").replace(" (1 draw per step)", ""), f"{g['mean_abs']:.2e}",
              f"{100 * g['zero_share']:.0f} %", "–" if g["same_sign_second_draw"] is None
              else f"{100 * g['same_sign_second_draw']:.0f} %"]
             for k, g in result["gradients_on_first_nb_probe_test_digits"].items()]
    return "\n".join([*markdown_table(["Attack", "Undefended", "ADP (S = 10)"], rows), "", *markdown_table(
        [f"Loss gradient, first {result['settings']['NB_PROBE']} test digits", "Mean magnitude", "Exactly 0",
         "Same sign in a second draw"], grads), "",
        f"Pixels whose noisy value leaves [0, 1] and is clipped, one draw: "
        f"{100 * result['pixels_clipped_after_noise_one_draw']:.0f} %.", "", (
        f"<sub>The notebook executed top to bottom with this PR's code (ART {v['art']} with the PR's `art/` files), "
        f"torch {v['torch']}, scikit-learn {v['scikit-learn']} · {p['device']} · {wall(p['wall_time_s'])} for the "
        "whole notebook.</sub>"), upstream_source(path, result)])


def upstream_source(path: str, result: dict) -> str:
    """The provenance of a figure in the ART pull request's description, as a comment a maintainer's view hides."""
    p = result["provenance"]
    return f"<!-- source: {path}, written by `{p['command']}` · code {p['code_version']} -->"


def upstream_checks(path: str) -> str:
    """ART's style gates and the PR's tests on dev_1.21.0, one row per configuration (upstream/check.sh)."""
    paths = [path, "upstream/results/pinned_tests_torch2.7.1.json", "upstream/results/check_torch2.13.0.json"]
    rows, sources = [], []
    for each in paths:
        r = load(each)
        gates = "pass" if not r["gates_failed"] else "fail: " + ", ".join(r["gates_failed"])
        rows.append([r["versions"]["python"], r["versions"]["torch"], r["passed"], r["skipped"],
                     f"{r['coverage_percent']:.0f} %", gates, wall(r["tests_wall_time_s"])])
        sources.append(upstream_source(each, r))
    v = load(path)["versions"]
    return "\n".join([*markdown_table(["Python", "PyTorch", "Passed", "Skipped", "Coverage of the new module",
                               "black, pycodestyle, pylint, mypy, ruff", "pytest run (with coverage)"], rows), "", (
        f"<sub>ART `dev_1.21.0` ({load(path)['art_base_commit'][:9]}) with this patch applied; black {v['black']}, "
        f"pycodestyle {v['pycodestyle']}, pylint {v['pylint']}, mypy {v['mypy']}, ruff {v['ruff']}, pytest "
        f"{v['pytest']}, numpy {v['numpy']}, scipy {v['scipy']}, scikit-learn {v['scikit-learn']} · "
        f"{load(path)['device']}.</sub>"), *sources])


def demo(path: str) -> str:
    result = load(path)
    acc = result["accuracy"]
    rows = [[name, pct(v["undefended"]), pct(v["adp"])] for name, v in acc.items()]
    return "\n".join(["```", *result["description"], "```", "", *markdown_table(["Attack", "Undefended", "ADP"], rows), "",
                      source(path, result)])


def purifier_comparison(path: str) -> str:
    """The side-by-side table of purifier families (``art_adp.apps.evaluation.compare.markdown``)."""
    from art_adp.apps.evaluation.compare import markdown

    result = load(path)
    return markdown(result) + "\n" + source(path, result)


def denoiser_training(path: str) -> str:
    """docs/mnist.md, docs/fashion_mnist.md: a DenoiserUNet's one-step denoising MSE per milestone (art-adp
    train-denoiser)."""
    result = load(path)
    curve = [r for r in result["curve"] if "mse" in r]
    levels = list(curve[0]["mse"])
    rows = [[r["step"], f"{r['samples']:,}", wall(r["train_seconds"]), r["samples_per_s"],
             *(f"{r['mse'][k]:.5f}" for k in levels)] for r in curve]  # fmt: skip
    if "linear_mse" in result:  # the yardstick, on the same images and noise
        rows.append(["best linear denoiser (Wiener filter of the training images)", "", "", "",
                     *(f"{result['linear_mse'][k]:.5f}" for k in levels)])  # fmt: skip
    s = result["settings"]
    return "\n".join([
        f"DenoiserUNet{tuple(s['channels'])}, {result['parameters']:,} parameters, trained on {s['n_train']:,} "
        f"training images (batch {s['batch_size']}, Adam {s['lr']:g}, {s['precision']}); one-step denoising MSE "
        "on the first 500 test images, [0, 1] pixels.", "",
        *markdown_table(["step", "samples", "training time", "samples/s", *(f"MSE at σ {k}" for k in levels)], rows), "",
        source(path, result),
    ])  # fmt: skip


def denoiser_bundled(path: str) -> str:
    """docs/cifar10.md: the bundled CIFAR-10 DenoiserUNet's training record (``art_adp/pretrained/bundled.json``'s
    ``made.cifar10``, written by ``python -m art_adp.apps.bundle``, copied with its provenance into ``path``): its
    one-step denoising MSE beside the best linear denoiser's."""
    result = load(path)
    t = result["training"]
    f, s, linear = t["final"], t["settings"], t["linear_mse"]
    levels = list(f["mse"])
    rows = [[f["step"], f"{f['samples']:,}", wall(t["training_seconds"]), f["samples_per_s"],
             *(f"{f['mse'][k]:.5f}" for k in levels)],
            ["best linear denoiser (Wiener filter of the training images)", "", "", "",
             *(f"{linear[k]:.5f}" for k in levels)]]  # fmt: skip
    return "\n".join([
        f"{result['about']}: batch {s['batch_size']}, Adam {s['lr']:g}, {s['precision']}, one-step denoising MSE on "
        "the first 500 development images, [0, 1] pixels.", "",
        *markdown_table(["step", "samples", "training time", "samples/s", *(f"MSE at σ {k}" for k in levels)], rows), "",
        source(path, result),
    ])  # fmt: skip


#: The attacks of docs/results/mnist_levers.json (written before levers tables recorded their rows), as it ran them.
MNIST_LEVERS_LABELS = {"clean": "clean", "clf-pgd": "Clf-PGD 40 × 0.01", "clf-pgd-strong": "Clf-PGD 100 × 0.025 (rs)",
                       "clf-pgd-eps/256": "Clf-PGD at ε 0.3/256", "bpda-eot": "BPDA+EOT 40 × 0.01",
                       "full-pgd-eot": "full-gradient PGD+EOT 40 × 0.01"}  # fmt: skip


def mnist_levers(path: str) -> str:
    """docs/mnist.md: ADP lever by lever on the MNIST development split (art-adp levers)."""
    result = load(path)
    order, names = list(MNIST_LEVERS_LABELS), MNIST_LEVERS_LABELS
    attacks = [a for a in order if any(c["attack"] == a for c in result["cells"])]
    groups: dict[tuple, dict] = {}
    for c in result["cells"]:
        if c.get("judge", "ensemble") == "ensemble" and "classifier" not in c:
            groups.setdefault((c["model"], c["setting"]), {})[c["attack"]] = c

    from art_adp.apps.levers_presets import SETTINGS

    label = {"none": "no purification", "oracle": "oracle (exact score)", "denoiser": "DenoiserUNet"}
    order = [*label, *(s.name for s in SETTINGS)]  # models, then settings, in their declared order

    def rank(key: tuple) -> tuple:
        return tuple(order.index(k) if k in order else len(order) for k in key)

    rows = [[label.get(m, m), s, *(cell(groups[(m, s)].get(a)) for a in attacks)] for m, s in sorted(groups, key=rank)]
    adaptive = next((c for c in result["cells"] if c["attack"] in ("bpda-eot", "full-pgd-eot")), None)
    extra = (f" Adaptive attacks: EOT {adaptive['eot_samples']} draws per gradient, judged worst of "
             f"R = {adaptive.get('repeats', 1)}." if adaptive else "")  # fmt: skip
    return "\n".join([
        "Accuracy in % [95 % Wilson interval] (digits), ε = 0.3 unless named; the defences judged on the S = "
        f"{result['cells'][-1].get('ensemble_size', 10)} ensemble (mean softmax); the undefended rows under "
        f"white-box PGD on that classifier.{extra}", "",
        *markdown_table(["score model", "setting", *(names[a] for a in attacks)], rows), "", source(path, result),
    ])  # fmt: skip


def cell(c) -> str:
    """An accuracy cell of the lever tables: % [95 % Wilson interval] (images), the one format."""
    from art_adp.runs.render import accuracy_cell

    if c is None:
        return ""
    return accuracy_cell(c["accuracy"], c["ci95"], c["n"], precision=c.get("precision", "fp32"))


SCORE_LABELS = {"none": "no purification", "oracle": "oracle (exact score)", "denoiser": "DenoiserUNet"}


def _behind(purifier: dict | None) -> str:
    """The purification a classifier was trained behind, in words (nothing for a bare one)."""
    if not purifier:
        return ""
    left = "; each training image left out of its own purification" if purifier.get("leave_out") is not None else ""
    model = SCORE_LABELS.get(purifier.get("model"), purifier.get("model"))
    return f" behind the {model}'s {purifier.get('setting')} (σ {purifier['params']['sigma']:g}{left})"


def _training(name: str, facts: dict, eps_text: str) -> str:
    arch = {"cnn": "SmallCNN", "mlp": "MLP (2 × 512)", "resnet20": "ResNet-20"}.get(facts.get("arch"), facts.get("arch"))
    at, purifier, plain = facts.get("adversarial_training"), facts.get("purifier"), facts.get("training")
    if facts.get("epochs") == 0:  # brought, not trained here
        return f"`{name}`: {arch}, a published classifier brought into the run folder, not trained here"
    if at and at.get("method") == "fgsm-rs":
        return (
            f"`{name}`: {arch}, fast adversarial training at ε {eps_text} (FGSM from a random start, step "
            f"{at['eps_step']:.4g}; {at['optimizer']}, {at['schedule']} peaking at {at['lr_max']:g}; "
            f"{at['augmentation']}) on {at['n_train']:,} training images, {at['n_validation']:,} held out to keep the "
            f"epoch of highest robust accuracy ({at['validation_attack']}): best epoch {at['best_epoch']} of "
            f"{at['epochs_trained']}, kept"
        )
    if not at and purifier and plain:
        return (
            f"`{name}`: {arch}, trained on purified inputs{_behind(purifier)}, each epoch purified afresh, on "
            f"{plain['n_train']:,} training images, {plain['n_validation']:,} held out to stop on clean accuracy "
            f"through the purifier (patience {plain['patience']}): best epoch {plain['best_epoch']} of "
            f"{plain['epochs_trained']}, kept"
        )
    if not at:
        return f"`{name}`: {arch}, trained on the training images ({facts.get('epochs', '?')} epochs)"
    through = f" through the purifier{_behind(purifier)}" if purifier else ""
    return (
        f"`{name}`: {arch}, PGD adversarial training at ε {eps_text}{through} ({at['max_iter']} steps of "
        f"{at['eps_step']:.4g} "
        f"per batch) on {at['n_train']:,} training images, {at['n_validation']:,} held out to stop on robust accuracy "
        f"({at['validation_attack']}; patience {at['patience']}): best epoch {at['best_epoch']} of "
        f"{at['epochs_trained']}, kept"
        + (f" (stopped by the cap of {at['max_epochs']} epochs, not by a plateau: a lower bound on what more epochs "
           "give)" if at.get("stopped_by") == "max_epochs" else "")
    )  # fmt: skip


def _who(c: dict, result: dict) -> str:
    """The score model, and for a defence the classifier behind it."""
    clf = c.get("classifier", result.get("classifier"))
    return SCORE_LABELS.get(c["model"], c["model"]) + (f" → {clf}" if clf and c["model"] != "none" else "")


#: The rows an attack's earlier measurements were recorded under: its names before (the vote attack was
#: ``systemic-lowfreq`` before it ran DiffBreak's loop) and its random-start row.
PREDECESSORS = {"lowfreq-vote": ("systemic-lowfreq",), "full-pgd-eot": ("full-pgd-eot (rs)",),
                "bpda-eot": ("bpda-eot (rs)",)}  # fmt: skip


def _same_weights(c: dict, result: dict, earlier: dict) -> bool:
    """Whether ``earlier`` measured the same weights as ``result`` for cell ``c``: its score model's and its
    classifier's hashes, where both results record one (the exact score has none: it is its training images)."""
    clf = c.get("classifier", result.get("classifier"))
    mine = result.get("provenance", {}).get("models", {})
    theirs = earlier.get("provenance", {}).get("models", {})
    return all(mine[k] == theirs[k] for k in (c["model"], clf) if k in mine and k in theirs)


def against_earlier(result: dict, earlier: dict, earlier_path: str) -> list[str]:
    """Each adaptive cell of ``result`` beside the earlier suite's on the same defence and images
    (``earlier_path``, a levers result): its strongest single attack and its per-image worst case, and the margin
    of each (points; negative: the new attack leaves fewer images robust). A cell whose score model or classifier was
    retrained since (other weights' hashes in the two provenances) has no earlier cells to be set against."""
    from art_adp.apps.levers_presets import VARIANT
    from art_adp.apps.levers_table import WORST_CASE

    adaptive = {r["name"] for r in result["rows"] if r["adaptive"]}
    lines = []
    for c in result["cells"]:
        if c["attack"] not in adaptive or c.get("judge", "ensemble") != "ensemble":
            continue
        if not _same_weights(c, result, earlier):
            continue  # a retrained model: the earlier cells measured other weights
        same = [e for e in earlier["cells"] if e.get("judge", "ensemble") == "ensemble" and e["model"] == c["model"]
                and e["setting"] == c["setting"] and e["n"] == c["n"]
                and e.get("classifier", earlier.get("classifier")) == c.get("classifier", result.get("classifier"))]
        singles = [e for e in same if e["attack"] not in ("clean", WORST_CASE)]  # fmt: skip
        if not singles:
            continue
        best = min(singles, key=lambda e: e["accuracy"])
        worst = next((e for e in same if e["attack"] == WORST_CASE), None)
        base = VARIANT.match(c["attack"])["row"] if VARIANT.match(c["attack"]) else c["attack"]
        own = min((e for e in singles if e["attack"] in (base, *PREDECESSORS.get(base, ()))),
                  key=lambda e: e["accuracy"], default=None)  # fmt: skip
        margin = lambda e: f"{100 * (c['accuracy'] - e['accuracy']):+.1f}" if e else ""  # noqa: E731
        lines.append([_who(c, result), c["setting"], c["attack"], cell(c), f"{own['attack']}: {cell(own)}" if own else
                      "", margin(own), f"{best['attack']}: {cell(best)}", margin(best), cell(worst), margin(worst)])  # fmt: skip
    if not lines:
        return []
    return [
        f"Against the earlier suite on the same images (`{earlier_path}`: the same attack as it ran then, with any "
        "random start; its strongest single attack, worst of its R; its per-image worst case over every attack it "
        "ran); margin in points, negative where the attack here leaves fewer images robust:", "",
        *markdown_table(["score model → classifier", "setting", "attack", "here", "earlier, same attack", "margin",
                "earlier strongest attack", "margin", "earlier per-image worst case", "margin"], lines), "",
    ]  # fmt: skip


def levers_page(result: dict, path: str, earlier: str | None = None) -> str:
    """A lever table of ``art-adp levers`` with its rows' labels (any data set): the paper's row beside the measured
    ones (one column per attack, adaptive rows worst of R), the four judgements of the adaptive rows, the
    classifiers' training, the provenance; with ``earlier`` (another levers result), each adaptive cell against that
    suite's strongest attack and per-image worst case on the same defence and images (:func:`against_earlier`)."""
    from art_adp.apps.levers_table import WORST_CASE
    from art_adp.attacks.registry import AUTOATTACK
    from art_adp.data import DATASETS

    eps = result["eps"]
    eps_text = f"{eps * 255:g}/255" if abs(eps * 255 - round(eps * 255)) < 1e-6 else f"{eps:g}"
    from art_adp.attacks.registry import LABELS

    labels = {r["name"]: r["label"] for r in result["rows"]}
    labels[WORST_CASE] = "**worst over every attack measured** (per image)"
    adaptive = {r["name"] for r in result["rows"] if r["adaptive"]}
    # the registry's attacks run as adaptive rows beyond the preset's (--attacks NAME): in the judgements table only
    attacks = [r["name"] for r in result["rows"] if any(c["attack"] == r["name"] for c in result["cells"])
               and not r.get("registry_row")]  # fmt: skip
    attacks += [WORST_CASE] if any(c["attack"] == WORST_CASE for c in result["cells"]) else []
    for name in dict.fromkeys(c["attack"] for c in result["cells"] if c["attack"] not in labels):
        labels[name], adaptive = LABELS.get(name, name), adaptive | {name}  # a table written before registry_row
    groups: dict[tuple, dict] = {}
    for c in result["cells"]:
        if c.get("judge", "ensemble") == "ensemble":
            who = _who(c, result)
            groups.setdefault((who, c["setting"]), {})[c["attack"]] = c
    blind = next((a for a in attacks if a not in adaptive and a not in ("clean", AUTOATTACK, WORST_CASE)), None)
    spec = DATASETS[result.get("dataset", "fashion-mnist")]  # a table from before it named its data set: Fashion-MNIST
    paper = {"clean": f"**{spec.paper_row[0]}**", blind: f"**{spec.paper_row[1]}**"} if spec.paper_row else {}
    rows = [[f"paper ({spec.paper_defence})", "ADP σ 0.25", *(paper.get(a, "") for a in attacks)]] if paper else []
    rows += [[who, setting, *(cell(by.get(a)) for a in attacks)] for (who, setting), by in groups.items()]
    judged = []
    two = any("worst of 2" in c.get("judgements", {}) for c in result["cells"])  # judged R > 2 times: worst of 2 too
    for c in result["cells"]:
        if c["attack"] in adaptive and c.get("judge", "ensemble") == "ensemble":
            fixed = next((f for f in result["cells"] if f.get("judge") == "fixed" and f["attack"] == c["attack"]
                          and f["model"] == c["model"] and f["setting"] == c["setting"]
                          and f.get("classifier") == c.get("classifier")), None)  # fmt: skip
            j = c.get("judgements", {})
            short = [cell({**v, "n": c["n"]}).rsplit(" (", 1)[0] if v else "" for v in
                     (j.get("mean"), *((j.get("worst of 2"),) if two else ()), j.get("worst"), j.get("majority"))]
            who = _who(c, result)
            judged.append([who, c["setting"], labels[c["attack"]], c["n"], c.get("eot_samples", ""),
                           c.get("repeats", 1), *short, cell(fixed).rsplit(" (", 1)[0] if fixed else ""])  # fmt: skip
    some = [c for c in result["cells"] if c["attack"] in adaptive and c.get("judge", "ensemble") == "ensemble"]
    eots = " or ".join(str(e) for e in sorted({c.get("eot_samples", 0) for c in some}))
    note = (f" Adaptive attacks: EOT {eots} draws per gradient (each row's in the second table); the table's cell is "
            f"the worst of R = {some[0].get('repeats', 1)} judgements." if some else "")  # fmt: skip
    if WORST_CASE in attacks:
        note += (" The last column counts an image as robust only if no attack of its line broke it, over the images "
                 "every one of those attacks was measured on (AutoAttack's rule; the line's attacks include those of "
                 "the second table).")  # fmt: skip
    out = [
        f"Accuracy in % [95 % Wilson interval] (images), ℓ∞ ε = {eps_text}; the defences judged on the S = "
        f"{result['cells'][-1].get('ensemble_size', 10)} ensemble (mean softmax); the undefended rows under "
        f"white-box attacks on that classifier.{note}", "",
        *markdown_table(["score model → classifier", "setting", *(labels[a] for a in attacks)], rows), "",
    ]  # fmt: skip
    if judged:
        out += ["The adaptive rows under each judgement (R fresh S-ensembles: mean, worst and majority of R; fixed "
                "noise: one frozen draw shared by the attack, run with EOT 1, and the judge):", "",
                *markdown_table(["score model → classifier", "setting", "attack", "images", "EOT", "R", "mean",
                        *(["worst of 2"] if two else []), "worst of R", "majority of R", "fixed noise"], judged),
                ""]  # fmt: skip
    if earlier:
        out += against_earlier(result, load(earlier), earlier)
    facts = result.get("classifiers", {})
    if facts:
        out += ["Classifiers: " + "; ".join(_training(k, v, eps_text) for k, v in facts.items()) + ".", ""]
    return "\n".join([*out, source(path, result)])


def mnist_new_attacks(path: str) -> str:
    """docs/mnist.md: the attacks of the later re-evaluations on the MNIST development split (art-adp levers)."""
    return levers_page(load(path), path)


def mnist_adv_cnn(path: str) -> str:
    """docs/mnist.md: the adversarially trained SmallCNN at ε 0.3 under AutoAttack, and ADP in front of it."""
    return levers_page(load(path), path)


def levers_result(path: str) -> str:
    """A table of ``art-adp levers`` (any data set), or of ``docs/publish.py --variants`` (its attack options side by
    side), as the levers render it."""
    return levers_page(load(path), path)


def ffdnet_result(path: str) -> str:
    """docs/your_model.md: a levers table whose denoiser is KAIR's FFDNet colour (examples/ffdnet_denoiser.py), its
    rows named so."""
    return levers_result(path).replace("| DenoiserUNet → ", "| FFDNet colour (KAIR) → ")


def levers_estimate(path: str, measured: Sequence[str] = ()) -> str:
    """The rows ``art-adp levers --estimate-only`` priced (``RUN_DIR/estimate.json``), less those the ``measured``
    result files hold: what was not run, and what it would cost."""
    result = load(path)
    done = set()
    for each in measured:
        table_ = load(each)
        done |= {f"{c.get('classifier') or table_['classifier']} ← {c['model']} | {c['setting']} | {c['attack']}"
                 for c in table_["cells"]}  # fmt: skip
    left = {row: seconds for row, seconds in result["by_row"].items() if row not in done}
    rows = [[row.replace(" | ", " · "), result["n_examples"], wall(seconds)] for row, seconds in left.items()]
    return "\n".join([
        "Not measured here: each row's estimated time on the device below, from the attack registry's cost model and a "
        "timed probe of the purifier (one thread; a probe under load overstates an idle core).", "",
        *markdown_table(["classifier ← purifier · setting · attack", "images", "estimated time"], rows), "",
        f"Total: {wall(sum(left.values()))}.", "", source(path, result),
    ])  # fmt: skip


def cifar10_not_run(path: str) -> str:
    """docs/cifar10.md: the priced rows neither CIFAR-10 table holds."""
    return levers_estimate(path, ("docs/results/cifar10_levers.json", "docs/results/cifar10_more.json",
                                  "docs/results/cifar10_full_gradient.json"))


def cifar10_not_run_best(path: str) -> str:
    """docs/cifar10_results.md: the adaptive rows of the best purification settings not measured, priced."""
    return levers_estimate(path, ("docs/results/cifar10_learned.json", "docs/results/cifar10_full_gradient_unclipped.json",
                                  "docs/results/cifar10_sigma.json", "docs/results/cifar10_adv_behind_purifier.json"))


#: The answer table of each data-set page: the levers tables it draws on (the first holds the adversarially trained
#: classifier it is set beside) and that classifier's name.
ANSWERS: dict[str, tuple[tuple[str, ...], str]] = {
    "fashion-mnist": (tuple(f"docs/results/fashion_mnist_{n}.json" for n in (
        "levers", "full_strength", "full_strength_attacks", "full_strength_adv_cnn", "full_strength_denoiser",
        "full_strength_denoiser_adv_cnn", "behind_purifier", "adv_behind_purifier",
        "behind_denoiser", "adv_behind_denoiser", "attack_options", "cnn_denoiser", "adv_cnn_denoiser")), "adv-cnn"),
    "mnist": (tuple(f"docs/results/mnist_{n}.json" for n in (
        "adv_cnn_plateau", "levers", "new_attacks", "full_strength", "full_strength_denoiser", "adv_cnn",
        "behind_purifier", "adv_behind_purifier", "behind_denoiser", "attack_options")), "adv-cnn"),
    "cifar10": (tuple(f"docs/results/cifar10_{n}.json" for n in (
        "baseline", "levers", "more", "full_gradient", "clip", "full_gradient_unclipped", "learned", "sigma",
        "adv_behind_purifier", "tiniest", "adv_denoiser")), "adv-resnet20"),
}  # fmt: skip


def _sees_the_defence(attack: str, result: dict) -> bool:
    """Whether an attack of a levers table takes its gradient through the defence (an adaptive row), rather than
    the preprocessor-blind Clf-PGD; a table written before it recorded its rows (mnist_levers.json) names Clf-PGD
    ``clf-pgd...``."""
    adaptive = {r["name"]: r["adaptive"] for r in result.get("rows", [])}
    return adaptive.get(attack, not attack.startswith("clf-pgd"))


def _attack_label(attack: str, result: dict) -> str:
    from art_adp.attacks.registry import LABELS

    labels = {r["name"]: r["label"] for r in result.get("rows", [])} or MNIST_LEVERS_LABELS
    return labels.get(attack, LABELS.get(attack, attack))


def _defences(paths: Sequence[str]) -> dict[tuple, dict[str, dict]]:
    """Every defence the levers tables of ``paths`` measured, judged on the ensemble, keyed by what it is: (score
    model, its weights' SHA-256, setting, classifier, its weights' SHA-256; None where a table recorded no hash), with
    its cells per result file. A bare classifier is the defence "no purification"; a table that names no classifier
    (mnist_levers.json) measured the MLP."""
    from art_adp.apps.levers_table import WORST_CASE

    found: dict[tuple, dict[str, dict]] = {}
    for path in paths:
        result = load(path)
        models = result["provenance"]["models"] if isinstance(result["provenance"]["models"], dict) else {}
        for c in result["cells"]:
            if c.get("judge", "ensemble") != "ensemble":
                continue
            if c["model"] == "none":
                setting, clf = "no purification", c["setting"]
            else:
                setting, clf = c["setting"], c.get("classifier") or result.get("classifier") or "mlp"
            key = (c["model"], models.get(c["model"]), setting, clf, models.get(clf))
            found.setdefault(key, {}).setdefault(path, {})[c["attack"]] = c
    assert all(WORST_CASE not in cells or len(cells) > 1 for d in found.values() for cells in d.values())
    return found


def _under_attack(cells_by_file: dict[str, dict], bare: bool) -> tuple | None:
    """The lowest robust accuracy a defence was left with, over its result files: per file, the per-image worst case
    over every attack of its line where the table recorded one, else its strongest single attack; only attacks that
    see the defence count (every attack on a bare classifier is white-box). (cell, file, attacks, per image) or None
    where only the preprocessor-blind attack was run."""
    from art_adp.apps.levers_table import WORST_CASE

    found = []
    for path, cells in cells_by_file.items():
        result = load(path)
        attacks = {a: c for a, c in cells.items() if a not in ("clean", WORST_CASE)}
        if not attacks or not (bare or any(_sees_the_defence(a, result) for a in attacks)):
            continue
        if WORST_CASE in cells:
            found.append((cells[WORST_CASE], path, attacks, True))
        else:
            counted = {a: c for a, c in attacks.items() if bare or _sees_the_defence(a, result)}
            strongest = min(counted, key=lambda a: counted[a]["accuracy"])
            found.append((counted[strongest], path, attacks, False))
    # the lowest figure; on a tie, a per-image worst case before a single attack, then the most images
    return min(found, key=lambda f: (f[0]["accuracy"], not f[3], -f[0]["n"]), default=None)


#: The judgement an answer table compares defences at: the worst of this many fresh judgements (the README's).
ANSWER_REPEATS = 10


def answer(dataset: str) -> str:
    """The answer table of a data-set page: each defence's clean accuracy and its per-image worst case under attack
    (:func:`_under_attack`), highest first, the adversarially trained classifier in bold, a purified defence only
    where judged at the worst of :data:`ANSWER_REPEATS`; then those judged more leniently, named apart; then the
    defences measured only under the preprocessor-blind attack."""
    paths, baseline = ANSWERS[dataset]
    defences = _defences(paths)
    # a model whose name other weights share on the page is named with its weights' SHA-256, as the provenance
    # lines print it
    hashes: dict[str, set] = {}
    for model, model_hash, _, clf, clf_hash in defences:
        hashes.setdefault(model, set()).add(model_hash)
        hashes.setdefault(clf, set()).add(clf_hash)
    names = {}
    for model, model_hash, setting, clf, clf_hash in defences:
        purifier = SCORE_LABELS.get(model, model) + (f" {model_hash[:12]}" if len(hashes[model]) > 1 else "")
        names[model, model_hash, setting, clf, clf_hash] = [
            purifier + ("" if model == "none" else f" · {setting}"),
            clf + (f" {clf_hash[:12]}" if len(hashes[clf]) > 1 and clf_hash else "")]
    rows, blind, clean_only, lenient = [], [], [], []
    for key, cells_by_file in defences.items():
        cleans = [cells["clean"] for cells in cells_by_file.values() if "clean" in cells]
        clean = max(cleans, key=lambda c: c["n"], default=None)  # the most images; on a tie, the first file's
        bare = key[0] == "none"
        worst = _under_attack(cells_by_file, bare)
        purifier, clf = names[key]
        if bare and key[3] == baseline and key[4] == load(paths[0])["provenance"]["models"].get(baseline):
            clf = f"**{clf}: adversarial training**"
        if worst is None:
            attacks = {a: c for cells in cells_by_file.values() for a, c in cells.items() if a != "clean"}
            if not attacks:
                clean_only.append(f"{purifier} → {clf} {cell(clean)}")
                continue
            lowest = min(attacks.values(), key=lambda c: c["accuracy"])
            blind.append(f"{purifier} → {clf} {pct(clean['accuracy']) if clean else '–'} / "
                         f"{pct(lowest['accuracy'])} ({lowest['n']})")  # fmt: skip
            continue
        c, path, attacks, per_image = worst
        result = load(path)
        repeats = max((a.get("repeats") or 1 for a in attacks.values()), default=1)
        if not bare and repeats < ANSWER_REPEATS:  # judged leniently: named below the table, not compared in it
            lenient.append((c["accuracy"], f"{purifier} → {clf} {pct(clean['accuracy']) if clean else '–'} / "
                            f"{pct(c['accuracy'])} ({c['n']}; worst of R = {repeats}, `{Path(path).stem}`)"))
            continue
        judged = "once (no purifier)" if bare else f"worst of R = {repeats}"
        # the strongest attack alone among those that see the defence, on the images of the figure where it can
        counted = {a: x for a, x in attacks.items() if bare or _sees_the_defence(a, result)}
        counted = {a: x for a, x in counted.items() if x["n"] == c["n"]} or counted
        strongest = min(counted, key=lambda a: counted[a]["accuracy"])
        label = _attack_label(strongest, result)
        if bare:  # Clf-PGD on a bare classifier is white-box PGD
            label = label.replace("Clf-PGD (preprocessor-blind)", "white-box PGD").replace("Clf-PGD", "white-box PGD")
        if per_image:
            what = (f"per image over {len(attacks)} attack{'s' * (len(attacks) > 1)}; strongest alone: {label}, "
                    f"{pct(counted[strongest]['accuracy'])}")  # fmt: skip
        else:
            what = f"strongest single attack (no per-image worst case recorded): {label}"
        rows.append((c["accuracy"], clean["accuracy"] if clean else 0, [
            purifier, clf, cell(clean) or "not measured", f"**{cell(c)}**", judged, what, f"`{Path(path).stem}`"]))
    rows.sort(key=lambda r: (-r[0], -r[1]))
    lenient.sort(key=lambda r: -r[0])
    out = [
        "Accuracy in % [95 % Wilson interval] (images). Under attack: the lowest figure of the result files that "
        "measured the defence (the same weights, by SHA-256), the per-image worst case over every attack of its line "
        "where the file records one (no file merges another's records). Only attacks that see the defence count: "
        "adaptive ones through the purifier, white-box ones on a bare classifier.", "",
        *markdown_table(["purifier", "classifier", "clean", "under attack", "judged", "attacks", "result file"],
               [r[2] for r in rows]),
    ]  # fmt: skip
    if lenient:
        out += ["", f"Judged only at the worst of fewer than R = {ANSWER_REPEATS} judgements, so not set beside the "
                "rows above (a lenient judgement credits images a resubmitted query breaks: each figure bounds its "
                f"worst of {ANSWER_REPEATS} from above; clean / under attack in %, images): "
                + "; ".join(r[1] for r in lenient) + "."]  # fmt: skip
    if blind:
        out += ["", "Measured only under the preprocessor-blind Clf-PGD, which does not see the purifier (clean / "
                "Clf-PGD in %, images): " + "; ".join(blind) + "."]  # fmt: skip
    if clean_only:
        out += ["", "Measured clean only, under no attack yet (%, [95 % Wilson interval] (images)): "
                + "; ".join(clean_only) + "."]  # fmt: skip
    first = load(paths[0])
    return "\n".join([*out, "", source(paths[0], first)])


def fashion_mnist_answer(path: str) -> str:
    """docs/fashion_mnist.md: the answer table (:func:`answer`)."""
    return answer("fashion-mnist")


def mnist_answer(path: str) -> str:
    """docs/mnist.md: the answer table (:func:`answer`)."""
    return answer("mnist")


def cifar10_answer(path: str) -> str:
    """docs/cifar10.md: the answer table (:func:`answer`)."""
    return answer("cifar10")


def fashion_mnist_levers(path: str) -> str:
    """docs/fashion_mnist.md: ADP lever by lever on Fashion-MNIST at ε = 8/255 (art-adp levers)."""
    return levers_page(load(path), path)


def fashion_mnist_full_strength(path: str) -> str:
    """docs/fashion_mnist.md: the attacks at full strength, each cell against the earlier suite's on the same
    images (docs/results/fashion_mnist_levers.json)."""
    return levers_page(load(path), path, earlier="docs/results/fashion_mnist_levers.json")


def mnist_full_strength(path: str) -> str:
    """docs/mnist.md: the attacks at full strength, each cell against the earlier suite's on the same images
    (docs/results/mnist_new_attacks.json)."""
    return levers_page(load(path), path, earlier="docs/results/mnist_new_attacks.json")


def budget_curve(path: str) -> str:
    """docs/fashion_mnist.md: robust accuracy against the attack's iterations, EOT draws and runs
    (benchmarks/budget_curve.py), as a table and the committed plot beside the result file."""
    r = load(path)
    rows = [
        [p["max_iter"], p["eot_samples"], p["restarts"], f"{pct(p['accuracy'])} [{pct(p['ci95'][0], 0)}–"
         f"{pct(p['ci95'][1], 0)}] ({p['n']})", wall(p["wall_time_s"]), wall(p["priced_s"])]
        for p in r["points"]
    ]  # fmt: skip
    image = Path(path).with_suffix(".png").name
    return "\n".join([
        f"Robust accuracy in % [95 % Wilson interval] (images), ℓ∞ ε = {r['eps'] * 255:.0f}/255: {r['defence']}; "
        f"attack: {r['attack']}, restarts on the images left unbroken; judged on {r['judge']}. Each point is one "
        "call: its wall time on one core, and its price by `art-adp levers ... --estimate-only` (the attack registry's "
        "cost model and a timed probe of the purifier, taken on the same machine when the curve was collected).", "",
        *markdown_table(["iterations", "EOT draws", "runs", "robust accuracy", "wall time", "priced"], rows), "",
        f"![robust accuracy against the budget]({Path(path).relative_to('docs').parent.as_posix()}/{image})", "",
        source(path, r),
    ])  # fmt: skip


def draws_curve(path: str) -> str:
    """docs/attacks.md: one row at several EOT draw counts (benchmarks/draws_curve.py), image by image against the
    point of the most draws, each point's call beside."""
    r = load(path)
    row, most = r["row"], r["points"][-1]["eot_samples"]
    rows = [[p["eot_samples"], f"{pct(p['accuracy'])} [{pct(p['ci95'][0], 0)}–{pct(p['ci95'][1], 0)}] ({p['n']})",
             ", ".join(map(str, p["broken_only_here"])) or "none", ", ".join(map(str, p["left_only_here"])) or "none",
             wall(p["provenance"]["wall_time_s"]), p["provenance"]["code_version"]] for p in r["points"]]  # fmt: skip
    first = r["points"][0]
    lines = [
        f"Robust accuracy in % [95 % Wilson interval] (images), ℓ∞ ε = {r['eps'] * 255:.0f}/255 on {row['dataset']}: "
        f"`{row['attack']}` on {row['model']} · {row['setting']} → {row['classifier']}, judged worst of R = "
        f"{row['repeats']} (S = {first['ensemble_size']}), the same images and seeds at every draw count; the images "
        f"by index against EOT {most}.", "",
        *markdown_table(["EOT draws", "robust accuracy", f"breaks, EOT {most} leaves", f"leaves, EOT {most} breaks",
                         "wall time", "code"], rows), "",
    ]  # fmt: skip
    return "\n".join([*lines, source(path, r)])


def gpu_throughput(path: str) -> str:
    """benchmarks/README.md: ``benchmarks/gpu.py`` on a GPU -- purification images/s per path, against the forward floors."""
    r = load(path)
    n, runs, steps = r["images"], r["runs"], r["steps"]
    names = {"baseline": "the released code's loop", "ours": "purify, fp32", "compact": "purify, compact",
             "channels_last": "purify, fp32, channels_last", "jvp": "purify, JVP step, fp32",
             "bfloat16_channels_last": "purify, JVP step, bf16 autocast, channels_last",
             "compiled_bfloat16_channels_last": "the same, torch.compile"}  # fmt: skip
    rows = [[names.get(k, k), f"{v:.1f}"] for k, v in r["images_per_s"].items()]
    sec = r["seconds"]
    floors = [f"fp32 {n / r['floor_s']:.1f} images/s (a forward {sec['forward_batch_1000']:.3f} s)"]
    if "floor_bfloat16_s" in r:
        floors.append(f"bf16 with channels_last {n / r['floor_bfloat16_s']:.1f} images/s (a forward "
                      f"{sec['forward_batch_1000_bfloat16_channels_last']:.3f} s)")  # fmt: skip
    return "\n".join([
        f"{r['network']}, {n} images × S {runs} × T {steps} (τ = {r['tau']:g}: every sample takes all T steps). The "
        f"floor of any implementation at two network forwards per step (batch {n * runs}): {'; '.join(floors)}.", "",
        *markdown_table(["path", "images/s"], rows), "",
        source(path, r),
    ])  # fmt: skip


def first_hour(path: str) -> str:
    """benchmarks/README.md: the README's two set-up commands on a fresh clone, each phase timed (first_hour.py)."""
    r = json.loads((ROOT / path).read_text(encoding="utf-8"))
    p = r["provenance"]
    rows = []
    for run in r["runs"]:
        low, high = run["load_avg_1min"]
        for (phase, _), (key, sec) in zip(run["phases"], run["seconds"].items()):
            rows.append([f"`{run['command'].split('&& ')[-1]}`: {phase}", wall(sec), f"{low:.1f} → {high:.1f}"])
    load = r["load"]
    setup = ("a busy loop pinned to one core" if load["busy_loop_on_one_core"] else "no busy loop; the machine's "
             "other jobs as the load average shows") + (", an empty pip cache" if load["fresh_pip_cache"] else "")
    return "\n".join([
        f"A fresh clone of {r['commit'][:9]}, {setup}. Budgets: the demo 5 minutes, pytest 8 minutes.", "",
        *markdown_table(["command: phase", "wall time", "load average (1 min) before → after"], rows), "",
        f"<sub>Rendered from `{path}` by `docs/render.py`: `{p['command']}` · {p['device']} · wall time "
        f"{wall(p['wall_time_s'])} · code {p['code_version']}.</sub>",
    ])  # fmt: skip


def smoke_evaluate(path: str) -> str:
    """benchmarks/README.md: the smoke evaluation after the demo, timed (/usr/bin/time -v), against its budget."""
    r = json.loads((ROOT / path).read_text(encoding="utf-8"))
    p = r["provenance"]
    rows = [[run["what"], f"{run['load_avg_1min'][0]:.1f} to {run['load_avg_1min'][1]:.1f}", wall(run["wall_s"]),
             f"{wall(run['user_s'] + run['system_s'])} ({run['cpu_percent']} % of a core)", run["estimate"],
             run["code_version"]] for run in r["runs"]]  # fmt: skip
    return "\n".join([
        f"{r['about']}; the budget: {wall(r['budget_s'])} of wall time on two cores.", "",
        *markdown_table(["beside it", "load average (1 min)", "wall time", "CPU time (user + system)",
                "its own estimate at the start", "code"], rows), "",
        f"<sub>Rendered from `{path}` by `docs/render.py`: `{p['command']}` · {p['device']} · wall time "
        f"{wall(p['wall_time_s'])} · code {p['code_version']}.</sub>",
    ])  # fmt: skip


def _kernels(processor: str | None) -> str:
    """A recorded processor in short: ``AMD EPYC 25/1, AVX2`` (family/model, the widest kernels it had)."""
    m = re.match(r"CPU (.*?)(?: \(family (\d+), model (\d+)\))?; ([^;]*)(?:; no ([^;]*))?;", processor or "")
    if not m:
        return "-"
    have = m[4].split(", ")
    isa = "AVX-512" if "AVX-512" in have else "AVX2" if "AVX2" in have else "no AVX2"
    return f"{m[1]}{f' {m[2]}/{m[3]}' if m[2] else ''}, {isa}{', AMX' if 'AMX' in have else ''}"


def zoo_table(path: str) -> str:
    """
    The zoo's entries (``zoo/manifest.json``): per entry its kind, the size of its file, the processor and kernels of
    its first training (those that give its weights again, bit for bit: docs/zoo.md), how the shipped weights were
    made and the result files that record them; the total of the files the repository ships.
    """
    entries = json.loads((ROOT / path).read_text(encoding="utf-8"))["entries"]
    rows, total, files = [], 0, 0
    for name, e in entries.items():
        status = e.get("status", "")
        if e.get("bundled"):
            kind, made, size = "bundled", "in the package", (ROOT / "art_adp" / e["bundled"]).stat().st_size
        elif e.get("source"):
            kind, made, size = "third-party", f"converted from `{e['source']['repository']}`", None
        elif e.get("file"):
            size = (ZOO / e["file"]).stat().st_size
            total, files = total + size, files + 1
            kind = "shipped" + (", fp16" if e.get("stored") else "")
            version = (e.get("training") or {}).get("code_version", "")
            made = ("trained again: bit-identical" if "bit-identical" in status
                    else "trained again: other weights, rows measured again" if "measured again" in status
                    else f"trained on uncommitted code (its record: {version.rpartition('(')[2].rstrip(')')})"
                    if version.endswith("-dirty)") else "trained from a clean commit")  # fmt: skip
        else:
            kind, made, size = "not shipped", status.removeprefix("not shipped: ").split(";")[0], None
        used = ", ".join(f"`{Path(r).stem}`" for r in e.get("results", []))
        mb = f"{size / 1e6:.1f}" if size is not None else "-"
        processor = _kernels((e.get("training") or {}).get("processor"))
        rows.append(f"| `{name}` | {kind} | {mb} | {processor} | {made} | {used} |")
    head = ["| entry | kind | MB | first trained on | weights | recorded by |", "|---|---|---|---|---|---|"]
    foot = f"The repository ships {files} files, {total / 1e6:.1f} MB in all (the bundled ones are the package's)."
    return "\n".join(head + rows) + "\n\n" + foot + "\n"


FIGURES: dict[str, tuple[str, Callable[[str], str]]] = {
    "demo": ("docs/results/demo.json", demo),
    "smoke-evaluate": ("benchmarks/results/smoke_evaluate_amd-epyc.json", smoke_evaluate),
    "purifiers-digits-smoke": ("docs/cards/digits_purifiers_smoke.json", purifier_comparison),
    "denoiser-mnist": ("docs/results/denoiser_mnist.json", denoiser_training),
    "denoiser-fashion-mnist": ("docs/results/denoiser_fashion_mnist.json", denoiser_training),
    "denoiser-fashion-mnist-seeded": ("docs/results/denoiser_fashion_mnist_seeded.json", denoiser_training),
    "denoiser-mnist-fp32": ("docs/results/denoiser_mnist_fp32.json", denoiser_training),
    "denoiser-mnist-seeded": ("docs/results/denoiser_mnist_seeded.json", denoiser_training),
    "denoiser-cifar10": ("docs/results/denoiser_cifar10.json", denoiser_bundled),
    "fashion-mnist-answer": ("docs/results/fashion_mnist_levers.json", fashion_mnist_answer),
    "mnist-answer": ("docs/results/mnist_adv_cnn_plateau.json", mnist_answer),
    "cifar10-answer": ("docs/results/cifar10_baseline.json", cifar10_answer),
    "cifar10-levers": ("docs/results/cifar10_levers.json", levers_result),
    "cifar10-full-gradient": ("docs/results/cifar10_full_gradient.json", levers_result),
    "cifar10-more": ("docs/results/cifar10_more.json", levers_result),
    "cifar10-clip": ("docs/results/cifar10_clip.json", levers_result),
    "cifar10-full-gradient-unclipped": ("docs/results/cifar10_full_gradient_unclipped.json", levers_result),
    "cifar10-learned": ("docs/results/cifar10_learned.json", levers_result),
    "cifar10-baseline": ("docs/results/cifar10_baseline.json", levers_result),
    "cifar10-sigma": ("docs/results/cifar10_sigma.json", levers_result),
    "cifar10-adv-behind-purifier": ("docs/results/cifar10_adv_behind_purifier.json", levers_result),
    "cifar10-tiniest": ("docs/results/cifar10_tiniest.json", levers_result),
    "cifar10-adv-denoiser": ("docs/results/cifar10_adv_denoiser.json", levers_result),
    "cifar10-ffdnet": ("docs/results/cifar10_ffdnet.json", ffdnet_result),
    "cifar10-ffdnet-yardstick": ("docs/results/cifar10_ffdnet_yardstick.json", levers_result),
    "cifar10-not-run": ("docs/results/cifar10_not_run.json", cifar10_not_run),
    "cifar10-not-run-best": ("docs/results/cifar10_not_run_best.json", cifar10_not_run_best),
    "cifar10-not-run-paper": ("docs/results/cifar10_not_run_paper.json", levers_estimate),
    "fashion-mnist-clip": ("docs/results/fashion_mnist_clip.json", levers_result),
    "fashion-mnist-attack-options": ("docs/results/fashion_mnist_attack_options.json", levers_result),
    "fashion-mnist-attack-defaults": ("docs/results/fashion_mnist_attack_defaults.json", levers_result),
    "mnist-attack-defaults": ("docs/results/mnist_attack_defaults.json", levers_result),
    "mnist-attack-options": ("docs/results/mnist_attack_options.json", levers_result),
    "mnist-levers": ("docs/results/mnist_levers.json", mnist_levers),
    "fashion-mnist-levers": ("docs/results/fashion_mnist_levers.json", fashion_mnist_levers),
    "fashion-mnist-full-strength": ("docs/results/fashion_mnist_full_strength.json", fashion_mnist_full_strength),
    "fashion-mnist-full-strength-attacks": (
        "docs/results/fashion_mnist_full_strength_attacks.json",
        fashion_mnist_full_strength,
    ),
    "fashion-mnist-behind-purifier": ("docs/results/fashion_mnist_behind_purifier.json", fashion_mnist_levers),
    "fashion-mnist-behind-denoiser": ("docs/results/fashion_mnist_behind_denoiser.json", fashion_mnist_levers),
    "fashion-mnist-cnn-denoiser": ("docs/results/fashion_mnist_cnn_denoiser.json", fashion_mnist_levers),
    "fashion-mnist-adv-cnn-denoiser": ("docs/results/fashion_mnist_adv_cnn_denoiser.json", fashion_mnist_levers),
    "fashion-mnist-adv-behind-denoiser": ("docs/results/fashion_mnist_adv_behind_denoiser.json", fashion_mnist_levers),
    "fashion-mnist-adv-behind-purifier": ("docs/results/fashion_mnist_adv_behind_purifier.json", fashion_mnist_levers),
    "fashion-mnist-budget-curve": ("docs/results/fashion_mnist_budget_curve.json", budget_curve),
    "fashion-mnist-apgd-draws": ("docs/results/fashion_mnist_apgd_draws.json", draws_curve),
    "cifar10-apgd-draws": ("docs/results/cifar10_apgd_draws.json", draws_curve),
    "fashion-mnist-schedules": ("docs/results/fashion_mnist_schedules.json", levers_result),
    "cifar10-schedules": ("docs/results/cifar10_schedules.json", levers_result),
    "fashion-mnist-apgd-t": ("docs/results/fashion_mnist_apgd_t.json", levers_result),
    "mnist-apgd-t": ("docs/results/mnist_apgd_t.json", levers_result),
    "mnist-apgd-intel": ("docs/results/mnist_apgd_intel.json", levers_result),
    "mnist-apgd-t-cnn": ("docs/results/mnist_apgd_t_cnn.json", levers_result),
    "mnist-apgd-intel-cnn": ("docs/results/mnist_apgd_intel_cnn.json", levers_result),
    "mnist-new-attacks": ("docs/results/mnist_new_attacks.json", mnist_new_attacks),
    "fashion-mnist-full-strength-denoiser": (
        "docs/results/fashion_mnist_full_strength_denoiser.json",
        fashion_mnist_full_strength,
    ),
    "fashion-mnist-full-strength-adv-cnn": (
        "docs/results/fashion_mnist_full_strength_adv_cnn.json",
        fashion_mnist_full_strength,
    ),
    "fashion-mnist-full-strength-denoiser-adv-cnn": (
        "docs/results/fashion_mnist_full_strength_denoiser_adv_cnn.json",
        fashion_mnist_full_strength,
    ),
    "mnist-full-strength": ("docs/results/mnist_full_strength.json", mnist_full_strength),
    "mnist-full-strength-denoiser": ("docs/results/mnist_full_strength_denoiser.json", mnist_full_strength),
    "mnist-adv-cnn": ("docs/results/mnist_adv_cnn.json", mnist_adv_cnn),
    "mnist-adv-cnn-plateau": ("docs/results/mnist_adv_cnn_plateau.json", mnist_adv_cnn),
    "mnist-behind-purifier": ("docs/results/mnist_behind_purifier.json", mnist_adv_cnn),
    "mnist-adv-behind-purifier": ("docs/results/mnist_adv_behind_purifier.json", mnist_adv_cnn),
    "mnist-behind-denoiser": ("docs/results/mnist_behind_denoiser.json", mnist_adv_cnn),
    "card-digits-strongest-4-page": ("docs/cards/digits_strongest_4.json", card_page),
    "card-digits-paper-20": ("docs/cards/digits_paper_20.json", card_table),
    "card-digits-paper-20-page": ("docs/cards/digits_paper_20.json", card_page),
    "card-digits-smoke-page": ("docs/cards/digits_smoke.json", card_page),
    "eot-digits": ("docs/eot_digits_cpu.json", eot_digits),
    "corruptions-digits": ("docs/corruptions_digits.json", corruptions),
    "corruptions-digits-summary": ("docs/corruptions_digits.json", corruptions_summary),
    "corruptions-cifar10": ("docs/results/cifar10_corruptions.json", corruptions_with_paper),
    "corruptions-cifar10-constants": ("docs/results/cifar10_corruptions_imagenet_c.json", corruption_constants),
    "purify-speed": ("benchmarks/results/purify_speed.json", purify_speed),
    "speed-summary": ("benchmarks/results/purify_speed.json", speed_summary),
    "eot-speed": ("benchmarks/results/eot_speed.json", eot_speed),
    "memory": ("benchmarks/results/memory.json", memory),
    "memory-chunks": ("benchmarks/results/memory_chunks.json", memory_chunks),
    "preprocessing-chain": ("benchmarks/results/preprocessing_chain.json", preprocessing_chain),
    "compression": ("benchmarks/results/compression_vs_fixed_attack_pooled.json", compression),
    "mnist-diagnostics-cpu-smoke": ("docs/mnist_diagnostics_cpu_smoke.json", mnist_diagnostics),
    "upstream-notebook": ("upstream/results/notebook.json", upstream_notebook),
    "upstream-checks": ("upstream/results/pinned_tests_torch2.8.0.json", upstream_checks),
    "eot-memory": ("benchmarks/results/eot_memory.json", eot_memory),
    "eot-target": ("benchmarks/results/eot_target.json", eot_target),
    "attack-step": ("benchmarks/results/attack_step.json", attack_step),
    "probe-rows": ("benchmarks/results/probe_rows.json", probe_rows),
    "precision-fashion-mnist": ("docs/results/precision_fashion_mnist.json", precision_agreement),
    "precision-cifar10": ("docs/results/precision_cifar10.json", precision_agreement),
    "train-speed": ("benchmarks/results/train_speed_cpu.json", train_speed),
    "first-hour-epyc": ("benchmarks/results/first_hour_amd-epyc.json", first_hour),
    "gpu-h100": ("benchmarks/results/device_run_h100_2026-11-27_gpu.json", gpu_throughput),
}


#: The figures drawn from several result files (a data-set page's answer): the files their re-check line names.
SOURCES: dict[str, tuple[str, ...]] = {f"{dataset}-answer": files for dataset, (files, _) in ANSWERS.items()}


def notebooks_page() -> str:
    """docs/notebooks.md as a whole: what the executed notebooks printed, collected into docs/notebooks.json by
    ``examples/render_notebooks_doc.py`` (which executes nothing itself; ``examples/execute.py`` runs them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_notebooks_doc", ROOT / "examples" / "render_notebooks_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render(json.loads((ROOT / "docs" / "notebooks.json").read_text(encoding="utf-8")))


# Pages rendered whole (their record is a list of per-notebook executions, each with commit, wall time and load).
WHOLE_PAGES: dict[str, Callable[[], str]] = {"docs/notebooks.md": notebooks_page}


#: Blocks rendered from a committed file that is no measurement (so carries no provenance): the zoo's manifest.
LISTINGS: dict[str, tuple[str, Callable[[str], str]]] = {"zoo": ("zoo/manifest.json", zoo_table)}


def render(name: str) -> str:
    if name not in FIGURES and name not in LISTINGS:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES) + sorted(LISTINGS)}")
    path, fn = FIGURES.get(name) or LISTINGS[name]
    text = fn(path).rstrip("\n")
    if name in rechecked():
        text += "\n\n" + recheck_line(SOURCES.get(name, (path,)))
    return text + "\n"


def pages() -> list[Path]:
    return sorted({p for pattern in PAGES for p in ROOT.glob(pattern)})


def indented(name: str, indent: str) -> str:
    """The rendering of ``name``, indented like its block (e.g. inside a list item)."""
    return "".join(indent + line if line.strip() else line for line in render(name).splitlines(keepends=True))


def stale_blocks(text: str) -> list[str]:
    """The names of the blocks in a markdown text that differ from their rendering."""
    return [m["name"] for m in BLOCK.finditer(text) if m["body"] != indented(m["name"], m["indent"])]


def stale() -> list[str]:
    """Every block, in every page, that differs from its rendering (``page: name``), and every whole page."""
    out = [f"{page.relative_to(ROOT)}: {name}" for page in pages() for name in stale_blocks(page.read_text("utf-8"))]
    return out + [f"{p}: the whole page" for p, fn in WHOLE_PAGES.items() if (ROOT / p).read_text("utf-8") != fn()]


def write() -> list[str]:
    changed = []
    for p, fn in WHOLE_PAGES.items():
        if (ROOT / p).read_text("utf-8") != fn():
            (ROOT / p).write_text(fn(), encoding="utf-8")
            changed.append(p)
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: m["indent"] + m[2] + indented(m["name"], m["indent"]) + m[5], text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(str(page.relative_to(ROOT)))
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report blocks that differ from their rendering")
    args = parser.parse_args()
    if args.check:
        out = stale()
        print("\n".join(f"stale: {s}" for s in out) or "every rendered block is up to date")
        return 1 if out else 0
    print("\n".join(f"rewrote {p}" for p in write()) or "nothing to rewrite")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
