"""
The exact score of a Gaussian kernel density over a reference set: an oracle score model for diagnosis.

For reference images x₁ … x_N and kernel width s, the density p_s(x) = (1/N) Σᵢ N(x; xᵢ, s²I) has the score

    h(x) = s·∇ₓ log p_s(x) = Σᵢ wᵢ(x)·(xᵢ − x)/s,      w(x) = softmax_i(−‖x − xᵢ‖²/(2s²)).

This is exactly what denoising score matching at level s converges to on a training set of these N images (the
optimum of ½E‖h(x + sz) + z‖² over all functions h), so ADP run on it shows what a *perfectly trained* score model
of the same images would do. That is its use: to tell a schedule problem from a model problem on a data set in
minutes, without training. It is not a defence to ship (it memorises the reference set, and on held-out data a
perfect DSM optimum pulls every input towards its nearest reference images).

Cost and memory: each call compares the batch with every reference image, in chunks of ``chunk_size``, with a
streaming log-sum-exp (a running maximum per input), so no exponential overflows whatever the distances and memory
stays ``O(B·chunk_size + B·D)`` besides the reference set itself (60,000 MNIST images: 188 MB in float32). Autograd
works through it (full-gradient attacks); the graph then holds ``O(B·N)`` weights.

Leave-one-out (:meth:`KernelScore.leaving_out`): to purify images *of the reference set itself* as the oracle purifies
unseen ones -- training a classifier behind it -- each input's own reference image must be left out, or the score
pulls every noisy training image back onto itself (at σ 0.25 on 28×28 images the self term outweighs every other by
e^100) and the classifier trains on clean images.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from .._checks import number, positive_int

__all__ = ["KernelScore"]


class KernelScore(nn.Module):
    """
    ``h(x)``: the exact score of a Gaussian kernel density of width ``bandwidth`` over ``reference`` images.

    Usable wherever a score model is (:func:`~art_adp.purify`, :class:`~art_adp.ADPPurifier`, EOT, detection).
    """

    reference: torch.Tensor  # registered buffers
    sq_norms: torch.Tensor

    def __init__(self, reference, *, bandwidth: float, chunk_size: int = 2048) -> None:
        """
        :param reference: Reference images, ``N×C×H×W`` (or ``N×D``) finite floats, e.g. the training set in [0, 1].
        :param bandwidth: The kernel width s > 0 (pixel units); the density is the reference set blurred by N(0, s²I).
        :param chunk_size: Reference images compared per step (memory ∝ batch × chunk_size).
        """
        super().__init__()
        ref = torch.as_tensor(reference)
        if ref.ndim < 2 or ref.shape[0] == 0:
            raise ValueError(
                f"reference must be a non-empty N×C×H×W (or N×D) array of images, got shape {tuple(ref.shape)}."
            )
        if not torch.is_floating_point(ref):
            raise ValueError(f"reference must be floating point (e.g. pixels in [0, 1]), got dtype {ref.dtype}.")
        if not bool(torch.isfinite(ref).all()):
            raise ValueError("reference holds NaN or infinite values; pass finite images.")
        self.bandwidth = number("bandwidth", bandwidth, low=0, low_open=True)
        self.chunk_size = positive_int("chunk_size", chunk_size)
        ref = ref.detach().to(torch.float64 if ref.dtype == torch.float64 else torch.float32)
        self.register_buffer("reference", ref.flatten(1))
        self.register_buffer("sq_norms", ref.flatten(1).square().sum(1))
        self.shape = tuple(ref.shape[1:])
        self._left_out: torch.Tensor | None = None  # B×k reference indices left out per input row (-1: none)

    @contextmanager
    def leaving_out(self, anchors: torch.Tensor, radius: float = 0.0, *, k: int = 4) -> Iterator[None]:
        """
        Within the block, the score of input row b leaves out the reference images within ℓ∞ distance ``radius``
        of ``anchors[b]`` (looked for among its ``k`` nearest in ℓ2): the exact score of the reference set without
        the image an input was made from -- the clean training image (radius 0) or the one an adversarial example
        within ε of it was made from (radius ε). The inputs of every call inside the block must be rows matching
        ``anchors`` one to one (a purification of them, uncompacted).

        :param anchors: ``B×`` the reference images' shape: the inputs before purification's noise.
        :param radius: ℓ∞ distance (pixel units) within which a reference image counts as the input's own.
        :param k: Nearest reference images (ℓ2) examined per anchor.
        """
        radius = number("radius", radius, low=0)
        k = positive_int("k", k)
        with torch.no_grad():
            flat = anchors.detach().flatten(1).to(self.reference)
            sq = (flat.square().sum(1, keepdim=True) - 2 * flat @ self.reference.T + self.sq_norms).clamp_min(0)
            idx = sq.topk(min(k, len(self.reference)), dim=1, largest=False).indices
            far = (self.reference[idx] - flat[:, None]).abs().amax(2) > radius + 1e-6
            self._left_out = idx.masked_fill(far, -1)
        try:
            yield
        finally:
            self._left_out = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """h(x) for ``x`` of shape ``B×`` the reference images' shape; same shape and dtype. Computed in the
        reference's precision even under autocast: squared distances of hundreds, scaled by 1/(2σ²), leave nothing of
        the softmax weights in bf16's 8-bit mantissa."""
        with torch.autocast(x.device.type, enabled=False):
            return self._score(x)

    def _score(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) != self.shape:
            raise ValueError(
                f"KernelScore's reference images have shape {self.shape}; got inputs of shape {tuple(x.shape[1:])} "
                "per image."
            )
        flat = x.flatten(1).to(self.reference.dtype)
        left_out = self._left_out
        if left_out is not None and len(left_out) != len(flat):
            raise ValueError(
                f"KernelScore.leaving_out was given {len(left_out)} anchors but the score is asked for {len(flat)} "
                "inputs; purify the anchors themselves, one chunk per block (compact=False)."
            )
        scale = -0.5 / self.bandwidth**2
        x_sq = flat.square().sum(1, keepdim=True)
        top = torch.full((len(flat), 1), -torch.inf, dtype=flat.dtype, device=flat.device)  # running max logit
        total = torch.zeros_like(top)  # Σ exp(logit − top)
        acc = torch.zeros_like(flat)  # Σ exp(logit − top)·xᵢ
        for start in range(0, len(self.reference), self.chunk_size):
            ref = self.reference[start : start + self.chunk_size]
            sq_dist = (x_sq - 2 * flat @ ref.T + self.sq_norms[start : start + self.chunk_size]).clamp_min(0)
            logits = scale * sq_dist
            if left_out is not None:
                rows, cols = ((left_out >= start) & (left_out < start + len(ref))).nonzero(as_tuple=True)
                logits = logits.index_put((rows, left_out[rows, cols] - start), logits.new_tensor(-torch.inf))
            new_top = torch.maximum(top, logits.max(1, keepdim=True).values)
            safe = torch.where(torch.isfinite(new_top), new_top, 0.0)  # a row whose chunk is all left out
            rescale = torch.exp(top - safe)
            weights = torch.exp(logits - safe)
            total = total * rescale + weights.sum(1, keepdim=True)
            acc = acc * rescale + weights @ ref
            top = new_top
        return ((acc / total - flat) / self.bandwidth).view_as(x).to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"reference={len(self.reference)}×{self.shape}, bandwidth={self.bandwidth:g}, chunk_size={self.chunk_size}"
        )
