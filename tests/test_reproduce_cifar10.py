"""examples/reproduce_cifar10.py end to end on random weights: a reference-format NCSNv2 checkpoint goes through
``art-adp import-ncsnv2``, then both protocols run on three fake CIFAR-10 test images with every count cut to 1-2
(marked ``e2e``: CI runs it after the suite); the protocols, the errors and the reduced budgets' names in the suite."""
import importlib.util
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from art_adp.apps.cli import main as cli_main
from art_adp.models import WideResNet, save_classifier
from art_adp.score import NCSNv2

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "reproduce_cifar10.py"


def _script():
    spec = importlib.util.spec_from_file_location("reproduce_cifar10", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_cifar10(folder, n_test=3):
    """The CIFAR-10 "python version" layout: data_batch_1..5 (one image each) and a test_batch of n_test."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 1) for i in range(1, 6)] + [("test_batch", n_test)]:
        batch = {b"batch_label": name.encode(), b"data": rng.integers(0, 256, (n, 3072)).astype(np.uint8),
                 b"labels": [int(v) for v in rng.integers(0, 10, n)], b"filenames": [b"f%d.png" % i for i in range(n)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def _reference_checkpoint(path, ngf):
    """A random NCSNv2 saved as ermongroup/ncsnv2 saves one: DataParallel names, "{i}_{j}_conv" RCU names, the
    sigmas buffer, [state dict, optimizer state, epoch, step, EMA shadow]."""
    weights = NCSNv2(3, 32, ngf=ngf).state_dict()
    ref = {re.sub(r"\.blocks\.(\d+)\.(\d+)\.", lambda m: f".{int(m[1]) + 1}_{int(m[2]) + 1}_conv.", k): v
           for k, v in weights.items()}
    sigmas = torch.linspace(np.log(50), np.log(0.01), 4).exp()
    torch.save([{"module.sigmas": sigmas, **{f"module.{k}": v for k, v in ref.items()}},
                {"state": {}, "param_groups": []}, 0, 10, ref], path)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test of this file computes with one torch thread (the fixture in conftest.py)."""


def test_protocols_match_the_papers():
    script = _script()
    paper, croce = script.PROTOCOLS["paper"], script.PROTOCOLS["croce"]
    assert (paper.eps, paper.step, paper.max_iter, paper.eot_samples, paper.spsa_samples_per_step, paper.ensemble_size, paper.repeats) == (
        8 / 255, 2 / 255, 40, 15, 1280, 10, 10)
    assert paper.attacks == ("clf-pgd", "bpda-eot", "joint-score", "joint-full", "spsa")
    assert (croce.attacks, croce.eps, croce.apgd_max_iter, croce.apgd_eot_samples, croce.ensemble_size, croce.repeats) == (
        ("apgd-eot",), 8 / 255, 100, 200, 10, 10)
    assert script.EXPECTED == {"paper": {"clean": 86.14, "clf-pgd": 80.24, "bpda-eot": 70.01, "joint-score": 70.61,
                                         "joint-full": 78.39, "spsa": 80.80}, "croce": {"apgd-eot": 33.7}}
    for figure in ("86.14", "70.01", "33.7 %"):
        assert figure in script.__doc__


@pytest.mark.e2e  # the whole example script, both protocols (CI: python -m pytest -m e2e)
def test_end_to_end_on_random_weights(tmp_path, capsys):
    torch.manual_seed(0)
    _write_cifar10(tmp_path / "data" / "cifar-10-batches-py")
    _reference_checkpoint(tmp_path / "checkpoint_10.pth", ngf=2)
    config = {"data": {"dataset": "CIFAR10", "image_size": 32, "channels": 3, "logit_transform": False,
                       "rescaled": False},
              "model": {"sigma_begin": 50, "sigma_end": 0.01, "num_classes": 4, "sigma_dist": "geometric",
                        "normalization": "InstanceNorm++", "nonlinearity": "elu", "ngf": 2, "ema": True}}
    (tmp_path / "cifar10.yml").write_text(yaml.safe_dump(config))
    score = tmp_path / "score.safetensors"
    assert cli_main(["import-ncsnv2", str(tmp_path / "checkpoint_10.pth"), "--config", str(tmp_path / "cifar10.yml"),
                     "-o", str(score)]) == 0
    save_classifier(WideResNet(depth=10, widen_factor=1), tmp_path / "classifier.safetensors")
    run_dir = tmp_path / "run"
    argv = ["--score", str(score), "--classifier", str(tmp_path / "classifier.safetensors"),
            "--data-root", str(tmp_path / "data"), "--device", "cpu", "--protocol", "both", "--run-dir", str(run_dir),
            "--steps", "2", "--max-iter", "1", "--eot-samples", "1", "--spsa-max-iter", "1",
            "--spsa-samples-per-step", "2", "--apgd-max-iter", "2", "--apgd-eot-samples", "1", "--ensemble-size", "1", "--repeats", "2", "--no-sanity", "--quiet"]
    assert _script().main(argv) == 0
    out = capsys.readouterr().out
    assert "REDUCED BUDGET" in out and "CIFAR-10 test images: 3; device: cpu" in out
    result = json.loads((run_dir / "comparison.json").read_text())
    assert set(result["paper"]["measured"]) == {"clean", "clf-pgd", "bpda-eot", "joint-score", "joint-full", "spsa"}
    assert set(result["croce"]["measured"]) == {"clean", "apgd-eot"}
    for protocol in ("paper", "croce"):
        assert (run_dir / protocol / "report.md").is_file()
        for v in result[protocol]["measured"].values():
            assert v["n"] == 3 and len(v["per_repeat"]) == 2 and 0 <= v["worst"] <= v["mean"] <= 1
            assert v["max_linf"] <= 8 / 255 + 1e-6
    assert result["croce"]["expected"] == {"apgd-eot": 33.7}
    table = (run_dir / "comparison.md").read_text()
    assert f"| bpda-eot | 1 it of {2 / 255:.4g}, EOT 1 (mean) |" in table and "| 70.01 |" in table and "| 33.70 |" in table


def test_missing_models_are_clear_errors(tmp_path, capsys):
    assert _script().main(["--score", str(tmp_path / "none.safetensors"), "--classifier", str(tmp_path / "c")]) == 2
    assert "none.safetensors not found: pass --score (convert the reference checkpoint with art-adp import-ncsnv2)" \
        in capsys.readouterr().err


@pytest.mark.parametrize("protocol,argv,expected", [
    ("paper", [], []),
    ("paper", ["--eot-aggregate", "sign"], []),  # an aggregation, not a count
    ("croce", ["--max-iter", "2"], []),  # PGD counts are not Croce et al.'s protocol: nothing reduced
    ("croce", ["--apgd-eot-samples", "20"], ["apgd_eot_samples 20 (protocol: 200)"]),
    ("paper", ["--eot-samples", "5", "--steps", "5"], ["eot_samples 5 (protocol: 15)", "ADP sigma 0.25, T = 5 (protocol: 0.25, 10)"]),
])
def test_reduced_budgets_are_named(protocol, argv, expected):
    script = _script()
    config, reduced = script.protocol_config(protocol, script.build_parser().parse_args(argv))
    assert reduced == expected
    assert config.note.startswith("REDUCED BUDGET") == bool(expected)
    assert config.eot_aggregate == ("sign" if "sign" in argv else "mean")
