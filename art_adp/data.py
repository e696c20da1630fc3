"""Offline dataset loaders for art-adp: local files only, never downloads, never plain ``pickle.load``.

Images come back as float32 ``(N, C, H, W)`` in ``[0, 1]`` (what an ART ``PyTorchClassifier`` with
``clip_values=(0, 1)`` expects), labels as int64 ``(N,)``.  ``digits`` ships with scikit-learn; the other data
sets must already be on disk (the errors say where to get them): this package never downloads.  Each data set is
one :class:`DatasetSpec` in :data:`DATASETS` (loader, shape, ε, σ grid, the paper's row, its ``levers`` preset).
CIFAR "python version" batches are pickles: :class:`_CifarUnpickler` refuses every global except the numpy
reconstructors a genuine batch holds, so a tampered file cannot run code.  ``.npy`` files: ``allow_pickle=False``.
:func:`prepare_cifar10` writes those batches from the official archive or a PNG copy, the same files from either; the
development split is committed as a list of official test file names (:func:`cifar10_development`); the real CIFAR-10-C
files follow the official test order (:func:`cifar10_test_order`), and :func:`load_cifar10c` selects images by name.
"""

from __future__ import annotations

import gzip
import importlib
import io
import os
import pickle
import struct
import tarfile
from collections.abc import Callable, Sequence
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


def _read_cifar_batch(f, path, label_key: str, nb_classes: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """One batch from the binary file ``f`` (named ``path`` in errors): uint8 ``(N, 3072)`` data, int64 labels and
    the whole batch (str keys)."""
    try:
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
    return data, _check_labels(labels, nb_classes, path), obj


def _load_cifar_batch(path: Path, label_key: str, nb_classes: int) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        data, labels, _ = _read_cifar_batch(f, path, label_key, nb_classes)
    return data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0, labels


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


def test_names(root: str | os.PathLike) -> tuple[str, ...]:
    """The official file names of the CIFAR-10 test images :func:`load_cifar10` reads from ``root``, in its order (the
    ``filenames`` field of its ``test_batch``, which the official archive and :func:`prepare_cifar10` both write).

    :raises ValueError: When the batch holds no names (one written by other means): prepare it with
        ``art-adp prepare-cifar10``.
    """
    (path,) = _cifar_files(root, "cifar-10-batches-py", ["test_batch"], "CIFAR-10")
    with open(path, "rb") as f:
        data, _, obj = _read_cifar_batch(f, path, "labels", 10)
    files = obj.get("filenames")
    if not isinstance(files, list) or len(files) != len(data) or {type(n) for n in files} - {bytes, str}:
        raise ValueError(f"{path}: no 'filenames' field of {len(data)} names, so its images cannot be found by name; "
                         "write the batches with art-adp prepare-cifar10.")  # fmt: skip
    return tuple(n.decode("latin1") if isinstance(n, bytes) else n for n in files)


CIFAR10_DEVELOPMENT = Path(__file__).with_name("cifar10_development.txt")
_CIFAR10_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
_CIFAR10_LAYOUTS = (
    "the official archive cifar-10-python.tar.gz, its cifar-10-batches-py folder (or the folder holding it), or a "
    "folder of PNGs train/<class>/<name>.png and test/<class>/<name>.png"
)


def cifar10_development() -> tuple[str, ...]:
    """The development split of CIFAR-10's test set: the official file names of 5,000 test images (500 a class), in
    the order :func:`prepare_cifar10` writes them (``art_adp/cifar10_development.txt``). Every measurement reads
    these; the other 5,000 test images are kept for independent checks."""
    return tuple(CIFAR10_DEVELOPMENT.read_text(encoding="ascii").split())


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    if f is None:
        raise ValueError(f"{member.name}: not a regular file")
    return f.read()


def _cifar10_official(
    source: Path, batches: Sequence[str] = _CIFAR10_BATCHES
) -> list[tuple[np.ndarray, np.ndarray, list[str]]]:
    """Data, labels and official names of the batches ``batches`` (default: all six) of the official archive or its
    extracted folder."""
    if source.is_file():
        try:
            with tarfile.open(source, "r:*") as tar:  # read in memory: nothing is extracted
                found = {m.name: m for m in tar.getmembers() if m.isfile()}
                names = [f"cifar-10-batches-py/{n}" for n in batches]
                if not all(n in found for n in names):
                    raise ValueError(f"{source}: the archive lacks {', '.join(n for n in names if n not in found)}")
                blobs = [(f"{source}:{n}", _member_bytes(tar, found[n])) for n in names]
        except tarfile.TarError as e:
            raise ValueError(f"{source}: not a readable tar archive ({e}); expected {_CIFAR10_LAYOUTS}") from e
    else:
        blobs = [(p, p.read_bytes()) for p in _cifar_files(source, "cifar-10-batches-py", batches, "CIFAR-10")]
    out = []
    for where, blob in blobs:
        data, labels, obj = _read_cifar_batch(io.BytesIO(blob), where, "labels", 10)
        files = obj.get("filenames")
        if not isinstance(files, list) or len(files) != len(data) or {type(n) for n in files} - {bytes, str}:
            raise ValueError(f"{where}: no 'filenames' field of {len(data)} names; not a batch of the official archive")
        out.append((data, labels, [n.decode("latin1") if isinstance(n, bytes) else n for n in files]))
    return out


def cifar10_test_order(source: str | os.PathLike) -> tuple[str, ...]:
    """The official order of CIFAR-10's test images, as file names: the order of the official ``test_batch``, which
    the real CIFAR-10-C files follow (pass it as ``order=`` to :func:`load_cifar10c`). Only the test batch is read,
    by the restricted unpickler.

    :param source: ``cifar-10-python.tar.gz`` (the official archive) or its extracted ``cifar-10-batches-py`` folder
        (or the folder holding that). A PNG copy has no order: it cannot serve.
    :return: The 10,000 official file names, e.g. ``"domestic_cat_s_000907.png"``, in the official order.
    """
    source = Path(source).expanduser()
    if not source.exists():
        raise FileNotFoundError(
            f"{source} does not exist; expected the official archive cifar-10-python.tar.gz or its cifar-10-batches-py "
            f"folder ({_NO_DOWNLOAD})"
        )
    return tuple(_cifar10_official(source, ("test_batch",))[0][2])


def _cifar10_pngs(folder: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Data, labels and file names of the PNGs ``folder/<class>/<name>.png``."""
    from PIL import Image  # Pillow: a requirement of matplotlib's

    paths = [p for p in folder.glob("*/*.png") if p.is_file()]
    data, labels = np.empty((len(paths), 3072), np.uint8), np.empty(len(paths), np.int64)
    for i, path in enumerate(paths):
        if path.parent.name not in CIFAR10_CLASSES:
            raise ValueError(f"{path}: {path.parent.name!r} is not a CIFAR-10 class ({', '.join(CIFAR10_CLASSES)})")
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"), np.uint8)
        if pixels.shape != (32, 32, 3):
            raise ValueError(f"{path}: a {pixels.shape[1]}x{pixels.shape[0]} image; CIFAR-10's are 32x32")
        data[i] = pixels.transpose(2, 0, 1).reshape(-1)  # the official layout: 1,024 red values, then green, blue
        labels[i] = CIFAR10_CLASSES.index(path.parent.name)
    return data, labels, [p.name for p in paths]


def _by_class_and_name(data: np.ndarray, labels: np.ndarray, names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A split in its one fixed order, whatever the source's: sorted by ``<class>/<file name>`` (the PNG copy's paths
    sort so)."""
    names = np.asarray(names, dtype=str)
    order = sorted(range(len(names)), key=lambda i: f"{CIFAR10_CLASSES[labels[i]]}/{names[i]}")
    return data[order], labels[order], names[order]


def _write_cifar_batch(path: Path, label: str, split: tuple, rows: np.ndarray) -> None:
    """The images ``rows`` of ``split`` as one batch in the official format (a protocol-2 pickle), written whole or
    not at all."""
    data, labels, names = split
    batch = {b"batch_label": label.encode(), b"labels": [int(v) for v in labels[rows]], b"data": data[rows],
             b"filenames": [n.encode() for n in names[rows]]}  # fmt: skip
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as f:
        pickle.dump(batch, f, protocol=2)
    os.replace(part, path)


def prepare_cifar10(
    source: str | os.PathLike, out: str | os.PathLike, *, test_names: Sequence[str] | None = None
) -> Path:
    """
    Write CIFAR-10's "python version" (``cifar-10-batches-py``: ``data_batch_1``..``data_batch_5``, ``test_batch``,
    ``batches.meta``), which :func:`load_cifar10` reads, from the official archive or from a PNG copy: either source
    gives the same files, byte for byte. Batches are read by the restricted unpickler; nothing is downloaded.

    Training: every training image, in one fixed order (the images sorted by ``<class>/<file name>``, then numpy's
    ``default_rng(0).permutation``), in five batches. Test: the images ``test_names`` names, in that order. Labels
    follow the official class order (:data:`CIFAR10_CLASSES`); every batch carries the official ``filenames``.

    :param source: ``cifar-10-python.tar.gz`` (the official archive, as torchvision downloads it), its extracted
        ``cifar-10-batches-py`` folder or the folder holding that, or a folder of PNGs ``train/<class>/<name>.png``
        and ``test/<class>/<name>.png`` keeping the official class folders and file names (as the public copy
        cyizhuo/CIFAR-10-dataset does).
    :param out: Folder to write ``cifar-10-batches-py`` into (created; files there are replaced).
    :param test_names: Official file names of the test images to keep, in order (default:
        :func:`cifar10_development`, the development split).
    :return: The ``cifar-10-batches-py`` folder written.
    """
    source = Path(source).expanduser()
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist; expected {_CIFAR10_LAYOUTS} ({_NO_DOWNLOAD})")
    if (source / "train").is_dir() and (source / "test").is_dir():
        train, test = (_by_class_and_name(*_cifar10_pngs(source / split)) for split in ("train", "test"))
    else:
        batches = _cifar10_official(source)
        train = _by_class_and_name(*(np.concatenate(a) for a in zip(*batches[:5])))
        test = _by_class_and_name(*batches[5])
    folder = Path(out).expanduser() / "cifar-10-batches-py"
    if folder.resolve() in (source.resolve(), (source / "cifar-10-batches-py").resolve()):
        raise ValueError(f"{folder}: the source's own batches; write the prepared ones to another folder")
    development = cifar10_development()
    wanted = development if test_names is None else tuple(test_names)
    row = {n: i for i, n in enumerate(test[2])}
    if len(row) != len(test[2]) or len(set(wanted)) != len(wanted):
        raise ValueError(f"{source if len(row) != len(test[2]) else 'test_names'}: a test image's name appears twice")
    missing = [n for n in wanted if n not in row]
    if missing:
        raise ValueError(f"{source}: {len(missing)} of the {len(wanted)} test images named are not in its test set, "
                         f"e.g. {', '.join(missing[:3])}")  # fmt: skip
    pick = np.array([row[n] for n in wanted], dtype=np.int64)
    shuffle = np.random.default_rng(0).permutation(len(train[0]))
    folder.mkdir(parents=True, exist_ok=True)
    for b, rows in enumerate(np.array_split(shuffle, 5)):
        _write_cifar_batch(folder / f"data_batch_{b + 1}", f"training batch {b + 1} of 5", train, rows)
    label = "testing batch 1 of 1" + (" (development half)" if wanted == development else "")
    _write_cifar_batch(folder / "test_batch", label, test, pick)
    meta = {b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_cases_per_batch": len(shuffle) // 5,
            b"num_vis": 3072}  # fmt: skip
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return folder


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


def _rows_by_name(folder: Path, n: int, names: Sequence[str], order: Sequence[str] | None) -> np.ndarray:
    """The positions of the images ``names`` among the ``n`` images of ``folder``, whose order is ``order`` or else
    ``folder/filenames.txt``."""
    listing = folder / "filenames.txt"
    if order is None and not listing.is_file():
        raise ValueError(
            f"{folder}: images are asked for by name, but the order of its images is unknown (no filenames.txt). "
            "The real CIFAR-10-C files follow CIFAR-10's official test order: give the official CIFAR-10 archive "
            "(cifar-10-python.tar.gz or its cifar-10-batches-py folder), in Python order=cifar10_test_order(archive)."
        )
    where = "the order given" if order is not None else str(listing)
    order = list(order) if order is not None else listing.read_text(encoding="utf-8").splitlines()
    row = {m: i for i, m in enumerate(order)}
    if len(order) != n or len(row) != n:
        raise ValueError(f"{where}: {len(order)} names ({len(row)} distinct) for the {n} images of {folder}")
    names = [names] if isinstance(names, str) else list(names)
    missing = [m for m in names if m not in row]
    if missing:
        raise ValueError(
            f"{len(missing)} of the {len(names)} images named are not in {where}, e.g. {', '.join(missing[:3])}"
        )
    return np.array([row[m] for m in names], dtype=np.int64)


def load_cifar10c(
    root: str | os.PathLike,
    corruption: str,
    severity: int,
    *,
    nb_classes: int = 10,
    names: Sequence[str] | None = None,
    order: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One corruption at one severity of CIFAR-10-C: a test-only set, hence a plain ``(x, y)`` pair, not a Dataset.

    ``root/<corruption>.npy`` holds uint8 ``(5n, 32, 32, 3)`` (n = 10,000 in the real files), severity ``k`` in rows
    ``(k-1)*n : k*n``; ``root/labels.npy`` holds ``5n`` (or ``n``) labels.  Read with ``allow_pickle=False``.
    Caches in the same layout made by :func:`art_adp.corruptions.write_corrupted` from other data (any ``H×W``,
    1 or 3 channels: ``(5n, H, W, C)``) are read the same way.

    By default all ``n`` images of the severity come back in the folder's order. With ``names``, exactly the images
    of those file names, in that order: the real files are in CIFAR-10's official test order, not in the order of
    a prepared split (:func:`cifar10_development`), so their first rows are other images than its first ones.

    :param root: The ``CIFAR-10-C`` folder (or a cache in its layout).
    :param corruption: One of :data:`CIFAR10C_CORRUPTIONS`, e.g. ``"gaussian_noise"``.
    :param severity: 1 (mildest) .. 5.
    :param nb_classes: Labels must lie in ``[0, nb_classes)`` (10 for CIFAR-10-C).
    :param names: Official file names of the images wanted, in the order wanted (default: all, in the folder's
        order); labels are selected alike.
    :param order: The file names of the folder's ``n`` images in its order: for the real CIFAR-10-C files the
        official test order, :func:`cifar10_test_order`. Default: ``root/filenames.txt`` (one name a line, written
        by :func:`~art_adp.corruptions.write_corrupted`), else ``names`` is refused.
    :return: ``(x, y)``: x float32 ``(n, C, H, W)`` in ``[0, 1]`` (``(n, 3, 32, 32)`` for CIFAR-10-C), y int64 ``(n,)``
        (``len(names)`` of each with ``names``).
    """
    if corruption not in CIFAR10C_CORRUPTIONS:
        raise ValueError(f"unknown CIFAR-10-C corruption {corruption!r}; valid: {', '.join(CIFAR10C_CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 1 <= severity <= 5:
        raise ValueError(f"severity must be an integer in 1, 2, 3, 4, 5, got {severity!r}")
    folder = Path(root).expanduser()
    files = [f"{corruption}.npy", "labels.npy"]
    if not all((folder / f).is_file() for f in files):
        raise _missing(folder, files, "CIFAR-10-C", "https://zenodo.org/record/2535967")
    x, y = (_load_npy(folder / f) for f in files)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[3] not in (1, 3) or len(x) % 5 or not len(x):
        raise ValueError(
            f"{folder / files[0]}: expected uint8 (5n, 32, 32, 3), found {x.dtype} {x.shape} "
            f"(a cache of other data: uint8 (5n, H, W, C) with C = 1 or 3)"
        )
    n = len(x) // 5
    if y.ndim != 1 or len(y) not in (n, 5 * n) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{folder / files[1]}: expected {5 * n} (or {n}) integer labels, found {y.dtype} {y.shape}")
    pick = slice(None) if names is None else _rows_by_name(folder, n, names, order)
    labels = np.array(y[(severity - 1) * n : severity * n][pick] if len(y) == 5 * n else y[pick])
    x = x[(severity - 1) * n : severity * n][pick]  # only these rows of the memory map are read
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
    return x, _check_labels(labels, nb_classes, folder / files[1])


@dataclass(frozen=True)
class DatasetSpec:
    """What the package knows of one data set: the one entry of :data:`DATASETS` that :func:`load_dataset`, the
    command line's ``--dataset``, ``evaluate``'s threat model, the ``levers`` presets and the docs' tables read.

    :param load: Its loader: ``load(root, **options)``, or ``load(**options)`` when ``files`` is False; returns a
        :class:`Dataset`.
    :param shape: ``(C, H, W)`` of its images.
    :param eps: The ℓ∞ radius of its threat model (``evaluate``'s default, its ``levers`` preset's).
    :param files: Whether it is read from local files (the loader's ``root``, the command line's ``--data-root``).
    :param sigmas: The σ grid its ``levers`` preset measures.
    :param paper_row: The paper's ADP accuracy on it in % (clean, preprocessor-blind PGD); None: not in the paper.
    :param paper_defence: The paper's defence on it in words, as the docs label its row.
    :param levers: The ``art-adp levers`` preset it is measured with (its classifiers and attack rows: the plan
        ``levers:<name>`` of :data:`art_adp.runs.plans.PLANS`), at this data set's ε, σ grid and shape; None:
        ``levers`` refuses it.
    """

    load: Callable[..., Dataset]
    shape: tuple[int, int, int]
    eps: float
    files: bool = True
    sigmas: tuple[float, ...] = ()
    paper_row: tuple[float, float] | None = None
    paper_defence: str = ""
    levers: str | None = None


_PAPER_NCSNV2 = "NCSNv2, 60,000 training images"
#: Every data set the package knows, by name: adding one is an entry here. The radii: the digits demo's 0.175,
#: MNIST's 0.3 (Madry et al.; the paper's MNIST row), 8/255 elsewhere (the paper's CIFAR-10 protocol, and its
#: Fashion-MNIST row in the appendix, "more datasets").
DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(load_digits, (1, 8, 8), 0.175, files=False),
    "mnist": DatasetSpec(load_mnist, (1, 28, 28), 0.3, sigmas=(0.1, 0.25, 0.5), paper_row=(98.07, 96.41),
                         paper_defence=_PAPER_NCSNV2, levers="mnist"),
    "fashion-mnist": DatasetSpec(load_fashion_mnist, (1, 28, 28), 8 / 255, sigmas=(0.1, 0.25, 0.5),
                                 paper_row=(93.19, 86.62), paper_defence=_PAPER_NCSNV2, levers="fashion-mnist"),
    "cifar10": DatasetSpec(load_cifar10, (3, 32, 32), 8 / 255, sigmas=(0.1, 0.125, 0.25, 0.5),
                           paper_row=(86.14, 80.24), paper_defence="NCSNv2 of 50,000 training images → WRN-28-10",
                           levers="cifar10"),
    "cifar100": DatasetSpec(load_cifar100, (3, 32, 32), 8 / 255),
}  # fmt: skip


def dataset_spec(name: str) -> DatasetSpec:
    """The entry of :data:`DATASETS` called ``name``; an unknown name is refused with the list of known ones."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return DATASETS[name]


def load_dataset(name: str, root: str | os.PathLike | None = None, **options) -> Dataset:
    """Load a data set by name (the ``--data-root`` of the CLI is ``root``) with its loader in :data:`DATASETS`.

    :param name: A key of :data:`DATASETS`: ``digits``, ``mnist``, ``fashion-mnist``, ``cifar10``, ``cifar100``.
    :param root: Folder with the data files; unused (may be ``None``) for a data set without files (``digits``).
    :param options: Passed to the loader, e.g. ``seed=1`` (digits) or ``label_mode="coarse"`` (cifar100).
    :return: ``Dataset``.
    """
    spec = dataset_spec(name)
    if not spec.files:
        return spec.load(**options)
    if root is None:
        raise ValueError(
            f"dataset {name!r} is read from local files: pass --data-root / root (the folder "
            f"holding them); {_NO_DOWNLOAD}"
        )
    return spec.load(root, **options)
