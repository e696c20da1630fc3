"""The defended classifier as a plain ``nn.Module`` (classifier ∘ ADP, S runs in one batched pass)."""

from __future__ import annotations

import math

import torch

from .preprocessor import ADPPurifier

__all__ = ["DefendedModel"]

AGGREGATES = ("softmax", "logits")


class DefendedModel(torch.nn.Module):
    """
    ``classifier(purify(x))`` averaged over ``runs`` purifications, for torchattacks and plain PyTorch code.

    | Paper link: https://arxiv.org/abs/2106.06041 (the S-run ensemble, eq. 12)

    The ``runs`` purifications of a batch are one pass over ``runs`` stacked copies of it. The output is
    logits-like: with ``aggregate="softmax"`` the log of the averaged class probabilities (the paper's
    ensemble; its softmax is that average), with ``"logits"`` the averaged logits. Gradients follow the
    purifier's ``gradient`` mode: ``"bpda"`` (straight-through) or ``"full"`` (through purification).
    Attack with few runs (``runs=1`` plus the attack's own EOT, e.g. torchattacks' ``EOTPGD``) and judge with
    the paper's ``runs=10``; change it with ``model.runs = ...``. Pass a seeded ``generator`` to the
    purifier to make outputs and gradients reproducible.
    """

    def __init__(self, classifier: torch.nn.Module, purifier: ADPPurifier, *, runs: int = 10,
                 aggregate: str = "softmax") -> None:
        """
        :param classifier: Maps ``N×C×H×W`` inputs in the purifier's ``clip_values`` to ``N×K`` logits.
        :param purifier: The :class:`~art_adp.ADPPurifier` (its score model is registered as a submodule, so
            ``.to()`` and ``.eval()`` reach it).
        :param runs: S ≥ 1, purifications averaged per input.
        :param aggregate: ``"softmax"`` (average probabilities) or ``"logits"`` (average logits).
        """
        super().__init__()
        if not isinstance(purifier, ADPPurifier):
            raise ValueError(f"purifier must be an ADPPurifier, got {type(purifier).__name__}.")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}.")
        if isinstance(runs, bool) or not (isinstance(runs, int) and runs >= 1):
            raise ValueError(f"runs must be an integer >= 1, got {runs!r}.")
        self.classifier = classifier
        self.score_model = purifier.score_model
        self.purifier = purifier
        self.runs = runs
        self.aggregate = aggregate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: ``N×C×H×W`` inputs.
        :return: ``N×K`` scores: log averaged probabilities (``"softmax"``) or averaged logits.
        """
        n = x.shape[0]
        purified = self.purifier.forward(x.repeat(self.runs, *([1] * (x.ndim - 1))))[0]
        logits = self.classifier(purified).view(self.runs, n, -1)
        if self.aggregate == "logits":
            return logits.mean(0)
        return torch.logsumexp(logits.log_softmax(-1), dim=0) - math.log(self.runs)
