"""EOTClassifier: an ART classifier whose predictions and gradients are expectations over a random defence."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from ._checks import boolean, memory_budget as check_memory_budget, one_of, positive_int
from .defended import DefendedModel
from .ensemble import AGGREGATES, GraphMemory, RowBlocks, aggregate_draws, eot_gradient, eot_loss, stack_draws

__all__ = ["EOTClassifier", "rows_of", "tag_rows"]


def tag_rows(y: np.ndarray, nb_classes: int) -> np.ndarray:
    """
    One-hot labels that carry each row's index: row i of class c is ``e_c − (i + 1) e_{(c+1) mod K}``. Its argmax is
    still c (ART's attacks compare argmaxes) and ``−sum`` of the row is i, exact in float32 for any batch below 2²⁴
    rows, so the index survives whatever subset and order of the batch an attack passes on (ART's APGD passes the
    examples still unbroken): what :class:`EOTClassifier` with ``states=True`` reads with :func:`rows_of`.

    :param y: Class indices ``N`` (row i is the i-th), in ``[0, nb_classes)``.
    :param nb_classes: K ≥ 2, the number of classes.
    :return: ``N×K`` float32 labels.
    """
    y = np.asarray(y).astype(np.int64)
    if y.ndim != 1 or nb_classes < 2 or (len(y) and (y.min() < 0 or y.max() >= nb_classes)):
        raise ValueError(f"tag_rows needs N class indices in [0, {nb_classes}) and at least 2 classes, got {y!r}.")
    out = np.eye(nb_classes, dtype=np.float32)[y]
    out[np.arange(len(y)), (y + 1) % nb_classes] = -(np.arange(len(y)) + 1)
    return out


def rows_of(y: torch.Tensor) -> torch.Tensor:
    """
    ``N×2`` (class, row index) from labels made by :func:`tag_rows`.

    :raises ValueError: For labels that carry no row index (plain one-hot or class indices), naming the fix.
    """
    if y.ndim != 2 or y.shape[1] < 2:
        raise ValueError(
            f"states=True needs labels that carry each row's index, got shape {tuple(y.shape)}; pass "
            "art_adp.eot.tag_rows(labels, nb_classes) as the labels."
        )
    rows = (-y.sum(1)).round().long()
    if len(y) and int(rows.min()) < 0:
        raise ValueError(
            "states=True needs labels that carry each row's index (a plain one-hot row carries none); pass "
            "art_adp.eot.tag_rows(labels, nb_classes) as the labels."
        )
    return torch.stack([y.argmax(1), rows], 1)


def _check_eot_params(ensemble_size, eot_samples, aggregate, batch_size) -> None:
    positive_int("ensemble_size", ensemble_size)
    positive_int("eot_samples", eot_samples)
    positive_int("batch_size", batch_size)
    one_of("aggregate", aggregate, AGGREGATES)


class EOTClassifier(PyTorchClassifier):
    """
    Expectation over transformation (EOT) for a classifier with a random preprocessing defence such as ADP.

    | Paper link: https://arxiv.org/abs/2106.06041 (ADP, the S-run ensemble, eq. 12);
    | EOT: Athalye et al. 2018, https://arxiv.org/abs/1707.07397

    A single forward pass through a random defence is one sample of it. This wrapper is the defence itself:

    - :meth:`predict` averages class probabilities over ``ensemble_size`` independent draws
      (``aggregate="softmax"``, the paper's ensemble), or logits (``"logits"``), or takes the majority vote
      (``"vote"``), and returns logits-like scores (see :func:`~art_adp.ensemble.aggregate_draws`), so ART's
      ``AutoProjectedGradientDescent`` and ``AutoAttack`` accept it.
    - :meth:`loss_gradient` and :meth:`class_gradient` are EOT gradients: the mean over ``eot_samples`` draws
      of the per-draw gradient (the gradient of the expected loss, or of the expected logit), in the gradient
      mode of the wrapped classifier's defences (for :class:`~art_adp.ADPPurifier`: ``gradient="bpda"`` or
      ``"full"``).

    The draws of a batch are stacked into ``nb × N`` rows and run in blocks of at most ``batch_size`` rows
    (:mod:`art_adp.ensemble`); gradients run in blocks whose autograd graph fits ``memory_budget`` MiB, one
    backward pass per block, so memory is bounded whatever ``N`` and the number of draws. One draw is the wrapped
    classifier's whole chain -- its defences, then its standardisation ``preprocessing=(mean, std)``, then its
    model, as ART applies them. It is a :class:`PyTorchClassifier` whose ``model`` is
    ``DefendedModel.from_estimator(classifier)`` (its ``ensemble_size`` is ``eot_samples``): ART attacks that dispatch
    on the estimator type take their PyTorch path, and those that rebuild a classifier from ``estimator.model`` (APGD
    with a named loss) differentiate the loss of the ``eot_samples``-draw ensemble.

    Reproducibility: the randomness is the defences' own. Give the :class:`~art_adp.ADPPurifier` a seeded
    ``generator``; re-seeding it (``purifier.generator.manual_seed(s)``) before a call replays that call's
    draws exactly. On CPU the draws of one batch are the same as ``nb`` consecutive calls of the wrapped
    classifier, whatever the blocks (for images whose size is a multiple of 16); blocks of one copy of the batch
    (``N ≤ batch_size < 2N``) give the same on every device.
    """

    estimator_params = PyTorchClassifier.estimator_params + [
        "classifier",
        "ensemble_size",
        "eot_samples",
        "aggregate",
        "batch_size",
        "memory_budget",
        "states",
    ]

    def __init__(
        self,
        classifier: PyTorchClassifier,
        *,
        ensemble_size: int = 10,
        eot_samples: int | None = None,
        aggregate: str = "softmax",
        batch_size: int = 512,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        memory_budget: float | None = None,
        states: bool = False,
    ) -> None:
        """
        :param classifier: An ART :class:`PyTorchClassifier` whose preprocessing defences are random PyTorch
            preprocessors, e.g. ``preprocessing_defences=[ADPPurifier(...)]``; its preprocessing (mean/std) is kept.
        :param ensemble_size: S, the draws averaged by :meth:`predict` (the paper's S = 10).
        :param eot_samples: Draws averaged by the gradients, EOT (default: ``ensemble_size``).
        :param aggregate: ``"softmax"``, ``"logits"`` or ``"vote"`` (see :meth:`predict`).
        :param batch_size: Rows (image × draw) per forward pass.
        :param loss: The loss of one draw's logits, replacing the classifier's: a per-example
            ``(logits N×K, labels N) → N`` (e.g. cross-entropy with ``reduction="none"``, or Croce & Hein's DLR) makes
            :meth:`loss_gradient` each example's EOT gradient and :meth:`compute_loss` each example's loss averaged
            over ``eot_samples`` draws (what ART's APGD with ``loss_type=None`` compares). Default: the
            classifier's loss.
        :param memory_budget: MiB of autograd graph per block of draws in the gradients (None:
            :func:`art_adp.ensemble.default_memory_budget`, 512 MiB on a CPU, a quarter of a GPU's free memory);
            ``batch_size`` caps the block's rows as well.
        :param states: The per-example ``loss`` takes each draw's ``(logits, states)`` instead of its logits
            (:meth:`~art_adp.DefendedModel.draw_states`: the purification's intermediate states and its output) and
            ``N×2`` labels ``(class, row)``, each row's index in the attacked batch, read from labels made by
            :func:`tag_rows` (:func:`rows_of`): a loss on the purification states, e.g.
            :class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`, which finds each row's clean image by
            its index. Needs ``loss``.
        """
        if not isinstance(classifier, PyTorchClassifier):
            raise ValueError(f"classifier must be an ART PyTorchClassifier, got {type(classifier).__name__}.")
        if not classifier.all_framework_preprocessing:
            raise ValueError(
                "EOTClassifier needs every preprocessing defence of the classifier to be a "
                "PreprocessorPyTorch (e.g. ADPPurifier), so draws can be batched and differentiated."
            )
        eot_samples = ensemble_size if eot_samples is None else eot_samples
        _check_eot_params(ensemble_size, eot_samples, aggregate, batch_size)
        if loss is not None and not callable(loss):
            raise ValueError(f"loss must be a callable (logits, labels) -> losses or None, got {type(loss).__name__}.")
        check_memory_budget(memory_budget)
        boolean("states", states)
        if states and loss is None:
            raise ValueError("states=True needs a per-example loss of (logits, purification states) and labels.")
        model = DefendedModel.from_estimator(
            classifier,
            ensemble_size=eot_samples,
            aggregate="softmax" if aggregate == "vote" else aggregate,
            batch_size=batch_size,
            memory_budget=memory_budget,
        )
        super().__init__(
            model=model,
            loss=classifier.loss if loss is None else loss,
            input_shape=classifier.input_shape,
            nb_classes=classifier.nb_classes,
            channels_first=classifier.channels_first,
            clip_values=classifier.clip_values,
            device_type="cpu" if classifier.device.type == "cpu" else "gpu",
        )
        self.classifier = classifier
        self.ensemble_size = ensemble_size
        self.aggregate = aggregate
        self.batch_size = batch_size
        self.memory_budget = memory_budget
        self.states = states
        self._per_example = loss is not None

    @property
    def eot_samples(self) -> int:
        """Draws averaged by the gradients (the ``ensemble_size`` of ``model``, the ensemble APGD differentiates)."""
        return self.model.ensemble_size

    @eot_samples.setter
    def eot_samples(self, value: int) -> None:
        _check_eot_params(1, value, "softmax", 1)
        self.model.ensemble_size = value

    def _check_params(self) -> None:
        super()._check_params()
        if hasattr(self, "batch_size"):  # ART's constructor checks before this class has set its own
            _check_eot_params(self.ensemble_size, self.eot_samples, self.aggregate, self.batch_size)
        if hasattr(self, "memory_budget"):  # set_params reaches the defended model's blocks too
            check_memory_budget(self.memory_budget)
            self.model.batch_size, self.model.memory_budget = self.batch_size, self.memory_budget

    # -- inputs ---------------------------------------------------------------------------------------------

    def _inputs(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        if not isinstance(x, (np.ndarray, torch.Tensor)):
            raise ValueError(f"x must be a numpy array or a torch tensor, got {type(x).__name__}.")
        if tuple(x.shape[1:]) != tuple(self.input_shape):
            raise ValueError(f"x must have shape (N, {', '.join(map(str, self.input_shape))}), got {tuple(x.shape)}.")
        x_t = torch.as_tensor(x, device=self._device)
        if not torch.is_floating_point(x_t):
            raise ValueError(
                f"x must hold floating-point images, got {x_t.dtype}; scale them into "
                f"clip_values {tuple(float(v) for v in self.clip_values)} and convert to float32."
            )
        return x_t.float()

    def _labels(self, y: np.ndarray | torch.Tensor, n: int) -> torch.Tensor:
        if len(y) != n:
            raise ValueError(f"x and y must have the same length, got {n} and {len(y)}.")
        if self.states:  # (class, row index) from labels that carry the index
            return rows_of(torch.as_tensor(y, device=self._device))
        if y.ndim == 2 and self._per_example:  # a per-example loss takes class indices
            y = y.argmax(1)
        y_t = torch.as_tensor(y if y.ndim == 1 else self.reduce_labels(y), device=self._device)  # ART fails on 1-D
        return y_t.long() if not torch.is_floating_point(y_t) else y_t

    # -- the defence's prediction ---------------------------------------------------------------------------

    def draw_logits(self, x: np.ndarray | torch.Tensor, draws: int | None = None) -> torch.Tensor:
        """
        The logits of ``draws`` (default ``ensemble_size``) independent draws, without gradients.

        :return: ``draws×N×K`` tensor on the classifier's device.
        """
        draws = self.ensemble_size if draws is None else draws
        x_t = self._inputs(x)
        if len(x_t) == 0:
            return x_t.new_zeros(draws, 0, self.nb_classes)
        self._model.eval()
        with torch.no_grad():
            return stack_draws(self.model.draw_logits, x_t, draws, batch_size=self.batch_size)

    def predict(
        self, x: np.ndarray | torch.Tensor, batch_size: int = 128, training_mode: bool = False, **kwargs
    ) -> np.ndarray:
        """
        The defence's prediction over ``ensemble_size`` draws, as logits-like scores (``aggregate``: the log of the
        averaged probabilities, the averaged logits, or the majority vote as a log-distribution).

        :param x: Inputs ``N×C×H×W`` in ``clip_values``.
        :param batch_size: Ignored: memory is bounded by the wrapper's ``batch_size`` rows.
        :return: ``N×K`` float32 scores.
        """
        return aggregate_draws(self.draw_logits(x), self.aggregate).cpu().numpy()

    # -- EOT gradients --------------------------------------------------------------------------------------

    def _draw(self, rows: torch.Tensor):
        """One draw of every row, as the loss takes it: its logits, or with ``states`` (logits, purification states)."""
        return self.model.draw_states(rows) if self.states else self.model.draw_logits(rows)

    def loss_gradient(
        self, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, training_mode: bool = False, **kwargs
    ) -> np.ndarray | torch.Tensor:
        """
        Mean over ``eot_samples`` draws of the gradient of the loss with respect to ``x``
        (:func:`art_adp.ensemble.eot_gradient`).

        With a ``reduction="mean"`` loss (ART's default) each draw's gradient is the wrapped classifier's
        ``loss_gradient`` for that draw; the result is their average. With a per-example ``loss`` it is each
        example's gradient of its expected loss.

        :param x: Inputs ``N×C×H×W`` (numpy or torch).
        :param y: Labels, one-hot ``N×K`` or indices ``N``.
        :return: Gradients shaped like ``x``, of ``x``'s type.
        """
        x_t = self._inputs(x)
        y_t = self._labels(y, len(x_t))
        self._model.eval()
        grads, _ = eot_gradient(
            self._draw,
            x_t,
            y_t,
            self._loss,
            self.eot_samples,
            batch_size=self.batch_size,
            memory_budget=self.memory_budget,
        )
        return grads.to(x.device, x.dtype) if isinstance(x, torch.Tensor) else grads.cpu().numpy()

    def compute_loss(
        self, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, reduction: str = "none", **kwargs
    ) -> np.ndarray | torch.Tensor:
        """
        With a per-example ``loss``: each example's loss averaged over ``eot_samples`` draws
        (:func:`art_adp.ensemble.eot_loss`), reduced by ``reduction`` (``"none"``, ``"mean"`` or ``"sum"``).
        Otherwise ART's: the classifier's loss of ``model``'s output (the ``eot_samples``-draw ensemble).
        """
        if not self._per_example:
            return super().compute_loss(x, y, reduction=reduction, **kwargs)
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}.")
        x_t = self._inputs(x)
        self._model.eval()
        loss = eot_loss(
            self._draw,
            x_t,
            self._labels(y, len(x_t)),
            self._loss,
            self.eot_samples,
            batch_size=self.batch_size,
        )
        loss = loss if reduction == "none" else loss.mean() if reduction == "mean" else loss.sum()
        return loss if isinstance(x, torch.Tensor) else loss.cpu().numpy()

    def class_gradient(
        self,
        x: np.ndarray | torch.Tensor,
        label: int | list[int] | np.ndarray | None = None,
        training_mode: bool = False,
        **kwargs,
    ) -> np.ndarray:
        """
        Mean over ``eot_samples`` draws of the gradients of the class logits with respect to ``x``.

        :param label: ``None`` (every class), one class index, or one index per input.
        :return: ``N×K×C×H×W`` (``label=None``) or ``N×1×C×H×W`` gradients.
        """
        x_t = self._inputs(x)
        n = len(x_t)
        if label is None:
            classes: list[int | torch.Tensor] = list(range(self.nb_classes))
        elif isinstance(label, (int, np.integer)) and 0 <= label < self.nb_classes:
            classes = [int(label)]
        else:
            per_input = np.asarray(label)
            if (
                per_input.shape != (n,)
                or not np.issubdtype(per_input.dtype, np.integer)
                or per_input.min(initial=0) < 0
                or per_input.max(initial=0) >= self.nb_classes
            ):
                raise ValueError(
                    f"label must be None, a class index in [0, {self.nb_classes}) or {n} such indices, "
                    f"got {label!r}."
                )
            classes = [torch.as_tensor(per_input, device=self._device)]
        grads = torch.zeros(n, len(classes), *x_t.shape[1:], device=self._device)
        self._model.eval()
        plan = RowBlocks(
            n * self.eot_samples, batch_size=self.batch_size, memory_budget=self.memory_budget, device=self._device
        )
        for a, b in plan:  # one block's graph at a time, freed before the next
            idx = torch.arange(a, b, device=self._device) % n
            rows = x_t.detach()[idx].requires_grad_(True)
            with torch.enable_grad(), GraphMemory() as graph:
                logits = self.model.draw_logits(rows)
            plan.record(b - a, graph.nbytes)
            for k, c in enumerate(classes):
                picked = logits[:, c] if isinstance(c, int) else logits.gather(1, c[idx][:, None])
                (g,) = torch.autograd.grad(picked.sum(), rows, retain_graph=k + 1 < len(classes), allow_unused=True)
                if g is not None:
                    grads[:, k].index_add_(0, idx, g / self.eot_samples)
            del logits, rows
        return grads.cpu().numpy()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(classifier={self.classifier!r}, ensemble_size={self.ensemble_size}, "
            f"eot_samples={self.eot_samples}, aggregate={self.aggregate!r}, batch_size={self.batch_size}, "
            f"memory_budget={self.memory_budget})"
        )
