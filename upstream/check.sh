#!/usr/bin/env bash
# Check the ART pull request, upstream/score_based_purification.patch, the way ART's CI would (ci-style-checks.yml and
# the pytest run of ci-pytorch.yml) on the PR's target: ART's dev_1.21.0, at the tool versions pinned there.
#
# 1. Always (Python's standard library only): the patch is up to date with the new files in upstream/art/, its hunks
#    are well formed and it deletes no line of ART's (python upstream/patch.py --check).
# 2. With a git repository of ART holding the base commit: the rest. It is looked for in $ART_GIT, then
#    upstream/.art-git (ignored; e.g. `git clone --bare --single-branch -b dev_1.21.0
#    https://github.com/Trusted-AI/adversarial-robustness-toolbox upstream/.art-git`). Without one (a user's clone, the
#    project's CI) the rest is skipped. The base commit's files are extracted, the patch is applied with `git apply`,
#    and black, pycodestyle, pylint, mypy, ruff and the tests (with coverage) run on the PR's files with the tools in
#    upstream/.venv-check (ignored), built on first use at the versions pinned in dev's requirements_test.txt.
#    torch: the CPU build this machine has (ART's CI takes 2.7.1 and 2.8.0 from PyTorch's CPU index; check_pinned.sh
#    runs this script with those versions and Python 3.10).
# Settings (environment): CHECK_PYTHON (python3), CHECK_TORCH (torch==2.13.0), CHECK_VENV (upstream/.venv-check),
# CHECK_RESULT (a JSON file to write the outcome to: command, commit, versions, counts, coverage, wall time).
# Exits non-zero when any gate fails.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PATCH="$HERE/score_based_purification.patch"
BASE="$(sed -n 's/^BASE = "\([0-9a-f]*\)"$/\1/p' "$HERE/patch.py")"
BRANCH=dev_1.21.0
TORCH="${CHECK_TORCH:-torch==2.13.0}"
PYTHON="${CHECK_PYTHON:-python3}"
VENV="${CHECK_VENV:-$HERE/.venv-check}"
RESULT="${CHECK_RESULT:-}"
START=$SECONDS
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
. "$ROOT/.ci/gate.sh"  # gate, gates_end

gate "patch up to date, well formed, deletes nothing" python3 "$HERE/patch.py" --check

ART_GIT_FOUND=""
for candidate in "${ART_GIT:-}" "$HERE/.art-git"; do
    if [ -n "$candidate" ] && git --git-dir="$candidate" cat-file -e "$BASE^{commit}" 2>/dev/null; then
        ART_GIT_FOUND="$(cd "$candidate" && pwd)"
        break
    fi
done
if [ -z "$ART_GIT_FOUND" ]; then
    echo "upstream/check.sh: ART's style gates and tests skipped: no git repository of ART with $BRANCH's commit" \
         "${BASE:0:9} (set ART_GIT to one)"
    gates_end "upstream/check.sh"  # exits 1 if the patch check failed
    exit 0
fi
ART_GIT="$ART_GIT_FOUND"
TIP="$(git --git-dir="$ART_GIT" rev-parse -q --verify "refs/heads/$BRANCH" || true)"
echo "== ART: $ART_GIT; base $BASE; $BRANCH there: ${TIP:-absent}"

# 1. ART's tree at the base commit (the paths the checks read), the patch applied, and the test harness.
TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT
PATHS=(art tests/__init__.py tests/conftest.py tests/utils.py tests/defences/__init__.py tests/defences/preprocessor
       docs/modules/defences/preprocessor.rst notebooks/README.md .pylintrc pyproject.toml setup.cfg requirements_test.txt)
if ! git --git-dir="$ART_GIT" archive "$BASE" -- "${PATHS[@]}" 2> "$TREE.archive.log" | tar -x -C "$TREE"; then
    cat "$TREE.archive.log"; rm -f "$TREE.archive.log"
    echo "upstream/check.sh: FAILED extracting ART's files at $BASE"
    exit 1
fi
rm -f "$TREE.archive.log"
cd "$TREE" || exit 1
git init -q .  # git apply then works relative to this folder wherever the temporary folder lies
gate "git apply to $BRANCH (${BASE:0:9})" git apply --verbose "$PATCH"
adds_only() {  # git apply --numstat: lines added and deleted per file
    local numstat
    numstat="$(git apply --numstat "$PATCH")" || return 1
    echo "$numstat"
    echo "$numstat" | awk '$2 != 0 {bad = 1} END {exit bad}'
}
gate "adds lines only (git apply --numstat)" adds_only
if [ -n "$TIP" ] && [ "$TIP" != "$BASE" ]; then
    TIP_TREE="$(mktemp -d)"
    git --git-dir="$ART_GIT" archive "$TIP" -- art/defences/preprocessor/__init__.py docs/modules/defences/preprocessor.rst \
        notebooks/README.md 2>/dev/null | tar -x -C "$TIP_TREE"
    git -C "$TIP_TREE" init -q .
    gate "git apply --check to $BRANCH's newer tip (${TIP:0:9})" git -C "$TIP_TREE" apply --check "$PATCH"
    rm -rf "$TIP_TREE"
fi
# ART's root conftest.py imports TensorFlow at start-up (and is not extracted): harness/conftest.py provides the same
# --framework option, framework and art_warning fixtures and platform markers.
cp "$HERE/harness/conftest.py" "$TREE/conftest.py"

# 2. Tools: dev's pins (requirements_test.txt) for the checkers and ART's dependencies; torch as above.
pin() { grep -E "^$1[=~]" "$TREE/requirements_test.txt" | head -n 1; }
PINS=("$TORCH" "$(pin numpy)" "$(pin scipy)" "$(pin scikit-learn)" "$(pin six)" "$(pin tqdm)" setuptools
      "$(pin black)" "$(pin pylint)" "$(pin mypy)" "$(pin pycodestyle)" "$(pin ruff)" "$(pin pytest)"
      "$(pin pytest-cov)" "$(pin types-six)" "$(pin types-PyYAML)" "$(pin types-setuptools)")
STAMP="$VENV/.pins"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]; then
    echo "== building $VENV: ${PINS[*]}"
    t0=$SECONDS
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || exit 1
    if ! "$VENV/bin/python" -m pip install --no-cache-dir -q "${PINS[@]}" > "$VENV/install.log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$VENV/install.log" | tail -n 30
        echo "upstream/check.sh: FAILED installing the tools"
        exit 1
    fi
    echo "${PINS[*]}" > "$STAMP"
    echo "== tools installed in $((SECONDS - t0)) s"
fi
PY="$VENV/bin/python"
export PYTHONPATH="$TREE"  # ART is the extracted tree, not an installed package
"$PY" -c "import sys, torch, numpy, black, pylint, mypy.version, pycodestyle; from importlib.metadata import version
print('== versions: python', sys.version.split()[0], '| torch', torch.__version__, '| numpy', numpy.__version__,
      '| black', version('black'), '| pylint', version('pylint'), '| mypy', mypy.version.__version__,
      '| pycodestyle', pycodestyle.__version__, '| ruff', version('ruff'), '| pytest', version('pytest'))"

# 3. The gates of ci-style-checks.yml, on the PR's Python files.
NEW_MODULE=art/defences/preprocessor/score_based_purification_pytorch.py
NEW_TEST=tests/defences/preprocessor/test_score_based_purification_pytorch.py
PY_FILES=(art/defences/preprocessor/__init__.py "$NEW_MODULE" "$NEW_TEST")
tool() { local t="$1"; shift; "$VENV/bin/$t" "$@"; }
gate "black 120" tool black --line-length 120 --check "${PY_FILES[@]}"
gate "pycodestyle" tool pycodestyle --ignore=C0330,C0415,E203,E231,W503 --max-line-length=120 "${PY_FILES[@]}"
gate "pylint >= 9.6" tool pylint --rcfile=.pylintrc --persistent=n --fail-under=9.6 art/defences/preprocessor/__init__.py "$NEW_MODULE"
# mypy follows the imports into ART's own modules; --follow-imports=silent reports only the PR's files.
gate "mypy" tool mypy --follow-imports=silent --cache-dir "$VENV/.mypy_cache" "$NEW_MODULE"
gate "ruff" tool ruff check "${PY_FILES[@]}"

# 4. The tests, with coverage of the new module (CONTRIBUTING.md: at least 80 % of the new statements), selected by
# path: with --cov=<dotted module name>, coverage starts by importing `art`.
printf '[run]\ninclude = */%s\n' "$NEW_MODULE" > .coveragerc-pr
TESTS_START=$SECONDS
gate "pytest --framework=pytorch, coverage >= 80 %" "$PY" -m pytest "$NEW_TEST" --framework=pytorch -q -rs \
    -p no:cacheprovider --cov --cov-config=.coveragerc-pr --cov-report=term-missing --cov-fail-under=80 --durations=5 \
    --cov-report=json:"$TREE/coverage.json" --junitxml="$TREE/junit.xml"
TESTS_WALL=$((SECONDS - TESTS_START))

# 5. The notebook: every code cell executed in order and stored with its outputs, no thread pinning, listed in
# notebooks/README.md.
NOTEBOOK=notebooks/defence_score_based_purification.ipynb
gate "notebook executed, listed" "$PY" -c "
import json, sys
cells = [c for c in json.load(open('$NOTEBOOK'))['cells'] if c['cell_type'] == 'code']
bad = [i for i, c in enumerate(cells) if c.get('execution_count') != i + 1]  # run once, top to bottom
bad += [] if cells[-1].get('outputs') else [len(cells) - 1]
src = ''.join(''.join(c['source']) for c in cells)
listed = '($(basename "$NOTEBOOK"))' in open('notebooks/README.md').read()
print(f'{len(cells)} code cells, not executed in order (or the last without output): {bad}; set_num_threads: {\"set_num_threads\" in src};'
      f' listed in notebooks/README.md: {listed}')
sys.exit(1 if bad or 'set_num_threads' in src or not listed else 0)
"

if [ -n "$RESULT" ]; then
    "$PY" - "$TREE" "$ROOT" "$RESULT" "$TESTS_WALL" "$ART_GIT" "$BASE" "$(IFS="|"; echo "${FAILED[*]}")" "${CHECK_COMMAND:-bash upstream/check.sh}" <<'PY'
import json, platform, subprocess, sys, xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import torch

tree, root, out, wall, art_git, base, failed, command = sys.argv[1:]
suite = ET.parse(Path(tree) / "junit.xml").getroot().find("testsuite")
counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "CPU")
git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()
packages = ("torch", "numpy", "scipy", "scikit-learn", "pytest", "black", "pylint", "mypy", "pycodestyle", "ruff")
record = {
    "what": "ART's style gates and the PR's tests on ART's dev_1.21.0 with the patch applied",
    "command": command,
    "commit": git("rev-parse", "HEAD"),
    "patch_modified_since_commit": bool(git("status", "--porcelain", "--", "upstream/score_based_purification.patch")),
    "art_base_commit": base,
    "device": f"CPU ({cpu}), OMP_NUM_THREADS=1",
    "versions": {"python": platform.python_version(), **{p: version(p) for p in packages}, "torch": torch.__version__},
    **counts,
    "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
    "coverage_percent": round(json.loads((Path(tree) / "coverage.json").read_text())["totals"]["percent_covered"], 1),
    "tests_wall_time_s": int(wall),
    "style_gates": "black 120, pycodestyle, pylint >= 9.6, mypy, ruff",
    "gates_failed": failed.split("|") if failed else [],
}
record["provenance"] = {  # what docs/render.py prints under the PR description's table
    "command": command,
    "code_version": f"art-adp {record['commit'][:7]}, ART dev_1.21.0 {base[:9]} with the patch",
    "models": "none",
    "device": record["device"],
    "wall_time_s": int(wall),
}
Path(out).parent.mkdir(parents=True, exist_ok=True)
Path(out).write_text(json.dumps(record, indent=2) + "\n")
print(f"== outcome written to {out}")
PY
fi
gates_end "upstream/check.sh"
