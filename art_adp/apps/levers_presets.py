"""What a lever table measures, as data: the purification settings (:class:`Setting`, the σ grid), the attack rows
(:class:`Row`), the classifiers and how each is made (:class:`ClassifierRecipe`), and each data set's
:class:`Preset` -- registered as the plans ``levers:<data set>`` (:mod:`art_adp.runs.plans`) -- with the names the
command line takes and the rows' budgets. :mod:`~art_adp.apps.levers` runs them."""

from __future__ import annotations

import argparse
import importlib.util
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..attacks._core import AUTO, JUDGE_DRAWS
from ..attacks.registry import (
    AUTOATTACK,
    BLIND_ATTACK,
    FULL_ATTACK,
    REGISTRY,
    SWEEP_ATTACK,
    Budget,
    recorded,
    registered_name,
)
from ..attacks.apgd_eot import APGDEOT
from ..attacks.selective_eot import SelectiveEOT
from ..attacks.systemic_lowfreq import LowFrequencyVote
from ..runs.plans import PLANS, Plan, budget, plan, plan_names, register
from ..runs.seeds import FIXED_BLOCK
from ..data import DATASETS, DatasetSpec
from .robust_baseline import WHITE_BATCH

__all__ = ["APGD_ATTACK", "APGD_MAX_ITER", "BEHIND", "CIFAR10", "CLASSIFIER_NAMES",
           "ClassifierRecipe", "FASHION_MNIST", "FMNIST_EPS", "JUDGES", "MNIST", "MNIST_EPS", "ONE_STEP",
           "OWN_BUDGETS", "Preset", "ROW_NAMES", "Row", "RowBudgets", "SETTINGS", "SETTINGS_HELP",
           "SETTING_NAMES", "SIGMA", "Setting", "VARIANT", "adaptive_row", "is_setting_name", "levers_datasets",
           "levers_spec", "preset_for", "row_budgets", "row_label", "setting_name", "setting_named",
           "sigma_settings", "table_rows", "with_restarts"]  # fmt: skip


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


#: The ResNet-20 by fast adversarial training's full schedule (FGSM from a random start, SGD one-cycle peaking at
#: 0.2, 15 epochs), kept at its best robust accuracy on 2 % of the training images held out.
_FAST_RESNET20 = ClassifierRecipe("resnet20", adversarial=True, epochs=15, patience=15, batch_size=128,
                                  method="fgsm-rs", lr=0.2, validation=0.02)  # fmt: skip


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
        "adv-resnet20": _FAST_RESNET20,
        # adv-resnet20 fine-tuned adversarially through the DenoiserUNet's one-step denoise, full gradient: fast
        # adversarial training (FGSM from a random start, one draw per step) on a one-cycle schedule peaking at a
        # tenth of adv-resnet20's, kept at its best robust accuracy through the purifier (PGD 20) on 1,000 held-out
        # training images
        "adv-resnet20-denoiser": replace(_FAST_RESNET20, epochs=4, patience=4, lr=0.02, purifier=("denoiser", ONE_STEP),
                                         init="adv-resnet20"),  # fmt: skip
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


def _rows(preset: Preset, attacks: Sequence[str], restarts: int | None) -> list[Row]:
    """The rows ``attacks`` name: the preset's, a registry attack's (at the preset's first adaptive budget with a random
    start) or a variant's, each adaptive one as its :func:`with_restarts` variant of ``restarts`` runs (None: as it
    is).

    :raises ValueError: Naming the unknown rows and the known ones.
    :raises ImportError: For AutoAttack without torchattacks, naming the install."""
    known, default = {r.name: r for r in preset.rows}, _adaptive_default(preset)
    unknown = [a for a in attacks if _row_named(a, known, default) is None]
    if unknown:
        raise ValueError(f"Unknown attack rows {sorted(unknown)}; choose from {list(known)} or {list(REGISTRY)}, or "
                         "an adaptive one followed by -{N}it-r{K}.")  # fmt: skip
    if AUTOATTACK in attacks and importlib.util.find_spec("torchattacks") is None:
        raise ImportError(f"The {AUTOATTACK} row runs torchattacks' AutoAttack: pip install --no-deps "
                          "torchattacks==3.5.1")  # fmt: skip
    rows = [r for r in (_row_named(a, known, default) for a in attacks) if r is not None]
    if restarts is None:
        return rows
    return [with_restarts(r, restarts) if r.adaptive and not r.num_random_init > 1 and not r.check_every else r
            for r in rows]  # fmt: skip


def _adaptive_default(preset: Preset) -> Row:
    """The row a registry attack named in ``attacks`` runs as: the preset's first adaptive budget with a random
    start."""
    return next((r for r in preset.rows if r.adaptive and r.random_start), None) or next(
        r for r in preset.rows if r.adaptive
    )


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


def setting_named(name: str, sigmas: Sequence[float]) -> Setting:
    """The setting of the σ grid ``sigmas`` called ``name``."""
    found = {s.name: s for s in sigma_settings(sigmas)}
    if name not in found:
        raise ValueError(f"Unknown setting {name!r}; choose from {list(found)}.")
    return found[name]


@dataclass(frozen=True)
class RowBudgets:
    """A row's attack budgets in one run (:func:`row_budgets`): ``white`` on an undefended classifier (a white-box row,
    its Clf-PGD examples too); ``ensemble`` through the purification, judged on the S-ensemble, and ``fixed``, judged
    by one frozen draw (an adaptive row; ``fixed`` the clean row's too); ``recorded``, what an adaptive row's records
    carry of ``ensemble`` (:func:`~art_adp.attacks.registry.recorded`)."""

    white: Budget | None = None
    ensemble: Budget | None = None
    fixed: Budget | None = None
    recorded: Mapping[str, Any] = field(default_factory=dict)


def row_budgets(rows: Iterable[Row], eps: float, *, eot_samples: int, ensemble_size: int = JUDGE_DRAWS,
                options: Mapping[str, str] | None = None) -> dict[str, RowBudgets]:  # fmt: skip
    """
    The budgets of the ``rows`` in a run at the radius ``eps`` (a row's ε · ``eps_scale``), by row name, each built
    once by :func:`~art_adp.runs.plans.budget`: a white-box row's at its own steps; an adaptive row's at its own EOT
    draws (else ``eot_samples``), judged on ``ensemble_size`` draws, with the attack ``options`` (loss, EOT target, step
    schedule, precision; None: the :class:`Budget`'s defaults), and what its records carry of it; an adaptive row's
    and the clean row's under the fixed-noise view, at its own EOT draws (else one) with the options' precision only.
    """
    options, out = dict(options or {}), {}
    precision = {"precision": options["precision"]} if "precision" in options else {}  # all the fixed view takes
    for r in rows:
        if r.attack and not r.adaptive:
            out[r.name] = RowBudgets(white=budget(r.attack, eps=eps * r.eps_scale, eps_step=r.eps_step,
                                                  max_iter=r.max_iter, random_start=r.random_start,
                                                  batch_size=WHITE_BATCH))  # fmt: skip
            continue
        row = {"eps": eps * r.eps_scale, "eps_step": r.eps_step or eps, "max_iter": r.max_iter,
               "random_start": r.random_start, "num_random_init": r.num_random_init,
               "check_every": r.check_every}  # fmt: skip
        fixed = budget(r.attack, **row, eot_samples=r.eot_samples or 1, batch_size=FIXED_BLOCK, judge_draws=1,
                       **precision)  # fmt: skip
        ensemble = budget(r.attack, **row, eot_samples=r.eot_samples or eot_samples, batch_size=50,
                          judge_draws=ensemble_size, **options) if r.adaptive else None  # fmt: skip
        out[r.name] = RowBudgets(ensemble=ensemble, fixed=fixed,
                                 recorded=recorded(ensemble, REGISTRY[r.attack]) if ensemble else {})  # fmt: skip
    return out


def table_rows(preset: Preset, measured: Iterable[str]) -> list[dict]:
    """A lever table's rows: the preset's, then of the attacks ``measured`` (in a folder, by any call) that are not the
    preset's, the registry's as adaptive rows at the preset's adaptive budget (``registry_row``) and the variants
    (``variant``); each with its fields, label (:func:`row_label`) and whether it is adaptive."""
    known, default = {r.name: r for r in preset.rows}, _adaptive_default(preset)
    others = [a for a in dict.fromkeys(measured) if a not in known]
    variants = [_row_named(a, known, default) for a in others if a not in REGISTRY]
    return [
        *({**asdict(r), "label": row_label(r, preset.eps), "adaptive": r.adaptive} for r in preset.rows),
        *({**asdict(r), "label": row_label(r, preset.eps), "adaptive": True, "registry_row": True}
          for r in (replace(default, name=a, attack=a) for a in others if a in REGISTRY)),
        *({**asdict(r), "label": row_label(r, preset.eps), "adaptive": True, "variant": True} for r in variants if r),
    ]  # fmt: skip
