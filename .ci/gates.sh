#!/usr/bin/env bash
# Style and type gates on the project's own code (art_adp/), the same gates ART runs on its files:
# black 120, pycodestyle (ART's ignore list), ruff, pylint >= 9.6 with ART's .pylintrc, mypy (config in setup.cfg).
# The tools are the `lint` extra of setup.cfg. ART's .pylintrc is read from ../shared/upstream-art (or
# $UPSTREAM_ART_KIT); without it (a user's clone) the pylint gate is skipped. Exits non-zero when any gate fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
KIT="${UPSTREAM_ART_KIT:-$ROOT/../shared/upstream-art}"
PKG=art_adp
START=$SECONDS

. "$ROOT/.ci/gate.sh"  # gate, gates_end

gate "black 120" black --line-length 120 --check "$PKG"
gate "pycodestyle" pycodestyle --ignore=C0330,C0415,E203,E231,W503 --max-line-length=120 "$PKG"
gate "ruff" ruff check --line-length 120 --ignore F401 "$PKG"
if [ -f "$KIT/.pylintrc" ]; then
    gate "pylint >= 9.6" pylint --rcfile="$KIT/.pylintrc" --persistent=n --fail-under=9.6 "$PKG"
else
    echo "-- pylint >= 9.6: skipped, ART's .pylintrc ($KIT/.pylintrc) is not present"
fi
gate "mypy" mypy "$PKG"

gates_end ".ci/gates.sh"
