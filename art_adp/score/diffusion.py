"""
Pretrained diffusion models as ADP's score model: thin adapters from a noise-conditional network to ``h(x)``.

ADP sees one function, ``score_model(x) -> h(x)`` with ``h(x) ≈ σ·∇ₓ log p_σ(x)`` on images ``x`` in [0, 1]
(the score at noise level σ is ``h(x)/σ``). A diffusion model is conditioned on a noise level or a time step; an
adapter fixes that level and returns h. As in k-diffusion's ``Denoiser`` wrappers, each adapter overrides one
method, :meth:`DiffusionScore.noise`: the network's estimate of the standardised noise ε̂ at the fixed level.

The formula and its units. Let the network work on ``x' = a·x + b`` (``data_range = (lo, hi)``: ``a = hi − lo``,
``b = lo``; ``(-1, 1)`` gives ``x' = 2x − 1``). Noise of standard deviation σ on the [0, 1] pixels is noise of
``σ' = a·σ`` on the network's scale, with the *same* standard normal ε:  ``x' = x₀' + σ'ε``. Tweedie's formula
gives ``σ'·∇_{x'} log p'_{σ'}(x') = −E[ε | x']``, and since ``∇_{x'} = ∇ₓ / a`` and ``σ' = a·σ``,

    h(x) = σ·∇ₓ log p_σ(x) = −E[ε | x] = −ε̂(x)            (dimensionless: no factor of a, in either scale)

so h is minus the network's noise estimate, whatever the network's pixel scale. What does depend on the scale
is which level of the network matches σ:

- VP / DDPM (``alphas_cumprod`` ᾱ_t, :class:`VPScore`): ``x_t = √ᾱ_t·x₀' + √(1 − ᾱ_t)·ε`` is ``√ᾱ_t`` times the
  variance-exploding ``x₀' + σ_t'·ε`` with ``σ_t' = √((1 − ᾱ_t)/ᾱ_t)``. The adapter takes the step t whose
  ``σ_t'`` is nearest (in log σ) to ``a·σ``, feeds ``x_t = √ᾱ_t·x'`` and t, and turns the output into ε̂:
  ``"epsilon"``: ε̂ = output; ``"v_prediction"`` (v = √ᾱ·ε − √(1−ᾱ)·x₀): ε̂ = √ᾱ·v + √(1−ᾱ)·x_t;
  ``"sample"`` (x₀ prediction): ε̂ = (x_t − √ᾱ·x̂₀)/√(1−ᾱ). Its noise level in pixels is ``σ = σ_t'/a``
  (attribute :attr:`~DiffusionScore.sigma`; a discrete schedule realises the nearest of its levels).
- EDM / k-diffusion denoisers D(x', σ') (:class:`EDMScore`): ε̂ = (x' − D(x', a·σ))/(a·σ), that is
  ``h = (D − x')/σ'``; the denoiser's own preconditioning (c_in, c_skip, c_out) stays inside D.

Nothing here imports ``diffusers``: the adapters take any callable ``model(x, t)`` / ``denoiser(x, sigma)``.
Only :func:`from_diffusers` reads a diffusers UNet and scheduler (their config: ``prediction_type``,
``variance_type``, ``alphas_cumprod``) into a :class:`DiffusersScore`, which saves and loads like the other score
models, and nothing is ever downloaded (:func:`~art_adp.score.diffusers_folder.load_diffusers` reads a folder).

| Paper link (ADP): https://arxiv.org/abs/2106.06041
| Paper link (DDPM): https://arxiv.org/abs/2006.11239 ; (EDM): https://arxiv.org/abs/2206.00364 ;
  (v-prediction): https://arxiv.org/abs/2202.00512
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn

from .._checks import boolean, integer, number, one_of

__all__ = ["DiffusersScore", "DiffusionScore", "EDMScore", "PREDICTION_TYPES", "VPScore", "from_diffusers", "score_at"]

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")  # diffusers' names (scheduler.config.prediction_type)


def _check_range(data_range: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in data_range)
        ok = math.isfinite(lo) and math.isfinite(hi) and lo < hi
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"data_range must be the (min, max) pixel range the network was trained on, e.g. (-1.0, 1.0), "
            f"got {data_range!r}."
        )
    return lo, hi


class DiffusionScore(nn.Module):
    """
    ``h(x) = −ε̂(x)``: ADP's noise-level-free score from a network's noise estimate at one fixed noise level.

    Subclasses implement :meth:`noise`. Inputs are images in [0, 1]; the network sees ``a·x + b`` (``data_range``).
    """

    def __init__(self, model: Callable[..., Any], *, sigma: float, data_range: tuple[float, float]) -> None:
        """
        :param model: The noise-conditional network (an ``nn.Module`` is registered as a submodule, so ``.to()``,
            ``.eval()`` and ``requires_grad_`` reach it).
        :param sigma: The noise level σ > 0 of h, in [0, 1] pixel units.
        :param data_range: ``(min, max)`` of the network's pixel scale, e.g. ``(-1.0, 1.0)``.
        """
        super().__init__()
        if not callable(model):
            raise ValueError(f"model must be a callable network, got {type(model).__name__}.")
        self.model = model
        self.data_range = _check_range(data_range)
        self.scale = self.data_range[1] - self.data_range[0]  # a in x' = a·x + b
        self.sigma = number("sigma", sigma, low=0, low_open=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """h(x) = σ·∇ₓ log p_σ(x) = −ε̂(x) for ``x`` (``N×C×H×W`` in [0, 1]); same shape and dtype."""
        return -self.noise(x * self.scale + self.data_range[0])

    def noise(self, x: torch.Tensor) -> torch.Tensor:
        """ε̂ = E[ε | x' = x₀' + σ'ε] for ``x`` on the network's scale, σ' = a·σ (implemented by each adapter)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"sigma={self.sigma:.6g}, data_range={self.data_range}"


def _nearest_step(levels: torch.Tensor, sigma: float, data_range: tuple[float, float]) -> int:
    """The step whose level ``levels[t]`` (on the network's scale) is nearest, in log, to ``sigma`` in [0, 1] pixel
    units; a ``sigma`` outside the levels is refused."""
    lo, hi = data_range
    wanted = (hi - lo) * number("sigma", sigma, low=0, low_open=True)
    low, high = float(levels[0]), float(levels[-1])
    if not low * (1 - 1e-6) <= wanted <= high * (1 + 1e-6):
        raise ValueError(
            f"sigma={sigma!r} is outside the schedule's noise levels [{low / (hi - lo):.4g}, "
            f"{high / (hi - lo):.4g}] in [0, 1] pixel units ({low:.4g} … {high:.4g} on the network's "
            f"scale {(lo, hi)}); choose a sigma inside it or give timestep=."
        )
    return int((levels.log() - math.log(wanted)).abs().argmin())


def _output(value: Any, x: torch.Tensor, learned_variance: bool) -> torch.Tensor:
    """The network's prediction as a tensor of ``x``'s shape (the ε half of a learned-variance output)."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"model(x, t) must return a tensor, got {type(value).__name__}; for a diffusers UNet use "
            "from_diffusers(unet, scheduler, ...), which unpacks its output."
        )
    if learned_variance:
        if value.shape[1] != 2 * x.shape[1]:
            raise ValueError(
                f"learned_variance=True needs 2 × {x.shape[1]} output channels (prediction, variance), got "
                f"{value.shape[1]}."
            )
        value = value[:, : x.shape[1]]
    if value.shape != x.shape:
        hint = " (a learned-variance network: pass learned_variance=True)" if value.shape[1] == 2 * x.shape[1] else ""
        raise ValueError(
            f"model(x, t) returned shape {tuple(value.shape)} for input {tuple(x.shape)}; it must return the "
            f"prediction in the input's shape{hint}."
        )
    return value


class VPScore(DiffusionScore):
    """
    h from a discrete variance-preserving (DDPM) network ``model(x_t, t)`` with cumulative products ᾱ_t.

    The step t is the one whose level ``√((1 − ᾱ_t)/ᾱ_t)`` is nearest (in log) to ``a·sigma``, or the ``timestep``
    given; :attr:`sigma` is then the level actually used, in [0, 1] pixel units, and :attr:`timestep` the step.
    """

    def __init__(
        self,
        model: Callable[[torch.Tensor, torch.Tensor], Any],
        alphas_cumprod: torch.Tensor | Sequence[float],
        *,
        prediction_type: str,
        data_range: tuple[float, float],
        sigma: float | None = None,
        timestep: int | None = None,
        learned_variance: bool = False,
    ) -> None:
        """
        :param model: ``model(x_t, t) -> prediction``, ``x_t`` ``N×C×H×W`` on the network's scale, ``t`` an
            ``N`` int64 tensor of time steps (indices into ``alphas_cumprod``).
        :param alphas_cumprod: ᾱ_0 … ᾱ_{T−1}, decreasing in (0, 1] (a diffusers scheduler's ``alphas_cumprod``).
        :param prediction_type: What the network predicts: ``"epsilon"``, ``"v_prediction"`` or ``"sample"``
            (diffusers' names; no default: read it from the model's configuration).
        :param data_range: ``(min, max)`` of the network's pixel scale (diffusers' pipelines: ``(-1.0, 1.0)``).
        :param sigma: The noise level of h in [0, 1] pixel units (exactly one of ``sigma`` and ``timestep``).
        :param timestep: The time step t of h (exactly one of ``sigma`` and ``timestep``).
        :param learned_variance: The network returns 2C channels (prediction, variance), as with diffusers'
            ``variance_type="learned"`` / ``"learned_range"``; the first C are used.
        """
        one_of("prediction_type", prediction_type, PREDICTION_TYPES)
        boolean("learned_variance", learned_variance)
        lo, hi = _check_range(data_range)
        table = torch.as_tensor(alphas_cumprod, dtype=torch.float64).detach().cpu()
        if table.ndim != 1 or len(table) < 1 or not bool(((table > 0) & (table < 1)).all()):
            raise ValueError(
                f"alphas_cumprod must be a 1-D table of values in (0, 1), got shape {tuple(table.shape)} with "
                f"values in [{float(table.min()) if table.numel() else math.nan:.4g}, "
                f"{float(table.max()) if table.numel() else math.nan:.4g}]."
            )
        levels = ((1 - table) / table).sqrt()  # σ_t' on the network's scale
        if not bool((levels[1:] > levels[:-1]).all()):
            raise ValueError("alphas_cumprod must be strictly decreasing in t (noise levels strictly increasing).")
        if (sigma is None) == (timestep is None):
            raise ValueError(f"Give exactly one of sigma and timestep, got sigma={sigma!r}, timestep={timestep!r}.")
        if timestep is None:
            timestep = _nearest_step(levels, cast(float, sigma), (lo, hi))
        timestep = integer("timestep", timestep, low=0, high=len(table) - 1)
        super().__init__(model, sigma=float(levels[timestep]) / (hi - lo), data_range=(lo, hi))
        self.timestep = timestep
        self.prediction_type = prediction_type
        self.learned_variance = learned_variance
        self.alpha_cumprod = float(table[timestep])  # ᾱ_t
        self.alphas_cumprod = table  # the whole schedule (float64, CPU), for samplers that visit every level

    def at(self, sigma: float) -> "VPScore":
        """
        The same network and schedule at noise level ``sigma`` (the nearest step, as the constructor picks it): a
        shallow copy that shares the network's weights.

        :raises ValueError: For a ``sigma`` outside the schedule's levels.
        """
        table = self.alphas_cumprod
        timestep = _nearest_step(((1 - table) / table).sqrt(), sigma, self.data_range)
        other = copy.copy(self)  # nn.Module's own copy: the submodules (the network) are shared
        other.timestep, other.alpha_cumprod = timestep, float(table[timestep])
        other.sigma = float(((1 - table[timestep]) / table[timestep]).sqrt()) / self.scale
        return other

    def noise(self, x: torch.Tensor) -> torch.Tensor:
        return self.noise_at(x, self.timestep)

    def noise_at(self, x: torch.Tensor, timestep: int) -> torch.Tensor:
        """ε̂ at step ``timestep`` of the schedule for ``x`` on the network's scale (:meth:`noise` at any level)."""
        alpha = float(self.alphas_cumprod[timestep])
        sqrt_a, sqrt_1ma = math.sqrt(alpha), math.sqrt(1 - alpha)
        x_t = sqrt_a * x  # x' + σ_t'ε scaled by √ᾱ_t: √ᾱ_t·x₀' + √(1 − ᾱ_t)·ε
        t = torch.full((x.shape[0],), timestep, dtype=torch.long, device=x.device)
        out = _output(self.model(x_t, t), x, self.learned_variance)
        if self.prediction_type == "epsilon":
            return out
        if self.prediction_type == "v_prediction":  # v = √ᾱ·ε − √(1−ᾱ)·x₀  ⇒  ε = √ᾱ·v + √(1−ᾱ)·x_t
            return sqrt_a * out + sqrt_1ma * x_t
        return (x_t - sqrt_a * out) / sqrt_1ma  # "sample": x_t = √ᾱ·x₀ + √(1−ᾱ)·ε

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, timestep={self.timestep}, prediction_type={self.prediction_type!r}"


class EDMScore(DiffusionScore):
    """
    h from an EDM-style denoiser ``D(x', σ')`` (Karras et al. 2022; k-diffusion's ``Denoiser``; any network that
    returns its estimate of the clean image): ``h = (D(x', σ') − x')/σ'`` with ``σ' = a·sigma``.
    """

    def __init__(
        self,
        denoiser: Callable[[torch.Tensor, torch.Tensor], Any],
        *,
        sigma: float,
        data_range: tuple[float, float],
    ) -> None:
        """
        :param denoiser: ``denoiser(x', sigma) -> D``, ``x'`` on the network's scale, ``sigma`` an ``N`` tensor of
            noise levels on that scale (a ``σ`` of ``a·sigma``), preconditioning included.
        :param sigma: The noise level of h in [0, 1] pixel units.
        :param data_range: ``(min, max)`` of the denoiser's pixel scale (EDM and k-diffusion: ``(-1.0, 1.0)``).
        """
        super().__init__(denoiser, sigma=sigma, data_range=data_range)

    def noise(self, x: torch.Tensor) -> torch.Tensor:
        level = self.scale * self.sigma  # σ' on the denoiser's scale
        denoised = _output(self.model(x, torch.full((x.shape[0],), level, dtype=x.dtype, device=x.device)), x, False)
        return (x - denoised) / level


class _DiffusersUNet(nn.Module):
    """A diffusers ``UNet2DModel`` as a plain ``model(x, t) -> tensor``."""

    def __init__(self, unet: nn.Module) -> None:
        super().__init__()
        self.unet = unet

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.unet(x, t, return_dict=False)[0]


def _diffusers(what: str = "from_diffusers") -> Any:
    """The ``diffusers`` package, or an ImportError that says how to install it."""
    try:
        import diffusers
    except ImportError as error:
        raise ImportError(
            f'{what} needs the optional diffusers package: pip install "art-adp[diffusion]" (or pass your network '
            "to VPScore / EDMScore, which need no diffusers)."
        ) from error
    return diffusers


def _check_unet(unet: Any, learned_variance: bool, reason: str) -> None:
    """Refuse a network that is not an unconditional ``UNet2DModel`` with the output channels ``reason`` needs."""
    if not isinstance(unet, _diffusers("DiffusersScore").UNet2DModel):
        raise ValueError(
            f"unet must be a diffusers UNet2DModel, got {type(unet).__name__}; for another network use "
            "VPScore(model, alphas_cumprod, ...) or EDMScore(denoiser, ...)."
        )
    unet_config: Any = getattr(unet, "config")  # diffusers' FrozenDict of the constructor's arguments
    if unet_config.class_embed_type is not None or unet_config.num_class_embeds is not None:
        raise ValueError(
            "unet is class-conditional (class_embed_type/num_class_embeds set); only unconditional "
            "UNet2DModels are supported."
        )
    channels = unet_config.in_channels
    if unet_config.out_channels != (2 if learned_variance else 1) * channels:
        raise ValueError(
            f"{reason} needs {(2 if learned_variance else 1) * channels} output channels for {channels} input "
            f"channels; the UNet has {unet_config.out_channels}."
        )


class DiffusersScore(VPScore):
    """
    A :class:`VPScore` over an unconditional diffusers ``UNet2DModel`` (what :func:`from_diffusers` returns). It
    saves and loads like the other score models: :func:`~art_adp.save_score_model` writes the UNet's weights as
    safetensors and its constructor arguments (:attr:`config`: the UNet's config, the ᾱ table, the prediction type,
    the pixel scale, the step) as the JSON header; :func:`~art_adp.load_score_model` rebuilds it
    (:meth:`from_config`) without diffusers touching the disk.
    """

    def __init__(
        self,
        unet: nn.Module,
        alphas_cumprod: torch.Tensor | Sequence[float],
        *,
        prediction_type: str,
        data_range: tuple[float, float] = (-1.0, 1.0),
        sigma: float | None = None,
        timestep: int | None = None,
        learned_variance: bool = False,
    ) -> None:
        """
        :param unet: A diffusers ``UNet2DModel`` (unconditional; ``2C`` output channels with ``learned_variance``).
        :param alphas_cumprod, prediction_type, data_range, sigma, timestep, learned_variance: As for
            :class:`VPScore`.
        :raises ValueError: For another network, a class-conditional UNet, or output channels that do not match.
        """
        _check_unet(unet, learned_variance, f"learned_variance={learned_variance}")
        super().__init__(
            _DiffusersUNet(unet),
            alphas_cumprod,
            prediction_type=prediction_type,
            data_range=data_range,
            sigma=sigma,
            timestep=timestep,
            learned_variance=learned_variance,
        )

    @property
    def config(self) -> dict[str, Any]:
        """The constructor's arguments as JSON values (the UNet as its config; its private ``_`` keys, which may
        hold a local path, left out)."""
        unet = cast(Any, self.model).unet
        unet_config = {k: list(v) if isinstance(v, tuple) else v for k, v in unet.config.items() if k[0] != "_"}
        return {
            "unet": unet_config,
            "alphas_cumprod": [float(a) for a in self.alphas_cumprod.tolist()],
            "prediction_type": self.prediction_type,
            "data_range": list(self.data_range),
            "timestep": self.timestep,
            "learned_variance": self.learned_variance,
        }

    @classmethod
    def from_config(cls, unet: dict[str, Any], alphas_cumprod: Sequence[float], **kwargs: Any) -> "DiffusersScore":
        """A :class:`DiffusersScore` with a fresh ``UNet2DModel`` built from its config ``unet`` (the weights are
        the caller's to load): :attr:`config`'s inverse.

        :raises ValueError: For a ``unet`` config that ``UNet2DModel`` refuses.
        """
        try:
            network = _diffusers("DiffusersScore").UNet2DModel.from_config(dict(unet))
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"invalid UNet2DModel config: {err}") from None
        return cls(network, alphas_cumprod, **kwargs)


def from_diffusers(
    unet: nn.Module,
    scheduler: Any,
    *,
    sigma: float | None = None,
    timestep: int | None = None,
    data_range: tuple[float, float] = (-1.0, 1.0),
) -> DiffusersScore:
    """
    ADP's score model from a diffusers ``UNet2DModel`` and its DDPM-family scheduler, at one noise level.

    Reads the scheduler: ``alphas_cumprod`` (the VP schedule), ``config.prediction_type`` (``"epsilon"``,
    ``"v_prediction"`` or ``"sample"``) and ``config.variance_type`` (learned variances: the first half of the
    output channels is the prediction). Nothing is downloaded: load both from one local folder yourself, or let
    :func:`~art_adp.score.diffusers_folder.load_diffusers` read the folder. From the Hub's flat folder (``hf download
    google/ddpm-cifar10-32 --local-dir folder``: the UNet's ``config.json`` and weights and ``scheduler_config.json``
    at its root)::

        unet = UNet2DModel.from_pretrained(folder, local_files_only=True)
        scheduler = DDPMScheduler.from_pretrained(folder, local_files_only=True)

    From a pipeline's ``save_pretrained`` folder, the same with ``subfolder="unet"`` and ``subfolder="scheduler"``.

    :param unet: A diffusers ``UNet2DModel`` (unconditional).
    :param scheduler: A diffusers scheduler with ``alphas_cumprod`` (``DDPMScheduler``, ``DDIMScheduler``, …).
    :param sigma: The noise level of h in [0, 1] pixel units (exactly one of ``sigma`` and ``timestep``); the
        nearest step of the schedule is used (:attr:`VPScore.sigma` is the level realised).
    :param timestep: The time step t of h instead.
    :param data_range: The UNet's pixel scale; diffusers' pipelines train and sample on ``(-1.0, 1.0)``.
    :return: A :class:`DiffusersScore` (a :class:`VPScore`, an ``nn.Module``) for :class:`~art_adp.ADPPurifier`,
        :func:`~art_adp.purify`, …; :func:`~art_adp.save_score_model` saves it.
    """
    _diffusers("from_diffusers")
    config = getattr(scheduler, "config", None)
    if not hasattr(scheduler, "alphas_cumprod") or config is None or "prediction_type" not in config:
        raise ValueError(
            f"scheduler must be a diffusers DDPM-family scheduler with alphas_cumprod and config.prediction_type "
            f"(DDPMScheduler, DDIMScheduler, ...), got {type(scheduler).__name__}."
        )
    variance_type = config.get("variance_type")
    learned = variance_type in {"learned", "learned_range"}
    _check_unet(unet, learned, f"The scheduler's variance_type={variance_type!r}")
    return DiffusersScore(
        unet,
        scheduler.alphas_cumprod,
        prediction_type=config["prediction_type"],
        data_range=data_range,
        sigma=sigma,
        timestep=timestep,
        learned_variance=learned,
    )


def score_at(model: nn.Module, sigma: float) -> nn.Module:
    """
    ADP's score model h at noise level ``sigma`` (pixels) from any score model the package reads: a
    :class:`VPScore` (a DDPM network, e.g. a :class:`DiffusersScore`) moved to the step nearest ``sigma``
    (:meth:`VPScore.at`), a σ-conditional denoiser on [0, 1] pixels (``DenoiserUNet``) through :class:`EDMScore` at
    ``sigma``, and any other (an :class:`~art_adp.NCSNv2`, whose h serves every level; an :class:`EDMScore`)
    unchanged.
    """
    if isinstance(model, VPScore):
        return model.at(sigma)
    if getattr(model, "sigma_conditional", False) and not isinstance(model, DiffusionScore):
        return EDMScore(model, sigma=sigma, data_range=(0.0, 1.0))
    return model
