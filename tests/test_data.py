"""Tests for art_adp.data: tiny real-format files written to tmp_path; no network, CPU only."""
import gzip
import io
import pickle
import re
import struct

import numpy as np
import pytest

from art_adp import data
from art_adp.data import (CIFAR10C_CORRUPTIONS, Dataset, load_cifar10, load_cifar100, load_cifar10c, load_dataset,
                          load_digits, load_fashion_mnist, load_mnist)

IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


# ----------------------------------------------------------------------------- digits
def test_digits_shapes_range_dtypes():
    ds = load_digits()
    assert isinstance(ds, Dataset) and ds.name == "digits" and ds.nb_classes == 10
    assert len(ds.x_train) + len(ds.x_test) == 1797 and len(ds.x_test) == 360
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert x.dtype == np.float32 and y.dtype == np.int64 and x.shape[1:] == (1, 8, 8) and y.shape == (len(x),)
        assert x.min() >= 0.0 and x.max() <= 1.0
    assert ds.x_train.max() == 1.0 and set(ds.y_test) == set(range(10))


def test_digits_stratified_and_seeded():
    a, b, c = load_digits(seed=0), load_digits(seed=0), load_digits(seed=1)
    p_train = np.bincount(a.y_train, minlength=10) / len(a.y_train)
    p_test = np.bincount(a.y_test, minlength=10) / len(a.y_test)
    assert np.abs(p_train - p_test).max() < 0.01
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_test, c.x_test)
    assert len(load_digits(test_size=0.5).x_test) == 899


def test_digits_pixels_match_sklearn():
    from sklearn.datasets import load_digits as sk_digits

    raw = sk_digits()
    ds = load_digits()
    x_all = np.concatenate([ds.x_train, ds.x_test])[:, 0]
    y_all = np.concatenate([ds.y_train, ds.y_test])
    flat = {r.tobytes(): i for i, r in enumerate((raw.images / 16).astype(np.float32))}
    idx = [flat[img.tobytes()] for img in x_all[:50]]
    np.testing.assert_array_equal(x_all[:50], (raw.images[idx] / 16).astype(np.float32))
    np.testing.assert_array_equal(y_all[:50], raw.target[idx])
    # the whole data set, sorted, is exactly raw/16
    np.testing.assert_array_equal(np.sort(x_all.reshape(len(x_all), -1), axis=0),
                                  np.sort((raw.data / 16).astype(np.float32), axis=0))


# ----------------------------------------------------------------------------- MNIST / Fashion-MNIST
def _idx_images(imgs):
    return struct.pack(">IIII", 2051, len(imgs), 28, 28) + imgs.astype(np.uint8).tobytes()


def _idx_labels(labels):
    return struct.pack(">II", 2049, len(labels)) + np.asarray(labels, np.uint8).tobytes()


def _write_mnist(folder, compress=True, n_train=6, n_test=4, blobs=None):
    rng = np.random.default_rng(0)
    imgs = {"train": rng.integers(0, 256, (n_train, 28, 28)), "t10k": rng.integers(0, 256, (n_test, 28, 28))}
    imgs["train"][0, 0, :3] = [0, 128, 255]
    labels = {"train": np.arange(n_train) % 10, "t10k": (np.arange(n_test) + 3) % 10}
    blobs = blobs or {}
    for split in ("train", "t10k"):
        for kind, blob in (("images-idx3", _idx_images(imgs[split])), ("labels-idx1", _idx_labels(labels[split]))):
            name = f"{split}-{kind}-ubyte"
            blob = blobs.get(name, blob)
            if compress:
                with gzip.open(folder / (name + ".gz"), "wb") as f:
                    f.write(blob)
            else:
                (folder / name).write_bytes(blob)
    return imgs, labels


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("loader,name", [(load_mnist, "mnist"), (load_fashion_mnist, "fashion-mnist")])
def test_mnist_roundtrip(tmp_path, loader, name, compress):
    imgs, labels = _write_mnist(tmp_path, compress=compress)
    ds = loader(tmp_path)
    assert ds.name == name and ds.nb_classes == 10
    assert ds.x_train.shape == (6, 1, 28, 28) and ds.x_test.shape == (4, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    np.testing.assert_array_equal(ds.x_train[:, 0], (imgs["train"].astype(np.float32) / 255))
    np.testing.assert_array_equal(ds.x_test[:, 0], (imgs["t10k"].astype(np.float32) / 255))
    np.testing.assert_array_equal(ds.y_train, labels["train"])
    np.testing.assert_array_equal(ds.y_test, labels["t10k"])
    np.testing.assert_array_equal(ds.x_train[0, 0, 0, :3], np.float32([0, 128 / 255, 1]))
    assert (ds.classes[0] == "T-shirt/top") == (name == "fashion-mnist")


def test_mnist_wrong_magic(tmp_path):
    bad = struct.pack(">IIII", 2049, 6, 28, 28) + bytes(6 * 784)
    _write_mnist(tmp_path, blobs={"train-images-idx3-ubyte": bad})
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz: bad magic number 0x00000801, "
                                         r"expected 0x00000803; not an idx file of this kind"):
        load_mnist(tmp_path)


def test_mnist_truncated(tmp_path):
    full = struct.pack(">II", 2049, 4) + bytes([1, 2, 3, 4])
    _write_mnist(tmp_path, compress=False, blobs={"t10k-labels-idx1-ubyte": full[:-1]})
    with pytest.raises(ValueError, match=re.escape("t10k-labels-idx1-ubyte: byte length 11 does not match dims (4,) "
                                                   "(expected 12); file truncated or corrupt")):
        load_mnist(tmp_path)


def test_mnist_truncated_gzip_stream(tmp_path):
    _write_mnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz: not a readable idx file"):
        load_mnist(tmp_path)


def test_mnist_count_mismatch(tmp_path):
    _write_mnist(tmp_path, blobs={"train-labels-idx1-ubyte": _idx_labels([1, 2, 3])})
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz has 6 images but .*"
                                         r"train-labels-idx1-ubyte\.gz has 3 labels"):
        load_fashion_mnist(tmp_path)


def test_mnist_bad_label_value(tmp_path):
    _write_mnist(tmp_path, blobs={"t10k-labels-idx1-ubyte": _idx_labels([0, 1, 2, 10])})
    with pytest.raises(ValueError, match=re.escape("labels must lie in [0, 9], found [0, 10]")):
        load_mnist(tmp_path)


def test_mnist_missing_files(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    expected = ", ".join(f"{n}.gz (or {n})" for n in IDX)
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"mnist files not found in {tmp_path}: expected {expected}. Get them from http://yann.lecun.com/exdb/mnist/"
            " -- download them yourself; this package never downloads.")):
        load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="https://github.com/zalandoresearch/fashion-mnist"):
        load_fashion_mnist(tmp_path / "nowhere")


# ----------------------------------------------------------------------------- CIFAR-10 / CIFAR-100
def _cifar_batch(path, n, seed, label_keys=(b"labels",), nb=10):
    rng = np.random.default_rng(seed)
    d = {b"batch_label": b"batch", b"data": rng.integers(0, 256, (n, 3072)).astype(np.uint8),
         b"filenames": [b"f%d.png" % i for i in range(n)]}
    for k in label_keys:
        d[k] = [int(v) for v in rng.integers(0, nb, n)]
    with open(path, "wb") as f:
        pickle.dump(d, f, protocol=2)
    return d


def _write_cifar10(folder, n=3):
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    return {name: _cifar_batch(folder / name, n, i) for i, name in enumerate(names)}


@pytest.mark.parametrize("use_parent", [True, False])
def test_cifar10_layout(tmp_path, use_parent):
    batches = _write_cifar10(tmp_path / "cifar-10-batches-py")
    ds = load_cifar10(tmp_path if use_parent else tmp_path / "cifar-10-batches-py")
    assert ds.name == "cifar10" and ds.classes[0] == "airplane" and ds.nb_classes == 10
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    first = batches["data_batch_1"][b"data"]
    np.testing.assert_array_equal(ds.x_train[0, 0], first[0, :1024].reshape(32, 32) / np.float32(255))  # red
    np.testing.assert_array_equal(ds.x_train[0, 2], first[0, 2048:].reshape(32, 32) / np.float32(255))  # blue
    np.testing.assert_array_equal(ds.x_train[3, 1], batches["data_batch_2"][b"data"][0, 1024:2048].reshape(32, 32)
                                  / np.float32(255))
    np.testing.assert_array_equal(ds.y_train, sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), []))
    np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])
    assert 0 <= ds.x_train.min() and ds.x_train.max() <= 1


def test_cifar10_str_keys_and_protocol3(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    d = {"data": np.full((2, 3072), 255, np.uint8), "labels": np.array([1, 9])}
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(d, f, protocol=3)
    ds = load_cifar10(tmp_path)
    assert ds.x_test.shape == (2, 3, 32, 32) and np.all(ds.x_test == 1) and list(ds.y_test) == [1, 9]


def test_cifar100_fine_and_coarse(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    keys = (b"fine_labels", b"coarse_labels")
    tr = _cifar_batch(folder / "train", 4, 0, keys, nb=20)
    te = _cifar_batch(folder / "test", 2, 1, keys, nb=20)
    fine = load_cifar100(tmp_path)
    assert fine.nb_classes == 100 and len(set(fine.classes)) == 100 and fine.classes[:2] == ("apple", "aquarium_fish")
    assert fine.classes[-1] == "worm"
    np.testing.assert_array_equal(fine.y_train, tr[b"fine_labels"])
    np.testing.assert_array_equal(fine.x_test[1, 0], te[b"data"][1, :1024].reshape(32, 32) / np.float32(255))
    coarse = load_cifar100(folder, label_mode="coarse")
    assert coarse.nb_classes == 20 and coarse.classes[-1] == "vehicles_2"
    np.testing.assert_array_equal(coarse.y_test, te[b"coarse_labels"])
    with pytest.raises(ValueError, match="label_mode must be 'fine' or 'coarse', got 'medium'"):
        load_cifar100(tmp_path, label_mode="medium")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


class _EvilSystem:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("evil,qualname", [(_Evil, "io.open"), (_EvilSystem, r"(posix|nt|os)\.system")])
def test_cifar_malicious_pickle_refused(tmp_path, evil, qualname):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    marker = tmp_path / "pwned"
    with open(folder / "data_batch_3", "wb") as f:
        pickle.dump({b"data": evil(str(marker)), b"labels": [0]}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=rf'data_batch_3: contains a disallowed object "{qualname}"; '
                                                     r"refusing to unpickle it: this is not a genuine CIFAR batch"):
        load_cifar10(tmp_path)
    with pytest.raises(ValueError, match="not a genuine CIFAR batch"):
        load_cifar10(tmp_path)
    assert not marker.exists()


def test_cifar_codecs_only_latin1(tmp_path):
    import codecs

    class _Codec:
        def __reduce__(self):
            return (codecs.encode, ("x", "rot13"))

    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": _Codec()}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=r"test_batch: \"_codecs\.encode\" with encoding 'rot13': "
                                                     r"not a genuine CIFAR batch"):
        load_cifar10(tmp_path)


def test_cifar_bad_contents(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}, f, protocol=2)
    with pytest.raises(ValueError, match=re.escape("data_batch_2: 'data' must be uint8 of shape (N, 3072), "
                                                   "found uint8 (2, 3000)")):
        load_cifar10(tmp_path)
    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, f, protocol=2)
    with pytest.raises(ValueError, match=re.escape("data_batch_2: 2 images but 'labels' has shape (1,)")):
        load_cifar10(tmp_path)
    (folder / "data_batch_2").write_bytes(b"\x80\x02}q\x00")  # truncated pickle
    with pytest.raises(ValueError, match="data_batch_2: not a readable CIFAR batch"):
        load_cifar10(tmp_path)


def test_cifar_missing_files(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    (folder / "data_batch_5").unlink()
    expected = ", ".join(f"cifar-10-batches-py/{n}" for n in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"])
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"CIFAR-10 files not found in {folder}: expected {expected}. Get them from "
            "https://www.cs.toronto.edu/~kriz/cifar.html -- download them yourself; this package never downloads.")):
        load_cifar10(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"CIFAR-100 files not found in .*cifar-100-python/train, "
                                                r"cifar-100-python/test"):
        load_cifar100(tmp_path)


# ----------------------------------------------------------------------------- CIFAR-10-C
def _write_c(folder, n=3, corruption="fog", labels_rows=None):
    x = np.arange(5 * n * 32 * 32 * 3, dtype=np.int64).reshape(5 * n, 32, 32, 3) % 251
    x = x.astype(np.uint8)
    x[:, 0, 0, 0] = np.arange(5 * n)  # row id
    y = np.arange(labels_rows or 5 * n) % 10
    np.save(folder / f"{corruption}.npy", x)
    np.save(folder / "labels.npy", y)
    return x, y


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_cifar10c_severity_slicing(tmp_path, severity):
    x_raw, y_raw = _write_c(tmp_path)
    x, y = load_cifar10c(tmp_path, "fog", severity)
    rows = slice((severity - 1) * 3, severity * 3)
    assert x.shape == (3, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x, x_raw[rows].transpose(0, 3, 1, 2).astype(np.float32) / 255)
    np.testing.assert_array_equal(y, y_raw[rows])
    assert list(x[:, 0, 0, 0] * 255) == list(range((severity - 1) * 3, severity * 3))


def test_cifar10c_labels_one_block(tmp_path):
    _write_c(tmp_path, corruption="saturate", labels_rows=3)
    assert list(load_cifar10c(tmp_path, "saturate", 4)[1]) == [0, 1, 2]


def test_cifar10c_bad_arguments(tmp_path):
    _write_c(tmp_path)
    assert len(CIFAR10C_CORRUPTIONS) == 19
    for bad in (0, 6, 2.0, True):
        with pytest.raises(ValueError, match=re.escape(f"severity must be an integer in 1, 2, 3, 4, 5, got {bad!r}")):
            load_cifar10c(tmp_path, "fog", bad)
    with pytest.raises(ValueError, match=r"unknown CIFAR-10-C corruption 'rain'; valid: gaussian_noise, shot_noise, "
                                         r".*, spatter, saturate$"):
        load_cifar10c(tmp_path, "rain", 1)


def test_cifar10c_refuses_pickled_npy(tmp_path):
    _write_c(tmp_path)
    np.save(tmp_path / "snow.npy", np.array([{"a": 1}] * 5, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"snow\.npy: not a plain numeric \.npy array; object/pickled arrays "
                                         r"are refused"):
        load_cifar10c(tmp_path, "snow", 1)
    with open(tmp_path / "frost.npy", "wb") as f:  # a raw pickle renamed to .npy
        pickle.dump(np.zeros((5, 32, 32, 3), np.uint8), f)
    with pytest.raises(ValueError, match=r"frost\.npy: not a plain numeric \.npy array"):
        load_cifar10c(tmp_path, "frost", 1)


def test_cifar10c_bad_shapes_and_missing(tmp_path):
    np.save(tmp_path / "fog.npy", np.zeros((7, 32, 32, 3), np.uint8))
    np.save(tmp_path / "labels.npy", np.zeros(7, np.int64))
    msg = "fog.npy: expected uint8 (5n, 32, 32, 3), found uint8 (7, 32, 32, 3)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        load_cifar10c(tmp_path, "fog", 1)
    _write_c(tmp_path, labels_rows=4)
    with pytest.raises(ValueError, match=re.escape("labels.npy: expected 15 (or 3) integer labels, found int64 (4,)")):
        load_cifar10c(tmp_path, "fog", 1)
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10-C files not found in .*: expected zoom_blur\.npy, "
                                                r"labels\.npy\. Get them from https://zenodo\.org/record/2535967 -- "
                                                r"download them yourself; this package never downloads\."):
        load_cifar10c(tmp_path, "zoom_blur", 2)


# ----------------------------------------------------------------------------- load_dataset
def test_load_dataset_dispatch(tmp_path):
    ds = load_dataset("digits")
    assert ds.name == "digits" and len(ds.x_test) == 360
    assert not np.array_equal(load_dataset("digits", seed=3).y_test, ds.y_test)
    _write_mnist(tmp_path)
    assert load_dataset("mnist", tmp_path).name == "mnist"
    assert load_dataset("fashion-mnist", str(tmp_path)).name == "fashion-mnist"
    c10 = tmp_path / "c10"
    _write_cifar10(c10 / "cifar-10-batches-py")
    assert load_dataset("cifar10", c10).x_train.shape == (15, 3, 32, 32)


def test_each_data_set_is_one_spec_whose_shape_its_loader_gives(tmp_path):
    """load_dataset reads DATASETS: every entry loads (digits without files) at the image shape its spec states."""
    _write_mnist(tmp_path)
    _write_cifar10(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-100-python").mkdir()
    for split, n in (("train", 4), ("test", 2)):
        _cifar_batch(tmp_path / "cifar-100-python" / split, n, 0, (b"fine_labels", b"coarse_labels"), nb=20)
    assert tuple(data.DATASETS) == ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100")
    for name, spec in data.DATASETS.items():
        ds = load_dataset(name, tmp_path)
        assert ds.name == name and ds.x_train.shape[1:] == ds.x_test.shape[1:] == spec.shape
    assert [data.DATASETS[n].eps for n in ("digits", "mnist", "cifar10")] == [0.175, 0.3, 8 / 255]
    assert (data.DATASETS["digits"].files, data.DATASETS["mnist"].files) == (False, True)


def test_load_dataset_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'svhn'; valid names: digits, mnist, fashion-mnist, "
                                         "cifar10, cifar100$"):
        load_dataset("svhn", tmp_path)
    for name in ("mnist", "fashion-mnist", "cifar10", "cifar100"):
        with pytest.raises(ValueError, match=rf"dataset '{name}' is read from local files: pass --data-root / root"):
            load_dataset(name)
    with pytest.raises(FileNotFoundError, match="CIFAR-100 files not found"):
        load_dataset("cifar100", tmp_path)


def test_dataset_is_frozen():
    ds = load_digits()
    with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
        ds.name = "x"


class _Py2Pickler(pickle._Pickler):
    """Writes bytes/str as Python 2 ``str`` opcodes (BINSTRING), like the genuine CIFAR files (cPickle, Python 2)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj):
        obj = obj.encode("latin1") if isinstance(obj, str) else obj
        self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = dispatch[str] = _save_py2_str


def test_cifar_python2_style_batch(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder)
    d = {"batch_label": "testing batch 1 of 1", "data": np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8),
         "labels": [7, 2], "filenames": ["a.png", "b.png"]}
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(d)
    blob = buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")  # as numpy 1.x wrote it
    assert b"numpy.core.multiarray\n_reconstruct" in blob and b"_codecs" not in blob
    (folder / "test_batch").write_bytes(blob)
    ds = load_cifar10(tmp_path)
    np.testing.assert_array_equal(ds.x_test[1, 2], d["data"][1, 2048:].reshape(32, 32) / np.float32(255))
    assert list(ds.y_test) == [7, 2]


def test_module_never_downloads_nor_plain_unpickles():
    src = open(data.__file__, encoding="utf-8").read()
    for banned in ("urllib", "urlopen", "urlretrieve", "requests", "http.client", "socket", "pickle.load(",
                   "pickle.loads(", "allow_pickle=True"):
        assert banned not in src, banned
