"""CIFAR-10-C's own constants (``constants="cifar10-c"``): each corruption against a direct computation with
make_cifar_c.py's constant and unlike the ImageNet-C one, seeded, on 32×32 RGB only, recorded in the cache's meta;
and CIFAR-10-C rows selected by official file name, not by position (the real files are in the official test order,
a prepared split is not)."""

import json
import pickle
import tarfile
from io import BytesIO

import numpy as np
import pytest
import skimage as sk
from PIL import Image
from scipy.ndimage import zoom

from art_adp.corruptions import CONSTANTS, CORRUPTIONS, corrupt_images, write_corrupted
from art_adp.data import UnsafePickleError, cifar10_test_order, load_cifar10c


def _images(n=4, seed=0):
    """Smooth random images with a little texture: structure for every corruption, ``n×3×32×32`` in [0, 1]."""
    rng = np.random.default_rng(seed)
    x = zoom(rng.uniform(0.1, 0.9, (n, 3, 4, 4)), (1, 1, 8, 8), order=1)
    return np.clip(x + rng.normal(0, 0.02, x.shape), 0, 1)


def _uint8(x):
    return np.rint(x * 255).astype(np.uint8).transpose(0, 2, 3, 1)


def test_gaussian_noise_has_cifar_sigma_not_imagenet_sigma():
    grey = np.full((2, 3, 32, 32), 128 / 255)
    std = {c: (corrupt_images(grey, "gaussian_noise", 1, constants=c).astype(float) - 128).std() for c in CONSTANTS}
    assert std["cifar10-c"] == pytest.approx(0.04 * 255, rel=0.06)  # make_cifar_c.py's severity 1
    assert std["imagenet-c"] == pytest.approx(0.08 * 255, rel=0.06)  # imagecorruptions' (ImageNet-C) severity 1


def test_contrast_brightness_pixelate_jpeg_match_a_direct_computation_with_cifars_constants():
    x = _images(2)
    clean = _uint8(x)

    def ours(name, s):
        out = corrupt_images(x, name, s, constants="cifar10-c")
        assert not np.array_equal(out, corrupt_images(x, name, s)), f"{name}: the ImageNet-C constant gave the same"
        return out

    u = clean / 255.0
    mean = u.mean(axis=(1, 2), keepdims=True)
    np.testing.assert_array_equal(ours("contrast", 5), np.uint8(np.clip((u - mean) * 0.15 + mean, 0, 1) * 255))
    for i, img in enumerate(clean):
        hsv = sk.color.rgb2hsv(img / 255.0)
        hsv[..., 2] = np.clip(hsv[..., 2] + 0.3, 0, 1)
        np.testing.assert_array_equal(ours("brightness", 5)[i], np.uint8(np.clip(sk.color.hsv2rgb(hsv), 0, 1) * 255))
        small = Image.fromarray(img).resize((20, 20), Image.BOX)  # int(32 * 0.65)
        np.testing.assert_array_equal(ours("pixelate", 5)[i], np.asarray(small.resize((32, 32), Image.BOX)))
        buf = BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=80)
        np.testing.assert_array_equal(ours("jpeg_compression", 1)[i], np.asarray(Image.open(buf)))


def test_same_seed_same_output_and_the_callers_numpy_state_is_kept():
    x = _images(2)
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    for name in ("gaussian_noise", "impulse_noise", "glass_blur", "frost", "snow"):
        a = corrupt_images(x, name, 3, seed=1, constants="cifar10-c")
        np.testing.assert_array_equal(a, corrupt_images(x, name, 3, seed=1, constants="cifar10-c"))
        assert not np.array_equal(a, corrupt_images(x, name, 3, seed=2, constants="cifar10-c")), name
    np.testing.assert_array_equal(np.random.get_state()[1], before)


# elastic_transform: make_cifar_c.py's severity 1 is the largest affine jitter with no elastic field, so its pixel
# distance falls with the severity.
def test_every_corruption_runs_at_every_severity_and_severity_5_distorts_more_than_1():
    x = _images(4)
    clean = _uint8(x).astype(float)
    for name in CORRUPTIONS:
        dist = []
        for s in range(1, 6):
            out = corrupt_images(x, name, s, constants="cifar10-c")
            assert out.dtype == np.uint8 and out.shape == (4, 32, 32, 3), name
            dist.append(np.abs(out - clean).mean())
        assert dist[0] > 0, f"{name} left the images unchanged"
        if name != "elastic_transform":
            assert dist[4] > dist[0], f"{name}: {np.round(dist, 2)}"


@pytest.mark.parametrize("shape", [(3, 28, 28), (1, 32, 32), (3, 32, 40)])
def test_cifar_constants_refuse_other_shapes_and_unknown_constants_are_named(shape, tmp_path):
    x = np.full((1, *shape), 0.5)
    shown = "×".join(map(str, shape))
    with pytest.raises(ValueError, match=f'{shown}: use constants="imagenet-c"'):
        corrupt_images(x, "fog", 1, constants="cifar10-c")
    with pytest.raises(ValueError, match=f'{shown}: use constants="imagenet-c"'):
        write_corrupted(tmp_path, x, [0], constants="cifar10-c", progress=False)
    with pytest.raises(ValueError, match="unknown constants 'cifar-c'; valid: 'imagenet-c', 'cifar10-c'"):
        corrupt_images(x, "fog", 1, constants="cifar-c")


def test_the_cache_records_its_constants_and_refuses_the_others(tmp_path):
    x, y = _images(2), np.array([3, 5])
    kw = {"corruptions": ["contrast"], "progress": False}
    write_corrupted(tmp_path / "c", x, y, constants="cifar10-c", **kw)
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["constants"] == "cifar10-c" and meta["library"].startswith("art_adp.corruptions_cifar10c")
    np.testing.assert_array_equal(
        np.load(tmp_path / "c" / "contrast.npy")[4:6], corrupt_images(x, "contrast", 3, constants="cifar10-c")
    )
    with pytest.raises(ValueError, match="other images or settings"):
        write_corrupted(tmp_path / "c", x, y, **kw)
    write_corrupted(tmp_path / "i", x, y, **kw)  # a cache from before the choice: no "constants", the package's
    meta = json.loads((tmp_path / "i" / "meta.json").read_text())
    assert meta.pop("constants") == "imagenet-c"
    (tmp_path / "i" / "meta.json").write_text(json.dumps(meta))
    write_corrupted(tmp_path / "i", x, y, **kw)
    with pytest.raises(ValueError, match="other images or settings"):
        write_corrupted(tmp_path / "i", x, y, constants="cifar10-c", **kw)


# ---- CIFAR-10-C rows by official file name ----

OFFICIAL = ("f_s_000004.png", "b_s_000001.png", "e_s_000003.png", "a_s_000000.png", "d_s_000002.png", "c_s_00005.png")
LABELS = np.array([4, 1, 3, 0, 2, 5])  # of OFFICIAL
DEVELOPMENT = ("d_s_000002.png", "a_s_000000.png", "c_s_00005.png", "b_s_000001.png")  # a shuffled subset


def _fake_cifar10c(root):
    """A CIFAR-10-C folder whose corruption is the identity: 6 distinct images in the official order, 5 times."""
    clean = np.stack([np.full((32, 32, 3), 40 * i + 3, np.uint8) for i in range(len(OFFICIAL))])
    clean[:, 0, 0, 0] = np.arange(len(OFFICIAL))  # distinct in every channel sum too
    root.mkdir(exist_ok=True)
    np.save(root / "fog.npy", np.concatenate([clean] * 5))
    np.save(root / "labels.npy", np.tile(LABELS.astype(np.uint8), 5))
    return {name: img for name, img in zip(OFFICIAL, clean)}


@pytest.mark.parametrize("severity", [1, 4])
def test_rows_are_selected_by_official_name_not_position(tmp_path, severity):
    by_name = _fake_cifar10c(tmp_path)
    want = np.stack([by_name[n] for n in DEVELOPMENT]).transpose(0, 3, 1, 2) / 255.0
    x, y = load_cifar10c(tmp_path, "fog", severity, names=DEVELOPMENT, order=OFFICIAL)
    np.testing.assert_array_equal(x, want.astype(np.float32))
    assert list(y) == [int(LABELS[OFFICIAL.index(n)]) for n in DEVELOPMENT]
    first_rows = load_cifar10c(tmp_path, "fog", severity)[0][: len(DEVELOPMENT)]
    assert not np.array_equal(first_rows, x)  # the position-based read takes other images
    (tmp_path / "filenames.txt").write_text("\n".join(OFFICIAL) + "\n")
    np.testing.assert_array_equal(load_cifar10c(tmp_path, "fog", severity, names=DEVELOPMENT)[0], x)


def test_selection_by_name_errors_say_what_is_wrong(tmp_path):
    _fake_cifar10c(tmp_path)
    with pytest.raises(ValueError, match=r"1 of the 2 images named are not in the order given, e.g. nope\.png"):
        load_cifar10c(tmp_path, "fog", 1, names=["a_s_000000.png", "nope.png"], order=OFFICIAL)
    with pytest.raises(ValueError, match="order of its images is unknown.*official CIFAR-10 archive"):
        load_cifar10c(tmp_path, "fog", 1, names=DEVELOPMENT)
    with pytest.raises(ValueError, match="5 names .5 distinct. for the 6 images"):
        load_cifar10c(tmp_path, "fog", 1, names=DEVELOPMENT, order=OFFICIAL[:5])


def test_our_cache_is_selectable_by_name_like_the_real_files(tmp_path):
    x, y = _images(3), np.array([2, 0, 1])
    names = ["p.png", "q.png", "r.png"]
    write_corrupted(tmp_path, x, y, corruptions=["contrast"], names=names, progress=False)
    assert (tmp_path / "filenames.txt").read_text().split() == names
    got, labels = load_cifar10c(tmp_path, "contrast", 2, names=["r.png", "p.png"])
    full = load_cifar10c(tmp_path, "contrast", 2)[0]
    np.testing.assert_array_equal(got, full[[2, 0]])
    assert list(labels) == [1, 2]
    write_corrupted(tmp_path, x, y, corruptions=["contrast"], progress=False)  # no names: the cache is the same one
    with pytest.raises(ValueError, match="other images or settings"):
        write_corrupted(tmp_path, x, y, corruptions=["contrast"], names=["p.png", "r.png", "q.png"], progress=False)
    with pytest.raises(ValueError, match="names must be distinct"):
        write_corrupted(tmp_path, x, y, corruptions=["contrast"], names=["p", "p", "q"], progress=False)


def _test_batch(folder, names):
    """An official-format ``test_batch`` (protocol-2 pickle, bytes keys) with ``names`` in that order."""
    folder.mkdir(parents=True)
    data = np.arange(len(names) * 3072, dtype=np.int64).astype(np.uint8).reshape(len(names), 3072)
    batch = {b"batch_label": b"testing batch 1 of 1", b"labels": [0] * len(names), b"data": data,
             b"filenames": [n.encode() for n in names]}  # fmt: skip
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))


def test_cifar10_test_order_reads_the_official_test_batch(tmp_path):
    folder = tmp_path / "official" / "cifar-10-batches-py"
    _test_batch(folder, OFFICIAL)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    for source in (folder, folder.parent, archive):
        assert cifar10_test_order(source) == OFFICIAL
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cifar10_test_order(tmp_path / "missing.tar.gz")
    (folder / "test_batch").write_bytes(pickle.dumps({"data": print}, protocol=2))
    with pytest.raises(UnsafePickleError, match="disallowed"):
        cifar10_test_order(folder)
