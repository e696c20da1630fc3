# MIT License
#
# Copyright (C) The Adversarial Robustness Toolbox (ART) Authors 2026
#
# Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
# documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
# rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit
# persons to whom the Software is furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
# Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
# WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,
# TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
"""
This module implements score-based purification, ADP (adversarial purification with score-based generative models),
in PyTorch.

| Paper link: https://arxiv.org/abs/2106.06041

| Please keep in mind the limitations of defences. ADP was evaluated with BPDA+EOT in the paper; differentiating
    through the purification with EOT and APGD reduces its robust accuracy on CIFAR-10 from the reported 70.01 % to
    33.7 %, see https://arxiv.org/abs/2202.13711 . For details on how to evaluate classifier security in general, see
    https://arxiv.org/abs/1902.06705
"""
from __future__ import absolute_import, division, print_function, unicode_literals, annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

if TYPE_CHECKING:
    import torch
    from art.utils import CLIP_VALUES_TYPE

logger = logging.getLogger(__name__)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class ScoreBasedPurificationPyTorch(PreprocessorPyTorch):  # pylint: disable=too-many-instance-attributes
    """
    Implement score-based purification (ADP, Yoon et al. 2021) in PyTorch: Gaussian noise is added to the input,
    then a few steps of gradient ascent on the log-density, taken with a noise-level-free score network
    `h(x) = sigma * score(x)`, move it back towards the data (Algorithm 1 of the paper).

    Starting from `x_0 = clip(x + sigma * e)`, `e ~ N(0, I)`, each step `t = 1 ... steps` is, for every sample alone,

    | `alpha = clamp(lam * delta / (1 - <h(x_{t-1}), h(x_{t-1} + delta * h(x_{t-1}))> / |h(x_{t-1})|^2), step_clamp)`
    | `x_t = clip(x_{t-1} + alpha * h(x_{t-1}))`

    (the adaptive step, eq. 11 of the paper); a sample stops for good once its `alpha` falls below `tau`. The defaults
    follow the authors' released code (`delta = 1e-3`, `alpha` clamped to `[1e-5, 0.1]`, stop test `alpha < tau`).

    ART ships no score network: train one with denoising score matching on the classifier's data (the loss
    `0.5 * |h(x + s * z) + z|^2` over noise levels `s`) and pass it in. `PixelDefend` likewise takes its pre-trained
    PixelCNN from the user, but as an ART classifier whose last-layer activations it reads as per-pixel probabilities;
    this defence calls the network inside `forward`, so it takes the `torch.nn.Module` itself.

    Precision: the network runs in the dtype of its parameters; the purified input, the adaptive step's ratio and the
    step size are kept in float32 at least (float64 for a float64 network). In half precision `1 - ratio`
    (`lam * delta / alpha`, 5e-4 for the largest default step) is at or below the resolution near 1 of float16
    (4.9e-4) and bfloat16 (3.9e-3), and `|h|^2` can overflow float16. The probe `x + delta * h` is rounded to the
    network's dtype: choose `delta` so that `delta * |h|` exceeds the input's resolution there (bfloat16 keeps 8
    significant bits).

    Gradients: ART's `PyTorchClassifier.loss_gradient` back-propagates through `forward` and never calls
    `estimate_forward` for PyTorch preprocessors (see ART issue #1526), so the gradient mode is chosen in `forward`
    (and the inherited `estimate_forward`, which calls `forward`, follows it):
    `gradient="bpda"` is straight-through (the value is the purified input, the backward pass is the identity; BPDA,
    https://arxiv.org/abs/1802.00420), `gradient="full"` is exact autograd through the noise, every step and the
    adaptive step sizes. Either is one random draw of the defence: attack it with EOT over many draws.

    | Paper link: https://arxiv.org/abs/2106.06041

    | Please keep in mind the limitations of defences. ADP was evaluated with BPDA+EOT in the paper; differentiating
        through the purification with EOT and APGD reduces its robust accuracy on CIFAR-10 from the reported 70.01 %
        to 33.7 %, see https://arxiv.org/abs/2202.13711 . For details on how to evaluate classifier security in
        general, see https://arxiv.org/abs/1902.06705
    """

    params = [
        "score_model",
        "sigma",
        "steps",
        "step_size",
        "lam",
        "delta",
        "step_clamp",
        "tau",
        "clip_values",
        "gradient",
        "batch_size",
        "generator",
        "verbose",
    ]

    def __init__(
        self,
        score_model: "torch.nn.Module",
        *,
        sigma: float = 0.25,
        steps: int = 10,
        step_size: str | float = "adaptive",
        lam: float = 0.05,
        delta: float = 1e-3,
        step_clamp: tuple[float, float] = (1e-5, 0.1),
        tau: float = 1e-3,
        clip_values: "CLIP_VALUES_TYPE" | None = (0.0, 1.0),
        gradient: str = "bpda",
        batch_size: int = 128,
        generator: "torch.Generator" | None = None,
        apply_fit: bool = False,
        apply_predict: bool = True,
        device_type: str = "gpu",
        verbose: bool = False,
    ) -> None:
        """
        Create an instance of score-based purification (ADP).

        :param score_model: Noise-level-free score network `h`, mapping a batch in the classifier's input format
               (e.g. `NCHW` in `clip_values`) to a tensor of the same shape. It is used, not copied: it is moved to
               the defence's device (as `PyTorchClassifier` moves its model) and run in evaluation mode without
               parameter gradients while purifying; its modes and `requires_grad` flags are restored afterwards.
        :param sigma: Standard deviation of the Gaussian noise added before purification (0.25 in the paper).
        :param steps: Maximum number of purification steps.
        :param step_size: `"adaptive"` (eq. 11 of the paper) or a constant step size `>= 0`.
        :param lam: Fraction `lam` in `(0, 1)` of the adaptive step.
        :param delta: Finite-difference step `delta > 0` of the adaptive step.
        :param step_clamp: Tuple `(min, max)` bounding the adaptive step sizes.
        :param tau: A sample stops once its adaptive step size falls below `tau`.
        :param clip_values: Tuple of the form `(min, max)` of floats or `np.ndarray` representing the minimum and
               maximum values allowed for features, applied after the noise and after every step; `None` for none.
        :param gradient: `"bpda"` (straight-through, identity backward) or `"full"` (autograd through purification).
        :param batch_size: Number of samples purified at once.
        :param generator: `torch.Generator` for the noise, for reproducible purification (default: global RNG).
        :param apply_fit: True if applied during fitting/training.
        :param apply_predict: True if applied during predicting.
        :param device_type: Type of device on which the classifier is run, either `gpu` or `cpu`.
        :param verbose: Show progress bars.
        """
        import torch

        super().__init__(device_type=device_type, is_fitted=True, apply_fit=apply_fit, apply_predict=apply_predict)
        self.score_model = score_model
        self.sigma = sigma
        self.steps = steps
        self.step_size = step_size
        self.lam = lam
        self.delta = delta
        self.step_clamp = step_clamp
        self.tau = tau
        self.clip_values = clip_values
        self.gradient = gradient
        self.batch_size = batch_size
        self.generator = generator
        self.verbose = verbose
        self._check_params()
        self.score_model.to(self.device)

    def set_params(self, **kwargs) -> None:
        """
        Take in a dictionary of parameters and apply checks before saving them as attributes. A new `score_model` is
        moved to the defence's device.
        """
        super().set_params(**kwargs)
        if "score_model" in kwargs:
            self.score_model.to(self.device)

    def forward(self, x: "torch.Tensor", y: Any | None = None) -> tuple["torch.Tensor", Any | None]:
        """
        Purify `x` once (one draw of the random defence).

        :param x: Floating-point input batch in the format of the score network, values in `clip_values`.
        :param y: Labels, returned unchanged.
        :return: Purified `x` (same shape, dtype and device as `x`, its gradient set by `gradient`) and `y`.
        """
        import torch

        if not torch.is_floating_point(x):
            raise ValueError(f"Score-based purification needs floating-point inputs, got {x.dtype}.")
        weights = next(iter(self.score_model.parameters()), x)
        net_dtype = weights.dtype if torch.is_floating_point(weights) else x.dtype
        # The purified input, the ratio and the step size: float32 at least, whatever the network's dtype.
        x_in = x.to(self.device, torch.promote_types(net_dtype, torch.float32))
        chunks = tqdm(x_in.split(self.batch_size), desc="Score-based purification", disable=not self.verbose)
        with self._frozen_score_model():
            if self.gradient == "full":
                x_pur = torch.cat([self._purify(chunk, net_dtype) for chunk in chunks])
            else:
                with torch.no_grad():
                    x_pur = torch.cat([self._purify(chunk, net_dtype) for chunk in chunks])
                x_pur = x_in + (x_pur - x_in).detach()  # value: purified input; gradient: identity
        return x_pur.to(x.device, x.dtype), y

    @contextlib.contextmanager
    def _frozen_score_model(self) -> Iterator[None]:
        """
        Run the score network in evaluation mode without parameter gradients, then restore its modes and flags.
        """
        modes = [(module, module.training) for module in self.score_model.modules()]
        flags = [(param, param.requires_grad) for param in self.score_model.parameters()]
        self.score_model.eval().requires_grad_(False)
        try:
            yield
        finally:
            for module, training in modes:
                module.training = training
            for param, requires_grad in flags:
                param.requires_grad_(requires_grad)

    def _score(self, x: "torch.Tensor", net_dtype: "torch.dtype") -> "torch.Tensor":
        """
        The score network's output at `x`, computed in `net_dtype` and returned in `x`'s dtype.
        """
        return self.score_model(x.to(net_dtype)).to(x.dtype)

    def _purify(self, x: "torch.Tensor", net_dtype: "torch.dtype") -> "torch.Tensor":
        """
        One run of Algorithm 1 on a batch, each sample with its own step sizes and stop.
        """
        import torch

        if self.sigma > 0:
            device = x.device if self.generator is None else self.generator.device
            x = x + self.sigma * torch.randn(x.shape, generator=self.generator, device=device).to(x)
        x = self._clip(x)
        active = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        view = (-1,) + (1,) * (x.ndim - 1)
        for _ in range(self.steps):
            h = self._score(x, net_dtype)
            if self.step_size == "adaptive":
                h_sq = h.flatten(1).pow(2).sum(1).clamp_min(1e-30)
                ratio = (h * self._score(x + self.delta * h, net_dtype)).flatten(1).sum(1) / h_sq
                alpha = (self.lam * self.delta / (1 - ratio)).clamp(*self.step_clamp)
                active = active & (alpha >= self.tau)
            else:
                alpha = torch.full_like(active, float(self.step_size), dtype=x.dtype)
            alpha = torch.where(active, alpha, torch.zeros_like(alpha))
            x = torch.where(active.view(view), self._clip(x + alpha.view(view) * h), x)
            if not bool(active.any()):
                break
        return x

    def _clip(self, x: "torch.Tensor") -> "torch.Tensor":
        import torch

        if self.clip_values is None:
            return x
        clip_min, clip_max = (torch.as_tensor(np.asarray(v), dtype=x.dtype, device=x.device) for v in self.clip_values)
        return torch.clamp(x, clip_min, clip_max)

    def _check_params(self) -> None:
        import torch

        if not isinstance(self.score_model, torch.nn.Module):
            raise ValueError("`score_model` must be a `torch.nn.Module`.")

        if not (_is_number(self.sigma) and self.sigma >= 0):
            raise ValueError("`sigma` must be a number >= 0.")

        if not (isinstance(self.steps, (int, np.integer)) and not isinstance(self.steps, bool) and self.steps >= 0):
            raise ValueError("`steps` must be an integer >= 0.")

        if self.step_size != "adaptive" and not (_is_number(self.step_size) and float(self.step_size) >= 0):
            raise ValueError("`step_size` must be 'adaptive' or a number >= 0.")

        if not (_is_number(self.lam) and 0 < self.lam < 1):
            raise ValueError("`lam` must lie in (0, 1).")

        if not (_is_number(self.delta) and self.delta > 0):
            raise ValueError("`delta` must be a number > 0.")

        if not (
            isinstance(self.step_clamp, (tuple, list))
            and len(self.step_clamp) == 2
            and all(_is_number(v) for v in self.step_clamp)
            and 0 <= self.step_clamp[0] <= self.step_clamp[1]
        ):
            raise ValueError("`step_clamp` must be a tuple (min, max) with 0 <= min <= max.")

        if not (_is_number(self.tau) and self.tau >= 0):
            raise ValueError("`tau` must be a number >= 0.")

        if self.clip_values is not None and len(self.clip_values) != 2:
            raise ValueError("'clip_values' should be a tuple of 2 floats or arrays containing the allowed data range.")

        if self.clip_values is not None and np.array(self.clip_values[0] >= self.clip_values[1]).any():
            raise ValueError("Invalid 'clip_values': min >= max.")

        if self.gradient not in ("bpda", "full"):
            raise ValueError("`gradient` must be 'bpda' or 'full'.")

        if not (
            isinstance(self.batch_size, (int, np.integer))
            and not isinstance(self.batch_size, bool)
            and self.batch_size > 0
        ):
            raise ValueError("The batch size `batch_size` has to be positive.")

        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise ValueError("`generator` must be a `torch.Generator` or None.")

        if not isinstance(self.verbose, bool):
            raise ValueError("The argument `verbose` has to be of type bool.")
