"""No figure without its source: every number with a unit that a user reads outside a rendered block.

    python docs/figures.py          # lists every figure that is neither rendered nor allowed below; exit 1 if any

A *figure* is a number with a unit (s, ms, µs, min, h, days, %, GB, GiB, MB, MiB, samples/s, img/s, TFLOP/s, GFLOP,
TB/s, …) or a ratio (``0.19×``, ``2× faster``; not a size such as ``8×8`` or a product such as ``40 × 1,280``) in
the prose of README.md, docs/*.md, benchmarks/README.md and the notebooks' markdown cells. A figure inside a
rendered block (``docs/render.py``) comes from a committed result file and is checked there. Any other figure must
be one of :data:`ALLOWED`, each with its kind and reason:

- ``parameter``: a setting, a threshold, a default or a confidence level, not a measurement;
- ``arithmetic``: computed from parameters or constants on the page (the reason shows the computation);
- ``paper``: a cited paper's published figure (the reason names the paper and table);
- ``check``: a figure of an ``art-adp check`` report committed in ``docs/checks/`` (the reason is its path), where
  its number must occur;
- ``result``: a measured figure quoted in prose; the reason is a name of ``docs/render.py``'s ``FIGURES``, and its
  number must occur in that figure's rendering or its result file (so it cannot drift from the file).

An entry is a phrase of the page (code spans removed) that contains the figure; an entry that matches nothing is
stale and fails too. Code (fenced blocks and inline spans) is commands and parameters, not figures, and is skipped.
Pages left out, with the reason: :data:`EXCLUDED`; not user pages at all: ``upstream/`` (the ART pull request's
text, reviewed with it), ``benchmarks/DEVICE_RUN.md`` (developer notes) and ``docs/cards/`` (evaluation cards as the
harness wrote them, each beside its result file).
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md", "benchmarks/README.md", "examples/*.ipynb")
EXCLUDED = {
    "docs/notebooks.md": "rendered whole from docs/notebooks.json by docs/render.py (WHOLE_PAGES), checked there",
}

_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNITS = (
    r"samples/s|img/s|images/s|TFLOP/s|GFLOP/s|TB/s|GB/s|TFLOP|GFLOP|GiB|GB|MiB|MB|KiB|kB|ms|µs|"
    r"days?|hours?|minutes?|seconds?|min|h|s|%"
)
FIGURE = re.compile(
    rf"(?<![\w.])(?P<figure>(?:{_NUM}\s?[–-]\s?)?{_NUM}(?:\s?(?:{_UNITS})(?![\w(/])|\s?×(?!\s?[\dA-Zα-ωΑ-Ω(])))"
)
_BLOCK = re.compile(r"<!-- render: [\w.-]+ -->\n.*?<!-- end render -->", re.S)
_FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[^\n]*$", re.S | re.M)
_INDENTED_CODE = re.compile(r"(?:(?<=\n\n)|^)(?:(?: {4}|\t)[^\n]*\n?)+")
_CODE = re.compile(r"`[^`\n]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.S)

#: The MNIST answer's two exact-score rows over every attack run on them (the flags of the result files named).
_MNIST_CNN_OVER_ALL = ("128 digits left by the answer's three attacks (64.0 %), less the nine APGD-EOT-T breaks and 100 "
                       "(the Intel APGD-EOT run): 118 of 200, 59.0 % (the flags of mnist-behind-purifier, "
                       "mnist-apgd-t-cnn, mnist-apgd-intel-cnn)")
_MNIST_ADV_OVER_ALL = ("130 digits left by the answer's three attacks (65.0 %), less 0, 55, 67, 101 (APGD-EOT-T) and 77 "
                       "(the Intel APGD-EOT run): 125 of 200, 62.5 % (the flags of mnist-adv-behind-purifier, "
                       "mnist-apgd-t, mnist-apgd-intel)")

# (page pattern, phrase, kind, reason). Keep it small: delete a figure rather than allow it.
ALLOWED: list[tuple[str, str, str, str]] = [
    # parameters, thresholds, confidence levels
    ("*", "95 % confidence", "parameter", "the confidence level of the intervals"),
    ("benchmarks/README.md", "The budgets are 5 minutes for the demo", "parameter", "issue 33's budget for the demo"),
    ("benchmarks/README.md", "adaptive row in 25 minutes of one thread", "parameter", "issue 56's target"),
    ("benchmarks/README.md", "took 37 min 6 s of one thread", "result", "cifar10-schedules"),
    ("benchmarks/README.md", "against 53 min 41 s for the fp32 row", "result", "cifar10-full-gradient"),
    ("benchmarks/README.md", "bf16 makes the step 1.70× faster", "result", "attack-step"),
    ("benchmarks/README.md", "25 minutes would need about 9.4 ms per image-step (25 minutes over 160,000)", "arithmetic",
     "25 min × 60 s / 160,000 image-steps = 9.4 ms, issue 56's target over the row's image-steps"),
    ("benchmarks/README.md", "and 8 minutes for pytest", "parameter", "the project's budget for the test suite"),
    ("benchmarks/README.md", "far from 125 images/s", "parameter", "issue 33's GPU throughput target"),
    ("*", "95 % CIs", "parameter", "the confidence level of the intervals"),
    ("*", "Wilson 95 % intervals", "parameter", "the confidence level of the intervals"),
    ("*", "95 % Wilson intervals", "parameter", "the confidence level of the intervals"),
    ("*", "with 95 % intervals", "parameter", "the confidence level of the intervals"),
    ("*", "a 95 % interval", "parameter", "the confidence level of the intervals"),
    ("*", "default 512 MiB on a CPU", "parameter", "memory_budget's default"),
    ("docs/threat_models.md", "ε = 1 → ≈ 0 %", "parameter", "the sanity check's expectation, not a measurement"),
    ("examples/06_evaluation_card.ipynb", "must reach ≈ 0 %", "parameter", "the sanity check's expectation"),
    ("docs/experiments.md", "≥ 80 % coverage", "parameter", "ART's coverage threshold"),
    ("docs/api_overview.md", "values within 10 % of the range", "parameter", "the tolerance of the input check"),
    ("docs/evaluation.md", "leaves > 10 % accuracy", "parameter", "the sanity check's threshold"),
    ("docs/evaluation.md", "a gradient passed on 10 % of the pixels", "parameter", "the planted defence's setting"),
    ("docs/corruptions.md", "≤ 5 % of the", "parameter", "the DCT augmentation's energy threshold"),
    ("docs/corruptions.md", "= 5 % false positives", "parameter", "the detector's fpr=0.05"),
    ("docs/corruptions.md", "at 5 % false positives", "parameter", "the detector's fpr=0.05 (CIFAR-10 rows)"),
    ("README.md", "65.6 % over the 75 against the undefended ResNet-20's 68.3 %", "result", "corruptions-cifar10"),
    ("docs/corruptions.md", '69.5 % clean and 50.3 % over the 75 at σ = 0.1', "result", "corruptions-cifar10"),
    ("docs/corruptions.md", 'keeps 70.0 % clean and 57.8 % over the 75', "result", "corruptions-cifar10"),
    ("docs/corruptions.md", 'the AugMix-fine-tuned purifier on it, 68.5 % clean and 55.5 % over the 75', "result", "corruptions-cifar10"),
    ("docs/corruptions.md", "up to 5 % of the energy", "parameter", "the DCT augmentation's energy threshold (CIFAR-10 rows)"),
    ("docs/corruptions.md", 'keeps 68.3 % over the 75 corrupted sets (48.4 %', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", 'lifts the noise group to 66.2 %', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", '(84.0 against 89.5 %): 65.6 %', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", '13.0 % clean at σ = 0.25', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", 'recovers 67.0 % clean and 36.9 %', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", '(44.5 % over the 75, 50.5 % clean)', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", 'keeps 63.3 % over the 75 at 73.0 % clean: 68.3 % on the noise group, but 58.0 %', "result", 'corruptions-cifar10'),
    ("docs/corruptions.md", "(80.49 % over the 75 for σ = 0, against its raw WideResNet's 71.89 %)", "paper", 'Yoon et al. 2021, Table 4: ADP σ=0 and raw WideResNet'),
    ("benchmarks/README.md", "computes (0 %)", "parameter", "what the table's 0 % means, a definition"),
    ("examples/05_your_own_data.ipynb", "scaled up 3×", "parameter", "the example's scaling factor"),
    # arithmetic on parameters
    ("docs/mnist_results.md", "(40 % at the defaults, 99.5 % at T 50, λ 0.1)", "arithmetic",
     "1 − (1 − λ)^T at T 10, λ 0.05 and at T 50, λ 0.1"),
    ("*", "0.01 % of the paper", "arithmetic", "80 × 32 = 2,560 of the paper's 200,000 × 128 = 25.6 M samples"),
    ("docs/mnist_results.md", "the Wilson interval of 60 % is [39, 78]", "arithmetic", "12 of 20, Wilson 95 %"),
    ("benchmarks/README.md", "the input grows 16×", "arithmetic", "from 256 to 4,096 images (--sizes)"),
    ("docs/diffusion.md", "each is 13–48 % above the one before", "arithmetic",
     "the ratios of the σ' listed beside it, from DDPM's linear β schedule"),
    ("docs/threat_models.md", "(16.7 % at 40, 33.3 % at 100 iterations)", "result", "card-digits-paper-20-page"),
    # cited papers
    ("*", "78.91 %", "paper", "RobustBench CIFAR-10 Linf leaderboard: Jang et al. 2019 (ResNet-20), clean accuracy"),
    ("*", "34.95 %", "paper", "RobustBench CIFAR-10 Linf leaderboard: Jang et al. 2019 (ResNet-20), AutoAttack"),
    ("*", "98.07 %", "paper", "Yoon et al. 2021, MNIST: ADP clean accuracy"),
    ("*", "93.19 %", "paper", "Yoon et al. 2021, appendix (more datasets): ADP clean accuracy on Fashion-MNIST"),
    ("*", "86.62 %", "paper", "Yoon et al. 2021, appendix (more datasets): ADP under Clf-PGD on Fashion-MNIST"),
    ("*", "96.41 %", "paper", "Yoon et al. 2021, MNIST: ADP under Clf-PGD"),
    ("*", "86.14 %", "paper", "Yoon et al. 2021, Table 2: ADP clean accuracy on CIFAR-10"),
    ("*", "80.24 %", "paper", "Yoon et al. 2021, Table 3: Clf-PGD"),
    ("*", "70.01 %", "paper", "Yoon et al. 2021, Table 3: BPDA+EOT"),
    ("*", "70.61 %", "paper", "Yoon et al. 2021, Table 3: Joint (score)"),
    ("*", "78.39 %", "paper", "Yoon et al. 2021, Table 3: Joint (full)"),
    ("*", "80.80 %", "paper", "Yoon et al. 2021, Table 3: SPSA"),
    ("*", "95.80 %", "paper", "Yoon et al. 2021: the WRN-28-10's clean accuracy"),
    ("*", "the paper's 70 %", "paper", "Yoon et al. 2021, Table 3: BPDA+EOT, rounded"),
    ("*", "33.7 %", "paper", "Croce et al. 2022: ADP under full-gradient APGD-EOT on CIFAR-10"),
    ("docs/corruptions.md", "its WideResNet falls to 42 %", "paper", "Yoon et al. 2021, Table 4: raw WRN, noise 42.37"),
    # measured figures quoted in prose, checked against their result files
    ("docs/cifar10_results.md", "(66.8 % clean against 42.8 %)", "result", "cifar10-clip"),
    ("docs/attacks.md", "APGD-EOT leaves 73.0 % and its ensemble-loss variant 72.5 %", "result", "mnist-attack-defaults"),
    ("docs/attacks.md", "(63.0 % at 2 and 4 draws, 62.5 % at 8)", "result", "fashion-mnist-apgd-draws"),
    ("docs/attacks.md", "(31.0 % at 4 draws, 29.5 % at 8;", "result", "cifar10-apgd-draws"),
    ("docs/attacks.md", "(image 161; 29.5 against 30.0 %)", "result", "cifar10-schedules"),
    ("docs/attacks.md", "on the same Fashion-MNIST row keeps 62.5 %", "result", "fashion-mnist-apgd-t"),
    ("docs/attacks.md", "APGD-EOT-T alone keeps 71.5 %", "result", "mnist-apgd-t"),
    ("README.md", "one trained on purified digits keeps 59.0 %", "arithmetic",
     _MNIST_CNN_OVER_ALL),
    ("README.md", "one trained adversarially through it 62.5 %", "arithmetic",
     _MNIST_ADV_OVER_ALL),
    ("docs/mnist.md", "over every attack run on them, 59.0 % and 62.5 %", "arithmetic",
     _MNIST_CNN_OVER_ALL + " and " + _MNIST_ADV_OVER_ALL),
    ("docs/attacks.md", "APGD-EOT-T alone keeps 67.0 % (43 min 44 s", "result", "mnist-apgd-t-cnn"),
    ("docs/attacks.md", "(9 min 41 s,\nfrom 5fdc839) keeps 71.0 %", "result", "mnist-apgd-intel-cnn"),
    ("docs/attacks.md", "against 72.5 % on the AMD EPYC", "result", "mnist-behind-purifier"),
    ("docs/attacks.md", "it keeps 59.0 %\ninstead of 64.0 %", "arithmetic",
     _MNIST_CNN_OVER_ALL),
    ("docs/attacks.md", "the row keeps 63.0 % instead of 65.0 %", "arithmetic",
     "65.0 % of 200 digits is 130; the 4 digits broken by APGD-EOT-T alone (mnist-apgd-t against the flags of "
     "mnist-adv-behind-purifier's worst case) leave 126: 63.0 %"),
    ("docs/attacks.md", "one thread beside two other jobs, 47 min 31 s", "result", "mnist-apgd-t"),
    ("docs/attacks.md", "10 min 30 s; second table) keeps 72.0 %", "result", "mnist-apgd-intel"),
    ("docs/attacks.md", "against the AMD run's 71.0 %", "result", "mnist-adv-behind-purifier"),
    ("docs/attacks.md", "APGD-EOT-T the row keeps 62.5 %", "arithmetic",
     _MNIST_ADV_OVER_ALL),
    ("docs/attacks.md", "(their per-image figure, 61.5 %, stands)", "result", "fashion-mnist-adv-behind-purifier"),
    ("docs/attacks.md", "whose per-image figure is 28.5 %", "result", "cifar10-adv-denoiser"),
    ("README.md", "(28.0 % with the strongest preset's halving-step run", "arithmetic",
     "28.5 % of 200 images is 57; image 161, broken by the halving run alone (cifar10-schedules), leaves 56: 28.0 %"),
    ("docs/cifar10.md", "beside them, 28.0 %", "arithmetic",
     "28.5 % of 200 images is 57; image 161, broken by the halving run alone (cifar10-schedules), leaves 56: 28.0 %"),
    ("docs/attacks.md", "with the halving run beside them, 28.0 %", "arithmetic",
     "28.5 % of 200 images is 57; image 161, broken by the halving run alone (cifar10-schedules), leaves 56: 28.0 %"),
    ("docs/attacks.md", "(before the fixes: 73.5 and 74.0 %", "result", "mnist-attack-options"),
    ("docs/attacks.md", "now aimed at the mean softmax, leaves 82.0 %", "result", "mnist-attack-defaults"),
    ("docs/attacks.md", "Per image over the seven rows, 68.0 %", "result", "mnist-attack-defaults"),
    ("docs/attacks.md", "(before: 69.0 % over five)", "result", "mnist-attack-options"),
    ("docs/zoo.md", "full-gradient PGD+EOT call (35 min)", "result", "cifar10-full-gradient-unclipped"),
    ("docs/zoo.md", "clean and full-gradient call (47 min)", "result", "cifar10-tiniest"),
    ("docs/zoo.md", "55.6 to 55.5 % over the 75,\n68.5 % clean as before", "result", "corruptions-cifar10"),
    ("docs/zoo.md", "beside one other job:\n17 min 52 s", "result", "corruptions-cifar10"),
    ("docs/attacks.md", "APGD-EOT leaves 55.5 %, its ensemble-loss variant 55.5 %", "result",
     "fashion-mnist-attack-defaults"),
    ("docs/attacks.md", "the vote attack 61.0 %: per image over the seven rows 55.0 %", "result",
     "fashion-mnist-attack-defaults"),
    ("docs/attacks.md", "(55.5 % before, over six)", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "cross-entropies leaves 55.5 % judged worst of 10", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "either loss each leave 56.0 %", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "is PGD+EOT's own 55.5 %", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "leave 57.0 to 59.0 %", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "judgements 60.5 to 60.9 %", "result", "fashion-mnist-attack-options"),
    ("docs/attacks.md", "alone (73.5 % on the mean", "result", "mnist-attack-options"),
    ("docs/attacks.md", "losses, 74.0 % on the ensemble's", "result", "mnist-attack-options"),
    ("docs/attacks.md", "cross-entropy (77.0 %)", "result", "mnist-attack-options"),
    ("docs/attacks.md", "same budget (78.0 %", "result", "mnist-attack-options"),
    ("docs/attacks.md", "leaves 81.5 %: on this row", "result", "mnist-attack-options"),
    ("docs/attacks.md", "the five 69.0 % is left", "result", "mnist-attack-options"),
    ("docs/fashion_mnist_results.md", "the floor is 55.5 %", "result", "fashion-mnist-attack-options"),
    ("docs/fashion_mnist_results.md", "it leaves 58.5 % here too", "result", "fashion-mnist-attack-options"),
    ("docs/mnist_results.md", "the floor is 69.0 %", "result", "mnist-attack-options"),
    ("docs/mnist_results.md", "strongest alone (73.5 %)", "result", "mnist-attack-options"),
    ("docs/cifar10_results.md", "(90.6 % clean undefended", "result", "cifar10-levers"),
    ("docs/cifar10_results.md", "0.0 % under PGD and AutoAttack", "result", "cifar10-levers"),
    ("docs/cifar10_results.md", "(90.6 → 42.8 %)", "result", "cifar10-levers"),
    ("docs/cifar10_results.md", "(58.8 → 50.8 %)", "result", "cifar10-levers"),
    ("docs/cifar10_results.md", "(31.2 → 34.4 %)", "result", "cifar10-levers"),
    ("docs/cifar10_results.md", "parameters, 92.6 % clean undefended", "result", "cifar10-more"),
    ("docs/cifar10_results.md", "0.0 % under PGD) loses less", "result", "cifar10-more"),
    ("docs/cifar10_results.md", "right for 33.5 %", "result", "cifar10-more"),
    ("docs/fashion_mnist_results.md", "after 50 min 50 s of training", "result", "denoiser-fashion-mnist"),
    ("docs/fashion_mnist_results.md", "keeps 68.2 % against 80.1 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "keeps 73.8 % against 81.4 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "100 images: 73.0 % against 81.0 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "3,000 images, is 84.9 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "falls from 73.8 % under", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "attack to 69.0 % under BPDA+EOT", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "and 64.5 % under full-gradient PGD+EOT (EOT 8", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "score's from 71.9 % to 68.5 % and 60.0 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "and to 58.5 % under DiffHammer", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "they keep 64.5 % and 58.0 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "start (63.5 % on the exact", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "score, 66.0 % on the trained", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "better: 64.0 % at the released", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "schedule and 69.0 % at λ 0.5", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "keeps 71.0 % at σ 0.1 and 45.0 % at σ 0.5", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "the exact score's 68.0 % and 54.0 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "more accurate clean (83.8 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "transfers better (70.8 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "everything falls (60.2 % clean)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "the 14th) is 84.1 % clean and 74.0 % under AutoAttack", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "(74.9 % under white-box PGD on all", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "keeps 64.5 % per image over its attacks, at 81.4 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "the SmallCNN exceeds 71.0 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "denoise leaves 71.5 % under full-gradient PGD+EOT at 81.0 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "the exact score's 64.5 % at 75.9 % clean", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "It keeps 58.5 % [52–65]", "result", "fashion-mnist-full-strength"),
    ("docs/fashion_mnist_results.md", "EOT 8 returning its last iterate (60.0 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "five attacks of the table (58.0 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "purifier it keeps 63.0 % [56–69]", "result", "fashion-mnist-behind-purifier"),
    ("docs/fashion_mnist_results.md", "worst of R = 10; 65.0 % judged worst of 2), and 64.5 % under APGD-EOT", "result",
     "fashion-mnist-behind-purifier"),
    ("docs/fashion_mnist_results.md", "at 76.5 % clean: per image over the two and the blind Clf-PGD, 63.0 %", "result",
     "fashion-mnist-behind-purifier"),
    ("docs/fashion_mnist_results.md", "keeps 63.5 % under AutoAttack", "result", "fashion-mnist-behind-purifier"),
    ("docs/fashion_mnist_results.md", "and 64.5 % under white-box PGD (943) at 78.8 % clean", "result",
     "fashion-mnist-behind-purifier"),
    ("docs/fashion_mnist_results.md", "(74.0 % under AutoAttack at 84.1 % clean)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "lies between 63.0 % and 65.0 %", "result", "fashion-mnist-budget-curve"),
    ("docs/fashion_mnist_results.md", "and the 58.5 % above differs", "result", "fashion-mnist-full-strength"),
    ("docs/mnist_results.md", "The floor moves by six points, to 72.0 %", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "leaves 73.5 % [67–79]", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "against the earlier suite's 78.0 % on the same digits", "result", "mnist-new-attacks"),
    ("docs/mnist_results.md", "with two runs leaves 78.0 %", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "returning its last iterate (80.0 %)", "result", "mnist-new-attacks"),
    ("docs/mnist_results.md", "72.0 % [65–78] is left", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "(79.0 % at EOT 4 against 78.0 % at EOT 8)", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "low-frequency band (86.0 %)", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "full-gradient PGD keeps 91.0 %", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "It leaves 3.0 % [1–6] of the digits at 91.0 % clean", "result", "mnist-full-strength-denoiser"),
    ("docs/mnist_results.md", "it keeps 64.0 % [57–70] per image", "result", "mnist-behind-purifier"),
    ("docs/mnist_results.md", "under the same attacks (72.0 %", "result", "mnist-full-strength"),
    ("docs/mnist_results.md", "one-step denoise, the purifier a user can train, leaves 3.0 %", "result", "mnist-full-strength-denoiser"),
    ("docs/mnist_results.md", "Behind its purifier it keeps 2.0 %\n  [1–5]", "result", "mnist-behind-denoiser"),
    ("docs/mnist_results.md", "worst of R = 10; 4.5 % judged worst of 2", "result", "mnist-behind-denoiser"),
    ("docs/mnist_results.md", "97.7 % clean, where the blind Clf-PGD leaves 40.6 %", "result", "mnist-behind-denoiser"),
    ("docs/mnist_results.md", "([above](#at-full-strength), 3.0 %)", "result", "mnist-full-strength-denoiser"),
    ("docs/mnist_results.md", "SmallCNN alone (76.5 % under AutoAttack trained", "result", "mnist-adv-cnn-plateau"),
    ("docs/mnist_results.md", "(0.0 % under AutoAttack and under white-box PGD, 97.5 % clean)", "result", "mnist-behind-denoiser"),
    ("docs/mnist_results.md", "can only fall below 2.0 %", "result", "mnist-behind-denoiser"),
    ("README.md", "trained to its plateau keeps 76.5 % under\n  AutoAttack at 97.2 % clean", "result", "mnist-adv-cnn-plateau"),
    ("README.md", "behind a trained DenoiserUNet, 2.0 %", "result", "mnist-behind-denoiser"),
    ("docs/mnist_results.md", "adversarial training keeps 76.5 % [70–82] under AutoAttack at 97.2 % clean** (86.7 %", "result", "mnist-adv-cnn-plateau"),
    ("docs/mnist_results.md", "rose from 56.0 % at the 24-epoch\n  cap to 87.0 %", "result", "mnist-adv-cnn-plateau"),
    ("docs/mnist_results.md", "the 44.0 % above was the cap's", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "blind attack (90.0 % at 94.6 %", "result", "mnist-adv-cnn-plateau"),
    ("docs/mnist_results.md", "twelve and a half under its 76.5 %", "result", "mnist-adv-cnn-plateau"),
    ("docs/mnist_results.md", "touch at 70 %", "result", "mnist-adv-cnn-plateau"),
    ("docs/your_model.md", "to its plateau keeps 76.5 % under AutoAttack at 97.2 % clean", "result", "mnist-adv-cnn-plateau"),
    ("docs/your_model.md", "(the best, 64.0 %, behind", "result", "mnist-behind-purifier"),
    ("docs/mnist_results.md", "Behind its purifier it keeps 65.0 % [58–71] per\n  image over full-gradient PGD+EOT (74.5 %), APGD-EOT (71.0 %) and the blind Clf-PGD (74.8 % of 1,000), at 94.4 %", "result", "mnist-adv-behind-purifier"),
    ("docs/mnist_results.md", "trained plainly on purified digits (64.0 %", "result", "mnist-behind-purifier"),
    ("docs/mnist_results.md", "stayed between 79.7 and 81.3 %", "result", "mnist-adv-behind-purifier"),
    ("docs/mnist_results.md", "(0.0 % under AutoAttack, 96.3 % clean)", "result", "mnist-adv-behind-purifier"),
    ("docs/fashion_mnist_results.md", "It leaves 61.0 % [54–67]", "result", "fashion-mnist-full-strength-denoiser"),
    ("docs/fashion_mnist_results.md", "it keeps 60.0 % [53–67] at 80.6 % clean", "result", "fashion-mnist-full-strength-denoiser"),
    ("docs/fashion_mnist_results.md", "selective EOT leaves 64.0 % and APGD-EOT 65.5 %, DiffAttack's state loss 64.0 % under PGD+EOT and 69.0 % under APGD-EOT, the low-frequency vote 71.5 %", "result", "fashion-mnist-full-strength-denoiser"),
    ("docs/fashion_mnist_results.md", "over its six attacks (58.5 %)", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "It leaves 70.0 % [63–76]", "result", "fashion-mnist-full-strength-denoiser-adv-cnn"),
    ("docs/fashion_mnist_results.md", "leaves 71.0 %, APGD-EOT 72.5 %, the low-frequency vote 76.5 %", "result", "fashion-mnist-full-strength-denoiser-adv-cnn"),
    ("docs/fashion_mnist_results.md", "DiffAttack's state loss 71.5 % under PGD+EOT and 73.0 % under APGD-EOT, the per-image worst case 70.0 %, at 80.7 % clean", "result", "fashion-mnist-full-strength-denoiser-adv-cnn"),
    ("docs/fashion_mnist_results.md", "it keeps 70.5 % [64–76] under", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "missed**: it leaves 71.0 % [64–77]", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "selective EOT the row keeps 70.5 % [64–76]", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "worst of R = 2) at 80.5 % clean", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "(#the-trained-denoiserunet-at-full-strength), 61.0 %)", "result", "fashion-mnist-full-strength-denoiser"),
    ("docs/fashion_mnist_results.md", "trained CNN alone (74.0 % under AutoAttack at 84.1 % clean); the", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "classifier keeps 58.0 % under", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "and 59.1 % under white-box PGD (943) at 80.7 % clean", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "vote is weaker still**: 75.5 % [69–81]", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "over all four attacks stays 70.5 %", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "no stronger**: 71.5 % [65–77]", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "all five attacks the row keeps 70.5 % [64–76]", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "under attack.** Behind its purifier\n  it keeps 75.0 % [69–80]", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "worst of R = 2)\n  at 81.5 % clean", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "CNN alone under AutoAttack (74.0 % [68–80])", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "less clean accuracy (84.1 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "same purifier\n  (70.5 %)", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "classifier keeps 66.5 % [60–73] under AutoAttack", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "64.9 % under white-box PGD (943) at 81.2 % clean", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "no stronger**: 76.0 % [70–81]", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "Clf-PGD the row keeps 74.5 % [68–80]", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "exact score in front of the same CNN (65.0 %)", "result", "fashion-mnist-full-strength-adv-cnn"),
    ("docs/fashion_mnist_results.md", "CNN alone under AutoAttack (74.0 %), which is also more accurate clean (84.1 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "and two runs leaves 65.0 %", "result", "fashion-mnist-full-strength-adv-cnn"),
    ("docs/fashion_mnist_results.md", "the last iterate had left 64.5 %", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "case over the six, 64.0 %", "result", "fashion-mnist-full-strength-adv-cnn"),
    ("docs/fashion_mnist_results.md", "the CNN alone under AutoAttack (74.0 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "the closest second (65.5 %)", "result", "fashion-mnist-full-strength-adv-cnn"),
    ("docs/fashion_mnist_results.md", "It leaves 58.5 % at EOT 8 as at EOT 16", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "the same 58.5 %, half a point above", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "over eight attacks (58.0 %)", "result", "fashion-mnist-levers"),
    ("docs/fashion_mnist_results.md", "(59.0 % against 58.5 %)", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "(68.5 % against 63.0 %)", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "(65.0 % and 66.5 %)", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/fashion_mnist_results.md", "APGD-EOT at full strength leaves 62.0 %", "result", "fashion-mnist-full-strength-attacks"),
    ("docs/cifar10.md", "keeps 34.0 % under AutoAttack at 71.2 % clean", "result", "cifar10-baseline"),
    ("docs/cifar10.md", "keeps 82.2 % clean but 7.0 % (each alone: 7.5, 8.0 and 9.5 %)", "result", "cifar10-learned"),
    ("docs/cifar10.md", "keeps 28.5 % judged worst of 10", "result", "cifar10-adv-denoiser"),
    ("docs/cifar10.md", "30.0, 30.5 and 29.5 %), at 72.6 % clean", "result", "cifar10-adv-denoiser"),
    ("docs/cifar10.md", "it gains 5.6 points clean and 2.5 under attack (28.5 % at 72.6 % clean)", "result",
     "cifar10-adv-denoiser"),
    ("docs/cifar10.md", "(35.2 %\n  under APGD-EOT)", "result", "cifar10-adv-denoiser"),
    ("docs/cifar10.md", "keeps 16.4 % under full-gradient PGD+EOT (19.0 % under", "result",
     "cifar10-learned"),
    ("docs/cifar10.md", "it keeps 7.0 % per image over the three attacks", "result", "cifar10-learned"),
    ("docs/cifar10.md", "(full-gradient PGD+EOT alone 7.5 %, at worst of the first 2 judgements 11.5 %)", "result",
     "cifar10-learned"),
    ("docs/cifar10.md", "against their worst of 5, 15–16 %", "paper",
     "Croce et al. 2022: ADP on CIFAR-10 under APGD-EOT, the worst case over 5 repeated evaluations"),
    ("docs/cifar10.md", "keeps 66.8 % clean behind the unclipped input and 42.8 % behind the clipped one", "result",
     "cifar10-clip"),
    ("docs/cifar10.md", "the unclipped form keeps 2.0 %", "result", "cifar10-full-gradient-unclipped"),
    ("docs/cifar10.md", "the clipped one 2.5 %", "result", "cifar10-full-gradient"),
    ("docs/cifar10.md", "clean accuracy into 82.2 % and its robustness into 7.0 %", "result", "cifar10-learned"),
    ("docs/cifar10.md", "keeps 81.6 % clean for the published ResNet-20", "result", "cifar10-clip"),
    ("docs/cifar10.md", "nothing under the full gradient (0.0 % of 200)", "result", "cifar10-sigma"),
    ("docs/cifar10.md", "keeps 26.0 % per image over", "result", "cifar10-adv-behind-purifier"),
    ("docs/cifar10.md", "26.0 %) at 67.0 % clean (200 images)", "result", "cifar10-adv-behind-purifier"),
    ("docs/cifar10.md", "below its 34.0 % bare", "result", "cifar10-baseline"),
    ("docs/cifar10.md", "keeps 8.5 % per image over full-gradient PGD+EOT's two EOT losses", "result", "cifar10-tiniest"),
    ("docs/cifar10.md", "APGD-EOT (APGD-EOT alone: 10.5 %) at 77.0 % clean", "result", "cifar10-tiniest"),
    ("docs/cifar10_results.md", "breaks fewer images alone (10.5 %)", "result", "cifar10-tiniest"),
    ("docs/cifar10.md", "its σ 0.25\n  row keeps the same 2.0 %", "result", "cifar10-full-gradient-unclipped"),
    ("docs/cifar10.md", "(its figure is already 0.0 %;", "result", "cifar10-sigma"),
    ("docs/cifar10_results.md", "2.0, 2.0 and 4.0 % each, 2.0 % per image over the three", "result",
     "cifar10-full-gradient-unclipped"),
    ("docs/cifar10_results.md", "the per-image figure stays 8.5 %", "result", "cifar10-tiniest"),
    ("docs/fashion_mnist.md", "keeps 74.0 % under AutoAttack at 84.1 %", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "keeps 64.0 % instead of 56.5 %", "result", "fashion-mnist-clip"),
    ("docs/fashion_mnist_results.md", "(65.5 against 56.5 %,", "result", "fashion-mnist-clip"),
    ("docs/fashion_mnist_results.md", "worst of 2, 61.5 %, is half a point", "result", "fashion-mnist-clip"),
    ("docs/fashion_mnist_results.md", "full-strength row's (61.0 %,", "result", "fashion-mnist-full-strength-denoiser"),
    ("docs/fashion_mnist_results.md", "the plain SmallCNN at 65.5 %", "result", "fashion-mnist-clip"),
    ("docs/fashion_mnist_results.md", "the adversarially trained CNN's 74.0 %", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "keeps 74.5 % per image over", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "the blind Clf-PGD at 83.1 % clean", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "same weights keep 72.5 % under AutoAttack", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist.md", "for the unclipped form (68.0 %", "result", "fashion-mnist-cnn-denoiser"),
    ("docs/fashion_mnist.md", "and 74.5 %).", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "judged worst of 10, the row keeps 74.5 % [68–80]", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "two runs, EOT 8: 74.5 %)", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "EOT 8: 75.0 %) at 83.1 % clean", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "the first training's figure (74.5 %, worst of 2", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "keeps 72.5 % [66–78] under AutoAttack", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "and 69.2 % under white-box PGD (943) at 84.1 % clean", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "from the purifier (66.5 % bare)", "result", "fashion-mnist-adv-behind-denoiser"),
    ("docs/fashion_mnist.md", "keep\n63.0 % (on its outputs)", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "and 61.5 % (adversarially through it)", "result", "fashion-mnist-answer"),
    ("docs/fashion_mnist.md", "a plain SmallCNN 55.5 %", "result", "fashion-mnist-answer"),
    ("README.md", "keeps\n  33.5 % under AutoAttack at 73.0 % clean", "arithmetic", "cifar10_baseline.json's flags on the first 200 images: 67 and 146 of 200"),
    ("README.md", "keeps 28.5 %\n  at the same 73.0 % clean", "arithmetic", "cifar10_adv_denoiser.json: its worst case 28.5 % on 200 images, clean 146 of the first 200 by its flags"),
    ("README.md", "it keeps 82.2 % clean", "result", "cifar10-learned"),
    ("README.md", "but 7.0 % (worst of 10", "result", "cifar10-learned"),
    ("docs/cifar10.md", "(33.5 % under AutoAttack against 28.5 %, both at 73.0 % clean)", "arithmetic", "the first 200 images' flags of cifar10_baseline.json (67 and 146 of 200) and cifar10_adv_denoiser.json (its worst case 28.5 %, clean 146 of 200)"),
    ("docs/attacks.md", "fp32 zeroes 2.7–3.1 %", "arithmetic", "the shares measured by tests/test_systemic_lowfreq.py's planted bands (printed by its test)"),
    ("docs/attacks.md", "bf16 2.8–3.4 %", "arithmetic", "the shares measured by tests/test_systemic_lowfreq.py's planted bands (printed by its test)"),
    ("docs/evaluation.md", "keeps 65.0 % at EOT 8, 64.0 % at 16, 63.0 % at 32", "result", "fashion-mnist-budget-curve"),
    ("docs/fashion_mnist_results.md", "Behind its purifier it keeps 61.5 % [55–68]", "result", "fashion-mnist-adv-behind-purifier"),
    ("docs/fashion_mnist_results.md", "full-gradient PGD+EOT (63.0 %) and APGD-EOT (62.0 %), judged worst of 10, at 71.4 % clean", "result", "fashion-mnist-adv-behind-purifier"),
    ("docs/fashion_mnist_results.md", "Bare it keeps\n  59.5 % under AutoAttack", "result", "fashion-mnist-adv-behind-purifier"),
    ("docs/mnist_results.md", "(64.0 %, at 94.2 % clean)", "result", "mnist-behind-purifier"),
    ("docs/mnist.md", "64.0 % (at 94.2 % clean)", "result", "mnist-behind-purifier"),
    ("docs/mnist.md", "65.0 % (at 94.4 % clean)", "result", "mnist-adv-behind-purifier"),
    ("docs/mnist_results.md", "at full\n  strength (73.5 %), APGD-EOT (72.5 %) and the blind Clf-PGD, at 94.2 % clean", "result", "mnist-behind-purifier"),
    ("docs/mnist_results.md", "(0.0 % under AutoAttack, 95.6 % clean)", "result", "mnist-behind-purifier"),
    ("docs/zoo.md", "the checkout's tracked files (208 MB) are over the 64 MiB", "arithmetic",
     "git ls-files | xargs du -cb at this commit; 64 MiB is the device tool's limit (a parameter)"),
    ("docs/zoo.md", "each SmallCNN kept at fp16 takes 6.5 MB", "arithmetic", "3.27 M parameters × 2 bytes"),
    ("docs/zoo.md", "about 30 MB", "parameter", "issue 68's size for the zoo"),
    ("docs/zoo.md", "the attacked cells in 213 s and 218 s", "check", "docs/checks/fashion_mnist_clip.json"),
    ("docs/zoo.md", "| 500 | 34.0 / 34.0 % | 1,638 s |", "check", "docs/checks/cifar10_baseline-autoattack.json"),
    ("docs/zoo.md", "| 50 | 28.0 / 28.0 % | 441 s |", "check", "docs/checks/cifar10_adv_denoiser-full-pgd-eot.json"),
    ("docs/zoo.md", "| 50 | 26.0 / 26.0 % | 482 s |", "check", "docs/checks/cifar10_adv_denoiser-apgd-eot.json"),
    ("docs/zoo.md", "| 26.0 / 28.0 % | 527 s |", "check", "docs/checks/cifar10_adv_denoiser-full-pgd-eot-ensemble.json"),
    ("docs/zoo.md", "| 54.0 / 54.0 % | 143 s |", "check", "docs/checks/mnist_behind_purifier-apgd-eot.json"),
    ("docs/zoo.md", "| 66.0 / 66.0 % | 118 s |", "check", "docs/checks/fashion_mnist_adv_behind_purifier-full-pgd-eot.json"),
    ("docs/zoo.md", "| 8.0 / 8.0 % | 799 s |", "check", "docs/checks/cifar10_learned-full-pgd-eot.json"),
    ("docs/zoo.md", "the published 76.5 % of\n200 again, in 334 s", "check", "docs/checks/mnist_adv_cnn_plateau-autoattack.json"),
    ("docs/zoo.md", "The README's MNIST figure, 76.5 % under AutoAttack at 97.2 % clean", "result", "mnist-answer"),
    ("docs/zoo.md", "| 82.0 / 82.0 % | 952 s |", "check", "docs/checks/fashion_mnist_adv_cnn_denoiser-full-pgd-eot.json"),
    ("docs/zoo.md", "closest defence, 74.5 % of 200 published", "check",
     "docs/checks/fashion_mnist_adv_cnn_denoiser-full-pgd-eot.json"),
    ("docs/zoo.md", "within the tolerance (90 % of images)", "parameter", "art-adp check's default --tolerance 0.9"),
    ("docs/mnist.md", "keeps 76.5 % under AutoAttack at 97.2 % clean", "result", "mnist-answer"),
    ("docs/mnist.md", "denoise keeps 69.0 % per image", "result", "mnist-answer"),
    ("docs/mnist.md", "trained on its outputs\nkeeps 2.0 %", "result", "mnist-answer"),
    ("docs/mnist.md", "keeps 0.0 % under AutoAttack: all", "result", "mnist-answer"),
    ("docs/mnist.md", "ADP at most 80.3 % under Clf-PGD", "result", "mnist-levers"),
    ("docs/mnist.md", "(T 10, λ 0.05) 1.5 %", "result", "mnist-levers"),
    ("README.md", "on purified images keeps 63.0 %", "result", "fashion-mnist-behind-purifier"),
    ("README.md", "adversarially through it 61.5 %", "result", "fashion-mnist-adv-behind-purifier"),
    ("README.md", "It keeps 74.0 % under AutoAttack", "result", "fashion-mnist-levers"),
    ("README.md", "without attacks keeps 68.0 % per image\n  over three attacks at 82.3 % clean", "result", "fashion-mnist-cnn-denoiser"),
    ("docs/fashion_mnist.md", "68.0 % per image over three attacks at 82.3 % clean", "result", "fashion-mnist-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "the row keeps 68.0 % [61–74]", "result", "fashion-mnist-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "PGD+EOT (69.5 %) and APGD-EOT (68.0 %) at 82.3 % clean", "result", "fashion-mnist-cnn-denoiser"),
    ("docs/fashion_mnist_results.md", "within the first training's 70.5 %", "result", "fashion-mnist-behind-denoiser"),
    ("docs/fashion_mnist_results.md", "same classifier keeps 62.0 % under AutoAttack", "result", "fashion-mnist-cnn-denoiser"),
    ("README.md", "AutoAttack at 84.1 % clean. The closest", "result", "fashion-mnist-levers"),
    ("README.md", "keeps 74.5 % per image under", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("README.md", "Clf-PGD at 83.1 % clean", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("README.md", "and 72.5 % bare under AutoAttack", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/your_model.md", "stops short (1.5 % with the exact score, 5.0 % with", "result", "mnist-levers"),
    ("docs/your_model.md", "74.0 % under AutoAttack at 84.1 % clean; no purification", "result", "fashion-mnist-levers"),
    ("docs/your_model.md", "(74.5 % per image under three attacks", "result", "fashion-mnist-adv-cnn-denoiser"),
    ("docs/your_model.md", "the best, 71.0 %, under the full gradient", "result", "fashion-mnist-levers"),
    ("docs/your_model.md", "keeps 27.0 % under AutoAttack at 58.8 % clean", "result", "cifar10-levers"),
    ("docs/your_model.md", "keeps 2.5 % under full-gradient PGD+EOT,", "result", "cifar10-full-gradient"),
    ("docs/your_model.md", "PGD+EOT, at 42.8 % clean", "result", "cifar10-levers"),
    ("docs/your_model.md", "73.8 % under the paper's attack at 81.4 % clean", "result", "fashion-mnist-levers"),
    ("docs/your_model.md", "(the figure of [cifar10.md](cifar10.md), 42.8 %, was", "result", "cifar10-levers"),
    ("docs/your_model.md", "its 95 % interval", "parameter", "the confidence level of the intervals"),
    ("docs/mnist_results.md", "the targets took 50 min 31 s of training", "result", "denoiser-mnist-fp32"),
    ("docs/fashion_mnist_results.md", "(21.0 samples/s over the stretch", "result", "denoiser-fashion-mnist"),
    ("docs/threat_models.md", "adversarially trained classifier (75 %)", "result", "card-digits-paper-20"),
    ("docs/threat_models.md", "is 10–15 % under", "result", "card-digits-paper-20"),
    ("docs/corruptions.md", "classifier stays at 94 %", "result", "corruptions-digits"),
    ("docs/evaluation.md", "1,653 s for 2 processes", "result", "card-digits-paper-20"),
    ("docs/evaluation.md", "30 min 22 s of wall time", "result", "card-digits-paper-20"),
    ("docs/mnist_results.md", "the undefended MLP is 100 % on", "result", "mnist-diagnostics-cpu-smoke"),
    ("README.md", "gives ADP 1.5 % at the released schedule and at most 80.3 % converged", "result", "mnist-levers"),
    ("README.md", "at most 53.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "0.95¹⁰ ≈ 40 %", "arithmetic", "1 − (1 − λ)^T at λ 0.05, T 10: 0.401"),
    ("docs/mnist_results.md", "1.5 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "5.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "75.1 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "53.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "79.4 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "80.3 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "27.9 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "19.4 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "14.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "15.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "73.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "71.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "36.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "49.5 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "54.1 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "76.2 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "67.3 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "78.9 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "2.8 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "81.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "95.7 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "94.9 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "95.1 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "96.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "0.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "48.6 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "27.0 %", "result", "mnist-levers"),
    ("docs/mnist_results.md", "It keeps 6.0 % under", "result", "mnist-new-attacks"),
    ("docs/mnist_results.md", "and 11.0 % under BPDA", "result", "mnist-new-attacks"),
    ("docs/mnist_results.md", "at 94.0 %", "result", "mnist-new-attacks"),
    ("docs/mnist_results.md", "It is 92.8 % clean", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "and 59.8 % under PGD", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "44.0 % under AutoAttack (on the first", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "clean accuracy (93.0 %)", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "73.5 % under BPDA+EOT; its full", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "full gradient (77.0 %)", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "of it: 93.5 % clean", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "78.2 % under Clf-PGD, 24.0 %", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "denoise leaves 24.0 %", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "the CNN's own 44.0 %", "result", "mnist-adv-cnn"),
    ("docs/mnist_results.md", "stays above (67.0 %", "result", "mnist-adv-cnn"),
]


def pages(root: Path = ROOT) -> list[Path]:
    found = {p for pattern in PAGES for p in root.glob(pattern)}
    return sorted(p for p in found if str(p.relative_to(root)) not in EXCLUDED)


def prose(path: Path) -> str:
    """What a reader reads as text: rendered blocks, code and comments removed (notebooks: the markdown cells)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for pattern in (_BLOCK, _FENCE, _COMMENT, _INDENTED_CODE, _CODE):
        text = pattern.sub(lambda m: "\n" * m[0].count("\n"), text)
    return text


def _phrase(phrase: str) -> str:
    """A phrase as a pattern that matches it across line breaks (pages are wrapped)."""
    return r"\s+".join(map(re.escape, phrase.split()))


def figures(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, figure)`` of every figure in a prose text."""
    return [(m.start("figure"), m.end("figure"), m["figure"]) for m in FIGURE.finditer(text)]


@functools.cache
def _render():
    """docs/render.py, loaded once (it imports art_adp from the repository root)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("render", ROOT / "docs" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _source(name: str) -> str:
    """A figure's rendering and its result file, rendered once a process (each allow-list entry of it searches them)."""
    render = _render()
    path, _ = render.FIGURES[name]
    return render.render(name) + (ROOT / path).read_text(encoding="utf-8")


def _number_in_source(figure: str, name: str) -> bool:
    return _number_in(figure, _source(name))


@functools.cache
def _values(haystack: str) -> tuple[float, ...]:
    """Every number of ``haystack`` (thousands separators dropped)."""
    return tuple(float(v) for v in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", haystack.replace(",", "")))


def _number_in(figure: str, haystack: str) -> bool:
    # Each number of the figure, at its printed precision, must be a number of the rendering or the result file
    # (a percentage may be stored as a fraction: 100 % as 1.0).
    values = _values(haystack)
    scales = (1, 100) if figure.endswith("%") else (1,)

    def found(n: str) -> bool:
        digits = len(n.partition(".")[2])
        return any(round(v * k, digits) == float(n) for v in values for k in scales)

    numbers = re.findall(r"\d+(?:\.\d+)?", figure.replace(",", ""))
    return all(found(n) for n in numbers)


def check(root: Path = ROOT, allowed: list[tuple[str, str, str, str]] = ALLOWED) -> list[str]:
    """Every unsourced figure (``page:line: figure … context``) and every stale or broken allow-list entry."""
    problems, used = [], set()
    for path in pages(root):
        name = str(path.relative_to(root))
        text = prose(path)
        spans = []  # (start, end, entry index) of every allowed phrase on this page
        for i, (pattern, phrase, _, _) in enumerate(allowed):
            if fnmatch.fnmatch(name, pattern):
                spans += [(m.start(), m.end(), i) for m in re.finditer(_phrase(phrase), text)]
        for start, end, figure in figures(text):
            covering = [i for s, e, i in spans if s <= start and end <= e]
            if covering:
                used.update(covering)
                continue
            line = text.count("\n", 0, start) + 1
            context = " ".join(text[max(0, start - 60) : end + 30].split())
            problems.append(f"{name}:{line}: {figure!r} without a source: … {context} …")
    for i, (pattern, phrase, kind, reason) in enumerate(allowed):
        if i not in used:
            problems.append(f"allow-list entry {phrase!r} ({pattern}) matches no figure: delete it")
        elif kind == "result":
            for figure in (f for _, _, f in figures(phrase)):
                if not _number_in_source(figure, reason):
                    problems.append(f"allow-list entry {phrase!r}: {figure!r} is not in {reason}'s result")
        elif kind == "check":
            for figure in (f for _, _, f in figures(phrase)):
                if not _number_in(figure, (ROOT / reason).read_text(encoding="utf-8")):
                    problems.append(f"allow-list entry {phrase!r}: {figure!r} is not in {reason}")
        elif kind not in ("parameter", "arithmetic", "paper"):
            problems.append(f"allow-list entry {phrase!r} has an unknown kind {kind!r}")
    return problems


def main() -> int:
    problems = check()
    print("\n".join(problems) or "every figure outside a rendered block is a parameter, a cited figure or sourced")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
