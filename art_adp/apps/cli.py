"""``art-adp``: the command line. Argument parsing only; the work happens in the library."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]

CLASSIFIERS = {"digits-cnn": "DigitsCNN", "mlp": "MLP", "cnn": "SmallCNN", "wrn": "WideResNet"}


def _demo(args) -> None:
    from .demo import DemoConfig, run_demo

    names = ("eps", "pgd_steps", "sigma", "runs", "score_iterations", "ngf", "n_examples", "seed")
    config = DemoConfig(**{k: getattr(args, k) for k in names if getattr(args, k) is not None})
    run_demo(args.run_dir, config, progress=not args.quiet, device=args.device)


def _train_score(args) -> None:
    import torch

    from ..data import load_dataset
    from ..runs import distributed
    from ..score import NCSNv2, geometric_sigmas, recommend_sigmas, train_score_model

    device, rank, _ = distributed.setup(args.device)
    data = load_dataset(args.dataset, args.data_root)
    sigma_end = args.sigma_end * (10 if args.augment else 1)  # the paper: sigma_L x10 for DCT/AugMix training
    if args.sigma_begin is None:
        sigmas = recommend_sigmas(data.x_train, sigma_end=sigma_end)
    else:
        sigmas = geometric_sigmas(args.sigma_begin, sigma_end, args.num_sigmas)
    _, c, size, _ = data.x_train.shape
    run_dir = Path(args.run_dir)
    torch.manual_seed(args.seed)  # the initial weights too: the same command gives the same model
    try:
        ema = train_score_model(
            NCSNv2(c, size, ngf=args.ngf),
            data.x_train,
            sigmas,
            args.iterations,
            batch_size=args.batch_size,
            lr=args.lr,
            checkpoint_path=run_dir / "score.safetensors",
            checkpoint_every=args.checkpoint_every,
            seed=args.seed,
            progress=not args.quiet,
            hflip=args.hflip,
            device=device,
            augment=args.augment,
        )
    finally:
        distributed.finish()
    if rank != 0:
        return
    print(
        f"score model: {run_dir / 'score.safetensors'} (step {ema.training_info['step']}, "
        f"{len(sigmas)} sigmas from {float(sigmas[0]):.4g} to {float(sigmas[-1]):.4g})"
    )


def _train_classifier(args) -> None:
    import torch

    from .. import models
    from ..data import load_dataset

    if args.adversarial_training and args.eps is None:
        raise ValueError(
            "--adversarial-training needs --eps, the l_inf radius of the training attack on the [0, 1] "
            "pixel scale (the digits demo attacks at 0.175)"
        )
    attack_args = (args.eps, args.eps_step, args.max_iter, args.ratio)
    if not args.adversarial_training and any(v is not None for v in attack_args):
        raise ValueError("--eps, --eps-step, --max-iter and --ratio apply only with --adversarial-training")
    data = load_dataset(args.dataset, args.data_root)
    _, c, size, _ = data.x_train.shape
    cls = getattr(models, CLASSIFIERS[args.arch])
    torch.manual_seed(args.seed)  # the initial weights too: the same command gives the same model
    model = cls(in_channels=c, image_size=size, nb_classes=data.nb_classes)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.adversarial_training:
        _train_adversarial_classifier(args, model.to(device), data)
        return
    model = models.train_classifier(
        model,
        data.x_train,
        data.y_train,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        progress=not args.quiet,
        device=device,
        x_val=data.x_test,
        y_val=data.y_test,
    )
    path = Path(args.run_dir) / "classifier.safetensors"
    models.save_classifier(model, path)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    (Path(args.run_dir) / "classifier.json").write_text(json.dumps({"test_accuracy": acc, "arch": args.arch}))
    print(f"classifier: {path} (test accuracy {100 * acc:.2f} %)")


def _train_adversarial_classifier(args, model, data) -> None:
    """``train-classifier --adversarial-training``: PGD adversarial training, saved as adv_classifier.safetensors."""
    from .. import models
    from ..models.adversarial import train_adversarial_classifier

    max_iter = 10 if args.max_iter is None else args.max_iter
    ratio = 1.0 if args.ratio is None else args.ratio
    model = train_adversarial_classifier(
        model,
        data.x_train,
        data.y_train,
        eps=args.eps,
        eps_step=args.eps_step,
        max_iter=max_iter,
        epochs=args.epochs,
        batch_size=args.batch_size,
        ratio=ratio,
        seed=args.seed,
        verbose=not args.quiet,
        lr=args.lr,
    )
    eps_step = 2.5 * args.eps / max_iter if args.eps_step is None else args.eps_step  # the function's default
    settings = {
        "eps": args.eps,
        "eps_step": eps_step,
        "max_iter": max_iter,
        "ratio": ratio,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
    }
    path = Path(args.run_dir) / "adv_classifier.safetensors"
    models.save_classifier(model, path, adversarial_training=settings)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test)
    (Path(args.run_dir) / "adv_classifier.json").write_text(
        json.dumps({"test_accuracy": acc, "arch": args.arch, "adversarial_training": settings})
    )
    print(
        f"adversarially trained classifier: {path} (clean test accuracy {100 * acc:.2f} %, "
        f"PGD eps {args.eps:g}, {max_iter} steps of {eps_step:.4g})"
    )


def _load_models(args):
    from ..models import load_classifier
    from ..score import load_score_model

    return load_score_model(args.score), load_classifier(args.classifier)


def _detect(args) -> None:
    from .detect_demo import DetectConfig, run_detect_demo

    names = (
        "eps",
        "pgd_steps",
        "sigma",
        "steps",
        "beta",
        "fpr",
        "runs",
        "eot",
        "full_eot",
        "kappa",
        "n_calibration",
        "n_examples",
        "seed",
    )
    config = DetectConfig(
        **{k: getattr(args, k) for k in names},
        attacks=tuple(args.attacks),
        auc_eps=tuple(args.auc_eps),
        defences=tuple(args.defences),
    )
    score, classifier = _load_models(args)
    run_detect_demo(args.run_dir, score, classifier, config, progress=not args.quiet, device=args.device)


def _certify(args) -> None:
    import torch

    from ..certify import adp_base_classifier
    from .certify_run import run_certify
    from ..data import load_dataset
    from ..runs.records import file_sha256

    score, classifier = _load_models(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    score, classifier = score.to(device), classifier.to(device).eval()
    data = load_dataset(args.dataset, args.data_root)
    x, y = torch.from_numpy(data.x_test[: args.n_examples]).to(device), data.y_test[: args.n_examples]
    device_type = "gpu" if device.type == "cuda" else "cpu"

    def model_for_sigma(sigma):
        return adp_base_classifier(
            classifier,
            score,
            steps=args.steps,
            batch_size=args.batch_size,
            channels_last=device.type == "cpu",
            device_type=device_type,
        )

    results = run_certify(
        args.run_dir,
        model_for_sigma,
        x,
        y,
        sigmas=args.sigmas,
        n0=args.n0,
        n=args.n,
        alpha=args.alpha,
        n_approximate=args.n_approximate,
        radii=args.radii,
        batch_size=args.batch_size,
        seed=args.seed,
        progress=not args.quiet,
        settings={
            "steps": args.steps,
            "score_sha256": file_sha256(args.score),
            "classifier_sha256": file_sha256(args.classifier),
            "dataset": args.dataset,
        },
    )
    print((Path(args.run_dir) / "certify.md").read_text())
    print(
        f"wrote {args.run_dir}/certify.md, certify.png, certify.json and per-input records "
        f"({results['n_examples']} inputs, device {device})"
    )


def _import_ncsnv2(args) -> None:
    from ..score.import_ncsnv2 import import_ncsnv2

    model = import_ncsnv2(args.checkpoint, args.config, ema=not args.raw_weights, output=args.output)
    info, c = model.training_info, model.config
    sigmas = info["sigmas"]
    print(
        f"score model: {args.output} (NCSNv2 ngf={c['ngf']}, {c['in_channels']} x {c['image_size']} x "
        f"{c['image_size']}, {'EMA' if info['weights'] == 'ema' else 'trained (non-EMA)'} weights, step "
        f"{info['step']}, {len(sigmas)} sigmas from {sigmas[0]:.4g} to {sigmas[-1]:.4g})"
    )


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(",") if v)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


SIGMA_SWEEP = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the paper's Table 5
EOT_SWEEP = (1, 3, 5, 10, 15, 30, 50)  # the paper's Table 6


EVAL_FLAGS = (
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
DATASET_EPS = {"digits": 0.175}  # the demo's radius; other datasets: the paper's 8/255


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


def _adversarial_baseline(args, classifier, data, config):
    """Load ``<run-dir>/adv_classifier.safetensors``, or train it with ART's AdversarialTrainerMadryPGD (on the
    classifier's training split, the run's eps and step) and save it there."""
    from ..models import load_classifier, save_classifier

    path = Path(args.run_dir) / "adv_classifier.safetensors"
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
        max_iter=args.adv_max_iter,
        epochs=args.adv_epochs,
        seed=config.seed,
        verbose=not args.quiet,
    )
    save_classifier(model.cpu(), path)
    return model, (
        f"{path} (trained: ART AdversarialTrainerMadryPGD, eps = {config.eps:.4g}, step "
        f"{config.step:.4g}, {args.adv_max_iter} PGD steps, {args.adv_epochs} epochs)"
    )


def _evaluate(args) -> None:
    import dataclasses
    import math

    import torch

    from ..data import load_dataset
    from .evaluation import EvalConfig, evaluate
    from ..runs.records import file_sha256
    from ..models import load_classifier
    from ..preprocessor import ADPPurifier
    from ..score import load_score_model

    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {k: getattr(args, k) for k in EVAL_FLAGS if getattr(args, k) is not None}
    if args.norm is not None:
        overrides["norm"] = math.inf if args.norm == "inf" else 2
    if args.no_sanity:
        overrides["sanity"] = False
    if args.no_fixed_noise:
        overrides["fixed_noise"] = False
    config = EvalConfig.preset(args.preset, **overrides)
    if args.eps is None:  # the dataset's radius: a threat model, not an override of the preset's budgets
        config = dataclasses.replace(config, eps=DATASET_EPS.get(args.dataset, 8 / 255))
    score_path = Path(args.score or "runs/demo/score.safetensors")
    clf_path = Path(args.classifier or "runs/demo/classifier.safetensors")
    for path, what in ((score_path, "--score"), (clf_path, "--classifier")):
        if not path.exists():
            raise ValueError(
                f"{path} not found: train the digits models with `art-adp demo` (they land in runs/demo) "
                f"or pass {what} PATH."
            )
    data = load_dataset(args.dataset, args.data_root)
    n = len(data.x_test) if config.n_examples is None else min(config.n_examples, len(data.x_test))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    score = load_score_model(score_path, "cpu")
    classifier = load_classifier(clf_path, "cpu")
    purifier = ADPPurifier(
        score,
        sigma=args.sigma,
        steps=args.steps,
        batch_size=args.purify_batch_size,
        device_type="gpu" if device == "cuda" else "cpu",
        channels_last=device == "cpu",
    )
    description = {
        "Defence": f"ADP sigma = {args.sigma:g}, T = {args.steps} adaptive steps (lambda = {purifier.lam:g}, "
        f"delta = {purifier.delta:g}, tau = {purifier.tau:g}), S = {config.runs} runs averaged",
        "Data": f"{args.dataset}, first {n} test images",
        "Models": f"score {score_path} ({type(score).__name__}, sha256 {file_sha256(score_path)[:12]}), classifier "
        f"{clf_path} ({type(classifier).__name__}, sha256 {file_sha256(clf_path)[:12]})",
        "Device": f"{device}" + (f", {torch.get_num_threads()} CPU threads" if device == "cpu" else ""),
    }
    baselines = {}
    if args.baseline == "adversarial-training":
        model, where = _adversarial_baseline(args, classifier, data, config)
        baselines["adv. training"] = model
        description["Baseline"] = f"adversarial training, {where}"
    evaluate(
        classifier,
        purifier,
        data.x_test[:n],
        data.y_test[:n],
        config=config,
        run_dir=args.run_dir,
        nb_classes=data.nb_classes,
        description=description,
        progress=not args.quiet,
        device=device,
        baselines=baselines,
        estimate_only=args.estimate_only,
    )


def _corruptions(args) -> None:
    import torch

    from ..data import load_dataset
    from .corruption_table import CorruptionConfig, run_corruptions
    from ..models import load_classifier
    from ..score import load_score_model

    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_dataset(args.dataset, args.data_root)
    config = CorruptionConfig(
        n_examples=args.n_examples, runs=args.runs, steps=args.steps, seed=args.seed, corruption_seed=args.seed
    )
    score_dct, score_augmix = (load_score_model(path) if path else None for path in (args.score_dct, args.score_augmix))
    n = len(data.x_test) if args.n_examples is None else min(args.n_examples, len(data.x_test))
    description = args.description or (
        f"{args.dataset}: first {n} of {len(data.x_test)} test images; "
        f"models trained on its {len(data.x_train)} training images"
    )
    run_corruptions(
        args.run_dir,
        load_classifier(args.classifier),
        load_score_model(args.score),
        data.x_test,
        data.y_test,
        data.x_train,
        config,
        score_dct=score_dct,
        score_augmix=score_augmix,
        description=description,
        cifar10c_root=args.cifar10c_root,
        nb_classes=data.nb_classes,
        progress=not args.quiet,
        device=args.device,
        variants=args.variants,
    )


def _reproduce(args) -> None:
    import dataclasses

    import torch

    from .reproduce import MnistRecipe, reproduce_mnist

    if args.threads:
        torch.set_num_threads(args.threads)
    fields = {f.name for f in dataclasses.fields(MnistRecipe)}
    chosen = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    recipe = MnistRecipe(**chosen)
    reproduce_mnist(
        args.data_root,
        args.run_dir,
        recipe,
        device=args.device,
        progress=not args.quiet,
        stages=tuple(args.stages),
        note=args.note,
    )
    print(f"table: {Path(args.run_dir) / 'table.md'}")


def _recipe_arguments(p) -> None:
    """One option per field of the MNIST recipe (``--n-bpda 100``, ``--budgets 2000,8000`` ...)."""
    import dataclasses

    from .reproduce import MnistRecipe

    for f in dataclasses.fields(MnistRecipe):
        if f.name == "seed":
            continue
        default = f.default
        kind: Callable[[str], Any]
        shown: object
        if isinstance(default, tuple):
            kind = _ints
            shown = ",".join(map(str, default))
        elif f.name.startswith("n_") or isinstance(default, int):
            kind = (lambda t: None if t.lower() == "all" else int(t)) if f.name.startswith("n_") else int
            shown = "all" if default is None else default
        elif isinstance(default, float):
            kind, shown = float, default
        else:
            kind, shown = str, default
        p.add_argument("--" + f.name.replace("_", "-"), type=kind, default=None, help=f"default: {shown}")


def build_parser() -> argparse.ArgumentParser:
    from .demo import DemoConfig

    parser = argparse.ArgumentParser(prog="art-adp", description="ADP adversarial purification for ART.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, run_dir):
        p.add_argument("--run-dir", default=run_dir, help=f"output folder (default: {run_dir})")
        p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default: 0)")
        p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA when available")
        p.add_argument("--quiet", action="store_true", help="no progress bars")

    def dataset(p):
        p.add_argument(
            "--dataset", default="digits", choices=["digits", "mnist", "fashion-mnist", "cifar10", "cifar100"]
        )
        p.add_argument("--data-root", default=None, help="folder with the dataset files (all but digits)")

    p = sub.add_parser("demo", help="train or reuse models on digits, attack with ART PGD, print the table")
    common(p, "runs/demo")
    p.set_defaults(seed=None)
    d = DemoConfig()
    p.add_argument("--eps", type=float, help=f"l_inf radius (default: {d.eps})")
    p.add_argument("--pgd-steps", type=int, help=f"PGD iterations (default: {d.pgd_steps})")
    p.add_argument("--sigma", type=float, help=f"ADP noise level (default: {d.sigma})")
    p.add_argument("--runs", type=int, help=f"S, purification runs averaged (default: {d.runs})")
    p.add_argument("--score-iterations", type=int, help=f"DSM steps (default: {d.score_iterations})")
    p.add_argument("--ngf", type=int, help=f"NCSNv2 width (default: {d.ngf})")
    p.add_argument("--n-examples", type=int, help=f"test digits used, of 360 (default: {d.n_examples})")
    p.set_defaults(func=_demo)

    p = sub.add_parser(
        "train-score",
        help="train an NCSNv2 score network by multi-level DSM",
        description="Train an NCSNv2 score network by multi-level DSM. Data-parallel on N GPUs (or N "
        "CPU processes): torchrun --nproc_per_node=N -m art_adp train-score ... "
        "(--batch-size is per process).",
    )
    common(p, "runs/score")
    dataset(p)
    p.add_argument("--iterations", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ngf", type=int, default=16, help="NCSNv2 width (the paper: 128 for CIFAR)")
    p.add_argument("--sigma-begin", type=float, default=None, help="default: Song & Ermon's Techniques 1-2")
    p.add_argument("--sigma-end", type=float, default=0.01)
    p.add_argument("--num-sigmas", type=int, default=10)
    p.add_argument("--hflip", action="store_true", help="random horizontal flips (CIFAR)")
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument(
        "--augment",
        choices=["dct", "augmix"],
        default=None,
        help="augmented DSM for common corruptions (the paper's DCT / AugMix training); multiplies "
        "--sigma-end by 10 as the paper does",
    )
    p.set_defaults(func=_train_score)

    p = sub.add_parser("train-classifier", help="train one of the paper's classifiers")
    common(p, "runs/classifier")
    dataset(p)
    p.add_argument("--arch", choices=sorted(CLASSIFIERS), default="digits-cnn")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--adversarial-training",
        action="store_true",
        help="l_inf PGD adversarial training (Madry et al.; ART AdversarialTrainer), the baseline defence; "
        "saves adv_classifier.safetensors",
    )
    p.add_argument(
        "--eps",
        type=float,
        default=None,
        help="l_inf radius of the training attack (needed with " "--adversarial-training; the demo's: 0.175)",
    )
    p.add_argument("--eps-step", type=float, default=None, help="PGD step (default: 2.5 eps / max-iter)")
    p.add_argument("--max-iter", type=int, default=None, help="PGD steps per batch (default: 10)")
    p.add_argument("--ratio", type=float, default=None, help="fraction of each batch made adversarial (default: 1)")
    p.set_defaults(func=_train_classifier)

    def trained(p):
        p.add_argument("--score", default="runs/demo/score.safetensors", help="score model (default: the demo's)")
        p.add_argument(
            "--classifier", default="runs/demo/classifier.safetensors", help="classifier (default: the demo's)"
        )

    from .detect_demo import ATTACKS as DETECT_ATTACKS, DEFENCES, DetectConfig

    p = sub.add_parser("detect", help="score-norm detection on digits: ROC AUC, histogram, two-level ADP vs ADP")
    common(p, "runs/detect")
    trained(p)
    dc = DetectConfig()
    p.add_argument("--eps", type=float, default=dc.eps, help=f"l_inf radius (default: {dc.eps})")
    p.add_argument("--pgd-steps", type=int, default=dc.pgd_steps)
    p.add_argument("--sigma", type=float, default=dc.sigma, help="ADP noise level, sigma_high (default: %(default)s)")
    p.add_argument("--steps", type=int, default=dc.steps, help="ADP purification steps T (default: %(default)s)")
    p.add_argument("--beta", type=float, default=dc.beta, help="sigma_low = beta * sigma (default: %(default)s)")
    p.add_argument("--fpr", type=float, default=dc.fpr, help="detector's target false-positive rate")
    p.add_argument("--runs", type=int, default=dc.runs, help="S, purifications averaged when judging")
    p.add_argument("--eot", type=int, default=dc.eot, help="EOT samples of the BPDA attack")
    p.add_argument("--full-eot", type=int, default=dc.full_eot, help="EOT samples of the full-gradient attacks")
    p.add_argument("--kappa", type=float, default=dc.kappa, help="weight of the score-norm term (aware attack)")
    p.add_argument("--n-calibration", type=int, default=dc.n_calibration, help="test digits that set the threshold")
    p.add_argument("--n-examples", type=int, default=dc.n_examples, help="test digits evaluated (after those)")
    p.add_argument(
        "--attacks",
        nargs="*",
        choices=DETECT_ATTACKS,
        default=list(DETECT_ATTACKS),
        help="attacks to run (none: only the detector and the histogram)",
    )
    p.add_argument(
        "--auc-eps",
        type=float,
        nargs="*",
        default=list(dc.auc_eps),
        help="further l_inf radii at which to report the detector's ROC AUC against blind PGD",
    )
    p.add_argument(
        "--defences",
        nargs="+",
        choices=DEFENCES,
        default=list(DEFENCES),
        help="plain ADP and/or detection-driven two-level ADP",
    )
    p.set_defaults(func=_detect)

    p = sub.add_parser("certify", help="randomized-smoothing certification of the ADP-smoothed classifier")
    common(p, "runs/certify")
    trained(p)
    dataset(p)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.12, 0.25, 0.5], help="smoothing noise levels")
    p.add_argument("--n0", type=int, default=100, help="selection samples per input (default: %(default)s)")
    p.add_argument("--n", type=int, default=1000, help="estimation samples per input (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.001, help="failure probability (default: %(default)s)")
    p.add_argument(
        "--n-approximate",
        type=int,
        default=100,
        help="samples of the paper's approximate variant (= n0: reuses the selection draws)",
    )
    p.add_argument("--n-examples", type=int, default=100, help="test inputs certified (default: %(default)s)")
    p.add_argument(
        "--radii", type=float, nargs="+", default=[0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0], help="radii of the table"
    )
    p.add_argument("--steps", type=int, default=10, help="ADP purification steps T")
    p.add_argument("--batch-size", type=int, default=1000, help="noisy samples per forward pass")
    p.set_defaults(func=_certify)

    p = sub.add_parser(
        "corruptions",
        help="accuracy under the 15 common corruptions x 5 severities: undefended, "
        "ADP sigma 0/0.1/0.25, detection, DCT- and AugMix-trained score models",
        description="The ADP paper's common-corruption table (Table 4, appendix Table 8) on any data "
        "set: corrupts the test images once (imagecorruptions, cached in the CIFAR-10-C "
        "layout), then measures every row; resumable (records.jsonl).",
    )
    common(p, "runs/corruptions")
    dataset(p)
    p.add_argument("--classifier", required=True, help="classifier checkpoint")
    p.add_argument("--score", required=True, help="plain DSM score-model checkpoint")
    p.add_argument("--score-dct", help="score model trained with train-score --augment dct (row left out if absent)")
    p.add_argument(
        "--score-augmix", help="score model trained with train-score --augment augmix (row left out if " "absent)"
    )
    p.add_argument("--n-examples", type=int, help="first N test images (default: all)")
    p.add_argument("--runs", type=int, default=2, help="S, purifications averaged where sigma > 0 (default: 2)")
    p.add_argument("--steps", type=int, default=10, help="purification steps T (default: 10)")
    p.add_argument("--cifar10c-root", help="read the real CIFAR-10-C files from this folder instead of corrupting")
    p.add_argument("--description", help="data and split in words, for the table header")
    p.add_argument(
        "--variants",
        type=lambda t: tuple(v.strip() for v in t.split(",") if v.strip()),
        help="measure only these rows, comma-separated (e.g. 'ADP σ=0 + DCT,ADP σ=0 + AugMix')",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_corruptions)

    from .evaluation import ATTACKS, PRESETS

    paper, croce, smoke = PRESETS["paper"], PRESETS["croce"], PRESETS["smoke"]
    p = sub.add_parser(
        "evaluate",
        help="attack the ADP-defended classifier; evaluation card (markdown, JSON, figure), records",
        description="Presets: paper (the default; the paper's Table 3 protocol: BPDA/Joint 40 iterations of eps/4 "
        f"with EOT 15, SPSA {paper.spsa_iterations} steps of {paper.spsa_samples} samples, full-gradient "
        "PGD+EOT, S = 10, R = 3), croce (Croce et al. 2022: full-gradient APGD-CE then APGD-DLR, 100 "
        f"iterations, EOT 200, R = 5), smoke (CI-sized: {smoke.n_examples} examples, "
        f"{smoke.iterations} iterations, EOT {smoke.eot}; not a robustness claim). Every flag below "
        "overrides the preset's value, and the card says so. A run prints its estimated time first "
        "(--estimate-only: only that). Also: python -m art_adp evaluate ..., torchrun "
        "--nproc_per_node=N -m art_adp evaluate ...",
    )
    common(p, "runs/evaluate")
    p.set_defaults(seed=None)
    dataset(p)
    p.add_argument("--preset", choices=sorted(PRESETS), default="paper", help="named budgets (default: paper)")
    p.add_argument("--estimate-only", action="store_true", help="print the estimated time on this device and stop")
    p.add_argument("--score", help="score-model checkpoint (default: runs/demo/score.safetensors)")
    p.add_argument("--classifier", help="classifier checkpoint (default: runs/demo/classifier.safetensors)")
    p.add_argument("--n-examples", type=int, help="first N test examples (default: all; smoke: " f"{smoke.n_examples})")
    p.add_argument(
        "--attacks",
        type=lambda t: tuple(a for a in t.split(",") if a),
        help=f"comma-separated, from {','.join(ATTACKS)} (paper: {','.join(paper.attacks)}; croce: "
        f"{','.join(croce.attacks)})",
    )
    p.add_argument("--sigma", type=float, default=0.25, help="ADP noise level (default: 0.25)")
    p.add_argument("--steps", type=int, default=10, help="purification steps T (default: 10)")
    p.add_argument("--runs", type=int, help=f"S, purifications per judged prediction (paper: {paper.runs})")
    p.add_argument(
        "--repeats", type=int, help=f"R, judgements per example (paper: {paper.repeats}; croce: " f"{croce.repeats})"
    )
    p.add_argument("--norm", choices=["inf", "2"], help="threat model norm (default: inf)")
    p.add_argument("--eps", type=float, help=f"radius (default: 8/255; digits {DATASET_EPS['digits']})")
    p.add_argument("--eps-step", type=float, help="step (default: eps/4, following --eps)")
    p.add_argument("--iterations", type=int, help=f"PGD/BPDA/joint iterations (paper: {paper.iterations})")
    p.add_argument("--eot", type=int, help=f"EOT samples of BPDA, joint and full-gradient PGD (paper: {paper.eot})")
    p.add_argument("--eot-aggregate", choices=["mean", "sign"], help="mean of gradients or the authors' sign vote")
    p.add_argument("--spsa-iterations", type=int, help=f"SPSA steps (paper preset: {paper.spsa_iterations})")
    p.add_argument("--spsa-samples", type=int, help=f"SPSA samples per step (paper: {paper.spsa_samples})")
    p.add_argument("--apgd-iterations", type=int, help=f"APGD iterations per loss (croce: {croce.apgd_iterations})")
    p.add_argument("--apgd-eot", type=int, help=f"APGD EOT samples (croce: {croce.apgd_eot})")
    p.add_argument("--chunk-size", type=int, help="examples per unit of work (resume and sharding granularity)")
    p.add_argument("--batch-size", type=int, help="images per forward pass (examples x EOT copies)")
    p.add_argument("--purify-batch-size", type=int, default=4096, help="images per purifier chunk")
    p.add_argument("--sanity-examples", type=int, help="examples for the sanity attacks")
    p.add_argument("--no-sanity", action="store_true", help="skip the sanity checks (then no masking verdict)")
    p.add_argument("--no-fixed-noise", action="store_true", help="skip the fixed-randomness column")
    p.add_argument("--eps-sweep", type=_floats, help="further eps values for the accuracy-against-eps figure")
    p.add_argument(
        "--sigma-sweep",
        nargs="?",
        const=SIGMA_SWEEP,
        type=_floats,
        help="sigma values, comma-separated (flag alone: the paper's 0.05..0.40)",
    )
    p.add_argument(
        "--eot-sweep",
        nargs="?",
        const=EOT_SWEEP,
        type=_ints,
        help="EOT counts, comma-separated (flag alone: the paper's 1..50)",
    )
    p.add_argument(
        "--baseline",
        choices=["adversarial-training"],
        help="add an adversarially trained classifier (ART AdversarialTrainerMadryPGD, same architecture "
        "and training split), attacked and judged the same way; cached as <run-dir>/"
        "adv_classifier.safetensors",
    )
    p.add_argument("--adv-epochs", type=int, default=20, help="adversarial-training epochs (default: 20)")
    p.add_argument("--adv-max-iter", type=int, default=10, help="adversarial-training PGD steps (default: 10)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_evaluate)

    p = sub.add_parser(
        "import-ncsnv2",
        help="convert a checkpoint of the NCSNv2 reference code to a score model",
        description="Convert a checkpoint_<step>.pth of ermongroup/ncsnv2 (e.g. their published "
        "CIFAR-10 model) into an art-adp score model (safetensors). Read with "
        "torch.load(weights_only=True); EMA weights when present; every name and shape checked.",
    )
    p.add_argument("checkpoint", help="the reference's checkpoint_<step>.pth")
    p.add_argument(
        "--config", required=True, help="its YAML config (configs/cifar10.yml or the log folder's " "config.yml)"
    )
    p.add_argument("-o", "--output", default="runs/cifar10/score.safetensors", help="default: %(default)s")
    p.add_argument("--raw-weights", action="store_true", help="the trained weights instead of their EMA")
    p.set_defaults(func=_import_ncsnv2, run_dir=".")

    p = sub.add_parser(
        "reproduce",
        help="the paper's MNIST row end to end: train or resume the MLP and a score "
        "model, learning curve, attacks, table beside the paper's numbers",
        description="Every stage resumes: re-run the same command to continue. See docs/mnist.md.",
    )
    p.add_argument("benchmark", choices=["mnist"])
    p.add_argument("--data-root", required=True, help="folder with the four MNIST idx(.gz) files")
    p.add_argument("--run-dir", default="runs/reproduce-mnist", help="output folder (default: runs/reproduce-mnist)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA when available")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=None, help="seed of every random draw (default: 0)")
    p.add_argument(
        "--stages",
        nargs="+",
        default=["classifier", "score", "curve", "table", "report"],
        choices=["classifier", "score", "curve", "table", "report"],
        help="default: all, in order",
    )
    p.add_argument("--note", default="", help="a line for the table and the figure (data provenance, machine)")
    _recipe_arguments(p)
    p.set_defaults(func=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"art-adp {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"art-adp {args.command}: interrupted; finished work is saved in {args.run_dir}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
