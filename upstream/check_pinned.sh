#!/usr/bin/env bash
# Run the pull request's style gates and tests in ART's CI configuration (ci-pytorch.yml: Python 3.10, torch 2.8.0 or 2.7.1; the
# other packages at requirements_test.txt's pins), as far as PyPI allows: ART's CI takes torch's CPU build from
# PyTorch's own index, which is not reachable here, so this installs PyPI's build of the same version (CUDA libraries
# included, several GB) and runs it on the CPU. Slow and large: not part of upstream/check.sh.
#
#   bash upstream/check_pinned.sh [TORCH_VERSION]      # default 2.8.0; PYTHON310=/path/to/python3.10
#
# Style gates as in upstream/check.sh, at requirements_test.txt's versions, then the tests with coverage.
# The venv is built once in ${PINNED_VENV:-/tmp/art-ci-py310-torch<version>}. The outcome (command, commit, versions,
# counts, wall time) is written to upstream/results/pinned_tests_torch<version>.json.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
KIT="${UPSTREAM_ART_KIT:-$ROOT/../shared/upstream-art}"
if [ ! -d "$KIT" ]; then
    echo "upstream/check_pinned.sh: skipped, ART's contribution kit ($KIT) is not present"
    exit 0
fi
KIT="$(cd "$KIT" && pwd)"
TORCH="${1:-2.8.0}"
PYTHON310="${PYTHON310:-$(command -v python3.10 || true)}"
if [ -z "$PYTHON310" ]; then
    echo "upstream/check_pinned.sh: needs Python 3.10 (ART's CI version): put python3.10 on PATH or set PYTHON310" >&2
    exit 2
fi
VENV="${PINNED_VENV:-/tmp/art-ci-py310-torch$TORCH}"
pin() { grep -E "^$1[=~]" "$KIT/requirements_test.txt" | head -n 1; }
PINS=("torch==$TORCH" adversarial-robustness-toolbox==1.20.1 "$(pin numpy)" "$(pin scipy)" "$(pin scikit-learn)"
      "$(pin six)" "$(pin tqdm)" "$(pin pytest)" "$(pin pytest-cov)" "$(pin pytest-mock)" "$(pin black)" "$(pin pylint)"
      "$(pin mypy)" "$(pin pycodestyle)" "$(pin ruff)" "$(pin types-six)" "$(pin types-PyYAML)" "$(pin types-setuptools)")
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.pins" 2>/dev/null)" != "${PINS[*]}" ]; then
    echo "== building $VENV with $PYTHON310: ${PINS[*]}"
    rm -rf "$VENV"
    "$PYTHON310" -m venv "$VENV" || exit 1
    "$VENV/bin/python" -m pip install --no-cache-dir -q "${PINS[@]}" > "$VENV.install.log" 2>&1 || { tail -n 20 "$VENV.install.log"; exit 1; }
    echo "${PINS[*]}" > "$VENV/.pins"
fi

TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT
cp -r "$("$VENV/bin/python" -c 'import art, os; print(os.path.dirname(art.__file__))')" "$TREE/art"
find "$TREE/art" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$KIT/." "$TREE/"
chmod -R u+w "$TREE"
cp -r "$HERE/art/." "$TREE/"
cp "$HERE/harness/conftest.py" "$TREE/conftest.py"
cd "$TREE" || exit 1
printf '[run]\ninclude = */art/defences/preprocessor/score_based_purification_pytorch.py\n' > .coveragerc-pr
. "$ROOT/.ci/gate.sh"  # gate, gates_end
START=$SECONDS
NEW_MODULE=art/defences/preprocessor/score_based_purification_pytorch.py
PY_FILES=(art/defences/preprocessor/__init__.py "$NEW_MODULE" tests/defences/preprocessor/test_score_based_purification_pytorch.py)
tool() { local t="$1"; shift; "$VENV/bin/python" -m "$t" "$@"; }
gate "black 120" tool black --line-length 120 --check "${PY_FILES[@]}"
gate "pycodestyle" tool pycodestyle --ignore=C0330,C0415,E203,E231,W503 --max-line-length=120 "${PY_FILES[@]}"
gate "pylint >= 9.6" tool pylint --rcfile=.pylintrc --persistent=n --fail-under=9.6 art/defences/preprocessor/__init__.py "$NEW_MODULE"
gate "mypy" tool mypy --follow-imports=silent --cache-dir "$VENV/.mypy_cache" "$NEW_MODULE"
gate "ruff" tool ruff check "${PY_FILES[@]}"
style_failed=${#FAILED[@]}

start=$SECONDS
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$VENV/bin/python" -m pytest \
    tests/defences/preprocessor/test_score_based_purification_pytorch.py --framework=pytorch -q -rs \
    -p no:cacheprovider --cov --cov-config=.coveragerc-pr --cov-report=term-missing --cov-fail-under=80 \
    --junitxml="$TREE/junit.xml" 2>&1 | tee "$TREE/pytest.log"
rc=${PIPESTATUS[0]}
wall=$((SECONDS - start))

"$VENV/bin/python" - "$TREE" "$TORCH" "$rc" "$wall" "$ROOT" "$HERE/results" "${FAILED[*]}" <<'PY'
import json, platform, re, subprocess, sys, xml.etree.ElementTree as ET
from pathlib import Path
import numpy, scipy, sklearn, torch, art, pytest

tree, version, rc, wall, root, out, failed = sys.argv[1:]
suite = ET.parse(Path(tree) / "junit.xml").getroot().find("testsuite")
cover = re.search(r"TOTAL\s+\d+\s+\d+\s+(\d+)%", (Path(tree) / "pytest.log").read_text())
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "CPU")
git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()
record = {
    "what": "the PR's test file in ART's CI configuration (Python 3.10, pinned test requirements)",
    "command": f"bash upstream/check_pinned.sh {version}",
    "commit": git("rev-parse", "HEAD"),
    "pr_files_modified_since_commit": bool(git("status", "--porcelain", "--", "upstream/art")),
    "device": f"CPU ({cpu}), OMP_NUM_THREADS=1; CUDA available: {torch.cuda.is_available()}",
    "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
                 "scipy": scipy.__version__, "scikit-learn": sklearn.__version__, "art": art.__version__,
                 "pytest": pytest.__version__},
    "tests": int(suite.get("tests")), "failures": int(suite.get("failures")), "errors": int(suite.get("errors")),
    "skipped": int(suite.get("skipped")),
    "passed": int(suite.get("tests")) - int(suite.get("failures")) - int(suite.get("errors")) - int(suite.get("skipped")),
    "coverage_percent": int(cover.group(1)) if cover else None,
    "pytest_exit_code": int(rc), "wall_time_s": int(wall),
    "style_gates": "black 120, pycodestyle, pylint >= 9.6, mypy, ruff",
    "style_gates_failed": failed.split(),
}
Path(out).mkdir(exist_ok=True)
(Path(out) / f"pinned_tests_torch{version}.json").write_text(json.dumps(record, indent=2) + "\n")
print(json.dumps(record, indent=2))
PY
[ "$style_failed" -eq 0 ] && [ "$rc" -eq 0 ]
