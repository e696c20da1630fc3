#!/usr/bin/env bash
# Release check: build the wheel and sdist, `twine check` them, install the wheel (not editable) into a fresh
# venv, and run `import art_adp` and a quick `art-adp demo` from it, outside the source tree.
# Needs the release extra in the calling environment (pip install -e ".[release]").
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m build --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
python -m twine check --strict "$work"/dist/*
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q torch==2.13.0 "$work"/dist/*.whl
cd "$work"
"$work/venv/bin/python" -c "import art_adp; assert not art_adp.__file__.startswith('$repo'); \
print('import art_adp', art_adp.__version__, 'from', art_adp.__file__)"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$work/venv/bin/art-adp" demo --run-dir "$work/demo" --score-iterations 20 \
  --ngf 8 --n-examples 20 --pgd-steps 2 --runs 2 --quiet
test -s "$work/demo/digits.png" && test -s "$work/demo/results.json"
echo "package check passed"
