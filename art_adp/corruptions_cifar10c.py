"""The 15 common corruptions with CIFAR-10-C's own constants, for 32×32 RGB uint8 images.

Ported from ``ImageNet-C/create_c/make_cifar_c.py`` of https://github.com/hendrycks/robustness (commit 8190fe3),
Copyright the hendrycks/robustness authors (Dan Hendrycks et al.), licensed under the Apache License, Version 2.0
(https://www.apache.org/licenses/LICENSE-2.0). Changed: the 15 benchmark corruptions only, each a function of an
``H×W×3`` uint8 array instead of a PIL image; the helpers that the ``imagecorruptions`` package already has are
reused from it (``disk``, ``plasma_fractal``, ``clipped_zoom``, its numpy motion blur) and so are its copies of the
frost images (byte-identical to the repository's); the dataset loop and the 4 extra corruptions are left out.
Every constant is make_cifar_c.py's, and so is the final ``np.uint8`` (truncation, not rounding) of its loop.

Differences that cannot be avoided:

- **motion_blur, snow**: ImageMagick (Wand's ``MotionBlurImage``) is not available; the ``imagecorruptions``
  package's numpy reimplementation of it is used with the same radius, sigma and angle. Its kernel is close to,
  not bit-identical with, ImageMagick's. The 8-bit PNGs that went through ImageMagick are kept: snow's layer is
  truncated to uint8 before the blur, and both blurred results are rounded to uint8 as the PNG that comes back is.
- **impulse_noise**: skimage's ``random_noise`` no longer draws from numpy's global generator; it gets a seed
  drawn from that generator (the same distribution: each value flipped with probability ``amount``, salt or
  pepper alike).
- **fog**: the package's ``plasma_fractal`` computes in float32 where make_cifar_c.py's used float64 (a rare ±1
  in a truncated pixel).
- skimage's ``multichannel=True`` is now ``channel_axis=-1``.

The ``clipped_zoom`` of make_cifar_c.py keeps the centre of the zoomed crop; the package's keeps its top-left
corner, so it is trimmed here as the original trims (zoom_blur, snow). frost picks among the first five of the six
frost images (``np.random.randint(5)``) and resizes them by 0.2, as make_cifar_c.py does. glass_blur's "swap" is
kept as written: with numpy views ``x[h, w]`` takes the neighbour's pixel and the neighbour keeps its own.

Randomness comes from numpy's global generator, as in make_cifar_c.py: :func:`art_adp.corruptions.corrupt_images`
seeds it per image and restores it afterwards.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from functools import lru_cache
from io import BytesIO

import cv2
import numpy as np
import skimage as sk
from imagecorruptions.corruptions import _motion_blur, clipped_zoom, disk, plasma_fractal
from PIL import Image
from scipy.ndimage import map_coordinates
from skimage.filters import gaussian

__all__ = ["CORRUPTION_FUNCTIONS", "corrupt"]

SIZE = 32  # make_cifar_c.py's image side
_FROST = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")


def _zoom(img: np.ndarray, factor: float) -> np.ndarray:
    """make_cifar_c.py's ``clipped_zoom``: the package's zoom of the centre crop, trimmed to its centre ``SIZE``."""
    out = clipped_zoom(img, factor)
    top = (out.shape[0] - SIZE) // 2
    return out[top : top + SIZE, top : top + SIZE]


@lru_cache(maxsize=len(_FROST))
def _frost_image(idx: int) -> np.ndarray:
    """Frost image ``idx`` (BGR, as ``cv2.imread`` reads it) resized by 0.2; read once."""
    with importlib.resources.as_file(importlib.resources.files("imagecorruptions") / "frost" / _FROST[idx]) as path:
        image = cv2.imread(str(path))
    if image is None:  # pragma: no cover - the files ship with the package
        raise FileNotFoundError(f"the imagecorruptions package lacks its frost image {_FROST[idx]}")
    image = cv2.resize(image, (0, 0), fx=0.2, fy=0.2)
    image.flags.writeable = False
    return image


def gaussian_noise(x: np.ndarray, severity: int) -> np.ndarray:
    c = [0.04, 0.06, 0.08, 0.09, 0.10][severity - 1]
    x = x / 255.0
    return np.clip(x + np.random.normal(size=x.shape, scale=c), 0, 1) * 255


def shot_noise(x: np.ndarray, severity: int) -> np.ndarray:
    c = [500, 250, 100, 75, 50][severity - 1]
    x = x / 255.0
    return np.clip(np.random.poisson(x * c) / c, 0, 1) * 255


def impulse_noise(x: np.ndarray, severity: int) -> np.ndarray:
    c = [0.01, 0.02, 0.03, 0.05, 0.07][severity - 1]
    x = sk.util.random_noise(x / 255.0, mode="s&p", rng=int(np.random.randint(2**31)), amount=c)
    return np.clip(x, 0, 1) * 255


def defocus_blur(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)][severity - 1]
    x = x / 255.0
    kernel = disk(radius=c[0], alias_blur=c[1])
    channels = np.stack([cv2.filter2D(x[:, :, d], -1, kernel) for d in range(3)], axis=-1)
    return np.clip(channels, 0, 1) * 255


def glass_blur(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)][severity - 1]  # sigma, delta, iterations
    x = (gaussian(x / 255.0, sigma=c[0], channel_axis=-1) * 255).astype(np.uint8)
    for _ in range(c[2]):  # locally shuffle pixels
        for h in range(SIZE - c[1], c[1], -1):
            for w in range(SIZE - c[1], c[1], -1):
                dx, dy = np.random.randint(-c[1], c[1], size=(2,))
                h_prime, w_prime = h + dy, w + dx
                x[h, w], x[h_prime, w_prime] = x[h_prime, w_prime], x[h, w]  # as written: a copy (see the notes)
    return np.clip(gaussian(x / 255.0, sigma=c[0], channel_axis=-1), 0, 1) * 255


def motion_blur(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)][severity - 1]
    x = _motion_blur(x, radius=c[0], sigma=c[1], angle=np.random.uniform(-45, 45))
    return np.clip(np.rint(x), 0, 255)  # ImageMagick's result came back as an 8-bit PNG


def zoom_blur(x: np.ndarray, severity: int) -> np.ndarray:
    c = [np.arange(1, 1.06, 0.01), np.arange(1, 1.11, 0.01), np.arange(1, 1.16, 0.01),
         np.arange(1, 1.21, 0.01), np.arange(1, 1.26, 0.01)][severity - 1]  # fmt: skip
    x = (x / 255.0).astype(np.float32)
    out = np.zeros_like(x)
    for zoom_factor in c:
        out += _zoom(x, zoom_factor)
    x = (x + out) / (len(c) + 1)
    return np.clip(x, 0, 1) * 255


def snow(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(0.1, 0.2, 1, 0.6, 8, 3, 0.95),
         (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
         (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
         (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
         (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)][severity - 1]  # fmt: skip
    x = np.array(x, dtype=np.float32) / 255.0
    layer = np.random.normal(size=x.shape[:2], loc=c[0], scale=c[1])
    layer = _zoom(layer[..., np.newaxis], c[2])
    layer[layer < c[3]] = 0
    layer = (np.clip(layer.squeeze(), 0, 1) * 255).astype(np.uint8)  # the 8-bit PNG handed to ImageMagick
    layer = _motion_blur(layer, radius=c[4], sigma=c[5], angle=np.random.uniform(-135, -45))
    layer = np.clip(np.rint(layer), 0, 255)[..., np.newaxis] / 255.0  # ... and the one that came back
    x = c[6] * x + (1 - c[6]) * np.maximum(x, cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).reshape(SIZE, SIZE, 1) * 1.5 + 0.5)
    return np.clip(x + layer + np.rot90(layer, k=2), 0, 1) * 255


def frost(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)][severity - 1]
    image = _frost_image(np.random.randint(5))  # make_cifar_c.py draws among the first five
    x_start, y_start = np.random.randint(0, image.shape[0] - SIZE), np.random.randint(0, image.shape[1] - SIZE)
    image = image[x_start : x_start + SIZE, y_start : y_start + SIZE][..., [2, 1, 0]]  # crop, BGR -> RGB
    return np.clip(c[0] * x + c[1] * image, 0, 255)


def fog(x: np.ndarray, severity: int) -> np.ndarray:
    c = [(0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)][severity - 1]
    x = x / 255.0
    max_val = x.max()
    x += c[0] * plasma_fractal(mapsize=SIZE, wibbledecay=c[1])[:SIZE, :SIZE][..., np.newaxis]
    return np.clip(x * max_val / (max_val + c[0]), 0, 1) * 255


def brightness(x: np.ndarray, severity: int) -> np.ndarray:
    c = [0.05, 0.1, 0.15, 0.2, 0.3][severity - 1]
    x = sk.color.rgb2hsv(x / 255.0)
    x[:, :, 2] = np.clip(x[:, :, 2] + c, 0, 1)
    return np.clip(sk.color.hsv2rgb(x), 0, 1) * 255


def contrast(x: np.ndarray, severity: int) -> np.ndarray:
    c = [0.75, 0.5, 0.4, 0.3, 0.15][severity - 1]
    x = x / 255.0
    means = np.mean(x, axis=(0, 1), keepdims=True)
    return np.clip((x - means) * c + means, 0, 1) * 255


def elastic_transform(image: np.ndarray, severity: int) -> np.ndarray:
    c = [(SIZE * 0, SIZE * 0, SIZE * 0.08),
         (SIZE * 0.05, SIZE * 0.2, SIZE * 0.07),
         (SIZE * 0.08, SIZE * 0.06, SIZE * 0.06),
         (SIZE * 0.1, SIZE * 0.04, SIZE * 0.05),
         (SIZE * 0.1, SIZE * 0.03, SIZE * 0.03)][severity - 1]  # fmt: skip
    image = np.array(image, dtype=np.float32) / 255.0
    shape = image.shape
    shape_size = shape[:2]
    # random affine
    center_square = np.asarray(shape_size, dtype=np.float32) // 2
    square_size = min(shape_size) // 3
    pts1 = np.asarray([center_square + square_size,
                       [center_square[0] + square_size, center_square[1] - square_size],
                       center_square - square_size], dtype=np.float32)  # fmt: skip
    pts2 = pts1 + np.random.uniform(-c[2], c[2], size=pts1.shape).astype(np.float32)
    M = cv2.getAffineTransform(pts1, pts2)
    image = cv2.warpAffine(image, M, shape_size[::-1], borderMode=cv2.BORDER_REFLECT_101)
    dx = (gaussian(np.random.uniform(-1, 1, size=shape[:2]), c[1], mode="reflect", truncate=3) * c[0]).astype(
        np.float32
    )
    dy = (gaussian(np.random.uniform(-1, 1, size=shape[:2]), c[1], mode="reflect", truncate=3) * c[0]).astype(
        np.float32
    )
    dx, dy = dx[..., np.newaxis], dy[..., np.newaxis]
    x, y, z = np.meshgrid(np.arange(shape[1]), np.arange(shape[0]), np.arange(shape[2]))
    indices = np.reshape(y + dy, (-1, 1)), np.reshape(x + dx, (-1, 1)), np.reshape(z, (-1, 1))
    return np.clip(map_coordinates(image, indices, order=1, mode="reflect").reshape(shape), 0, 1) * 255


def pixelate(x: np.ndarray, severity: int) -> np.ndarray:
    c = [0.95, 0.9, 0.85, 0.75, 0.65][severity - 1]
    image = Image.fromarray(x).resize((int(SIZE * c), int(SIZE * c)), Image.Resampling.BOX)
    return np.asarray(image.resize((SIZE, SIZE), Image.Resampling.BOX))


def jpeg_compression(x: np.ndarray, severity: int) -> np.ndarray:
    c = [80, 65, 58, 50, 40][severity - 1]
    output = BytesIO()
    Image.fromarray(x).save(output, "JPEG", quality=c)
    return np.asarray(Image.open(output))


CORRUPTION_FUNCTIONS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    f.__name__: f
    for f in (gaussian_noise, shot_noise, impulse_noise, defocus_blur, glass_blur, motion_blur, zoom_blur, snow,
              frost, fog, brightness, contrast, elastic_transform, pixelate, jpeg_compression)
}  # fmt: skip
"""The 15 benchmark corruptions by name, in the order of Hendrycks & Dietterich: ``f(x, severity)``, x uint8
``32×32×3``, returning floats in [0, 255] (or uint8) as make_cifar_c.py's functions do."""


def corrupt(image: np.ndarray, severity: int, corruption_name: str) -> np.ndarray:
    """
    One image through one corruption with CIFAR-10-C's constants, as make_cifar_c.py stores it.

    :param image: uint8 ``32×32×3`` (RGB).
    :param severity: 1 (mildest) .. 5.
    :param corruption_name: A key of :data:`CORRUPTION_FUNCTIONS`, e.g. ``"gaussian_noise"``.
    :return: uint8 ``32×32×3``: ``np.uint8`` of the corruption's output (truncated, as make_cifar_c.py's loop).
    """
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.shape != (SIZE, SIZE, 3):
        raise ValueError(f"CIFAR-10-C's corruptions take uint8 32×32×3 images, got {image.dtype} {image.shape}.")
    if corruption_name not in CORRUPTION_FUNCTIONS:
        raise ValueError(f"unknown corruption {corruption_name!r}; valid: {', '.join(CORRUPTION_FUNCTIONS)}")
    if severity not in (1, 2, 3, 4, 5):
        raise ValueError(f"severity must be an integer in 1, 2, 3, 4, 5, got {severity!r}")
    return np.asarray(CORRUPTION_FUNCTIONS[corruption_name](image, int(severity))).astype(np.uint8)
