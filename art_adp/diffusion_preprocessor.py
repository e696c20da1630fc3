"""
Diffusion purifiers as ART preprocessing defences, with :class:`~art_adp.ADPPurifier`'s contract:

    PyTorchClassifier(..., preprocessing_defences=[ReverseDiffusionPurifier(model, sigma=0.25, steps=20)])
    PyTorchClassifier(..., preprocessing_defences=[DenoisedSmoothingPurifier(model, sigma=0.25)])

``model`` is a ``VPScore`` (a DDPM network; :func:`~art_adp.from_diffusers`), an ``EDMScore`` or a ``DenoiserUNet``.
Keyword-only parameters listed in ``params`` (ART's ``set_params`` validates and rolls back), ``gradient="full"``
(autograd through every step: :data:`~art_adp.preprocessor.DEFAULT_GRADIENT`) or ``"bpda"`` (straight-through),
``batch_size`` chunks, a ``torch.Generator``. The estimator-level tools -- :class:`~art_adp.EOTClassifier`,
:class:`~art_adp.DefendedModel`, the attacks and the evaluation card -- treat them as they treat ADPPurifier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._checks import boolean, number, one_of, positive_int
from .diffusion_purify import SAMPLERS, one_shot_denoise, reverse_diffusion
from .preprocessor import DEFAULT_GRADIENT, GRADIENTS, PurifierPyTorch
from .purification import DEFAULTS, _fmt
from .score.denoiser import Denoiser

__all__ = ["DenoisedSmoothingPurifier", "ReverseDiffusionPurifier"]


class _DiffusionPurifier(PurifierPyTorch):
    """What both purifiers share beyond :class:`~art_adp.preprocessor.PurifierPyTorch`: the model as a frozen
    :class:`Denoiser` and the checks of σ, the clip values, the gradient mode and the batch size. Subclasses
    implement :meth:`_purify`."""

    def __init__(self, model: torch.nn.Module, *, device_type: str, apply_fit: bool, apply_predict: bool) -> None:
        super().__init__(device_type=device_type, is_fitted=True, apply_fit=apply_fit, apply_predict=apply_predict)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        self.denoiser = Denoiser(model).to(self.device).eval().requires_grad_(False)

    def forward(self, x: torch.Tensor, y: Any | None = None) -> tuple[torch.Tensor, Any | None]:
        """
        Purify ``x`` once, in chunks of ``batch_size``.

        :param x: Inputs ``N×C×H×W`` in ``clip_values``, on any device.
        :param y: Labels, returned unchanged.
        :return: ``(purified x, y)`` on ``x``'s device and dtype; its gradient is the identity (``"bpda"``) or the
            exact one through every step (``"full"``).
        """
        if not torch.is_floating_point(x):
            name = type(self).__name__
            raise ValueError(f"{name} expects floating-point inputs in {self.clip_values}, got {x.dtype}.")
        return self._through(x.to(self.device, torch.float32)).to(x.device, x.dtype), y

    def _check_params(self) -> None:
        number("sigma", self.sigma, low=0, low_open=True)
        if len(self.clip_values) != 2 or not self.clip_values[0] < self.clip_values[1]:
            raise ValueError(f"clip_values must be (min, max) with min < max, got {self.clip_values!r}.")
        one_of("gradient", self.gradient, GRADIENTS)
        positive_int("batch_size", self.batch_size)
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {type(self.generator).__name__}.")


class ReverseDiffusionPurifier(_DiffusionPurifier):
    """
    Reverse-diffusion purification (DiffPure, Nie et al. 2022; GDMP, Wang et al. 2022) as an ART PyTorch preprocessor:
    diffuse every input to level σ* and return with K DDIM, ancestral or Heun steps
    (:func:`~art_adp.diffusion_purify.reverse_diffusion`).

    | Paper link: https://arxiv.org/abs/2205.07460 (DiffPure); https://arxiv.org/abs/2205.14969 (GDMP)

    ``gradient="full"`` differentiates through every step, the injected noise as a reparameterisation (the
    white-box gradient of Lee & Kim 2023 and DiffHammer); with ``gradient_checkpointing=True`` the same gradient at
    the memory of one step.
    """

    params = [
        "sigma",
        "steps",
        "sampler",
        "sigma_min",
        "clip_values",
        "gradient",
        "gradient_checkpointing",
        "batch_size",
        "generator",
    ]

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        sigma: float = DEFAULTS.sigma,
        steps: int = 20,
        sampler: str = "ddim",
        sigma_min: float = 0.01,
        clip_values: tuple[float, float] = DEFAULTS.clip_values,
        gradient: str = DEFAULT_GRADIENT,
        gradient_checkpointing: bool = False,
        batch_size: int = 256,
        generator: torch.Generator | None = None,
        apply_fit: bool = False,
        apply_predict: bool = True,
        device_type: str = "gpu",
    ) -> None:
        """
        :param model: A ``VPScore`` (DDPM; ``from_diffusers``), an ``EDMScore`` or a ``DenoiserUNet``.
        :param sigma: σ* > 0, the diffusion level in [0, 1] pixel units (VP: the nearest step of the schedule).
        :param steps: K ≥ 1, the reverse steps.
        :param sampler: ``"ddim"`` (η = 0; Euler on an EDM model), ``"ancestral"`` (η = 1) or ``"heun"``.
        :param sigma_min: The smallest nonzero level of an EDM schedule (pixels; unused on VP).
        :param clip_values: ``(min, max)`` of the input range.
        :param gradient: ``"full"`` (autograd through every step; the default, ``DEFAULT_GRADIENT``) or ``"bpda"``
            (straight-through).
        :param gradient_checkpointing: Checkpoint every step for ``gradient="full"`` (same gradient, one step's
            memory, each step recomputed once).
        :param batch_size: Inputs purified per chunk.
        :param generator: Source of the noise (default: torch's global generator).
        :param apply_fit: Purify at training time.
        :param apply_predict: Purify at prediction time.
        :param device_type: ``"gpu"`` (CUDA when available, else CPU) or ``"cpu"``.
        """
        super().__init__(model, device_type=device_type, apply_fit=apply_fit, apply_predict=apply_predict)
        self.sigma, self.steps, self.sampler, self.sigma_min = sigma, steps, sampler, sigma_min  # the hyperparameters
        self.clip_values, self.gradient_checkpointing = clip_values, gradient_checkpointing
        self.gradient, self.batch_size, self.generator = gradient, batch_size, generator
        self._check_params()

    def _check_params(self) -> None:
        super()._check_params()
        positive_int("steps", self.steps)
        one_of("sampler", self.sampler, SAMPLERS)
        boolean("gradient_checkpointing", self.gradient_checkpointing)
        number("sigma_min", self.sigma_min, low=0, low_open=True)
        if self.denoiser.levels is None and not self.sigma_min < self.sigma:
            raise ValueError(f"sigma_min must be below sigma={self.sigma!r}, got {self.sigma_min!r}.")
        self.denoiser.schedule(self.sigma, self.steps, sigma_min=self.sigma_min)  # VP: σ on the schedule, enough steps

    def describe(self) -> str:
        """The setting in words, e.g. ``"reverse diffusion to sigma* = 0.25, K = 20 ddim steps"``."""
        level, t = self.denoiser.level(self.sigma)
        where = "" if t is None else f" (VP step t* = {t}, sigma_t = {_fmt(level)})"
        return f"reverse diffusion to sigma* = {_fmt(self.sigma)}{where}, K = {self.steps} {self.sampler} steps"

    def _purify(self, x: torch.Tensor, on_state: Callable[..., None] | None = None) -> torch.Tensor:
        return reverse_diffusion(
            self.denoiser,
            x,
            sigma=self.sigma,
            steps=self.steps,
            sampler=self.sampler,
            sigma_min=self.sigma_min,
            clip_values=self.clip_values,
            generator=self.generator,
            gradient_checkpointing=self.gradient_checkpointing,
            on_state=on_state,
        )


class DenoisedSmoothingPurifier(_DiffusionPurifier):
    """
    One-shot denoised smoothing (Carlini et al. 2023) as an ART PyTorch preprocessor: ``clip(D(x + σε, σ))``, one
    call of the diffusion model's denoiser at the level of the noise
    (:func:`~art_adp.diffusion_purify.one_shot_denoise`).

    | Paper link: https://arxiv.org/abs/2206.10550 (Carlini, Tramèr, Dvijotham, Rice, Sun & Kolter, ICLR 2023)

    As a purifier it adds the noise itself. As the base of randomized smoothing, whose draws already carry the
    noise, use ``add_noise=False`` -- :func:`~art_adp.certification.denoised_smoothing_classifier` builds that base for
    :func:`~art_adp.certify`.
    """

    params = ["sigma", "add_noise", "clip_values", "gradient", "batch_size", "generator"]

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        sigma: float = DEFAULTS.sigma,
        add_noise: bool = True,
        clip_values: tuple[float, float] = DEFAULTS.clip_values,
        gradient: str = DEFAULT_GRADIENT,
        batch_size: int = 256,
        generator: torch.Generator | None = None,
        apply_fit: bool = False,
        apply_predict: bool = True,
        device_type: str = "gpu",
    ) -> None:
        """
        :param model: A ``VPScore`` (DDPM; ``from_diffusers``), an ``EDMScore`` or a ``DenoiserUNet``.
        :param sigma: The noise level σ > 0 in [0, 1] pixel units (VP: denoised at the nearest step).
        :param add_noise: Add σε here; ``False`` for inputs that already carry it (a smoothing base).
        :param clip_values: ``(min, max)`` of the input range; the output is clipped into it.
        :param gradient: ``"full"`` (autograd through the denoiser; the default, ``DEFAULT_GRADIENT``) or ``"bpda"``
            (straight-through).
        :param batch_size: Inputs denoised per chunk.
        :param generator: Source of the noise (default: torch's global generator).
        :param apply_fit: Purify at training time.
        :param apply_predict: Purify at prediction time.
        :param device_type: ``"gpu"`` (CUDA when available, else CPU) or ``"cpu"``.
        """
        super().__init__(model, device_type=device_type, apply_fit=apply_fit, apply_predict=apply_predict)
        self.sigma, self.add_noise, self.clip_values = sigma, add_noise, clip_values  # the hyperparameters
        self.gradient, self.batch_size, self.generator = gradient, batch_size, generator
        self._check_params()

    def _check_params(self) -> None:
        super()._check_params()
        boolean("add_noise", self.add_noise)

    def describe(self) -> str:
        """The setting in words, e.g. ``"denoised smoothing sigma = 0.25, one denoiser call"``."""
        level, t = self.denoiser.level(self.sigma)
        where = "" if t is None else f" (VP step t = {t}, sigma_t = {_fmt(level)})"
        return f"denoised smoothing sigma = {_fmt(self.sigma)}{where}, one denoiser call"

    def _purify(self, x: torch.Tensor, on_state: Callable[..., None] | None = None) -> torch.Tensor:
        out = one_shot_denoise(
            self.denoiser,
            x,
            sigma=self.sigma,
            add_noise=self.add_noise,
            clip_values=self.clip_values,
            generator=self.generator,
        )
        if on_state is not None:  # one state: the denoised image
            on_state(out)
        return out
