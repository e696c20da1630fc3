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
``docs/detect_certify.md``. Denoised smoothing with a diffusion model (Carlini et al. 2023; one denoiser call at
the smoothing level) is the base classifier :func:`denoised_smoothing_classifier`, certified by the same
:func:`certify`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import binomtest, norm
from tqdm.auto import tqdm

from ._checks import number, positive_int, probability
from .defended import DefendedModel
from .diffusion_preprocessor import DenoisedSmoothingPurifier
from .preprocessor import ADPPurifier

__all__ = [
    "Certificate",
    "certify",
    "certify_approximate",
    "approximate_radius",
    "certified_accuracy",
    "adp_base_classifier",
    "denoised_smoothing_classifier",
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
    ``DefendedModel(classifier, ADPPurifier(score_model, sigma=0, clip_inputs=True, ...), ensemble_size=1)``. The
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
    return DefendedModel(classifier, purifier, ensemble_size=1).eval()


def denoised_smoothing_classifier(
    classifier: torch.nn.Module, model: torch.nn.Module, *, sigma: float, **purifier_kwargs
) -> DefendedModel:
    """
    The base classifier g of denoised smoothing (Carlini et al. 2023, https://arxiv.org/abs/2206.10550): for a noisy
    input x' = x + σε, ``classifier(clip(D(x', σ)))``, one call of the diffusion model's denoiser at the smoothing
    level, i.e. ``DefendedModel(classifier, DenoisedSmoothingPurifier(model, sigma=σ, add_noise=False),
    ensemble_size=1)``. Certify it with :func:`certify` at the same ``sigma``.

    :param classifier: ``N×C×H×W`` → ``N×K`` logits.
    :param model: The diffusion model: a ``VPScore``, an ``EDMScore`` or a ``DenoiserUNet``.
    :param sigma: The smoothing noise σ > 0 (pixels): the level the denoiser is called at.
    :param purifier_kwargs: Further :class:`~art_adp.DenoisedSmoothingPurifier` settings (clip_values, batch_size, ...).
    :return: An ``nn.Module`` returning log-probabilities.
    """
    if "add_noise" in purifier_kwargs:
        raise ValueError("denoised_smoothing_classifier sets add_noise=False itself (certify adds the noise); drop it.")
    purifier = DenoisedSmoothingPurifier(model, sigma=sigma, add_noise=False, **purifier_kwargs)
    return DefendedModel(classifier, purifier, ensemble_size=1).eval()
