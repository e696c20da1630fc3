#!/usr/bin/env bash
# The calls behind docs/cifar10.md's tables, in the order they ran. One torch thread per call on a 2-core CPU (AMD
# EPYC, AVX-512, fp32); each call resumes its run folder's records (blocks of 50 images).
#   bash docs/cifar10_runs.sh CIFAR10_DIR RESNET20_TH TINIEST_DIR
# CIFAR10_DIR: the "python version" batches (all 50,000 training images; for measuring, the development half of the
# test set, 500 images a class); RESNET20_TH:
# pretrained_models/resnet20-12fca82f.th of akamaster/pytorch_resnet_cifar10; TINIEST_DIR: tiniest.py and tiniest.pt
# of ThalesGroup/scio, branch hub. The purifier is the bundled DenoiserUNet (load_score_model("cifar10"); its
# training command is in art_adp/pretrained/bundled.json).
set -euo pipefail
DATA=${1:?CIFAR-10 folder} RESNET20=${2:?resnet20-12fca82f.th} TINIEST=${3:?folder with tiniest.py and tiniest.pt}
export OMP_NUM_THREADS=1
DENOISER=art_adp/pretrained/cifar10_score.safetensors
python examples/cifar10_classifiers.py --resnet20 "$RESNET20" --tiniest "$TINIEST" --out runs/cifar10 --data-root "$DATA"
C=(art-adp levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10 --threads 1 --quiet
   --models denoiser --denoiser "$DENOISER" --settings "one-step denoise")
# 1. the published ResNet-20 undefended (clean, PGD, AutoAttack) and behind ADP's one-step denoise (clean, Clf-PGD)
"${C[@]}" --classifiers resnet20 --purified resnet20 --attacks clean clf-pgd autoattack --n-examples 500
# 2. the adversarially trained ResNet-20 (fast adversarial training, its one-cycle schedule over 6 epochs: what the
#    cores finished), alone and behind the purifier
"${C[@]}" --classifiers resnet20 adv-resnet20 --purified resnet20 adv-resnet20 --attacks clean clf-pgd autoattack \
    --n-examples 500 --max-epochs 6
# 3. Tiniest undefended and behind the one-step denoise; the released schedule (T 10, λ 0.05) in front of ResNet-20;
#    the exact score of the 50,000 training images (the oracle) in front of ResNet-20
"${C[@]}" --classifiers tiniest --purified tiniest --attacks clean clf-pgd --n-examples 500 --max-epochs 6
"${C[@]/one-step denoise/released (T 10, λ 0.05)}" --classifiers --purified resnet20 --attacks clean clf-pgd \
    --n-examples 200 --max-epochs 6
art-adp levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10 --threads 1 --quiet --models oracle \
    --settings "one-step denoise" --classifiers --purified resnet20 --attacks clean clf-pgd --n-examples 200 --max-epochs 6
# 4. full-gradient PGD+EOT through the purifier (100 × ε/4, EOT 8), judged on R = 10 fresh S = 10 ensembles
mkdir -p runs/cifar10-eot2 && cp runs/cifar10/resnet20.safetensors runs/cifar10-eot2/
art-adp levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10-eot2 --threads 1 --quiet \
    --models denoiser --denoiser "$DENOISER" --settings "one-step denoise" --classifiers --purified resnet20 \
    --attacks full-pgd-eot --n-examples 200 --max-iter 100 --eot-samples 8 --repeats 10
# 5. the rows not run, priced (RUN_DIR/estimate.json)
mkdir -p runs/cifar10-est && cp runs/cifar10/resnet20.safetensors runs/cifar10/tiniest.pt runs/cifar10-est/
art-adp levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10-est --threads 1 --models denoiser oracle \
    --denoiser "$DENOISER" --settings "one-step denoise" "released (T 10, λ 0.05)" --classifiers --purified resnet20 \
    tiniest --attacks clean clf-pgd bpda-eot full-pgd-eot apgd-eot --n-examples 200 --max-iter 100 --eot-samples 8 \
    --estimate-only
echo "python docs/publish.py runs/cifar10/table.json docs/results/cifar10_levers.json (likewise cifar10-eot2/table.json:"
echo "cifar10_full_gradient.json; cifar10-est/estimate.json: cifar10_not_run.json) && python docs/render.py"
