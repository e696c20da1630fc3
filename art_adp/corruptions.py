"""Common corruptions (Hendrycks & Dietterich, ICLR 2019) of any image split, cached in the CIFAR-10-C layout.

The 15 corruptions at severities 1-5 are computed by the ``imagecorruptions`` package (the maintained
``imagecorruptions-imaug`` distribution of Michaelis et al.'s ``imagecorruptions``), not by filters of our own.
That package implements the ImageNet-C constants (it is what ImageNet-C-style benchmarks use for any image size);
the CIFAR-10-C files used CIFAR-specific constants, so a severity here is *not* numerically a CIFAR-10-C
severity: compare variants with each other on one cache, not with the paper's numbers.

How images the package cannot take directly are handled (it needs ``H, W >= 32`` and 3 channels):

- **Small images** (digits 8×8, MNIST 28×28): upsampled by pixel replication by the smallest integer factor
  ``k`` with ``k·H, k·W >= 32``, corrupted at that size, then sampled back at every ``k``-th pixel (offset
  ``k // 2``). Sampling, not averaging, keeps the per-pixel noise of the noise corruptions at its stated
  standard deviation, and an image that a corruption leaves unchanged comes back exactly. ``pixelate`` is the
  exception: it is relative to the image size (resize by 0.6 … 0.25, box filter, then back), so on a k-fold
  replica its blocks would vanish in the sampling; it runs at native size through the package's own
  ``pixelate`` function (the size check of ``corrupt`` is the only thing bypassed).
- **Grayscale**: the channel is replicated three times (as the package itself does) and the corrupted RGB
  image is brought back to one channel by ITU-R 601 luminance, ``0.299 R + 0.587 G + 0.114 B`` (what
  ``PIL``'s ``convert("L")`` computes). Channel-independent noise (Gaussian, shot) thereby loses a factor
  ``√(0.299² + 0.587² + 0.114²) ≈ 0.67`` of its standard deviation on grayscale data.
- **Range and type**: images in ``[0, 1]`` are quantised to uint8 (``round(255·x)``) before corrupting, as the
  package requires and as CIFAR-10-C is stored; the cache holds uint8, and the floats returned are
  ``uint8 / 255``, exactly what :func:`~art_adp.data.load_cifar10c` reads back.

Randomness: every (corruption, image) gets its own seed derived from ``seed`` (``numpy.random.SeedSequence``),
the same at all five severities; the package draws from numpy's global generator, so that generator is seeded
for the call and its previous state restored afterwards -- the caller's numpy stream is left as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .data import CIFAR10C_CORRUPTIONS, load_cifar10c

__all__ = [
    "CORRUPTIONS",
    "CORRUPTION_GROUPS",
    "SEVERITIES",
    "corrupt_images",
    "write_corrupted",
    "load_corrupted",
    "corruption_step_sizes",
]

CORRUPTIONS = CIFAR10C_CORRUPTIONS[:15]
"""The 15 benchmark corruptions, in the order of Hendrycks & Dietterich (and of the ADP paper's Table 8)."""
CORRUPTION_GROUPS = {
    "noise": CORRUPTIONS[0:3],
    "blur": CORRUPTIONS[3:7],
    "weather": CORRUPTIONS[7:11],
    "digital": CORRUPTIONS[11:15],
}
SEVERITIES = (1, 2, 3, 4, 5)
MIN_SIZE = 32  # the smallest side the corruption package accepts
_SEEDED = ("glass_blur", "impulse_noise")  # these take their own seed; the rest draw from numpy's global generator
LUMA = np.array([0.299, 0.587, 0.114])


def _library():
    try:
        from imagecorruptions import corrupt
    except ImportError as e:  # pragma: no cover - the package is a dependency
        raise ImportError(
            "art_adp.corruptions needs the imagecorruptions package: "
            "pip install 'art-adp[corruptions]' (or imagecorruptions-imaug)"
        ) from e
    return corrupt


def _check_images(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1] not in (1, 3) or x.shape[0] == 0:
        raise ValueError(f"images must be a non-empty N×C×H×W array with C = 1 or 3, got shape {x.shape}.")
    if not np.issubdtype(x.dtype, np.floating) or not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise ValueError("images must be floating point in [0, 1] (divide 0-255 images by 255).")
    return x


def _check_corruption(corruption: str, severity) -> None:
    if corruption not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {corruption!r}; valid: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer in 1, 2, 3, 4, 5, got {severity!r}")


def to_uint8(x: np.ndarray) -> np.ndarray:
    """``N×C×H×W`` floats in [0, 1] → ``N×H×W×C`` uint8 by ``round(255·x)`` (the CIFAR-10-C storage)."""
    return np.rint(np.asarray(x, dtype=np.float64) * 255).astype(np.uint8).transpose(0, 2, 3, 1)


def _corrupt_one(corrupt, img: np.ndarray, corruption: str, severity: int, seed: int) -> np.ndarray:
    """One ``H×W×C`` uint8 image through the package, with the small-size and grayscale handling."""
    h, w, c = img.shape
    k = -(-MIN_SIZE // min(h, w))  # ceil(32 / min side)
    if k > 1 and corruption == "pixelate":  # relative to the image size: pixelating a k-fold replica is lost
        from PIL import Image  # in the sampling, so the package's own function runs at native size
        from imagecorruptions.corruptions import pixelate

        mode_img = Image.fromarray(img[..., 0] if c == 1 else img)
        return np.asarray(pixelate(mode_img, severity), dtype=np.uint8).reshape(h, w, c)
    big = np.repeat(np.repeat(img, k, axis=0), k, axis=1) if k > 1 else img
    if c == 1:
        big = np.repeat(big, 3, axis=2)
    kwargs = {"seed": seed} if corruption in _SEEDED else {}
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        out = np.asarray(corrupt(np.ascontiguousarray(big), severity=severity, corruption_name=corruption, **kwargs))
    finally:
        np.random.set_state(state)
    if out.shape != big.shape:
        raise RuntimeError(f"{corruption} returned shape {out.shape} for an input of shape {big.shape}.")
    if c == 1:
        out = np.rint(np.clip(out.astype(np.float64) @ LUMA, 0, 255))[..., None]
    if k > 1:
        out = out[k // 2 :: k, k // 2 :: k]
    return out.astype(np.uint8)


def corrupt_images(
    x: np.ndarray, corruption: str, severity: int, *, seed: int = 0, progress: bool = False
) -> np.ndarray:
    """
    Corrupt a batch of images with one of the 15 corruptions at one severity.

    :param x: Images ``N×C×H×W`` float in [0, 1], ``C`` = 1 or 3, any ``H, W`` (see the module notes).
    :param corruption: One of :data:`CORRUPTIONS`, e.g. ``"gaussian_noise"``.
    :param severity: 1 (mildest) .. 5.
    :param seed: Base seed; image ``i`` uses a seed derived from ``(seed, corruption, i)``, the same at every
        severity (common random numbers: the same noise pattern or frost crop, scaled by the severity).
    :param progress: Show a progress bar.
    :return: uint8 ``N×H×W×C`` (the CIFAR-10-C storage layout); divide by 255 and transpose for ``N×C×H×W``.
    """
    x = _check_images(x)
    _check_corruption(corruption, severity)
    corrupt = _library()
    # one seed per (corruption, image), the same at every severity: severities differ by their constants only
    seeds = np.random.SeedSequence([int(seed), CORRUPTIONS.index(corruption)]).generate_state(len(x))
    imgs = to_uint8(x)
    out = np.empty_like(imgs)
    for i in tqdm(range(len(imgs)), disable=not progress, desc=f"{corruption} {severity}", leave=False):
        out[i] = _corrupt_one(corrupt, imgs[i], corruption, int(severity), int(seeds[i]))
    return out


def _meta(x: np.ndarray, corruptions, seed: int, source: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    try:
        lib = f"imagecorruptions-imaug {version('imagecorruptions-imaug')}"
    except PackageNotFoundError:  # pragma: no cover
        lib = "imagecorruptions"
    return {
        "source": source,
        "n": int(len(x)),
        "shape": list(x.shape[1:]),
        "seed": int(seed),
        "corruptions": list(corruptions),
        "severities": list(SEVERITIES),
        "library": lib,
        "images_sha": _digest(to_uint8(x)),
    }


def _digest(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def _atomic_save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)
    os.replace(tmp, path)


def write_corrupted(
    root: str | os.PathLike,
    x: np.ndarray,
    y: np.ndarray,
    *,
    corruptions=CORRUPTIONS,
    seed: int = 0,
    source: str = "",
    progress: bool = True,
) -> Path:
    """
    Corrupt a split and cache it in the CIFAR-10-C layout: ``root/<corruption>.npy`` uint8 ``(5N, H, W, C)``
    with severity ``k`` in rows ``(k−1)N : kN``, ``root/labels.npy`` int64 ``(5N,)``, and ``root/meta.json``
    (source, seed, shape, package version, a digest of the images). Files already there for the same settings are
    kept (the cache resumes corruption by corruption); a cache made from other images or settings is refused.

    :param root: Output folder.
    :param x: Images ``N×C×H×W`` float in [0, 1].
    :param y: Labels ``(N,)`` integers.
    :param corruptions: Names from :data:`CORRUPTIONS` (default: all 15).
    :param seed: Base seed of the corruptions' randomness.
    :param source: A description of the split (written to ``meta.json``), e.g. ``"digits test, seed 0"``.
    :param progress: Show progress.
    :return: ``root`` as a ``Path``.
    """
    x = _check_images(x)
    y = np.asarray(y)
    if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be {len(x)} integers (one per image), got {y.dtype} {y.shape}.")
    for name in corruptions:
        _check_corruption(name, 1)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    meta = _meta(x, CORRUPTIONS, seed, source)
    meta_path = root / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if {k: v for k, v in old.items() if k != "source"} != {k: v for k, v in meta.items() if k != "source"}:
            raise ValueError(
                f"{root} holds corruptions of other images or settings ({old}); " f"use another folder or delete it."
            )
    meta_path.write_text(json.dumps(meta, indent=2))
    _atomic_save(root / "labels.npy", np.tile(y.astype(np.int64), len(SEVERITIES)))
    todo = [c for c in corruptions if not (root / f"{c}.npy").is_file()]
    for name in tqdm(todo, disable=not progress, desc="corrupting"):
        stack = np.concatenate([corrupt_images(x, name, s, seed=seed) for s in SEVERITIES])
        _atomic_save(root / f"{name}.npy", stack)
    return root


def load_corrupted(
    root: str | os.PathLike, corruption: str, severity: int, *, nb_classes: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """
    Read one corruption at one severity from a cache written by :func:`write_corrupted` or from the real
    CIFAR-10-C folder: the same reader, :func:`~art_adp.data.load_cifar10c`.

    :return: ``(x, y)``: x float32 ``(N, C, H, W)`` in [0, 1], y int64 ``(N,)``.
    """
    return load_cifar10c(root, corruption, severity, nb_classes=nb_classes)


def corruption_step_sizes(first: float = 0.08, last: float = 8e-4, steps: int = 10) -> list[float]:
    """
    The manual step schedule of the ADP paper's corruption experiments (Appendix, "Full CIFAR-10-C performance"):
    "exponentially decreasing deterministic step size from 0.08 to 8.0e-4" over 10 steps, i.e.
    α_t = first · (last/first)^(t/(steps−1)), t = 0 … steps−1 (a ratio of 10^(−2/9) ≈ 0.599 per step).
    Pass it as ``purify(..., step_size=corruption_step_sizes(), steps=10)`` (or to ``ADPPurifier``).

    :return: ``steps`` floats, ``first`` first and ``last`` last (``[first]`` for one step).
    """
    if not 0 < last <= first:
        raise ValueError(f"need 0 < last <= first, got first={first!r}, last={last!r}.")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}.")
    return [float(a) for a in np.geomspace(first, last, steps)]
