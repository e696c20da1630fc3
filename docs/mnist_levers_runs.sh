#!/usr/bin/env bash
# The calls that measured docs/results/mnist_levers.json (docs/mnist_results.md, "The answer on a CPU"), in the order they
# ran, each resuming the same run folder (records per digit: an interrupted call re-run measures only what is
# missing). One torch thread per call, on a shared 2-core CPU; the table names the last call.
#   bash docs/mnist_levers_runs.sh MNIST_DIR
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
DATA=${1:?the folder with the four MNIST idx files}
export OMP_NUM_THREADS=1
# the published record stopped after its first milestone (500 steps), where the MSE targets were met
art-adp train-denoiser --dataset mnist --data-root "$DATA" --run-dir runs/denoiser-mnist --minutes 60 --quiet
# the preset's classifiers (the MLP and its adversarially trained twin), trained first: art-adp levers measures only
art-adp train-levers --data-root "$DATA" --run-dir runs/levers --threads 1
L=(art-adp levers --seed-scheme levers --data-root "$DATA" --run-dir runs/levers --denoiser runs/denoiser-mnist/denoiser.safetensors --threads 1)
ALL=(clean clf-pgd clf-pgd-strong clf-pgd-eps/256)
"${L[@]}" --models oracle --settings "released (T 10, λ 0.05)" --attacks "${ALL[@]}" --n-examples 1000
"${L[@]}" --models oracle --settings "T 10, λ 0.2" --attacks "${ALL[@]}" --n-examples 1000
"${L[@]}" --models oracle --settings "T 10, λ 0.5" "one-step denoise" --attacks clean clf-pgd clf-pgd-strong --n-examples 1000
"${L[@]}" --models denoiser --settings "one-step denoise" --attacks "${ALL[@]}" --n-examples 1000
"${L[@]}" --models denoiser --settings "released (T 10, λ 0.05)" "T 10, λ 0.5" --attacks clean clf-pgd --n-examples 300
"${L[@]}" --models denoiser oracle --settings "one-step denoise" --attacks bpda-eot full-pgd-eot --n-examples 100 \
    --repeats 2 --eot-samples 5
"${L[@]}" --models oracle --settings "T 10, λ 0.5" --attacks bpda-eot full-pgd-eot --n-examples 100 --repeats 2 \
    --eot-samples 5
"${L[@]}" --models oracle --settings "σ 0.1, one-step" "σ 0.5, one-step" "σ 0.1, T 10, λ 0.5" "σ 0.5, T 10, λ 0.5" \
    "T 30, λ 0.05" "T 30, λ 0.5, τ 0" --attacks clean clf-pgd --n-examples 1000
"${L[@]}" --models denoiser --settings "σ 0.1, one-step" "σ 0.5, one-step" --attacks clean clf-pgd --n-examples 1000
"${L[@]}" --models denoiser --settings "released (T 10, λ 0.05)" --attacks clf-pgd-eps/256 --n-examples 300
"${L[@]}" --models denoiser --settings "T 10, λ 0.2" "σ 0.1, T 10, λ 0.5" "σ 0.5, T 10, λ 0.5" --attacks clean clf-pgd \
    --n-examples 200
# The attacks of the later re-evaluations and the stronger adaptive budget (40 × 0.03 from a random start, EOT 4,
# R 2, fixed noise too) on the first 200 digits, in their own folder (docs/results/mnist_new_attacks.json): the exact
# score's one-step denoise and the fp32 DenoiserUNet's (docs/results/denoiser_mnist_fp32.json). The low-frequency vote
# attack's published row ran it under its old name, systemic-lowfreq (sign steps, margin capped at 1; the records keep
# that name): today's lowfreq-vote is its successor, DiffBreak's loop at its own 100 steps, and measures a row of its own
N=(art-adp levers --seed-scheme levers --dataset mnist --data-root "$DATA" --run-dir runs/levers-mnist --threads 1 --classifiers
   --purified mlp --judges ensemble fixed --repeats 2 --eot-samples 4 --n-examples 200)
art-adp train-levers --dataset mnist --data-root "$DATA" --run-dir runs/levers-mnist --threads 1 --classifiers --purified mlp
"${N[@]}" --models oracle --settings "one-step denoise" --attacks clean "full-pgd-eot (rs)" selective-eot \
    lowfreq-vote apgd-eot-dev
"${N[@]}" --denoiser runs/denoiser-mnist-fp32/denoiser.safetensors --models denoiser --settings "one-step denoise" \
    --attacks clean "full-pgd-eot (rs)" "bpda-eot (rs)"
# The SmallCNN adversarially trained at ε 0.3 (PGD 10 × 0.075 per batch; 5,400 digits, 600 held out; stopped by the
# session's time at 24 epochs, still rising) under white-box PGD and AutoAttack (standard version), and ADP in front of
# it (docs/results/mnist_adv_cnn.json)
art-adp train-levers --dataset mnist --data-root "$DATA" --run-dir runs/levers-mnist-adv --threads 1 --max-epochs 24 \
    --classifiers adv-cnn --purified adv-cnn
M=(art-adp levers --seed-scheme levers --dataset mnist --data-root "$DATA" --run-dir runs/levers-mnist-adv --threads 1 --max-epochs 24)
"${M[@]}" --models oracle --settings "one-step denoise" --attacks clean clf-pgd clf-pgd-strong --classifiers adv-cnn \
    --purified adv-cnn --n-examples 1000
"${M[@]}" --models oracle --settings "one-step denoise" "released (T 10, λ 0.05)" --attacks clean clf-pgd \
    clf-pgd-strong --classifiers --purified adv-cnn --n-examples 1000
"${M[@]}" --models oracle --settings "one-step denoise" --purified adv-cnn --attacks autoattack --classifiers adv-cnn \
    --n-examples 200
"${M[@]}" --models oracle --settings "one-step denoise" --purified adv-cnn --classifiers --attacks "full-pgd-eot (rs)" \
    "bpda-eot (rs)" \
    --judges ensemble fixed --repeats 2 --eot-samples 4 --n-examples 200
# The same SmallCNN trained to its plateau (robust validation accuracy, patience 5, the default cap of 100 epochs;
# docs/results/mnist_adv_cnn_plateau.json)
P=(art-adp levers --seed-scheme levers --dataset mnist --data-root "$DATA" --run-dir runs/mnist-adv-plateau --threads 1 --quiet
   --models oracle --settings "one-step denoise" --classifiers adv-cnn --purified adv-cnn)
art-adp train-levers --dataset mnist --data-root "$DATA" --run-dir runs/mnist-adv-plateau --threads 1 --quiet \
    --classifiers adv-cnn --purified adv-cnn
"${P[@]}" --attacks clean clf-pgd --n-examples 1000
"${P[@]}" --attacks autoattack --n-examples 200
# The SmallCNN trained behind the seeded DenoiserUNet's one-step denoise (docs/results/mnist_behind_denoiser.json)
D=(art-adp levers --seed-scheme levers --dataset mnist --data-root "$DATA" --run-dir runs/mnist-behind-den --threads 1 --quiet
   --models denoiser --denoiser runs/denoiser-mnist/denoiser.safetensors --settings "one-step denoise")
art-adp train-levers --dataset mnist --data-root "$DATA" --run-dir runs/mnist-behind-den --threads 1 --quiet \
    --denoiser runs/denoiser-mnist/denoiser.safetensors --classifiers cnn-denoiser --purified cnn-denoiser
"${D[@]}" --classifiers cnn-denoiser --purified cnn-denoiser --attacks clean clf-pgd --n-examples 1000
"${D[@]}" --classifiers cnn-denoiser --purified cnn-denoiser --attacks autoattack --n-examples 200
"${D[@]}" --classifiers --purified cnn-denoiser --attacks full-pgd-eot --restarts 2 --max-iter 100 --eot-samples 8 \
    --judges ensemble --repeats 2 --n-examples 200
