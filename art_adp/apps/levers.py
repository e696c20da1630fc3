"""The paper's row on a data set, measured lever by lever: which of score quality, schedule, noise level and attack
decides ADP's accuracy on real images, against the baselines a user would pick instead.

Two score models are measured side by side on the same images, attacks and judging:

- ``oracle``: :class:`~art_adp.KernelScore` over the training split -- the exact optimum of denoising score matching
  on those images, at the level h is taken at: what a *perfectly trained* score model would do;
- ``denoiser``: a :class:`~art_adp.DenoiserUNet` trained with ``art-adp train-denoiser``, through
  :class:`~art_adp.EDMScore` at the same level.

Each *setting* is a purification: ADP (σ, T, λ, τ; the score taken at level σ) or the one-step denoise
x̂ = clip(x₀ + σ·h_σ(x₀)) -- Tweedie's estimate, ADP with one step of fixed size σ -- in front of a classifier (the
data set's, or the adversarially trained one). Each *row* is an attack: clean inputs; Clf-PGD, PGD on the bare
classifier blind to the purifier (the paper's attack); adaptive attacks through the purification from the attack
registry (BPDA+EOT, full-gradient PGD+EOT, APGD-EOT; any registry attack is a row by its name); AutoAttack
(standard version, torchattacks' port of Croce & Hein's code) on the undefended classifiers. A data set's
:class:`Preset` holds the radius, the rows' budgets, the classifiers and the σ grid; MNIST's is the table of
``docs/mnist_results.md``, Fashion-MNIST's the paper's ε = 8/255.

Judgements: clean and Clf-PGD rows on the S-run ensemble (mean softmax of S purifications); adaptive rows R times
(fresh noise each: the mean, the worst case and the majority vote over R, from the evaluation's report), and, with
``judges`` holding ``"fixed"``, with the purifier's randomness fixed (the attack and the judge see one frozen draw,
EOT 1: the evaluation's fixed-noise view). Records go to ``RUN_DIR/records.jsonl`` one per (classifier, score
model, setting, attack, judge, image), so a run resumes and more images can be added later; ``table.json`` and
``table.md`` hold the accuracies with Wilson intervals, the rows' budgets, the classifiers' training and the
provenance.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attacks._core import AUTO, JUDGE_DRAWS
from ..attacks.registry import (
    ART_PGD,
    AUTOATTACK,
    BLIND_ATTACK,
    FULL_ATTACK,
    OPTION_HELP,
    REGISTRY,
    SWEEP_ATTACK,
    Budget,
    budget_settings,
    recorded,
    registered_name,
)
from ..attacks.apgd_eot import APGDEOT
from ..attacks.selective_eot import SelectiveEOT
from ..attacks.systemic_lowfreq import LowFrequencyVote
from ..models.checkpoint import check_purifier
from ..runs.plans import PLANS, Plan, plan, plan_names, register
from ..runs.provenance import code_diff, code_version, provenance
from ..runs.engine import (
    Attacking,
    Cell,
    build_defence,
    Judgement,
    Price,
    correct,
    defended_estimator,
    estimate,
    folder_scheme,
    guard,
    pending,
    run_cells,
    worst_case,
)
from ..runs.records import read_jsonl
from ..runs.seeds import FIXED_BLOCK, LEVERS_SCHEMES, SeedPlan, check_scheme
from ..runs.render import accuracy_cell, markdown_table
from ..runs.statistics import flags_of, per_image, summary, wilson
from ..data import DATASETS, DatasetSpec
from .flags import PRECISION_HELP
from .._hardware import require_native
from .robust_baseline import WHITE_BATCH, train_until_plateau, white_box_pgd

__all__ = [
    "ATTACK_ROWS",
    "AUTOATTACK",
    "WORST_CASE",
    "CLASSIFIER_NAMES",
    "JUDGES",
    "ROW_NAMES",
    "SETTING_NAMES",
    "ClassifierRecipe",
    "LeversConfig",
    "Preset",
    "ROWS",
    "Row",
    "SETTINGS",
    "Setting",
    "is_setting_name",
    "levers_command",
    "levers_datasets",
    "levers_spec",
    "render_levers",
    "row_label",
    "run_levers",
    "setting_name",
    "setting_named",
    "sigma_settings",
    "training_purifier",
    "with_restarts",
]


@dataclass(frozen=True)
class Setting:
    """One purification: ADP at (σ, T, λ, τ), or the one-step denoise at σ when ``one_step``; ``clip_noise`` whether
    the noisy input is clipped into [0, 1]: None takes the paper's clip for ADP's schedules and, for the one-step
    denoise, the form its model was trained on (:meth:`clipped`)."""

    name: str
    sigma: float = 0.25
    steps: int = 10
    lam: float = 0.05
    tau: float = 1e-3
    one_step: bool = False
    clip_noise: bool | None = None

    def clipped(self, model_clipped: bool = False) -> bool:
        """Whether the noisy input is clipped, in front of a model trained on clipped (``model_clipped``) noise or
        not: as given, else the paper's clip for ADP's schedules and the model's own form for the denoise."""
        if self.clip_noise is not None:
            return self.clip_noise
        return model_clipped if self.one_step else True

    def purifier_kwargs(self, model_clipped: bool = False) -> dict:
        noise = {} if self.clipped(model_clipped) else {"clip_noise": False}
        if self.one_step:  # x₁ = clip(x₀ + σ·h_σ(x₀)): one step of fixed size σ, never stopped
            return {"sigma": self.sigma, "steps": 1, "step_size": self.sigma, "tau": 0.0, **noise}
        return {"sigma": self.sigma, "steps": self.steps, "lam": self.lam, "tau": self.tau, **noise}

    def record(self, model_clipped: bool = False) -> dict:
        """The setting as records and cells keep it: its fields, and ``clip_noise: False`` where the noisy input is
        not clipped (records from before the option, all clipped, read the same)."""
        out = {k: v for k, v in asdict(self).items() if k != "clip_noise"}
        return out if self.clipped(model_clipped) else {**out, "clip_noise": False}


#: ADP's noise level in the released code, where the schedule's levers are measured.
SIGMA = 0.25


def sigma_settings(sigmas: Sequence[float]) -> tuple[Setting, ...]:
    """
    The levers at ADP's σ 0.25: the released schedule, converged schedules (a T × λ grid, τ off), the one-step
    denoise (its noisy input as its model was trained) and the one-step denoise of a clipped noisy input; then for
    every other σ of ``sigmas``, converged ADP (T 10, λ 0.5) and the one-step denoise.
    """
    others = [float(s) for s in sigmas if float(s) != SIGMA]
    return (
        Setting("released (T 10, λ 0.05)"),
        Setting("T 10, λ 0.2", lam=0.2),
        Setting("T 10, λ 0.5", lam=0.5),
        Setting("T 30, λ 0.05", steps=30),
        Setting("T 30, λ 0.5, τ 0", steps=30, lam=0.5, tau=0.0),
        Setting("one-step denoise", one_step=True),
        Setting("one-step denoise, clipped noise", one_step=True, clip_noise=True),
        *(Setting(f"σ {s:g}, T 10, λ 0.5", sigma=s, lam=0.5) for s in others),
        *(Setting(f"σ {s:g}, one-step", sigma=s, one_step=True) for s in others),
    )


#: MNIST's settings (the σ grid 0.1, 0.25, 0.5).
SETTINGS: tuple[Setting, ...] = sigma_settings((0.1, 0.25, 0.5))

APGD_ATTACK = registered_name(APGDEOT)
#: APGD's iterations per loss in the lever tables: Croce et al.'s 100, the ``strongest`` and ``croce`` presets'.
APGD_MAX_ITER = 100


@dataclass(frozen=True)
class Row:
    """
    One attack row: ``max_iter`` steps of ``eps_step`` in the ℓ∞ ball of ε · ``eps_scale`` (steps given at the
    preset's ε, scaled with an overridden one), from a uniform random start when ``random_start``.

    :param name: The row's name in records and tables.
    :param attack: The attack registry's name (``""``: clean inputs; :data:`AUTOATTACK`: AutoAttack, standard
        version). The registry's Clf-PGD is PGD on the bare classifier, judged on the defended one; the other
        registry attacks run through the purification (EOT, judged R times).
    :param num_random_init: Runs of an adaptive row's attack (restarts on the images still unbroken).
    :param check_every: Its best-iterate rule's check interval; 0: the last iterate. The defaults, one run and the
        last iterate, are what the rows recorded before the rule measured: a row's name keeps its meaning, and
        :func:`with_restarts` gives the variant with the rule and restarts a name of its own.
    :param eot_samples: Its own EOT draws (None: the run's ``eot_samples``): an attack whose paper sets them.
    """

    name: str
    attack: str = ""
    eps_step: float = 0.0
    max_iter: int = 0
    random_start: bool = False
    eps_scale: float = 1.0
    num_random_init: int = 1
    check_every: int | str = 0
    eot_samples: int | None = None

    @property
    def adaptive(self) -> bool:
        """Through the purification (a registry attack other than Clf-PGD)."""
        return self.attack not in ("", BLIND_ATTACK, AUTOATTACK)


def adaptive_row(attack: str, eps_step: float, max_iter: int = 40, random_start: bool = True) -> Row:
    """A registry attack through the purification, as a row named after it (the hook for new attacks)."""
    return Row(attack, attack, eps_step, max_iter, random_start)


#: The name of an adaptive row with the best-iterate rule and restarts: ``ROW-{max_iter}it-r{runs}``.
VARIANT = re.compile(r"^(?P<row>.+)-(?P<max_iter>\d+)it-r(?P<runs>\d+)$")


def with_restarts(row: Row, runs: int, max_iter: int | None = None) -> Row:
    """
    ``row`` (an adaptive one) with the best iterate judged on S draws of its own (every iterate where a judgement
    costs under a quarter of an iteration, else every :data:`~art_adp.attacks._core.CHECK_EVERY`: ``"auto"``),
    ``runs`` runs (``num_random_init``) and ``max_iter`` iterations (default: the row's), named
    ``{row.name}-{max_iter}it-r{runs}`` (:data:`VARIANT`): its records are its own.
    """
    if not row.adaptive or isinstance(runs, bool) or not (isinstance(runs, int) and runs >= 1):
        raise ValueError(f"restarts apply to an adaptive row with runs >= 1, got {row.name!r} and {runs!r}.")
    it = row.max_iter if max_iter is None else int(max_iter)
    return replace(row, name=f"{row.name}-{it}it-r{runs}", max_iter=it, num_random_init=runs, check_every=AUTO)


@dataclass(frozen=True)
class ClassifierRecipe:
    """
    How a classifier of a preset is trained on the training split.

    :param arch: A name of :data:`~art_adp.apps.commands.CLASSIFIERS`: ``"mlp"`` (2 × 512 ReLU), ``"cnn"``
        (:class:`~art_adp.models.SmallCNN`: 5×5, stride 1, padding 2), ``"resnet20"``
        (:class:`~art_adp.models.CifarResNet`); for a brought classifier (``epochs`` 0), what it is.
    :param epochs: Epochs (with ``patience``: the most epochs); 0: not trained here but brought (:func:`brought`).
    :param adversarial: PGD adversarial training at the preset's ε (``max_iter`` steps of 2.5 ε / ``max_iter``).
    :param patience: Early stopping: epochs without a higher validation robust accuracy
        (:func:`~art_adp.apps.robust_baseline.train_until_plateau`; trained behind a purifier plainly: clean accuracy
        through it); None: ``epochs`` epochs.
    :param purifier: ``(score model, setting name)``: trained behind that purification (:func:`training_purifier`),
        plainly or, with ``adversarial``, adversarially through it; measured behind it in ``purified``. None: bare.
    :param method: The adversarial training (:data:`~art_adp.apps.robust_baseline.METHODS`): ``"pgd"`` (Madry et
        al., Adam) or ``"fgsm-rs"`` (Wong et al.'s fast adversarial training, SGD on a one-cycle schedule).
    :param lr: Adam's learning rate (``"pgd"``), the schedule's peak (``"fgsm-rs"``).
    :param validation: Fraction of the training split held out to choose the best epoch.
    :param init: A brought classifier of the preset (:func:`brought`) to start from, its weights fine-tuned (None:
        the architecture's initial weights).
    """

    arch: str
    adversarial: bool = False
    epochs: int = 20
    patience: int | None = None
    batch_size: int = 64
    max_iter: int = 10
    purifier: tuple[str, str] | None = None
    method: str = "pgd"
    lr: float = 1e-3
    validation: float = 0.1
    init: str | None = None


#: The classifiers trained behind a purification (issue 39), beside ``cnn`` and ``adv-cnn``: the exact score's and
#: the trained DenoiserUNet's one-step denoise at σ 0.25, plainly and adversarially through it, stopped on a plateau.
ONE_STEP = "one-step denoise"
BEHIND: Mapping[str, ClassifierRecipe] = {
    f"{prefix}cnn-{model}": ClassifierRecipe("cnn", adversarial=bool(prefix), epochs=100, patience=5, batch_size=128,
                                             purifier=(model, ONE_STEP))
    for model in ("oracle", "denoiser") for prefix in ("", "adv-")
}  # fmt: skip


@dataclass(frozen=True)
class Preset:
    """
    A data set's lever table: the radius, the classifiers, the σ grid and the attack rows.

    :param eps: ℓ∞ radius.
    :param classifier: The classifier ADP is put in front of (a key of ``classifiers``).
    :param classifiers: Name → recipe.
    :param baselines: The undefended classifiers measured by default.
    :param sigmas: The σ grid (:func:`sigma_settings`).
    :param rows: The attack rows; the first adaptive one's budget is the default of a registry attack asked by name.
    :param attacks: The rows measured by default.
    :param image_shape: ``C×H×W`` of the data set's images.
    """

    eps: float
    classifier: str
    classifiers: Mapping[str, ClassifierRecipe]
    baselines: tuple[str, ...]
    sigmas: tuple[float, ...]
    rows: tuple[Row, ...]
    attacks: tuple[str, ...]
    image_shape: tuple[int, int, int] = (1, 28, 28)


MNIST_EPS = DATASETS["mnist"].eps
FMNIST_EPS = DATASETS["fashion-mnist"].eps

#: MNIST: the table of docs/mnist_results.md (ε 0.3, the paper's MLP; Clf-PGD 40 × 0.01 without random start as measured
#: there, 100 × 0.025 with one, and at ε 0.3/256; adaptive 40 × 0.01), the stronger adaptive rows (40 × 0.03, random
#: start) and the adversarially trained SmallCNN.
MNIST = Preset(
    eps=MNIST_EPS,
    classifier="mlp",
    classifiers={
        "mlp": ClassifierRecipe("mlp"),
        "adv-mlp": ClassifierRecipe("mlp", adversarial=True, batch_size=128),
        "adv-cnn": ClassifierRecipe("cnn", adversarial=True, epochs=100, patience=5, batch_size=128),
        **BEHIND,
    },
    baselines=("mlp", "adv-mlp"),
    sigmas=DATASETS["mnist"].sigmas,
    rows=(
        Row("clean"),
        Row(BLIND_ATTACK, BLIND_ATTACK, 0.01, 40),
        Row("clf-pgd-strong", BLIND_ATTACK, 0.025, 100, True),
        Row("clf-pgd-eps/256", BLIND_ATTACK, MNIST_EPS / 256 / 4, 40, eps_scale=1 / 256),
        Row(SWEEP_ATTACK, SWEEP_ATTACK, 0.01, 40),
        Row(FULL_ATTACK, FULL_ATTACK, 0.01, 40),
        Row(f"{SWEEP_ATTACK} (rs)", SWEEP_ATTACK, 0.03, 40, True),
        Row(f"{FULL_ATTACK} (rs)", FULL_ATTACK, 0.03, 40, True),
        Row(APGD_ATTACK, APGD_ATTACK, 0.0, APGD_MAX_ITER, True),
        Row(AUTOATTACK, AUTOATTACK),
    ),
    attacks=("clean", BLIND_ATTACK, "clf-pgd-strong"),
    image_shape=DATASETS["mnist"].shape,
)

#: Fashion-MNIST at the paper's ε = 8/255: SmallCNN; Clf-PGD as the authors' code ran it (foolbox 3
#: ``LinfPGD(rel_stepsize=0.25)``: 40 steps of ε/4 from a random start) and a stronger one (100 × ε/8, random start);
#: adaptive rows 40 × ε/4 from a random start (full-gradient PGD+EOT from the image too); σ ∈ {0.1, 0.25, 0.5}.
FASHION_MNIST = Preset(
    eps=FMNIST_EPS,
    classifier="cnn",
    classifiers={
        "cnn": ClassifierRecipe("cnn"),
        "adv-cnn": ClassifierRecipe("cnn", adversarial=True, epochs=100, patience=5, batch_size=128),
        **BEHIND,
    },
    baselines=("cnn", "adv-cnn"),
    sigmas=DATASETS["fashion-mnist"].sigmas,
    rows=(
        Row("clean"),
        Row(BLIND_ATTACK, BLIND_ATTACK, FMNIST_EPS / 4, 40, True),
        Row("clf-pgd-strong", BLIND_ATTACK, FMNIST_EPS / 8, 100, True),
        adaptive_row(SWEEP_ATTACK, FMNIST_EPS / 4),
        adaptive_row(FULL_ATTACK, FMNIST_EPS / 4),
        # the same from the image itself: the random start's measurement (docs/attacks.md)
        Row(f"{FULL_ATTACK} (no rs)", FULL_ATTACK, FMNIST_EPS / 4, 40),
        adaptive_row(APGD_ATTACK, 0.0, APGD_MAX_ITER),  # APGD sets its own step (2ε, halved at checkpoints)
        Row(AUTOATTACK, AUTOATTACK),
    ),
    attacks=("clean", BLIND_ATTACK, "clf-pgd-strong"),
    image_shape=DATASETS["fashion-mnist"].shape,
)

#: CIFAR-10 at the paper's ε = 8/255: ADP in front of two published classifiers brought into the run folder
#: (:func:`brought`; examples/cifar10_classifiers.py makes them): ResNet-20 (``resnet20``, He et al.'s, as trained by
#: akamaster/pytorch_resnet_cifar10) and Tiniest (``tiniest``, 97,530 parameters, ThalesGroup/scio); the same
#: ResNet-20 adversarially trained by fast adversarial training (FGSM from a random start, 15 epochs of a one-cycle
#: schedule, the best of them on 1,000 held-out training images under PGD 20); the published ResNet-20 fine-tuned
#: behind the DenoiserUNet's one-step denoise; rows as Fashion-MNIST's.
CIFAR10 = Preset(
    eps=DATASETS["cifar10"].eps,
    classifier="resnet20",
    classifiers={
        "resnet20": ClassifierRecipe("resnet20", epochs=0),
        "tiniest": ClassifierRecipe("tiniest", epochs=0),
        "adv-resnet20": ClassifierRecipe(
            "resnet20",
            adversarial=True,
            epochs=15,
            patience=15,
            batch_size=128,
            method="fgsm-rs",
            lr=0.2,
            validation=0.02,
        ),
        # adv-resnet20 fine-tuned adversarially through the DenoiserUNet's one-step denoise, full gradient: fast
        # adversarial training (FGSM from a random start, one draw per step) on a one-cycle schedule peaking at a
        # tenth of adv-resnet20's, kept at its best robust accuracy through the purifier (PGD 20) on 1,000 held-out
        # training images
        "adv-resnet20-denoiser": ClassifierRecipe(
            "resnet20",
            adversarial=True,
            epochs=4,
            patience=4,
            batch_size=128,
            method="fgsm-rs",
            lr=0.02,
            validation=0.02,
            purifier=("denoiser", ONE_STEP),
            init="adv-resnet20",
        ),
        # the published ResNet-20 fine-tuned on the DenoiserUNet's one-step denoise (each epoch purified afresh; Adam
        # 1e-4), kept at its best clean accuracy through the purifier on 1,000 held-out training images
        "resnet20-denoiser": ClassifierRecipe(
            "resnet20",
            epochs=8,
            patience=3,
            batch_size=128,
            lr=1e-4,
            validation=0.02,
            purifier=("denoiser", ONE_STEP),
            init="resnet20",
        ),
    },  # fmt: skip
    baselines=("resnet20", "tiniest", "adv-resnet20"),
    sigmas=DATASETS["cifar10"].sigmas,
    rows=FASHION_MNIST.rows,  # Fashion-MNIST's rows: the same ε, 8/255
    attacks=FASHION_MNIST.attacks,
    image_shape=DATASETS["cifar10"].shape,
)

#: The lever tables are the plans ``levers:<name>``; a data set names the one it is measured with
#: (:attr:`~art_adp.data.DatasetSpec.levers`).
register("levers:mnist", Plan("levers", "MNIST's lever table at ℓ∞ 0.3: the paper's MLP behind each purification "
                              "setting (the exact score or a DenoiserUNet at each σ) under Clf-PGD and the adaptive "
                              "rows, beside the PGD-trained MLP", MNIST))  # fmt: skip
register("levers:fashion-mnist", Plan("levers", "Fashion-MNIST's at ℓ∞ 8/255: the SmallCNN behind each setting, "
                                      "beside the adversarially trained SmallCNN", FASHION_MNIST))  # fmt: skip
register("levers:cifar10", Plan("levers", "CIFAR-10's at ℓ∞ 8/255: ResNet-20, Tiniest and the classifiers trained "
                                "through the one-step denoise behind each setting, beside fast adversarial training",
                                CIFAR10))  # fmt: skip


#: MNIST's rows (the table of docs/mnist_results.md).
ROWS: tuple[Row, ...] = MNIST.rows
ATTACK_ROWS = {row.name: row for row in ROWS}
JUDGES = ("ensemble", "fixed")
#: What the command line offers: every preset's rows and the registry's attacks, classifiers, settings.
_PRESETS = [plan(k).values for k in plan_names("levers")]
ROW_NAMES = tuple(dict.fromkeys([r.name for p in _PRESETS for r in p.rows] + list(REGISTRY)))
CLASSIFIER_NAMES = tuple(dict.fromkeys(k for p in _PRESETS for k in p.classifiers))
SETTING_NAMES = tuple(dict.fromkeys(s.name for p in _PRESETS for s in sigma_settings(p.sigmas)))


SETTINGS_HELP = (
    "purifications at sigma 0.25 (released (T 10, λ 0.05), one-step denoise, ...) and, for each other S "
    "of the sigma grid, 'σ S, T 10, λ 0.5' and 'σ S, one-step'; default: all of them"
)


def is_setting_name(name: str) -> bool:
    """Whether ``name`` is a setting of some σ grid (:func:`sigma_settings`): a lever at σ 0.25, or ``"σ S, T 10, λ
    0.5"`` or ``"σ S, one-step"`` for a level S > 0 (a grid given with ``sigmas`` names its own levels)."""
    level = re.match(r"σ ([^,]+),", name)
    try:
        grid = [float(level[1])] if level else []
    except ValueError:
        return False
    return all(s > 0 for s in grid) and name in {s.name for s in sigma_settings(grid)}


def setting_name(name: str) -> str:
    """``name`` if some σ grid has it (the command line's parser of ``--settings``; :func:`run_levers` checks it
    against the grid it runs, ``--sigmas`` or the preset's)."""
    if not is_setting_name(name):
        known = ", ".join(map(repr, SETTING_NAMES))
        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r} (choose from {known}, or 'σ S, T 10, λ 0.5' / 'σ S, one-step' for an S of "
            "--sigmas)"
        )
    return name


def _row_named(name: str, known: Mapping[str, Row], adaptive_default: Row) -> Row | None:
    """The row ``name``: a preset row (``known``), a registry attack at ``adaptive_default``'s budget (an APGD
    variant at the preset's APGD row's, an attack of :data:`OWN_BUDGETS` at its own), or either's
    :func:`with_restarts` variant (:data:`VARIANT`); None for another name."""
    m = VARIANT.match(name) if name not in known else None
    if m is not None:
        base = _row_named(m["row"], known, adaptive_default)
        if base is not None and base.adaptive and not base.check_every:
            return with_restarts(base, int(m["runs"]), int(m["max_iter"]))
    if name in known:
        return known[name]
    if name not in REGISTRY:
        return None
    apgd = known.get(APGD_ATTACK) if REGISTRY[name].short == REGISTRY[APGD_ATTACK].short else None
    return replace(apgd or adaptive_default, name=name, attack=name, **OWN_BUDGETS.get(name, {}))


#: The budgets of the registry attacks whose papers set their own, when they run as adaptive rows: DiffHammer's
#: selective EOT, 50 iterations per loss of N = 10 draws; DiffBreak's loop, 100 iterations.
OWN_BUDGETS: Mapping[str, dict] = {
    registered_name(SelectiveEOT): {"max_iter": 50, "eot_samples": 10},
    registered_name(LowFrequencyVote): {"max_iter": 100},
}


def levers_datasets() -> tuple[str, ...]:
    """The data sets ``art-adp levers`` measures: those of :data:`~art_adp.data.DATASETS` that name a preset."""
    return tuple(name for name, spec in DATASETS.items() if f"levers:{spec.levers}" in PLANS)


def levers_spec(dataset: str) -> DatasetSpec:
    """``dataset``'s entry of :data:`~art_adp.data.DATASETS`; a data set without a preset (or unknown) is refused
    with the list of those that have one."""
    spec = DATASETS.get(dataset)
    if spec is None or f"levers:{spec.levers}" not in PLANS:
        raise ValueError(f"art-adp levers has no preset for the data set {dataset!r}; supported: "
                         f"{', '.join(levers_datasets())}.")  # fmt: skip
    return spec


def preset_for(
    dataset: str, *, eps=None, arch=None, sigmas=None, max_iter=None, eps_step=None, max_epochs=None
) -> Preset:
    """
    ``dataset``'s preset: the one its :class:`~art_adp.data.DatasetSpec` names (:func:`levers_spec` refuses a data
    set without one), at the data set's radius, σ grid and image shape, with the overrides given: the radius (the
    rows' steps scale with it), the architecture of the classifier ADP is put in front of, the σ grid, the adaptive
    rows' iterations and step, and the cap on the adversarially trained classifiers' epochs (they stop earlier on a
    plateau of their validation robust accuracy).
    """
    spec = levers_spec(dataset)
    p = plan(f"levers:{spec.levers}", "levers").values  # levers_spec refused a data set without one
    eps = spec.eps if eps is None else float(eps)
    rows = p.rows
    if eps != p.eps:
        scale = eps / p.eps
        rows = tuple(replace(r, eps_step=r.eps_step * scale) for r in rows)
    changes: dict[str, Any] = {} if max_iter is None else {"max_iter": int(max_iter)}
    changes.update({} if eps_step is None else {"eps_step": float(eps_step)})
    rows = tuple(replace(r, **changes) if r.adaptive else r for r in rows)
    classifiers = dict(p.classifiers)
    if arch is not None:
        classifiers[p.classifier] = replace(classifiers[p.classifier], arch=arch)
    if max_epochs is not None:
        classifiers = {k: replace(c, epochs=int(max_epochs)) if c.patience else c for k, c in classifiers.items()}
    return replace(p, eps=eps, rows=rows, classifiers=classifiers, image_shape=spec.shape,
                   sigmas=spec.sigmas if sigmas is None else tuple(float(s) for s in sigmas))  # fmt: skip


def _step_text(eps_step: float, eps: float) -> str:
    k = eps / eps_step
    return f"ε/{round(k)}" if abs(k - round(k)) < 1e-6 else f"{eps_step:.4g}"


def row_label(row: Row, eps: float) -> str:
    """The row's title: the registry's label and the budget (steps as fractions of ε where they are)."""
    if not row.attack:
        return "clean"
    if row.attack == AUTOATTACK:
        return REGISTRY[AUTOATTACK].label
    label = REGISTRY[row.attack].label
    radius = "" if row.eps_scale == 1 else f" at ε·{row.eps_scale:g}"
    if REGISTRY[row.attack].own_step is not None:  # APGD and its variants choose their own step
        runs = f", best of {row.num_random_init} runs" if row.num_random_init > 1 else ""
        return f"{label}, {row.max_iter} it/loss{runs}"
    rs = ", random start" if row.random_start else ""
    if row.check_every or row.num_random_init > 1:
        rs += f", best iterate, {row.num_random_init} run{'s' if row.num_random_init > 1 else ''}"
    return f"{label}, {row.max_iter} × {_step_text(row.eps_step, eps * row.eps_scale)}{rs}{radius}"


def _classes(model) -> int:
    """The classes of one of this package's classifiers (its ``config``), else ten."""
    return getattr(model, "config", {}).get("nb_classes", 10)


def _white_budget(r: Row, eps: float) -> Budget:
    """A white-box row's budget on an undefended classifier."""
    return Budget(eps=eps * r.eps_scale, eps_step=r.eps_step, max_iter=r.max_iter, random_start=r.random_start,
                  batch_size=WHITE_BATCH)  # fmt: skip


def _score_model(kind: str, level: float, x_train, denoiser, device: str = "cpu"):
    from ..score import EDMScore, KernelScore

    if kind == "oracle":
        return KernelScore(x_train, bandwidth=level, chunk_size=2000).to(device)
    return EDMScore(denoiser, sigma=level, data_range=(0.0, 1.0))


def model_clipped(kind: str, denoiser=None) -> bool:
    """Whether the score model ``kind`` was trained on clipped noisy inputs: the exact score (``"oracle"``) is that of
    unclipped Gaussian noise; a DenoiserUNet says so in its checkpoint (``train-denoiser --clip-noise``)."""
    return kind != "oracle" and bool(getattr(denoiser, "training_info", {}).get("clip_noise", False))


def training_purifier(model: str, setting: Setting, x_train, denoiser=None, *, adversarial: bool, eps: float,
                      device: str = "cpu"):  # fmt: skip
    """
    The purifier a classifier trains behind (:class:`~art_adp.ADPPurifier` at ``setting``, ART's ``apply_fit`` on, its
    own generator, which the training seeds): the ``model`` score at the setting's σ -- ``"oracle"``, the exact score
    over ``x_train``, each training image purified with itself left out (within ``eps`` of an adversarial example's
    input), as the oracle purifies unseen images; ``"denoiser"``, the trained DenoiserUNet -- with the full gradient
    for adversarial training through it (PGD on the composed model, one draw per step).
    """
    if model == "denoiser" and denoiser is None:
        raise ValueError("training behind the denoiser needs a train-denoiser checkpoint: give --denoiser PATH.")
    leave_out = (eps if adversarial else 0.0) if model == "oracle" else None
    description = {"gradient": "full" if adversarial else "bpda", "batch_size": 500, "leave_out": leave_out,
                   "apply_fit": True, **setting.purifier_kwargs(model_clipped(model, denoiser))}  # fmt: skip
    return build_defence(description, _score_model(model, setting.sigma, x_train, denoiser, device), seed=0,
                         device=device)  # fmt: skip


def setting_named(name: str, sigmas: Sequence[float]) -> Setting:
    """The setting of the σ grid ``sigmas`` called ``name``."""
    found = {s.name: s for s in sigma_settings(sigmas)}
    if name not in found:
        raise ValueError(f"Unknown setting {name!r}; choose from {list(found)}.")
    return found[name]


def _classifier(name: str, preset: Preset, data, run_dir: Path, seed: int, progress: bool, denoiser=None,
                device: str = "cpu", precision: str = "fp32"):  # fmt: skip
    """The preset's classifier ``name``, trained once on the training split and kept (``NAME.safetensors``); one
    trained behind a purifier comes back with it recorded (``trained_behind``)."""
    from .. import models

    path = run_dir / f"{name}.safetensors"
    recipe = preset.classifiers[name]
    if not recipe.epochs:
        return brought(name, run_dir)
    if path.exists() and not recipe.patience:
        return _trained(path)
    torch.manual_seed(seed)
    model = _architecture(name, preset) if recipe.init is None else copy.deepcopy(brought(recipe.init, run_dir))
    if recipe.purifier:
        kind, setting = recipe.purifier[0], setting_named(recipe.purifier[1], preset.sigmas)
        mode = "adversarial" if recipe.adversarial else "plain"
        purifier = training_purifier(kind, setting, data.x_train, denoiser, adversarial=recipe.adversarial,
                                     eps=preset.eps, device=device)  # fmt: skip
        names = {"model": kind, "setting": setting.name, "mode": mode}
        return train_until_plateau(model, data.x_train, data.y_train, path, eps=preset.eps, max_iter=recipe.max_iter,
                                   patience=recipe.patience or 5, max_epochs=recipe.epochs,
                                   batch_size=recipe.batch_size, seed=seed, progress=progress, device=device,
                                   purifier=purifier, adversarial=recipe.adversarial, lr=recipe.lr,
                                   val_fraction=recipe.validation, purifier_names=names, method=recipe.method,
                                   precision=precision)[0]  # fmt: skip
    if recipe.patience:
        return train_until_plateau(model, data.x_train, data.y_train, path, eps=preset.eps, max_iter=recipe.max_iter,
                                   patience=recipe.patience, max_epochs=recipe.epochs, batch_size=recipe.batch_size,
                                   seed=seed, progress=progress, device=device, method=recipe.method,
                                   lr=recipe.lr, val_fraction=recipe.validation, precision=precision)[0]  # fmt: skip
    if recipe.adversarial:
        models.train_adversarial_classifier(model, data.x_train, data.y_train, eps=preset.eps, max_iter=recipe.max_iter,
                                            epochs=recipe.epochs, seed=seed, verbose=progress)  # fmt: skip
    else:
        models.train_classifier(model, data.x_train, data.y_train, epochs=recipe.epochs, batch_size=recipe.batch_size,
                                lr=1e-3, seed=seed, progress=progress)  # fmt: skip
    models.save_classifier(model, path)
    return model.eval()


def brought(name: str, run_dir: Path) -> torch.nn.Module:
    """A classifier a preset does not train but is given (a recipe of 0 epochs, e.g. a published one): the run
    folder's ``NAME.safetensors`` (:func:`~art_adp.models.save_classifier`) or ``NAME.pt`` (TorchScript), read as
    ``--classifier`` reads them (:func:`~art_adp.apps.loading.load_classifier_arg`; never unpickled)."""
    from .loading import load_classifier_arg

    found = [run_dir / f"{name}{ext}" for ext in (".safetensors", ".pt") if (run_dir / f"{name}{ext}").exists()]
    if not found:
        raise FileNotFoundError(
            f"The classifier {name!r} is not trained here: put it in {run_dir} as {name}.safetensors "
            f"(art_adp.models.save_classifier) or {name}.pt (TorchScript); examples/cifar10_classifiers.py makes both "
            "published CIFAR-10 classifiers so (docs/cifar10.md)."
        )
    return load_classifier_arg(str(found[0]))[0].eval()


def _stand_in(name: str, preset: Preset, run_dir: Path) -> torch.nn.Module:
    """The classifier ``name`` if trained (or brought), else its untrained architecture: what a price needs (the
    same cost)."""
    path = run_dir / f"{name}.safetensors"
    if not preset.classifiers[name].epochs:
        return brought(name, run_dir)
    return _trained(path) if path.exists() else _architecture(name, preset).eval()


def _trained(path: Path) -> torch.nn.Module:
    """A classifier the folder trained, read back: one trained behind a purifier is checked against the purifier where
    a cell puts it (behind its own, or undefended: :func:`~art_adp.models.checkpoint.check_purifier` warns), not on
    reading."""
    from .. import models

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* was trained behind ", category=UserWarning)
        return models.load_classifier(path).eval()


def _architecture(name: str, preset: Preset) -> torch.nn.Module:
    """The untrained architecture of the preset's classifier ``name`` (the preset's image shape, ten classes)."""
    from .. import models
    from .commands import CLASSIFIERS

    channels, side, _ = preset.image_shape
    architecture = getattr(models, CLASSIFIERS[preset.classifiers[name].arch])
    return architecture(in_channels=channels, image_size=side, nb_classes=10)


def _training_facts(name: str, preset: Preset, run_dir: Path) -> dict:
    from ..serialization import read_checkpoint

    facts = {**asdict(preset.classifiers[name])}
    if not (run_dir / f"{name}.safetensors").exists():  # brought as TorchScript: nothing recorded in it
        return {**facts, "brought": f"{name}.pt (TorchScript)"}
    header = read_checkpoint(run_dir / f"{name}.safetensors")[1]
    for key in ("adversarial_training", "training", "purifier"):
        if key in header:
            facts[key] = header[key]
    return facts


def _budget(r: Row, eps: float, eot_samples: int, batch_size: int = 50, judge_draws: int = JUDGE_DRAWS,
            options: Mapping[str, str] | None = None) -> Budget:  # fmt: skip
    """The row's :class:`Budget` (its own EOT draws, else ``eot_samples``), with the attack ``options`` (loss,
    EOT target, step schedule; None: the :class:`Budget`'s defaults)."""
    extra: dict[str, Any] = dict(options or {})
    return Budget(eps=eps * r.eps_scale, eps_step=r.eps_step or eps, max_iter=r.max_iter,
                  eot_samples=r.eot_samples or eot_samples, random_start=r.random_start, batch_size=batch_size,
                  num_random_init=r.num_random_init, check_every=r.check_every, judge_draws=judge_draws,
                  **extra)  # fmt: skip


#: Images an adaptive row attacks, judges and records at a time, by their index (images 0-49, 50-99, ...): a row cut
#: short resumes from its last whole block, and a resumed row equals an uninterrupted one.
BLOCK = 50

#: Images the fixed-noise view attacks and judges under one frozen draw (its blocks, by index, and its batches).
FIXED_CHUNK = FIXED_BLOCK


def _white_parts(r: Row) -> tuple[str, ...]:
    """What a white-box row's attack seed is derived from beside the run's seed (the ``levers-white`` scheme)."""
    return (AUTOATTACK,) if r.attack == AUTOATTACK else ("pgd", r.name)


def judge_seeds(scheme: str, seed: int, key: tuple, repeats: int) -> SeedPlan:
    """The seeds of the adaptive cell ``key`` (classifier, score model, setting, row, judge) whose R judgements a
    block draws (``plan(first // BLOCK, first).judge``) in a folder of seed scheme ``scheme``."""
    return SeedPlan("levers", seed, ("",), repeats) if scheme == "levers" else SeedPlan(scheme, seed, key, repeats)


#: Images per batch of the S-run ensemble's judgements.
JUDGE_BATCH = 500


def measured_purifier(model: str, setting: Setting, x_train, denoiser=None, *, seed: int, device: str = "cpu"):
    """The purifier a defended cell measures: :class:`~art_adp.ADPPurifier` at ``setting`` on the ``model`` score
    (``"oracle"``: the exact score over ``x_train``; ``"denoiser"``: the trained DenoiserUNet), BPDA, seeded."""
    own = setting.purifier_kwargs(model_clipped(model, denoiser))
    description = {"gradient": "bpda", "batch_size": JUDGE_BATCH, **own}
    return build_defence(description, _score_model(model, setting.sigma, x_train, denoiser, device), seed=seed,
                         device=device)  # fmt: skip


def _white(r: Row, eps: float) -> Attacking:
    """The attack of a white-box row on an undefended classifier: none (clean), or the registry's -- its PGD rows are
    ART's PGD (:data:`~art_adp.attacks.registry.ART_PGD`), the attack their figures were measured with."""
    return Attacking() if not r.attack else Attacking(ART_PGD if r.attack == BLIND_ATTACK else r.attack,
                                                      _white_budget(r, eps))  # fmt: skip


def run_levers(
    data,
    run_dir: str | Path,
    *,
    dataset: str = "mnist",
    models: Sequence[str] = ("oracle", "denoiser"),
    denoiser_path: str | Path | None = None,
    settings: Sequence[str] | None = None,
    attacks: Sequence[str] | None = None,
    classifiers: Sequence[str] | None = None,
    purified: Sequence[str] | None = None,
    judges: Sequence[str] = ("ensemble",),
    n_examples: int = 1000,
    ensemble_size: int = 10,
    repeats: int = 10,
    eot_samples: int = 5,
    eps: float | None = None,
    arch: str | None = None,
    sigmas: Sequence[float] | None = None,
    max_iter: int | None = None,
    eps_step: float | None = None,
    max_epochs: int | None = None,
    restarts: int | None = 1,
    loss: str = Budget.loss,
    eot_target: str = Budget.eot_target,
    step_schedule: str = Budget.step_schedule,
    keep_examples: bool = True,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
    estimate_only: bool = False,
    train_precision: str = "fp32",
    attack_precision: str = Budget.precision,
    force_precision: bool = False,
    seed_scheme: str | None = None,
) -> dict:
    """
    Measure ``attacks`` × ``settings`` × ``models`` × ``purified`` classifiers, and the undefended ``classifiers``,
    on the first ``n_examples`` test images; resumes from ``RUN_DIR/records.jsonl`` (images already measured are
    skipped), then writes ``table.json`` / ``table.md``; ``table.json``'s provenance keeps every earlier call into the
    folder (``provenance.calls``, in order, each with its own command, code, device and wall time). A plan of the
    evaluation engine (:mod:`art_adp.runs.engine`): one cell per (classifier, score model, setting, row, judge), each
    cell's settings (radius, row, budget, purification, judging, seed) kept in ``RUN_DIR/cells.json``; a cell asked
    again with other settings is refused before anything runs.

    :param data: A :class:`~art_adp.data.Dataset` of images (MNIST, Fashion-MNIST, CIFAR-10).
    :param run_dir: The run folder (classifiers, adversarial examples, records, table).
    :param dataset: The data set, a key of :data:`~art_adp.data.DATASETS` that names a preset (:func:`preset_for`).
    :param models: ``"oracle"`` and/or ``"denoiser"``.
    :param denoiser_path: The :class:`~art_adp.DenoiserUNet` checkpoint (for ``"denoiser"``).
    :param settings: Setting names (default: all of the σ grid's).
    :param attacks: Row names of the preset, or any attack registry name (an adaptive row at the preset's adaptive
        budget), or either followed by ``-{N}it-r{K}`` (:data:`VARIANT`: that adaptive row with the best iterate, N
        iterations, K runs); default: the preset's.
    :param classifiers: The undefended classifiers measured (default: the preset's baselines; ``()``: none).
    :param purified: The classifiers ADP is put in front of (default: the preset's classifier).
    :param judges: ``"ensemble"`` (S-run ensemble; adaptive rows R times) and/or ``"fixed"`` (fixed noise: clean and
        adaptive rows).
    :param n_examples: Test images (the first ones of the test split).
    :param ensemble_size: S, purifications averaged per prediction (the paper's 10).
    :param repeats: R, judgements of the adaptive rows (fresh noise each; 10, DiffHammer's Wor.Rob@10: the tables
        give the worst of 10 beside the worst of the first 2).
    :param eot_samples: EOT draws per gradient of the adaptive attacks.
    :param eps, arch, sigmas, max_iter, eps_step, max_epochs: Overrides of the preset (:func:`preset_for`).
    :param restarts: K: measure every adaptive row as its :func:`with_restarts` variant (the best iterate, judged on
        S draws of its own, and K runs), recorded under the variant's name (the default: one run, its best iterate);
        None: the rows as recorded before the rule (one run, the last iterate).
    :param loss, eot_target, step_schedule: The attacks' options (:class:`~art_adp.attacks.registry.Budget`): PGD+EOT's
        loss, what the EOT gradients differentiate, the PGD family's steps. Each adaptive record carries the options
        its attack ran with that differ from the first records' (:func:`~art_adp.attacks.registry.recorded`), and a
        run folder holding a row measured with other options (or before records carried them) is refused for it.
    :param keep_examples: Keep the adversarial examples of every adaptive block
        (``RUN_DIR/examples/<classifier>__<model>__<setting>__<row>__<first image>.npz``: images, indices), so a new
        judgement needs no new attack.
    :param seed: Seed of every draw (random starts, purification noise, training).
    :param device: Where the networks run (``"cpu"`` or ``"cuda"``).
    :param progress: Print one line per measured cell.
    :param train_precision: The classifiers' training passes (``precision`` of
        :func:`~art_adp.apps.robust_baseline.train_until_plateau`): ``"fp32"``, or ``"bf16"``, refused on a processor
        without native bf16.
    :param attack_precision: The adaptive rows' gradient passes (:class:`~art_adp.attacks.registry.Budget`'s
        ``precision``): ``"fp32"``, or ``"bf16"`` autocast (judgements stay fp32), recorded with each row's options.
    :param force_precision: bf16 (training or attacks) even on a processor that emulates it.
    :param seed_scheme: How a block's seeds come from ``seed`` (:data:`~art_adp.runs.seeds.LEVERS_SCHEMES`):
        ``"apart"``, the attack's, the purifiers' noise and the judgements' derived apart from the cell and the
        block's first image (:func:`~art_adp.runs.seeds.apart`), or ``"levers"``, the schemes of the folders measured
        before it; None: the folder's own (:func:`~art_adp.runs.engine.folder_scheme`), ``"apart"`` for a new one,
        recorded in its cells' settings.
    :param estimate_only: Price the defended rows still to measure and stop (nothing trained, attacked or recorded):
        one line per row with its estimated time on this device, from the attack registry's cost model and a timed
        probe of each purifier (:func:`~art_adp.runs.engine.estimate`, the cells a run would measure); returns
        ``{"estimate_seconds": total, "by_row": {...}, "n_examples", "provenance"}``, also written to
        ``RUN_DIR/estimate.json``. A classifier not trained yet is priced with its untrained architecture (the same
        cost); its training is not.
    """
    from ..score import load_score_model

    preset = preset_for(dataset, eps=eps, arch=arch, sigmas=sigmas, max_iter=max_iter, eps_step=eps_step,
                        max_epochs=max_epochs)  # fmt: skip
    require_native(train_precision, device, force=force_precision)
    require_native(attack_precision, device, force=force_precision)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    scheme = check_scheme(folder_scheme(run_dir / "cells.json", legacy="levers") if seed_scheme is None
                          else seed_scheme, LEVERS_SCHEMES)  # fmt: skip
    started, code = time.monotonic(), code_version()  # the code this run loads now, whatever the checkout is later
    diff = code_diff() if code.endswith("-dirty)") else None  # and, uncommitted, its diff as read now
    eps = preset.eps
    known = {r.name: r for r in preset.rows}
    # an attack of the registry named in --attacks runs at the preset's first adaptive budget with a random start
    adaptive_default = next((r for r in preset.rows if r.adaptive and r.random_start), None) or next(
        r for r in preset.rows if r.adaptive
    )
    attacks = tuple(preset.attacks if attacks is None else attacks)

    def row_named(a: str) -> Row | None:
        return _row_named(a, known, adaptive_default)

    unknown = [a for a in attacks if row_named(a) is None]
    if unknown:
        raise ValueError(f"Unknown attack rows {sorted(unknown)}; choose from {list(known)} or {list(REGISTRY)}, or "
                         "an adaptive one followed by -{N}it-r{K}.")  # fmt: skip
    rows = [r for r in (row_named(a) for a in attacks) if r is not None]
    if restarts is not None:
        rows = [with_restarts(r, restarts) if r.adaptive and not r.num_random_init > 1 and not r.check_every else r
                for r in rows]  # fmt: skip
    options = {"loss": loss, "eot_target": eot_target, "step_schedule": step_schedule, "precision": attack_precision}

    def options_of(r: Row) -> dict:
        """What an adaptive record of ``r`` carries: the options and best-iterate budget its attack takes that differ
        from the first records'."""
        spec = REGISTRY[r.attack]
        return recorded(_budget(r, eps, eot_samples, judge_draws=ensemble_size, options=options), spec)

    if AUTOATTACK in attacks and importlib.util.find_spec("torchattacks") is None:
        raise ImportError(f"The {AUTOATTACK} row runs torchattacks' AutoAttack: pip install --no-deps "
                          "torchattacks==3.5.1")  # fmt: skip
    all_settings = sigma_settings(preset.sigmas)
    chosen = [s for s in all_settings if settings is None or s.name in settings]
    if settings is not None and len(chosen) != len(set(settings)):
        raise ValueError(f"Unknown settings {sorted(set(settings) - {s.name for s in all_settings})}; the σ grid "
                         f"{tuple(preset.sigmas)} has {[s.name for s in all_settings]}.")  # fmt: skip
    classifiers = preset.baselines if classifiers is None else tuple(classifiers)
    purified = (preset.classifier,) if purified is None else tuple(purified)
    bad = sorted((set(classifiers) | set(purified)) - set(preset.classifiers))
    if bad:
        raise ValueError(f"Unknown classifiers {bad}; choose from {list(preset.classifiers)}.")
    if set(judges) - set(JUDGES) or not judges:
        raise ValueError(f"judges must be a non-empty subset of {JUDGES}, got {tuple(judges)}.")
    names = dict.fromkeys([*classifiers, *purified])
    behind = {k: own for k in names if (own := preset.classifiers[k].purifier) is not None}
    if ("denoiser" in models or any(m == "denoiser" for m, _ in behind.values())) and denoiser_path is None:
        raise ValueError("models includes 'denoiser' (or a classifier trained behind it): give denoiser_path (a "
                         "train-denoiser checkpoint).")  # fmt: skip
    denoiser = load_score_model(denoiser_path, device) if denoiser_path is not None else None
    x, y = data.x_test[:n_examples], data.y_test[:n_examples]
    if estimate_only:
        clfs = {k: _stand_in(k, preset, run_dir) for k in names}
    else:
        clfs = {k: _classifier(k, preset, data, run_dir, seed, progress, denoiser, device, train_precision).to(device)
                for k in names}  # fmt: skip
    path = run_dir / "records.jsonl"
    base = preset.classifier

    def key_of(r: dict) -> tuple:
        judge = r.get("judge", "ensemble")
        return (r.get("classifier", base), r["model"], r["setting"], r["attack"], judge, r["index"])

    on_file = read_jsonl(path)
    draws = {a.name: a.eot_samples or eot_samples for a in rows if a.adaptive}  # a row's own, or the run's
    other_eot = sorted({(r["attack"], r["eot_samples"]) for r in on_file if r["attack"] in draws
                        and r.get("eot_samples", draws[r["attack"]]) != draws[r["attack"]]})  # fmt: skip
    if other_eot:
        raise ValueError(f"{path} holds {other_eot} measured at other EOT draws than eot_samples={eot_samples}; "
                         "measure into another run folder, or pass the folder's eot_samples.")  # fmt: skip
    wanted = {r.name: options_of(r) for r in rows if r.adaptive}
    other = sorted({r["attack"] for r in on_file if r["attack"] in wanted
                    and r.get("judge", "ensemble") == "ensemble"
                    and r.get("options") != wanted[r["attack"]]})  # fmt: skip
    if other:
        raise ValueError(f"{path} holds rows {other} measured with other attack options than {options} (or by the "
                         "attacks before their records carried them); measure into another run folder, or pass the "
                         "options those rows were measured with.")  # fmt: skip

    def fields(clf, model, setting, attack, extra=None, judge="ensemble") -> dict:
        """What the records of the cell (``clf``, ``model``, ``setting``, ``attack``, ``judge``) carry besides the
        engine's fields, and its progress line (``label``; None with ``progress`` off)."""
        more = {**({"classifier": clf} if clf != base and model != "none" else {}),
                **({"judge": judge} if judge != "ensemble" else {})}  # fmt: skip
        where = f"{clf} ← {model}" if model != "none" else model
        return {"fields": {"model": model, "setting": setting, "attack": attack, "ensemble_size": ensemble_size,
                           "eot_samples": eot_samples, **more, **(extra or {})},
                "label": f"{where:>18} | {setting:<24} | {attack:<16} | {judge:<8}" if progress else None}  # fmt: skip

    def cell_settings(r: Row, judgement: Judgement, s: Setting | None = None, budget: Budget | None = None,
                      model: str = "none") -> dict:  # fmt: skip
        """What a cell's records depend on besides its images: the radius, the row and its budget, the purification,
        the judging, the seed and its scheme (the folder's ``cells.json`` keeps them: a cell run again with others is
        refused)."""
        return {"eps": eps, "row": asdict(r), "budget": None if budget is None else budget_settings(budget),
                "seed": seed, **({} if scheme == "levers" else {"seed_scheme": scheme}),
                "purifier": None if s is None else s.record(model_clipped(model, denoiser)),
                "judgement": {"kind": judgement.kind, "ensemble_size": judgement.ensemble_size,
                              "repeats": judgement.repeats}}  # fmt: skip

    def seeds_of(key: tuple, legacy: SeedPlan, repeats: int = 1) -> SeedPlan:
        """The seeds of the cell ``key``: the folder's scheme, ``legacy`` (the cell kind's own) in a ``"levers"``
        folder."""
        return legacy if scheme == "levers" else SeedPlan(scheme, seed, key, repeats)

    white = [r for r in rows if not r.adaptive]
    prices: dict[str, float] = {}
    once = Judgement("once", batch_size=max(1, len(x)))
    cells: list[Cell] = [  # the undefended classifiers under white-box attacks
        Cell((base, "none", name, r.name, "ensemble"), f"bare:{name}", _white(r, eps), once,
             seeds=seeds_of((base, "none", name, r.name, "ensemble"), SeedPlan("levers-white", seed, _white_parts(r))),
             **fields(base, "none", name, r.name),
             block_size=None,
             settings=cell_settings(r, once))
        for name in (() if estimate_only else classifiers) for r in white
    ]  # fmt: skip
    for name in () if estimate_only else classifiers:
        check_purifier(getattr(clfs[name], "trained_behind", None), None, what=f"levers classifier {name!r}")
    adv: dict = {}  # (classifier, row) -> the file of its examples in the run folder
    for name in () if estimate_only else purified:  # Clf-PGD examples against the bare classifier, made once, shared
        for r in (r for r in white if r.attack == BLIND_ATTACK):
            suffix = "" if name == base else f"@{name}"
            cache = run_dir / f"{r.name.replace('/', '_')}{suffix}.npy"
            held = np.load(cache) if cache.exists() else x[:0]
            if len(held) < len(x):  # more images than last time: attack the new ones only
                b, legacy = _white_budget(r, eps), SeedPlan("levers-white", seed, _white_parts(r))
                fresh = white_box_pgd(clfs[name], x[len(held) :], y[len(held) :], eps=b.eps, eps_step=b.eps_step,
                                      max_iter=b.max_iter, random_start=b.random_start, device=device,
                                      seed=seeds_of((name, "examples", r.name), legacy)(0, 0).attack)  # fmt: skip
                held = np.concatenate([held, fresh])
                np.save(cache, held)
            adv[(name, r.name)] = cache.name

    def purifier_of(model: str, s: Setting):
        return measured_purifier(model, s, data.x_train, denoiser, seed=seed, device=device)

    def cached(name: str, r: Row) -> Attacking:
        return Attacking() if not r.attack else Attacking(examples=adv[(name, r.name)])

    targets: dict[str, tuple] = {}
    for name in purified:
        own = behind.get(name)  # a classifier trained behind a purification is measured behind that one only
        pairs = [(own[0], setting_named(own[1], preset.sigmas))] if own else [(m, s) for m in models for s in chosen]
        for model, s in pairs:
            target = f"{name}|{model}|{s.name}"
            targets[target] = (name, model, s)
            extra = {"purifier": s.record(model_clipped(model, denoiser))}
            ensemble = Judgement("ensemble", ensemble_size, repeats, batch_size=JUDGE_BATCH)
            for r in rows:
                if r.attack == AUTOATTACK:
                    continue  # a deterministic white-box attack: APGD-EOT is its randomized counterpart
                key = (name, model, s.name, r.name)
                if r.adaptive and "ensemble" in judges:
                    budget = _budget(r, eps, eot_samples, judge_draws=ensemble_size, options=options)
                    more = {**extra, "repeats": repeats, "options": wanted[r.name],
                            **({"eot_samples": r.eot_samples} if r.eot_samples else {})}  # fmt: skip
                    cells.append(Cell((*key, "ensemble"), target, Attacking(r.attack, budget), ensemble,
                                      seeds=seeds_of((*key, "ensemble"), SeedPlan("levers", seed, (r.name,), repeats),
                                                     repeats),
                                      **fields(*key, more),
                                      block_size=BLOCK,
                                      keep=key if keep_examples else None,
                                      price=Price(r.attack, budget, ensemble_size * repeats),
                                      settings=cell_settings(r, ensemble, s, budget, model)))  # fmt: skip
                if "ensemble" in judges and not r.adaptive:
                    one = replace(ensemble, repeats=1)
                    cells.append(Cell((*key, "ensemble"), target, cached(name, r), one,
                                      seeds=seeds_of((*key, "ensemble"), SeedPlan("levers-once", seed)),
                                      **fields(*key, {**extra, "repeats": 1}), block_size=None,
                                      price=Price(None, None, ensemble_size),
                                      settings=cell_settings(r, one, s, model=model)))  # fmt: skip
                if "fixed" in judges and (r.adaptive or not r.attack):
                    budget = _budget(r, eps, 1, batch_size=FIXED_CHUNK, judge_draws=1,  # judged by the frozen draw
                                     options={"precision": attack_precision})  # fmt: skip
                    attack = Attacking(r.attack, budget) if r.adaptive else Attacking()
                    fixed = Judgement("fixed", 1, 1, batch_size=FIXED_CHUNK)
                    price = Price(r.attack if r.adaptive else None, budget, 1)
                    frozen = seeds_of((*key, "fixed"), SeedPlan("levers-fixed", seed, (r.name,)))
                    cells.append(Cell((*key, "fixed"), target, attack, fixed, seeds=frozen,
                                      **fields(*key, {**extra, "repeats": 1}, judge="fixed"),
                                      block_size=FIXED_CHUNK, settings=cell_settings(r, fixed, s, budget, model),
                                      price=price))  # fmt: skip
    built: dict[str, Any] = {}

    def build(target: str):
        """The estimator ``target`` names: an undefended classifier, or one behind a purifier (the last one built is
        kept: the cells of a purifier are consecutive, and the exact score holds the training split)."""
        if target not in built:
            built.clear()
            if target.startswith("bare:"):
                built[target] = defended_estimator(
                    clfs[target[5:]],
                    None,
                    input_shape=x.shape[1:],
                    nb_classes=_classes(clfs[target[5:]]),
                    device=device,
                )
            else:
                name, model, s = targets[target]
                purifier = purifier_of(model, s)
                check_purifier(getattr(clfs[name], "trained_behind", None), purifier,
                               what=f"levers classifier {name!r}")  # fmt: skip
                built[target] = defended_estimator(
                    clfs[name], purifier, input_shape=x.shape[1:], nb_classes=_classes(clfs[name]), device=device
                )
        return built[target]

    if estimate_only:  # the defended cells' prices: the registry's cost model at a timed probe of each purifier
        left = pending(cells, len(x), path, key=key_of)
        for k, seconds in estimate(cells, build, x, left).items():
            prices[f"{k[0]} ← {k[1]} | {k[2]} | {k[3]}" + ("" if k[4] == "ensemble" else f" ({k[4]})")] = seconds
            print(f"{k[0]} ← {k[1]} | {k[2]} | {k[3]} | {k[4]}: about {seconds / 60:.1f} min for {left[k]} images",
                  flush=True)  # fmt: skip
        total = sum(prices.values())
        priced = {
            "estimate_seconds": total,
            "by_row": prices,
            "n_examples": n_examples,
            "provenance": provenance(
                wall_time_s=time.monotonic() - started, device=device, started_at=code, started_diff=diff
            ),
        }
        run_dir.mkdir(parents=True, exist_ok=True)  # what a table says of the rows not run, with its provenance
        (run_dir / "estimate.json").write_text(json.dumps(priced, indent=1, ensure_ascii=False))
        return priced
    guard(run_dir / "cells.json", cells)
    run_cells(cells, build, x, y, path, key=key_of, run_dir=run_dir, progress=False, desc="levers")
    table = render_levers(read_jsonl(path), base=base)
    table["dataset"] = dataset
    table["classifier"] = base
    table["eps"] = eps
    table["rows"] = [{**asdict(r), "label": row_label(r, eps), "adaptive": r.adaptive} for r in preset.rows]
    measured = dict.fromkeys(c["attack"] for c in table["cells"])
    variants = [row_named(a) for a in measured if a not in known and a not in REGISTRY]
    table["rows"] += [  # the registry's attacks measured as adaptive rows, and the variants (by any call here)
        *({**asdict(r), "label": row_label(r, eps), "adaptive": True, "registry_row": True}
          for r in (replace(adaptive_default, name=a, attack=a) for a in measured if a not in known and a in REGISTRY)),
        *({**asdict(r), "label": row_label(r, eps), "adaptive": True, "variant": True} for r in variants if r),
    ]  # fmt: skip
    table["classifiers"] = {k: _training_facts(k, preset, run_dir) for k in clfs}
    hashes = {k: run_dir / f"{k}.safetensors" if (run_dir / f"{k}.safetensors").exists() else clfs[k] for k in clfs}
    table["provenance"] = provenance(
        wall_time_s=time.monotonic() - started,
        device=device,
        models={"denoiser": denoiser_path, **hashes} if denoiser_path else hashes,
        data=(x, y),
        started_at=code,
        started_diff=diff,
    )
    earlier = run_dir / "table.json"  # the earlier calls into this folder: kept, in order, with their provenance
    if earlier.exists():
        held = json.loads(earlier.read_text()).get("provenance", {})
        calls = [*held.get("calls", []), {k: v for k, v in held.items() if k != "calls"}]
        table["provenance"]["calls"] = calls
    (run_dir / "table.json").write_text(json.dumps(table, indent=1))
    (run_dir / "table.md").write_text(table_markdown(table))
    return table


def render_levers(records: list[dict], base: str | None = None) -> dict:
    """
    Per (classifier, score model, setting, attack, judge): accuracy (correct in every judgement: the worst of R),
    n and its Wilson interval; where records hold R ≥ 2 predictions, the mean, worst and majority of R with theirs.
    """
    cells: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r.get("classifier", base), r["model"], r["setting"], r["attack"], r.get("judge", "ensemble"))
        cells.setdefault(key, []).append(r)
    out = []
    for (clf, model, setting, attack, judge), rs in cells.items():
        budgets = sorted({r.get("eot_samples") for r in rs}, key=str)
        if len(budgets) > 1:
            raise ValueError(f"The records of {(clf, model, setting, attack, judge)} mix EOT draws {budgets}: one "
                             "cell, one budget (keep each budget's records in its own run folder).")  # fmt: skip
        last, stats = rs[-1], summary([correct(r) for r in rs], rs)
        cell = {"model": model, "setting": setting, "attack": attack,
                **{k: stats[k] for k in ("accuracy", "n", "ci95")},
                **{k: last[k] for k in ("ensemble_size", "eot_samples", "repeats") if k in last}}  # fmt: skip
        if "classifier" in last:
            cell["classifier"] = clf
        if judge != "ensemble":
            cell["judge"] = judge
        if (last.get("purifier") or {}).get("clip_noise") is False:  # a noisy input left unclipped, said so
            cell["clip_noise"] = False
        if (last.get("options") or {}).get("precision", "fp32") != "fp32":  # the attack's gradient passes, said so
            cell["precision"] = last["options"]["precision"]
        if "judgements" in stats:
            cell["judgements"] = stats["judgements"]
        out.append({**cell, **per_image({r["index"]: correct(r) for r in rs})})
    return {"schema": TABLE_SCHEMA, "cells": out + worst_over_attacks(out, base)}


#: The lever table file's schema: cells with their per-image flags (:func:`~art_adp.runs.statistics.per_image`).
TABLE_SCHEMA = "art-adp/levers-table/2"
#: The column of the per-image worst case over every attack measured on an image (the evaluation's rule: an image
#: counts as robust only if no attack broke it).
WORST_CASE = "worst-case"


def worst_over_attacks(cells: Sequence[Mapping], base: str | None = None) -> list[dict]:
    """
    Per (classifier, score model, setting) with two or more attacks judged on the S-ensemble: the images every one
    of those attacks was measured on, correct only where each attack left them correct (adaptive rows: worst of R),
    from the cells' per-image flags (:func:`~art_adp.runs.statistics.flags_of`), kept in the line too. A line of
    another classifier than ``base`` names it, as its cells do.
    """
    groups: dict[tuple, dict[str, dict[int, bool]]] = {}
    unclipped: set[tuple] = set()
    precisions: dict[tuple, set[str]] = {}
    for c in cells:
        if c["attack"] in ("", "clean", WORST_CASE) or c.get("judge", "ensemble") != "ensemble":
            continue
        key = (c.get("classifier", base), c["model"], c["setting"])
        groups.setdefault(key, {})[c["attack"]] = flags_of(c)
        if c.get("clip_noise") is False:
            unclipped.add(key)
        precisions.setdefault(key, set()).add(c.get("precision", "fp32"))
    out = []
    for (clf, model, setting), by in groups.items():
        found = worst_case(by)
        if found is None:
            continue
        cell = {"model": model, "setting": setting, "attack": WORST_CASE, **summary(found[1]), "attacks": sorted(by),
                **per_image(dict(zip(found[0], found[1].tolist())))}  # fmt: skip
        if (clf, model, setting) in unclipped:
            cell["clip_noise"] = False
        if precisions[clf, model, setting] != {"fp32"}:  # its attacks' gradient passes, said so
            cell["precision"] = " and ".join(sorted(precisions[clf, model, setting]))
        out.append({**cell, "classifier": clf} if clf != base else cell)
    return out


def table_markdown(table: dict) -> str:
    """One line per (classifier, score model, setting), one column per attack and judge: accuracy % [95 % interval]
    (n) (:func:`~art_adp.runs.render.accuracy_cell`; worst of R for the adaptive rows; with R > 2, the worst of the
    first 2 after it)."""
    cols = list(dict.fromkeys((c["attack"], c.get("judge", "ensemble")) for c in table["cells"]))
    groups: dict[tuple, dict] = {}
    for c in table["cells"]:
        clf = c.get("classifier", table.get("classifier", "")) if c["model"] != "none" else c["setting"]
        groups.setdefault((clf, c["model"], c["setting"]), {})[(c["attack"], c.get("judge", "ensemble"))] = c

    def cell(c: dict | None) -> str:
        if c is None:
            return ""
        two = c.get("judgements", {}).get("worst of 2")
        return accuracy_cell(c["accuracy"], c["ci95"], c["n"], precision=c.get("precision", "fp32")) + (
            "" if two is None else f"; worst of 2: {100 * two['accuracy']:.1f}")  # fmt: skip

    head = ["classifier", "score model", "setting", *(a if j == "ensemble" else f"{a} ({j})" for a, j in cols)]
    rows = [[*key, *(cell(by.get(col)) for col in cols)] for key, by in groups.items()]
    return "\n".join(markdown_table(head, rows)) + "\n"


ESTIMATE_HELP = "price each defended row left to measure on this device, and stop"

#: The help of ``art-adp levers``' flags, by :class:`LeversConfig` field.
FLAG_HELP = {
    "ensemble_size": "S, purifications averaged", "repeats": "R, judgements of the adaptive rows",
    "attacks": "rows of the preset, or attack registry names (adaptive rows); default: the preset's",
    "classifiers": "undefended classifiers measured (default: the preset's)",
    "purified": "classifiers ADP is put in front of (default: the preset's; none: only the undefended)",
    "judges": "ensemble: S-run ensemble (R times); fixed: fixed noise", "eps": "l_inf radius (preset's)",
    "arch": "architecture of the classifier ADP defends (preset's)", "sigmas": "the sigma grid (preset's)",
    "settings": SETTINGS_HELP,
    "max_iter": "iterations of the adaptive rows (preset's)", "eps_step": "step of the adaptive rows",
    "restarts": "K: adaptive rows with the best iterate, K runs", "estimate_only": ESTIMATE_HELP,
    "keep_examples": "do not keep the adversarial examples (RUN_DIR/examples)", **OPTION_HELP,
    "max_epochs": "cap on the adversarially trained classifiers' epochs (preset's: 100; they stop earlier "
                  "when validation robust accuracy plateaus)",
    "train_precision": "the classifiers' training passes: fp32, or bf16 autocast (validation stays fp32)",
    "seed_scheme": "seeds from --seed by this scheme (default: the run folder's; apart for a new one)",
    **PRECISION_HELP,
}  # fmt: skip


@dataclass(frozen=True)
class LeversConfig:
    """Settings of ``art-adp levers`` (see :func:`run_levers` for each; None: the data set's preset)."""

    models: tuple[str, ...] = ("oracle", "denoiser")
    settings: tuple[str, ...] | None = None
    attacks: tuple[str, ...] | None = None
    classifiers: tuple[str, ...] | None = None
    purified: tuple[str, ...] | None = None
    judges: tuple[str, ...] = ("ensemble",)
    n_examples: int = 1000
    ensemble_size: int = 10
    repeats: int = 10
    eot_samples: int = 5
    eps: float | None = None
    arch: str | None = None
    sigmas: tuple[float, ...] | None = None
    max_iter: int | None = None
    eps_step: float | None = None
    max_epochs: int | None = None
    restarts: int | None = 1
    loss: str = Budget.loss
    eot_target: str = Budget.eot_target
    step_schedule: str = Budget.step_schedule
    keep_examples: bool = True
    seed: int = 0
    estimate_only: bool = False
    train_precision: str = "fp32"
    attack_precision: str = "fp32"
    force_precision: bool = False
    seed_scheme: str | None = None


def levers_command(
    config: LeversConfig,
    *,
    dataset: str = "mnist",
    data_root: str = "",
    denoiser: str | None = None,
    run_dir: str = "runs/levers",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """The paper's row on a data set lever by lever: ADP with the exact-score oracle (KernelScore over the training
    split) and a trained DenoiserUNet (--denoiser, from train-denoiser), at the released schedule, converged
    schedules, the one-step denoise and the σ grid, in front of the data set's classifier or the adversarially
    trained one, under Clf-PGD and adaptive attacks, beside the undefended and adversarially trained classifiers
    (white-box PGD, AutoAttack); the radius, the rows' budgets, the classifiers and the σ grid come from the data
    set's preset, each overridable; resumable, and more images can be added later. See docs/mnist.md and
    docs/fashion_mnist.md (their tables: docs/*_results.md)."""
    from ..data import load_dataset

    levers_spec(dataset)  # a data set without a preset is refused before anything is read
    data = load_dataset(dataset, data_root)
    table = run_levers(data, run_dir, dataset=dataset, denoiser_path=denoiser, **asdict(config), device=device or "cpu",
                       progress=progress)  # fmt: skip
    if not config.estimate_only:
        print(table_markdown(table))
