#!/usr/bin/env bash
# The calls that measure docs/results/fashion_mnist_levers.json (docs/fashion_mnist_results.md), in order, each resuming the
# same run folder (records per image: an interrupted call re-run measures only what is missing; more images can be
# added later by a larger --n-examples). Sized for a shared 2-core CPU, one torch thread per call: clean and Clf-PGD
# on 943 test images (all of the subset's), adaptive rows (EOT 8, R 2, judged also with fixed noise) on 200 (one-step
# denoise) and 100 (multi-step ADP). Calls can run side by side on the cores if they write different run folders
# (merge by concatenating records; a folder refuses an adaptive row at another EOT budget than its records').
#   bash docs/fashion_mnist_runs.sh FASHION_MNIST_DIR [DENOISER]
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
DATA=${1:?the folder with the four Fashion-MNIST idx files}
DENOISER=${2:-runs/denoiser-fmnist/denoiser.safetensors}
export OMP_NUM_THREADS=1
L=(art-adp levers --seed-scheme levers --dataset fashion-mnist --data-root "$DATA" --run-dir runs/levers-fmnist --denoiser "$DENOISER"
   --threads 1)
A=(--classifiers --judges ensemble fixed --repeats 2 --eot-samples 8)
SIGMA=("one-step denoise" "σ 0.1, one-step" "σ 0.5, one-step")
# 1. the baselines: the SmallCNN (trained here, 20 epochs) and its PGD-adversarially trained twin (trained until the
#    robust accuracy on 300 held-out training images stops rising, patience 5), white-box PGD; AutoAttack (standard
#    version, torchattacks' port: APGD-CE, APGD-T, FAB-T, Square 5,000 queries on what is still robust): about 15
#    minutes per 200 images of the robust CNN on one core (AMD EPYC, AVX2, one thread, fp32); the classifiers are
#    trained first (art-adp levers measures only)
art-adp train-levers --dataset fashion-mnist --data-root "$DATA" --run-dir runs/levers-fmnist --threads 1 \
    --classifiers cnn adv-cnn --purified cnn
"${L[@]}" --models oracle --settings "one-step denoise" --attacks clean clf-pgd clf-pgd-strong \
    --classifiers cnn adv-cnn --purified cnn --n-examples 943
"${L[@]}" --models oracle --settings "one-step denoise" --attacks autoattack --classifiers adv-cnn cnn --purified cnn \
    --n-examples 200
# 2. the paper's attack (Clf-PGD as foolbox LinfPGD(rel_stepsize=0.25) ran it: 40 × ε/4, random start) and the
#    stronger one, both score models, on the SmallCNN and in front of the adversarially trained one
"${L[@]}" --models oracle denoiser --settings "${SIGMA[@]}" "released (T 10, λ 0.05)" "T 10, λ 0.5" \
    --attacks clean clf-pgd clf-pgd-strong --classifiers --n-examples 943
"${L[@]}" --models oracle denoiser --settings "one-step denoise" --purified adv-cnn \
    --attacks clean clf-pgd clf-pgd-strong --classifiers --n-examples 943
# 3. adaptive attacks (40 × ε/4 from a random start, EOT 8; APGD-EOT: CE then DLR, 40 iterations each; the later
#    re-evaluations' attacks by their registry names): the one-step denoise on 200 images, the multi-step settings on
#    100; the trained model's multi-step rows cost T × 2 UNet passes (and their backward) per draw: time one image
"${L[@]}" --models oracle denoiser --settings "one-step denoise" --attacks full-pgd-eot bpda-eot apgd-eot \
    selective-eot --purified cnn "${A[@]}" --n-examples 200
"${L[@]}" --models oracle denoiser --settings "one-step denoise" --attacks full-pgd-eot --purified adv-cnn "${A[@]}" \
    --n-examples 200
"${L[@]}" --models oracle --settings "released (T 10, λ 0.05)" "T 10, λ 0.5" --attacks full-pgd-eot bpda-eot \
    --purified cnn "${A[@]}" --n-examples 100
"${L[@]}" --models oracle denoiser --settings "σ 0.1, one-step" "σ 0.5, one-step" --attacks full-pgd-eot \
    --purified cnn "${A[@]}" --n-examples 200
# 4. the table from the records (measures nothing new), then copy it into the repository
"${L[@]}" --models oracle --settings "one-step denoise" --attacks clean --classifiers cnn adv-cnn \
    --n-examples 943 --quiet
echo "cp runs/levers-fmnist/table.json docs/results/fashion_mnist_levers.json && python docs/render.py"
