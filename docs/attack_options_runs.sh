#!/usr/bin/env bash
# The calls behind docs/attacks.md's "Measured" tables: the exact-score one-step denoise in front of the data set's
# classifier under the fixed attacks, each attack option set in a run folder of its own (a folder refuses a row
# measured with other options), on the first 200 measuring images, judged on R = 10 fresh S = 10 ensembles. One torch
# thread per call. Published together: python docs/publish.py --variants runs/v2-TAG-a runs/v2-TAG-b runs/v2-TAG-c
# docs/results/NAME.json (Fashion-MNIST's b folder was measured again from a committed checkout as runs/v2-fm-b2, the
# one published: the same figure)
#   bash docs/attack_options_runs.sh fashion-mnist FASHION_MNIST_DIR cnn fm
#   bash docs/attack_options_runs.sh mnist MNIST_DIR mlp mn
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
ds=${1:?data set} data=${2:?its folder} clf=${3:?classifier} tag=${4:?folder tag}
export OMP_NUM_THREADS=1
base=runs/v2-$tag-base
# the classifier, as the levers table trains it, copied into each folder
art-adp train-levers --dataset "$ds" --data-root "$data" --run-dir "$base" --threads 1 --quiet --classifiers "$clf" \
    --purified "$clf"
L=(art-adp levers --seed-scheme levers --dataset "$ds" --data-root "$data" --threads 1 --quiet --settings "one-step denoise" --models oracle
   --purified "$clf" --classifiers --judges ensemble --repeats 10 --n-examples 200 --max-iter 100 --eot-samples 8)
run() { d=runs/v2-$tag-$1; shift; mkdir -p "$d"; cp "$base/$clf"*.safetensors "$d/"; "${L[@]}" --run-dir "$d" "$@"; }
# a: the defaults (the mean of per-draw CE, constant steps) and the ensemble's CE as rows of their own
run a --attacks full-pgd-eot full-pgd-eot-ensemble
if [ "$ds" = mnist ]; then
    # MNIST's full-pgd-eot row is its page's budget (steps of 0.01 from the image itself); an attack named from the
    # registry runs at the preset's random-start budget (steps of 0.03): this row is PGD+EOT at that same budget
    run a --attacks "full-pgd-eot (rs)"
else
    # b: the margin of the ensemble's log-mean-softmax; c: the same with the halving step schedule (Fashion-MNIST only:
    # the cores' time went to CIFAR-10)
    run b --attacks full-pgd-eot --eot-target ensemble --loss margin
    run c --attacks full-pgd-eot --eot-target ensemble --loss margin --step-schedule halving
fi
run a --attacks apgd-eot apgd-eot-ensemble
