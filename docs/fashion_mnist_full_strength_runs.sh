#!/usr/bin/env bash
# The calls behind docs/fashion_mnist_results.md's "attacks at full strength" tables, in order: the seeded DenoiserUNet, then
# each defence's attacks at full strength on the first 200 measuring images, one run folder per defence (each call
# resumes its folder's records per image; folders can run side by side on the cores). Sized for one torch thread per
# call on a 2-core CPU (AMD EPYC, AVX2, fp32, two calls at a time): the exact score's rows take about 12 min (PGD+EOT),
# 15 min (the three later attacks) and 14 min (APGD-EOT); the DenoiserUNet's PGD+EOT row 81 min. A row records its
# images 50 at a time: an interrupted call re-run resumes from its last whole block.
#   bash docs/fashion_mnist_full_strength_runs.sh FASHION_MNIST_DIR
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
DATA=${1:?the folder with the four Fashion-MNIST idx files}
export OMP_NUM_THREADS=1
# the DenoiserUNet: 500 steps (its first milestone; --minutes 15 stops there on a CPU), seeded
art-adp train-denoiser --dataset fashion-mnist --data-root "$DATA" --run-dir runs/denoiser-fmnist --minutes 15 --threads 1
# the classifiers: the SmallCNN and the adversarially trained one (stopped on its validation plateau), as the levers
# table trained them (docs/fashion_mnist_runs.sh step 1) and copied into each defence's folder
art-adp train-levers --dataset fashion-mnist --data-root "$DATA" --run-dir runs/levers-fmnist-base --threads 1 --quiet \
    --classifiers cnn adv-cnn --purified cnn
L=(art-adp levers --seed-scheme levers --dataset fashion-mnist --data-root "$DATA" --threads 1 --quiet --settings "one-step denoise"
   --classifiers --judges ensemble --repeats 2 --n-examples 200)
FULL=(--attacks full-pgd-eot --restarts 2 --max-iter 100 --eot-samples 8)
LATER=(--attacks selective-eot lowfreq-vote full-pgd-eot-dev apgd-eot-dev --restarts 1 --eot-samples 4)
APGD=(--attacks apgd-eot --restarts 1 --max-iter 100 --eot-samples 8)
for run in fm-full:oracle:cnn fm-adv-full:oracle:adv-cnn fm-den-full:denoiser:cnn fm-den-adv-full:denoiser:adv-cnn; do
    IFS=: read -r dir model clf <<< "$run"
    mkdir -p "runs/$dir" && cp runs/levers-fmnist-base/"$clf"*.safetensors "runs/$dir/"
    M=(--models "$model" --denoiser runs/denoiser-fmnist/denoiser.safetensors --purified "$clf" --run-dir "runs/$dir")
    for attacks in FULL LATER APGD; do
        declare -n a=$attacks
        "${L[@]}" "${M[@]}" "${a[@]}"
    done
done
echo "python docs/publish.py runs/DIR/table.json docs/results/NAME.json && python docs/render.py"
