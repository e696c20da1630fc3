"""ADP purification (Yoon, Hwang & Lee, ICML 2021, https://arxiv.org/abs/2106.06041), Algorithm 1.

One run of the algorithm as a pure function over a ``score_model(x) -> h(x)``. It never switches off
autograd: the caller decides (ART's numpy ``__call__`` adds ``no_grad``; a full-gradient attack
differentiates straight through it). ADP's hyperparameters are declared once, with their checks, in
:class:`ADPParams`; the speed options (compaction, autocast, gradient checkpointing) live in
:mod:`art_adp._fast_paths` and change no value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.func

from ._checks import non_negative_int, number
from ._fast_paths import RunningBatch, autocast_score, check_speed_options, checkpointed

__all__ = ["ADPParams", "DEFAULTS", "HYPERPARAMETERS", "SPEED_OPTIONS", "adaptive_step_size", "check_images", "purify"]

ADAPTIVE_RULES = ("adaptive", "adaptive-jvp")
SPEED_OPTIONS = ("compact", "amp", "gradient_checkpointing")


def _fmt(value: float) -> str:
    """A number as a report writes it: ``0.25``, ``10``, ``1e-3`` (small values in short scientific notation)."""
    value = float(value)
    if value != 0 and abs(value) < 1e-2:
        mantissa, exponent = f"{value:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


@dataclasses.dataclass(frozen=True, eq=False)
class ADPParams:
    """
    ADP's hyperparameters, declared once: their defaults (the authors' released code; see :func:`purify` for where
    the paper's text differs), their checks (:meth:`check`) and their schedule (:meth:`schedule`). :func:`purify`
    and :class:`~art_adp.ADPPurifier` take their keywords and defaults from here.

    :param sigma: σ ≥ 0 of the injected Gaussian noise (:func:`purify` also passes a 1-D tensor of one σ per sample
        through the same check).
    :param steps: T ≥ 0, the most steps.
    :param step_size: ``"adaptive"`` (eq. 11, δ finite difference), ``"adaptive-jvp"`` (eq. 11, exact JVP), a constant
        α or a schedule of at least T values.
    :param lam: λ in (0, 1), the fraction of the score removed per adaptive step.
    :param delta: δ > 0, the finite-difference step of the adaptive rule.
    :param step_clamp: ``(min, max)`` bounds of an adaptive α.
    :param tau: τ ≥ 0, the stopping threshold on an adaptive α.
    :param clip_values: ``(min, max)`` of valid inputs; every iterate is clipped into it.
    :param clip_noise: Clip the noisy input x₀ = x + σε into ``clip_values`` too (the paper's §5 noise injection, the
        default). A score model or denoiser trained on unclipped Gaussian noise (DSM as usual; the DenoiserUNet; the
        exact score) sees x₀ where it learned only when it is not clipped: ``False`` there.
    """

    sigma: float = 0.25
    steps: int = 10
    step_size: str | float | Sequence[float] = "adaptive"
    lam: float = 0.05
    delta: float = 1e-3
    step_clamp: tuple[float, float] = (1e-5, 0.1)
    tau: float = 1e-3
    clip_values: tuple[float, float] = (0.0, 1.0)
    clip_noise: bool = True

    def check(self) -> "ADPParams":
        """
        :return: ``self``, once every hyperparameter is valid.
        :raises ValueError: Naming the parameter, the value given and what is allowed.
        """
        if isinstance(self.sigma, torch.Tensor):  # per-sample noise levels (detection-driven two-level noise)
            s = self.sigma
            if s.ndim != 1 or not torch.is_floating_point(s) or not bool(((s >= 0) & s.isfinite()).all()):
                raise ValueError(f"sigma as a tensor must be 1-D, floating point, finite and >= 0; got {s}.")
        else:
            number("sigma", self.sigma, low=0)
        non_negative_int("steps", self.steps)
        number("lam", self.lam, low=0, high=1, low_open=True, high_open=True)
        number("delta", self.delta, low=0, low_open=True)
        if len(self.step_clamp) != 2 or not 0 <= self.step_clamp[0] <= self.step_clamp[1]:
            raise ValueError(f"step_clamp must be (min, max) with 0 <= min <= max, got {self.step_clamp!r}.")
        number("tau", self.tau, low=0)
        if len(self.clip_values) != 2 or not self.clip_values[0] < self.clip_values[1]:
            raise ValueError(f"clip_values must be (min, max) with min < max, got {self.clip_values!r}.")
        if not isinstance(self.clip_noise, bool):
            raise ValueError(f"clip_noise must be True or False, got {self.clip_noise!r}.")
        self.schedule()
        return self

    def schedule(self) -> list[str | float]:
        """
        α₁ … α_T: the adaptive rule's name T times, or the manual step sizes.

        :raises ValueError: For an unknown rule, a schedule shorter than T or a negative step.
        """
        if isinstance(self.step_size, str):
            if self.step_size not in ADAPTIVE_RULES:
                raise ValueError(
                    "step_size must be 'adaptive', 'adaptive-jvp', a float or a sequence of floats, "
                    f"got {self.step_size!r}."
                )
            return [self.step_size] * self.steps
        if isinstance(self.step_size, (int, float)):
            alphas = [float(self.step_size)] * self.steps
        else:
            alphas = [float(a) for a in self.step_size]
        if len(alphas) < self.steps:
            raise ValueError(f"A step_size schedule needs at least steps={self.steps} values, got {len(alphas)}.")
        if any(not a >= 0 for a in alphas):
            raise ValueError(f"step_size values must be >= 0, got {self.step_size!r}.")
        schedule: list[str | float] = [*alphas[: self.steps]]
        return schedule

    def describe(self) -> str:
        """
        The setting in words, for reports and logs, e.g.
        ``"ADP sigma = 0.25, T = 10 adaptive steps (lambda = 0.05, delta = 1e-3, tau = 1e-3)"``.
        """
        noise = "per sample" if isinstance(self.sigma, torch.Tensor) else f"= {_fmt(self.sigma)}"
        lam, delta, tau, steps = _fmt(self.lam), _fmt(self.delta), _fmt(self.tau), self.steps
        if self.step_size == "adaptive":
            schedule = f"{steps} adaptive steps (lambda = {lam}, delta = {delta}, tau = {tau})"
        elif self.step_size == "adaptive-jvp":
            schedule = f"{steps} adaptive steps, exact JVP (lambda = {lam}, tau = {tau})"
        elif isinstance(self.step_size, (int, float)):
            schedule = f"{steps} steps of alpha = {_fmt(self.step_size)}"
        else:
            schedule = f"{steps} steps of alpha = {', '.join(_fmt(float(a)) for a in self.schedule())}"
        return f"ADP sigma {noise}{'' if self.clip_noise else ' (noisy input not clipped)'}, T = {schedule}"


DEFAULTS = ADPParams()
HYPERPARAMETERS = tuple(f.name for f in dataclasses.fields(ADPParams))


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


def adaptive_step_size(
    score: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    h: torch.Tensor,
    rule: str,
    *,
    lam: float,
    delta: float,
    step_clamp: tuple[float, float],
) -> torch.Tensor:
    """
    The adaptive step of eq. 11, per sample: α = clamp(λδ / (1 − ⟨h(x), h(x + δh)⟩ / ‖h(x)‖²)) (``"adaptive"``), or
    its δ → 0 limit α = clamp(λ‖h‖² / (−⟨h, J h⟩)) with J h exact by forward-mode AD (``"adaptive-jvp"``).

    The ratio and α are computed in float32 (or ``x``'s dtype if wider) whatever the network's dtype: in bfloat16,
    1 − ratio ≈ 4e-3 would sit at the format's resolution; in float16, ‖h‖² overflows above 65504.

    :param h: h(x), the score at ``x``.
    :return: α, one value per sample, float32 or wider.
    """
    wide = torch.promote_types(torch.promote_types(x.dtype, h.dtype), torch.float32)
    h_flat = h.flatten(1).to(wide)
    h_sq = h_flat.pow(2).sum(1).clamp_min(1e-30)
    if rule == "adaptive":  # 1 − ⟨h(x), h(x + δh)⟩/‖h‖² ≈ −δ⟨h, J h⟩/‖h‖²
        ratio = (h_flat * score(x + delta * h).flatten(1).to(wide)).sum(1) / h_sq
        alpha = lam * delta / (1 - ratio)
    else:
        jh = torch.func.jvp(score, (x,), (h,))[1]
        alpha = lam * h_sq / -(h_flat * jh.flatten(1).to(wide)).sum(1)
    return alpha.clamp(*step_clamp)


def _step(score, x, active, alpha_t, *, lam, delta, step_clamp, tau, clip_values):
    """One step of Algorithm 1: x_t = clip(x_{t−1} + α_t h(x_{t−1})) for the samples still running (α_t ≥ τ)."""
    h = score(x)
    if isinstance(alpha_t, str):  # eq. 11
        alpha = adaptive_step_size(score, x, h, alpha_t, lam=lam, delta=delta, step_clamp=step_clamp)
        active = active & (alpha >= tau)
    else:  # a given schedule: τ and the clamp do not apply
        wide = torch.promote_types(torch.promote_types(x.dtype, h.dtype), torch.float32)
        alpha = torch.full((x.shape[0],), alpha_t, dtype=wide, device=x.device)
    alpha = torch.where(active, alpha, torch.zeros_like(alpha))
    view = (-1,) + (1,) * (x.ndim - 1)
    x_next = (x.to(alpha.dtype) + alpha.view(view) * h.to(alpha.dtype)).clamp(*clip_values).to(x.dtype)
    return torch.where(active.view(view), x_next, x), alpha, active


def _algorithm1(
    step: Callable, x: torch.Tensor, params: ADPParams, generator, *, compact: bool, on_state: Callable | None = None
) -> RunningBatch:
    """x₀ = clip(x + σε) (without the clip unless ``clip_noise``); then T times ``step``, each sample until its α
    falls below τ; ``on_state(x_t)`` after each."""
    x_0 = _noise(x, params.sigma, generator)
    x_0 = x_0.clamp(*params.clip_values) if params.clip_noise else x_0
    run = RunningBatch(x_0, steps=params.steps, compact=compact)
    for alpha_t in params.schedule():  # t = 1 … T: eq. 11's rule or the given α_t
        run.advance(step, alpha_t)
        if on_state is not None:
            on_state(run.output())
    return run


def purify(
    score_model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    sigma: float | torch.Tensor = DEFAULTS.sigma,
    steps: int = DEFAULTS.steps,
    step_size: str | float | Sequence[float] = DEFAULTS.step_size,
    lam: float = DEFAULTS.lam,
    delta: float = DEFAULTS.delta,
    step_clamp: tuple[float, float] = DEFAULTS.step_clamp,
    tau: float = DEFAULTS.tau,
    clip_values: tuple[float, float] = DEFAULTS.clip_values,
    clip_noise: bool = DEFAULTS.clip_noise,
    generator: torch.Generator | None = None,
    return_info: bool = False,
    compact: bool = False,
    amp: str | None = None,
    gradient_checkpointing: bool = False,
    on_state: Callable[[torch.Tensor], None] | None = None,
):
    """
    Purify ``x`` by one run of ADP: x₀ = clip(x + σε), ε ~ N(0, I); then for t = 1 … T

        x' = x_{t−1} + δ h(x_{t−1})
        α  = clamp(λδ / (1 − ⟨h(x_{t−1}), h(x')⟩ / ‖h(x_{t−1})‖²), step_clamp)       (paper eq. 11)
        x_t = clip(x_{t−1} + α h(x_{t−1}))

    per sample; a sample whose α falls below τ stops for good and keeps its current value.

    Where the paper and the authors' released code differ this follows the code: δ = 1e-3 (the paper says 1e-5, too
    small for float32 differences), α clamped to [1e-5, 0.1], and the stop test is α < τ (the paper's Algorithm 1
    tests ‖h(x_t)‖ < τ). Manual schedules (a float or a sequence, as the paper uses for σ = 0) are followed as
    given: τ and the clamp apply to adaptive steps only.

    :param score_model: The noise-level-free score network h: ``N×C×H×W`` → same shape.
    :param x: Inputs, ``N×C×H×W``, values in ``clip_values``.
    :param sigma, steps, step_size, lam, delta, step_clamp, tau, clip_values, clip_noise: ADP's hyperparameters, as
        :class:`ADPParams` documents and checks them (σ, T, the step rule, λ, δ, the α clamp, τ, the input range,
        whether x₀ is clipped: the paper's ``True``, or ``False`` for a model trained on unclipped noise).
    :param generator: Source of the noise ε (default: torch's global generator).
    :param return_info: Also return ``{"steps": N int tensor of steps taken, "step_sizes": N×T tensor of
        the α used (0 where a sample had stopped)}``.
    :param compact: Speed: remove stopped samples from the batch the network sees in later steps (results equal
        freezing them, up to the network's own batch-size rounding); one host synchronisation per step. Off: on a
        CPU the loop still ends as soon as every sample has stopped.
    :param amp: Speed: ``"bfloat16"`` or ``"float16"`` runs the network forward under ``torch.autocast`` (output cast
        back to ``x``'s dtype). Needs ``step_size="adaptive-jvp"`` or a manual schedule.
    :param gradient_checkpointing: Memory: recompute each step in the backward pass instead of storing every
        activation of 2T network passes (same values and gradients).
    :param on_state: Called with each state x_t, t = 1 … T, as the loop reaches it (with autograd when it records;
        x_T is the result): what an attack on the intermediate states reads
        (:class:`~art_adp.attacks.purified_state_loss.PurifiedStateLoss`). It changes no value.
    :return: The purified batch (same shape and dtype as ``x``), and the info dict if ``return_info``.
    """
    params = ADPParams(cast(float, sigma), steps, step_size, lam, delta, step_clamp, tau, clip_values,
                       clip_noise).check()  # fmt: skip
    check_speed_options(step_size, compact=compact, amp=amp, gradient_checkpointing=gradient_checkpointing)
    check_images(x, clip_values)
    score = autocast_score(score_model, amp)
    step = functools.partial(
        _step, score, lam=lam, delta=delta, step_clamp=step_clamp, tau=tau, clip_values=clip_values
    )
    run = _algorithm1(
        checkpointed(step) if gradient_checkpointing else step, x, params, generator, compact=compact, on_state=on_state
    )
    return (run.output(), run.info()) if return_info else run.output()
