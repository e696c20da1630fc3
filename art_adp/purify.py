"""ADP purification (Yoon, Hwang & Lee, ICML 2021, https://arxiv.org/abs/2106.06041), Algorithm 1.

One run of the algorithm as a pure function over a ``score_model(x) -> h(x)``. It never switches off
autograd: the caller decides (ART's numpy ``__call__`` adds ``no_grad``; a full-gradient attack
differentiates straight through it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import torch
import torch.func
import torch.utils.checkpoint

from ._checks import boolean, non_negative_int, number

__all__ = ["ADPDefaults", "DEFAULTS", "purify", "check_params", "check_images", "describe"]


@dataclasses.dataclass(frozen=True)
class ADPDefaults:
    """
    The ADP hyperparameters as the authors' released code sets them (Yoon, Hwang & Lee 2021; see :func:`purify`
    for where the paper's text differs): declared once, read by :func:`purify`, :class:`~art_adp.ADPPurifier` and
    every report string (:func:`describe`).
    """

    sigma: float = 0.25
    steps: int = 10
    step_size: str = "adaptive"
    lam: float = 0.05
    delta: float = 1e-3
    step_clamp: tuple[float, float] = (1e-5, 0.1)
    tau: float = 1e-3
    clip_values: tuple[float, float] = (0.0, 1.0)


DEFAULTS = ADPDefaults()


ADAPTIVE_RULES = ("adaptive", "adaptive-jvp")
AMP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def check_params(
    sigma,
    steps,
    step_size,
    lam,
    delta,
    step_clamp,
    tau,
    clip_values,
    *,
    compact=False,
    amp=None,
    gradient_checkpointing=False,
) -> list[float] | None:
    """
    Validate the hyperparameters of :func:`purify` (the one place they are checked).

    :return: ``None`` for an adaptive rule, else the manual schedule α₀ … α_{T−1}.
    :raises ValueError: Naming the parameter, the value given and what is allowed.
    """
    if isinstance(sigma, torch.Tensor):  # per-sample noise levels (detection-driven two-level noise)
        if sigma.ndim != 1 or not torch.is_floating_point(sigma) or not bool(((sigma >= 0) & sigma.isfinite()).all()):
            raise ValueError(f"sigma as a tensor must be 1-D, floating point, finite and >= 0; got {sigma}.")
    else:
        number("sigma", sigma, low=0)
    non_negative_int("steps", steps)
    number("lam", lam, low=0, high=1, low_open=True, high_open=True)
    number("delta", delta, low=0, low_open=True)
    if len(step_clamp) != 2 or not 0 <= step_clamp[0] <= step_clamp[1]:
        raise ValueError(f"step_clamp must be (min, max) with 0 <= min <= max, got {step_clamp!r}.")
    number("tau", tau, low=0)
    if len(clip_values) != 2 or not clip_values[0] < clip_values[1]:
        raise ValueError(f"clip_values must be (min, max) with min < max, got {clip_values!r}.")
    boolean("compact", compact)
    boolean("gradient_checkpointing", gradient_checkpointing)
    if amp is not None and amp not in AMP_DTYPES:
        raise ValueError(f"amp must be None, 'bfloat16' or 'float16', got {amp!r}.")
    if amp is not None and step_size == "adaptive":
        raise ValueError(
            "amp needs step_size='adaptive-jvp' or a manual schedule: the finite difference of step_size='adaptive' "
            "(h(x + δh) − h(x) with δ = 1e-3) drowns in half-precision rounding."
        )
    if isinstance(step_size, str):
        if step_size not in ADAPTIVE_RULES:
            raise ValueError(
                f"step_size must be 'adaptive', 'adaptive-jvp', a float or a sequence of floats, got {step_size!r}."
            )
        return None
    alphas = [float(step_size)] * steps if isinstance(step_size, (int, float)) else [float(a) for a in step_size]
    if len(alphas) < steps:
        raise ValueError(f"A step_size schedule needs at least steps={steps} values, got {len(alphas)}.")
    if any(not a >= 0 for a in alphas):
        raise ValueError(f"step_size values must be >= 0, got {step_size!r}.")
    return alphas[:steps]


def _fmt(value: float) -> str:
    """A number as a report writes it: ``0.25``, ``10``, ``1e-3`` (small values in short scientific notation)."""
    value = float(value)
    if value != 0 and abs(value) < 1e-2:
        mantissa, exponent = f"{value:.6e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:g}"


def describe(
    *,
    sigma=DEFAULTS.sigma,
    steps=DEFAULTS.steps,
    step_size=DEFAULTS.step_size,
    lam=DEFAULTS.lam,
    delta=DEFAULTS.delta,
    tau=DEFAULTS.tau,
    **_ignored,
) -> str:
    """
    The ADP setting in words, from the parameters themselves (for reports and logs), e.g.
    ``"ADP sigma = 0.25, T = 10 adaptive steps (lambda = 0.05, delta = 1e-3, tau = 1e-3)"``.

    Takes the keyword arguments of :func:`purify` (others are ignored).
    """
    noise = "per sample" if isinstance(sigma, torch.Tensor) else f"= {_fmt(sigma)}"
    if step_size == "adaptive":
        schedule = f"{steps} adaptive steps (lambda = {_fmt(lam)}, delta = {_fmt(delta)}, tau = {_fmt(tau)})"
    elif step_size == "adaptive-jvp":
        schedule = f"{steps} adaptive steps, exact JVP (lambda = {_fmt(lam)}, tau = {_fmt(tau)})"
    elif isinstance(step_size, (int, float)):
        schedule = f"{steps} steps of alpha = {_fmt(step_size)}"
    else:
        schedule = f"{steps} steps of alpha = {', '.join(_fmt(a) for a in list(step_size)[:steps])}"
    return f"ADP sigma {noise}, T = {schedule}"


RANGE_TOLERANCE = 0.1


def check_images(x: torch.Tensor, clip_values: tuple[float, float]) -> None:
    """
    Refuse inputs that cannot be images in ``clip_values``: non-float tensors, NaN or ±Inf values, and values
    more than ``RANGE_TOLERANCE`` (10 %) of the range outside it -- almost always 0–255 images given to a
    [0, 1] model. Values within the tolerance are accepted and clipped by :func:`purify`, because attacks
    legitimately probe slightly outside the range (torchattacks' SPSA evaluates x ± 0.01).

    :raises ValueError: Naming the problem and the fix.
    """
    if not torch.is_floating_point(x) or x.ndim < 2:
        raise ValueError(f"x must be a floating-point N×C×H×W tensor, got {x.dtype} of shape {tuple(x.shape)}.")
    if x.numel() == 0:
        return
    lo, hi = clip_values
    x_min, x_max = torch.aminmax(x.detach())
    if not torch.isfinite(x_min + x_max):  # NaN propagates into min/max; ±Inf shows up there too
        raise ValueError("x contains NaN or Inf values; purification needs finite images.")
    tol = RANGE_TOLERANCE * (hi - lo)
    if x_min < lo - tol or x_max > hi + tol:
        raise ValueError(
            f"x has values in [{float(x_min):.4g}, {float(x_max):.4g}], outside clip_values {tuple(clip_values)} by "
            f"more than {tol:.3g}; scale the images into that range (e.g. divide 0-255 images by 255) or set "
            "clip_values."
        )


def _score(score_model, x: torch.Tensor, amp: str | None) -> torch.Tensor:
    """h(x), under autocast when ``amp`` names a dtype; always returned in ``x``'s dtype."""
    if amp is None:
        return score_model(x)
    with torch.autocast(x.device.type, dtype=AMP_DTYPES[amp]):
        return score_model(x).to(x.dtype)


def _step(score_model, x, active, alpha_t, *, lam, delta, step_clamp, tau, clip_values, amp):
    """One step of Algorithm 1 on the rows of ``x`` still evaluated; ``alpha_t`` is a float or an adaptive rule."""
    h = _score(score_model, x, amp)

    def sq_norm() -> torch.Tensor:
        return h.flatten(1).pow(2).sum(1).clamp_min(1e-30)

    if alpha_t == "adaptive":  # eq. 11: 1 − ⟨h(x), h(x + δh)⟩/‖h‖² ≈ −δ⟨h, J h⟩/‖h‖²
        ratio = (h * _score(score_model, x + delta * h, amp)).flatten(1).sum(1) / sq_norm()
        alpha = (lam * delta / (1 - ratio)).clamp(*step_clamp)
    elif alpha_t == "adaptive-jvp":  # the same rule with ⟨h, J h⟩ exact (forward-mode AD)
        _, jh = torch.func.jvp(lambda z: _score(score_model, z, amp), (x,), (h,))
        alpha = (lam / (-(h * jh).flatten(1).sum(1) / sq_norm())).clamp(*step_clamp)
    else:
        alpha = torch.full((x.shape[0],), alpha_t, dtype=x.dtype, device=x.device)
    if isinstance(alpha_t, str):
        active = active & (alpha >= tau)
    alpha = torch.where(active, alpha, torch.zeros_like(alpha))
    view = (-1,) + (1,) * (x.ndim - 1)
    return torch.where(active.view(view), (x + alpha.view(view) * h).clamp(*clip_values), x), alpha, active


def _noise(x: torch.Tensor, sigma, generator: torch.Generator | None) -> torch.Tensor:
    """x + σε, ε ~ N(0, I) from ``generator``; σ a float or one value per sample (the same ε is drawn either way)."""
    if isinstance(sigma, torch.Tensor):
        if sigma.shape[0] != x.shape[0]:
            raise ValueError(
                f"A per-sample sigma needs one value per input, got {sigma.shape[0]} for {x.shape[0]} inputs."
            )
        scale = sigma.to(x).view((-1,) + (1,) * (x.ndim - 1))
    elif sigma > 0:
        scale = sigma
    else:
        return x
    device = x.device if generator is None else generator.device
    return x + scale * torch.randn(x.shape, generator=generator, device=device).to(x)


class _Running:
    """
    The bookkeeping around Algorithm 1's loop: which samples still run, the rows of the batch the network still
    sees (``compact`` drops stopped rows; on a CPU the loop also ends once every sample has stopped), the steps
    each sample took and the α it used. None of it changes a value: stopped samples are frozen either way.
    """

    def __init__(self, x: torch.Tensor, *, compact: bool) -> None:
        n = x.shape[0]
        self.x, self.n, self.compact = x, n, compact
        self.rows = torch.arange(n, device=x.device)  # the rows of x still evaluated: x_run = x[rows]
        self.x_run, self.active = x, torch.ones(n, dtype=torch.bool, device=x.device)
        self.taken = torch.zeros(n, dtype=torch.long, device=x.device)
        self.used: list[torch.Tensor] = []

    @property
    def finished(self) -> bool:
        """Every sample has stopped (or the batch is empty): nothing is left to evaluate."""
        return len(self.rows) == 0

    def skip(self) -> None:
        self.used.append(self.x.new_zeros(self.n))

    def update(self, x_run: torch.Tensor, alpha: torch.Tensor, active: torch.Tensor, *, last: bool) -> None:
        compacted = len(self.rows) < self.n
        self.used.append(alpha.new_zeros(self.n).index_copy(0, self.rows, alpha) if compacted else alpha)
        self.taken = self.taken.index_add(0, self.rows, active.long()) if compacted else self.taken + active.long()
        self.x_run, self.active = x_run, active
        if last or not (self.compact or x_run.device.type == "cpu"):  # reading the mask: a host sync (free on CPU)
            return
        if (self.compact and not bool(active.all())) or not bool(active.any()):
            self.x = self.output()  # park the stopped rows, frozen from here on
            self.rows, self.x_run, self.active = self.rows[active], x_run[active], active[active]

    def output(self) -> torch.Tensor:
        return self.x.index_copy(0, self.rows, self.x_run) if len(self.rows) < self.n else self.x_run

    def info(self) -> dict:
        step_sizes = torch.stack(self.used, 1) if self.used else self.x.new_zeros(self.n, 0)
        return {"steps": self.taken, "step_sizes": step_sizes.detach()}


def purify(
    score_model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    sigma: float = DEFAULTS.sigma,
    steps: int = DEFAULTS.steps,
    step_size: str | float | Sequence[float] = DEFAULTS.step_size,
    lam: float = DEFAULTS.lam,
    delta: float = DEFAULTS.delta,
    step_clamp: tuple[float, float] = DEFAULTS.step_clamp,
    tau: float = DEFAULTS.tau,
    clip_values: tuple[float, float] = DEFAULTS.clip_values,
    generator: torch.Generator | None = None,
    return_info: bool = False,
    compact: bool = False,
    amp: str | None = None,
    gradient_checkpointing: bool = False,
):
    """
    Purify ``x`` by one run of ADP: x₀ = clip(x + σε), ε ~ N(0, I); then for t = 1 … T

        x' = x_{t−1} + δ h(x_{t−1})
        α  = clamp(λδ / (1 − ⟨h(x_{t−1}), h(x')⟩ / ‖h(x_{t−1})‖²), step_clamp)       (paper eq. 11)
        x_t = clip(x_{t−1} + α h(x_{t−1}))

    per sample; a sample whose α falls below τ stops for good and keeps its current value.

    Where the paper and the authors' released code differ this follows the code, as the issue asks:
    δ = 1e-3 (the paper says 1e-5, too small for float32 differences), α clamped to [1e-5, 0.1], and the
    stop test is α < τ (the paper's Algorithm 1 tests ‖h(x_t)‖ < τ). Manual schedules (a float or a
    sequence, as the paper uses for σ = 0) are followed as given: τ and the clamp apply to adaptive steps only.

    :param score_model: The noise-level-free score network h: ``N×C×H×W`` → same shape.
    :param x: Inputs, ``N×C×H×W``, values in ``clip_values``.
    :param sigma: Standard deviation σ ≥ 0 of the injected Gaussian noise, or a 1-D tensor of one σ per sample
        (the detection-driven two-level noise; the same ε is drawn either way).
    :param steps: The maximum number of steps T ≥ 0.
    :param step_size: ``"adaptive"`` (eq. 11 with the δ finite difference), ``"adaptive-jvp"`` (eq. 11 with
        ⟨h, J h⟩ computed exactly by a Jacobian-vector product, ``torch.func.jvp``: α = λ‖h‖² / (−⟨h, J h⟩), the
        δ → 0 limit of the δ rule; about 1.5 times its cost), a constant α, or a schedule of at least T values.
    :param lam: λ in (0, 1): the fraction of the score removed per adaptive step.
    :param delta: δ > 0: the finite-difference step of the adaptive rule.
    :param step_clamp: ``(min, max)`` bounds on adaptive steps.
    :param tau: Stopping threshold τ on adaptive steps.
    :param clip_values: ``(min, max)`` of valid inputs; every iterate is clipped into it.
    :param generator: Source of the noise ε (default: torch's global generator).
    :param return_info: Also return ``{"steps": N int tensor of steps taken, "step_sizes": N×T tensor of
        the α used (0 where a sample had stopped)}``.
    :param compact: Remove stopped samples from the batch the network sees in later steps (results equal
        freezing them, up to the network's own batch-size rounding). Deciding needs the number of stopped
        samples, one host synchronisation per step (free on CPU; on a GPU it pays when samples stop, e.g.
        σ = 0 or a large τ). Off: on a GPU no synchronisation in the loop; on a CPU the loop still ends as
        soon as every sample has stopped (exact: nothing is left to change).
    :param amp: ``"bfloat16"`` or ``"float16"``: run the network forward under ``torch.autocast`` (its output
        is cast back to ``x``'s dtype; steps, ratios and clipping stay in ``x``'s dtype). Needs
        ``step_size="adaptive-jvp"`` or a manual schedule: the δ difference would drown in the rounding.
    :param gradient_checkpointing: Gradient checkpointing per step (``torch.utils.checkpoint``) when autograd records:
        a full-gradient backward stores one batch per step instead of every activation of 2T network
        passes, and recomputes each step once. Same values and gradients.
    :return: The purified batch (same shape and dtype as ``x``), and the info dict if ``return_info``.
    """
    alphas = check_params(
        sigma,
        steps,
        step_size,
        lam,
        delta,
        step_clamp,
        tau,
        clip_values,
        compact=compact,
        amp=amp,
        gradient_checkpointing=gradient_checkpointing,
    )
    check_images(x, clip_values)
    step = functools.partial(
        _step, score_model, lam=lam, delta=delta, step_clamp=step_clamp, tau=tau, clip_values=clip_values, amp=amp
    )
    if gradient_checkpointing and torch.is_grad_enabled():
        step = functools.partial(torch.utils.checkpoint.checkpoint, step, use_reentrant=False)
    x_0 = _noise(x, sigma, generator).clamp(*clip_values)  # x₀ = clip(x + σε)
    run = _Running(x_0, compact=compact)
    for t in range(steps):  # t = 1 … T
        if run.finished:
            run.skip()
            continue
        alpha_t = step_size if alphas is None else alphas[t]  # eq. 11 ("adaptive") or the given schedule
        x_t, alpha, active = step(run.x_run, run.active, alpha_t)  # x_t = clip(x_{t−1} + α_t h(x_{t−1})) while α_t ≥ τ
        run.update(x_t, alpha, active, last=t + 1 == steps)
    return (run.output(), run.info()) if return_info else run.output()
