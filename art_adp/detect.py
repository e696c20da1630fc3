"""Detecting adversarial inputs by the norm of the score, ‖h(x)‖₂ (ADP, Yoon, Hwang & Lee, ICML 2021, appendix
"Detecting adversarial examples before purification", https://arxiv.org/abs/2106.06041).

Adversarial perturbations push images off the data manifold, where the learned score is large; natural images
sit where it is small. :class:`ScoreNormDetector` flags an input as attacked when ‖h(x)‖₂ exceeds a threshold,
chosen by :meth:`ScoreNormDetector.fit` for a target false-positive rate on clean data (the paper fixes
τ = 25 for CIFAR; that is one setting, not a constant here). Given to
``ADPPurifier(..., detector=...)`` it drives the paper's two-level noise: σ for flagged inputs, βσ for the
others.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from art.defences.detector.evasion import EvasionDetector

from ._checks import number, positive_int, probability
from .purification import check_images

__all__ = ["ScoreNormDetector", "ScoreNormHead", "score_norms", "roc_auc"]


def score_norms(score_model: torch.nn.Module, x: torch.Tensor, *, batch_size: int = 256) -> torch.Tensor:
    """
    ‖h(x)‖₂ per input, without gradients.

    :param score_model: The noise-level-free score network h: ``N×C×H×W`` → same shape.
    :param x: ``N×C×H×W`` inputs on the score model's device.
    :param batch_size: Inputs per forward pass.
    :return: ``N`` float tensor of score norms, on ``x``'s device.
    """
    if len(x) == 0:
        return x.new_zeros(0)
    with torch.no_grad():
        return torch.cat([score_model(chunk).flatten(1).norm(dim=1) for chunk in x.split(batch_size)])


class ScoreNormDetector(EvasionDetector):
    """
    Flags inputs whose score norm ‖h(x)‖₂ exceeds ``threshold`` as attacked (an ART ``EvasionDetector``).

    | Paper link: https://arxiv.org/abs/2106.06041 (appendix, "Detecting adversarial examples before purification")

    ``detect(x)`` returns ``(report, flags)``: ``report = {"score_norms": N floats, "threshold": float}`` and
    ``flags`` a boolean array, ``True`` = attacked. ``fit(x_clean, fpr=0.05)`` sets the threshold so that at most
    a fraction ``fpr`` of ``x_clean`` is flagged. :meth:`flag` is the same test on tensors, used by
    ``ADPPurifier(..., detector=self)``; it is a hard threshold and passes no gradient.
    """

    defence_params = ["threshold", "batch_size", "clip_values"]

    def __init__(
        self,
        score_model: torch.nn.Module,
        threshold: float | None = None,
        *,
        batch_size: int = 256,
        clip_values: tuple[float, float] = (0.0, 1.0),
        device_type: str = "gpu",
    ) -> None:
        """
        :param score_model: Noise-level-free score network h (usually the purifier's); put in eval mode and
            frozen, moved to the device.
        :param threshold: τ on ‖h(x)‖₂ (inputs above it are flagged), or ``None`` until :meth:`fit` sets it.
        :param batch_size: Inputs per forward pass.
        :param clip_values: ``(min, max)`` of valid inputs (inputs far outside are refused, as by ``purify``).
        :param device_type: ``"gpu"`` (CUDA when available, else CPU) or ``"cpu"``.
        """
        super().__init__()
        if not isinstance(score_model, torch.nn.Module):
            raise ValueError(f"score_model must be a torch.nn.Module, got {type(score_model).__name__}.")
        if device_type not in ("gpu", "cpu"):
            raise ValueError(f"device_type must be 'gpu' or 'cpu', got {device_type!r}.")
        use_cuda = device_type == "gpu" and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.score_model = score_model.to(self.device).eval().requires_grad_(False)
        self.threshold = threshold
        self.batch_size = batch_size
        self.clip_values = clip_values
        self._check_params()

    def _check_params(self) -> None:
        number("threshold", self.threshold, optional=True)
        positive_int("batch_size", self.batch_size)
        if len(self.clip_values) != 2 or not self.clip_values[0] < self.clip_values[1]:
            raise ValueError(f"clip_values must be (min, max) with min < max, got {self.clip_values!r}.")

    def score_norms(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """
        :param x: ``N×C×H×W`` inputs in ``clip_values`` (numpy or torch).
        :return: ``N`` score norms ‖h(x)‖₂ (float64 numpy).
        """
        xt = torch.as_tensor(x)
        check_images(xt, self.clip_values)
        xt = xt.to(self.device, torch.float32).clamp(*self.clip_values)
        return score_norms(self.score_model, xt, batch_size=self.batch_size).cpu().double().numpy()

    def flag(self, x: torch.Tensor) -> torch.Tensor:
        """
        The detection test on a tensor: ``‖h(x)‖₂ > threshold``, no gradient.

        :param x: ``N×C×H×W`` inputs in ``clip_values``.
        :return: ``N`` bool tensor on ``x``'s device, ``True`` = attacked.
        """
        threshold = self._require_threshold()
        check_images(x, self.clip_values)
        xd = x.detach().to(self.device, torch.float32).clamp(*self.clip_values)
        return (score_norms(self.score_model, xd, batch_size=self.batch_size) > threshold).to(x.device)

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray | None = None,
        batch_size: int = 128,
        nb_epochs: int = 0,
        *,
        fpr: float = 0.05,
        **kwargs,
    ) -> None:
        """
        Choose the threshold for a target false-positive rate on clean inputs: the ⌊n·fpr⌋ + 1-th largest score
        norm of ``x``, so at most ⌊n·fpr⌋ of the n clean inputs (a fraction ≤ ``fpr``) lie above it (fewer if
        norms tie). Nothing is trained.

        :param x: Clean inputs ``N×C×H×W`` (held-out data, not the data you will report the rate on).
        :param y: Unused (ART's signature).
        :param batch_size: Unused (the detector's ``batch_size`` applies).
        :param nb_epochs: Unused.
        :param fpr: Target false-positive rate in (0, 1).
        """
        probability("fpr", fpr)
        norms = np.sort(self.score_norms(x))
        if len(norms) == 0:
            raise ValueError("fit needs at least one clean input.")
        allowed = math.floor(len(norms) * fpr)
        self.threshold = float(norms[len(norms) - 1 - allowed])

    def detect(self, x: np.ndarray, batch_size: int = 128, **kwargs) -> tuple[dict[str, Any], np.ndarray]:
        """
        :param x: Inputs ``N×C×H×W`` in ``clip_values``.
        :param batch_size: Unused (the detector's ``batch_size`` applies).
        :return: ``(report, flags)``: ``report = {"score_norms": N floats, "threshold": τ}``; ``flags`` an ``N``
            bool array, ``True`` where ‖h(x)‖₂ > τ (attacked).
        """
        self._require_threshold()
        norms = self.score_norms(x)
        return {"score_norms": norms, "threshold": self.threshold}, norms > self.threshold

    def _require_threshold(self) -> float:
        if self.threshold is None:
            raise ValueError("ScoreNormDetector has no threshold yet: call fit(x_clean, fpr=...) or pass threshold=.")
        return self.threshold


def roc_auc(detector: ScoreNormDetector, x_clean: np.ndarray, x_adv: np.ndarray) -> float:
    """
    Area under the ROC curve of the score norm as a detector of ``x_adv`` against ``x_clean`` (threshold-free;
    0.5 = chance, 1 = perfect separation).

    :return: ``sklearn.metrics.roc_auc_score`` with adversarial inputs as the positive class.
    """
    from sklearn.metrics import roc_auc_score

    norms = np.concatenate([detector.score_norms(x_clean), detector.score_norms(x_adv)])
    labels = np.concatenate([np.zeros(len(x_clean)), np.ones(len(x_adv))])
    return float(roc_auc_score(labels, norms))


class ScoreNormHead(torch.nn.Module):
    """``x ↦ [model(x), ‖h(x)‖₂ − margin·τ]``: the model's ``N×K`` output with the detector's score norm (minus
    the threshold) appended as column K, differentiable, for a loss that steers the detector
    (:class:`EvadeDetectorLoss`)."""

    def __init__(self, model: torch.nn.Module, detector: ScoreNormDetector, *, margin: float = 0.9) -> None:
        super().__init__()
        self.model, self.score_model = model, detector.score_model
        if detector.threshold is None:
            raise ValueError("ScoreNormHead needs a fitted detector: call detector.fit(x_clean, fpr=...) first.")
        self.offset = margin * detector.threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = self.score_model(x.clamp(0, 1)).flatten(1).norm(dim=1, keepdim=True)
        return torch.cat([self.model(x), norm - self.offset], dim=1)
