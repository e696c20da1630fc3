"""The one ensemble: logits through an ART estimator's whole preprocessing chain, and draws of a random defence
stacked as ``draws × N`` rows, run in blocks of a row budget -- for ensemble predictions (:func:`aggregate_draws`,
the paper's S-run ensemble, eq. 12) and for EOT gradients (:func:`eot_gradient`, the mean or the sign vote).

Memory of EOT gradients is flat in the number of draws: the draws are run in blocks whose autograd graph fits
``memory_budget`` MiB (each block's graph is measured as it is recorded, :class:`GraphMemory`), and each block's
graph is freed before the next (:func:`eot_gradient`), or recomputed one block at a time in the backward pass
(:func:`stack_draws` under autograd, e.g. :class:`~art_adp.DefendedModel` under torchattacks).

Every attack of :mod:`art_adp.attacks`, :class:`~art_adp.EOTClassifier`, :class:`~art_adp.DefendedModel` and the
evaluation compute logits with :func:`logits` and stack draws with :func:`blocks`, so they all see the same function
of the input: ``model(standardise(defend(x)))``, in ART's order.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from art.defences.preprocessor.preprocessor import Preprocessor, PreprocessorPyTorch

from ._checks import MIB, memory_budget as check_memory_budget, one_of, positive_int
from ._fast_paths import CompiledOrEager, checkpointed

__all__ = [
    "AGGREGATES",
    "EOT_AGGREGATES",
    "EstimatorLogits",
    "GraphMemory",
    "RowBlocks",
    "default_memory_budget",
    "aggregate_draws",
    "blocks",
    "defences",
    "defend",
    "draw_gradients",
    "eot_gradient",
    "eot_loss",
    "ensemble_gradient",
    "at_gradient_precision",
    "compiled_networks",
    "current_gradient_precision",
    "generators",
    "gradient_precision",
    "logits",
    "stack_draws",
    "undefended",
]

AGGREGATES = ("softmax", "logits", "vote")
EOT_AGGREGATES = ("mean", "sign")
CPU_MEMORY_BUDGET = 512  # MiB of autograd graph per block on a CPU
PROBE_ROWS = 16  # rows of the first block of a call, whose graph is measured to size the others


# -- the precision of the gradient passes ---------------------------------------------------------------------------

#: What the attacks' gradient passes run in (:func:`gradient_precision`): ``"fp32"``, or ``"bf16"`` autocast.
PRECISIONS = ("fp32", "bf16")
_GRADIENT_PRECISION: contextvars.ContextVar[str] = contextvars.ContextVar("gradient_precision", default="fp32")


@contextlib.contextmanager
def gradient_precision(precision: str) -> Iterator[None]:
    """
    Run the EOT gradient passes started inside (:func:`eot_gradient`, :func:`draw_gradients`,
    :func:`ensemble_gradient`, and the attacks' own, through :func:`at_gradient_precision`) at ``precision``:
    ``"bf16"`` runs their forward passes, purification and classifier, under bf16 autocast (weights fp32, the logits
    handed to the loss in fp32). Nothing else changes: predictions made inside, the judgements of an attack's
    iterates among them, stay in the precision of the networks (fp32), as do the projection and the clip.
    """
    one_of("precision", precision, PRECISIONS)
    token = _GRADIENT_PRECISION.set(precision)
    try:
        yield
    finally:
        _GRADIENT_PRECISION.reset(token)


@contextlib.contextmanager
def compiled_networks(estimator) -> Iterator[None]:
    """
    The compiled step: inside, the estimator's classifier and its ADPPurifiers' score networks run through
    ``torch.compile`` (:class:`CompiledOrEager`, fixed shapes, eager where compilation fails), for the gradient passes
    and the judgements alike (fp32 stays fp32: compilation changes the values only to float rounding); restored after.
    The compiled modules are kept on the estimator, so a later call reuses their graphs.
    """
    from .preprocessor import ADPPurifier

    wrapper = estimator._model  # pylint: disable=protected-access  # ART's ModelWrapper around the user's model
    plain = wrapper._model  # pylint: disable=protected-access
    held = getattr(estimator, "_art_adp_compiled", None)
    if held is None or held.eager is not plain:
        held = CompiledOrEager(plain)
        setattr(estimator, "_art_adp_compiled", held)
    purifiers = [(p, p.compile) for p in defences(estimator) if isinstance(p, ADPPurifier)]
    try:
        wrapper._model = held  # pylint: disable=protected-access
        for p, _ in purifiers:
            p.compile = True
        yield
    finally:
        wrapper._model = plain  # pylint: disable=protected-access
        for p, old in purifiers:
            p.compile = old


def current_gradient_precision() -> str:
    """The precision of the gradient passes started here: ``"bf16"`` inside ``gradient_precision("bf16")``, else
    ``"fp32"``."""
    return _GRADIENT_PRECISION.get()


def _as_float(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float() if out.is_floating_point() else out
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # a named tuple takes its fields one by one
        return type(out)(*(_as_float(o) for o in out))
    if isinstance(out, (tuple, list)):
        return type(out)(_as_float(o) for o in out)
    return out


def at_gradient_precision(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a gradient pass runs it: under bf16 autocast inside ``gradient_precision("bf16")`` (its floating-point
    outputs cast back to fp32), else ``fn`` itself."""
    precision = _GRADIENT_PRECISION.get()
    if precision == "fp32":
        return fn

    def run(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return _as_float(fn(x, *args, **kwargs))

    return run


# -- one function of the input: the estimator's whole preprocessing chain, then its model -----------------------------


def defences(estimator) -> list:
    """The preprocessing defences of an ART estimator (``preprocessing_defences``), in order."""
    found = estimator.preprocessing_defences
    return [] if found is None else [found] if isinstance(found, Preprocessor) else list(found)


def undefended(estimator):
    """The estimator without its preprocessing defences: a ``PyTorchClassifier`` of the same model, loss, shapes,
    clip values, standardisation (``preprocessing``) and device, the bare classifier g_φ as the estimator sees it
    (the estimator itself where it has no defences)."""
    if not defences(estimator):
        return estimator
    from art.estimators.classification import PyTorchClassifier  # pylint: disable=import-outside-toplevel

    return PyTorchClassifier(
        estimator.model, estimator._loss, input_shape=estimator.input_shape,  # pylint: disable=protected-access
        nb_classes=estimator.nb_classes, channels_first=estimator.channels_first, clip_values=estimator.clip_values,
        preprocessing=estimator.preprocessing, device_type="gpu" if estimator.device.type == "cuda" else "cpu",
    )  # fmt: skip


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


def generators(estimator) -> list[torch.Generator]:
    """The ``torch.Generator`` objects the estimator's defences draw from (an ADPPurifier's ``generator``), in order:
    what a recomputed block of draws replays (:func:`stack_draws`)."""
    found = (getattr(d, "generator", None) for d in defences(estimator))
    return [g for g in found if isinstance(g, torch.Generator)]


def scripted(estimator) -> bool:
    """Whether a TorchScript module (traced or scripted) runs in the estimator's model or its defences:
    ``torch.utils.checkpoint`` cannot recompute one (its graph executor saves other tensors on a later run than on an
    earlier one), so blocks of its draws are kept whole (:func:`stack_draws`' ``checkpoint``)."""
    found = [estimator.model, *(v for d in defences(estimator) for v in vars(d).values())]
    return any(isinstance(m, torch.jit.ScriptModule) for n in found if isinstance(n, torch.nn.Module)
               for m in n.modules())  # fmt: skip


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


def default_memory_budget(device: torch.device | str) -> float:
    """
    MiB of autograd graph one block of draws may hold when ``memory_budget`` is None: 512 MiB on a CPU, a
    quarter of the free memory of a CUDA device (at least 64 MiB).
    """
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(free / 4 / MIB, 64.0)
    return float(CPU_MEMORY_BUDGET)


class GraphMemory:
    """
    Bytes of tensors saved for backward while the context is open (``torch.autograd.graph.saved_tensors_hooks``;
    each storage counted once): the autograd graph a forward pass records, on any device. Tensors saved inside a
    ``torch.utils.checkpoint`` region are not stored and not counted (e.g. ADPPurifier's
    ``gradient_checkpointing=True`` keeps one batch per step, and that is what is counted). A lower bound of the
    memory a block holds: the forward pass's transient tensors and the backward pass's gradients come on top (on
    a CPU about 1.6× the count for a small convolutional score network).
    """

    def __init__(self) -> None:
        self.nbytes = 0
        self._seen: set[int] = set()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
        except RuntimeError:  # sparse or otherwise storage-less tensors (NotImplementedError is one)
            key, size = id(t), t.numel() * t.element_size()
        if key not in self._seen:
            self._seen.add(key)
            self.nbytes += size
        return t.detach()  # the tensor itself would tie the graph into a cycle that outlives a skipped backward

    def __enter__(self) -> "GraphMemory":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._seen.clear()


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


class RowBlocks:
    """
    Row ranges ``[a, b)`` of ``total`` stacked rows (row ``r`` is draw ``r // n`` of image ``r % n``), in order,
    each block as large as ``memory_budget`` allows: the first block (at most :data:`PROBE_ROWS` rows) is measured
    (:meth:`record`), the next ones hold ``memory_budget`` / (the largest graph per row seen) rows, at most
    ``batch_size``.

    :param total: Rows in all (draws × images).
    :param batch_size: Most rows per block (None: no cap but the memory budget).
    :param memory_budget: MiB of autograd graph per block (None: :func:`default_memory_budget` of ``device``).
    :param device: Where the rows are computed.

    ``budget`` holds the budget in bytes, the unit :class:`GraphMemory` measures.
    """

    def __init__(
        self, total: int, *, batch_size: int | None, memory_budget: float | None, device: torch.device | str
    ) -> None:
        positive_int("batch_size", batch_size, optional=True)
        memory_budget = check_memory_budget(memory_budget)
        self.total = total
        self.cap = max(1, total if batch_size is None else min(batch_size, total))
        self.budget = MIB * (default_memory_budget(device) if memory_budget is None else memory_budget)
        self.row_bytes: float | None = None

    @property
    def rows(self) -> int:
        """Rows of the next block."""
        if self.row_bytes is None:
            return min(self.cap, PROBE_ROWS)
        return max(1, min(self.cap, int(self.budget // max(self.row_bytes, 1.0))))

    def record(self, rows: int, nbytes: int) -> None:
        """A block of ``rows`` rows recorded ``nbytes`` bytes of graph (warns once if one row exceeds the budget)."""
        per_row = nbytes / max(rows, 1)
        if per_row > self.budget and (self.row_bytes is None or self.row_bytes <= self.budget):
            warnings.warn(
                f"one EOT draw of one image records {per_row / MIB:.1f} MiB of autograd graph, more than "
                f"memory_budget ({self.budget / MIB:.1f} MiB): blocks of one row; set gradient_checkpointing=True "
                "on the ADPPurifier (one batch stored per purification step) or raise memory_budget.",
                stacklevel=3,
            )
        self.row_bytes = per_row if self.row_bytes is None else max(self.row_bytes, per_row)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        a = 0
        while a < self.total:
            b = min(self.total, a + self.rows)
            yield a, b
            a = b


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
    """``t[images]`` repeated ``copies`` times, in ``t``'s memory layout (channels-last images stay so: a convolution
    computes on the copies exactly what it computes on ``t``)."""
    out = t[images].repeat(copies, *([1] * (t.ndim - 1)))
    return out.contiguous(memory_format=torch.channels_last) if _channels_last(t) else out


def _channels_last(t: torch.Tensor) -> bool:
    return t.ndim == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


class _Replay:
    """``fn`` whose generators replay, when it is called again (a checkpoint's recomputation), the states they had
    on its first call, and are then put back where they were: the recomputed draws are the recorded ones."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], generators: Sequence[torch.Generator]) -> None:
        self.fn, self.generators = fn, list(generators)
        self.states: list[torch.Tensor] | None = None

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        if self.states is None:
            self.states = [g.get_state() for g in self.generators]
            return self.fn(rows)
        after = [g.get_state() for g in self.generators]
        for g, state in zip(self.generators, self.states):
            g.set_state(state)
        try:
            return self.fn(rows)
        finally:
            for g, state in zip(self.generators, after):
                g.set_state(state)


def _stack_recorded(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    draws: int,
    *,
    batch_size: int | None,
    memory_budget: float | None,
    generators: Sequence[torch.Generator],
    checkpoint: bool = True,
) -> torch.Tensor:
    """:func:`stack_draws` under autograd: the first block recorded and measured; the rest, if all of it would not fit
    ``memory_budget``, in checkpointed blocks of the budget's rows (recomputed one at a time in the backward pass,
    with the generators replayed), or, without ``checkpoint``, recorded whole, with a warning."""
    n = len(x)
    plan = RowBlocks(n * draws, batch_size=batch_size, memory_budget=memory_budget, device=x.device)
    parts, a, total = [], 0, n * draws
    while a < total:
        b = min(total, a + plan.rows)
        rows = x[torch.arange(a, b, device=x.device) % n]
        if plan.row_bytes is None:  # the measured block
            with GraphMemory() as graph:
                parts.append(fn(rows))
            plan.record(b - a, graph.nbytes)
            if graph.nbytes == 0:  # nothing is recorded (no input or parameter needs a gradient)
                plan.row_bytes = 0.0
        elif plan.row_bytes == 0 or plan.row_bytes * (total - a) <= plan.budget:
            parts.append(fn(rows))
        elif not checkpoint:  # the rest recorded whole, over the budget
            warnings.warn(f"a TorchScript module runs in these draws: torch.utils.checkpoint cannot recompute it, so "
                          f"all {total} rows keep their graph (about {plan.row_bytes * total / MIB:.0f} MiB, over "
                          f"memory_budget {plan.budget / MIB:.0f} MiB); fewer EOT draws or images per batch hold "
                          "less.", stacklevel=3)  # fmt: skip
            plan.budget = plan.row_bytes * total
            parts.append(fn(rows))
        else:
            replay = _Replay(fn, generators)
            parts.append(checkpointed(replay)(rows, preserve_rng_state=True))
        a = b
    out = torch.cat(parts)
    return out.view(draws, n, *out.shape[1:])


def stack_draws(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    draws: int,
    *,
    batch_size: int | None = None,
    memory_budget: float | None = None,
    generators: Sequence[torch.Generator] = (),
    checkpoint: bool = True,
) -> torch.Tensor:
    """
    ``fn`` on ``draws`` stacked copies of ``x``, block by block: one independent draw of a random ``fn`` per row.

    Without autograd the blocks are :func:`blocks` of ``batch_size`` rows. Under autograd (``torch.is_grad_enabled``)
    memory is kept flat in ``draws``: the first block (16 rows) is recorded and its graph measured
    (:class:`GraphMemory`); if the other rows' graphs would not fit ``memory_budget``, they run in blocks of as
    many rows as the budget allows, each under ``torch.utils.checkpoint``, so the backward pass recomputes one block
    at a time (about one more forward pass of each such block). The recomputation replays each block's noise:
    torch's global CPU and CUDA generators by the checkpoint itself, the ``generators`` given (e.g. an
    ADPPurifier's ``generator``) by saving their states; the values and gradients are those of one block.

    :param fn: ``M×…`` → ``M×…`` per-row map (e.g. one purification and the classifier's logits).
    :param x: ``N×…`` inputs.
    :param draws: Draws of every input.
    :param batch_size: Most rows per pass (None: one pass without autograd, the memory budget's rows with it).
    :param memory_budget: MiB of autograd graph per block (None: :func:`default_memory_budget`).
    :param generators: The ``torch.Generator`` objects ``fn`` draws from, replayed when a block is recomputed.
    :param checkpoint: False keeps every block's graph, over the budget if need be (with a warning): for an ``fn``
        running a TorchScript module (:func:`scripted`).
    :return: ``draws×N×…``: slice ``d`` is draw ``d`` of every input.
    """
    n = len(x)
    if n == 0:
        out = fn(x)
        return out.new_zeros(draws, *out.shape)
    if torch.is_grad_enabled():
        return _stack_recorded(fn, x, draws, batch_size=batch_size, memory_budget=memory_budget, generators=generators,
                               checkpoint=checkpoint)  # fmt: skip
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


def _block_gradients(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None,
    memory_budget: float | None,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None, torch.Tensor]]:
    """The ``draws × N`` stacked rows in blocks of :class:`RowBlocks`: per block its first row ``a``, its images
    ``idx``, the gradient of its loss with respect to its rows (None where nothing depends on them) and the loss,
    detached (per row, or a batch loss weighted as :func:`eot_gradient` documents). One backward pass per block; the
    block's graph is freed before the next is recorded."""
    n = len(x)
    fn = at_gradient_precision(fn)
    plan = RowBlocks(n * draws, batch_size=batch_size, memory_budget=memory_budget, device=x.device)
    for a, b in plan:
        idx = torch.arange(a, b, device=x.device) % n
        rows = x.detach()[idx].requires_grad_(True)
        with torch.enable_grad(), GraphMemory() as graph:
            lk = loss(fn(rows), y[idx])
            if lk.ndim == 0:  # a batch loss: "mean" averages these rows, so weigh it by their share of a copy
                objective = lk * (len(rows) / n) if getattr(loss, "reduction", "mean") == "mean" else lk
            else:
                objective = lk.sum()
        plan.record(len(rows), graph.nbytes)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(objective, rows, allow_unused=True)
        out = objective.detach() if lk.ndim == 0 else lk.detach()
        del lk, objective, rows  # the block's graph goes before the next block is recorded
        yield a, idx, g, out


def eot_gradient(
    fn: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[Any, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None = None,
    memory_budget: float | None = None,
    aggregate: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    EOT gradient of a loss over ``draws`` draws of a random ``fn``, the draws stacked (row ``r`` is draw ``r // N``
    of image ``r % N``) and run in order in blocks of rows (:class:`RowBlocks`): one backward pass per block, its
    input gradients summed into the result and its graph freed before the next block, so memory is one block's
    graph whatever ``draws``. The blocks' size comes from ``memory_budget``: the first block (16 rows) is measured
    (:class:`GraphMemory`), the others hold as many rows as the budget allows, at most ``batch_size``.

    The result is the unblocked computation's, to float rounding, for any ``batch_size`` and ``memory_budget``:
    every row is the same draw of the same image, and the gradients are summed per image. The noise of draw ``k``
    does not depend on the blocks when ``fn`` draws its noise for its rows in one call of ``torch.randn`` (as
    ADP does: one ε per purification) on a CPU and one image has a multiple of 16 values (8×8, 28×28, 3×32×32):
    torch's CPU normal sampler then gives the same numbers for consecutive calls as for one call over their
    concatenation. Elsewhere (other sizes, CUDA's Philox offsets) the draws are other, equally distributed
    independent draws: equal in distribution, not bitwise.

    :param fn: ``M×C×H×W`` → ``M×K`` logits (or what ``loss`` takes: e.g. logits with purified states), random (e.g.
        :func:`logits` of an estimator with an ADPPurifier).
    :param y: Labels of ``x`` (``N`` indices or ``N×K``), stacked with it.
    :param loss: ``(logits, labels) →`` per-example losses ``M``, or a batch loss (a scalar, ART's convention: with
        ``reduction="mean"`` (or no ``reduction``) the mean over the rows it is given, else their sum).
    :param draws: EOT draws k ≥ 1.
    :param batch_size: Most rows per forward pass (None: as many as ``memory_budget`` allows).
    :param memory_budget: MiB of autograd graph per block (None: :func:`default_memory_budget`, 512 MiB on a
        CPU, a quarter of a GPU's free memory).
    :param aggregate: ``"mean"`` (mean of the k gradients; for a per-example loss the gradient of each example's
        expected loss, for a batch loss the mean of the k batch gradients) or ``"sign"`` (the authors' vote:
        mean of sign ∇_k per row).
    :return: ``(gradient shaped like x, mean loss over the draws)``: the loss ``N`` per example, or a scalar for a
        batch loss.
    """
    one_of("aggregate", aggregate, EOT_AGGREGATES)
    n = len(x)
    grad, losses, batch = torch.zeros_like(x), x.new_zeros(n), None
    for _, idx, g, lk in _block_gradients(fn, x, y, loss, draws, batch_size=batch_size, memory_budget=memory_budget):
        if g is not None:
            grad.index_add_(0, idx, g.sign() if aggregate == "sign" else g)
        if lk.ndim == 0:
            batch = lk if batch is None else batch + lk
        else:
            losses.index_add_(0, idx, lk)
    return grad / draws, (losses if batch is None else batch) / draws


def draw_gradients(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None = None,
    memory_budget: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    The gradient and the loss of every one of ``draws`` draws of a random ``fn``, kept apart (what
    :func:`eot_gradient` averages): the draws stacked and run in the same blocks of rows, one backward pass per block,
    so the autograd graph in memory is one block's whatever ``draws``; the result holds ``draws`` input-sized
    gradients per image.

    :param fn: ``M×C×H×W`` → ``M×K`` logits (or what ``loss`` takes), random.
    :param y: Labels of ``x`` (``N`` indices or ``N×K``), stacked with it.
    :param loss: ``(fn's output, labels) →`` per-example losses ``M`` (``reduction="none"``).
    :param draws: Draws k ≥ 1.
    :param batch_size, memory_budget: As in :func:`eot_gradient`.
    :return: ``(gradients draws×N×C×H×W, losses draws×N)``: slice ``k`` is draw ``k`` of every input.
    """
    n = len(x)
    grads, losses = x.new_zeros(draws * n, *x.shape[1:]), x.new_zeros(draws * n)
    for a, idx, g, lk in _block_gradients(fn, x, y, loss, draws, batch_size=batch_size, memory_budget=memory_budget):
        if lk.ndim != 1:
            raise ValueError(f"loss must return one value per row (reduction 'none'), got shape {tuple(lk.shape)}.")
        if g is not None:
            grads[a : a + len(idx)] = g
        losses[a : a + len(idx)] = lk
    return grads.view(draws, n, *x.shape[1:]), losses.view(draws, n)


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


def ensemble_gradient(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    draws: int,
    *,
    batch_size: int | None = None,
    memory_budget: float | None = None,
    generators: Sequence[torch.Generator] = (),
    checkpoint: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    The gradient of a loss of the *ensemble* of ``draws`` draws of a random ``fn``: ``loss(log p̄, y)`` with
    p̄ = (1/k) Σ_k softmax(fn_k(x)) the mean softmax the S-draw ensemble predicts with (:func:`aggregate_draws`,
    ``"softmax"``) -- what a table judging that ensemble is decided by. Unlike the mean of per-draw losses
    (:func:`eot_gradient`), whose gradient is largest on draws already broken and vanishes on confident correct
    ones, this one weighs each draw by how much it moves the ensemble's margin.

    Memory as :func:`stack_draws` under autograd: one block's graph at a time, the other blocks recomputed in the
    backward pass with ``generators`` replayed (about one more forward pass per block beyond the first's budget).

    :param fn: ``M×C×H×W`` → ``M×K`` logits, random.
    :param loss: ``(N×K log-probabilities, labels) →`` ``N`` per-example losses (e.g. cross-entropy, a margin).
    :param draws: Draws k ≥ 1.
    :param batch_size, memory_budget: As in :func:`eot_gradient`.
    :param generators: The generators ``fn`` draws from (:func:`generators` of an estimator).
    :param checkpoint: As in :func:`stack_draws` (False where ``fn`` runs a TorchScript module: :func:`scripted`).
    :return: ``(gradient shaped like x, the ensemble's loss N)``.
    """
    with torch.enable_grad():
        rows = x.detach().requires_grad_(True)
        z = stack_draws(at_gradient_precision(fn), rows, draws, batch_size=batch_size, memory_budget=memory_budget,
                        generators=generators, checkpoint=checkpoint)  # fmt: skip
        lk = loss(aggregate_draws(z, "softmax"), y)
        (g,) = torch.autograd.grad(lk.sum(), rows)
    return g, lk.detach()
