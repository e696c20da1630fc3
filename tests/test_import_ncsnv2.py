"""``import_ncsnv2`` / ``art-adp import-ncsnv2``: checkpoints of the NCSNv2 reference code (ermongroup/ncsnv2).

The reference's parameter names and shapes are written out below from its ``models/ncsnv2.py`` (class NCSNv2),
``models/layers.py`` (ResidualBlock, ConvMeanPool, RCUBlock with ``"{i}_{j}_conv"`` attributes, MSFBlock, CRPBlock,
RefineBlock) and ``models/normalization.py`` (InstanceNorm2dPlus: alpha, gamma, beta), and so is its forward pass
(``reference_forward``, functional, on those names), so the import is checked against the reference's function,
not against art_adp's own module. Checkpoints are built as ``runners/ncsn_runner.py`` saves them:
``torch.save([DataParallel state dict, optimizer state dict, epoch, step, EMA shadow])``.
"""
import argparse
import math
import os
import re
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
import yaml

from art_adp.apps.cli import main
from art_adp.score import NCSNv2, load_score_model
from art_adp.score.import_ncsnv2 import import_ncsnv2, read_ncsnv2_config, reference_to_art_adp_name

C, SIZE, NGF, L = 3, 8, 4, 6  # tiny: 3 x 8 x 8 images, ngf = 4, 6 noise levels


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test of this file computes with one torch thread (the fixture in conftest.py)."""


# ----------------------------------------------------------------------------- the reference, written out
def _norm(p, n):
    return {f"{p}.alpha": (n,), f"{p}.gamma": (n,), f"{p}.beta": (n,)}


def _conv(p, i, o, k, bias=True):
    return {f"{p}.weight": (o, i, k, k), **({f"{p}.bias": (o,)} if bias else {})}


def _residual(p, i, o, resample=None, dilation=None):
    d = _norm(f"{p}.normalize1", i)
    if resample == "down":
        d.update(_conv(f"{p}.conv1", i, i, 3))
        d.update(_norm(f"{p}.normalize2", i))
        if dilation:  # dilated convolutions, no down-sampling; dilated 3x3 shortcut
            d.update(_conv(f"{p}.conv2", i, o, 3))
            d.update(_conv(f"{p}.shortcut", i, o, 3))
        else:  # ConvMeanPool: its convolution is the attribute "conv"
            d.update(_conv(f"{p}.conv2.conv", i, o, 3))
            d.update(_conv(f"{p}.shortcut.conv", i, o, 1))
    else:
        d.update(_conv(f"{p}.conv1", i, o, 3))
        d.update(_norm(f"{p}.normalize2", o))
        d.update(_conv(f"{p}.conv2", o, o, 3))
        if i != o:
            d.update(_conv(f"{p}.shortcut", i, o, 1))
    return d


def _rcu(p, f, n_blocks, n_stages=2):
    return {f"{p}.{b}_{s}_conv.weight": (f, f, 3, 3) for b in range(1, n_blocks + 1) for s in range(1, n_stages + 1)}


def _refine(p, in_planes, f, start=False, end=False):
    d = {}
    for i, c in enumerate(in_planes):
        d.update(_rcu(f"{p}.adapt_convs.{i}", c, 2))
    d.update(_rcu(f"{p}.output_convs", f, 3 if end else 1))
    if not start:
        for i, c in enumerate(in_planes):
            d.update(_conv(f"{p}.msf.convs.{i}", c, f, 3))
    for i in range(2):
        d[f"{p}.crp.convs.{i}.weight"] = (f, f, 3, 3)
    return d


def reference_shapes(c=C, ngf=NGF, n_sigmas=L):
    """Names and shapes of the reference NCSNv2's state dict (without the DataParallel prefix)."""
    d = OrderedDict(sigmas=(n_sigmas,))
    d.update(_conv("begin_conv", c, ngf, 3))
    d.update(_norm("normalizer", ngf))
    d.update(_conv("end_conv", ngf, c, 3))
    d.update(_residual("res1.0", ngf, ngf))
    d.update(_residual("res1.1", ngf, ngf))
    d.update(_residual("res2.0", ngf, 2 * ngf, "down"))
    d.update(_residual("res2.1", 2 * ngf, 2 * ngf))
    for name, dil in (("res3", 2), ("res4", 4)):
        d.update(_residual(f"{name}.0", 2 * ngf, 2 * ngf, "down", dil))
        d.update(_residual(f"{name}.1", 2 * ngf, 2 * ngf, None, dil))
    d.update(_refine("refine1", [2 * ngf], 2 * ngf, start=True))
    d.update(_refine("refine2", [2 * ngf, 2 * ngf], 2 * ngf))
    d.update(_refine("refine3", [2 * ngf, 2 * ngf], ngf))
    d.update(_refine("refine4", [ngf, ngf], ngf, end=True))
    return d


def geometric(begin=50.0, end=0.01, n=L):
    return torch.linspace(math.log(begin), math.log(end), n, dtype=torch.float64).exp()


def reference_weights(seed, c=C, ngf=NGF):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, shape in reference_shapes(c, ngf).items():
        if k == "sigmas":
            continue
        scale = 0.1 if k.endswith((".alpha", ".beta", ".bias")) else 0.3
        out[k] = (1.0 if k.endswith(".gamma") else 0.0) + scale * torch.randn(shape, generator=g)
    return out


def reference_forward(sd, x, y, sigmas):
    """The reference NCSNv2.forward(x, y) on a state dict with the reference's names (config: not rescaled)."""
    elu = F.elu
    sd = {k: v.to(x.dtype) for k, v in sd.items()}

    def conv(p, h, dilation=1):
        w = sd[f"{p}.weight"]
        return F.conv2d(h, w, sd.get(f"{p}.bias"), padding=dilation * (w.shape[-1] // 2), dilation=dilation)

    def norm(p, h):
        means = h.mean(dim=(2, 3))
        means = (means - means.mean(-1, keepdim=True)) / torch.sqrt(means.var(-1, keepdim=True) + 1e-5)
        h = F.instance_norm(h) + means[..., None, None] * sd[f"{p}.alpha"][..., None, None]
        return sd[f"{p}.gamma"].view(1, -1, 1, 1) * h + sd[f"{p}.beta"].view(1, -1, 1, 1)

    def meanpool(h):
        return (h[:, :, ::2, ::2] + h[:, :, 1::2, ::2] + h[:, :, ::2, 1::2] + h[:, :, 1::2, 1::2]) / 4.0

    def residual(p, h, down=False, dilation=None):
        out = conv(f"{p}.conv1", elu(norm(f"{p}.normalize1", h)), dilation or 1)
        out = elu(norm(f"{p}.normalize2", out))
        if down and dilation is None:
            return meanpool(conv(f"{p}.conv2.conv", out)) + meanpool(conv(f"{p}.shortcut.conv", h))
        out = conv(f"{p}.conv2", out, dilation or 1)
        return out + (conv(f"{p}.shortcut", h, dilation or 1) if f"{p}.shortcut.weight" in sd else h)

    def rcu(p, h, n_blocks):
        for b in range(1, n_blocks + 1):
            r = h
            for s in range(1, 3):
                h = conv(f"{p}.{b}_{s}_conv", elu(h))
            h = h + r
        return h

    def refine(p, xs, shape, end=False):
        hs = [rcu(f"{p}.adapt_convs.{i}", h, 2) for i, h in enumerate(xs)]
        h = hs[0] if len(hs) == 1 else sum(
            F.interpolate(conv(f"{p}.msf.convs.{i}", h), size=shape, mode="bilinear", align_corners=True)
            for i, h in enumerate(hs))
        h = elu(h)
        path = h
        for i in range(2):
            path = conv(f"{p}.crp.convs.{i}", F.max_pool2d(path, 5, stride=1, padding=2))
            h = path + h
        return rcu(f"{p}.output_convs", h, 3 if end else 1)

    out = conv("begin_conv", 2 * x - 1.0)
    l1 = residual("res1.1", residual("res1.0", out))
    l2 = residual("res2.1", residual("res2.0", l1, down=True))
    l3 = residual("res3.1", residual("res3.0", l2, True, 2), dilation=2)
    l4 = residual("res4.1", residual("res4.0", l3, True, 4), dilation=4)
    r = refine("refine1", [l4], l4.shape[2:])
    r = refine("refine2", [l3, r], l3.shape[2:])
    r = refine("refine3", [l2, r], l2.shape[2:])
    r = refine("refine4", [l1, r], l1.shape[2:], end=True)
    out = conv("end_conv", elu(norm("normalizer", r)))
    return out / sigmas[y].view(-1, 1, 1, 1).to(out.dtype)


def reference_config(**changes):
    config = {
        "training": {"batch_size": 128, "n_iters": 300001, "snapshot_freq": 5000},
        "data": {"dataset": "CIFAR10", "image_size": SIZE, "channels": C, "logit_transform": False,
                 "uniform_dequantization": False, "gaussian_dequantization": False, "random_flip": True,
                 "rescaled": False, "num_workers": 4},
        "model": {"sigma_begin": 50, "num_classes": L, "ema": True, "ema_rate": 0.999, "spec_norm": False,
                  "sigma_dist": "geometric", "sigma_end": 0.01, "normalization": "InstanceNorm++",
                  "nonlinearity": "elu", "ngf": NGF},
        "optim": {"weight_decay": 0.0, "optimizer": "Adam", "lr": 0.0001, "beta1": 0.9, "amsgrad": False, "eps": 1e-8},
    }
    for key, value in changes.items():
        section, name = key.split("__")
        config[section][name] = value
    return config


def reference_checkpoint(raw_seed=0, ema_seed=1, ema=True, step=5000):
    """``[score.state_dict(), optimizer.state_dict(), epoch, step(, ema_helper.state_dict())]`` as the reference's
    runner saves it: the score under DataParallel ("module." names, with the sigmas buffer), a real Adam state,
    the EMA shadow keyed by the bare parameter names."""
    raw = reference_weights(raw_seed)
    params = [torch.nn.Parameter(v.clone()) for v in raw.values()]
    optimizer = torch.optim.Adam(params, lr=1e-4)
    sum(p.square().sum() for p in params).backward()
    optimizer.step()
    states = [{"module.sigmas": geometric().float(), **{f"module.{k}": v for k, v in raw.items()}},
              optimizer.state_dict(), 3, step]
    if ema:
        states.append(reference_weights(ema_seed))
    return states


@pytest.fixture()
def files(tmp_path):
    ckpt, config = tmp_path / "checkpoint_5000.pth", tmp_path / "cifar10.yml"
    torch.save(reference_checkpoint(), ckpt)
    config.write_text(yaml.safe_dump(reference_config()))
    return ckpt, config


def _x(n=2):
    return torch.rand(n, C, SIZE, SIZE, generator=torch.Generator().manual_seed(5))


# ----------------------------------------------------------------------------- names and shapes
def test_reference_table_is_the_29_7m_parameter_network():
    # The written-out table at the CIFAR-10 size has exactly the parameter count of art_adp's NCSNv2 (and the
    # paper's 29.7 M); so it describes the same network, name by name, shape by shape.
    shapes = reference_shapes(3, 128, 232)
    assert sum(math.prod(s) for k, s in shapes.items() if k != "sigmas") == 29_694_083
    ours = {k: tuple(v.shape) for k, v in NCSNv2(3, 32, ngf=128).state_dict().items()}
    assert {reference_to_art_adp_name(k): s for k, s in shapes.items() if k != "sigmas"} == ours


@pytest.mark.parametrize("reference,ours", [
    ("refine1.adapt_convs.0.1_1_conv.weight", "refine1.adapt_convs.0.blocks.0.0.weight"),
    ("refine2.adapt_convs.1.2_1_conv.weight", "refine2.adapt_convs.1.blocks.1.0.weight"),
    ("refine4.output_convs.3_2_conv.weight", "refine4.output_convs.blocks.2.1.weight"),
    ("res2.0.conv2.conv.weight", "res2.0.conv2.conv.weight"),
    ("refine3.msf.convs.1.bias", "refine3.msf.convs.1.bias"),
    ("normalizer.alpha", "normalizer.alpha"),
])
def test_name_mapping(reference, ours):
    assert reference_to_art_adp_name(reference) == ours


def test_every_reference_tensor_lands_in_its_place(files):
    ckpt, config = files
    model = import_ncsnv2(ckpt, config, ema=False)
    ours = model.state_dict()
    for k, v in reference_weights(0).items():
        assert torch.equal(ours[reference_to_art_adp_name(k)], v), k
    # one RCU convolution checked by attribute, not by name: block 2, stage 1 of refine1's first adapter
    assert torch.equal(model.refine1.adapt_convs[0].blocks[1][0].weight,
                       reference_weights(0)["refine1.adapt_convs.0.2_1_conv.weight"])


# ----------------------------------------------------------------------------- the function, EMA choice, prefix
def test_imports_ema_weights_and_matches_the_reference_forward(files):
    ckpt, config = files
    model = import_ncsnv2(ckpt, config)
    x, y = _x(), torch.tensor([0, L - 1])
    sigmas = geometric()
    expected = reference_forward(reference_weights(1), x.double(), y, sigmas)  # EMA shadow = seed 1
    with torch.no_grad():
        got = model(x).double() / sigmas[y].view(-1, 1, 1, 1)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())
    raw = reference_forward(reference_weights(0), x.double(), y, sigmas)
    assert (got - raw).abs().max() > 100 * (got - expected).abs().max()  # and not the raw weights
    info = model.training_info
    assert info["weights"] == "ema" and info["step"] == 5000
    torch.testing.assert_close(torch.tensor(info["sigmas"], dtype=torch.float64), sigmas, rtol=1e-12, atol=0)
    assert not model.training


@pytest.mark.parametrize("case", ["no-ema-entry", "ema=False", "bare-prefixed", "bare-unprefixed"])
def test_raw_weights_when_asked_or_when_there_is_no_ema(tmp_path, case):
    states = reference_checkpoint(ema=case != "no-ema-entry")
    obj = {"bare-prefixed": states[0], "bare-unprefixed": {k[len("module."):]: v for k, v in states[0].items()}}
    torch.save(obj.get(case, states), tmp_path / "c.pth")
    model = import_ncsnv2(tmp_path / "c.pth", reference_config(), ema=case != "ema=False")
    x, y = _x(1), torch.tensor([2])
    expected = reference_forward(reference_weights(0), x.double(), y, geometric())
    with torch.no_grad():
        got = model(x).double() / geometric()[y].view(-1, 1, 1, 1)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())
    assert model.training_info["weights"] == "raw"
    assert model.training_info["step"] == (None if case.startswith("bare") else 5000)


def test_legacy_serialization_of_2020_checkpoints(tmp_path, files):
    # Checkpoints written by torch < 1.6 are plain pickles, not zip archives; weights_only reads them too.
    torch.save(reference_checkpoint(), tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    assert (tmp_path / "legacy.pth").read_bytes()[:1] == b"\x80"
    legacy, current = import_ncsnv2(tmp_path / "legacy.pth", files[1]), import_ncsnv2(*files)
    assert all(torch.equal(a, b) for a, b in zip(legacy.state_dict().values(), current.state_dict().values()))


def test_saved_model_reloads_with_its_schedule(files, tmp_path):
    ckpt, config = files
    model = import_ncsnv2(ckpt, config, output=tmp_path / "out" / "score.safetensors")
    loaded = load_score_model(tmp_path / "out" / "score.safetensors")
    x = _x()
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert loaded.training_info["step"] == 5000
    assert loaded.training_info["sigmas"] == pytest.approx(geometric().tolist(), rel=1e-12)


def test_log_folder_config_with_namespace_tags(files, tmp_path):
    # The reference's main.py writes yaml.dump(argparse.Namespace) into the log folder: python/object tags.
    ckpt, _ = files

    def namespace(d):
        return argparse.Namespace(**{k: namespace(v) if isinstance(v, dict) else v for k, v in d.items()})

    text = yaml.dump(namespace(reference_config()), default_flow_style=False)
    assert text.startswith("!!python/object:argparse.Namespace")
    (tmp_path / "config.yml").write_text(text)
    assert read_ncsnv2_config(tmp_path / "config.yml") == reference_config()
    assert import_ncsnv2(ckpt, tmp_path / "config.yml").training_info["weights"] == "ema"


# ----------------------------------------------------------------------------- refusals
def _drop(states, key):
    states[4].pop(key)
    return states


def _add(states, key):
    states[4][key] = torch.zeros(3)
    return states


REFUSED_CHECKPOINTS = [
    (lambda s: _drop(s, "res1.0.conv1.bias"), {}, r"1 missing \['res1\.0\.conv1\.bias'\]"),
    (lambda s: _add(s, "res1.0.conv1.weight_orig"), {}, r"1 unexpected \['res1\.0\.conv1\.weight_orig'\]"),
    (lambda s: _add(s, "res5.0.conv1.weight"), {}, "NCSNv2Deeper/NCSNv2Deepest, which art_adp does not implement"),
    (lambda s: s, {"model__ngf": 8}, r"do not match NCSNv2\(in_channels=3, image_size=8, ngf=8\).*of the wrong shape"),
    (lambda s: s, {"data__channels": 1}, r"begin_conv\.weight: \(4, 3, 3, 3\) instead of \(4, 1, 3, 3\)"),
    (lambda s: s, {"model__num_classes": 10}, "does not match the config's schedule .10 sigmas from 50 to 0.01.: "
                                              "wrong config file"),
    (lambda s: [s[0], s[1], 3, 5000, s[4], "extra"], {}, "a list of 6 entries"),
    (lambda s: {"model": s[0], "step": 5000}, {}, "The checkpoint holds a dict; expected the NCSNv2 reference's"),
    (lambda s: [s[0], s[1], 3, 5000, [1, 2]], {}, "fifth entry .the EMA state. is a list"),
    (lambda s: [{**s[0], "res1.0.conv1.bias": s[0]["module.res1.0.conv1.bias"]}, s[1], 3, 5000], {},
     "Some parameter names start with the DataParallel prefix 'module.' and others do not"),
]


@pytest.mark.parametrize("edit,config_changes,match", REFUSED_CHECKPOINTS)
def test_refuses_checkpoints_that_do_not_match(tmp_path, edit, config_changes, match):
    torch.save(edit(reference_checkpoint()), tmp_path / "c.pth")
    with pytest.raises(ValueError, match=match):
        import_ncsnv2(tmp_path / "c.pth", reference_config(**config_changes))


@pytest.mark.parametrize("config_changes,match", [
    ({"data__rescaled": True}, r"data\.rescaled: true, so the network was trained on transformed inputs"),
    ({"data__logit_transform": True}, r"data\.logit_transform: true"),
    ({"data__dataset": "LSUN"}, "trains the reference's NCSNv2Deeper"),
    ({"data__dataset": "FFHQ"}, "trains the reference's NCSNv2Deepest"),
    ({"model__normalization": "BatchNorm"}, "normalization 'BatchNorm' and nonlinearity 'elu'"),
    ({"model__sigma_dist": "cosine"}, "model.sigma_dist must be 'geometric' or 'uniform'"),
    ({"model__ngf": "128"}, r"model\.ngf must be an integer, got '128'"),
])
def test_refuses_configs_it_cannot_honour(files, config_changes, match):
    with pytest.raises(ValueError, match=match):
        import_ncsnv2(files[0], reference_config(**config_changes))


class _Touch:
    """A pickle payload: unpickling it would create a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (str(self.path),))


def test_refuses_pickles_with_other_objects_without_running_them(tmp_path, files):
    victim = tmp_path / "pwned"
    states = reference_checkpoint()
    states[2] = _Touch(victim)
    torch.save(states, tmp_path / "evil.pth")
    with pytest.raises(ValueError, match=re.escape("was refused: torch.load(weights_only=True) met something other "
                                                   "than tensors and plain containers (Trying to load unsupported "
                                                   "GLOBAL posix.mknod")):
        import_ncsnv2(tmp_path / "evil.pth", files[1])
    assert not victim.exists()


def test_refuses_files_that_are_not_checkpoints_and_unsafe_yaml(tmp_path, files):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="is not a PyTorch checkpoint .neither torch.save's zip format nor a pickle"):
        import_ncsnv2(tmp_path / "notes.txt", files[1])
    with pytest.raises(FileNotFoundError, match="No checkpoint at"):
        import_ncsnv2(tmp_path / "missing.pth", files[1])
    evil = tmp_path / "evil.yml"
    evil.write_text("data: !!python/object/apply:os.mknod ['%s']\n" % (tmp_path / "pwned"))
    with pytest.raises(ValueError, match="is not a YAML file the importer can read safely"):
        import_ncsnv2(files[0], evil)
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "list.yml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a YAML mapping with 'data' and 'model' sections"):
        import_ncsnv2(files[0], tmp_path / "list.yml")


# ----------------------------------------------------------------------------- the command
def test_cli_import(files, tmp_path, capsys):
    ckpt, config = files
    out = tmp_path / "score.safetensors"
    assert main(["import-ncsnv2", str(ckpt), "--config", str(config), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"score model: {out} (NCSNv2 ngf=4, 3 x 8 x 8, EMA weights, step 5000, 6 sigmas from 50 to 0.01)" in printed
    assert main(["import-ncsnv2", str(ckpt), "--config", str(config), "-o", str(out), "--raw-weights"]) == 0
    assert "trained (non-EMA) weights" in capsys.readouterr().out
    x = _x(1)
    with torch.no_grad():
        torch.testing.assert_close(load_score_model(out)(x).double() / geometric()[3],
                                   reference_forward(reference_weights(0), x.double(), torch.tensor([3]), geometric()),
                                   rtol=1e-4, atol=1e-5)
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(reference_config(data__rescaled=True)))
    assert main(["import-ncsnv2", str(ckpt), "--config", str(tmp_path / "bad.yml"), "-o", str(out)]) == 2
    assert "art-adp import-ncsnv2: error: The config sets data.rescaled: true" in capsys.readouterr().err
