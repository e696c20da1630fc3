"""Score-norm detection and detection-driven ADP on digits: ROC AUC, the score-norm histogram, and clean / robust
accuracy of two-level ADP against plain ADP under attacks that see through the detector.

Data: the score model and classifier of the digits demo; the first ``n_calibration`` test digits choose the
detector's threshold (target false-positive rate ``fpr``), the next ``n_examples`` are evaluated.

Attacks (ART's ``ProjectedGradientDescent``, ℓ∞, unchanged), each run against each defence:

- ``blind``: PGD on the bare classifier (preprocessor-blind), judged on the defence.
- ``bpda``: BPDA through the defence (``gradient="bpda"``), EOT over ``eot_samples`` purifications per step (the loss
  of their averaged probabilities).
- ``full``: the exact gradient through purification (``gradient="full"``), EOT over ``full_eot_samples``
  purifications.
  Through the two-level defence each sample's gradient is the one through the branch (σ or βσ) it takes.
- ``aware``: ``full`` plus knowledge of the detector: the loss also rewards a score norm below 0.9·τ
  (``- kappa · relu(‖h(x)‖₂ − 0.9τ)``), steering inputs into the weak βσ branch. On plain ADP it is ``full``
  with a score-norm penalty.

Robust accuracy is judged on the whole stochastic defence: the ``ensemble_size``-purification ensemble (paper
eq. 12).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import load_digits
from ..defended import DefendedModel
from ..attacks.evade_detector import EvadeDetectorLoss
from ..attacks.registry import BLIND_ATTACK, LABELS
from ..detect import ScoreNormDetector, ScoreNormHead, roc_auc
from .plots import score_norm_histogram
from ..preprocessor import ADPPurifier
from ..purification import DEFAULTS, purify
from ..runs.render import accuracy_cell, markdown_table
from ..runs.records import write_json

__all__ = ["DetectConfig", "detect_command", "run_detect_demo"]

ATTACKS = ("blind", "bpda", "full", "aware")
DEFENCES = ("plain", "two-level")


@dataclass(frozen=True)
class DetectConfig:
    """Settings of :func:`run_detect_demo` (defaults: the digits demo's threat model)."""

    eps: float = 0.175
    max_iter: int = 10  # PGD iterations
    sigma: float = DEFAULTS.sigma
    steps: int = DEFAULTS.steps  # T, purification steps
    beta: float = 0.2
    fpr: float = 0.05
    ensemble_size: int = 10  # S, purifications averaged when judging
    eot_samples: int = 4  # EOT draws of the BPDA attack
    full_eot_samples: int = 2  # EOT draws of the full-gradient attacks
    kappa: float = 5.0
    n_calibration: int = 100
    n_examples: int = 200
    attacks: tuple[str, ...] = ATTACKS
    defences: tuple[str, ...] = DEFENCES  # plain ADP, detection-driven two-level ADP
    auc_eps: tuple[float, ...] = (0.02, 0.05, 0.1)  # further radii for the ROC AUC of blind PGD
    batch_size: int = 1024
    seed: int = 0


def detect_command(
    config: DetectConfig,
    *,
    score: str,
    classifier: str,
    weights: str | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    score_config: str | None = None,
    run_dir: str = "runs/detect",
    device: str | None = None,
    progress: bool = True,
) -> dict:
    """``art-adp detect``: load the score model and the classifier (:mod:`~art_adp.apps.loading`: ``weights``,
    ``mean``, ``std``, ``score_config`` as for ``evaluate``), put the score at ADP's σ, then
    :func:`run_detect_demo` on digits."""
    from ..score import score_at
    from .loading import load_classifier_arg, load_score_arg

    score_model = score_at(load_score_arg(score, config=score_config)[0], config.sigma)
    model = load_classifier_arg(classifier, weights=weights, mean=mean, std=std)[0]
    return run_detect_demo(run_dir, score_model, model, config=config, progress=progress, device=device)


def run_detect_demo(
    run_dir: str | Path,
    score_model: torch.nn.Module,
    classifier: torch.nn.Module,
    *,
    config: DetectConfig = DetectConfig(),
    progress: bool = True,
    device: str | torch.device | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """
    Fit the detector, measure ROC AUC and rates, draw the score-norm histogram, and attack plain and two-level ADP.

    :param run_dir: Output folder: ``detect.json``, ``detect.md`` (the table), ``score_norms.png``.
    :param score_model: The digits score network; ``classifier``: the digits classifier.
    :param config: Threat model, defence and sizes.
    :return: The results (also in ``detect.json``).
    """
    c = config
    for what, given, valid in (("attack", c.attacks, ATTACKS), ("defence", c.defences, DEFENCES)):
        unknown = sorted(set(given) - set(valid))
        if unknown:
            raise ValueError(f"Unknown {what}(s) {unknown}; choose from {valid}.")
    start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    score_model, classifier = score_model.to(device).eval(), classifier.to(device).eval()
    data = load_digits(seed=c.seed)
    x_cal = data.x_test[: c.n_calibration]
    x, y = data.x_test[c.n_calibration : c.n_calibration + c.n_examples], data.y_test[c.n_calibration :][: c.n_examples]
    demo = _DetectDemo(score_model, classifier, c, device, x.shape[1:], progress)
    detector = demo.detector(x_cal)
    x_blind = demo.pgd(demo.bare, x, y)
    found = _detection(demo, x, y, x_blind, log)
    norms = {
        "natural": detector.score_norms(x),
        "adversarial (blind PGD)": detector.score_norms(x_blind),
        "pur_n (one step)": detector.score_norms(demo.one_step(x)),
        "pur_a (one step)": detector.score_norms(demo.one_step(x_blind)),
    }
    score_norm_histogram(
        run_dir / "score_norms.png",
        norms,
        threshold=detector.threshold,
        title=f"digits: score norms, blind PGD eps={c.eps:g}",
    )
    rows = _attack_rows(demo, x, y, x_blind, log)
    elapsed = time.perf_counter() - start
    lines = _markdown(c, found, rows, len(x_cal), len(x), demo.eps_step) + ["", f"time: {elapsed:.0f} s on {device}"]
    (run_dir / "detect.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))
    results = {
        "config": asdict(c),
        "threshold": detector.threshold,
        "roc_auc": found["auc"],
        "roc_auc_by_eps": {f"{e:g}": a for e, a in sorted(found["auc_by_eps"].items())},
        "fpr": found["fpr"],
        "tpr_blind": found["tpr"],
        "eps_step": demo.eps_step,
        "n_examples": len(x),
        "accuracy": {k: {m: {"accuracy": v[0], "flagged": v[1]} for m, v in row.items()} for k, row in rows.items()},
        "score_norm_quantiles": {k: np.quantile(v, [0.05, 0.5, 0.95]).tolist() for k, v in norms.items()},
        "seconds": elapsed,
        "device": str(device),
    }
    write_json(run_dir / "detect.json", results, indent=2)
    return results


class _DetectDemo:
    """The pieces every row shares: the detector, ART PGD, the purifiers and the judge."""

    def __init__(self, score_model, classifier, c: DetectConfig, device, input_shape, progress: bool) -> None:
        from art.estimators.classification import PyTorchClassifier

        self.score_model, self.classifier, self.c, self.device = score_model, classifier, c, device
        self.device_type = "gpu" if device.type == "cuda" else "cpu"
        self.art_args = dict(input_shape=input_shape, clip_values=(0.0, 1.0), device_type=self.device_type)
        self.bare = PyTorchClassifier(classifier, torch.nn.CrossEntropyLoss(), nb_classes=10, **self.art_args)
        self.eps_step = 2.5 * c.eps / c.max_iter
        self.progress = progress
        self.generator = torch.Generator(device).manual_seed(c.seed)
        self._detector: ScoreNormDetector | None = None
        self.n_calibration = 0

    def detector(self, x_cal: np.ndarray) -> ScoreNormDetector:
        """Fit the score-norm detector on the calibration digits (target false-positive rate ``fpr``)."""
        self._detector = ScoreNormDetector(self.score_model, batch_size=self.c.batch_size, device_type=self.device_type)
        self._detector.fit(x_cal, fpr=self.c.fpr)
        self.n_calibration = len(x_cal)
        return self._detector

    def pgd(self, estimator, x, y, *, eps: float | None = None, verbose: bool | None = None) -> np.ndarray:
        """ART's l_inf PGD: ``max_iter`` steps of 2.5 eps / ``max_iter``."""
        from art.attacks.evasion import ProjectedGradientDescent

        eps = self.c.eps if eps is None else eps
        attack = ProjectedGradientDescent(
            estimator,
            norm=np.inf,
            eps=eps,
            eps_step=2.5 * eps / self.c.max_iter,
            max_iter=self.c.max_iter,
            batch_size=len(x),
            verbose=self.progress if verbose is None else verbose,
        )
        return attack.generate(x, y=y)

    def one_step(self, z: np.ndarray) -> np.ndarray:
        """The histogram's "one-step purified" inputs: one adaptive step, no noise."""
        with torch.no_grad():
            return purify(self.score_model, torch.from_numpy(z).to(self.device), sigma=0.0, steps=1).cpu().numpy()

    def purifier(self, two_level: bool, gradient: str) -> ADPPurifier:
        c = self.c
        return ADPPurifier(
            self.score_model,
            sigma=c.sigma,
            steps=c.steps,
            gradient=gradient,
            batch_size=c.batch_size,
            generator=self.generator,
            detector=self._detector if two_level else None,
            beta=c.beta,
            device_type=self.device_type,
        )

    def judge(self, two_level: bool, z: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Accuracy of the S-run ensemble and the fraction of inputs flagged by the detector."""
        c = self.c
        model = DefendedModel(
            self.classifier, self.purifier(two_level, "bpda"), ensemble_size=c.ensemble_size, batch_size=c.batch_size
        )
        with torch.no_grad():  # the runs stacked and run in blocks of batch_size rows (art_adp.ensemble)
            pred = model(torch.from_numpy(z).to(self.device)).argmax(1).cpu().numpy()
        assert self._detector is not None
        return float((pred == y).mean()), float(self._detector.detect(z)[1].mean())

    def adaptive(self, attack: str, two_level: bool, x, y) -> np.ndarray:
        """The BPDA, full-gradient or detector-aware attack on one defence (EOT over the DefendedModel's draws)."""
        from art.estimators.classification import PyTorchClassifier

        c = self.c
        gradient = "bpda" if attack == "bpda" else "full"
        draws = c.eot_samples if gradient == "bpda" else c.full_eot_samples
        model = DefendedModel(self.classifier, self.purifier(two_level, gradient), ensemble_size=draws)
        if attack == "aware":
            assert self._detector is not None  # fitted first (run_detect_demo)
            head = ScoreNormHead(model, self._detector)
            est = PyTorchClassifier(head, EvadeDetectorLoss(c.kappa), nb_classes=11, **self.art_args)
        else:
            est = PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), nb_classes=10, **self.art_args)
        return self.pgd(est, x, y)


def _detection(demo: _DetectDemo, x, y, x_blind, log) -> dict:
    """ROC AUC against blind PGD (at eps and the further ``auc_eps``), measured FPR and TPR."""
    c, detector = demo.c, demo._detector
    assert detector is not None
    auc = roc_auc(detector, x, x_blind)
    _, flags_clean = detector.detect(x)
    _, flags_blind = detector.detect(x_blind)
    log(
        f"detector: tau = {detector.threshold:.4g} (fpr {c.fpr} on {demo.n_calibration} calibration digits); on "
        f"{len(x)} test digits FPR {flags_clean.mean():.3f}, TPR vs blind PGD {flags_blind.mean():.3f}, ROC AUC "
        f"{auc:.4f}"
    )
    auc_by_eps = {c.eps: auc}
    for eps in c.auc_eps:
        auc_by_eps[eps] = roc_auc(detector, x, demo.pgd(demo.bare, x, y, eps=eps, verbose=False))
    log("ROC AUC (clean vs blind PGD) by eps: " + ", ".join(f"{e:g}: {a:.4f}" for e, a in sorted(auc_by_eps.items())))
    return {
        "threshold": detector.threshold,
        "auc": auc,
        "auc_by_eps": auc_by_eps,
        "fpr": float(flags_clean.mean()),
        "tpr": float(flags_blind.mean()),
    }


def _attack_rows(demo: _DetectDemo, x, y, x_blind, log) -> dict[str, dict[str, tuple[float, float]]]:
    """Per attack row and defence: (accuracy, fraction flagged)."""
    c = demo.c
    rows: dict[str, dict[str, tuple[float, float]]] = {"Clean": {}}
    for name, two_level in (("ADP", False), ("ADP + detection", True)):
        if DEFENCES[two_level] not in c.defences:
            continue
        rows["Clean"][name] = demo.judge(two_level, x, y)
        for attack in c.attacks:
            label = {
                "blind": LABELS[BLIND_ATTACK],
                "bpda": f"BPDA PGD, EOT {c.eot_samples}",
                "full": f"full-gradient PGD, EOT {c.full_eot_samples}",
                "aware": f"detector-aware full PGD, EOT {c.full_eot_samples}, kappa {c.kappa:g}",
            }[attack]
            t0 = time.perf_counter()
            x_adv = x_blind if attack == "blind" else demo.adaptive(attack, two_level, x, y)
            rows.setdefault(label, {})[name] = demo.judge(two_level, x_adv, y)
            log(
                f"{name:16s} {label}: accuracy {100 * rows[label][name][0]:.1f} %, flagged "
                f"{100 * rows[label][name][1]:.1f} % ({time.perf_counter() - t0:.0f} s)"
            )
    return rows


def _markdown(c: DetectConfig, found: dict, rows: dict, n_cal: int, n: int, eps_step: float) -> list[str]:
    """The threat model, the detector's figures and the table, as markdown lines."""
    lines = [
        f"Threat model: l_inf eps = {c.eps:g}, ART PGD {c.max_iter} steps of {eps_step:.4g}; defence sigma = "
        f"{c.sigma:g}, T = {c.steps} adaptive steps, S = {c.ensemble_size} runs judged; detection: beta = "
        f"{c.beta:g}, tau = {found['threshold']:.4g} (FPR target {c.fpr:g} on {n_cal} held-out digits); {n} test "
        "digits.",
        "",
        f"Detector: ROC AUC {found['auc']:.4f} (clean vs blind PGD); measured FPR {100 * found['fpr']:.1f} %, "
        f"TPR {100 * found['tpr']:.1f} %. ROC AUC by eps: "
        + ", ".join(f"{e:g}: {a:.3f}" for e, a in sorted(found["auc_by_eps"].items()))
        + ".",
        "",
    ]
    table = []
    for label, row in rows.items():
        a, d = row.get("ADP", (np.nan, np.nan)), row.get("ADP + detection", (np.nan, np.nan))
        table.append([label, accuracy_cell(a[0]), accuracy_cell(d[0]), f"{100 * a[1]:.0f} % / {100 * d[1]:.0f} %"])
    head = ["Attack", "ADP", "ADP + detection", "flagged by the detector (vs ADP / vs detection)"]
    return lines + markdown_table(head, table)
