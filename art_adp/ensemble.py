"""The one ensemble: logits through an ART estimator's whole preprocessing chain, and draws of a random defence
stacked as ``draws × N`` rows, run in blocks of a row budget -- for ensemble predictions (:func:`aggregate_draws`,
the paper's S-run ensemble, eq. 12) and for EOT gradients (:func:`eot_gradient`, the mean or the sign vote).

Every attack of :mod:`art_adp.attacks`, :class:`~art_adp.EOTClassifier`, :class:`~art_adp.DefendedModel` and the
evaluation compute logits with :func:`logits` and stack draws with :func:`blocks`, so they all see the same function
of the input: ``model(standardise(defend(x)))``, in ART's order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from art.defences.preprocessor.preprocessor import Preprocessor, PreprocessorPyTorch

from ._checks import one_of

__all__ = [
    "AGGREGATES",
    "EOT_AGGREGATES",
    "EstimatorLogits",
    "aggregate_draws",
    "blocks",
    "defences",
    "defend",
    "eot_gradient",
    "eot_loss",
    "logits",
    "stack_draws",
]

AGGREGATES = ("softmax", "logits", "vote")
EOT_AGGREGATES = ("mean", "sign")


# -- one function of the input: the estimator's whole preprocessing chain, then its model -----------------------------


def defences(estimator) -> list:
    """The preprocessing defences of an ART estimator (``preprocessing_defences``), in order."""
    found = estimator.preprocessing_defences
    return [] if found is None else [found] if isinstance(found, Preprocessor) else list(found)


def _apply(operations, x: torch.Tensor) -> torch.Tensor:
    for op in operations:
        if not isinstance(op, PreprocessorPyTorch):
            raise ValueError(
                f"art_adp needs PyTorch preprocessors to differentiate the estimator, got "
                f"{type(op).__name__}; use its PreprocessorPyTorch variant (for the standardisation: "
                "preprocessing=(mean, std) or StandardisationMeanStdPyTorch)."
            )
        if op.apply_predict:
            x = op.forward(x)[0]
    return x


def _split(estimator) -> tuple[list, list]:
    """``estimator.preprocessing_operations`` cut into (its defences, the rest: ART's standardisation)."""
    mine = defences(estimator)
    ops = list(estimator.preprocessing_operations)
    return [op for op in ops if any(op is d for d in mine)], [op for op in ops if not any(op is d for d in mine)]


def defend(estimator, x: torch.Tensor) -> torch.Tensor:
    """
    The estimator's predict-time preprocessing defences applied to ``x`` in order, with autograd (each in its
    gradient mode: for an :class:`~art_adp.ADPPurifier`, ``"bpda"`` straight-through or ``"full"``).

    :raises ValueError: If a preprocessor is not a ``PreprocessorPyTorch`` (no torch forward to differentiate).
    """
    return _apply(_split(estimator)[0], x)


def logits(estimator, x: torch.Tensor, *, defended: bool = True) -> torch.Tensor:
    """
    ``model(preprocess(x))`` of an ART ``PyTorchClassifier``, with autograd, following ART 1.20.1's
    ``PyTorchEstimator._apply_preprocessing``: every predict-time operation of ``preprocessing_operations`` in
    order -- the ``preprocessing_defences`` first (an ADPPurifier in its gradient mode), then the standardisation
    of ``preprocessing=(mean, std)`` (``StandardisationMeanStdPyTorch``) -- then the estimator's model.

    :param estimator: An ART ``PyTorchClassifier`` whose preprocessors are all PyTorch ones.
    :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values`` (before any preprocessing).
    :param defended: False skips the defences: the bare classifier as the estimator sees it (standardisation kept).
    :return: ``N×K`` logits.
    :raises ValueError: If a preprocessor is not a ``PreprocessorPyTorch``.
    """
    chain, standardisation = _split(estimator)
    out = estimator.model(_apply(standardisation, _apply(chain, x) if defended else x))
    return out[-1] if isinstance(out, (list, tuple)) else out


class EstimatorLogits(torch.nn.Module):
    """:func:`logits` of an ART estimator as an ``nn.Module`` (its model registered, so ``.eval()``, ``.to()`` and
    ``.parameters()`` reach it): e.g. the classifier of :meth:`~art_adp.DefendedModel.from_estimator`."""

    def __init__(self, estimator, *, defended: bool = True) -> None:
        super().__init__()
        self.model = estimator.model
        self.estimator = estimator
        self.defended = defended

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return logits(self.estimator, x, defended=self.defended)


# -- draws stacked as draws × N rows, in blocks of a row budget ------------------------------------------------------


def blocks(n: int, draws: int, batch_size: int | None = None) -> list[tuple[int, slice]]:
    """
    The ``draws × n`` stacked rows (row ``r`` is draw ``r // n`` of image ``r % n``) cut in order into blocks of at
    most ``batch_size`` rows: whole copies of the batch, as many per block as fit, or, when one copy is larger
    than ``batch_size``, pieces of one copy.

    :param batch_size: Rows per block; None: one block.
    :return: ``(copies c, images i)`` per block: its rows are ``x[i]`` repeated ``c`` times.
    """
    if n == 0 or draws == 0:
        return []
    if batch_size is None or batch_size >= n:
        per = draws if batch_size is None else batch_size // n
        return [(min(per, draws - d), slice(0, n)) for d in range(0, draws, per)]
    return [(1, slice(a, min(a + batch_size, n))) for _ in range(draws) for a in range(0, n, batch_size)]


def _stack(t: torch.Tensor, copies: int, images: slice) -> torch.Tensor:
    return t[images].repeat(copies, *([1] * (t.ndim - 1)))


def stack_draws(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, draws: int, *, batch_size: int | None = None
) -> torch.Tensor:
    """
    ``fn`` on ``draws`` stacked copies of ``x``, block by block (:func:`blocks`): one independent draw of a random
    ``fn`` per row. Autograd flows when enabled.

    :param fn: ``M×…`` → ``M×…`` per-row map (e.g. one purification and the classifier's logits).
    :param x: ``N×…`` inputs.
    :return: ``draws×N×…``: slice ``d`` is draw ``d`` of every input.
    """
    n = len(x)
    if n == 0:
        out = fn(x)
        return out.new_zeros(draws, *out.shape)
    parts = []
    for copies, images in blocks(n, draws, batch_size):
        out = fn(_stack(x, copies, images))
        parts.append(out.view(copies, -1, *out.shape[1:]))
    if len(parts) == 1:
        return parts[0]
    if parts[0].shape[1] == n:
        return torch.cat(parts)
    per = len(parts) // draws  # pieces of one copy
    return torch.cat([torch.cat(parts[d * per : (d + 1) * per], 1) for d in range(draws)])


def aggregate_draws(logits: torch.Tensor, aggregate: str = "softmax") -> torch.Tensor:
    """
    Combine the logits of S independent draws into the defence's logits-like scores (the paper's ensemble, eq. 12).

    :param logits: ``S×N×K`` logits, one slice per draw (e.g. from :func:`stack_draws`).
    :param aggregate: ``"softmax"``: log of the averaged class probabilities (computed stably with logsumexp);
        ``"logits"``: averaged logits; ``"vote"``: majority vote, as ``log((votes + p̄) / (S + 1))`` where p̄ are
        the averaged probabilities -- a finite log-distribution whose argmax is the vote, ties broken by p̄. The
        vote's gradient flows only through p̄ (a vote is piecewise constant).
    :return: ``N×K`` scores.
    """
    one_of("aggregate", aggregate, AGGREGATES)
    nb_samples = logits.shape[0]
    log_mean_p = torch.logsumexp(logits.log_softmax(-1), dim=0) - math.log(nb_samples)
    if aggregate == "softmax":
        return log_mean_p
    if aggregate == "logits":
        return logits.mean(0)
    votes = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).sum(0).to(logits.dtype)  # "vote"
    return torch.log((votes + log_mean_p.exp()) / (nb_samples + 1))


def eot_gradient(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None = None,
    aggregate: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    EOT gradient of a loss over ``draws`` draws of a random ``fn``, the draws stacked and run block by block
    (:func:`blocks`; one graph per block, freed before the next).

    :param fn: ``M×C×H×W`` → ``M×K`` logits, random (e.g. :func:`logits` of an estimator with an ADPPurifier).
    :param y: Labels of ``x`` (``N`` indices or ``N×K``), stacked with it.
    :param loss: ``(logits, labels) →`` per-example losses ``M``, or a batch loss (a scalar, ART's convention: with
        ``reduction="mean"`` (or no ``reduction``) the mean over the rows it is given, else their sum).
    :param draws: EOT draws k ≥ 1.
    :param batch_size: Rows per forward pass (None: all draws in one).
    :param aggregate: ``"mean"`` (mean of the k gradients; for a per-example loss the gradient of each example's
        expected loss, for a batch loss the mean of the k batch gradients) or ``"sign"`` (the authors' vote:
        mean of sign ∇_k per row).
    :return: ``(gradient shaped like x, mean loss over the draws)``: the loss ``N`` per example, or a scalar for a
        batch loss.
    """
    one_of("aggregate", aggregate, EOT_AGGREGATES)
    n = len(x)
    grad, losses, batch = torch.zeros_like(x), x.new_zeros(n), None
    for copies, images in blocks(n, draws, batch_size):
        rows = _stack(x.detach(), copies, images).requires_grad_(True)
        with torch.enable_grad():
            lk = loss(fn(rows), _stack(y, copies, images))
            if lk.ndim == 0:  # a batch loss: "mean" averages these rows, so weigh it by their share of a copy
                objective = lk * (len(rows) / n) if getattr(loss, "reduction", "mean") == "mean" else lk
            else:
                objective = lk.sum()
            (g,) = torch.autograd.grad(objective, rows, allow_unused=True)
        if g is not None:
            g = g.view(copies, -1, *x.shape[1:])
            grad[images] += g.sign().sum(0) if aggregate == "sign" else g.sum(0)
        if lk.ndim == 0:
            batch = objective.detach() if batch is None else batch + objective.detach()
        else:
            losses[images] += lk.detach().view(copies, -1).sum(0)
    return grad / draws, (losses if batch is None else batch) / draws


def eot_loss(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None = None,
) -> torch.Tensor:
    """Each example's per-example ``loss`` averaged over ``draws`` draws of ``fn`` (stacked as in
    :func:`eot_gradient`, without gradients): ``N`` values."""
    n = len(x)
    total = x.new_zeros(n)
    with torch.no_grad():
        for copies, images in blocks(n, draws, batch_size):
            lk = loss(fn(_stack(x, copies, images)), _stack(y, copies, images))
            if lk.ndim != 1:
                raise ValueError(
                    f"loss must return one value per row (reduction 'none'), got shape " f"{tuple(lk.shape)}."
                )
            total[images] += lk.view(copies, -1).sum(0)
    return total / draws
