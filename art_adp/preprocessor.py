"""ADP as an ART preprocessing defence: ``PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

from ._checks import boolean, number, one_of, positive_int
from ._fast_paths import check_speed_options
from ._fast_paths import CompiledOrEager
from .purification import DEFAULTS, HYPERPARAMETERS, SPEED_OPTIONS, ADPParams, purify

__all__ = ["ADPPurifier", "DEFAULT_GRADIENT", "GRADIENTS", "PurifierPyTorch", "PurifierState"]

#: The purifiers' gradient modes: ``"bpda"`` (straight-through: the backward pass is the identity) or ``"full"``
#: (autograd through every purification step).
GRADIENTS = ("bpda", "full")
#: The one default gradient mode of the purifiers and of every attack with a ``gradient`` parameter: ``"full"``, the
#: honest default -- ART's own attacks on a defended ``PyTorchClassifier`` then differentiate through purification
#: (BPDA, the paper's attack, is ``gradient="bpda"``, asked for by name).
DEFAULT_GRADIENT = "full"
PURIFY_PARAMS = HYPERPARAMETERS + SPEED_OPTIONS  # what each call of purify takes from the purifier


class PurifierState(NamedTuple):
    """
    One intermediate state of a purification and what it should be: ``state`` the purifier's x_t, whose reference
    is ``clean + level · noise`` -- for reverse diffusion the clean image diffused to the state's level with the same
    noise ε (DiffAttack's x_t of the diffusion process), for ADP (``level`` 0, ``noise`` None) the clean image.
    """

    state: torch.Tensor
    level: float = 0.0
    noise: torch.Tensor | None = None

    def reference(self, clean: torch.Tensor) -> torch.Tensor:
        """The state's reference for the clean images ``clean`` (the rows of ``state``)."""
        clean = clean.to(self.state.device, self.state.dtype)
        return clean if self.noise is None or self.level == 0 else clean + self.level * self.noise.to(clean)


def _collect(found: list[PurifierState], state: torch.Tensor, level: float = 0.0, noise=None) -> None:
    found.append(PurifierState(state, level, noise))


class PurifierPyTorch(PreprocessorPyTorch):
    """
    What every purifier of this package shares (ADP and the diffusion purifiers): the two gradient modes over
    chunks of ``batch_size``, the recording of intermediate states (:meth:`recording`) and a ``set_params`` that
    validates and rolls back. A subclass implements :meth:`_purify` (one chunk, on this preprocessor's device,
    reporting its states to ``on_state``) and ``_check_params``, and sets ``params``, ``gradient`` and ``batch_size``.
    """

    params: list[str] = []
    gradient: str
    batch_size: int
    _recorded: list[PurifierState] | None = None

    def _purify(self, x: torch.Tensor, on_state: Callable[..., None] | None = None) -> torch.Tensor:
        """One chunk purified; ``on_state(x_t, level=0, noise=None)`` called with each state, the last the result."""
        raise NotImplementedError

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[PurifierState]]:
        """
        While open, every :meth:`forward` appends its intermediate states -- every state of the purification but the
        last, which is the output -- to the list it yields, in order, each a :class:`PurifierState` of the whole
        batch: ADP's x_1 … x_{T−1}, reverse diffusion's states at σ_{K−1} … σ_1, none for a one-shot denoiser. With
        ``gradient="full"`` they carry the exact gradient; with ``"bpda"`` the straight-through one (the identity).
        Values are unchanged.
        """
        found: list[PurifierState] = []
        self._recorded = found
        try:
            yield found
        finally:
            self._recorded = None

    def _chunks(self, xd: torch.Tensor) -> torch.Tensor:
        if self._recorded is None:
            return torch.cat([self._purify(chunk) for chunk in xd.split(self.batch_size)])
        outs, per_chunk = [], []
        for chunk in xd.split(self.batch_size):
            found: list[PurifierState] = []
            outs.append(self._purify(chunk, functools.partial(_collect, found)))
            per_chunk.append(found[:-1])  # the last state is the output
        for states in zip(*per_chunk):  # step t of every chunk: one state of the whole batch
            noise = None if states[0].noise is None else torch.cat([s.noise for s in states])
            self._recorded.append(PurifierState(torch.cat([s.state for s in states]), states[0].level, noise))
        return torch.cat(outs)

    def _through(self, xd: torch.Tensor) -> torch.Tensor:
        """Purify ``xd`` chunk by chunk: exact autograd (``"full"``) or straight-through (``"bpda"``)."""
        if self.gradient == "full":
            return self._chunks(xd)
        start = 0 if self._recorded is None else len(self._recorded)
        with torch.no_grad():
            purified = self._chunks(xd)
        if self._recorded is not None:  # each recorded state straight-through as well
            for i in range(start, len(self._recorded)):
                s = self._recorded[i]
                self._recorded[i] = s._replace(state=xd + (s.state - xd).detach())
        return xd + (purified - xd).detach()  # straight-through: value = purified, d out / d x = identity

    def estimate_forward(self, x: torch.Tensor, y: Any | None = None) -> torch.Tensor:
        """The same as :meth:`forward`: its gradient already follows ``gradient``."""
        return self.forward(x, y)[0]

    def set_params(self, **kwargs) -> None:
        """Set parameters from ``params`` and validate them; unknown names or invalid values raise, changing nothing."""
        unknown = sorted(set(kwargs) - set(self.params))
        if unknown:
            raise ValueError(f"Unknown {type(self).__name__} parameter(s) {unknown}; valid: {self.params}.")
        old = {k: getattr(self, k) for k in kwargs}
        for key, value in kwargs.items():
            setattr(self, key, value)
        try:
            self._check_params()
        except ValueError:
            for key, value in old.items():
                setattr(self, key, value)
            raise


class ADPPurifier(PurifierPyTorch):
    """
    Adversarial purification with a score network (ADP), as an ART PyTorch preprocessor.

    | Paper link: https://arxiv.org/abs/2106.06041 (Yoon, Hwang & Lee, ICML 2021)

    Each call purifies every input once (one run of Algorithm 1 with fresh noise; see :func:`~art_adp.purify`).
    The paper's S-run ensemble averages the classifier's probabilities over S such calls.

    Gradients. ART's ``PyTorchClassifier.loss_gradient`` back-propagates through :meth:`forward` whenever all
    defences are PyTorch preprocessors (it never calls ``estimate_forward`` there), so the choice lives in
    ``forward``:

    - ``gradient="bpda"``: straight-through. The output is the purified batch, the backward pass is the
      identity, so the loss gradient is the classifier's gradient at the purified point (BPDA, Athalye et al.
      2018), and purification runs without building a graph.
    - ``gradient="full"`` (the default, :data:`DEFAULT_GRADIENT`): exact autograd through every purification step,
      the injected noise (as a reparameterisation), the adaptive step sizes and the clipping -- the white-box
      gradient of Croce et al. 2022.

    :meth:`estimate_forward` is :meth:`forward`, so it agrees with the chosen mode. The score model is put in
    eval mode, frozen (no parameter gradients) and moved to this preprocessor's device.

    Detection-driven noise (the paper's appendix "Detecting adversarial examples before purification"): with a
    ``detector`` (a fitted :class:`~art_adp.ScoreNormDetector`), inputs it flags as attacked get σ_high = σ and
    the others σ_low = βσ, in the same single pass (a per-sample σ). The flag is a hard threshold on ‖h(x)‖₂:
    piecewise constant, so it passes no gradient. In either gradient mode the gradient of each sample is the
    one through the purification of the branch it takes; an attacker who knows the detector attacks this
    two-level defence end to end and may also steer ‖h(x)‖ below the threshold to get the weak σ_low branch
    (see ``docs/detect_certify.md``).
    """

    params = [
        *PURIFY_PARAMS,
        "gradient",
        "batch_size",
        "generator",
        "channels_last",
        "compile",
        "detector",
        "beta",
        "clip_inputs",
        "leave_out",
    ]

    def __init__(
        self,
        score_model: torch.nn.Module,
        *,
        sigma: float = DEFAULTS.sigma,
        steps: int = DEFAULTS.steps,
        step_size: str | float | Sequence[float] = DEFAULTS.step_size,
        lam: float = DEFAULTS.lam,
        delta: float = DEFAULTS.delta,
        step_clamp: tuple[float, float] = DEFAULTS.step_clamp,
        tau: float = DEFAULTS.tau,
        clip_values: tuple[float, float] = DEFAULTS.clip_values,
        clip_noise: bool = DEFAULTS.clip_noise,
        gradient: str = DEFAULT_GRADIENT,
        batch_size: int = 256,
        generator: torch.Generator | None = None,
        channels_last: bool = False,
        compact: bool = False,
        amp: str | None = None,
        gradient_checkpointing: bool = False,
        compile: bool | str = False,
        detector: Any | None = None,
        beta: float = 0.2,
        clip_inputs: bool = False,
        leave_out: float | None = None,
        apply_fit: bool = False,
        apply_predict: bool = True,
        device_type: str = "gpu",
    ) -> None:
        """
        :param score_model: Noise-level-free score network h: ``N×C×H×W`` in ``clip_values`` → same shape; a
            σ-conditional denoiser (:class:`~art_adp.DenoiserUNet`, e.g. ``load_score_model("cifar10")``) is taken at
            ``sigma`` (:func:`~art_adp.score.diffusion.score_at`: through :class:`~art_adp.EDMScore`).
        :param sigma, steps, step_size, lam, delta, step_clamp, tau, clip_values, clip_noise: ADP's hyperparameters,
            declared and checked once in :class:`~art_adp.purification.ADPParams`: σ (0.25 in the paper), T, the step
            rule (``"adaptive"``, paper eq. 11; ``"adaptive-jvp"``; a constant α or a schedule), λ, δ (released code:
            1e-3; paper text: 1e-5), the α clamp, τ, the input range, and whether x + σε is clipped into it (the
            paper's; ``False`` for a model trained on unclipped noise, as ``load_score_model("cifar10")`` was).
        :param gradient: ``"bpda"`` (straight-through) or ``"full"`` (autograd through purification; the default,
            :data:`DEFAULT_GRADIENT`).
        :param batch_size: Inputs purified per chunk (bounds memory for large inputs).
        :param generator: Source of the injected noise (default: torch's global generator).
        :param channels_last: Run the score network in channels-last memory format (about 25 % faster on CPU for
            the digits NCSNv2; results agree with the default format to float rounding).
        :param compact, amp, gradient_checkpointing: The speed options of :func:`~art_adp.purify` (drop stopped
            samples from the network's batch; the network forward under autocast; per-step gradient checkpointing
            for ``gradient="full"``).
        :param compile: ``torch.compile`` the score network on first use: ``True`` (inductor) or a backend name.
            Compilation takes minutes on a CPU; worth it for long GPU evaluations.
        :param detector: ``None``, or a fitted :class:`~art_adp.ScoreNormDetector` (anything with
            ``flag(x: Tensor) -> bool Tensor [N]``): flagged inputs get noise σ, the others βσ.
        :param beta: β in [0, 1], the low noise level's fraction of σ (the paper: 0.2); used with a detector only.
        :param clip_inputs: Clip inputs into ``clip_values`` before purifying instead of refusing values more than
            10 % outside them: for inputs that already carry Gaussian noise, as in ART's
            ``PyTorchRandomizedSmoothing(..., preprocessing_defences=[ADPPurifier(..., sigma=0, clip_inputs=True)])``
            (denoised smoothing). This also lets mis-scaled (0–255) images through, clipped; NaN/Inf still raise.
        :param leave_out: ``None``, or an ℓ∞ radius: the score model is a :class:`~art_adp.KernelScore` over the inputs'
            own split (a classifier training behind it), and each input is purified without the reference images within
            this radius of it (0: itself; the training ε: an adversarial example's clean image), as the oracle purifies
            unseen images (:meth:`~art_adp.KernelScore.leaving_out`).
        :param apply_fit, apply_predict: Purify at training time (ART's ``PyTorchClassifier.fit`` and
            ``AdversarialTrainer`` then train on purified batches), at prediction time.
        :param device_type: ``"gpu"`` (CUDA when available, else CPU) or ``"cpu"``.
        """
        super().__init__(device_type=device_type, is_fitted=True, apply_fit=apply_fit, apply_predict=apply_predict)
        if not isinstance(score_model, torch.nn.Module):
            raise ValueError(f"score_model must be a torch.nn.Module, got {type(score_model).__name__}.")
        if getattr(score_model, "sigma_conditional", False):  # a denoiser D(x, σ): h at this σ, as score_at gives it
            from .score.diffusion import score_at

            score_model = score_at(score_model, sigma)
        self.score_model = score_model.to(self.device).eval().requires_grad_(False)
        self._compiled: tuple[Any, Any] | None = None  # (compile setting, compiled network)
        self.sigma, self.steps, self.step_size, self.lam = sigma, steps, step_size, lam  # ADP's hyperparameters
        self.delta, self.step_clamp, self.tau, self.clip_values = delta, step_clamp, tau, clip_values
        self.compact, self.amp, self.gradient_checkpointing = compact, amp, gradient_checkpointing  # speed options
        self.gradient, self.batch_size, self.generator, self.compile = gradient, batch_size, generator, compile
        self.channels_last, self.detector, self.beta, self.clip_inputs = channels_last, detector, beta, clip_inputs
        self.leave_out, self.clip_noise = leave_out, clip_noise
        self._check_params()

    def describe(self) -> str:
        """
        This purifier's setting in words, from its actual parameters, e.g. ``"ADP sigma = 0.25, T = 10 adaptive
        steps (lambda = 0.05, delta = 1e-3, tau = 1e-3)"`` at the defaults; with a detector it adds the two noise
        levels.
        """
        text = self._adp_params().describe()
        if self.detector is not None:
            text += f"; detection: sigma_low = beta sigma with beta = {self.beta:g} for inputs not flagged"
        return text

    def _purify(self, x: torch.Tensor, on_state: Callable[..., None] | None = None) -> torch.Tensor:
        kwargs = self._purify_kwargs()
        if self.detector is not None:  # σ_high = σ for flagged inputs, σ_low = βσ for the others
            with torch.no_grad():
                attacked = self.detector.flag(x)
            kwargs["sigma"] = self.sigma * torch.where(attacked, 1.0, self.beta).to(x.dtype)
        if self.leave_out is not None:  # each input without its own reference image (training behind the oracle)
            with getattr(self.score_model, "leaving_out")(x, self.leave_out):
                return purify(self._network(), x, **kwargs, generator=self.generator, on_state=on_state)
        return purify(self._network(), x, **kwargs, generator=self.generator, on_state=on_state)

    def _network(self):
        if not self.compile:
            return self.score_model
        if self._compiled is None or self._compiled[0] != self.compile:
            network = (CompiledOrEager(self.score_model) if self.compile is True
                       else torch.compile(self.score_model, backend=self.compile))  # fmt: skip
            self._compiled = (self.compile, network)
        return self._compiled[1]

    def _purify_kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PURIFY_PARAMS}

    def _adp_params(self) -> ADPParams:
        return ADPParams(**{name: getattr(self, name) for name in HYPERPARAMETERS})

    def forward(self, x: torch.Tensor, y: Any | None = None) -> tuple[torch.Tensor, Any | None]:
        """
        Purify ``x`` once, in chunks of ``batch_size``.

        :param x: Inputs ``N×C×H×W`` with values in ``clip_values``, on any device.
        :param y: Labels, returned unchanged.
        :return: ``(purified x, y)``; purified x on ``x``'s device and dtype, its gradient set by ``gradient``.
        """
        if not torch.is_floating_point(x):
            raise ValueError(f"ADPPurifier expects floating-point inputs in {self.clip_values}, got {x.dtype}.")
        xd = x.to(self.device, torch.float32)
        if self.clip_inputs:
            xd = torch.where(xd.isfinite(), xd.clamp(*self.clip_values), xd)  # NaN/Inf stay, for purify to refuse
        if self.channels_last:
            # nn.Module.to accepts memory_format at run time; torch's overloads for it omit the keyword
            self.score_model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            xd = xd.contiguous(memory_format=torch.channels_last)
        return self._through(xd).to(x.device, x.dtype), y

    def _check_params(self) -> None:
        self._adp_params().check()
        check_speed_options(
            self.step_size, compact=self.compact, amp=self.amp, gradient_checkpointing=self.gradient_checkpointing
        )
        one_of("gradient", self.gradient, GRADIENTS)
        positive_int("batch_size", self.batch_size)
        if not (isinstance(self.compile, bool) or (isinstance(self.compile, str) and self.compile)):
            raise ValueError(f"compile must be True, False or a torch.compile backend name, got {self.compile!r}.")
        if self.detector is not None and not callable(getattr(self.detector, "flag", None)):
            raise ValueError(
                f"detector must be a ScoreNormDetector (with a flag(x) method) or None, "
                f"got {type(self.detector).__name__}."
            )
        number("beta", self.beta, low=0, high=1)
        boolean("clip_inputs", self.clip_inputs)
        if self.leave_out is not None:
            number("leave_out", self.leave_out, low=0)
            if not callable(getattr(self.score_model, "leaving_out", None)) or self.compact:
                raise ValueError(
                    "leave_out needs a KernelScore score model (whose reference holds the inputs) and compact=False, "
                    f"got {type(self.score_model).__name__} with compact={self.compact}; pass leave_out=None."
                )
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {type(self.generator).__name__}.")
