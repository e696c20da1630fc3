#!/usr/bin/env bash
# The runs behind docs/detect_certify.md (digits; the demo's score model and classifier), as they were run.
# Usage: bash docs/detect_certify_runs.sh SCORE CLASSIFIER OUTDIR
# The certify run draws n = 10,000 purifications per digit and sigma: a GPU job. Every run resumes or can be split
# as shown; each prints its own wall time (`time`).
set -uo pipefail
S=$1 C=$2 OUTDIR=$3
M="--score $S --classifier $C"
# certificates: n0 = 100 (also the approximate variant's 100 draws), n = 10,000, alpha = 0.001, sigma 0.12/0.25/0.5
time python3 -m art_adp certify $M --run-dir "$OUTDIR/certify" --n0 100 --n 10000 --n-approximate 100 \
  --n-examples 100 --batch-size 10000 --quiet
# detector ROC AUC at several eps, the score-norm histogram and clean accuracy on 260 test digits (no attacks)
time python3 -m art_adp detect $M --run-dir "$OUTDIR/detect-auc" --n-examples 260 --attacks --quiet
# clean / robust accuracy, 100 test digits: plain ADP, then two-level ADP (two processes, run side by side)
time python3 -m art_adp detect $M --run-dir "$OUTDIR/detect" --n-examples 100 --eot-samples 4 \
  --full-eot-samples 2 --defences plain --auc-eps --quiet
time python3 -m art_adp detect $M --run-dir "$OUTDIR/detect-two-level" --n-examples 100 --eot-samples 4 \
  --full-eot-samples 2 --defences two-level --auc-eps --quiet
