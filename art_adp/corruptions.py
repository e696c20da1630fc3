"""Common corruptions (Hendrycks & Dietterich, ICLR 2019) of any image split, cached in the CIFAR-10-C layout.

The 15 corruptions at severities 1-5 come with two sets of constants (``constants=``):

- ``"imagenet-c"`` (the default): the ``imagecorruptions`` package (the maintained ``imagecorruptions-imaug``
  distribution of Michaelis et al.'s ``imagecorruptions``), not filters of our own. It implements the ImageNet-C
  constants, what ImageNet-C-style benchmarks use for any image size; a severity there is *not* numerically a
  CIFAR-10-C severity: compare variants with each other on one cache, not with the paper's numbers.
- ``"cifar10-c"``: CIFAR-10-C's own constants, :mod:`art_adp.corruptions_cifar10c` (ported from the authors'
  ``make_cifar_c.py``; its notes list what could not be matched exactly), for 32×32 RGB images only.

How images the package (``"imagenet-c"``) cannot take directly are handled (it needs ``H, W >= 32`` and 3 channels):

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
the same at all five severities; both sets of constants draw from numpy's global generator, so that generator is
seeded for the call and its previous state restored afterwards -- the caller's numpy stream is left as it was.
A cache records its constants in ``meta.json`` (one without the entry predates the choice: ``"imagenet-c"``), and
with ``names`` the images' file names in ``filenames.txt``, by which :func:`~art_adp.data.load_cifar10c` selects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .data import CIFAR10C_CORRUPTIONS, load_cifar10c

__all__ = [
    "CORRUPTIONS",
    "CORRUPTION_GROUPS",
    "SEVERITIES",
    "CONSTANTS",
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
CONSTANTS = ("imagenet-c", "cifar10-c")
"""The corruptions' constants: the ``imagecorruptions`` package's ImageNet-C ones (the default), CIFAR-10-C's."""
MIN_SIZE = 32  # the smallest side the corruption package accepts
_SEEDED = ("glass_blur", "impulse_noise")  # these take their own seed; the rest draw from numpy's global generator
LUMA = np.array([0.299, 0.587, 0.114])


def _library(constants: str = "imagenet-c") -> tuple[Callable, tuple[str, ...]]:
    """The corrupting function ``corrupt(image, severity=, corruption_name=)`` of ``constants`` and the corruptions
    that take a ``seed`` keyword (the package's; CIFAR-10-C's draw from the seeded global generator only)."""
    try:
        if constants == "cifar10-c":
            from .corruptions_cifar10c import corrupt as cifar10c

            return cifar10c, ()
        from imagecorruptions import corrupt
    except ImportError as e:  # pragma: no cover - the package is a dependency
        raise ImportError(
            "art_adp.corruptions needs the imagecorruptions package: "
            "pip install 'art-adp[corruptions]' (or imagecorruptions-imaug)"
        ) from e
    return corrupt, _SEEDED


def _check_constants(constants: str, shape: tuple) -> None:
    """``constants`` is one of :data:`CONSTANTS`; CIFAR-10-C's are for ``3×32×32`` images (``shape`` is C×H×W)."""
    if constants not in CONSTANTS:
        raise ValueError(f"unknown constants {constants!r}; valid: {', '.join(map(repr, CONSTANTS))}")
    if constants == "cifar10-c" and tuple(shape) != (3, 32, 32):
        raise ValueError(
            f'constants="cifar10-c" are CIFAR-10-C\'s, for 32×32 RGB images (3×32×32); these are '
            f'{"×".join(map(str, shape))}: use constants="imagenet-c", which takes any size.'
        )


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


def _corrupt_one(
    corrupt, img: np.ndarray, corruption: str, severity: int, seed: int, seeded: tuple[str, ...] = _SEEDED
) -> np.ndarray:
    """One ``H×W×C`` uint8 image through ``corrupt``, with the small-size and grayscale handling; the corruptions
    ``seeded`` also get ``seed`` as a keyword."""
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
    kwargs = {"seed": seed} if corruption in seeded else {}
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
    x: np.ndarray,
    corruption: str,
    severity: int,
    *,
    seed: int = 0,
    progress: bool = False,
    constants: str = "imagenet-c",
) -> np.ndarray:
    """
    Corrupt a batch of images with one of the 15 corruptions at one severity.

    :param x: Images ``N×C×H×W`` float in [0, 1], ``C`` = 1 or 3, any ``H, W`` (see the module notes).
    :param corruption: One of :data:`CORRUPTIONS`, e.g. ``"gaussian_noise"``.
    :param severity: 1 (mildest) .. 5.
    :param seed: Base seed; image ``i`` uses a seed derived from ``(seed, corruption, i)``, the same at every
        severity (common random numbers: the same noise pattern or frost crop, scaled by the severity).
    :param progress: Show a progress bar.
    :param constants: ``"imagenet-c"`` (the ``imagecorruptions`` package, any size) or ``"cifar10-c"`` (CIFAR-10-C's
        own, :mod:`art_adp.corruptions_cifar10c`; ``3×32×32`` images only). See :data:`CONSTANTS`.
    :return: uint8 ``N×H×W×C`` (the CIFAR-10-C storage layout); divide by 255 and transpose for ``N×C×H×W``.
    """
    x = _check_images(x)
    _check_corruption(corruption, severity)
    _check_constants(constants, x.shape[1:])
    corrupt, seeded = _library(constants)
    # one seed per (corruption, image), the same at every severity: severities differ by their constants only
    seeds = np.random.SeedSequence([int(seed), CORRUPTIONS.index(corruption)]).generate_state(len(x))
    imgs = to_uint8(x)
    out = np.empty_like(imgs)
    for i in tqdm(range(len(imgs)), disable=not progress, desc=f"{corruption} {severity}", leave=False):
        out[i] = _corrupt_one(corrupt, imgs[i], corruption, int(severity), int(seeds[i]), seeded)
    return out


def _meta(x: np.ndarray, corruptions, seed: int, source: str, constants: str, names: tuple | None) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    try:
        lib = f"imagecorruptions-imaug {version('imagecorruptions-imaug')}"
    except PackageNotFoundError:  # pragma: no cover
        lib = "imagecorruptions"
    if constants == "cifar10-c":
        lib = f"art_adp.corruptions_cifar10c (make_cifar_c.py's constants; helpers of {lib})"
    names_sha = {} if names is None else {"names_sha": _digest(np.frombuffer("\n".join(names).encode(), np.uint8))}
    return {
        "source": source,
        "n": int(len(x)),
        "shape": list(x.shape[1:]),
        "seed": int(seed),
        "corruptions": list(corruptions),
        "severities": list(SEVERITIES),
        "constants": constants,
        "library": lib,
        "images_sha": _digest(to_uint8(x)),
        **names_sha,
    }


def _same_cache(old: dict, new: dict) -> bool:
    """Whether the ``meta.json`` ``old`` describes the cache ``new`` would: all but the source, and the names only if
    both have them (a cache without names may get them, a caller without names may read one that has them)."""
    old = {"constants": "imagenet-c", **old}  # caches from before the choice: the package's constants
    skip = {"source"} | ({"names_sha"} if not {"names_sha"} <= set(old) & set(new) else set())
    return {k: v for k, v in old.items() if k not in skip} == {k: v for k, v in new.items() if k not in skip}


def _check_names(names, n: int) -> tuple[str, ...]:
    """``n`` distinct file names, one a line of ``filenames.txt``."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if len(names) != n:
        raise ValueError(f"names must be {n} file names (one per image), got {len(names)}.")
    if not all(isinstance(m, str) and m and m.strip() == m and len(m.splitlines()) == 1 for m in names):
        raise ValueError("names must be non-empty strings without line breaks or surrounding white space.")
    if len(set(names)) != n:
        raise ValueError(f"names must be distinct; {n - len(set(names))} repeat an earlier one.")
    return names


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
    constants: str = "imagenet-c",
    names: Sequence[str] | None = None,
) -> Path:
    """
    Corrupt a split and cache it in the CIFAR-10-C layout: ``root/<corruption>.npy`` uint8 ``(5N, H, W, C)``
    with severity ``k`` in rows ``(k−1)N : kN``, ``root/labels.npy`` int64 ``(5N,)``, and ``root/meta.json``
    (source, seed, shape, constants, what computed them, a digest of the images). Files already there for the same
    settings are kept (the cache resumes corruption by corruption); a cache made from other images or settings (other
    constants included) is refused. With ``names``, ``root/filenames.txt`` lists them, one a line, so that
    :func:`~art_adp.data.load_cifar10c` can select images by name from this cache as from the real files.

    :param root: Output folder.
    :param x: Images ``N×C×H×W`` float in [0, 1].
    :param y: Labels ``(N,)`` integers.
    :param corruptions: Names from :data:`CORRUPTIONS` (default: all 15).
    :param seed: Base seed of the corruptions' randomness.
    :param source: A description of the split (written to ``meta.json``), e.g. ``"digits test, seed 0"``.
    :param progress: Show progress.
    :param constants: One of :data:`CONSTANTS` (see :func:`corrupt_images`); recorded in ``meta.json``.
    :param names: The images' file names, one per image (e.g. the official CIFAR-10 names of the test split);
        written to ``root/filenames.txt``.
    :return: ``root`` as a ``Path``.
    """
    x = _check_images(x)
    y = np.asarray(y)
    if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be {len(x)} integers (one per image), got {y.dtype} {y.shape}.")
    for name in corruptions:
        _check_corruption(name, 1)
    _check_constants(constants, x.shape[1:])
    names = None if names is None else _check_names(names, len(x))
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    meta = _meta(x, CORRUPTIONS, seed, source, constants, names)
    meta_path = root / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if not _same_cache(old, meta):
            raise ValueError(
                f"{root} holds corruptions of other images or settings ({old}); " f"use another folder or delete it."
            )
        meta = {**meta, **({"names_sha": old["names_sha"]} if names is None and "names_sha" in old else {})}
    meta_path.write_text(json.dumps(meta, indent=2))
    _atomic_save(root / "labels.npy", np.tile(y.astype(np.int64), len(SEVERITIES)))
    if names is not None:
        tmp = root / "filenames.txt.tmp"
        tmp.write_text("".join(f"{m}\n" for m in names), encoding="utf-8")
        os.replace(tmp, root / "filenames.txt")
    todo = [c for c in corruptions if not (root / f"{c}.npy").is_file()]
    for name in tqdm(todo, disable=not progress, desc="corrupting"):
        stack = np.concatenate([corrupt_images(x, name, s, seed=seed, constants=constants) for s in SEVERITIES])
        _atomic_save(root / f"{name}.npy", stack)
    return root


def load_corrupted(
    root: str | os.PathLike,
    corruption: str,
    severity: int,
    *,
    nb_classes: int = 10,
    names: Sequence[str] | None = None,
    order: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """
    Read one corruption at one severity from a cache written by :func:`write_corrupted` or from the real
    CIFAR-10-C folder: the same reader, :func:`~art_adp.data.load_cifar10c` (``names`` and ``order``: the images
    by file name, as there).

    :return: ``(x, y)``: x float32 ``(N, C, H, W)`` in [0, 1], y int64 ``(N,)``.
    """
    return load_cifar10c(root, corruption, severity, nb_classes=nb_classes, names=names, order=order)


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
