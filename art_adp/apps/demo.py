"""The digits demo: ADP defends a real classifier on real data inside an unchanged ART pipeline.

Trains (or reuses from its run directory) a score network and a classifier on sklearn's bundled 8×8 digits,
attacks with ART's own ``ProjectedGradientDescent`` -- preprocessor-blind (on the bare classifier) and BPDA
(through ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``) -- and prints a table in the
shape of the paper's Tables 2-3.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..attacks.registry import BLIND_ATTACK, LABELS
from ..data import load_digits
from ..eot import EOTClassifier
from ..models import DigitsCNN, load_classifier, save_classifier, train_classifier
from .plots import image_grid
from ..preprocessor import ADPPurifier
from ..purification import DEFAULTS
from ..runs.provenance import provenance
from ..score import NCSNv2, geometric_sigmas, train_score_model
from ..runs.render import accuracy_cell, markdown_table
from ..runs.records import write_json

__all__ = ["DemoConfig", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    """Settings of :func:`run_demo` (defaults: the README's figures)."""

    eps: float = 0.175
    max_iter: int = 10  # PGD iterations
    eps_step: float | None = None  # default 2.5·eps/max_iter (Madry et al.)
    sigma: float = DEFAULTS.sigma
    ensemble_size: int = 10  # S, purifications averaged per judged prediction
    # The score model: 0.1's NCSNv2(ngf=16) for 1000 steps spent 60 % of the demo's time training, and each
    # purification costs ~1.5x ngf=8's. ngf=8 for 600 steps keeps `art-adp demo` within 5 minutes on a 2-core CPU
    # with the other core busy, and the table within its resolution (the CHANGELOG has both tables).
    score_iterations: int = 600
    score_batch_size: int = 64
    sigma_max: float = 1.0  # training levels: 12 from sigma_max down to 0.01 (see run_demo)
    ngf: int = 8
    classifier_epochs: int = 15
    n_examples: int | None = 300  # of the 360 test digits (None: all)
    seed: int = 0


def _accuracy(probs: np.ndarray, y: np.ndarray) -> float:
    return float((probs.argmax(1) == y).mean())


def run_demo(
    config: DemoConfig = DemoConfig(),
    *,
    run_dir: str | Path = "runs/demo",
    progress: bool = True,
    device: str | torch.device | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """
    Train or reuse the models in ``run_dir``, attack, and print and return the accuracy table.

    :param config: The threat model and defence settings.
    :param run_dir: Folder for ``score.safetensors``, ``classifier.safetensors``, ``results.json``, ``digits.png``.
    :param progress: Show progress bars.
    :param device: ``"cpu"`` or ``"cuda"`` (default: CUDA when available).
    :param log: Where lines of output go.
    :return: The results (also written to ``results.json``).
    """
    c = config
    start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    data = load_digits(seed=c.seed)
    x_test, y_test = data.x_test[: c.n_examples], data.y_test[: c.n_examples]
    score, classifier = _models(data, c, run_dir, device, progress)
    trained = time.perf_counter() - start

    undefended, defended, purifier = _estimators(classifier, score, c, device)
    eps_step = c.eps_step if c.eps_step is not None else 2.5 * c.eps / c.max_iter
    x_blind, x_bpda = _attack(undefended, defended, x_test, y_test, c, eps_step, progress, log)
    rows = _judge(undefended, defended, {"clean": x_test, "blind": x_blind, "bpda": x_bpda}, y_test, c, log)
    with torch.no_grad():
        purified = purifier.forward(torch.from_numpy(x_bpda[:10]).to(device))[0].cpu().numpy()
    image_grid(
        run_dir / "digits.png",
        {"clean": x_test[:10], "BPDA PGD": x_bpda[:10], "purified": purified},
        title=f"ADP on digits: l_inf eps={c.eps}, sigma={c.sigma}",
    )
    elapsed = time.perf_counter() - start
    description = [
        f"Threat model: l_inf eps = {c.eps:g}, PGD {c.max_iter} steps of {eps_step:.4g} "
        "(ART ProjectedGradientDescent)",
        f"Defence: {purifier.describe()}, S = {c.ensemble_size} runs averaged",
        f"Data: sklearn digits, {len(x_test)} test images; score model NCSNv2(ngf={c.ngf}), "
        f"{c.score_iterations} DSM steps of {c.score_batch_size}; classifier DigitsCNN",
    ]
    _log_table(log, description, rows)
    log(f"time: {elapsed:.0f} s in all ({trained:.0f} s training or loading), device {device}")
    log(f"wrote {run_dir / 'results.json'} and {run_dir / 'digits.png'}")
    results = {
        "config": asdict(c),
        "eps_step": eps_step,
        "n_examples": len(x_test),
        "accuracy": {k: {"undefended": a, "adp": b} for k, (a, b) in rows.items()},
        "seconds": {"total": elapsed, "training": trained},
        "description": description,
        "provenance": provenance(
            wall_time_s=elapsed,
            device=device,
            models={"score": run_dir / "score.safetensors", "classifier": run_dir / "classifier.safetensors"},
            data=(x_test, y_test),
        ),
    }
    write_json(run_dir / "results.json", results, indent=2)
    return results


def _models(data, c: DemoConfig, run_dir: Path, device, progress: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The score network and the classifier: trained, or resumed / reused from ``run_dir``."""
    # Song & Ermon's Technique 1 puts sigma_1 at the largest pairwise distance (4.8 on digits) so that sampling
    # can start from pure noise; purification starts at sigma = 0.25, so a CPU-sized budget is better spent on
    # levels up to ~1 (measured: MSE ratio 1.84 vs 1.78 for recommend_sigmas at equal compute).
    sigmas = geometric_sigmas(c.sigma_max, 0.01, 12)
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same models
    score = train_score_model(
        NCSNv2(1, 8, ngf=c.ngf),
        data.x_train,
        sigmas,
        c.score_iterations,
        batch_size=c.score_batch_size,
        checkpoint_path=run_dir / "score.safetensors",
        checkpoint_every=100,
        seed=c.seed,
        progress=progress,
        device=device,
    )
    clf_path = run_dir / "classifier.safetensors"
    if clf_path.exists():
        return score, load_classifier(clf_path, device)
    torch.manual_seed(c.seed)
    classifier = train_classifier(
        DigitsCNN(nb_classes=10),
        data.x_train,
        data.y_train,
        epochs=c.classifier_epochs,
        batch_size=64,
        seed=c.seed,
        progress=progress,
        device=device,
    )
    save_classifier(classifier, clf_path)
    return score, classifier


def _estimators(classifier, score, c: DemoConfig, device) -> tuple:
    """ART's ``PyTorchClassifier`` undefended and defended by an ADPPurifier (BPDA gradients), and the purifier."""
    from art.estimators.classification import PyTorchClassifier

    device_type = "gpu" if device.type == "cuda" else "cpu"
    art_args = dict(
        model=classifier,
        loss=torch.nn.CrossEntropyLoss(),
        input_shape=(1, 8, 8),
        nb_classes=10,
        clip_values=(0.0, 1.0),
        device_type=device_type,
    )
    purifier = ADPPurifier(
        score,
        sigma=c.sigma,
        gradient="bpda",
        batch_size=1024,
        device_type=device_type,
        generator=torch.Generator(device).manual_seed(c.seed),
        channels_last=True,
    )
    return PyTorchClassifier(**art_args), PyTorchClassifier(**art_args, preprocessing_defences=[purifier]), purifier


def _attack(undefended, defended, x, y, c: DemoConfig, eps_step: float, progress: bool, log) -> tuple:
    """ART's PGD, preprocessor-blind (on the bare classifier) and BPDA (through the purifier)."""
    from art.attacks.evasion import ProjectedGradientDescent

    pgd = dict(norm=np.inf, eps=c.eps, eps_step=eps_step, max_iter=c.max_iter, batch_size=len(x), verbose=progress)
    log("attacking: preprocessor-blind PGD on the bare classifier ...")
    x_blind = ProjectedGradientDescent(undefended, **pgd).generate(x, y=y)
    log("attacking: BPDA PGD through ADPPurifier(gradient='bpda') ...")
    x_bpda = ProjectedGradientDescent(defended, **pgd).generate(x, y=y)
    return x_blind, x_bpda


def _judge(undefended, defended, inputs: dict, y, c: DemoConfig, log) -> dict[str, tuple[float, float]]:
    """Accuracy of the bare classifier and of the S-run ADP ensemble on each row's inputs."""
    ensemble = EOTClassifier(defended, ensemble_size=c.ensemble_size, batch_size=4096)

    def accuracy(model, x) -> float:
        return _accuracy(model.predict(x), y)

    log(f"judging: ADP ensemble of S={c.ensemble_size} purifications per input ...")
    return {
        "Clean": (accuracy(undefended, inputs["clean"]), accuracy(ensemble, inputs["clean"])),
        LABELS[BLIND_ATTACK]: (accuracy(undefended, inputs["blind"]), accuracy(ensemble, inputs["blind"])),
        "BPDA PGD": (accuracy(undefended, inputs["blind"]), accuracy(ensemble, inputs["bpda"])),
    }


def _log_table(log, description: list[str], rows: dict) -> None:
    log("")
    for line in description:
        log(line)
    log("")
    table = [[name, accuracy_cell(a) + (" (= Clf-PGD)" if name == "BPDA PGD" else ""), accuracy_cell(b)]
             for name, (a, b) in rows.items()]  # fmt: skip
    for line in markdown_table(["Attack", "Undefended", "ADP"], table):
        log(line)
    log("")
