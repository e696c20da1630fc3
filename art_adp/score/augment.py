"""Augmented perturbations for denoising score matching (ADP paper, Appendix "Full CIFAR-10-C performance").

The paper trains score networks for common corruptions with the perturbation q(x̃|x) = N(x̃ | F(x), σ²I), F an
augmentation, instead of N(x̃ | x, σ²I):

- **DCT** (:func:`dct_drop`): "take DCT to original images, and drop the frequency components with smallest
  eigenvalues, until the sum of dropped coefficients reach 5 % of the sum of their eigenvalues"; the network
  learns to go from F(x) + σz back to x. Read here as: the orthonormal 2-D DCT-II of each channel, energy = the
  squared coefficient, and the lowest-energy coefficients of the image (all channels together) are zeroed while
  their summed energy stays within ``energy`` (5 %) of the image's total; then the inverse DCT. Not clipped:
  the result may leave [0, 1] slightly, as x̃ does anyway.
- **AugMix** (:func:`augmix`, Hendrycks et al., ICLR 2020, Algorithm 1): ``width`` chains of 1-3 random PIL
  operations (autocontrast, equalize, posterize, rotate, solarize, shear, translate) at ``severity``, mixed
  with Dirichlet(α) weights, then mixed with the image with a Beta(α, α) weight:
  x_aug = m·x + (1 − m)·Σᵢ wᵢ·chainᵢ(x). The DSM target is the midpoint x' = (x + F(x))/2, not x (the paper's
  modified objective ‖x̃ + σ² s_θ(x̃) − x'‖²/(2σ⁴); the paper's display writes s_θ(x'), which cannot be the
  intended argument -- its eq. 7 and the sentence after it evaluate s_θ at the perturbed point).

With the NCSNv2 parameterisation s = h/σ both become ``dsm_loss(..., center=F(x), target=x or x')``.
The paper also multiplies the smallest training level σ_L by 10 for both (its hyperparameter table);
``art-adp train-score --augment`` does so.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["AUGMENTATIONS", "dct_matrix", "dct_drop", "augmix", "augmix_batch", "augment_targets"]

AUGMENTATIONS = ("dct", "augmix")
DCT_ENERGY = 0.05  # the paper's fraction of the energy removed
AUGMIX_OPS = (
    "autocontrast",
    "equalize",
    "posterize",
    "rotate",
    "solarize",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
)  # AugMix's set: no op that overlaps the CIFAR-10-C corruptions


def dct_matrix(n: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """The orthonormal DCT-II matrix D (``n×n``): the coefficients of a length-n signal v are D v, and Dᵀ D = I."""
    k = torch.arange(n, dtype=dtype, device=device).unsqueeze(1)
    i = torch.arange(n, dtype=dtype, device=device).unsqueeze(0)
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2 / n)
    d[0] /= math.sqrt(2)
    return d


def dct_drop(x: torch.Tensor, energy: float = DCT_ENERGY) -> torch.Tensor:
    """
    Zero the lowest-energy 2-D DCT coefficients of each image while their energy sums to at most ``energy`` of
    the image's total, and transform back (see the module notes).

    :param x: ``N×C×H×W`` images.
    :param energy: Fraction in [0, 1) of each image's DCT energy that may be removed (the paper: 0.05).
    :return: F(x), same shape and dtype; ``energy = 0`` returns ``x`` up to rounding.
    """
    if not 0 <= energy < 1:
        raise ValueError(f"energy must lie in [0, 1), got {energy!r}.")
    if x.ndim != 4:
        raise ValueError(f"x must be N×C×H×W, got shape {tuple(x.shape)}.")
    _, _, h, w = x.shape
    dh, dw = dct_matrix(h, device=x.device), dct_matrix(w, device=x.device)
    coef = dh @ x.double() @ dw.T
    power = coef.pow(2).flatten(1)
    order = power.argsort(dim=1)
    cumulative = power.gather(1, order).cumsum(1)
    drop_sorted = cumulative <= energy * power.sum(1, keepdim=True)
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    coef = coef.masked_fill(drop.view_as(coef), 0.0)
    return (dh.T @ coef @ dw).to(x.dtype)


def _op(img, name: str, level: float, rng: np.random.Generator):
    """One AugMix operation on a PIL image at ``level`` in [0, 1] (Hendrycks et al.'s ``augmentations.py``)."""
    from PIL import Image, ImageOps

    size = img.size
    sign = 1 if rng.random() < 0.5 else -1
    if name == "autocontrast":
        return ImageOps.autocontrast(img)
    if name == "equalize":
        return ImageOps.equalize(img)
    if name == "posterize":
        return ImageOps.posterize(img, 4 - int(level * 4))
    if name == "solarize":
        return ImageOps.solarize(img, 256 - int(level * 256))
    if name == "rotate":
        return img.rotate(sign * level * 30, resample=Image.Resampling.BILINEAR)
    affine, bilinear = Image.Transform.AFFINE, Image.Resampling.BILINEAR
    if name == "shear_x":
        return img.transform(size, affine, (1, sign * level * 0.3, 0, 0, 1, 0), resample=bilinear)
    if name == "shear_y":
        return img.transform(size, affine, (1, 0, 0, sign * level * 0.3, 1, 0), resample=bilinear)
    if name == "translate_x":
        return img.transform(size, affine, (1, 0, sign * level * size[0] / 3, 0, 1, 0), resample=bilinear)
    if name == "translate_y":
        return img.transform(size, affine, (1, 0, 0, 0, 1, sign * level * size[1] / 3), resample=bilinear)
    raise ValueError(f"unknown AugMix operation {name!r}; valid: {', '.join(AUGMIX_OPS)}")


def augmix(
    x: np.ndarray,
    rng: np.random.Generator,
    *,
    severity: int = 3,
    width: int = 3,
    depth: int = -1,
    alpha: float = 1.0,
    ops=AUGMIX_OPS,
) -> np.ndarray:
    """
    AugMix of one image (Hendrycks et al. 2020, Algorithm 1; their defaults: severity 3, width 3, depth 1-3, α = 1).

    x_aug = m·x + (1 − m)·Σᵢ wᵢ·chainᵢ(x), w ~ Dirichlet(α, …, α), m ~ Beta(α, α); chainᵢ applies ``depth`` (or
    a uniform 1-3) operations drawn from ``ops``, each at a level drawn uniformly in [0.1, severity/10].
    Operations run on the uint8 image (PIL), the mixing on floats.

    :param x: One image ``C×H×W`` float in [0, 1], C = 1 or 3.
    :param rng: Source of every random draw.
    :return: The augmented image, ``C×H×W`` float32 in [0, 1].
    """
    from PIL import Image

    c = x.shape[0]
    u8 = np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8)
    pil = Image.fromarray(u8[0] if c == 1 else u8.transpose(1, 2, 0))
    w = rng.dirichlet([alpha] * width)
    m = rng.beta(alpha, alpha)
    mix = np.zeros(x.shape, dtype=np.float64)
    for i in range(width):
        img = pil
        for _ in range(depth if depth > 0 else int(rng.integers(1, 4))):
            img = _op(img, ops[int(rng.integers(len(ops)))], rng.uniform(0.1, severity / 10), rng)
        arr = np.asarray(img, dtype=np.float64) / 255
        mix += w[i] * (arr[None] if c == 1 else arr.transpose(2, 0, 1))
    return (m * x + (1 - m) * mix).astype(np.float32)


def augmix_batch(x: torch.Tensor, rng: np.random.Generator, **options) -> torch.Tensor:
    """:func:`augmix` of every image of an ``N×C×H×W`` tensor (on the CPU, returned on ``x``'s device)."""
    arr = x.detach().cpu().numpy()
    return torch.from_numpy(np.stack([augmix(a, rng, **options) for a in arr])).to(x.device, x.dtype)


def augment_targets(x: torch.Tensor, augment: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """
    The ``center``/``target`` keywords of :func:`~art_adp.score.dsm_loss` for an augmented DSM step.

    ``"dct"``: center F(x) = :func:`dct_drop` (x), target x. ``"augmix"``: center F(x) = AugMix(x), target the
    midpoint (x + F(x))/2; its randomness comes from a numpy generator seeded by one draw of ``generator``.
    """
    if augment == "dct":
        return {"center": dct_drop(x), "target": x}
    if augment == "augmix":
        seed = int(torch.randint(0, 2**62, (), generator=generator, device=generator.device).item())
        fx = augmix_batch(x, np.random.default_rng(seed))
        return {"center": fx, "target": 0.5 * (x + fx)}
    raise ValueError(f"augment must be None, 'dct' or 'augmix', got {augment!r}.")
