"""Common corruptions: every corruption changes the image within range and shape, severities are ordered, the
CIFAR-10-C-layout cache reads back bit-identical through the CIFAR-10-C loader, and the corruption run resumes."""

import json
import re

import numpy as np
import pytest
import torch

from art_adp.corruptions import CORRUPTIONS, corrupt_images, corruption_step_sizes, load_corrupted, write_corrupted
from art_adp.data import load_cifar10c, load_digits


def _images(c, h, n=3):
    """Hand-made test images: a bright square on a ramp, shifted per image (structure for every corruption)."""
    rows = np.linspace(0.1, 0.5, h)[:, None] * np.ones((1, h))
    out = np.empty((n, c, h, h), np.float32)
    for i in range(n):
        img = rows.copy()
        img[h // 4 + i % 2 : h // 2 + 1 + i % 2, h // 4 : 3 * h // 4] = 0.95
        out[i] = img[None] * np.linspace(1.0, 0.7, c)[:, None, None]
    return out


@pytest.mark.parametrize("shape", [(1, 8), (3, 12), (1, 28)])
def test_each_corruption_changes_the_image_and_keeps_range_and_shape(shape):
    x = _images(*shape)
    ref = np.rint(x * 255).astype(np.uint8).transpose(0, 2, 3, 1)
    for name in CORRUPTIONS:
        out = corrupt_images(x, name, 3)
        assert out.dtype == np.uint8 and out.shape == ref.shape, name
        assert np.abs(out.astype(int) - ref).sum() > 0, f"{name} left the images unchanged"


# glass_blur: severity 3 has 3 shuffling passes, severity 4 two (the package's ImageNet-C constants);
# frost: severity 4 weighs the image less but the frost no more than severity 3 (0.65/0.7 vs 0.7/0.7);
# snow: severity 3 keeps only flakes above 0.9 (severity 2: 0.5), fewer on a small image despite its larger mean.
NOT_MONOTONE = {"glass_blur": (3, 4), "frost": (3, 4), "snow": (2, 3)}


def test_severities_are_ordered_by_distortion():
    x = load_digits().x_test[:24]
    ref = np.rint(x * 255).astype(np.uint8).transpose(0, 2, 3, 1).astype(float)
    for name in CORRUPTIONS:
        dist = [np.abs(corrupt_images(x, name, s) - ref).mean() for s in range(1, 6)]
        steps = [(s, s + 1) for s in range(1, 5) if dist[s] < dist[s - 1]]
        allowed = [NOT_MONOTONE[name]] if name in NOT_MONOTONE else []
        assert set(steps) <= set(allowed), f"{name}: distortion {np.round(dist, 2)} falls at {steps}"
        assert dist[4] > dist[0], name


def test_corruption_is_seeded_and_leaves_numpy_global_state_alone():
    x = _images(1, 8)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = corrupt_images(x, "gaussian_noise", 2, seed=5)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    np.testing.assert_array_equal(a, corrupt_images(x, "gaussian_noise", 2, seed=5))
    assert not np.array_equal(a, corrupt_images(x, "gaussian_noise", 2, seed=6))


def test_cache_reads_back_bit_identical_through_the_cifar10c_loader(tmp_path):
    x, y = _images(1, 8, n=4), np.array([3, 1, 4, 1])
    names = ("gaussian_noise", "contrast", "pixelate")
    write_corrupted(tmp_path, x, y, corruptions=names, seed=7, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{n}.npy" for n in names] + ["labels.npy", "meta.json"]
    )
    for name in names:
        stored = np.load(tmp_path / f"{name}.npy")
        assert stored.shape == (20, 8, 8, 1) and stored.dtype == np.uint8
        for s in range(1, 6):
            expected = corrupt_images(x, name, s, seed=7).transpose(0, 3, 1, 2).astype(np.float32) / 255
            xs, ys = load_cifar10c(tmp_path, name, s)
            assert xs.dtype == np.float32 and xs.shape == (4, 1, 8, 8)
            assert xs.tobytes() == expected.tobytes()
            np.testing.assert_array_equal(ys, y)
            assert load_corrupted(tmp_path, name, s)[0].tobytes() == xs.tobytes()


def test_cache_refuses_other_images_and_bad_input(tmp_path):
    x, y = _images(1, 8, n=2), np.array([0, 1])
    write_corrupted(tmp_path, x, y, corruptions=("contrast",), progress=False)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} holds corruptions of other images or settings")):
        write_corrupted(tmp_path, x[::-1].copy(), y, corruptions=("contrast",), progress=False)
    with pytest.raises(ValueError, match=r"^unknown corruption 'rain'; valid: gaussian_noise, .*jpeg_compression$"):
        corrupt_images(x, "rain", 1)
    with pytest.raises(ValueError, match=re.escape("severity must be an integer in 1, 2, 3, 4, 5, got 0")):
        corrupt_images(x, "fog", 0)
    with pytest.raises(ValueError, match=re.escape("images must be floating point in [0, 1]")):
        corrupt_images(x * 255, "fog", 1)
    with pytest.raises(ValueError, match=re.escape("images must be a non-empty N×C×H×W array with C = 1 or 3")):
        corrupt_images(x[:, 0], "fog", 1)


def test_corruption_step_schedule_is_the_papers():
    steps = corruption_step_sizes()
    assert len(steps) == 10 and steps[0] == pytest.approx(0.08) and steps[-1] == pytest.approx(8e-4)
    np.testing.assert_allclose(np.array(steps[1:]) / steps[:-1], 10 ** (-2 / 9))
    with pytest.raises(ValueError, match=re.escape("need 0 < last <= first, got first=0.001, last=0.08.")):
        corruption_step_sizes(0.001, 0.08)


def test_corruption_run_writes_the_table_and_resumes(tmp_path):
    from art_adp.apps.corruption_table import CorruptionConfig, run_corruptions
    from art_adp.score import NCSNv2

    torch.manual_seed(0)
    data = load_digits()
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    score = NCSNv2(1, 8, ngf=4).eval()
    config = CorruptionConfig(n_examples=2, ensemble_size=1, steps=1, n_calibration=20)
    args = (clf, score, data.x_test, data.y_test, data.x_train)
    lines = []
    out = run_corruptions(tmp_path, *args, config=config, progress=False, device="cpu", log=lines.append)
    records = (tmp_path / "records" / "rank-0.jsonl").read_text().splitlines()
    assert len(records) == 6 * 76  # undefended, σ = 0 / 0.1 / 0.25, detection, manual schedule; clean + 75 sets
    assert set(out["rows"]) == {
        "undefended",
        "ADP σ=0",
        "ADP σ=0.1",
        "ADP σ=0.25",
        "ADP σ=0.25 + detection",
        "ADP σ=0, AugMix's schedule",
    }
    row = out["rows"]["undefended"]
    recs = [json.loads(r) for r in records if json.loads(r)["variant"] == "undefended"]
    fog = [r["correct"] / r["n"] for r in recs if r["corruption"] == "fog"]
    assert row["fog"] == pytest.approx(np.mean(fog))
    assert row["mean"] == pytest.approx(np.mean([row[k] for k in CORRUPTIONS]))
    assert row["mean"] == pytest.approx(np.mean([row[f"severity {s}"] for s in range(1, 6)]))
    assert (tmp_path / "corruptions.png").stat().st_size > 0 and "| undefended |" in (
        tmp_path / "corruptions.md"
    ).read_text()
    lines.clear()
    run_corruptions(tmp_path, *args, config=config, score_dct=score, progress=False, device="cpu", log=lines.append)
    assert any("456 of 532 (variant, corruption, severity) results on disk; 76 to go" in line for line in lines)
    with pytest.raises(ValueError, match=re.escape("variants ['ADP σ=0 + AugMix'] cannot be measured")):
        run_corruptions(tmp_path, *args, config=config, variants=("ADP σ=0 + AugMix",), progress=False, device="cpu")
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{tmp_path} holds records for the corruption table made with other " "settings: config.steps 1 (now 2)."
        ),
    ):
        run_corruptions(
            tmp_path,
            clf,
            score,
            data.x_test,
            data.y_test,
            data.x_train,
            config=CorruptionConfig(n_examples=2, ensemble_size=1, steps=2, n_calibration=20),
            progress=False,
            device="cpu",
        )


class _ByBrightness(torch.nn.Module):
    """A classifier that reads the label off an image's mean brightness (label k: mean (k + 1) / 12): correct on a
    test image exactly when it is shown that image."""

    def forward(self, x):
        k = torch.round(x.mean((1, 2, 3)) * 12 - 1).long().clamp(0, 9)
        return torch.nn.functional.one_hot(k, 10).float()


def _official_cifar10c(tmp_path, n=12):
    """A CIFAR-10-C folder of ``n`` 32×32 images in an "official" order, each corruption the identity at every
    severity, and the names of a shuffled half of them (the development images) with those images and labels."""
    rng = np.random.default_rng(0)
    labels = np.arange(n) % 10
    images = ((labels + 1) / 12)[:, None, None, None] + rng.uniform(-0.02, 0.02, (n, 3, 32, 32))
    official = [f"img_{i:02d}.png" for i in rng.permutation(n)]
    root = tmp_path / "CIFAR-10-C"
    root.mkdir()
    stored = np.rint(images.transpose(0, 2, 3, 1) * 255).astype(np.uint8)
    for name in CORRUPTIONS:
        np.save(root / f"{name}.npy", np.concatenate([stored] * 5))
    np.save(root / "labels.npy", np.tile(labels, 5))
    dev = rng.permutation(n)[: n // 2]
    x_dev = (stored[dev].transpose(0, 3, 1, 2) / 255).astype(np.float32)
    return root, official, [official[i] for i in dev], x_dev, labels[dev]


def test_cifar10c_rows_are_the_clean_columns_images_by_name(tmp_path):
    from art_adp.apps.corruption_table import CorruptionConfig, run_corruptions
    from art_adp.score import NCSNv2

    root, official, names, x_dev, y_dev = _official_cifar10c(tmp_path)
    config = CorruptionConfig(ensemble_size=1, steps=1, n_calibration=4)
    score = NCSNv2(3, 32, ngf=4).eval()
    args = (_ByBrightness(), score, x_dev, y_dev, x_dev)
    out = run_corruptions(tmp_path / "run", *args, config=config, cifar10c_root=root, names=names, order=official,
                          variants=["undefended"], progress=False, device="cpu", log=lambda _: None)  # fmt: skip
    row = out["rows"]["undefended"]
    assert row["clean"] == 1.0 and all(row[c] == 1.0 for c in CORRUPTIONS)  # the identity on the same images
    # the first N rows of the official files are other images: refused, not measured as if they were the same
    with pytest.raises(ValueError, match="are not those of the clean test images: the corrupted rows are other images"):
        run_corruptions(tmp_path / "first-n", *args, config=config, cifar10c_root=root, variants=["undefended"],
                        progress=False, device="cpu", log=lambda _: None)  # fmt: skip
    with pytest.raises(ValueError, match="give the official archive"):
        run_corruptions(tmp_path / "no-order", *args, config=config, cifar10c_root=root, names=names,
                        variants=["undefended"], progress=False, device="cpu", log=lambda _: None)  # fmt: skip


def test_several_classifiers_make_one_table_by_calls_into_one_folder(tmp_path):
    from art_adp.apps.corruption_table import CorruptionConfig, run_corruptions
    from art_adp.score import NCSNv2

    root, official, names, x_dev, y_dev = _official_cifar10c(tmp_path)
    config = CorruptionConfig(ensemble_size=1, steps=1, n_calibration=4)
    score = NCSNv2(3, 32, ngf=4).eval()
    wrong = torch.nn.Sequential(_ByBrightness(), torch.nn.Flatten(), torch.nn.Linear(10, 10))
    with torch.no_grad():  # always the label after the right one: 0 % on every set
        wrong[2].weight.copy_(torch.roll(torch.eye(10), 1, 0))
        wrong[2].bias.zero_()
    common = dict(config=config, cifar10c_root=root, names=names, order=official, variants=["undefended"],
                  progress=False, device="cpu", log=lambda _: None)  # fmt: skip
    run_corruptions(tmp_path / "run", _ByBrightness(), score, x_dev, y_dev, x_dev, classifier_name="right", **common)
    out = run_corruptions(tmp_path / "run", wrong, score, x_dev, y_dev, x_dev, classifier_name="wrong", **common)
    assert out["rows"]["right · undefended"]["mean"] == 1.0 and out["rows"]["wrong · undefended"]["mean"] == 0.0
    calls = out["provenance"]
    assert [c["classifier"] for c in calls["calls"]] == ["right"] and calls["classifier"] == "wrong"
    assert {"right", "wrong", "score (plain)"} <= set(calls["models"])


def test_a_call_records_the_code_it_started_with(tmp_path, monkeypatch):
    from art_adp.apps import corruption_table
    from art_adp.score import NCSNv2

    root, official, names, x_dev, y_dev = _official_cifar10c(tmp_path)
    monkeypatch.setattr(corruption_table, "code_version", lambda: "art-adp 0.0 (c0ffee0)")  # the checkout at the start
    out = corruption_table.run_corruptions(
        tmp_path / "run", _ByBrightness(), NCSNv2(3, 32, ngf=4).eval(), x_dev, y_dev, x_dev,
        config=corruption_table.CorruptionConfig(ensemble_size=1, steps=1, n_calibration=4), cifar10c_root=root,
        names=names, order=official, variants=["undefended"], progress=False, device="cpu", log=lambda _: None,
    )  # fmt: skip
    assert out["provenance"]["code_version"] == "art-adp 0.0 (c0ffee0)"  # not the checkout's at the call's end
    assert out["provenance"]["code_version_at_end"] != "art-adp 0.0 (c0ffee0)"


def test_variants_flag_reads_a_row_name_that_holds_a_comma_whole():
    from art_adp.apps.cli import build_parser

    args = build_parser().parse_args(["corruptions", "--classifier", "c", "--score", "s",
                                      "--variants", "undefended,ADP σ=0, AugMix's schedule,ADP σ=0.1"])  # fmt: skip
    assert args.variants == ["undefended", "ADP σ=0, AugMix's schedule", "ADP σ=0.1"]
    args = build_parser().parse_args(["corruptions", "--classifier", "c", "--score", "s", "--variants", "x, ADP σ=0"])
    assert args.variants == ["x", "ADP σ=0"]  # an unknown row is kept, for run_corruptions to refuse by name
