#!/usr/bin/env bash
# The calls that measure, on the rows of docs/attacks.md's "Measured" tables, what the last wave of attack fixes
# changed (the exact score's one-step denoise of a clipped noisy input, as the earlier folders measured it, in front of
# the data set's classifier, the first 200 measuring images,
# every attack at 100 iterations and EOT 8, judged on R = 10 fresh S = 10 ensembles, one torch thread per call; each
# set of options in a run folder of its own, the classifier copied from attack_options_runs.sh's base folder):
#   d, e: the strongest preset's PGD rows from the image or from a random start (MNIST: full-gradient PGD+EOT and its
#         "(rs)" row, both at the preset's step eps/4 = 0.075; Fashion-MNIST: its "(no rs)" row and PGD+EOT, both at
#         eps/4), with constant steps (d) and the halving schedule (e): the 2 x 2 that decides the preset's defaults;
#   p:    d's rows with bf16 gradient passes (--attack-precision bf16; judged in fp32): the precision's strength,
#         image by image against d's (the same images and seeds);
#   a:    APGD-EOT on both losses as the v2 "a" folders measured them, now from Croce & Hein's start and with the DLR
#         run re-judging on fresh draws an image its own draws broke; the low-frequency vote attack aimed at the mean
#         softmax at DiffBreak's 100 iterations.
# Published side by side: python docs/publish.py --variants runs/v3-TAG-d runs/v3-TAG-e runs/v3-TAG-a
# docs/results/DATASET_attack_defaults.json; the precision pair: python benchmarks/precision_agreement.py runs/v3-TAG-d
# runs/v3-TAG-p docs/results/precision_DATASET.json
#   bash docs/attack_defaults_runs.sh mnist MNIST_DIR mlp mn
#   bash docs/attack_defaults_runs.sh fashion-mnist FASHION_MNIST_DIR cnn fm
# ESTIMATE=1 prices each call on this machine (levers --estimate-only) and trains, copies and measures nothing.
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
ds=${1:?data set} data=${2:?its folder} clf=${3:?classifier} tag=${4:?folder tag}
export OMP_NUM_THREADS=1
base=runs/v2-$tag-base
if [ -z "${ESTIMATE:-}" ] && [ ! -e "$base/$clf.safetensors" ]; then  # the classifier, as the levers table trains it
    art-adp train-levers --dataset "$ds" --data-root "$data" --run-dir "$base" --threads 1 --quiet --classifiers "$clf" \
        --purified "$clf"
fi
L=(art-adp levers --seed-scheme levers --dataset "$ds" --data-root "$data" --threads 1 --quiet --settings "one-step denoise, clipped noise"
   --models oracle
   --purified "$clf" --classifiers --judges ensemble --repeats 10 --n-examples 200 --max-iter 100 --eot-samples 8
   ${ESTIMATE:+--estimate-only})
run() {
    d=runs/v3-$tag-$1; shift; mkdir -p "$d"
    [ -n "${ESTIMATE:-}" ] || cp "$base/$clf"*.safetensors "$d/"
    "${L[@]}" --run-dir "$d" "$@"
}
if [ "$ds" = mnist ]; then
    pgd=(--attacks full-pgd-eot "full-pgd-eot (rs)" --eps-step 0.075)
else
    pgd=(--attacks "full-pgd-eot (no rs)" full-pgd-eot)
fi
run d "${pgd[@]}"
run p "${pgd[@]}" --attack-precision bf16
run e "${pgd[@]}" --step-schedule halving
run a --attacks apgd-eot apgd-eot-ensemble lowfreq-vote
