"""
Keep the ART pull request's patch (`upstream/score_based_purification.patch`) in step with its new files.

The patch is what a maintainer receives: a git diff against ART's `dev_1.21.0` (the commit in `BASE`) that adds the
defence, its test and its notebook (the files under `upstream/art/`, laid out as in ART's tree) and adds lines to three
of ART's files (the module's import in `art/defences/preprocessor/__init__.py`, the entry in
`docs/modules/defences/preprocessor.rst`, the notebook's entry in `notebooks/README.md`). Those three hunks are
written by hand in the patch; the new files' sections and the header are generated here from `upstream/art/`.

    python upstream/patch.py --write   # regenerate the header and the new files' sections from upstream/art/
    python upstream/patch.py --check   # exit 1 if the patch is stale, malformed, or deletes a line of ART's

`--check` needs no copy of ART: it checks that the new files' sections equal `upstream/art/`, that every hunk's line
counts match its header and that the patch deletes no line (it only adds to ART's files). `upstream/check.sh` then
applies the patch to the base commit itself.
"""

import argparse
import hashlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATCH = HERE / "score_based_purification.patch"
NEW_FILES_ROOT = HERE / "art"
BASE = "b3bad7f873eb36c02d7b0be72507fffc0857bd78"
BRANCH = "dev_1.21.0"
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def header(sections: dict[str, str]) -> str:
    stats = []
    for path, text in sections.items():
        lines = text.splitlines()
        added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
        deleted = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
        status = "new" if "\nnew file mode" in text else "changed"
        stats.append(f"  {path} | {status}, +{added} -{deleted}")
    return (
        "Add ScoreBasedPurificationPyTorch: score-based purification (ADP, Yoon et al. 2021) as a PyTorch\n"
        "preprocessing defence, with its tests, its documentation entry and an example notebook.\n"
        "\n"
        f"Against Trusted-AI/adversarial-robustness-toolbox, branch {BRANCH}, commit {BASE}.\n"
        f"Apply in a checkout of that branch: git apply score_based_purification.patch (then git commit -s).\n"
        "\n" + "\n".join(stats) + "\n\n"
    )


def new_file_section(path: str, content: bytes) -> str:
    """The section `git diff --full-index` writes for a new file."""
    blob = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    text = content.decode("utf-8")
    lines = text.split("\n")
    missing_newline = lines[-1] != ""
    if not missing_newline:
        lines.pop()
    count = f"1,{len(lines)}" if len(lines) != 1 else "1"
    out = [
        f"diff --git a/{path} b/{path}",
        "new file mode 100644",
        f"index {'0' * 40}..{blob}",
        "--- /dev/null",
        f"+++ b/{path}",
        f"@@ -0,0 +{count} @@",
    ] + ["+" + line for line in lines]
    if missing_newline:
        out.append("\\ No newline at end of file")
    return "\n".join(out) + "\n"


def split(patch: str) -> dict[str, str]:
    """The patch's sections by path (the text before the first section is its header)."""
    sections = {}
    for chunk in re.split(r"(?m)^(?=diff --git )", patch)[1:]:
        path = chunk.split("\n", 1)[0].split(" b/", 1)[1]
        sections[path] = chunk
    return sections


def problems(sections: dict[str, str]) -> list[str]:
    """Malformed hunks and deleted lines."""
    found = []
    for path, text in sections.items():
        lines = text.split("\n")[:-1]
        start = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
        if start is None:
            found.append(f"{path}: no hunk")
            continue
        i = start
        while i < len(lines):
            match = HUNK.match(lines[i])
            if not match:
                found.append(f"{path}: expected a hunk header at line {i + 1} of its section: {lines[i][:60]!r}")
                break
            old = 1 if match.group(2) is None else int(match.group(2))
            new = 1 if match.group(4) is None else int(match.group(4))
            i += 1
            while i < len(lines) and not lines[i].startswith("@@"):
                line = lines[i]
                if line.startswith("\\"):
                    pass
                elif line.startswith("+"):
                    new -= 1
                elif line.startswith("-"):
                    old -= 1
                    found.append(f"{path}: deletes a line of ART's: {line[:60]!r}")
                else:
                    old -= 1
                    new -= 1
                i += 1
            if old or new:
                found.append(f"{path}: a hunk's line counts do not match its header ({old:+d} old, {new:+d} new)")
    return found


def regenerate(current: str) -> str:
    sections = {path: text for path, text in split(current).items() if "\nnew file mode" not in text}
    for file in sorted(p for p in NEW_FILES_ROOT.rglob("*") if p.is_file()):
        path = file.relative_to(NEW_FILES_ROOT).as_posix()
        sections[path] = new_file_section(path, file.read_bytes())
    sections = dict(sorted(sections.items()))
    return header(sections) + "".join(sections.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the patch from upstream/art/")
    mode.add_argument("--check", action="store_true", help="exit 1 if the patch is stale or malformed")
    args = parser.parse_args()

    current = PATCH.read_text(encoding="utf-8")
    wanted = regenerate(current)
    found = problems(split(wanted))
    if args.write:
        PATCH.write_text(wanted, encoding="utf-8")
        print(f"wrote {PATCH.relative_to(HERE.parent)}: {len(split(wanted))} files")
    elif wanted != current:
        found.insert(0, "the patch is not up to date with upstream/art/: run python upstream/patch.py --write")
    for problem in found:
        print(f"upstream/patch.py: {problem}")
    if not found:
        print(f"upstream/patch.py: {PATCH.name} up to date, {len(split(wanted))} files, no line deleted")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
