"""``art-adp``: the command line. Argument parsing only; the work happens in the library."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main"]

CLASSIFIERS = {"digits-cnn": "DigitsCNN", "mlp": "MLP", "cnn": "SmallCNN", "wrn": "WideResNet"}


def _demo(args) -> None:
    from .demo import DemoConfig, run_demo

    names = ("eps", "pgd_steps", "sigma", "runs", "score_iterations", "ngf", "n_examples", "seed")
    config = DemoConfig(**{k: getattr(args, k) for k in names if getattr(args, k) is not None})
    run_demo(args.run_dir, config, progress=not args.quiet, device=args.device)


def _distributed_device(requested: str | None) -> tuple[str, int]:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1): join the process group (NCCL on GPUs, gloo on CPU) and return
    this rank's device and rank; otherwise the requested device (default: CUDA when available) and rank 0."""
    import os

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and requested != "cpu"
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return requested or ("cuda" if cuda else "cpu"), 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return (f"cuda:{local_rank}" if cuda else "cpu"), dist.get_rank()


def _train_score(args) -> None:
    import torch
    import torch.distributed as dist

    from .data import load_dataset
    from .score import NCSNv2, geometric_sigmas, recommend_sigmas, train_score_model

    device, rank = _distributed_device(args.device)
    data = load_dataset(args.dataset, args.data_root)
    if args.sigma_begin is None:
        sigmas = recommend_sigmas(data.x_train, sigma_end=args.sigma_end)
    else:
        sigmas = geometric_sigmas(args.sigma_begin, args.sigma_end, args.num_sigmas)
    _, c, size, _ = data.x_train.shape
    run_dir = Path(args.run_dir)
    torch.manual_seed(args.seed)  # the initial weights too: the same command gives the same model
    try:
        ema = train_score_model(NCSNv2(c, size, ngf=args.ngf), data.x_train, sigmas, args.iterations,
                                batch_size=args.batch_size, lr=args.lr, checkpoint_path=run_dir / "score.safetensors",
                                checkpoint_every=args.checkpoint_every, seed=args.seed, progress=not args.quiet,
                                hflip=args.hflip, device=device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank != 0:
        return
    print(f"score model: {run_dir / 'score.safetensors'} (step {ema.training_info['step']}, "
          f"{len(sigmas)} sigmas from {float(sigmas[0]):.4g} to {float(sigmas[-1]):.4g})")


def _train_classifier(args) -> None:
    import torch

    from . import models
    from .data import load_dataset

    data = load_dataset(args.dataset, args.data_root)
    _, c, size, _ = data.x_train.shape
    cls = getattr(models, CLASSIFIERS[args.arch])
    torch.manual_seed(args.seed)  # the initial weights too: the same command gives the same model
    if args.arch == "digits-cnn":
        model = cls(data.nb_classes)
    elif args.arch == "wrn":
        model = cls(num_classes=data.nb_classes, in_channels=c)
    else:
        model = cls(c, size, data.nb_classes)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = models.train_classifier(model, data.x_train, data.y_train, epochs=args.epochs, batch_size=args.batch_size,
                                    lr=args.lr, seed=args.seed, progress=not args.quiet, device=device,
                                    x_val=data.x_test, y_val=data.y_test)
    path = Path(args.run_dir) / "classifier.safetensors"
    models.save_classifier(model, path)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    (Path(args.run_dir) / "classifier.json").write_text(json.dumps({"test_accuracy": acc, "arch": args.arch}))
    print(f"classifier: {path} (test accuracy {100 * acc:.2f} %)")


def _load_models(args):
    from .models import load_classifier
    from .score import load_score_model

    return load_score_model(args.score), load_classifier(args.classifier)


def _detect(args) -> None:
    from .detect_demo import DetectConfig, run_detect_demo

    names = ("eps", "pgd_steps", "sigma", "steps", "beta", "fpr", "runs", "eot", "full_eot", "kappa", "n_calibration",
             "n_examples", "seed")
    config = DetectConfig(**{k: getattr(args, k) for k in names}, attacks=tuple(args.attacks),
                          auc_eps=tuple(args.auc_eps), defences=tuple(args.defences))
    score, classifier = _load_models(args)
    run_detect_demo(args.run_dir, score, classifier, config, progress=not args.quiet, device=args.device)


def _certify(args) -> None:
    import torch

    from .certify import adp_base_classifier, run_certify
    from .data import load_dataset

    score, classifier = _load_models(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    score, classifier = score.to(device), classifier.to(device).eval()
    data = load_dataset(args.dataset, args.data_root)
    x, y = torch.from_numpy(data.x_test[: args.n_examples]).to(device), data.y_test[: args.n_examples]
    device_type = "gpu" if device.type == "cuda" else "cpu"

    def model_for_sigma(sigma):
        return adp_base_classifier(classifier, score, steps=args.steps, batch_size=args.batch_size,
                                   channels_last=device.type == "cpu", device_type=device_type)

    results = run_certify(args.run_dir, model_for_sigma, x, y, sigmas=args.sigmas, n0=args.n0, n=args.n,
                          alpha=args.alpha, n_approximate=args.n_approximate, radii=args.radii,
                          batch_size=args.batch_size, seed=args.seed, progress=not args.quiet)
    print((Path(args.run_dir) / "certify.md").read_text())
    print(f"wrote {args.run_dir}/certify.md, certify.png, certify.json and per-input records "
          f"({results['n_examples']} inputs, device {device})")
def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(",") if v)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


SIGMA_SWEEP = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the paper's Table 5
EOT_SWEEP = (1, 3, 5, 10, 15, 30, 50)  # the paper's Table 6


def _evaluate(args) -> None:
    import dataclasses
    import math

    import torch

    from .data import load_dataset
    from .evaluation import DIGITS, PAPER, evaluate
    from .models import load_classifier
    from .preprocessor import ADPPurifier
    from .score import load_score_model

    if args.threads:
        torch.set_num_threads(args.threads)
    base = DIGITS if args.dataset == "digits" else PAPER
    fields = {"attacks": args.attacks, "eps": args.eps, "eps_step": args.eps_step, "iterations": args.iterations,
              "eot": args.eot, "eot_aggregate": args.eot_aggregate, "spsa_iterations": args.spsa_iterations,
              "spsa_samples": args.spsa_samples, "apgd_iterations": args.apgd_iterations, "apgd_eot": args.apgd_eot,
              "runs": args.runs, "repeats": args.repeats, "seed": args.seed, "chunk_size": args.chunk_size,
              "batch_size": args.batch_size, "sanity_examples": args.sanity_examples,
              "sigma_sweep": args.sigma_sweep, "eot_sweep": args.eot_sweep}
    fields = {k: v for k, v in fields.items() if v is not None}
    if args.norm is not None:
        fields["norm"] = math.inf if args.norm == "inf" else 2
    if args.no_sanity:
        fields["sanity"] = False
    config = dataclasses.replace(base, **fields)
    score_path = Path(args.score or "runs/demo/score.safetensors")
    clf_path = Path(args.classifier or "runs/demo/classifier.safetensors")
    for path, what in ((score_path, "--score"), (clf_path, "--classifier")):
        if not path.exists():
            raise ValueError(f"{path} not found: train the digits models with `art-adp demo` (they land in runs/demo) "
                             f"or pass {what} PATH.")
    data = load_dataset(args.dataset, args.data_root)
    n = len(data.x_test) if args.n_examples is None else min(args.n_examples, len(data.x_test))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    score = load_score_model(score_path, "cpu")
    classifier = load_classifier(clf_path, "cpu")
    purifier = ADPPurifier(score, sigma=args.sigma, steps=args.steps, batch_size=args.purify_batch_size,
                           device_type="gpu" if device == "cuda" else "cpu", channels_last=device == "cpu")
    description = {
        "Defence": f"ADP sigma = {args.sigma:g}, T = {args.steps} adaptive steps (lambda = 0.05, delta = 1e-3, "
                   f"tau = 1e-3), S = {config.runs} runs averaged",
        "Data": f"{args.dataset}, {n} test images",
        "Models": f"score {score_path} ({type(score).__name__}), classifier {clf_path} ({type(classifier).__name__})",
    }
    evaluate(classifier, purifier, data.x_test[:n], data.y_test[:n], config=config, run_dir=args.run_dir,
             nb_classes=data.nb_classes, description=description, progress=not args.quiet, device=device)


def _reproduce(args) -> None:
    import dataclasses

    import torch

    from .experiments.reproduce import MnistRecipe, reproduce_mnist

    if args.threads:
        torch.set_num_threads(args.threads)
    fields = {f.name for f in dataclasses.fields(MnistRecipe)}
    chosen = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    recipe = MnistRecipe(**chosen)
    reproduce_mnist(args.data_root, args.run_dir, recipe, device=args.device, progress=not args.quiet,
                    stages=tuple(args.stages), note=args.note)
    print(f"table: {Path(args.run_dir) / 'table.md'}")


def _recipe_arguments(p) -> None:
    """One option per field of the MNIST recipe (``--n-bpda 100``, ``--budgets 2000,8000`` ...)."""
    import dataclasses

    from .experiments.reproduce import MnistRecipe

    for f in dataclasses.fields(MnistRecipe):
        if f.name == "seed":
            continue
        default = f.default
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
        p.add_argument("--dataset", default="digits", choices=["digits", "mnist", "fashion-mnist", "cifar10", "cifar100"])
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

    p = sub.add_parser("train-score", help="train an NCSNv2 score network by multi-level DSM",
                       description="Train an NCSNv2 score network by multi-level DSM. Data-parallel on N GPUs (or N "
                       "CPU processes): torchrun --nproc_per_node=N -m art_adp.cli train-score ... "
                       "(--batch-size is per process).")
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
    p.set_defaults(func=_train_score)

    p = sub.add_parser("train-classifier", help="train one of the paper's classifiers")
    common(p, "runs/classifier")
    dataset(p)
    p.add_argument("--arch", choices=sorted(CLASSIFIERS), default="digits-cnn")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.set_defaults(func=_train_classifier)

    def trained(p):
        p.add_argument("--score", default="runs/demo/score.safetensors", help="score model (default: the demo's)")
        p.add_argument("--classifier", default="runs/demo/classifier.safetensors",
                       help="classifier (default: the demo's)")

    from .detect_demo import ATTACKS as DETECT_ATTACKS, DEFENCES, DetectConfig

    p = sub.add_parser("detect", help="score-norm detection on digits: ROC AUC, histogram, two-level ADP vs ADP")
    common(p, "runs/detect")
    trained(p)
    d = DetectConfig()
    p.add_argument("--eps", type=float, default=d.eps, help=f"l_inf radius (default: {d.eps})")
    p.add_argument("--pgd-steps", type=int, default=d.pgd_steps)
    p.add_argument("--sigma", type=float, default=d.sigma, help="ADP noise level, sigma_high (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="ADP purification steps T (default: %(default)s)")
    p.add_argument("--beta", type=float, default=d.beta, help="sigma_low = beta * sigma (default: %(default)s)")
    p.add_argument("--fpr", type=float, default=d.fpr, help="detector's target false-positive rate")
    p.add_argument("--runs", type=int, default=d.runs, help="S, purifications averaged when judging")
    p.add_argument("--eot", type=int, default=d.eot, help="EOT samples of the BPDA attack")
    p.add_argument("--full-eot", type=int, default=d.full_eot, help="EOT samples of the full-gradient attacks")
    p.add_argument("--kappa", type=float, default=d.kappa, help="weight of the score-norm term (aware attack)")
    p.add_argument("--n-calibration", type=int, default=d.n_calibration, help="test digits that set the threshold")
    p.add_argument("--n-examples", type=int, default=d.n_examples, help="test digits evaluated (after those)")
    p.add_argument("--attacks", nargs="*", choices=DETECT_ATTACKS, default=list(DETECT_ATTACKS),
                   help="attacks to run (none: only the detector and the histogram)")
    p.add_argument("--auc-eps", type=float, nargs="*", default=list(d.auc_eps),
                   help="further l_inf radii at which to report the detector's ROC AUC against blind PGD")
    p.add_argument("--defences", nargs="+", choices=DEFENCES, default=list(DEFENCES),
                   help="plain ADP and/or detection-driven two-level ADP")
    p.set_defaults(func=_detect)

    p = sub.add_parser("certify", help="randomized-smoothing certification of the ADP-smoothed classifier")
    common(p, "runs/certify")
    trained(p)
    dataset(p)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.12, 0.25, 0.5], help="smoothing noise levels")
    p.add_argument("--n0", type=int, default=100, help="selection samples per input (default: %(default)s)")
    p.add_argument("--n", type=int, default=1000, help="estimation samples per input (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.001, help="failure probability (default: %(default)s)")
    p.add_argument("--n-approximate", type=int, default=100,
                   help="samples of the paper's approximate variant (= n0: reuses the selection draws)")
    p.add_argument("--n-examples", type=int, default=100, help="test inputs certified (default: %(default)s)")
    p.add_argument("--radii", type=float, nargs="+", default=[0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0],
                   help="radii of the table")
    p.add_argument("--steps", type=int, default=10, help="ADP purification steps T")
    p.add_argument("--batch-size", type=int, default=1000, help="noisy samples per forward pass")
    p.set_defaults(func=_certify)

    from .evaluation import ATTACKS, DIGITS, PAPER

    p = sub.add_parser("evaluate", help="attack the ADP-defended classifier with every attack; table, JSON, records",
                       description="Defaults: the paper's counts, or for --dataset digits the reduced counts that "
                                   f"fit 10 minutes on 2 CPU cores ({DIGITS.note}) Also: python -m art_adp.evaluate "
                                   "..., torchrun --nproc_per_node=N -m art_adp.evaluate ...")
    common(p, "runs/evaluate")
    dataset(p)
    p.add_argument("--score", help="score-model checkpoint (default: runs/demo/score.safetensors)")
    p.add_argument("--classifier", help="classifier checkpoint (default: runs/demo/classifier.safetensors)")
    p.add_argument("--n-examples", type=int, help="first N test examples (default: all)")
    p.add_argument("--attacks", type=lambda t: tuple(a for a in t.split(",") if a),
                   help=f"comma-separated, from {','.join(ATTACKS)} (default: all)")
    p.add_argument("--sigma", type=float, default=0.25, help="ADP noise level (default: 0.25)")
    p.add_argument("--steps", type=int, default=10, help="purification steps T (default: 10)")
    p.add_argument("--runs", type=int, help=f"S, purifications per judged prediction (default: {PAPER.runs})")
    p.add_argument("--repeats", type=int, help=f"R, judgements per example (default: {PAPER.repeats}; digits "
                                               f"{DIGITS.repeats})")
    p.add_argument("--norm", choices=["inf", "2"], help="threat model norm (default: inf)")
    p.add_argument("--eps", type=float, help=f"radius (default: 8/255; digits {DIGITS.eps})")
    p.add_argument("--eps-step", type=float, help="step (default: eps/4)")
    p.add_argument("--iterations", type=int, help="PGD/BPDA/joint iterations")
    p.add_argument("--eot", type=int, help="EOT samples of BPDA, joint and full-gradient PGD")
    p.add_argument("--eot-aggregate", choices=["mean", "sign"], help="mean of gradients or the authors' sign vote")
    p.add_argument("--spsa-iterations", type=int)
    p.add_argument("--spsa-samples", type=int, help="SPSA samples per step (paper: 1280)")
    p.add_argument("--apgd-iterations", type=int)
    p.add_argument("--apgd-eot", type=int, help="APGD EOT samples (Croce et al.: 200)")
    p.add_argument("--chunk-size", type=int, help="examples per unit of work (resume and sharding granularity)")
    p.add_argument("--batch-size", type=int, help="images per forward pass (examples x EOT copies)")
    p.add_argument("--purify-batch-size", type=int, default=4096, help="images per purifier chunk")
    p.add_argument("--sanity-examples", type=int, help="examples for the sanity attacks")
    p.add_argument("--no-sanity", action="store_true", help="skip the sanity attacks")
    p.add_argument("--sigma-sweep", nargs="?", const=SIGMA_SWEEP, type=_floats,
                   help="sigma values, comma-separated (flag alone: the paper's 0.05..0.40)")
    p.add_argument("--eot-sweep", nargs="?", const=EOT_SWEEP, type=_ints,
                   help="EOT counts, comma-separated (flag alone: the paper's 1..50)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_evaluate)

    p = sub.add_parser("reproduce", help="the paper's MNIST row end to end: train or resume the MLP and a score "
                                         "model, learning curve, attacks, table beside the paper's numbers",
                       description="Every stage resumes: re-run the same command to continue. See docs/mnist.md.")
    p.add_argument("benchmark", choices=["mnist"])
    p.add_argument("--data-root", required=True, help="folder with the four MNIST idx(.gz) files")
    p.add_argument("--run-dir", default="runs/reproduce-mnist", help="output folder (default: runs/reproduce-mnist)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA when available")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=None, help="seed of every random draw (default: 0)")
    p.add_argument("--stages", nargs="+", default=["classifier", "score", "curve", "table", "report"],
                   choices=["classifier", "score", "curve", "table", "report"], help="default: all, in order")
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
