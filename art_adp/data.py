"""Offline dataset loaders for art-adp: local files only, never downloads, never plain ``pickle.load``.

Images come back as float32 ``(N, C, H, W)`` in ``[0, 1]`` (what an ART ``PyTorchClassifier`` with
``clip_values=(0, 1)`` expects), labels as int64 ``(N,)``.  ``digits`` ships with scikit-learn; the other data
sets must already be on disk (the errors say where to get them): this package never downloads.
CIFAR "python version" batches are pickles: :class:`_CifarUnpickler` refuses every global except the numpy
reconstructors a genuine batch holds, so a tampered file cannot run code.  ``.npy`` files: ``allow_pickle=False``.
"""

from __future__ import annotations

import gzip
import importlib
import os
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_NO_DOWNLOAD = "download them yourself; this package never downloads"
DIGIT_CLASSES = tuple(str(i) for i in range(10))
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR100_FINE_CLASSES = tuple(
    """
apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel can castle
caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur dolphin elephant
flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree
motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree plain plate
poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake spider
squirrel streetcar sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle
wardrobe whale willow_tree wolf woman worm""".split()
)
CIFAR100_COARSE_CLASSES = tuple(
    """
aquatic_mammals fish flowers food_containers fruit_and_vegetables household_electrical_devices household_furniture
insects large_carnivores large_man-made_outdoor_things large_natural_outdoor_scenes large_omnivores_and_herbivores
medium_mammals non-insect_invertebrates people reptiles small_mammals trees vehicles_1 vehicles_2""".split()
)
CIFAR10C_CORRUPTIONS = tuple(
    """gaussian_noise shot_noise impulse_noise defocus_blur glass_blur motion_blur zoom_blur
snow frost fog brightness contrast elastic_transform pixelate jpeg_compression speckle_noise gaussian_blur spatter
saturate""".split()
)  # the 15 standard corruptions, then the 4 extra ones
DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100")


@dataclass(frozen=True, eq=False)
class Dataset:
    """An in-memory train/test split.

    :param name: Data set name, e.g. ``"mnist"``.
    :param x_train: Training images, float32 ``(N_train, C, H, W)`` in ``[0, 1]``.
    :param y_train: Training labels, int64 ``(N_train,)`` in ``[0, len(classes))``.
    :param x_test: Test images, float32 ``(N_test, C, H, W)`` in ``[0, 1]``.
    :param y_test: Test labels, int64 ``(N_test,)``.
    :param classes: Class names; ``classes[k]`` names label ``k``.  ``nb_classes == len(classes)``.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]

    @property
    def nb_classes(self) -> int:
        """Number of classes (the ``nb_classes`` argument of an ART classifier)."""
        return len(self.classes)


def _missing(folder: Path, names, what: str, url: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} files not found in {folder}: expected {', '.join(names)}. " f"Get them from {url} -- {_NO_DOWNLOAD}."
    )


def _check_labels(y: np.ndarray, nb_classes: int, path) -> np.ndarray:
    if y.size and (y.min() < 0 or y.max() >= nb_classes):
        raise ValueError(f"{path}: labels must lie in [0, {nb_classes - 1}], found [{y.min()}, {y.max()}]")
    return y.astype(np.int64)


def load_digits(*, test_size: float = 0.2, seed: int = 0) -> Dataset:
    """Scikit-learn's bundled 8x8 digits (1,797 real images, no files needed), stratified split.

    :param test_size: Fraction of the 1,797 images put in the test set.
    :param seed: ``random_state`` of the split; the same seed always gives the same split.
    :return: ``Dataset`` with x float32 ``(N, 1, 8, 8)`` in ``[0, 1]`` (raw 0..16 divided by 16).
    """
    from sklearn import datasets, model_selection  # imported lazily: slow to import

    raw = datasets.load_digits()
    x, y = (raw.images.astype(np.float32) / 16.0)[:, None], raw.target.astype(np.int64)
    split = model_selection.train_test_split(x, y, test_size=test_size, stratify=y, random_state=seed)
    x_tr, x_te, y_tr, y_te = split
    return Dataset("digits", x_tr, y_tr, x_te, y_te, DIGIT_CLASSES)


_IDX_FILES = tuple(f"{s}-{k}-ubyte" for s in ("train", "t10k") for k in ("images-idx3", "labels-idx1"))


def _read_idx(path: Path, magic: int, dims_tail: tuple) -> np.ndarray:
    """Parse an idx file: big-endian magic (0x00000803 images / 0x00000801 labels), dims, then uint8 data."""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"{path}: not a readable idx file ({e})") from e
    ndim = magic & 0xFF  # 3 for images, 1 for labels
    header = 4 + 4 * ndim  # magic, then one big-endian uint32 per dimension
    found = struct.unpack(">I", data[:4])[0] if len(data) >= 4 else None
    if found != magic:
        raise ValueError(
            f"{path}: bad magic number {'(missing)' if found is None else f'{found:#010x}'}, "
            f"expected {magic:#010x}; not an idx file of this kind"
        )
    if len(data) < header:
        raise ValueError(f"{path}: truncated idx header ({len(data)} bytes)")
    dims = struct.unpack(">" + "I" * ndim, data[4:header])
    if dims[1:] != dims_tail:
        raise ValueError(f"{path}: item shape {dims[1:]}, expected {dims_tail}")
    if len(data) != header + int(np.prod(dims)):
        raise ValueError(
            f"{path}: byte length {len(data)} does not match dims {dims} "
            f"(expected {header + int(np.prod(dims))}); file truncated or corrupt"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _load_idx_dataset(root: str | os.PathLike, name: str, classes, url: str) -> Dataset:
    folder = Path(root).expanduser()
    paths = [next((p for p in (folder / f"{b}.gz", folder / b) if p.is_file()), None) for b in _IDX_FILES]
    if None in paths:
        raise _missing(folder, [f"{b}.gz (or {b})" for b in _IDX_FILES], name, url)
    files = [p for p in paths if p is not None]
    parts = []
    for img_path, lab_path in (files[:2], files[2:]):
        x = _read_idx(img_path, 0x00000803, (28, 28))
        y = _read_idx(lab_path, 0x00000801, ())
        if len(x) != len(y):
            raise ValueError(f"{img_path} has {len(x)} images but {lab_path} has {len(y)} labels")
        parts += [(x.astype(np.float32) / 255.0)[:, None], _check_labels(y, len(classes), lab_path)]
    return Dataset(name, parts[0], parts[1], parts[2], parts[3], classes=classes)


def load_mnist(root: str | os.PathLike) -> Dataset:
    """MNIST from the standard idx files.

    :param root: Folder with ``{train-images-idx3,train-labels-idx1,t10k-images-idx3,t10k-labels-idx1}-ubyte.gz``
                 (the uncompressed names without ``.gz`` are accepted too).
    :return: ``Dataset`` with x float32 ``(N, 1, 28, 28)`` in ``[0, 1]`` (bytes / 255), 60,000 / 10,000.
    """
    return _load_idx_dataset(root, "mnist", DIGIT_CLASSES, "http://yann.lecun.com/exdb/mnist/")


def load_fashion_mnist(root: str | os.PathLike) -> Dataset:
    """Fashion-MNIST from the four standard idx files (same names and format as :func:`load_mnist`).

    :param root: Folder holding the four idx files (``.gz`` or uncompressed).
    :return: ``Dataset`` with x float32 ``(N, 1, 28, 28)`` in ``[0, 1]``.
    """
    return _load_idx_dataset(
        root, "fashion-mnist", FASHION_MNIST_CLASSES, "https://github.com/zalandoresearch/fashion-mnist"
    )


class UnsafePickleError(pickle.UnpicklingError, ValueError):
    """A pickle referenced a global outside the CIFAR allow-list (catchable as either base class)."""


def _latin1_encode(text, encoding="latin1"):
    """Stand-in for ``_codecs.encode`` (how Python 3 writes ``bytes`` in pickle protocols <= 2), latin-1 only."""
    if encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f'"_codecs.encode" with encoding {encoding!r}: not a genuine CIFAR batch')
    return text.encode("latin1")


try:
    _multiarray = importlib.import_module("numpy._core.multiarray")  # numpy >= 2
except ImportError:  # pragma: no cover - numpy 1.x
    _multiarray = importlib.import_module("numpy.core.multiarray")
# The complete allow-list: a name resolves to one of these objects or is refused (nothing is ever imported).
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,  # Python 3 pickles' bytes, protocols <= 2
    **{
        (m, n): getattr(_multiarray, n)
        for m in ("numpy.core.multiarray", "numpy._core.multiarray")
        for n in ("_reconstruct", "scalar")
    },
}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the numpy globals a genuine CIFAR batch needs and refuses all else."""

    def find_class(self, module, name):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f'contains a disallowed object "{module}.{name}"; refusing to unpickle it: '
                "this is not a genuine CIFAR batch"
            ) from None


def _load_cifar_batch(path: Path, label_key: str, nb_classes: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="bytes").load()  # bytes: as the official CIFAR instructions
    except UnsafePickleError as e:
        raise UnsafePickleError(f"{path}: {e}") from None
    except Exception as e:  # corrupt/truncated pickle
        raise ValueError(f"{path}: not a readable CIFAR batch ({type(e).__name__}: {e})") from e
    items = obj.items() if isinstance(obj, dict) else ()
    obj = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in items}  # keys: bytes (Py2) or str
    if "data" not in obj or label_key not in obj:
        raise ValueError(f"{path}: not a CIFAR batch (a dict with keys 'data' and {label_key!r})")
    data, labels = np.asarray(obj["data"]), np.asarray(obj[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: 'data' must be uint8 of shape (N, 3072), found {data.dtype} {data.shape}")
    if labels.ndim != 1 or len(labels) != len(data) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path}: {len(data)} images but {label_key!r} has shape {labels.shape} ({labels.dtype})")
    return data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0, _check_labels(labels, nb_classes, path)


def _cifar_files(root: str | os.PathLike, sub: str, names, what: str):
    root = Path(root).expanduser()
    folder = root / sub if (root / sub).is_dir() else root
    if not all((folder / n).is_file() for n in names):
        raise _missing(folder, [f"{sub}/{n}" for n in names], what, "https://www.cs.toronto.edu/~kriz/cifar.html")
    return [folder / n for n in names]


def load_cifar10(root: str | os.PathLike) -> Dataset:
    """CIFAR-10, "python version": ``data_batch_1``..``data_batch_5`` and ``test_batch``.

    :param root: The ``cifar-10-batches-py`` folder or its parent.
    :return: ``Dataset`` with x float32 ``(N, 3, 32, 32)`` in ``[0, 1]`` (50,000 train / 10,000 test).
    """
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = [_load_cifar_batch(p, "labels", 10) for p in _cifar_files(root, "cifar-10-batches-py", names, "CIFAR-10")]
    x_tr, y_tr = (np.concatenate(a) for a in zip(*batches[:5]))
    return Dataset("cifar10", x_tr, y_tr, *batches[5], classes=CIFAR10_CLASSES)


def load_cifar100(root: str | os.PathLike, *, label_mode: str = "fine") -> Dataset:
    """CIFAR-100, "python version": ``train`` and ``test``.

    :param root: The ``cifar-100-python`` folder or its parent.
    :param label_mode: ``"fine"`` (100 classes, key ``fine_labels``) or ``"coarse"`` (20 superclasses).
    :return: ``Dataset`` with x float32 ``(N, 3, 32, 32)`` in ``[0, 1]``.
    """
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"label_mode must be 'fine' or 'coarse', got {label_mode!r}")
    classes = CIFAR100_FINE_CLASSES if label_mode == "fine" else CIFAR100_COARSE_CLASSES
    paths = _cifar_files(root, "cifar-100-python", ["train", "test"], "CIFAR-100")
    (x_tr, y_tr), (x_te, y_te) = (_load_cifar_batch(p, f"{label_mode}_labels", len(classes)) for p in paths)
    return Dataset("cifar100", x_tr, y_tr, x_te, y_te, classes)


def _load_npy(path: Path) -> np.ndarray:
    try:  # memory-mapped: only the requested severity block is read
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise ValueError(f"{path}: not a plain numeric .npy array; object/pickled arrays are refused ({e})") from e


def load_cifar10c(
    root: str | os.PathLike, corruption: str, severity: int, *, nb_classes: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """One corruption at one severity of CIFAR-10-C: a test-only set, hence a plain ``(x, y)`` pair, not a Dataset.

    ``root/<corruption>.npy`` holds uint8 ``(5n, 32, 32, 3)`` (n = 10,000 in the real files), severity ``k`` in rows
    ``(k-1)*n : k*n``; ``root/labels.npy`` holds ``5n`` (or ``n``) labels.  Read with ``allow_pickle=False``.
    Caches in the same layout made by :func:`art_adp.corruptions.write_corrupted` from other data (any ``H×W``,
    1 or 3 channels: ``(5n, H, W, C)``) are read the same way.

    :param root: The ``CIFAR-10-C`` folder (or a cache in its layout).
    :param corruption: One of :data:`CIFAR10C_CORRUPTIONS`, e.g. ``"gaussian_noise"``.
    :param severity: 1 (mildest) .. 5.
    :param nb_classes: Labels must lie in ``[0, nb_classes)`` (10 for CIFAR-10-C).
    :return: ``(x, y)``: x float32 ``(n, C, H, W)`` in ``[0, 1]`` (``(n, 3, 32, 32)`` for CIFAR-10-C), y int64 ``(n,)``.
    """
    if corruption not in CIFAR10C_CORRUPTIONS:
        raise ValueError(f"unknown CIFAR-10-C corruption {corruption!r}; valid: {', '.join(CIFAR10C_CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 1 <= severity <= 5:
        raise ValueError(f"severity must be an integer in 1, 2, 3, 4, 5, got {severity!r}")
    folder = Path(root).expanduser()
    names = [f"{corruption}.npy", "labels.npy"]
    if not all((folder / n).is_file() for n in names):
        raise _missing(folder, names, "CIFAR-10-C", "https://zenodo.org/record/2535967")
    x, y = (_load_npy(folder / n) for n in names)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[3] not in (1, 3) or len(x) % 5 or not len(x):
        raise ValueError(
            f"{folder / names[0]}: expected uint8 (5n, 32, 32, 3), found {x.dtype} {x.shape} "
            f"(a cache of other data: uint8 (5n, H, W, C) with C = 1 or 3)"
        )
    n = len(x) // 5
    if y.ndim != 1 or len(y) not in (n, 5 * n) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{folder / names[1]}: expected {5 * n} (or {n}) integer labels, found {y.dtype} {y.shape}")
    rows = slice((severity - 1) * n, severity * n)
    x = np.ascontiguousarray(x[rows].transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
    return x, _check_labels(np.array(y[rows] if len(y) == 5 * n else y), nb_classes, folder / names[1])


def load_dataset(name: str, root: str | os.PathLike | None = None, **options) -> Dataset:
    """Load a data set by name (the ``--data-root`` of the CLI is ``root``).

    :param name: One of :data:`DATASETS`: ``digits``, ``mnist``, ``fashion-mnist``, ``cifar10``, ``cifar100``.
    :param root: Folder with the data files; unused (may be ``None``) for ``digits``.
    :param options: Passed to the loader, e.g. ``seed=1`` (digits) or ``label_mode="coarse"`` (cifar100).
    :return: ``Dataset``.
    """
    loaders: dict[str, Callable[..., Dataset]] = {
        "mnist": load_mnist,
        "fashion-mnist": load_fashion_mnist,
        "cifar10": load_cifar10,
        "cifar100": load_cifar100,
    }
    if name == "digits":
        return load_digits(**options)
    if name not in loaders:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    if root is None:
        raise ValueError(
            f"dataset {name!r} is read from local files: pass --data-root / root (the folder "
            f"holding them); {_NO_DOWNLOAD}"
        )
    return loaders[name](root, **options)
