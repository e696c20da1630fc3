#!/usr/bin/env bash
# Check the ART pull request in upstream/art/ the way ART's CI would (ci-style-checks.yml and the pytest run),
# at the tool versions pinned in ART's requirements_test.txt.
#
# Needs ART's contribution kit (style configs, test harness) in ../shared/upstream-art relative to the repository
# root (or in $UPSTREAM_ART_KIT); without it (a user's clone) the check is skipped. The tools live in upstream/.venv-check, built on first use.
# Exits non-zero when any gate fails.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
KIT="${UPSTREAM_ART_KIT:-$ROOT/../shared/upstream-art}"
if [ ! -d "$KIT" ]; then
    echo "upstream/check.sh: skipped, ART's contribution kit ($KIT) is not present"
    exit 0
fi
KIT="$(cd "$KIT" && pwd)"
START=$SECONDS
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# The PR's files, as paths in ART's tree.
NEW_MODULE=art/defences/preprocessor/score_based_purification_pytorch.py
NEW_TEST=tests/defences/preprocessor/test_score_based_purification_pytorch.py
PY_FILES=(art/defences/preprocessor/__init__.py "$NEW_MODULE" "$NEW_TEST")

# 1. Tools: torch (CPU build from local disk), ART 1.20.1 and only the pinned tools the gates run.
VENV="$HERE/.venv-check"
pin() { grep -E "^$1[=~]" "$KIT/requirements_test.txt" | head -n 1; }
PINS=(torch==2.13.0 adversarial-robustness-toolbox==1.20.1 "$(pin numpy)" "$(pin scipy)" "$(pin scikit-learn)"
      "$(pin black)" "$(pin pylint)" "$(pin mypy)" "$(pin pycodestyle)" "$(pin ruff)" "$(pin pytest)"
      "$(pin pytest-cov)" "$(pin types-six)" "$(pin types-PyYAML)" "$(pin types-setuptools)")
STAMP="$VENV/.pins"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]; then
    echo "== building $VENV: ${PINS[*]}"
    t0=$SECONDS
    rm -rf "$VENV"
    python3 -m venv "$VENV" || exit 1
    if ! "$VENV/bin/pip" install -q "${PINS[@]}" > "$VENV/install.log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$VENV/install.log" | tail -n 30
        echo "upstream/check.sh: FAILED installing the tools"
        exit 1
    fi
    echo "${PINS[*]}" > "$STAMP"
    echo "== tools installed in $((SECONDS - t0)) s"
fi
PY="$VENV/bin/python"

# 2. ART's tree: ART 1.20.1's package, ART's kit files over it, the PR's files over those, and the test harness.
TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT
cp -r "$("$PY" -c 'import art, os; print(os.path.dirname(art.__file__))')" "$TREE/art"
find "$TREE/art" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$KIT/." "$TREE/"
chmod -R u+w "$TREE"
cp -r "$HERE/art/." "$TREE/"
# ART's root conftest.py (the --framework option, the framework and art_warning fixtures, the platform markers)
# imports TensorFlow at start-up and is not in the kit: harness/conftest.py provides the same fixtures.
cp "$HERE/harness/conftest.py" "$TREE/conftest.py"
cd "$TREE" || exit 1

. "$ROOT/.ci/gate.sh"  # gate, gates_end
tool() { local t="$1"; shift; "$VENV/bin/$t" "$@"; }

gate "black 120" tool black --line-length 120 --check "${PY_FILES[@]}"
gate "pycodestyle" tool pycodestyle --ignore=C0330,C0415,E203,E231,W503 --max-line-length=120 "${PY_FILES[@]}"
gate "pylint >= 9.6" tool pylint --rcfile=.pylintrc --persistent=n --fail-under=9.6 art/defences/preprocessor/__init__.py "$NEW_MODULE"
# mypy follows the imports into ART's own modules; --follow-imports=silent reports only the PR's files (ART 1.20.1's
# certification estimators have "Tensor not callable" findings under torch 2.13 that are not part of this PR).
gate "mypy" tool mypy --follow-imports=silent --cache-dir "$VENV/.mypy_cache" "$NEW_MODULE"
gate "ruff" tool ruff check "${PY_FILES[@]}"
# Coverage of the new module, selected by path: with --cov=<dotted module name>, coverage 7.17 starts by finding
# the module (importing `art`, hence torch 2.13), and that import fails ("SystemError: ... bad call flags").
printf '[run]\ninclude = */%s\n' "$NEW_MODULE" > .coveragerc-pr
gate "pytest --framework=pytorch, coverage >= 80 %" "$PY" -m pytest "$NEW_TEST" --framework=pytorch -q -p no:cacheprovider \
    --cov --cov-config=.coveragerc-pr --cov-report=term-missing --cov-fail-under=80 --durations=5

# The notebook: every code cell executed in order and stored with its outputs, no thread pinning, listed in notebooks/README.md.
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

gates_end "upstream/check.sh"
