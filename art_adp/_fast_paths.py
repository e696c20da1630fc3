"""The speed options of :func:`art_adp.purify`, apart from Algorithm 1: none of them changes a value.

- ``compact`` and the CPU early exit: :class:`RunningBatch`, the bookkeeping of which samples still move;
- ``amp``: the network forward under ``torch.autocast`` (:func:`autocast_score`);
- ``gradient_checkpointing``: each step recomputed in the backward pass instead of stored (:func:`checkpointed`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint

from ._checks import boolean

__all__ = ["AMP_DTYPES", "CompiledOrEager", "RunningBatch", "autocast_score", "check_speed_options", "checkpointed"]

AMP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def check_speed_options(step_size, *, compact: bool, amp: str | None, gradient_checkpointing: bool) -> None:
    """
    Validate the speed options of :func:`~art_adp.purify` (``step_size``: ``amp`` needs a rule it cannot spoil).

    :raises ValueError: Naming the option, the value given and what is allowed.
    """
    boolean("compact", compact)
    boolean("gradient_checkpointing", gradient_checkpointing)
    if amp is not None and amp not in AMP_DTYPES:
        raise ValueError(f"amp must be None, 'bfloat16' or 'float16', got {amp!r}.")
    if amp is not None and isinstance(step_size, str) and step_size == "adaptive":
        raise ValueError(
            "amp needs step_size='adaptive-jvp' or a manual schedule: the finite difference of step_size='adaptive' "
            "(h(x + δh) − h(x) with δ = 1e-3) drowns in half-precision rounding."
        )


def autocast_score(score_model: Callable, amp: str | None) -> Callable:
    """``score_model``, or, when ``amp`` names a dtype, ``score_model`` under autocast with its output cast back to
    the input's dtype."""
    if amp is None:
        return score_model

    def score(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=AMP_DTYPES[amp]):
            return score_model(x).to(x.dtype)

    return score


def checkpointed(step: Callable) -> Callable:
    """``step`` under ``torch.utils.checkpoint`` when autograd records: one batch stored per step, recomputed in the
    backward pass (same values and gradients).

    The recomputation runs to the end, and TorchScript modules inside ``step`` run unoptimised: a traced or scripted
    network's graph executor saves other tensors on its first (profiling) runs than on later ones, and its interpreter
    turns checkpoint's early stop into an empty ``RuntimeError``. That mends fp32; under bf16 autocast a module its
    executor has already run may still save other tensors, so the EOT draws keep a TorchScript module's graphs whole
    instead (:func:`~art_adp.ensemble.stack_draws`' ``checkpoint``). Eager modules are unaffected."""
    if not torch.is_grad_enabled():
        return step

    def unoptimised(*args: Any, **kwargs: Any) -> Any:
        with torch.jit.optimized_execution(False):
            return step(*args, **kwargs)

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.utils.checkpoint.set_checkpoint_early_stop(False):
            return torch.utils.checkpoint.checkpoint(unoptimised, *args, use_reentrant=False, **kwargs)

    return run


class RunningBatch:
    """
    Which samples of Algorithm 1 still move, the rows of the batch the network still sees (``compact`` drops stopped
    rows; on a CPU the loop also ends once every sample has stopped), the steps each sample took and the α it used.
    None of it changes a value: stopped samples are frozen either way.

    :param x: x₀, the noisy start ``N×C×H×W``.
    :param steps: T, the number of steps :meth:`advance` will be called.
    :param compact: Drop stopped rows (a host synchronisation per step).
    """

    def __init__(self, x: torch.Tensor, *, steps: int, compact: bool) -> None:
        n = x.shape[0]
        self.x, self.n, self.steps, self.compact, self.t = x, n, steps, compact, 0
        self.rows = torch.arange(n, device=x.device)  # the rows of x still evaluated: x_run = x[rows]
        self.x_run, self.active = x, torch.ones(n, dtype=torch.bool, device=x.device)
        self.taken = torch.zeros(n, dtype=torch.long, device=x.device)
        self.used: list[torch.Tensor] = []

    def advance(self, step: Callable, alpha_t) -> None:
        """One step ``(x, active, alpha_t) -> (x', α, active')`` on the rows still evaluated."""
        self.t += 1
        if len(self.rows) == 0:  # every sample has stopped (or the batch is empty): nothing left to evaluate
            self.used.append(self.x.new_zeros(self.n, dtype=torch.promote_types(self.x.dtype, torch.float32)))
            return
        x_run, alpha, active = step(self.x_run, self.active, alpha_t)
        compacted = len(self.rows) < self.n
        self.used.append(alpha.new_zeros(self.n).index_copy(0, self.rows, alpha) if compacted else alpha)
        self.taken = self.taken.index_add(0, self.rows, active.long()) if compacted else self.taken + active.long()
        self.x_run, self.active = x_run, active
        if self.t == self.steps or not (self.compact or x_run.device.type == "cpu"):  # reading the mask: a sync
            return
        if (self.compact and not bool(active.all())) or not bool(active.any()):
            self.x = self.output()  # park the stopped rows, frozen from here on
            self.rows, self.x_run, self.active = self.rows[active], x_run[active], active[active]

    def output(self) -> torch.Tensor:
        """The batch as it stands: x_t of every sample (x at its stop for the stopped ones)."""
        return self.x.index_copy(0, self.rows, self.x_run) if len(self.rows) < self.n else self.x_run

    def info(self) -> dict:
        """``{"steps": N steps taken, "step_sizes": N×T the α used (0 once stopped)}``."""
        if not self.used:
            return {"steps": self.taken, "step_sizes": self.x.new_zeros(self.n, 0)}
        dtype = functools.reduce(torch.promote_types, (u.dtype for u in self.used))
        return {"steps": self.taken, "step_sizes": torch.stack([u.to(dtype) for u in self.used], 1).detach()}


class CompiledOrEager(torch.nn.Module):
    """``module`` compiled with ``torch.compile`` at fixed shapes (``dynamic=False``: one graph per batch shape), and
    ``module`` itself where compilation fails: the first failure is warned about, naming it, and every later call runs
    eagerly. Same parameters as ``module``; its values equal the eager ones to float rounding."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.eager = module
        self.compiled: Any = torch.compile(module, dynamic=False)
        self.failed: str | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed is None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as error:  # pylint: disable=broad-except  # any backend failure: fall back, said once
                self.failed = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                warnings.warn(f"torch.compile failed on {type(self.eager).__name__} ({self.failed}); running it "
                              "eagerly (the same values, uncompiled speed).", RuntimeWarning, stacklevel=2)  # fmt: skip
        return self.eager(*args, **kwargs)
