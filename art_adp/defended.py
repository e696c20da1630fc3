"""The defended classifier as a plain ``nn.Module`` (classifier ∘ ADP, S runs in one batched pass)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

from .preprocessor import ADPPurifier

__all__ = ["DefendedModel", "aggregate_draws"]

AGGREGATES = ("softmax", "logits", "vote")


def aggregate_draws(logits: torch.Tensor, aggregate: str = "softmax") -> torch.Tensor:
    """
    Combine the logits of S independent draws into the defence's logits-like scores (the paper's ensemble, eq. 12).

    :param logits: ``S×N×K`` logits, one slice per draw.
    :param aggregate: ``"softmax"``: log of the averaged class probabilities (computed stably with logsumexp);
        ``"logits"``: averaged logits; ``"vote"``: majority vote, as ``log((votes + p̄) / (S + 1))`` where p̄ are
        the averaged probabilities -- a finite log-distribution whose argmax is the vote, ties broken by p̄. The
        vote's gradient flows only through p̄ (a vote is piecewise constant).
    :return: ``N×K`` scores.
    """
    runs = logits.shape[0]
    log_mean_p = torch.logsumexp(logits.log_softmax(-1), dim=0) - math.log(runs)
    if aggregate == "softmax":
        return log_mean_p
    if aggregate == "logits":
        return logits.mean(0)
    if aggregate == "vote":
        votes = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).sum(0).to(logits.dtype)
        return torch.log((votes + log_mean_p.exp()) / (runs + 1))
    raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}.")


class DefendedModel(torch.nn.Module):
    """
    ``classifier(purify(x))`` averaged over ``runs`` purifications, for torchattacks and plain PyTorch code.

    | Paper link: https://arxiv.org/abs/2106.06041 (the S-run ensemble, eq. 12)

    The ``runs`` purifications of a batch are one pass over ``runs`` stacked copies of it. The output is
    logits-like (see :func:`aggregate_draws`): with ``aggregate="softmax"`` the log of the averaged class
    probabilities (the paper's ensemble), with ``"logits"`` the averaged logits, with ``"vote"`` the majority
    vote. Gradients follow the purifier's ``gradient`` mode: ``"bpda"`` (straight-through) or ``"full"``
    (through purification).

    Attacking vs judging: attack with few runs and the attack's own EOT (e.g. ``runs=1`` with torchattacks'
    ``EOTPGD(eot_iter=15)``, or ``runs=15`` with plain ``PGD``: for ``"logits"`` both give the same expected
    gradient, for ``"softmax"`` the second differentiates the loss of the averaged prediction), and judge with
    the paper's ``runs=10``; change it with ``model.runs = ...``. Pass a seeded ``generator`` to the purifier
    to make outputs and gradients reproducible (re-seed it to replay).
    """

    def __init__(self, classifier: torch.nn.Module, purifier: ADPPurifier | Callable[[torch.Tensor], torch.Tensor],
                 *, runs: int = 10, aggregate: str = "softmax") -> None:
        """
        :param classifier: Maps ``N×C×H×W`` inputs in the purifier's ``clip_values`` to ``N×K`` logits.
        :param purifier: An :class:`~art_adp.ADPPurifier` (its score model is registered as a submodule, so
            ``.to()`` and ``.eval()`` reach it), another ART PyTorch preprocessor, or any random map
            ``x → x'`` of torch tensors.
        :param runs: S ≥ 1, purifications averaged per input.
        :param aggregate: ``"softmax"`` (average probabilities), ``"logits"`` (average logits) or ``"vote"``.
        """
        super().__init__()
        if not callable(purifier):
            raise ValueError(f"purifier must be an ADPPurifier or a callable x -> x', got {type(purifier).__name__}.")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}.")
        if isinstance(runs, bool) or not (isinstance(runs, int) and runs >= 1):
            raise ValueError(f"runs must be an integer >= 1, got {runs!r}.")
        self.classifier = classifier
        if isinstance(purifier, ADPPurifier):
            self.score_model = purifier.score_model
        self.purifier = purifier
        self.runs = runs
        self.aggregate = aggregate

    def purify(self, x: torch.Tensor) -> torch.Tensor:
        """One independent purification of every row of ``x``."""
        if isinstance(self.purifier, PreprocessorPyTorch):
            return self.purifier.forward(x)[0]
        return self.purifier(x)

    def draw_logits(self, x: torch.Tensor) -> torch.Tensor:
        """
        Classifier logits after one purification of every row of ``x`` (rows are independent draws). Purified
        images are given to the classifier in the dtype of its parameters (float64 inputs meet a float32 model).
        """
        purified = self.purify(x)
        weight = next(self.classifier.parameters(), None)
        return self.classifier(purified if weight is None else purified.to(weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: ``N×C×H×W`` floating-point inputs in the purifier's ``clip_values``.
        :return: ``N×K`` scores, aggregated over ``runs`` draws by :func:`aggregate_draws`.
        """
        if not torch.is_floating_point(x) or x.ndim < 2:
            raise ValueError(f"x must be a floating-point N×C×H×W tensor, got {x.dtype} of shape {tuple(x.shape)}.")
        logits = self.draw_logits(x.repeat(self.runs, *([1] * (x.ndim - 1))))
        return aggregate_draws(logits.view(self.runs, x.shape[0], logits.shape[-1]), self.aggregate)
