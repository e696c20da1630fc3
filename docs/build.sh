#!/usr/bin/env bash
# Build the API reference from the docstrings into docs/_build/html; any Sphinx warning fails the build.
# Needs the docs extra: pip install -e ".[docs]"
set -euo pipefail
cd "$(dirname "$0")/.."
python -m sphinx -W --keep-going -q -b html docs/api docs/_build/html "$@"
echo "API reference: docs/_build/html/index.html"
