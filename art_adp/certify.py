"""Certified robustness of the ADP-smoothed classifier by randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019,
https://arxiv.org/abs/1902.02918), as in ADP's "Evaluation: certified robustness" (https://arxiv.org/abs/2106.06041).

The smoothed classifier is f(x) = argmax_c P(g(x + ε) = c), ε ~ N(0, σ²I), with the base classifier
g = classifier ∘ ADP purification (ADP's own noise set to 0: the smoothing noise *is* ADP's noise injection,
x₀ = clip(x + σε)). Whatever g is, f's prediction cannot change within the ℓ₂ radius σ Φ⁻¹(p_A) when
P(g(x + ε) = c_A) ≥ p_A ≥ ½.

- :func:`certify`: Cohen et al.'s CERTIFY -- n₀ samples pick c_A, n fresh samples give a one-sided
  Clopper–Pearson lower bound p_A_lower at level α (``scipy.stats.binomtest(...).proportion_ci``, "exact"), then
  radius σ Φ⁻¹(p_A_lower), or abstain when p_A_lower < ½. With probability ≥ 1 − α over the sampling, a
  returned (class, radius) is correct.
- :func:`certify_approximate`: the ADP paper's *approximate* figure: 100 samples, the top two empirical
  frequencies p_A, p_B and R = σ/2 (Φ⁻¹(p_A) − Φ⁻¹(p_B)). A plug-in estimate with no confidence level:
  **not a certificate**; kept to compare with the paper.

When to use which, and ART's ``PyTorchRandomizedSmoothing`` (which can host ADP as a denoiser): see
``docs/detect_certify.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.stats import binomtest, norm
from tqdm.auto import tqdm

from ._checks import number, positive_int, probability
from .defended import DefendedModel
from .preprocessor import ADPPurifier

__all__ = [
    "Certificate",
    "certify",
    "certify_approximate",
    "approximate_radius",
    "certified_accuracy",
    "adp_base_classifier",
    "run_certify",
]


@dataclass(frozen=True)
class Certificate:
    """
    Per-input results of :func:`certify` or :func:`certify_approximate`.

    :param prediction: ``N`` int64 classes of the smoothed classifier, ``-1`` where it abstained.
    :param radius: ``N`` ℓ₂ radii (0 where abstained).
    :param p_a: ``N`` values: the Clopper–Pearson lower bound p_A_lower (:func:`certify`) or the empirical p_A
        (:func:`certify_approximate`).
    :param counts: ``N×K`` class counts of the estimation samples.
    :param sigma: The smoothing noise σ.
    :param approximate: ``True`` for the paper's plug-in estimate, which certifies nothing.
    :param selection_counts: ``N×K`` class counts of CERTIFY's n₀ selection draws (``None`` for the approximate
        variant); with n₀ = 100 they also give the paper's approximate radius (:func:`approximate_radius`).
    """

    prediction: np.ndarray
    radius: np.ndarray
    p_a: np.ndarray
    counts: np.ndarray
    sigma: float
    approximate: bool
    selection_counts: np.ndarray | None = None


def _check(model, x, sigma, n0, n, alpha, batch_size) -> None:
    if not callable(model):
        raise ValueError(f"model must map N×C×H×W inputs to N×K logits, got {type(model).__name__}.")
    if not isinstance(x, torch.Tensor) or not torch.is_floating_point(x) or x.ndim < 2:
        raise ValueError(f"x must be a floating-point N×C×H×W tensor, got {type(x).__name__}.")
    number("sigma", sigma, low=0, low_open=True)  # the smoothing noise
    for name, value in (("n0", n0), ("n", n), ("batch_size", batch_size)):
        positive_int(name, value)
    if n0 > n:
        raise ValueError(
            f"n0 (samples to select the class, {n0}) must not exceed n (samples to estimate its "
            f"probability, {n}); Cohen et al. use n0=100, n=100000."
        )
    probability("alpha", alpha)  # the failure probability, e.g. 0.001


def _counts(model, x: torch.Tensor, num: int, sigma: float, batch_size: int, generator) -> torch.Tensor:
    """Class counts of ``model`` on ``num`` draws of ``x + σε`` (one input ``C×H×W``), ``batch_size`` at a time."""
    counts = None
    device = x.device if generator is None else generator.device
    for start in range(0, num, batch_size):
        b = min(batch_size, num - start)
        noise = torch.randn((b, *x.shape), generator=generator, device=device).to(x)
        logits = model(x.unsqueeze(0) + sigma * noise)
        pred = logits.argmax(1)
        chunk = torch.bincount(pred, minlength=logits.shape[1]).cpu()
        counts = chunk if counts is None else counts + chunk
    if counts is None:
        raise ValueError(f"num (the number of noise draws) must be >= 1, got {num}.")
    return counts


def certify(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    sigma: float,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> Certificate:
    """
    Cohen et al.'s CERTIFY for each input: c_A = the most frequent class of ``model(x + σε)`` over ``n0`` draws;
    p_A_lower = one-sided (1 − α) Clopper–Pearson lower bound on P(model(x + σε) = c_A) from ``n`` fresh draws;
    radius σ Φ⁻¹(p_A_lower) if p_A_lower ≥ ½, else abstain.

    | Paper link: https://arxiv.org/abs/1902.02918 (Cohen, Rosenfeld & Kolter 2019, Algorithm "CERTIFY")

    :param model: The base classifier g: ``B×C×H×W`` noisy inputs → ``B×K`` scores (argmax = class), e.g.
        :func:`adp_base_classifier`. Must treat samples independently.
    :param x: ``N×C×H×W`` inputs (clean, in the model's range).
    :param sigma: The smoothing noise σ > 0.
    :param n0: Selection samples (≥ 1, ≤ n).
    :param n: Estimation samples.
    :param alpha: Failure probability α in (0, 1).
    :param batch_size: Noisy samples per forward pass.
    :param generator: Source of the noise (default: torch's global generator); on ``x``'s device.
    :param progress: Show a progress bar over inputs.
    :return: A :class:`Certificate`.
    """
    _check(model, x, sigma, n0, n, alpha, batch_size)
    predictions, radii, lowers, all_counts, selection = [], [], [], [], []
    with torch.no_grad():
        for xi in tqdm(x, desc=f"certify sigma={sigma:g}", disable=not progress):
            selection.append(_counts(model, xi, n0, sigma, batch_size, generator).numpy())
            c_a = int(selection[-1].argmax())
            counts = _counts(model, xi, n, sigma, batch_size, generator)
            p_lower = binomtest(int(counts[c_a]), n).proportion_ci(1 - 2 * alpha, method="exact").low
            abstain = p_lower < 0.5
            predictions.append(-1 if abstain else c_a)
            radii.append(0.0 if abstain else sigma * float(norm.ppf(p_lower)))
            lowers.append(p_lower)
            all_counts.append(counts.numpy())
    return Certificate(
        np.array(predictions, dtype=np.int64),
        np.array(radii),
        np.array(lowers),
        np.array(all_counts),
        float(sigma),
        approximate=False,
        selection_counts=np.array(selection),
    )


def certify_approximate(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    sigma: float,
    n: int = 100,
    batch_size: int = 1000,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> Certificate:
    """
    The ADP paper's *approximate* certified radius (its Figure "Approximate certified accuracy"): from ``n`` draws,
    the top two empirical class frequencies p_A ≥ p_B give R = σ/2 (Φ⁻¹(p_A) − Φ⁻¹(p_B)) for the top class.

    Not a certificate: no confidence level, never abstains. Frequencies are clamped to [1/(2n), 1 − 1/(2n)] (half a
    count) so that unanimous draws give a finite radius, at most σ Φ⁻¹(1 − 1/(2n)) (2.58σ at n = 100).

    :param model: The base classifier, as for :func:`certify`.
    :param x: ``N×C×H×W`` inputs.
    :param sigma: The smoothing noise σ > 0.
    :param n: Draws per input (the paper: 100).
    :param batch_size: Noisy samples per forward pass.
    :param generator: Source of the noise.
    :param progress: Show a progress bar.
    :return: A :class:`Certificate` with ``approximate=True`` and the empirical p_A in ``p_a``.
    """
    _check(model, x, sigma, 1, n, 0.5, batch_size)
    with torch.no_grad():
        counts = [
            _counts(model, xi, n, sigma, batch_size, generator).numpy()
            for xi in tqdm(x, desc=f"approximate certify sigma={sigma:g}", disable=not progress)
        ]
    return approximate_radius(np.array(counts), sigma)


def approximate_radius(counts: np.ndarray, sigma: float) -> Certificate:
    """
    The paper's approximate radius from class counts (see :func:`certify_approximate`), e.g. from
    ``Certificate.selection_counts`` of a :func:`certify` run with n₀ = 100.

    :param counts: ``N×K`` class counts of n draws each.
    :param sigma: The smoothing noise σ.
    :return: A :class:`Certificate` with ``approximate=True``.
    """
    counts = np.asarray(counts)
    n = counts.sum(1)
    order = np.argsort(-counts, axis=1, kind="stable")
    rows = np.arange(len(counts))
    p_a = counts[rows, order[:, 0]] / n
    p_b = counts[rows, order[:, 1]] / n if counts.shape[1] > 1 else np.zeros(len(counts))
    lo, hi = 0.5 / n, 1 - 0.5 / n
    radius = sigma / 2 * (norm.ppf(np.clip(p_a, lo, hi)) - norm.ppf(np.clip(p_b, lo, hi)))
    return Certificate(order[:, 0].astype(np.int64), radius, p_a, counts, float(sigma), approximate=True)


def certified_accuracy(certificate: Certificate, y: np.ndarray, radii: Sequence[float] | np.ndarray) -> np.ndarray:
    """
    Certified accuracy at each radius r: the fraction of inputs predicted correctly with radius ≥ r.

    :param certificate: From :func:`certify` (or :func:`certify_approximate`).
    :param y: ``N`` true labels.
    :param radii: ℓ₂ radii.
    :return: One accuracy in [0, 1] per radius.
    """
    y = np.asarray(y)
    correct = certificate.prediction == y
    return np.array([float(np.mean(correct & (certificate.radius >= r))) for r in radii])


def adp_base_classifier(classifier: torch.nn.Module, score_model: torch.nn.Module, **purifier_kwargs) -> DefendedModel:
    """
    The base classifier g of ADP smoothing: ``classifier(purify(clip(x')))`` for a noisy input x' = x + σε, i.e.
    ``DefendedModel(classifier, ADPPurifier(score_model, sigma=0, clip_inputs=True, ...), nb_samples=1)``. The
    smoothing noise is ADP's noise injection, so ADP's own σ is 0; the purification steps follow ``purifier_kwargs``.

    :param classifier: ``N×C×H×W`` → ``N×K`` logits.
    :param score_model: The score network h.
    :param purifier_kwargs: Further :class:`~art_adp.ADPPurifier` settings (steps, step_size, ..., batch_size).
    :return: An ``nn.Module`` returning log-probabilities.
    """
    for name in ("sigma", "clip_inputs", "detector"):
        if name in purifier_kwargs:
            raise ValueError(f"adp_base_classifier sets {name} itself (the smoothing noise replaces ADP's); drop it.")
    purifier = ADPPurifier(score_model, sigma=0.0, clip_inputs=True, **purifier_kwargs)
    return DefendedModel(classifier, purifier, nb_samples=1).eval()


def _read_records(path: Path) -> dict[int, dict]:
    """Complete records of a certification JSONL file by input index (a line cut short by an interruption is
    ignored here and cut off before the next append)."""
    from .evaluation.records import read_jsonl

    return {record["index"]: record for record in read_jsonl(path)}


def run_certify(
    run_dir: str | Path,
    model_for_sigma: Callable[[float], Callable],
    x: torch.Tensor,
    y: np.ndarray,
    *,
    sigmas: Sequence[float] = (0.12, 0.25, 0.5),
    n0: int = 100,
    n: int = 1000,
    alpha: float = 0.001,
    n_approximate: int = 100,
    radii: Sequence[float] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0),
    batch_size: int = 1000,
    seed: int = 0,
    progress: bool = True,
    settings: dict | None = None,
) -> dict:
    """
    Certify every input of ``x`` at each σ (CERTIFY and the approximate variant), writing one JSON line per input
    to ``run_dir/certify_sigma{σ}.jsonl`` as it finishes, so an interrupted run resumes where it stopped (input i
    always draws its noise from a generator seeded by ``(seed, i)``); then ``certify.json``, ``certify.md`` (the
    certified-accuracy table) and ``certify.png`` (the curves). ``certify_settings.json`` records n₀, n, α, the
    approximate variant's n and the seed; resuming with other settings raises. When ``n_approximate == n0`` the
    approximate radius comes from CERTIFY's n₀ selection draws (no extra samples; the paper's variant uses 100 draws).

    :param run_dir: Output folder.
    :param model_for_sigma: σ → base classifier (e.g. ``lambda s: adp_base_classifier(clf, score)``).
    :param x: ``N×C×H×W`` inputs; ``y``: their ``N`` labels.
    :param settings: Further settings that change the certificates (e.g. the checkpoints' SHA-256, the purification
        steps), stored and compared with n₀, n, α, the approximate n and the seed.
    :return: ``{"table": {σ: {"certify": [...], "approximate": [...]}}, "radii": [...], ...}``.
    """
    from .plots import certified_accuracy_curve

    for sigma in sigmas:
        _check(lambda z: z, x, sigma, n0, n, alpha, batch_size)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from .evaluation.records import append_records, describe_differences

    settings = {**(settings or {}), "n0": n0, "n": n, "alpha": alpha, "n_approximate": n_approximate, "seed": seed}
    settings = json.loads(json.dumps(settings))  # as stored (tuples become lists)
    settings_path = run_dir / "certify_settings.json"
    if settings_path.exists():
        stored = json.loads(settings_path.read_text())
        if stored != settings:
            raise ValueError(
                f"{run_dir} holds certificates made with other settings: "
                f"{describe_differences(stored, settings)}. Use another run directory, or the same "
                "settings to resume."
            )
    settings_path.write_text(json.dumps(settings))
    y = np.asarray(y)
    table, curves = {}, {}
    for sigma in sigmas:
        model = model_for_sigma(sigma)
        path = run_dir / f"certify_sigma{sigma:g}.jsonl"
        records = _read_records(path)
        todo = [i for i in range(len(x)) if i not in records]
        for i in tqdm(todo, desc=f"certify sigma={sigma:g} ({len(records)} done)", disable=not progress):
            gen = torch.Generator(x.device).manual_seed(seed * 1_000_003 + i)
            exact = certify(
                model,
                x[i : i + 1],
                sigma=sigma,
                n0=n0,
                n=n,
                alpha=alpha,
                batch_size=batch_size,
                generator=gen,
                progress=False,
            )
            # the selection draws double as the paper's approximate estimate
            if n_approximate == n0 and exact.selection_counts is not None:
                approx = approximate_radius(exact.selection_counts, sigma)
            else:
                approx = certify_approximate(
                    model,
                    x[i : i + 1],
                    sigma=sigma,
                    n=n_approximate,
                    batch_size=batch_size,
                    generator=gen,
                    progress=False,
                )
            record = {
                "index": i,
                "label": int(y[i]),
                "prediction": int(exact.prediction[0]),
                "radius": float(exact.radius[0]),
                "p_a_lower": float(exact.p_a[0]),
                "approx_prediction": int(approx.prediction[0]),
                "approx_radius": float(approx.radius[0]),
            }
            append_records(path, [record])
            records[i] = record
        rec = [records[i] for i in range(len(x))]
        exact = Certificate(
            np.array([r["prediction"] for r in rec]),
            np.array([r["radius"] for r in rec]),
            np.array([r["p_a_lower"] for r in rec]),
            np.zeros((len(rec), 0)),
            sigma,
            False,
        )
        approx = Certificate(
            np.array([r["approx_prediction"] for r in rec]),
            np.array([r["approx_radius"] for r in rec]),
            np.zeros(len(rec)),
            np.zeros((len(rec), 0)),
            sigma,
            True,
        )
        grid = np.linspace(0, max(radii[-1], 2.6 * max(sigmas)), 200)
        curves[f"{sigma:g}"] = {
            "CERTIFY": (grid, certified_accuracy(exact, y, grid)),
            "approximate": (grid, certified_accuracy(approx, y, grid)),
        }
        table[f"{sigma:g}"] = {
            "certify": certified_accuracy(exact, y, radii).tolist(),
            "approximate": certified_accuracy(approx, y, radii).tolist(),
            "abstained": int(np.sum(exact.prediction == -1)),
        }
    header = "| σ | variant | " + " | ".join(f"r = {r:g}" for r in radii) + " |"
    lines = [header, "|---|---|" + "---|" * len(radii)]
    for sigma_key, row in table.items():
        lines.append(
            f"| {sigma_key} | CERTIFY (n0={n0}, n={n}, α={alpha:g}) | "
            + " | ".join(f"{100 * a:.1f}" for a in row["certify"])
            + " |"
        )
        lines.append(
            f"| {sigma_key} | approximate (n={n_approximate}, not a certificate) | "
            + " | ".join(f"{100 * a:.1f}" for a in row["approximate"])
            + " |"
        )
    (run_dir / "certify.md").write_text("\n".join(lines) + "\n")
    certified_accuracy_curve(
        run_dir / "certify.png", curves, title=f"ADP-smoothed classifier, {len(x)} inputs, n0={n0}, n={n}, α={alpha:g}"
    )
    results = {
        "table": table,
        "radii": list(radii),
        "n0": n0,
        "n": n,
        "alpha": alpha,
        "n_approximate": n_approximate,
        "n_examples": len(x),
        "seed": seed,
    }
    (run_dir / "certify.json").write_text(json.dumps(results, indent=2))
    return results
