"""``art-adp``: the command line. Argument parsing only: each command is one call into :mod:`art_adp.apps.commands`
with its settings dataclass, whose defaults (and the library's: ``purify.DEFAULTS``, the attack registry) the flags
show."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..attacks import registry
from . import commands as cmd

__all__ = ["build_parser", "main"]


def _split(kind: Callable[[str], Any]) -> Callable[[str], tuple]:
    """A parser of comma-separated values: ``"1,2,"`` -> ``(1, 2)``."""
    return lambda text: tuple(kind(v.strip()) for v in text.split(",") if v.strip())


def _training(p, d) -> None:
    """The score trainer's levers (train-score, reproduce): ``d`` holds their defaults, the library's."""
    add = p.add_argument
    add("--lr", type=cmd.learning_rate, default=d.lr, help="Adam's; auto: large_batch_lr(batch) (default: %(default)s)")
    add("--lr-warmup", type=int, default=d.lr_warmup, help="steps of linear lr warm-up (default: %(default)s)")
    add("--precision", choices=["fp32", "bf16"], default=d.precision, help="forward pass, loss (default: %(default)s)")
    add("--channels-last", action="store_true", help="channels_last weights and batches (tensor-core convolutions)")
    add("--compile", nargs="?", const=True, choices=cmd.COMPILE_MODES, metavar="MODE", help="torch.compile (alone: on)")


def _common(p, run_dir: str, seed: int | None = 0) -> None:
    p.add_argument("--run-dir", default=run_dir, help=f"output folder (default: {run_dir})")
    p.add_argument("--seed", type=int, default=seed, help="seed of every random draw (default: 0)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA when available")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _dataset(p) -> None:
    p.add_argument("--dataset", default=cmd.Data.dataset, choices=list(cmd.DATASETS))
    p.add_argument("--data-root", default=None, help="folder with the dataset files (all but digits)")


def _trained(p) -> None:
    p.add_argument("--score", default=cmd.DEMO_SCORE, help="score model (default: the demo's)")
    p.add_argument("--classifier", default=cmd.DEMO_CLASSIFIER, help="classifier (default: the demo's)")


def _demo(sub) -> None:
    p = sub.add_parser("demo", help="train or reuse models on digits, attack with ART PGD, print the table")
    add = p.add_argument
    _common(p, cmd.Demo.run_dir, seed=None)
    d = cmd.DemoConfig()
    add("--eps", type=float, help=f"l_inf radius (default: {d.eps})")
    add("--pgd-steps", type=int, help=f"PGD iterations (default: {d.pgd_steps})")
    add("--sigma", type=float, help=f"ADP noise level (default: {d.sigma})")
    add("--runs", type=int, help=f"S, purification runs averaged (default: {d.runs})")
    add("--score-iterations", type=int, help=f"DSM steps (default: {d.score_iterations})")
    add("--ngf", type=int, help=f"NCSNv2 width (default: {d.ngf})")
    add("--n-examples", type=int, help=f"test digits used, of 360 (default: {d.n_examples})")
    p.set_defaults(run=cmd.demo, settings_class=cmd.Demo)


def _train_score(sub) -> None:
    p = sub.add_parser(
        "train-score", help="train an NCSNv2 score network by multi-level DSM", description=cmd.train_score.__doc__
    )
    add = p.add_argument
    d = cmd.ScoreTraining()
    _common(p, d.run_dir)
    _dataset(p)
    add("--iterations", type=int, default=d.iterations)
    add("--batch-size", type=int, default=d.batch_size)
    _training(p, d)
    add("--ngf", type=int, default=d.ngf, help="NCSNv2 width (the paper: 128 for CIFAR)")
    add("--sigma-begin", type=float, default=None, help="default: Song & Ermon's Techniques 1-2")
    add("--sigma-end", type=float, default=d.sigma_end)
    add("--num-sigmas", type=int, default=d.num_sigmas)
    add("--hflip", action="store_true", help="random horizontal flips (CIFAR)")
    add("--checkpoint-every", type=int, default=d.checkpoint_every)
    add(
        "--augment",
        choices=["dct", "augmix"],
        help="augmented DSM for common corruptions (the paper's DCT / AugMix training); multiplies --sigma-end by 10 "
        "as the paper does",
    )
    p.set_defaults(run=cmd.train_score, settings_class=cmd.ScoreTraining)


def _train_denoiser(sub) -> None:
    p = sub.add_parser(
        "train-denoiser",
        help="train a sigma-conditional UNet denoiser (ADP's score at any level) within a time budget",
        description=cmd.train_denoiser.__doc__,
    )
    add = p.add_argument
    d = cmd.DenoiserTraining()
    _common(p, d.run_dir)
    _dataset(p)
    add("--minutes", type=float, default=d.minutes, help="training time, over resumptions (default: %(default)s)")
    add("--milestone", type=int, default=d.milestone, help="steps between measurements (default: %(default)s)")
    add("--batch-size", type=int, default=d.batch_size)
    add("--lr", type=float, default=d.lr)
    add("--channels", type=_split(int), default=d.channels, help="UNet widths, top first (default: 32,64,128)")
    add("--precision", choices=["fp32", "bf16"], default=d.precision, help="forward pass, loss (default: %(default)s)")
    add("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(run=cmd.train_denoiser, settings_class=cmd.DenoiserTraining)


def _train_classifier(sub) -> None:
    p = sub.add_parser("train-classifier", help="train one of the paper's classifiers")
    add = p.add_argument
    d = cmd.ClassifierTraining()
    _common(p, d.run_dir)
    _dataset(p)
    add("--arch", choices=sorted(cmd.CLASSIFIERS), default=d.arch)
    add("--epochs", type=int, default=d.epochs)
    add("--batch-size", type=int, default=d.batch_size)
    add("--lr", type=float, default=d.lr)
    add(
        "--adversarial-training",
        action="store_true",
        help="l_inf PGD adversarial training (Madry et al.; ART AdversarialTrainer), the baseline defence; saves "
        "adv_classifier.safetensors",
    )
    add("--eps", type=float, help="l_inf radius of the training attack (with --adversarial-training; demo: 0.175)")
    add("--eps-step", type=float, default=None, help="PGD step (default: 2.5 eps / max-iter)")
    add("--max-iter", type=int, default=None, help="PGD steps per batch (default: 10)")
    add("--ratio", type=float, default=None, help="fraction of each batch made adversarial (default: 1)")
    p.set_defaults(run=cmd.train_classifier, settings_class=cmd.ClassifierTraining)


def _detect(sub) -> None:
    from .detect_demo import ATTACKS, DEFENCES

    p = sub.add_parser("detect", help="score-norm detection on digits: ROC AUC, histogram, two-level ADP vs ADP")
    add = p.add_argument
    _common(p, cmd.Detection.run_dir)
    _trained(p)
    d = cmd.DetectConfig()
    add("--eps", type=float, default=d.eps, help=f"l_inf radius (default: {d.eps})")
    add("--pgd-steps", type=int, default=d.pgd_steps)
    add("--sigma", type=float, default=d.sigma, help="ADP noise level, sigma_high (default: %(default)s)")
    add("--steps", type=int, default=d.steps, help="ADP purification steps T (default: %(default)s)")
    add("--beta", type=float, default=d.beta, help="sigma_low = beta * sigma (default: %(default)s)")
    add("--fpr", type=float, default=d.fpr, help="detector's target false-positive rate")
    add("--runs", type=int, default=d.runs, help="S, purifications averaged when judging")
    add("--eot", type=int, default=d.eot, help="EOT samples of the BPDA attack")
    add("--full-eot", type=int, default=d.full_eot, help="EOT samples of the full-gradient attacks")
    add("--kappa", type=float, default=d.kappa, help="weight of the score-norm term (aware attack)")
    add("--n-calibration", type=int, default=d.n_calibration, help="test digits that set the threshold")
    add("--n-examples", type=int, default=d.n_examples, help="test digits evaluated (after those)")
    add(
        "--attacks",
        nargs="*",
        choices=ATTACKS,
        default=list(ATTACKS),
        help="attacks to run (none: only the detector and the histogram)",
    )
    add(
        "--auc-eps",
        type=float,
        nargs="*",
        default=list(d.auc_eps),
        help="further l_inf radii at which to report the detector's ROC AUC against blind PGD",
    )
    add("--defences", nargs="+", choices=DEFENCES, default=list(DEFENCES), help="ADP and/or two-level ADP")
    p.set_defaults(run=cmd.detect, settings_class=cmd.Detection)


def _certify(sub) -> None:
    p = sub.add_parser("certify", help="randomized-smoothing certification of the ADP-smoothed classifier")
    add = p.add_argument
    d = cmd.Certification()
    _common(p, d.run_dir)
    _trained(p)
    _dataset(p)
    add("--sigmas", type=float, nargs="+", default=list(d.sigmas), help="smoothing noise levels")
    add("--n0", type=int, default=d.n0, help="selection samples per input (default: %(default)s)")
    add("--n", type=int, default=d.n, help="estimation samples per input (default: %(default)s)")
    add("--alpha", type=float, default=d.alpha, help="failure probability (default: %(default)s)")
    add(
        "--n-approximate",
        type=int,
        default=d.n_approximate,
        help="samples of the paper's approximate variant (= n0: reuses the selection draws)",
    )
    add("--n-examples", type=int, default=d.n_examples, help="test inputs certified (default: %(default)s)")
    add("--radii", type=float, nargs="+", default=list(d.radii), help="radii of the table")
    add("--steps", type=int, default=d.steps, help="ADP purification steps T")
    add("--batch-size", type=int, default=d.batch_size, help="noisy samples per forward pass")
    p.set_defaults(run=cmd.certify, settings_class=cmd.Certification)


def _corruptions(sub) -> None:
    p = sub.add_parser(
        "corruptions",
        help="accuracy under the 15 common corruptions x 5 severities: undefended, ADP sigma 0/0.1/0.25, detection, "
        "DCT- and AugMix-trained score models",
        description=cmd.corruptions.__doc__,
    )
    add = p.add_argument
    d = cmd.CorruptionTable()
    _common(p, d.run_dir)
    _dataset(p)
    add("--classifier", required=True, help="classifier checkpoint")
    add("--score", required=True, help="plain DSM score-model checkpoint")
    add("--score-dct", help="score model trained with train-score --augment dct (row left out if absent)")
    add("--score-augmix", help="score model trained with train-score --augment augmix (row left out if absent)")
    add("--n-examples", type=int, help="first N test images (default: all)")
    add("--runs", type=int, default=d.runs, help=f"S, purifications averaged where sigma > 0 (default: {d.runs})")
    add("--steps", type=int, default=d.steps, help=f"purification steps T (default: {d.steps})")
    add("--cifar10c-root", help="read the real CIFAR-10-C files from this folder instead of corrupting")
    add("--description", help="data and split in words, for the table header")
    add(
        "--variants",
        type=_split(str),
        help="measure only these rows, comma-separated ('ADP σ=0 + DCT,ADP σ=0 + AugMix')",
    )
    add("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(run=cmd.corruptions, settings_class=cmd.CorruptionTable)


def _evaluate(sub) -> None:
    from .evaluation.config import PRESETS, presets_text

    paper, croce, smoke, d = PRESETS["paper"], PRESETS["croce"], PRESETS["smoke"], cmd.Evaluation()
    p = sub.add_parser(
        "evaluate",
        help="attack the ADP-defended classifier; evaluation card (markdown, JSON, figure), records",
        description=presets_text() + " Every flag below overrides the preset's value, and the card says so. A run "
        "prints its estimated time first (--estimate-only: only that). Also: python -m art_adp evaluate ..., "
        "torchrun --nproc_per_node=N -m art_adp evaluate ...",
    )
    _common(p, d.run_dir, seed=None)
    _dataset(p)
    add = p.add_argument
    add("--preset", choices=sorted(PRESETS), default=d.preset, help="named budgets (default: paper)")
    add("--estimate-only", action="store_true", help="print the estimated time on this device and stop")
    add("--score", help=f"score-model checkpoint (default: {cmd.DEMO_SCORE})")
    add("--classifier", help=f"classifier checkpoint (default: {cmd.DEMO_CLASSIFIER})")
    add("--n-examples", type=int, help=f"first N test examples (default: all; smoke: {smoke.n_examples})")
    add(
        "--attacks",
        type=_split(str),
        help=f"comma-separated, from {','.join(registry.names())} (paper: {','.join(paper.attacks)}; croce: "
        f"{','.join(croce.attacks)})",
    )
    add("--purifier", type=_split(str), default=d.purifier, help="families, comma-separated: adp, reverse-diffusion, "
        "denoised-smoothing (several: a card each in <run-dir>/<family>, comparison.md side by side; the diffusion "
        "families need a sigma-conditional denoiser as --score, from art-adp train-denoiser)")  # fmt: skip
    add("--sigma", type=float, default=d.sigma, help="noise level: ADP's sigma, sigma* of reverse diffusion, sigma of "
        "denoised smoothing (default: %(default)s)")  # fmt: skip
    add("--steps", type=int, default=d.steps, help="steps: ADP's T, reverse diffusion's K (default: %(default)s)")
    add("--sampler", choices=["ddim", "ancestral", "heun"], default=d.sampler, help="reverse diffusion's sampler")
    add("--runs", type=int, help=f"S, purifications per judged prediction (paper: {paper.runs})")
    add("--repeats", type=int, help=f"R, judgements per example (paper: {paper.repeats}; croce: {croce.repeats})")
    add("--norm", choices=["inf", "2"], help="threat model norm (default: inf)")
    add("--eps", type=float, help=f"radius (default: 8/255; digits {cmd.DATASET_EPS['digits']})")
    add("--eps-step", type=float, help="step (default: eps/4, following --eps)")
    add("--iterations", type=int, help=f"PGD/BPDA/joint iterations (paper: {paper.iterations})")
    add("--eot", type=int, help=f"EOT samples of BPDA, joint and full-gradient PGD (paper: {paper.eot})")
    add("--eot-aggregate", choices=["mean", "sign"], help="mean of gradients or the authors' sign vote")
    add("--spsa-iterations", type=int, help=f"SPSA steps (paper preset: {paper.spsa_iterations})")
    add("--spsa-samples", type=int, help=f"SPSA samples per step (paper: {paper.spsa_samples})")
    add("--apgd-iterations", type=int, help=f"APGD iterations per loss (croce: {croce.apgd_iterations})")
    add("--apgd-eot", type=int, help=f"APGD EOT samples (croce: {croce.apgd_eot})")
    add("--chunk-size", type=int, help="examples per unit of work (resume and sharding granularity)")
    add("--batch-size", type=int, help="images per forward pass (examples x EOT copies)")
    add("--purify-batch-size", type=int, default=d.purify_batch_size, help="images per purifier chunk")
    add(
        "--memory-budget",
        type=int,
        metavar="MIB",
        help="MiB of autograd graph per block of EOT draws in the "
        "full-gradient attacks (default: the library's, 512 on a CPU, a quarter of free GPU memory); changes the "
        "blocking only, not the result, so it is not in the records' settings and a run resumes under another",
    )
    add("--sanity-examples", type=int, help="examples for the sanity attacks")
    add("--no-sanity", action="store_true", help="skip the sanity checks (then no masking verdict)")
    add("--no-fixed-noise", action="store_true", help="skip the fixed-randomness column")
    add("--eps-sweep", type=_split(float), help="further eps values for the accuracy-against-eps figure")
    add(
        "--sigma-sweep",
        nargs="?",
        const=cmd.SIGMA_SWEEP,
        type=_split(float),
        help="sigma values, comma-separated (flag " "alone: the paper's 0.05..0.40)",
    )
    add(
        "--eot-sweep",
        nargs="?",
        const=cmd.EOT_SWEEP,
        type=_split(int),
        help="EOT counts, comma-separated (flag alone: the " "paper's 1..50)",
    )
    add(
        "--baseline",
        choices=["adversarial-training"],
        help="add an adversarially trained classifier (ART AdversarialTrainer with PGD, same architecture and "
        "training split), attacked and judged the same way; cached as <run-dir>/adv_classifier.safetensors",
    )
    add("--adv-epochs", type=int, default=d.adv_epochs, help="adversarial-training epochs (default: %(default)s)")
    add(
        "--adv-max-iter", type=int, default=d.adv_max_iter, help="adversarial-training PGD steps (default: %(default)s)"
    )
    add("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(run=cmd.evaluate, settings_class=cmd.Evaluation)


def _import(sub) -> None:
    p = sub.add_parser(
        "import-ncsnv2",
        help="convert a checkpoint of the NCSNv2 reference code to a score model",
        description=cmd.import_ncsnv2.__doc__,
    )
    add = p.add_argument
    add("checkpoint", help="the reference's checkpoint_<step>.pth")
    add("--config", required=True, help="its YAML config (configs/cifar10.yml or the log folder's config.yml)")
    add("-o", "--output", default=cmd.Import.output, help="default: %(default)s")
    add("--raw-weights", action="store_true", help="the trained weights instead of their EMA")
    p.set_defaults(run_dir=".", run=cmd.import_ncsnv2, settings_class=cmd.Import)


def _reproduce(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="the paper's MNIST row end to end: train or resume the MLP and a score model, learning curve, attacks, "
        "table beside the paper's numbers",
        description=cmd.reproduce.__doc__,
    )
    add = p.add_argument
    d = cmd.Reproduction()
    add("benchmark", choices=["mnist"])
    add("--data-root", required=True, help="folder with the four MNIST idx(.gz) files")
    _common(p, d.run_dir, seed=None)
    add("--threads", type=int, default=None, help="torch CPU threads")
    add("--stages", nargs="+", default=list(d.stages), choices=cmd.STAGES, help="default: all, in order")
    add("--note", default="", help="a line for the table and the figure (data provenance, machine)")
    for flag, kind, shown in cmd.recipe_options():  # one option per field of the recipe: --n-bpda 100, --budgets 2,8
        add(flag, type=kind, default=None, help=f"default: {shown}")
    _training(p, d.recipe)
    p.set_defaults(run=cmd.reproduce, settings_class=cmd.Reproduction)


COMMANDS = (_demo, _train_score, _train_denoiser, _train_classifier, _detect, _certify, _corruptions, _evaluate, _import, _reproduce)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="art-adp", description="ADP adversarial purification for ART.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(cmd.settings(args.settings_class, vars(args)))
    except (ValueError, FileNotFoundError) as err:
        print(f"art-adp {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"art-adp {args.command}: interrupted; finished work is saved in {args.run_dir}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
