"""The defended classifier as a plain ``nn.Module`` (classifier ∘ ADP, S runs stacked in batched passes)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

from ._checks import memory_budget as check_memory_budget, one_of, positive_int
from .ensemble import AGGREGATES, EstimatorLogits, aggregate_draws, defences, defend, stack_draws
from .preprocessor import ADPPurifier, PurifierPyTorch, PurifierState

__all__ = ["DefendedModel", "aggregate_draws"]  # aggregate_draws lives in art_adp.ensemble, re-exported here


@contextlib.contextmanager
def _segmentwise(purifiers: Sequence[PurifierPyTorch]) -> Iterator[None]:
    """Every purifier with a ``gradient_checkpointing`` option set to True while open, then restored."""
    saved = [(p, p.gradient_checkpointing) for p in purifiers if hasattr(p, "gradient_checkpointing")]
    try:
        for p, _ in saved:
            p.gradient_checkpointing = True
        yield
    finally:
        for p, old in saved:
            p.gradient_checkpointing = old


class DefendedModel(torch.nn.Module):
    """
    ``classifier(purify(x))`` averaged over ``ensemble_size`` purifications, for torchattacks and plain PyTorch code.

    | Paper link: https://arxiv.org/abs/2106.06041 (the S-run ensemble, eq. 12)

    The ``ensemble_size`` purifications of a batch are passes over ``ensemble_size`` stacked copies of it (one pass, or
    blocks of ``batch_size`` rows: :func:`art_adp.ensemble.stack_draws`). Under autograd (an attack differentiating
    the model) memory stays flat in ``ensemble_size``: blocks whose graph fits ``memory_budget`` MiB, recomputed one
    at a time in the backward pass with the purifier's ``generator`` replayed. The output is logits-like (see
    :func:`aggregate_draws`): with ``aggregate="softmax"`` the log of the averaged class probabilities (the paper's
    ensemble), with ``"logits"`` the averaged logits, with ``"vote"`` the majority vote. Gradients follow the
    purifier's ``gradient`` mode: ``"bpda"`` (straight-through) or ``"full"`` (through purification).

    Attacking vs judging: attack with few draws and the attack's own EOT (e.g. ``ensemble_size=1`` with torchattacks'
    ``EOTPGD(eot_iter=15)``, or ``ensemble_size=15`` with plain ``PGD``: for ``"logits"`` both give the same expected
    gradient, for ``"softmax"`` the second differentiates the loss of the averaged prediction), and judge with
    the paper's ``ensemble_size=10``; change it with ``model.ensemble_size = ...``. Pass a seeded ``generator`` to the
    purifier to make outputs and gradients reproducible (re-seed it to replay).

    What varies per call (a generator, a σ per input) goes in the purifier: e.g.
    ``DefendedModel(clf, functools.partial(purify, score, sigma=s, generator=g), batch_size=len(x))(x)`` runs one draw
    of the batch per pass, the draws taking ``g``'s noise in turn and each row its own σ (the corruption table).

    For an ART ``PyTorchClassifier`` use :meth:`from_estimator`: it keeps the estimator's standardisation
    (``preprocessing=(mean, std)``), which ``DefendedModel(estimator.model, purifier)`` would skip.
    """

    def __init__(
        self,
        classifier: torch.nn.Module,
        purifier: ADPPurifier | Callable[[torch.Tensor], torch.Tensor],
        *,
        ensemble_size: int = 10,
        aggregate: str = "softmax",
        batch_size: int | None = None,
        memory_budget: float | None = None,
    ) -> None:
        """
        :param classifier: Maps ``N×C×H×W`` inputs in the purifier's ``clip_values`` to ``N×K`` logits.
        :param purifier: An :class:`~art_adp.ADPPurifier` (its score model is registered as a submodule, so
            ``.to()`` and ``.eval()`` reach it), another ART PyTorch preprocessor, or any random map
            ``x → x'`` of torch tensors.
        :param ensemble_size: S ≥ 1, purifications averaged per input (the paper's S-run ensemble).
        :param aggregate: ``"softmax"`` (average probabilities), ``"logits"`` (average logits) or ``"vote"``.
        :param batch_size: Rows (image × draw) per forward pass; None: all ``ensemble_size`` copies in one pass (under
            autograd: as many as ``memory_budget`` allows).
        :param memory_budget: MiB of autograd graph per block of draws when the output is differentiated (None:
            :func:`art_adp.ensemble.default_memory_budget`, 512 MiB on a CPU).
        """
        super().__init__()
        if not callable(purifier):
            raise ValueError(f"purifier must be an ADPPurifier or a callable x -> x', got {type(purifier).__name__}.")
        one_of("aggregate", aggregate, AGGREGATES)
        positive_int("ensemble_size", ensemble_size)
        positive_int("batch_size", batch_size, optional=True)
        check_memory_budget(memory_budget)
        self.classifier = classifier
        if isinstance(purifier, ADPPurifier):
            self.score_model = purifier.score_model
        self.purifier = purifier
        self.ensemble_size = ensemble_size
        self.aggregate = aggregate
        self.batch_size = batch_size
        self.memory_budget = memory_budget

    @classmethod
    def from_estimator(
        cls,
        estimator,
        *,
        ensemble_size: int = 10,
        aggregate: str = "softmax",
        batch_size: int | None = None,
        memory_budget: float | None = None,
    ) -> "DefendedModel":
        """
        The defended model of an ART ``PyTorchClassifier``: its predict-time preprocessing defences, in order and
        in their gradient modes, as the purifier; its standardisation (``preprocessing=(mean, std)``) and model as
        the classifier. One draw is :func:`art_adp.ensemble.logits` of the estimator, ART's own chain.

        :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])`` (PyTorch
            preprocessors only).
        :param ensemble_size, aggregate, batch_size, memory_budget: As in the constructor.
        """
        found = defences(estimator)
        one = found[0] if len(found) == 1 else None
        purifier = (
            one if isinstance(one, PreprocessorPyTorch) and one.apply_predict else functools.partial(defend, estimator)
        )
        return cls(
            EstimatorLogits(estimator, defended=False),
            purifier,
            ensemble_size=ensemble_size,
            aggregate=aggregate,
            batch_size=batch_size,
            memory_budget=memory_budget,
        )

    def _defences(self) -> list:
        """The purifier as a list of defences: itself, every defence of an estimator's chain, or none (a callable)."""
        if isinstance(self.purifier, PreprocessorPyTorch):
            return [self.purifier]
        if isinstance(self.purifier, functools.partial) and self.purifier.func is defend:
            return defences(self.purifier.args[0])
        return []

    def generators(self) -> list[torch.Generator]:
        """The ``torch.Generator`` objects of the purifier (of every defence of an estimator's chain)."""
        return [g for g in (getattr(p, "generator", None) for p in self._defences()) if isinstance(g, torch.Generator)]

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
        return self._classify(self.purify(x))

    def _classify(self, purified: torch.Tensor) -> torch.Tensor:
        weight = next(self.classifier.parameters(), None)
        return self.classifier(purified if weight is None else purified.to(weight.dtype))

    def draw_states(self, x: torch.Tensor) -> tuple[torch.Tensor, list[PurifierState]]:
        """
        One draw of every row of ``x`` with the states of its purification: ``(logits, states)``. ``states`` are the
        intermediate states each purifier of the chain records (:meth:`~art_adp.preprocessor.PurifierPyTorch.recording`:
        ADP's x_1 … x_{T−1}; reverse diffusion's x_σ with the noise ε that gives their reference x + σε; none for
        denoised smoothing or a plain callable), in order, then the purified images the classifier was given (before
        its standardisation; reference: the clean image). Everything carries autograd in the purifiers' gradient
        mode, for a loss on the states (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`).

        Memory: while drawing, every purifier with a ``gradient_checkpointing`` option runs with it on (DiffAttack's
        segment-wise forwarding-backwarding, Kang et al. 2023 §3.3): the backward pass recomputes one step at a time,
        so the graph held is one step's plus one image per state (one gradient of 16 digits through ADP: peak RSS
        grows 189 → 246 MiB from 2 to 32 steps, against 205 → 3312 MiB with every step stored;
        ``benchmarks/state_loss_memory.py``). Values are those of :meth:`draw_logits`.
        """
        recorders = [p for p in self._defences() if isinstance(p, PurifierPyTorch)]
        with contextlib.ExitStack() as stack:
            found = [stack.enter_context(p.recording()) for p in recorders]
            stack.enter_context(_segmentwise(recorders))
            purified = self.purify(x)
        return self._classify(purified), [s for states in found for s in states] + [PurifierState(purified)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        :param x: ``N×C×H×W`` floating-point inputs in the purifier's ``clip_values``.
        :return: ``N×K`` scores, aggregated over ``ensemble_size`` draws by :func:`aggregate_draws`.
        """
        if not torch.is_floating_point(x) or x.ndim < 2:
            raise ValueError(f"x must be a floating-point N×C×H×W tensor, got {x.dtype} of shape {tuple(x.shape)}.")
        draws = stack_draws(
            self.draw_logits,
            x,
            self.ensemble_size,
            batch_size=self.batch_size,
            memory_budget=self.memory_budget,
            generators=self.generators(),
            checkpoint=not any(isinstance(m, torch.jit.ScriptModule) for m in self.modules()),
        )
        return aggregate_draws(draws, self.aggregate)
