"""prepare_cifar10: the official archive (as a tar.gz or extracted) and a PNG copy in class folders give the same
batches, byte for byte; the test split follows a list of official names; every batch carries ``filenames``."""

import hashlib
import pickle
import tarfile

import numpy as np
import pytest
from PIL import Image

from art_adp import data
from art_adp.apps import cli
from art_adp.data import CIFAR10_CLASSES, UnsafePickleError, cifar10_development, load_cifar10, prepare_cifar10

FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]


def _images(seed=0, n_train=3, n_test=2):
    """A tiny CIFAR-10: per class n_train training and n_test test images with official-looking names."""
    rng = np.random.default_rng(seed)
    split = {}
    for name, n in (("train", n_train), ("test", n_test)):
        rows = [(f"{c[:4]}_s_{k:06d}.png", label) for label, c in enumerate(CIFAR10_CLASSES) for k in range(n)]
        split[name] = [(file, label, rng.integers(0, 256, 3072, dtype=np.uint8)) for file, label in rows]
    return split


def _official(folder, split, seed=1):
    """The official layout: the rows in another order, five training batches and a test batch, protocol-2 pickles."""
    rng = np.random.default_rng(seed)
    train, test = ([split[s][i] for i in rng.permutation(len(split[s]))] for s in ("train", "test"))
    parts = [train[i::5] for i in range(5)] + [test]
    for name, rows in zip(FILES, parts):
        batch = {b"batch_label": name.encode(), b"labels": [r[1] for r in rows],
                 b"data": np.stack([r[2] for r in rows]), b"filenames": [r[0].encode() for r in rows]}  # fmt: skip
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def _pngs(folder, split):
    for name, rows in split.items():
        for file, label, data in rows:
            where = folder / name / CIFAR10_CLASSES[label]
            where.mkdir(parents=True, exist_ok=True)
            Image.fromarray(data.reshape(3, 32, 32).transpose(1, 2, 0)).save(where / file)


@pytest.fixture(name="sources")
def _sources(tmp_path):
    split = _images()
    extracted = tmp_path / "official" / "cifar-10-batches-py"
    extracted.mkdir(parents=True)
    _official(extracted, split)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(extracted, arcname="cifar-10-batches-py")
    _pngs(tmp_path / "png", split)
    return split, {"archive": archive, "extracted": extracted, "parent": extracted.parent, "png": tmp_path / "png"}


def test_both_layouts_give_the_same_batches_and_the_named_test_images(tmp_path, sources):
    split, paths = sources
    names = [split["test"][i][0] for i in (13, 0, 7, 19, 4)]  # a list of official names, in its order
    written = {k: prepare_cifar10(p, tmp_path / "out" / k, test_names=names) for k, p in paths.items()}
    files = {k: {f: (folder / f).read_bytes() for f in FILES} for k, folder in written.items()}
    assert all(files[k] == files["png"] for k in files)  # byte for byte

    data = load_cifar10(written["archive"])
    by_name = {file: (label, pixels) for rows in split.values() for file, label, pixels in rows}
    assert data.y_test.tolist() == [by_name[n][0] for n in names]
    expected = np.stack([by_name[n][1] for n in names]).reshape(-1, 3, 32, 32) / np.float32(255)
    np.testing.assert_array_equal(data.x_test, expected)
    test_batch = pickle.loads(files["png"]["test_batch"], encoding="bytes")
    assert test_batch[b"filenames"] == [n.encode() for n in names]

    # training: every image once, sorted by <class>/<name>, then numpy's default_rng(0) permutation, five batches
    ordered = sorted(split["train"], key=lambda r: f"{CIFAR10_CLASSES[r[1]]}/{r[0]}")
    order = [ordered[i] for i in np.random.default_rng(0).permutation(len(ordered))]
    batches = [pickle.loads(files["png"][f], encoding="bytes") for f in FILES[:5]]
    assert [n.decode() for b in batches for n in b[b"filenames"]] == [r[0] for r in order]
    assert [len(b[b"labels"]) for b in batches] == [6] * 5 and data.y_train.tolist() == [r[1] for r in order]
    np.testing.assert_array_equal(np.concatenate([b[b"data"] for b in batches]), np.stack([r[2] for r in order]))


def test_the_command(tmp_path, sources, capsys, monkeypatch):
    split, paths = sources
    assert cli.main(["prepare-cifar10", str(paths["png"]), "--out", str(tmp_path / "out")]) == 2  # not the tiny set
    assert "of the 5000 test images named are not in its test set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["prepare-cifar10", str(paths["png"])])  # --out is required
    assert "--out" in capsys.readouterr().err
    (tmp_path / "split.txt").write_text("".join(f"{r[0]}\n" for r in split["test"][::3]))
    monkeypatch.setattr(data, "CIFAR10_DEVELOPMENT", tmp_path / "split.txt")  # a tiny development split
    assert cli.main(["prepare-cifar10", str(paths["archive"]), "--out", str(tmp_path / "out")]) == 0
    folder = tmp_path / "out" / "cifar-10-batches-py"
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"{hashlib.sha256((folder / f).read_bytes()).hexdigest()}  {folder / f}" for f in FILES]
    assert pickle.loads((folder / "test_batch").read_bytes(), encoding="bytes")[b"batch_label"] == (
        b"testing batch 1 of 1 (development half)")  # fmt: skip


def test_the_committed_development_split():
    names = cifar10_development()
    assert len(names) == len(set(names)) == 5000 and all(n.endswith(".png") for n in names)
    assert names[:2] == ("trucking_rig_s_000716.png", "tabby_cat_s_002342.png")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os  # pylint: disable=import-outside-toplevel

        return (os.system, (f"touch {self.marker}",))


def test_refusals(tmp_path, sources):
    split, paths = sources
    first = split["test"][0][0]
    with pytest.raises(ValueError, match=r"png: 2 of the 3 test images named are not in its test set, e.g. x.png, y.p"):
        prepare_cifar10(paths["png"], tmp_path / "o", test_names=[first, "x.png", "y.png"])
    with pytest.raises(ValueError, match="test_names: a test image's name appears twice"):
        prepare_cifar10(paths["png"], tmp_path / "o", test_names=[first, first])
    with pytest.raises(ValueError, match=r"\d+ of the 5000 test images named are not in its test set"):
        prepare_cifar10(paths["archive"], tmp_path / "o")  # the default: the development split
    with pytest.raises(ValueError, match="the source's own batches"):
        prepare_cifar10(paths["parent"], paths["parent"], test_names=[])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        prepare_cifar10(tmp_path / "nothing", tmp_path / "o")
    (tmp_path / "not.tar.gz").write_bytes(b"no tar")
    with pytest.raises(ValueError, match="not a readable tar archive"):
        prepare_cifar10(tmp_path / "not.tar.gz", tmp_path / "o")
    batch = pickle.loads((paths["extracted"] / "test_batch").read_bytes(), encoding="bytes")
    del batch[b"filenames"]
    (paths["extracted"] / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(ValueError, match="test_batch: no 'filenames' field of 20 names"):
        prepare_cifar10(paths["extracted"], tmp_path / "o", test_names=[])
    marker = tmp_path / "pwned"  # a tampered batch inside an archive: refused, never run
    (paths["extracted"] / "test_batch").write_bytes(pickle.dumps({b"data": _Evil(marker)}, protocol=2))
    with tarfile.open(paths["archive"], "w:gz") as tar:
        tar.add(paths["extracted"], arcname="cifar-10-batches-py")
    with pytest.raises(UnsafePickleError, match=r'tar.gz:cifar-10-batches-py/test_batch: contains a disallowed object'):
        prepare_cifar10(paths["archive"], tmp_path / "o", test_names=[])
    assert not marker.exists()
