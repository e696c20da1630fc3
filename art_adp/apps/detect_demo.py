"""Score-norm detection and detection-driven ADP on digits: ROC AUC, the score-norm histogram, and clean / robust
accuracy of two-level ADP against plain ADP under attacks that see through the detector.

Data: the score model and classifier of the digits demo; the first ``n_calibration`` test digits choose the
detector's threshold (target false-positive rate ``fpr``), the next ``n_examples`` are evaluated.

Attacks (ART's ``ProjectedGradientDescent``, ℓ∞, unchanged), each run against each defence:

- ``blind``: PGD on the bare classifier (preprocessor-blind), judged on the defence.
- ``bpda``: BPDA through the defence (``gradient="bpda"``), EOT over ``eot`` purifications per step (the loss of
  their averaged probabilities).
- ``full``: the exact gradient through purification (``gradient="full"``), EOT over ``full_eot`` purifications.
  Through the two-level defence each sample's gradient is the one through the branch (σ or βσ) it takes.
- ``aware``: ``full`` plus knowledge of the detector: the loss also rewards a score norm below 0.9·τ
  (``- kappa · relu(‖h(x)‖₂ − 0.9τ)``), steering inputs into the weak βσ branch. On plain ADP it is ``full``
  with a score-norm penalty.

Robust accuracy is judged on the whole stochastic defence: the ``runs``-purification ensemble (paper eq. 12).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import load_digits
from ..defended import DefendedModel
from ..attacks.evade_detector import EvadeDetectorLoss
from ..attacks.registry import LABELS
from ..detect import ScoreNormDetector, ScoreNormHead, roc_auc
from .plots import score_norm_histogram
from ..preprocessor import ADPPurifier
from ..purify import DEFAULTS, purify

__all__ = ["DetectConfig", "run_detect_demo", "EvadeDetectorLoss", "ScoreNormHead"]

ATTACKS = ("blind", "bpda", "full", "aware")
DEFENCES = ("plain", "two-level")


@dataclass(frozen=True)
class DetectConfig:
    """Settings of :func:`run_detect_demo` (defaults: the digits demo's threat model)."""

    eps: float = 0.175
    pgd_steps: int = 10
    sigma: float = DEFAULTS.sigma
    steps: int = DEFAULTS.steps  # T, purification steps
    beta: float = 0.2
    fpr: float = 0.05
    runs: int = 10
    eot: int = 4
    full_eot: int = 2
    kappa: float = 5.0
    n_calibration: int = 100
    n_examples: int = 200
    attacks: tuple[str, ...] = ATTACKS
    defences: tuple[str, ...] = DEFENCES  # plain ADP, detection-driven two-level ADP
    auc_eps: tuple[float, ...] = (0.02, 0.05, 0.1)  # further radii for the ROC AUC of blind PGD
    batch_size: int = 1024
    seed: int = 0


def run_detect_demo(
    run_dir: str | Path,
    score_model: torch.nn.Module,
    classifier: torch.nn.Module,
    config: DetectConfig = DetectConfig(),
    *,
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
    from art.attacks.evasion import ProjectedGradientDescent
    from art.estimators.classification import PyTorchClassifier

    c = config
    unknown = sorted(set(c.attacks) - set(ATTACKS))
    if unknown:
        raise ValueError(f"Unknown attack(s) {unknown}; choose from {ATTACKS}.")
    unknown = sorted(set(c.defences) - set(DEFENCES))
    if unknown:
        raise ValueError(f"Unknown defence(s) {unknown}; choose from {DEFENCES}.")
    start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    device_type = "gpu" if device.type == "cuda" else "cpu"
    score_model, classifier = score_model.to(device).eval(), classifier.to(device).eval()
    data = load_digits(seed=c.seed)
    x_cal = data.x_test[: c.n_calibration]
    x, y = data.x_test[c.n_calibration : c.n_calibration + c.n_examples], data.y_test[c.n_calibration :][: c.n_examples]

    detector = ScoreNormDetector(score_model, batch_size=c.batch_size, device_type=device_type)
    detector.fit(x_cal, fpr=c.fpr)
    tau = detector.threshold

    art_args = dict(input_shape=x.shape[1:], clip_values=(0.0, 1.0), device_type=device_type)
    bare = PyTorchClassifier(classifier, torch.nn.CrossEntropyLoss(), nb_classes=10, **art_args)
    eps_step = 2.5 * c.eps / c.pgd_steps
    pgd = dict(norm=np.inf, eps=c.eps, eps_step=eps_step, max_iter=c.pgd_steps, batch_size=len(x), verbose=progress)
    x_blind = ProjectedGradientDescent(bare, **pgd).generate(x, y=y)

    auc = roc_auc(detector, x, x_blind)
    _, flags_clean = detector.detect(x)
    _, flags_blind = detector.detect(x_blind)
    log(
        f"detector: tau = {tau:.4g} (fpr {c.fpr} on {len(x_cal)} calibration digits); on {len(x)} test digits "
        f"FPR {flags_clean.mean():.3f}, TPR vs blind PGD {flags_blind.mean():.3f}, ROC AUC {auc:.4f}"
    )

    def one_step(z):  # the histogram's "one-step purified" inputs: one adaptive step, no noise
        with torch.no_grad():
            return purify(score_model, torch.from_numpy(z).to(device), sigma=0.0, steps=1).cpu().numpy()

    auc_by_eps = {c.eps: auc}
    for eps in c.auc_eps:
        steps = {**pgd, "eps": eps, "eps_step": 2.5 * eps / c.pgd_steps, "verbose": False}
        auc_by_eps[eps] = roc_auc(detector, x, ProjectedGradientDescent(bare, **steps).generate(x, y=y))
    log("ROC AUC (clean vs blind PGD) by eps: " + ", ".join(f"{e:g}: {a:.4f}" for e, a in sorted(auc_by_eps.items())))

    norms = {
        "natural": detector.score_norms(x),
        "adversarial (blind PGD)": detector.score_norms(x_blind),
        "pur_n (one step)": detector.score_norms(one_step(x)),
        "pur_a (one step)": detector.score_norms(one_step(x_blind)),
    }
    score_norm_histogram(
        run_dir / "score_norms.png", norms, threshold=tau, title=f"digits: score norms, blind PGD eps={c.eps:g}"
    )

    gen = torch.Generator(device).manual_seed(c.seed)

    def purifier(two_level: bool, gradient: str) -> ADPPurifier:
        return ADPPurifier(
            score_model,
            sigma=c.sigma,
            steps=c.steps,
            gradient=gradient,
            batch_size=c.batch_size,
            generator=gen,
            detector=detector if two_level else None,
            beta=c.beta,
            device_type=device_type,
        )

    def judge(two_level: bool, z: np.ndarray) -> tuple[float, float]:
        model = DefendedModel(classifier, purifier(two_level, "bpda"), ensemble_size=c.runs, batch_size=c.batch_size)
        with torch.no_grad():  # the runs stacked and run in blocks of batch_size rows (art_adp.ensemble)
            pred = model(torch.from_numpy(z).to(device)).argmax(1).cpu().numpy()
        return float((pred == y).mean()), float(detector.detect(z)[1].mean())

    rows: dict[str, dict[str, tuple[float, float]]] = {"Clean": {}}
    for name, two_level in (("ADP", False), ("ADP + detection", True)):
        if DEFENCES[two_level] not in c.defences:
            continue
        rows["Clean"][name] = judge(two_level, x)
        for attack in c.attacks:
            label = {
                "blind": LABELS["clf-pgd"],
                "bpda": f"BPDA PGD, EOT {c.eot}",
                "full": f"full-gradient PGD, EOT {c.full_eot}",
                "aware": f"detector-aware full PGD, EOT {c.full_eot}, kappa {c.kappa:g}",
            }[attack]
            t0 = time.perf_counter()
            if attack == "blind":
                x_adv = x_blind
            else:
                grad = "bpda" if attack == "bpda" else "full"
                eot = c.eot if grad == "bpda" else c.full_eot
                model = DefendedModel(classifier, purifier(two_level, grad), ensemble_size=eot)
                if attack == "aware":
                    est = PyTorchClassifier(
                        ScoreNormHead(model, detector), EvadeDetectorLoss(c.kappa), nb_classes=11, **art_args
                    )
                else:
                    est = PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), nb_classes=10, **art_args)
                x_adv = ProjectedGradientDescent(est, **pgd).generate(x, y=y)
            rows.setdefault(label, {})[name] = judge(two_level, x_adv)
            log(
                f"{name:16s} {label}: accuracy {100 * rows[label][name][0]:.1f} %, flagged "
                f"{100 * rows[label][name][1]:.1f} % ({time.perf_counter() - t0:.0f} s)"
            )

    lines = [
        f"Threat model: l_inf eps = {c.eps:g}, ART PGD {c.pgd_steps} steps of {eps_step:.4g}; defence sigma = "
        f"{c.sigma:g}, T = {c.steps} adaptive steps, S = {c.runs} runs judged; detection: beta = {c.beta:g}, "
        f"tau = {tau:.4g} (FPR target {c.fpr:g} on {len(x_cal)} held-out digits); {len(x)} test digits.",
        "",
        f"Detector: ROC AUC {auc:.4f} (clean vs blind PGD); measured FPR {100 * flags_clean.mean():.1f} %, "
        f"TPR {100 * flags_blind.mean():.1f} %. ROC AUC by eps: "
        + ", ".join(f"{e:g}: {a:.3f}" for e, a in sorted(auc_by_eps.items()))
        + ".",
        "",
        "| Attack | ADP | ADP + detection | flagged by the detector (vs ADP / vs detection) |",
        "|---|---|---|---|",
    ]
    for label, row in rows.items():
        a, d = row.get("ADP", (np.nan, np.nan)), row.get("ADP + detection", (np.nan, np.nan))
        lines.append(f"| {label} | {100 * a[0]:.1f} | {100 * d[0]:.1f} | {100 * a[1]:.0f} % / {100 * d[1]:.0f} % |")
    elapsed = time.perf_counter() - start
    lines += ["", f"time: {elapsed:.0f} s on {device}"]
    (run_dir / "detect.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))
    results = {
        "config": asdict(c),
        "threshold": tau,
        "roc_auc": auc,
        "roc_auc_by_eps": {f"{e:g}": a for e, a in sorted(auc_by_eps.items())},
        "fpr": float(flags_clean.mean()),
        "tpr_blind": float(flags_blind.mean()),
        "eps_step": eps_step,
        "n_examples": len(x),
        "accuracy": {k: {m: {"accuracy": v[0], "flagged": v[1]} for m, v in row.items()} for k, row in rows.items()},
        "score_norm_quantiles": {k: np.quantile(v, [0.05, 0.5, 0.95]).tolist() for k, v in norms.items()},
        "seconds": elapsed,
        "device": str(device),
    }
    (run_dir / "detect.json").write_text(json.dumps(results, indent=2))
    return results
