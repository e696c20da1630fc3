"""``art-adp``: the command line. Argument parsing only: each command is one call of a function that lives next to
its application, with its settings object built here straight from the flags.

A flag either sets a field of the command's settings (dest ``config.<field>``: the library's or the application's
own dataclass, e.g. :class:`~art_adp.apps.evaluation.EvalConfig`, whose default the help shows and which fills
every field not given) or is a keyword of the command function (paths, run folder, device). See docs/architecture.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import sys
from collections.abc import Callable
from typing import Any

from ..data import DATASETS
from ..runs.plans import COMMANDS as COMMANDS_OF_PLANS, plan, plan_names
from ..runs.seeds import FOLDER_SCHEMES, LEVERS_SCHEMES, REPRODUCE_SCHEMES
from ..attacks import registry
from . import commands as cmd
from .flags import COMPILE, CONFIG, PRECISION, PRECISION_HELP, THREADS_HELP, TRAINER_HELP, add_fields as _fields
from .flags import interval, split as _split
from .loading import CLASSIFIER_HELP, SCORE_HELP, STANDARDISATION_HELP
from .certify_run import CertifyConfig, certify_command
from .check import FLAG_HELP as CHECK_FLAGS, HELP as CHECK_HELP, OPTIONS as CHECK_OPTIONS, Check, check_command
from .corruption_table import VARIANTS, CorruptionConfig, corruptions_command, variant_names
from .demo import DemoConfig, run_demo
from .detect_demo import ATTACKS as DETECT_ATTACKS, DEFENCES, DetectConfig, detect_command
from .evaluation.command import EOT_SWEEP, SIGMA_SWEEP, evaluate_command
from ..diffusion_purify import SAMPLERS
from .evaluation.config import ATTACKS as EVALUATED, PRESETS, PURIFIERS, EvalConfig, presets_text
from .levers import FLAG_HELP as LEVERS_HELP, LeversConfig, levers_command
from .levers_classifiers import LeversTraining, train_levers_command
from .levers_presets import CLASSIFIER_NAMES, JUDGES, ROW_NAMES, levers_datasets, setting_name
from .plans import MIGRATE_HELP, migrate_command, plans_command
from .prepare_data import prepare_cifar10_command
from .rejudge import HELP as REJUDGE_HELP, Rejudge, rejudge_command
from .reproduce import STAGES, MnistRecipe, reproduce_command
from .train_classifier import HELPS as CLASSIFIER_HELPS, OPTIONS as CLASSIFIER_OPTIONS, ClassifierTraining
from .train_classifier import train_classifier_command
from .train_denoiser import DenoiserTraining, train_denoiser_command
from .train_score import ScoreTraining, train_score_command

__all__ = ["build_parser", "main"]


def _common(p, command: Callable, **defaults) -> None:
    """The run folder (default: the command's), the device and the progress bars."""
    run_dir = inspect.signature(command).parameters["run_dir"].default
    p.add_argument("--run-dir", default=run_dir, help=f"output folder (default: {run_dir})")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA when available")
    p.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)  # commands.run sets them
    p.set_defaults(run=command, **defaults)


def _dataset(p) -> None:
    p.add_argument("--dataset", default="digits", choices=list(DATASETS))
    p.add_argument("--data-root", default=None, help="folder with the dataset files (all but digits)")


def _trained(p) -> None:
    add = p.add_argument
    add("--score", default=cmd.DEMO_SCORE, help=f"score model: {SCORE_HELP} (default: %(default)s, the demo's)")
    add("--score-config", help="the YAML config of an NCSNv2 reference checkpoint given as --score")
    add("--classifier", default=cmd.DEMO_CLASSIFIER, help=f"{CLASSIFIER_HELP} (default: %(default)s, the demo's)")
    add("--weights", help="the factory's weights: safetensors, or a torch.save state dict (read weights_only)")
    add("--mean", type=_split(float), help="per-channel mean, e.g. 0.4914,0.4822,0.4465: " + STANDARDISATION_HELP)
    add("--std", type=_split(float), help="per-channel standard deviation (with --mean)")


def _demo(sub) -> None:
    p = sub.add_parser("demo", help="train or reuse models on digits, attack with ART PGD, print the table")
    _common(p, run_demo, settings=DemoConfig)
    helps = {"max_iter": "PGD iterations", "ensemble_size": "S, purification runs averaged", "ngf": "NCSNv2 width",
             "n_examples": "test digits used, of 360", "score_iterations": "DSM steps"}  # fmt: skip
    _fields(p, DemoConfig, helps)


def _train_score(sub) -> None:
    p = sub.add_parser("train-score", help="train an NCSNv2 score network by multi-level DSM",
                       description=train_score_command.__doc__)  # fmt: skip
    _common(p, train_score_command, settings=ScoreTraining)
    _dataset(p)
    helps = {**TRAINER_HELP, "ngf": "NCSNv2 width (the paper: 128 for CIFAR)", "hflip": "random horizontal flips",
             "sigma_begin": "None: Song & Ermon's Techniques 1-2",
             "augment": "augmented DSM for common corruptions (the paper's DCT / AugMix training); multiplies "
             "--sigma-end by 10 as the paper does"}  # fmt: skip
    _fields(p, ScoreTraining, helps, lr={"type": cmd.learning_rate}, precision=PRECISION, compile=COMPILE,
            augment={"choices": ["dct", "augmix"]})  # fmt: skip


def _train_denoiser(sub) -> None:
    what = "train a sigma-conditional UNet denoiser (ADP's score at any level) within a time budget"
    p = sub.add_parser("train-denoiser", description=train_denoiser_command.__doc__, help=what)
    _common(p, train_denoiser_command, settings=DenoiserTraining)
    _dataset(p)
    helps = {"minutes": "training time, over resumptions", "milestone": "steps between measurements", "channels":
             "UNet widths, top first", "clip_noise": "train on noisy inputs clipped to [0, 1]", "augment": "x~ ~ "
             "N(F(x), sigma^2 I), F a DCT drop or AugMix", "init": "a checkpoint to fine-tune", "sigma_min": "smallest "
             "training level (with --augment the paper's is 10x)", "precision": TRAINER_HELP["precision"]}  # fmt: skip
    _fields(p, DenoiserTraining, helps, precision=PRECISION, augment={"choices": ["dct", "augmix"]})


OPTIONS = {k: {"choices": v} for k, v in registry.OPTION_CHOICES.items()}  # the attacks' options as flags


def _levers(sub) -> None:
    """``levers`` measures; ``train-levers`` trains its classifiers first, with the same data and preset flags."""
    p, t = (sub.add_parser(name, description=command.__doc__, help=what) for name, command, what in (
        ("levers", levers_command, "a data set's lever table (plans levers:*)"),
        ("train-levers", train_levers_command, "train a lever table's classifiers into its run folder")))  # fmt: skip
    for parser, command, settings in ((p, levers_command, LeversConfig), (t, train_levers_command, LeversTraining)):
        _common(parser, command, settings=settings)
        parser.add_argument("--dataset", default="mnist", choices=levers_datasets(), help="the data set and its preset")
        parser.add_argument("--data-root", required=True, help="folder with the data set's files (MNIST: four idx)")
        parser.add_argument("--denoiser", default=None, help="a train-denoiser checkpoint (denoiser.safetensors)")
    many, names = {"nargs": "+", "type": str}, {"nargs": "*", "type": str, "choices": CLASSIFIER_NAMES}
    shared: dict[str, dict[str, Any]] = {"classifiers": names, "purified": names, "arch": {"choices": ["mlp", "cnn"]},
                                         "sigmas": {"nargs": "+", "type": float}}  # fmt: skip
    _fields(p, LeversConfig, LEVERS_HELP, models={**many, "choices": ["oracle", "denoiser"]},
            settings={**many, "type": setting_name, "metavar": "SETTING"}, attacks={**many, "choices": ROW_NAMES},
            keep_examples={"flag": "--no-keep-examples", "action": "store_false"}, **OPTIONS,
            judges={**many, "choices": list(JUDGES)}, **shared,
            attack_precision={"choices": ["fp32", "bf16"]}, seed_scheme={"choices": LEVERS_SCHEMES})  # fmt: skip
    _fields(t, LeversTraining, LEVERS_HELP, **shared, train_precision={"choices": ["fp32", "bf16"]})


def _rejudge(sub) -> None:
    p = sub.add_parser("rejudge", description=rejudge_command.__doc__, help=REJUDGE_HELP)
    add = p.add_argument
    add("run_dir", metavar="RUN_DIR", help="the levers run folder (its examples/, records, settings.json, table.json)")
    add("--data-root", help="the data set's folder, for the oracle's training split (default: the run's command's)")
    add("--denoiser", help="the train-denoiser checkpoint the run measured (default: the run's command's)")
    add("--device", choices=["cpu", "cuda"], default=None, help="default: the run's (the same noise for a seed)")
    add("--quiet", dest="progress", action="store_false", help="no progress bars")
    add("--threads", type=int, default=None, help=THREADS_HELP)
    p.set_defaults(run=rejudge_command, settings=Rejudge)
    _fields(p, Rejudge, {"repeats": "R, judgements of each image; None: the run's", "seed": "None: the run's",
                         "ensemble_size": "S, purifications averaged; None: the run's"})  # fmt: skip


def _check(sub) -> None:
    p = sub.add_parser("check", description=check_command.__doc__, help=CHECK_HELP)
    p.add_argument("result", metavar="RESULT.json", help="a published lever table (docs/results/*.json)")
    p.add_argument("--data-root", required=True, help="the data set's folder (as the result's command read it)")
    _common(p, check_command, settings=Check, parse=parse)
    _fields(p, Check, CHECK_FLAGS, **CHECK_OPTIONS)


def _train_classifier(sub) -> None:
    p = sub.add_parser("train-classifier", help="train one of the paper's classifiers, bare or behind a purifier",
                       description=train_classifier_command.__doc__)  # fmt: skip
    _common(p, train_classifier_command, settings=ClassifierTraining)
    _dataset(p)
    p.add_argument("--denoiser", default=None, help="a train-denoiser checkpoint (with --purifier denoiser)")
    _fields(p, ClassifierTraining, CLASSIFIER_HELPS, arch={"choices": sorted(cmd.CLASSIFIERS)}, **CLASSIFIER_OPTIONS)


def _detect(sub) -> None:
    p = sub.add_parser("detect", help="score-norm detection on digits: ROC AUC, histogram, two-level ADP vs ADP")
    _common(p, detect_command, settings=DetectConfig)
    _trained(p)
    helps = {"sigma": "ADP noise level, sigma_high", "steps": "ADP purification steps T",
             "beta": "sigma_low = beta * sigma", "fpr": "detector's target false-positive rate",
             "ensemble_size": "S, purifications averaged when judging", "eot_samples": "EOT draws of the BPDA attack",
             "full_eot_samples": "EOT draws of the full-gradient attacks",
             "kappa": "weight of the score-norm term (aware attack)",
             "n_calibration": "test digits that set the threshold", "n_examples": "test digits evaluated (after those)",
             "attacks": "attacks to run (none: only the detector and the histogram)",
             "auc_eps": "further l_inf radii at which to report the detector's ROC AUC against blind PGD",
             "defences": "ADP and/or two-level ADP"}  # fmt: skip
    _fields(p, DetectConfig, helps, attacks={"nargs": "*", "choices": DETECT_ATTACKS, "type": str}, auc_eps={
            "nargs": "*", "type": float}, defences={"nargs": "+", "choices": DEFENCES, "type": str})  # fmt: skip


def _certify(sub) -> None:
    p = sub.add_parser("certify", help="randomized-smoothing certification of the ADP-smoothed classifier")
    _common(p, certify_command, settings=CertifyConfig)
    _trained(p)
    _dataset(p)
    helps = {"sigmas": "smoothing noise levels", "n0": "selection samples per input", "alpha": "failure probability",
             "n": "estimation samples per input", "n_examples": "test inputs certified", "radii": "radii of the table",
             "n_approximate": "samples of the paper's approximate variant (= n0: reuses the selection draws)",
             "steps": "ADP purification steps T", "batch_size": "noisy samples per forward pass"}  # fmt: skip
    _fields(p, CertifyConfig, helps, sigmas={"nargs": "+", "type": float}, radii={"nargs": "+", "type": float})


def _corruptions(sub) -> None:
    p = sub.add_parser("corruptions", description=corruptions_command.__doc__,
                       help="accuracy under the 15 common corruptions x 5 severities: undefended, ADP sigma "
                       "0/0.1/0.25, detection, DCT- and AugMix-trained score models")  # fmt: skip
    _common(p, corruptions_command, settings=CorruptionConfig)
    _dataset(p)
    add = p.add_argument
    add("--classifier", required=True, help="classifier checkpoint or zoo:NAME")
    add("--classifier-name", default="classifier", help="its row names: several classifiers, calls into one run dir")
    add("--score", required=True, help="plain score model: a train-score or train-denoiser checkpoint")
    add("--score-dct", help="score model trained with --augment dct (row left out if absent)")
    add("--score-augmix", help="score model trained with --augment augmix (row left out if absent)")
    add("--cifar10c-root", help="read the real CIFAR-10-C files from this folder instead of corrupting")
    add("--cifar10-archive", help="with --cifar10c-root: the official archive, whose test order finds images by name")
    add("--description", help="data and split in words, for the table header")
    add("--variants", type=variant_names, help=f"measure only these rows, comma-separated, from {'; '.join(VARIANTS)}")
    helps = {"n_examples": "first N test images (None: all)", "ensemble_size": "S, purifications averaged where "
             "sigma > 0", "steps": "purification steps T", "seed": "the purification noise",
             "corruption_seed": "the corruptions' randomness", "constants": "imagenet-c (the imagecorruptions "
             "package's) or cifar10-c (CIFAR-10-C's own)", "zero_level": "h level where sigma = 0"}  # fmt: skip
    _fields(p, CorruptionConfig, helps, constants={"choices": ["imagenet-c", "cifar10-c"]})


def _evaluate(sub) -> None:
    croce, smoke = PRESETS["croce"], PRESETS["smoke"]
    p = sub.add_parser("evaluate", help="attack the ADP-defended classifier; evaluation card (markdown, JSON, figure)",
                       description=presets_text() + " Every flag below overrides the preset's value (defaults shown: "
                       "the paper preset's), and the card says so. A run prints its estimated time first "
                       "(--estimate-only: only that). Also: python -m art_adp evaluate ..., torchrun "
                       "--nproc_per_node=N -m art_adp evaluate ...")  # fmt: skip
    _common(p, evaluate_command, settings=EvalConfig.preset)
    _dataset(p)
    keywords = inspect.signature(evaluate_command).parameters
    add = p.add_argument
    add("--preset", dest=CONFIG + "name", choices=plan_names("evaluate"), default="paper",
        help="an evaluation plan (art-adp plans; default: paper)")  # fmt: skip
    add("--estimate-only", action="store_true", help="print the estimated time on this device and stop")
    add("--seed-scheme", choices=FOLDER_SCHEMES, help="seeds from --seed by this scheme (default: the run folder's)")
    _trained(p)
    eps = ", ".join(f"{k} {v.eps:.4g}" for k, v in DATASETS.items())
    add("--eps", type=float, help=f"radius (default: the --dataset's: {eps}); the steps follow it")
    defence = {"sigma": "noise level: ADP's sigma, sigma* of reverse diffusion, sigma of denoised smoothing",
               "steps": "steps: ADP's T, reverse diffusion's K", "purify_batch_size": "images per purifier chunk",
               "adv_epochs": "adversarial-training epochs",
               "adv_max_iter": "adversarial-training PGD steps"}  # fmt: skip
    for name, text in defence.items():
        kind = type(keywords[name].default)
        add("--" + name.replace("_", "-"), type=kind, default=keywords[name].default, help=text + " (%(default)s)")
    add("--baseline", choices=["adversarial-training"],
        help="add an adversarially trained classifier (ART AdversarialTrainer with PGD, same architecture and "
        "training split), attacked and judged alike; cached as <run-dir>/adv_classifier.safetensors")  # fmt: skip
    helps = {
        "attacks": f"comma-separated, from {','.join(EVALUATED)} (croce: {','.join(croce.attacks)})",
        "norm": "threat model norm", "eps_step": "step (None: eps/4, following --eps)",
        "max_iter": "PGD/BPDA/joint iterations", "eot_samples": "EOT draws of BPDA, joint and full-gradient PGD",
        "eot_aggregate": "mean of the EOT gradients or the authors' sign vote",
        "cutoff": "the systemic low-frequency attack's band: fraction of the DCT frequencies per side",
        "num_random_init": "runs (restarts on the unbroken)", "check_every": "best-iterate check interval (0: last)",
        "apgd_max_iter": f"APGD iterations per loss (croce: {croce.apgd_max_iter})", "repeats": "R, judgements",
        "apgd_eot_samples": f"APGD EOT draws (croce: {croce.apgd_eot_samples})",
        "selective_max_iter": "selective EOT iterations per loss", "selective_eot_samples": "selective EOT draws N",
        "lowfreq_max_iter": "vote attack iterations", "random_start": "PGD family and vote attack: random start",
        **registry.OPTION_HELP, "ensemble_size": "S, purifications per judged prediction",
        "chunk_size": "examples per unit of work (resume, sharding)", "batch_size": "images per pass (examples x EOT)",
        "memory_budget": "MiB of autograd graph per block of EOT draws in the full-gradient attacks (None: the "
        "library's, 512 on a CPU, a quarter of free GPU memory); changes the blocking only, not the result, so it is "
        "not in the records' settings and a run resumes under another",
        "sanity": "skip the sanity checks (then no masking verdict)", "fixed_noise": "skip the fixed-randomness column",
        "masking_examples": "the gradient-free masking check: SPSA at its budget on the first N examples where the "
        f"defence clips its noisy input (0: none; strongest: {PRESETS['strongest'].masking_examples})",
        "eps_sweep": "further eps values for the accuracy-against-eps figure",
        "sigma_sweep": "sigma values, comma-separated (flag alone: the paper's 0.05..0.40)",
        "eot_sweep": "EOT counts, comma-separated (flag alone: the paper's 1..50)",
        "n_examples": f"first N test examples (None: all; smoke: {smoke.n_examples})",
        "purifier": f"families, comma-separated, from {','.join(PURIFIERS)} (several: a card each in "
        "<run-dir>/<family>, comparison.md side by side; the diffusion families need a sigma-conditional denoiser as "
        "--score, from art-adp train-denoiser)",
        "sampler": "reverse diffusion's sampler", **PRECISION_HELP}  # fmt: skip
    _fields(p, EvalConfig, helps, skip=("eps", "preset_name", "overridden", "note", "sanity_iterations",
            "sanity_eot_samples", "compression_examples", "compression_directions", "weight"),
            norm={"type": cmd.norm, "choices": [math.inf, 2], "metavar": "{inf,2}"}, **OPTIONS,
            check_every={"type": interval}, random_start={"action": argparse.BooleanOptionalAction},
            eot_aggregate={"choices": ["mean", "sign"]}, memory_budget={"metavar": "MIB", "type": int},
            sanity={"flag": "--no-sanity", "action": "store_false"},
            fixed_noise={"flag": "--no-fixed-noise", "action": "store_false"},
            sigma_sweep={"nargs": "?", "const": SIGMA_SWEEP}, eot_sweep={"nargs": "?", "const": EOT_SWEEP},
            sampler={"choices": list(SAMPLERS)}, attack_precision={"choices": ["fp32", "bf16"]})  # fmt: skip


def _import(sub) -> None:
    p = sub.add_parser("import-ncsnv2", help="convert a checkpoint of the NCSNv2 reference code to a score model",
                       description=cmd.import_ncsnv2.__doc__)  # fmt: skip
    output = inspect.signature(cmd.import_ncsnv2).parameters["output"].default
    add = p.add_argument
    add("checkpoint", help="the reference's checkpoint_<step>.pth")
    add("--config", required=True, help="its YAML config (configs/cifar10.yml or the log folder's config.yml)")
    add("-o", "--output", default=output, help="default: %(default)s")
    add("--raw-weights", action="store_true", help="the trained weights instead of their EMA")
    p.set_defaults(run=cmd.import_ncsnv2, settings=None)


def _prepare_cifar10(sub) -> None:
    p = sub.add_parser("prepare-cifar10", help="CIFAR-10's python batches from the official archive or a PNG copy",
                       description=prepare_cifar10_command.__doc__)  # fmt: skip
    p.add_argument("source", help="cifar-10-python.tar.gz, its cifar-10-batches-py folder, or PNGs train/, test/")
    p.add_argument("--out", required=True, help="folder to write cifar-10-batches-py into")
    p.set_defaults(run=prepare_cifar10_command, settings=None)


def _plans_and_migrate(sub) -> None:
    p = sub.add_parser("plans", help="the named plans: evaluate --preset, levers --dataset, reproduce")
    p.add_argument("--command", dest="only", choices=COMMANDS_OF_PLANS, help="only this command's plans")
    p.set_defaults(run=plans_command, settings=None)
    p = sub.add_parser("migrate", help="an old run folder's records in the one layout, once", description=MIGRATE_HELP)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (its records; the old kept beside)")
    p.set_defaults(run=migrate_command, settings=None)


def _reproduce(sub) -> None:
    p = sub.add_parser("reproduce", description=reproduce_command.__doc__, help=plan("reproduce:mnist").what)
    add = p.add_argument
    add("benchmark", choices=["mnist"], help="the plan reproduce:mnist")
    add("--data-root", required=True, help="folder with the four MNIST idx(.gz) files")
    _common(p, reproduce_command, settings=MnistRecipe)
    add("--stages", nargs="+", default=list(STAGES), choices=STAGES, help="default: all, in order")
    add("--note", default="", help="a line for the table and the figure (data provenance, machine)")
    add("--channels-last", action="store_true", help=TRAINER_HELP["channels_last"])
    add("--compile", nargs="?", const=True, default=False, choices=cmd.COMPILE_MODES, metavar="MODE",
        help=TRAINER_HELP["compile"])  # fmt: skip
    all_or_int = {"type": cmd.count_or_all}
    counts = [f.name for f in dataclasses.fields(MnistRecipe) if f.name.startswith("n_")]
    helps = {**TRAINER_HELP, **{name: "a number or all" for name in counts}}
    _fields(p, MnistRecipe, helps, lr={"type": cmd.learning_rate}, precision=PRECISION,
            full_attack={"choices": registry.names(full=True)}, seed_scheme={"choices": REPRODUCE_SCHEMES},
            **{name: all_or_int for name in counts})  # fmt: skip


COMMANDS = (_demo, _train_score, _train_denoiser, _levers, _rejudge, _check, _train_classifier, _detect, _certify,
            _corruptions, _evaluate, _import, _prepare_cifar10, _plans_and_migrate, _reproduce)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="art-adp", description="ADP adversarial purification for ART.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def parse(argv: list[str] | None = None) -> tuple[Callable, Any, dict]:
    """The command function, its settings (built from the flags that set them) and its keywords."""
    values = vars(build_parser().parse_args(argv))
    command, make, _ = values.pop("run"), values.pop("settings"), values.pop("command")
    fields = {k[len(CONFIG) :]: v for k, v in values.items() if k.startswith(CONFIG)}
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    keywords = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if not k.startswith(CONFIG)}
    return command, None if make is None else make(**fields), keywords


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = next((a for a in argv if not a.startswith("-")), "")
    keywords: dict = {}
    try:
        command, config, keywords = parse(argv)
        status = cmd.run(command, config, **keywords)  # an int from a command with an exit status (check)
    except (ValueError, FileNotFoundError) as err:
        print(f"art-adp {name}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = keywords.get("run_dir", "the run folder")
        print(f"art-adp {name}: interrupted; finished work is saved in {where}", file=sys.stderr)
        return 130
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
