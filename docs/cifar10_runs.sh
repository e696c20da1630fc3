#!/usr/bin/env bash
# The calls behind docs/cifar10_results.md's tables. One torch thread per call on a 2-core CPU (AMD EPYC, AVX-512, fp32);
# each call resumes its run folder's records (blocks of 50 images); folders can run side by side on the cores.
#   bash docs/cifar10_runs.sh CIFAR10_DIR RESNET20_TH TINIEST_DIR
# CIFAR10_DIR: the "python version" batches (all 50,000 training images; for measuring, the development half of the
# test set, 500 images a class); RESNET20_TH: pretrained_models/resnet20-12fca82f.th of
# akamaster/pytorch_resnet_cifar10; TINIEST_DIR: tiniest.py and tiniest.pt of ThalesGroup/scio, branch hub. The
# purifier is the bundled DenoiserUNet (load_score_model("cifar10"); its training command is in
# art_adp/pretrained/bundled.json).
set -euo pipefail
# --seed-scheme levers: the seeds the published run folders were measured under (a new folder's default, apart, draws
# others at the same budgets), so that each call gives the published records.
DATA=${1:?CIFAR-10 folder} RESNET20=${2:?resnet20-12fca82f.th} TINIEST=${3:?folder with tiniest.py and tiniest.pt}
export OMP_NUM_THREADS=1
DENOISER=art_adp/pretrained/cifar10_score.safetensors
python examples/cifar10_classifiers.py --resnet20 "$RESNET20" --tiniest "$TINIEST" --out runs/cifar10 --data-root "$DATA"
L=(art-adp levers --seed-scheme levers --dataset cifar10 --data-root "$DATA" --threads 1 --quiet --max-epochs 6)
T=(art-adp train-levers --dataset cifar10 --data-root "$DATA" --threads 1 --quiet)
D=(--models denoiser --denoiser "$DENOISER")
# 1. adv-resnet20: fast adversarial training of ResNet-20, its one-cycle schedule over 6 epochs (what the cores
#    finished), trained first (art-adp levers measures only), then measured with the published ResNet-20's rows
"${T[@]}" --max-epochs 6 --run-dir runs/cifar10 --classifiers adv-resnet20 --purified
"${L[@]}" --run-dir runs/cifar10 "${D[@]}" --settings "one-step denoise" --classifiers resnet20 adv-resnet20 \
    --purified resnet20 adv-resnet20 --attacks clean clf-pgd autoattack --n-examples 500
# 2. the table (docs/results/cifar10_levers.json): both ResNet-20s undefended (clean, PGD, AutoAttack) and behind
#    ADP's one-step denoise (clean, Clf-PGD), the trained weights copied into a folder of their own
mkdir -p runs/cifar10-b && cp runs/cifar10/resnet20.safetensors runs/cifar10/adv-resnet20.safetensors runs/cifar10-b/
"${L[@]}" --run-dir runs/cifar10-b "${D[@]}" --settings "one-step denoise" --classifiers resnet20 adv-resnet20 \
    --purified resnet20 adv-resnet20 --attacks clean clf-pgd autoattack --n-examples 500
# 3. Tiniest; the exact score of the 50,000 training images (the oracle) and the released schedule (T 10, λ 0.05) in
#    front of ResNet-20 (docs/results/cifar10_more.json)
mkdir -p runs/cifar10-c && cp runs/cifar10/resnet20.safetensors runs/cifar10/tiniest.pt runs/cifar10-c/
"${L[@]}" --run-dir runs/cifar10-c "${D[@]}" --settings "one-step denoise" --classifiers tiniest --purified tiniest \
    --attacks clean clf-pgd --n-examples 500
"${L[@]}" --run-dir runs/cifar10-c --models oracle --settings "one-step denoise" --classifiers --purified resnet20 \
    --attacks clean clf-pgd --n-examples 200
"${L[@]}" --run-dir runs/cifar10-c "${D[@]}" --settings "released (T 10, λ 0.05)" --classifiers --purified resnet20 \
    --attacks clean clf-pgd --n-examples 200
# 4. full-gradient PGD+EOT through the purifier (100 × ε/4, EOT 8), judged on R = 10 fresh S = 10 ensembles
#    (docs/results/cifar10_full_gradient.json)
mkdir -p runs/cifar10-eot2 && cp runs/cifar10/resnet20.safetensors runs/cifar10-eot2/
art-adp levers --seed-scheme levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10-eot2 --threads 1 --quiet \
    --models denoiser --denoiser "$DENOISER" --settings "one-step denoise" --classifiers --purified resnet20 \
    --attacks full-pgd-eot --n-examples 200 --max-iter 100 --eot-samples 8 --repeats 10
# 5. the rows not run, priced (RUN_DIR/estimate.json; docs/results/cifar10_not_run.json)
mkdir -p runs/cifar10-est && cp runs/cifar10/resnet20.safetensors runs/cifar10/tiniest.pt runs/cifar10-est/
art-adp levers --seed-scheme levers --dataset cifar10 --data-root "$DATA" --run-dir runs/cifar10-est --threads 1 --models denoiser oracle \
    --denoiser "$DENOISER" --settings "one-step denoise" "released (T 10, λ 0.05)" --classifiers --purified resnet20 \
    tiniest --attacks clean clf-pgd bpda-eot full-pgd-eot apgd-eot --n-examples 200 --max-iter 100 --eot-samples 8 \
    --estimate-only
# The later calls at the preset's epochs (adv-resnet20: 15; resnet20-denoiser: up to 8):
L=(art-adp levers --seed-scheme levers --dataset cifar10 --data-root "$DATA" --threads 1 --quiet)
# 6. the noise clip and σ (docs/results/cifar10_clip.json): the DenoiserUNet's one-step denoise of the unclipped noisy
#    input it was trained on, of the clipped one (ADP's, the paper's), and at σ 0.125, in front of both published
#    classifiers, 500 images
mkdir -p runs/cifar10-clip && cp runs/cifar10/resnet20.safetensors runs/cifar10/tiniest.pt runs/cifar10-clip/
"${L[@]}" --run-dir runs/cifar10-clip "${D[@]}" --classifiers --settings "one-step denoise" \
    "one-step denoise, clipped noise" "σ 0.125, one-step" --purified resnet20 tiniest --attacks clean --n-examples 500
# 7. full-gradient PGD+EOT through the unclipped one-step denoise, in fp32 and with bf16 gradient passes, the same
#    images and seeds (docs/results/cifar10_full_gradient_unclipped.json; the pair: precision_cifar10.json,
#    python benchmarks/precision_agreement.py runs/cifar10-p-fp32 runs/cifar10-p-bf16 OUT.json)
A=(--n-examples 200 --max-iter 100 --eot-samples 8 --repeats 10)
for p in fp32 bf16; do
    mkdir -p runs/cifar10-p-$p && cp runs/cifar10/resnet20.safetensors runs/cifar10-p-$p/
    "${L[@]}" --run-dir runs/cifar10-p-$p "${D[@]}" --classifiers --settings "one-step denoise" --purified resnet20 \
        --attacks full-pgd-eot "${A[@]}" --attack-precision $p
done
# 8. resnet20-denoiser: the published ResNet-20 fine-tuned on the one-step denoise's outputs (fresh noise each epoch;
#    trained first; zoo:cifar10/resnet20-denoiser), its clean accuracy on 500 images, then full-gradient PGD+EOT on
#    both EOT losses and APGD-EOT on 200, fp32, under a new folder's seed scheme (docs/results/cifar10_learned.json;
#    the two attacks after the first ran side by side into the folder)
mkdir -p runs/cifar10-learned && cp runs/cifar10/resnet20.safetensors runs/cifar10-learned/
"${T[@]}" --run-dir runs/cifar10-learned --denoiser "$DENOISER" --classifiers --purified resnet20-denoiser
N=(art-adp levers --dataset cifar10 --data-root "$DATA" --threads 1 --quiet --run-dir runs/cifar10-learned "${D[@]}"
   --settings "one-step denoise" --classifiers --purified resnet20-denoiser)
"${N[@]}" --attacks clean --n-examples 500
for attack in full-pgd-eot apgd-eot full-pgd-eot-ensemble; do
    "${N[@]}" --attacks "$attack" "${A[@]}"
done
# 9. adv-resnet20 at fast adversarial training's full 15 epochs (resumable; docs/results/cifar10_baseline.json):
#    clean and AutoAttack on 500 images
"${T[@]}" --max-epochs 15 --run-dir runs/cifar10-adv15 --classifiers adv-resnet20 --purified
"${L[@]}" --max-epochs 15 --run-dir runs/cifar10-adv15 "${D[@]}" --settings "one-step denoise" \
    --classifiers adv-resnet20 --purified --attacks clean autoattack --n-examples 500
# 10. σ 0.125 in front of the published ResNet-20 (docs/results/cifar10_sigma.json), and the 15-epoch adv-resnet20
#     behind the unclipped one-step denoise (cifar10_adv_behind_purifier.json): clean and full-gradient PGD+EOT, bf16
mkdir -p runs/cifar10-s125 runs/cifar10-advp && cp runs/cifar10/resnet20.safetensors runs/cifar10-s125/
cp runs/cifar10-adv15/adv-resnet20.safetensors runs/cifar10-advp/
"${L[@]}" --run-dir runs/cifar10-s125 "${D[@]}" --classifiers --settings "σ 0.125, one-step" --purified resnet20 \
    --attacks clean full-pgd-eot "${A[@]}" --attack-precision bf16
"${L[@]}" --run-dir runs/cifar10-advp "${D[@]}" --classifiers --settings "one-step denoise" --purified adv-resnet20 \
    --attacks clean full-pgd-eot "${A[@]}" --attack-precision bf16
"${L[@]}" --run-dir runs/cifar10-advp "${D[@]}" --classifiers --settings "one-step denoise" --purified adv-resnet20 \
    --attacks full-pgd-eot-ensemble "${A[@]}" --attack-precision bf16
# 11. APGD-EOT (CE then DLR, 100 it/loss, EOT 8; bf16 gradient passes) on the 15-epoch adv-resnet20's purified row,
#     200 images, R = 10, into its folder (cifar10_adv_behind_purifier.json: per image over three attacks)
"${L[@]}" --run-dir runs/cifar10-advp "${D[@]}" --classifiers --settings "one-step denoise" --purified adv-resnet20 \
    --attacks apgd-eot "${A[@]}" --attack-precision bf16
# 12. Tiniest behind the unclipped one-step denoise: clean and full-gradient PGD+EOT, bf16 (cifar10_tiniest.json)
mkdir -p runs/cifar10-tin && cp runs/cifar10/tiniest.pt runs/cifar10-tin/
"${L[@]}" --run-dir runs/cifar10-tin "${D[@]}" --classifiers --settings "one-step denoise" --purified tiniest \
    --attacks clean full-pgd-eot "${A[@]}" --attack-precision bf16
# 13. Tiniest: full-gradient PGD+EOT with the ensemble loss, then APGD-EOT, into its folder (cifar10_tiniest.json:
#     per image over the three)
for attack in full-pgd-eot-ensemble apgd-eot; do
    "${L[@]}" --run-dir runs/cifar10-tin "${D[@]}" --classifiers --settings "one-step denoise" --purified tiniest \
        --attacks "$attack" "${A[@]}" --attack-precision bf16
done
# 14. adv-resnet20-denoiser: the 15-epoch adv-resnet20 fine-tuned adversarially through the unclipped one-step denoise,
#     full gradient (fast adversarial training, 4 epochs; resumable within an epoch; trained first), then its
#     adaptive rows as Tiniest's
mkdir -p runs/cifar10-advd && cp runs/cifar10-adv15/adv-resnet20.safetensors runs/cifar10-advd/
"${T[@]}" --run-dir runs/cifar10-advd --denoiser "$DENOISER" --classifiers adv-resnet20-denoiser \
    --purified adv-resnet20-denoiser
"${L[@]}" --run-dir runs/cifar10-advd "${D[@]}" --settings "one-step denoise" --classifiers adv-resnet20-denoiser \
    --purified adv-resnet20-denoiser --attacks clean --n-examples 500
for attack in full-pgd-eot full-pgd-eot-ensemble apgd-eot; do
    "${L[@]}" --run-dir runs/cifar10-advd "${D[@]}" --classifiers --settings "one-step denoise" \
        --purified adv-resnet20-denoiser --attacks "$attack" "${A[@]}" --attack-precision bf16
done
# 15. the published ResNet-20 behind the unclipped one-step denoise: APGD-EOT, bf16, into the folder of its
#     full-gradient rows (cifar10_full_gradient_unclipped.json: per image over the three)
"${L[@]}" --run-dir runs/cifar10-p-fp32 "${D[@]}" --classifiers --settings "one-step denoise" --purified resnet20 \
    --attacks apgd-eot "${A[@]}" --attack-precision bf16
echo "python docs/publish.py runs/cifar10-b/table.json docs/results/cifar10_levers.json (likewise runs/cifar10-c:"
echo "cifar10_more.json, runs/cifar10-eot2: cifar10_full_gradient.json, runs/cifar10-est/estimate.json:"
echo "cifar10_not_run.json) && python docs/render.py"
