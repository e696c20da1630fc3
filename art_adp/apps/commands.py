"""What each ``art-adp`` command does: one function per command, each taking one settings dataclass whose defaults are
the command line's (the parser reads them from here, and the library's own defaults from the library:
``purify.DEFAULTS``, the attack registry, ``ADPPurifier.describe()``).

Each function loads what it needs, calls the library or an application (:func:`~art_adp.apps.evaluation.evaluate`,
:func:`~art_adp.apps.demo.run_demo`, :func:`~art_adp.apps.certify_run.run_certify`, ...) and prints one summary.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..purify import DEFAULTS
from ..score.train import train_score_model as _trainer
from .demo import DemoConfig
from .detect_demo import DetectConfig
from .reproduce import MnistRecipe

__all__ = [
    "CLASSIFIERS",
    "DATASETS",
    "DATASET_EPS",
    "Certification",
    "ClassifierTraining",
    "CorruptionTable",
    "Demo",
    "Detection",
    "Evaluation",
    "Import",
    "Reproduction",
    "ScoreTraining",
    "certify",
    "corruptions",
    "demo",
    "detect",
    "evaluate",
    "import_ncsnv2",
    "learning_rate",
    "reproduce",
    "train_classifier",
    "settings",
    "train_score",
    "train_denoiser",
]

CLASSIFIERS = {"digits-cnn": "DigitsCNN", "mlp": "MLP", "cnn": "SmallCNN", "wrn": "WideResNet"}
DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100")
DATASET_EPS = {"digits": 0.175}  # the demo's radius; other datasets: the paper's 8/255
SIGMA_SWEEP = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the paper's Table 5 (evaluate --sigma-sweep)
EOT_SWEEP = (1, 3, 5, 10, 15, 30, 50)  # the paper's Table 6 (evaluate --eot-sweep)
DEMO_SCORE, DEMO_CLASSIFIER = "runs/demo/score.safetensors", "runs/demo/classifier.safetensors"
TRAINER = inspect.signature(_trainer).parameters  # the defaults of the score trainer's levers
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
TRAINING_FLAGS = ("lr", "lr_warmup", "precision", "channels_last", "compile")  # train-score's and reproduce's


def settings(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of the settings dataclass ``cls`` from parsed ``values`` (e.g. ``vars(args)``): every field given
    a value (None: the field's default), nested settings dataclasses filled from the same values, lists as tuples."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            kwargs[f.name] = settings(factory, values)
        elif values.get(f.name) is not None:
            value = values[f.name]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


@dataclass(frozen=True)
class Run:
    """What every command shares: its output folder, device and progress bars."""

    run_dir: str = "runs"
    device: str | None = None
    quiet: bool = False


@dataclass(frozen=True)
class Seeded(Run):
    """A command whose every random draw comes from ``seed``."""

    seed: int = 0


@dataclass(frozen=True)
class Data:
    """A dataset by name (:func:`art_adp.data.load_dataset`) and the folder of its files (all but digits)."""

    dataset: str = "digits"
    data_root: str | None = None


@dataclass(frozen=True)
class Demo(Run):
    run_dir: str = "runs/demo"
    seed: int | None = None
    settings: DemoConfig = field(default_factory=DemoConfig)


def demo(c: Demo) -> None:
    """``art-adp demo``: train or reuse the digits models, attack with ART PGD, print the table."""
    from .demo import run_demo

    run_demo(c.run_dir, c.settings, progress=not c.quiet, device=c.device)


@dataclass(frozen=True)
class Speed:
    """The score trainer's speed levers that leave its model unchanged (to float rounding)."""

    channels_last: bool = TRAINER["channels_last"].default
    compile: bool | str = TRAINER["compile"].default

    def options(self) -> dict[str, Any]:
        return {"channels_last": self.channels_last, "compile": self.compile}


def learning_rate(text: str) -> float | str:
    """``--lr``'s parser: a number, or ``"auto"`` (resolved by the command once the batch is known)."""
    return text if text == "auto" else float(text)


def _resolve_lr(lr: float | str, batch_size: int) -> float:
    """``--lr``: a number, or ``"auto"``: :func:`~art_adp.score.train.large_batch_lr` of the batch."""
    from ..score import large_batch_lr

    return large_batch_lr(batch_size) if lr == "auto" else float(lr)


def _cudnn_autotune(device) -> None:
    """On CUDA, let cuDNN pick the fastest convolution for the (fixed) training shapes."""
    import torch

    if str(device).startswith("cuda"):
        torch.backends.cudnn.benchmark = True


@dataclass(frozen=True)
class DenoiserTraining(Seeded, Data):
    run_dir: str = "runs/denoiser"
    minutes: float = 60.0
    milestone: int = 500
    batch_size: int = 128
    lr: float = 2e-3
    channels: tuple[int, ...] = (32, 64, 128)
    precision: str = "bf16"
    threads: int | None = None


def train_denoiser(c: DenoiserTraining) -> None:
    """Train a DenoiserUNet (a sigma-conditional UNet denoiser with EDM preconditioning; ADP's score at any level
    through EDMScore) for --minutes of training time, measuring its one-step denoising MSE on the test split at
    every milestone; resumes from --run-dir (curve.jsonl, denoiser.safetensors, result.json)."""
    import torch

    from ..data import load_dataset
    from .train_denoiser import train_denoiser as run

    if c.threads is not None:
        torch.set_num_threads(c.threads)
    data = load_dataset(c.dataset, c.data_root)
    result = run(
        data.x_train, data.x_test, c.run_dir, minutes=c.minutes, milestone=c.milestone, batch_size=c.batch_size,
        lr=c.lr, channels=c.channels, seed=c.seed, precision=c.precision, device=c.device or "cpu",
        progress=not c.quiet,
    )  # fmt: skip
    print(json.dumps(result["final"]))


@dataclass(frozen=True)
class ScoreTraining(Seeded, Data, Speed):
    run_dir: str = "runs/score"
    iterations: int = 600
    batch_size: int = 128
    lr: float | str = TRAINER["lr"].default  # or "auto": large_batch_lr(batch_size x processes)
    lr_warmup: int = TRAINER["lr_warmup"].default
    precision: str = TRAINER["precision"].default
    ngf: int = 16
    sigma_begin: float | None = None
    sigma_end: float = 0.01
    num_sigmas: int = 10
    hflip: bool = False
    checkpoint_every: int = 500
    augment: str | None = None


def train_score(c: ScoreTraining) -> None:
    """Train an NCSNv2 score network by multi-level DSM. Data-parallel on N GPUs (or N CPU processes): torchrun
    --nproc_per_node=N -m art_adp train-score ... (--batch-size is per process; --lr auto is large_batch_lr of the
    batch of all processes: the paper's 1e-3 at 128, square-root scaled, best with --lr-warmup ~500 from 4x the
    paper's batch). --precision bf16 runs the forward pass and the loss in bf16 (weights, Adam and EMA stay fp32); a
    resume keeps the checkpoint's precision. On CUDA, cuDNN's autotuner picks the convolutions
    (torch.backends.cudnn.benchmark)."""
    import torch

    from ..data import load_dataset
    from ..runs import distributed
    from ..score import NCSNv2, geometric_sigmas, recommend_sigmas, train_score_model

    device, rank, world = distributed.setup(c.device)
    lr = _resolve_lr(c.lr, c.batch_size * world)  # large_batch_lr counts the batch of all processes
    data = load_dataset(c.dataset, c.data_root)
    sigma_end = c.sigma_end * (10 if c.augment else 1)  # the paper: sigma_L x10 for DCT/AugMix training
    if c.sigma_begin is None:
        sigmas = recommend_sigmas(data.x_train, sigma_end=sigma_end)
    else:
        sigmas = geometric_sigmas(c.sigma_begin, sigma_end, c.num_sigmas)
    _, channels, size, _ = data.x_train.shape
    run_dir = Path(c.run_dir)
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same model
    _cudnn_autotune(device)
    try:
        ema = train_score_model(
            NCSNv2(channels, size, ngf=c.ngf),
            data.x_train,
            sigmas,
            c.iterations,
            batch_size=c.batch_size,
            lr=lr,
            checkpoint_path=run_dir / "score.safetensors",
            checkpoint_every=c.checkpoint_every,
            seed=c.seed,
            progress=not c.quiet,
            hflip=c.hflip,
            device=device,
            augment=c.augment,
            lr_warmup=c.lr_warmup,
            precision=c.precision,
            **c.options(),
        )
    finally:
        distributed.finish()
    if rank != 0:
        return
    print(
        f"score model: {run_dir / 'score.safetensors'} (step {ema.training_info['step']}, "
        f"{len(sigmas)} sigmas from {float(sigmas[0]):.4g} to {float(sigmas[-1]):.4g})"
    )


@dataclass(frozen=True)
class ClassifierTraining(Seeded, Data):
    run_dir: str = "runs/classifier"
    arch: str = "digits-cnn"
    epochs: int = 15
    batch_size: int = 64
    lr: float = 1e-3
    adversarial_training: bool = False
    eps: float | None = None
    eps_step: float | None = None
    max_iter: int | None = None
    ratio: float | None = None


def train_classifier(c: ClassifierTraining) -> None:
    """``art-adp train-classifier``: one of the paper's classifiers, plainly or adversarially trained."""
    import torch

    from .. import models
    from ..data import load_dataset

    if c.adversarial_training and c.eps is None:
        raise ValueError(
            "--adversarial-training needs --eps, the l_inf radius of the training attack on the [0, 1] "
            "pixel scale (the digits demo attacks at 0.175)"
        )
    if not c.adversarial_training and any(v is not None for v in (c.eps, c.eps_step, c.max_iter, c.ratio)):
        raise ValueError("--eps, --eps-step, --max-iter and --ratio apply only with --adversarial-training")
    data = load_dataset(c.dataset, c.data_root)
    _, channels, size, _ = data.x_train.shape
    cls = getattr(models, CLASSIFIERS[c.arch])
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same model
    model = cls(in_channels=channels, image_size=size, nb_classes=data.nb_classes)
    device = c.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if c.eps is not None:  # with --adversarial-training (checked above)
        _train_adversarial_classifier(c, c.eps, model.to(device), data)
        return
    model = models.train_classifier(
        model,
        data.x_train,
        data.y_train,
        epochs=c.epochs,
        batch_size=c.batch_size,
        lr=c.lr,
        seed=c.seed,
        progress=not c.quiet,
        device=device,
        x_val=data.x_test,
        y_val=data.y_test,
    )
    path = Path(c.run_dir) / "classifier.safetensors"
    models.save_classifier(model, path)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    (Path(c.run_dir) / "classifier.json").write_text(json.dumps({"test_accuracy": acc, "arch": c.arch}))
    print(f"classifier: {path} (test accuracy {100 * acc:.2f} %)")


def _train_adversarial_classifier(c: ClassifierTraining, eps: float, model, data) -> None:
    """``train-classifier --adversarial-training``: PGD adversarial training, saved as adv_classifier.safetensors."""
    from .. import models
    from ..models.adversarial import default_eps_step, train_adversarial_classifier

    defaults = inspect.signature(train_adversarial_classifier).parameters
    max_iter = defaults["max_iter"].default if c.max_iter is None else c.max_iter
    ratio = defaults["ratio"].default if c.ratio is None else c.ratio
    eps_step = default_eps_step(eps, max_iter) if c.eps_step is None else c.eps_step
    model = train_adversarial_classifier(
        model,
        data.x_train,
        data.y_train,
        eps=eps,
        eps_step=eps_step,
        max_iter=max_iter,
        epochs=c.epochs,
        batch_size=c.batch_size,
        ratio=ratio,
        seed=c.seed,
        verbose=not c.quiet,
        lr=c.lr,
    )
    settings = {
        "eps": eps,
        "eps_step": eps_step,
        "max_iter": max_iter,
        "ratio": ratio,
        "epochs": c.epochs,
        "batch_size": c.batch_size,
        "lr": c.lr,
        "seed": c.seed,
    }
    path = Path(c.run_dir) / "adv_classifier.safetensors"
    models.save_classifier(model, path, adversarial_training=settings)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test)
    (Path(c.run_dir) / "adv_classifier.json").write_text(
        json.dumps({"test_accuracy": acc, "arch": c.arch, "adversarial_training": settings})
    )
    print(
        f"adversarially trained classifier: {path} (clean test accuracy {100 * acc:.2f} %, "
        f"PGD eps {eps:g}, {max_iter} steps of {eps_step:.4g})"
    )


@dataclass(frozen=True)
class Trained:
    """A trained score model and classifier (default: the digits demo's)."""

    score: str = DEMO_SCORE
    classifier: str = DEMO_CLASSIFIER


def _load_models(c: Trained):
    from ..models import load_classifier
    from ..score import load_score_model

    return load_score_model(c.score), load_classifier(c.classifier)


@dataclass(frozen=True)
class Detection(Seeded, Trained):
    run_dir: str = "runs/detect"
    settings: DetectConfig = field(default_factory=DetectConfig)


def detect(c: Detection) -> None:
    """``art-adp detect``: score-norm detection on digits, two-level ADP against plain ADP."""
    from .detect_demo import run_detect_demo

    score, classifier = _load_models(c)
    run_detect_demo(c.run_dir, score, classifier, c.settings, progress=not c.quiet, device=c.device)


@dataclass(frozen=True)
class Certification(Seeded, Trained, Data):
    run_dir: str = "runs/certify"
    sigmas: tuple[float, ...] = (0.12, 0.25, 0.5)
    n0: int = 100
    n: int = 1000
    alpha: float = 0.001
    n_approximate: int = 100
    n_examples: int = 100
    radii: tuple[float, ...] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
    steps: int = DEFAULTS.steps
    batch_size: int = 1000


def certify(c: Certification) -> None:
    """``art-adp certify``: randomized-smoothing certificates of the ADP-smoothed classifier."""
    import torch

    from ..certify import adp_base_classifier
    from ..data import load_dataset
    from ..runs.records import file_sha256
    from .certify_run import run_certify

    score, classifier = _load_models(c)
    device = torch.device(c.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    score, classifier = score.to(device), classifier.to(device).eval()
    data = load_dataset(c.dataset, c.data_root)
    x, y = torch.from_numpy(data.x_test[: c.n_examples]).to(device), data.y_test[: c.n_examples]
    device_type = "gpu" if device.type == "cuda" else "cpu"

    def model_for_sigma(sigma):
        return adp_base_classifier(
            classifier,
            score,
            steps=c.steps,
            batch_size=c.batch_size,
            channels_last=device.type == "cpu",
            device_type=device_type,
        )

    results = run_certify(
        c.run_dir,
        model_for_sigma,
        x,
        y,
        sigmas=c.sigmas,
        n0=c.n0,
        n=c.n,
        alpha=c.alpha,
        n_approximate=c.n_approximate,
        radii=c.radii,
        batch_size=c.batch_size,
        seed=c.seed,
        progress=not c.quiet,
        settings={
            "steps": c.steps,
            "score_sha256": file_sha256(c.score),
            "classifier_sha256": file_sha256(c.classifier),
            "dataset": c.dataset,
        },
    )
    print((Path(c.run_dir) / "certify.md").read_text())
    print(
        f"wrote {c.run_dir}/certify.md, certify.png, certify.json and per-input records "
        f"({results['n_examples']} inputs, device {device})"
    )


@dataclass(frozen=True)
class Import:
    checkpoint: str = ""
    config: str = ""
    output: str = "runs/cifar10/score.safetensors"
    raw_weights: bool = False


def import_ncsnv2(c: Import) -> None:
    """Convert a checkpoint_<step>.pth of ermongroup/ncsnv2 (e.g. their published CIFAR-10 model) into an art-adp
    score model (safetensors). Read with torch.load(weights_only=True); EMA weights when present; every name and
    shape checked."""
    from ..score.import_ncsnv2 import import_ncsnv2 as convert

    model = convert(c.checkpoint, c.config, ema=not c.raw_weights, output=c.output)
    info, cfg = model.training_info, model.config
    sigmas = info["sigmas"]
    print(
        f"score model: {c.output} (NCSNv2 ngf={cfg['ngf']}, {cfg['in_channels']} x {cfg['image_size']} x "
        f"{cfg['image_size']}, {'EMA' if info['weights'] == 'ema' else 'trained (non-EMA)'} weights, step "
        f"{info['step']}, {len(sigmas)} sigmas from {sigmas[0]:.4g} to {sigmas[-1]:.4g})"
    )


# The EvalConfig fields the evaluate command can set; None: the preset's value.
EVAL_FIELDS = (
    "attacks",
    "eps",
    "eps_step",
    "iterations",
    "eot",
    "eot_aggregate",
    "spsa_iterations",
    "spsa_samples",
    "apgd_iterations",
    "apgd_eot",
    "runs",
    "repeats",
    "seed",
    "chunk_size",
    "batch_size",
    "sanity_examples",
    "sigma_sweep",
    "eot_sweep",
    "eps_sweep",
    "n_examples",
)


@dataclass(frozen=True)
class Evaluation(Run, Data):
    """``art-adp evaluate``: a preset with the EvalConfig fields set here (None: the preset's) and the defence."""

    run_dir: str = "runs/evaluate"
    seed: int | None = None
    preset: str = "paper"
    estimate_only: bool = False
    score: str | None = None
    classifier: str | None = None
    sigma: float = DEFAULTS.sigma
    steps: int = DEFAULTS.steps
    purifier: tuple[str, ...] = ("adp",)
    sampler: str = "ddim"
    purify_batch_size: int = 4096
    norm: str | None = None
    no_sanity: bool = False
    no_fixed_noise: bool = False
    baseline: str | None = None
    adv_epochs: int = 20
    adv_max_iter: int = 10
    threads: int | None = None
    attacks: tuple[str, ...] | None = None
    eps: float | None = None
    eps_step: float | None = None
    iterations: int | None = None
    eot: int | None = None
    eot_aggregate: str | None = None
    spsa_iterations: int | None = None
    spsa_samples: int | None = None
    apgd_iterations: int | None = None
    apgd_eot: int | None = None
    runs: int | None = None
    repeats: int | None = None
    chunk_size: int | None = None
    batch_size: int | None = None
    sanity_examples: int | None = None
    sigma_sweep: tuple[float, ...] | None = None
    eot_sweep: tuple[int, ...] | None = None
    eps_sweep: tuple[float, ...] | None = None
    n_examples: int | None = None
    memory_budget: int | None = None  # MiB (EvalConfig's is in bytes); None: the library's default

    def eval_config(self):
        """The :class:`~art_adp.apps.evaluation.EvalConfig`: the preset, the fields set here, the dataset's ε."""
        from .evaluation import EvalConfig

        overrides: dict[str, Any] = {k: getattr(self, k) for k in EVAL_FIELDS if getattr(self, k) is not None}
        if self.norm is not None:
            overrides["norm"] = math.inf if self.norm == "inf" else 2
        if self.no_sanity:
            overrides["sanity"] = False
        if self.no_fixed_noise:
            overrides["fixed_noise"] = False
        if self.memory_budget is not None:
            if isinstance(self.memory_budget, bool) or not self.memory_budget >= 1:
                raise ValueError(f"--memory-budget must be a positive number of MiB, got {self.memory_budget!r}.")
            overrides["memory_budget"] = int(self.memory_budget) * 2**20
        config = EvalConfig.preset(self.preset, **overrides)
        if self.eps is None:  # the dataset's radius: a threat model, not an override of the preset's budgets
            config = dataclasses.replace(config, eps=DATASET_EPS.get(self.dataset, 8 / 255))
        return config


def _fresh_copy(model, seed: int):
    """A re-initialised copy of ``model`` (same architecture and constructor arguments)."""
    import copy

    import torch

    fresh = copy.deepcopy(model)
    torch.manual_seed(seed)
    for module in fresh.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return fresh


def _adversarial_baseline(c: Evaluation, classifier, data, config):
    """Load ``<run-dir>/adv_classifier.safetensors``, or train it with ART's AdversarialTrainer and PGD (on the
    classifier's training split, the run's eps and step) and save it there."""
    from ..models import load_classifier, save_classifier

    path = Path(c.run_dir) / "adv_classifier.safetensors"
    if path.exists():
        return load_classifier(path, "cpu"), f"{path} (loaded)"
    try:
        from ..models.adversarial import train_adversarial_classifier
    except ImportError as err:
        raise ValueError(
            f"--baseline adversarial-training needs art_adp.models.adversarial ({err}); or put a "
            f"trained classifier at {path}."
        ) from err
    model = train_adversarial_classifier(
        _fresh_copy(classifier, config.seed),
        data.x_train,
        data.y_train,
        eps=config.eps,
        eps_step=config.step,
        max_iter=c.adv_max_iter,
        epochs=c.adv_epochs,
        seed=config.seed,
        verbose=not c.quiet,
    )
    save_classifier(model.cpu(), path)
    return model, (
        f"{path} (trained: ART AdversarialTrainer with PGD, eps = {config.eps:.4g}, step "
        f"{config.step:.4g}, {c.adv_max_iter} PGD steps, {c.adv_epochs} epochs)"
    )


def _purifier(family: str, score, c: Evaluation, device: str):
    """The purifier of ``family`` (``adp``, ``reverse-diffusion``, ``denoised-smoothing``) with the command's σ and
    steps; a σ-conditional denoiser (``DenoiserUNet``) serves all three, ADP through ``EDMScore`` at σ."""
    from ..diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
    from ..preprocessor import ADPPurifier
    from ..score import EDMScore

    common = {"batch_size": c.purify_batch_size, "device_type": "gpu" if device == "cuda" else "cpu"}
    conditional = getattr(score, "sigma_conditional", False)
    if family == "adp":
        model = EDMScore(score, sigma=c.sigma, data_range=(0.0, 1.0)) if conditional else score
        return ADPPurifier(model, sigma=c.sigma, steps=c.steps, channels_last=device == "cpu", **common)
    if not conditional:
        raise ValueError(
            f"--purifier {family} needs a sigma-conditional denoiser as --score (train one with `art-adp "
            f"train-denoiser`); {type(score).__name__} is a score model at one level, for adp only."
        )
    if family == "reverse-diffusion":
        return ReverseDiffusionPurifier(score, sigma=c.sigma, steps=c.steps, sampler=c.sampler, **common)
    return DenoisedSmoothingPurifier(score, sigma=c.sigma, **common)


def evaluate(c: Evaluation) -> None:
    """``art-adp evaluate``: attack the classifier defended by each purifier family; the evaluation card of each and,
    for several, their side-by-side comparison (``comparison.md``/``.json`` in the run folder)."""
    import time

    import torch

    from ..data import load_dataset
    from ..models import load_classifier
    from ..runs.provenance import provenance
    from ..runs.records import file_sha256
    from ..score import load_score_model
    from .evaluation import compare
    from .evaluation import evaluate as run_evaluation

    started = time.perf_counter()
    families = tuple(c.purifier)
    unknown = [f for f in families if f not in compare.FAMILIES]
    if not families or unknown or len(set(families)) < len(families):
        raise ValueError(
            f"--purifier must name distinct families from {', '.join(compare.FAMILIES)}, got {','.join(families)}."
        )
    if c.threads:
        torch.set_num_threads(c.threads)
    config = c.eval_config()
    score_path, clf_path = Path(c.score or DEMO_SCORE), Path(c.classifier or DEMO_CLASSIFIER)
    for path, what in ((score_path, "--score"), (clf_path, "--classifier")):
        if not path.exists():
            raise ValueError(
                f"{path} not found: train the digits models with `art-adp demo` (they land in runs/demo) "
                f"or pass {what} PATH."
            )
    data = load_dataset(c.dataset, c.data_root)
    n = len(data.x_test) if config.n_examples is None else min(config.n_examples, len(data.x_test))
    device = c.device or ("cuda" if torch.cuda.is_available() else "cpu")
    score = load_score_model(score_path, "cpu")
    classifier = load_classifier(clf_path, "cpu")
    purifiers = {family: _purifier(family, score, c, device) for family in families}
    description = {
        "Data": f"{c.dataset}, first {n} test images",
        "Models": f"score {score_path} ({type(score).__name__}, sha256 {file_sha256(score_path)[:12]}), classifier "
        f"{clf_path} ({type(classifier).__name__}, sha256 {file_sha256(clf_path)[:12]})",
        "Device": f"{device}" + (f", {torch.get_num_threads()} CPU threads" if device == "cpu" else ""),
    }
    baselines = {}
    if c.baseline == "adversarial-training":
        model, where = _adversarial_baseline(c, classifier, data, config)
        baselines["adv. training"] = model
        description["Baseline"] = f"adversarial training, {where}"
    cards = {}
    for family, purifier in purifiers.items():
        cards[family] = run_evaluation(
            classifier,
            purifier,
            data.x_test[:n],
            data.y_test[:n],
            config=config,
            run_dir=c.run_dir if len(families) == 1 else Path(c.run_dir) / family,
            nb_classes=data.nb_classes,
            description={"Defence": f"{purifier.describe()}, S = {config.runs} runs averaged", **description},
            progress=not c.quiet,
            device=device,
            baselines=baselines,
            estimate_only=c.estimate_only,
        )
    if len(families) > 1 and not c.estimate_only and all(card is not None for card in cards.values()):
        result = compare.compare(cards)
        result["provenance"] = provenance(
            wall_time_s=time.perf_counter() - started,
            device=device,
            models={"classifier": clf_path, "score": score_path},
        )
        compare.write(result, c.run_dir)
        if not c.quiet:
            print(compare.markdown(result))


@dataclass(frozen=True)
class CorruptionTable(Seeded, Data):
    run_dir: str = "runs/corruptions"
    classifier: str = ""
    score: str = ""
    score_dct: str | None = None
    score_augmix: str | None = None
    n_examples: int | None = None
    runs: int = 2
    steps: int = DEFAULTS.steps
    cifar10c_root: str | None = None
    description: str | None = None
    variants: tuple[str, ...] | None = None
    threads: int | None = None


def corruptions(c: CorruptionTable) -> None:
    """The ADP paper's common-corruption table (Table 4, appendix Table 8) on any data set: corrupts the test images
    once (imagecorruptions, cached in the CIFAR-10-C layout), then measures every row; resumable (records.jsonl)."""
    import torch

    from ..data import load_dataset
    from ..models import load_classifier
    from ..score import load_score_model
    from .corruption_table import CorruptionConfig, run_corruptions

    if c.threads:
        torch.set_num_threads(c.threads)
    data = load_dataset(c.dataset, c.data_root)
    config = CorruptionConfig(n_examples=c.n_examples, runs=c.runs, steps=c.steps, seed=c.seed, corruption_seed=c.seed)
    score_dct, score_augmix = (load_score_model(path) if path else None for path in (c.score_dct, c.score_augmix))
    n = len(data.x_test) if c.n_examples is None else min(c.n_examples, len(data.x_test))
    description = c.description or (
        f"{c.dataset}: first {n} of {len(data.x_test)} test images; "
        f"models trained on its {len(data.x_train)} training images"
    )
    run_corruptions(
        c.run_dir,
        load_classifier(c.classifier),
        load_score_model(c.score),
        data.x_test,
        data.y_test,
        data.x_train,
        config,
        score_dct=score_dct,
        score_augmix=score_augmix,
        description=description,
        cifar10c_root=c.cifar10c_root,
        nb_classes=data.nb_classes,
        progress=not c.quiet,
        device=c.device,
        variants=c.variants,
    )


STAGES = ("classifier", "score", "curve", "table", "report")


def recipe_options() -> list[tuple[str, Callable[[str], Any], object]]:
    """One command-line option per field of :class:`MnistRecipe` but the seed and the score trainer's levers (those
    of :data:`TRAINING_FLAGS`, which the command line adds as for train-score): (flag, parser, shown default)."""
    out = []
    for f in dataclasses.fields(MnistRecipe):
        default, shown = f.default, f.default
        kind: Callable[[str], Any] | None = None
        if isinstance(default, tuple):
            kind, shown = (lambda t: tuple(int(v) for v in t.split(",") if v)), ",".join(map(str, default))
        elif f.name.startswith("n_"):
            kind, shown = (lambda t: None if t.lower() == "all" else int(t)), "all" if default is None else default
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            kind = type(default)
        if f.name != "seed" and f.name not in TRAINING_FLAGS:
            out.append(("--" + f.name.replace("_", "-"), kind or str, shown))
    return out


@dataclass(frozen=True)
class Reproduction(Run, Speed):
    benchmark: str = "mnist"
    data_root: str = ""
    run_dir: str = "runs/reproduce-mnist"
    seed: int | None = None
    threads: int | None = None
    stages: tuple[str, ...] = STAGES
    note: str = ""
    recipe: MnistRecipe = field(default_factory=MnistRecipe)


def reproduce(c: Reproduction) -> None:
    """Every stage resumes: re-run the same command to continue. See docs/mnist.md. --lr (auto: large_batch_lr of
    --batch-size), --lr-warmup and --precision belong to the recipe (a resume must keep them); --channels-last and
    --compile only change the speed, and on CUDA cuDNN's autotuner picks the convolutions."""
    import torch

    from .reproduce import reproduce_mnist

    if c.threads:
        torch.set_num_threads(c.threads)
    recipe = c.recipe if c.seed is None else dataclasses.replace(c.recipe, seed=c.seed)
    recipe = dataclasses.replace(recipe, lr=_resolve_lr(recipe.lr, recipe.batch_size))  # recipe.json: the number
    _cudnn_autotune(c.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    reproduce_mnist(
        c.data_root,
        c.run_dir,
        recipe,
        device=c.device,
        progress=not c.quiet,
        stages=tuple(c.stages),
        note=c.note,
        train_options=c.options(),
    )
    print(f"table: {Path(c.run_dir) / 'table.md'}")
