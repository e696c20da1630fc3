#!/usr/bin/env bash
# The runs behind docs/detect_certify.md (digits; the demo's score model and classifier).
# Usage: bash docs/detect_certify_runs.sh SCORE CLASSIFIER OUTDIR [gpu|cpu]
# gpu: the sizes used for the note (n = 10,000 smoothing samples, 40-step attacks with 15/8 EOT samples);
# cpu: sizes that fit a 2-core CPU in well under an hour when it is not shared.
set -uo pipefail
S=$1 C=$2 OUTDIR=$3 SIZE=${4:-gpu}
if [ "$SIZE" = gpu ]; then
  CERT="--n0 100 --n 10000 --n-approximate 100 --n-examples 100 --batch-size 10000"
  DET="--n-examples 260 --pgd-steps 40 --eot 15 --full-eot 8"
else
  CERT="--n0 100 --n 300 --n-approximate 100 --n-examples 100 --batch-size 1000"
  DET="--n-examples 200 --pgd-steps 10 --eot 4 --full-eot 2"
fi
time python3 -m art_adp.cli certify --score "$S" --classifier "$C" --run-dir "$OUTDIR/certify" $CERT --quiet
time python3 -m art_adp.cli detect --score "$S" --classifier "$C" --run-dir "$OUTDIR/detect" $DET --quiet
