#!/usr/bin/env bash
# upstream/check.sh in ART's CI configuration (ci-pytorch.yml on dev_1.21.0: Python 3.10, torch 2.8.0 or 2.7.1; the
# other packages at dev's requirements_test.txt pins), as far as PyPI allows: ART's CI takes torch's CPU build from
# PyTorch's own index, which is not reachable here, so this installs PyPI's build of the same version (CUDA libraries
# included, several GB) and runs it on the CPU. Slow and large: not part of upstream/check.sh's default run.
#
#   bash upstream/check_pinned.sh [TORCH_VERSION]      # default 2.8.0; PYTHON310=/path/to/python3.10
#
# The venv is built once in ${PINNED_VENV:-/tmp/art-ci-py310-torch<version>}. The outcome (command, commit, versions,
# counts, coverage, wall time) is written to upstream/results/pinned_tests_torch<version>.json. Skipped, like
# check.sh's ART gates, without a git repository of ART (see check.sh).
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
TORCH="${1:-2.8.0}"
PYTHON310="${PYTHON310:-$(command -v python3.10 || true)}"
if [ -z "$PYTHON310" ]; then
    echo "upstream/check_pinned.sh: needs Python 3.10 (ART's CI version): put python3.10 on PATH or set PYTHON310" >&2
    exit 2
fi
CHECK_PYTHON="$PYTHON310" CHECK_TORCH="torch==$TORCH" CHECK_VENV="${PINNED_VENV:-/tmp/art-ci-py310-torch$TORCH}" \
    CHECK_RESULT="$HERE/results/pinned_tests_torch$TORCH.json" CHECK_COMMAND="bash upstream/check_pinned.sh $TORCH" \
    exec bash "$HERE/check.sh"
