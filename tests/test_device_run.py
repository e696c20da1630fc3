"""The prepared GPU run (benchmarks/device_run.py) end to end on the CPU at tiny sizes, so that no GPU minute is
spent finding a typo: both parts, every CLI command, training, the trainer state split and resumed, curve,
diagnostics, table, gpu.py and the optional stages. The two smoke runs are end to end (marked ``e2e``: CI runs them
after the suite, ``python -m pytest -m e2e``); the command lines and the state unpacking are checked in the suite."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_reproduce import _fake_mnist

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    (data / "mnist-subset").mkdir()
    _fake_mnist(data / "mnist-subset", n_train=40, n_test=8)
    out, work, state = (tmp_path_factory.mktemp(n) for n in ("out", "work", "state"))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "device_run.py"), "run", "--smoke", "--data", str(data),
           "--work", str(work), "--state", str(state), "--out", str(out)]  # fmt: skip
    first = subprocess.run([*cmd, "--part", "1"], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    return cmd, data, out, work, state, first


@pytest.mark.e2e
def test_part_one_runs_every_cli_command_trains_and_returns_the_state(smoke):
    _, _, out, _, _, first = smoke
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    stages = results["stages"]
    for name in ("demo", "train-score", "train-classifier", "detect", "certify", "evaluate", "reproduce"):
        assert stages[f"cli:{name}"]["status"] == "ok", stages[f"cli:{name}"]
    assert stages["train"]["status"] == "ok" and stages["curve"]["status"] == "ok"
    assert results["training"]["iterations"] == 6 and results["training"]["samples"] == 48
    assert sorted(p.name for p in out.glob("state.tar.part*")) == ["state.tar.part00"]


@pytest.mark.e2e
def test_part_two_resumes_from_the_parts_alone_and_measures_everything(smoke, tmp_path):
    cmd, data, out, work1, state, _ = smoke
    for part in out.glob("state.tar.part*"):  # what `collect` does: the parts are all the next run gets
        (state / part.name).write_bytes(part.read_bytes())
    (data / "demo").mkdir()  # what `prepare` does: the digits models (here: part 1's `demo` command's)
    for name in ("score.safetensors", "classifier.safetensors"):
        (data / "demo" / name).write_bytes((work1 / "cli" / "demo" / name).read_bytes())
    work, out2 = tmp_path / "work", tmp_path / "out"
    cmd = [*cmd[: cmd.index("--work") + 1], str(work), *cmd[cmd.index("--work") + 2 : -1], str(out2), "--part", "2"]
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    results = json.loads((out2 / "results.json").read_text())
    assert "resumed the trainer state" in second.stdout
    assert {k: v["status"] for k, v in results["stages"].items()} == {
        "curve": "ok", "table": "ok", "gpu": "ok", "digits-card": "ok", "corruptions": "ok"
    }  # fmt: skip
    table = results["table_report"]
    assert table["recipe"]["budgets"] == [6] and table["rows"]["clean"]["6"]["n"] == 4
    curve = results["curve_report"]
    assert [p["step"] for p in curve["curve"]] == [3, 6]  # the step-3 point was measured in part 1
    assert [s["steps"] for s in curve["diagnostics"]["sweep"]] == [10, 10, 20, 20, 50, 50]
    assert (out2 / "gpu.json").exists() and (out2 / "measured.tar.gz").exists()
    assert len(list(out2.iterdir())) <= 8  # the device returns at most 8 files


def test_the_gpu_runs_commands_parse(tmp_path):
    """The GPU-sized command lines (never run on a CPU) at least parse: no GPU minute lost to a typo in them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_run

    from art_adp.apps.cli import build_parser

    commands = [cmd for _, cmd in device_run.cli_commands(tmp_path, tmp_path, "cuda")]
    commands += list(device_run.optional_commands(tmp_path, tmp_path, smoke=False))
    for cmd in commands:
        assert cmd[1:3] == ["-m", "art_adp"]
        args = build_parser().parse_args(cmd[3:])
        assert getattr(args, "device", "cuda") in ("cuda", None)
    assert len(commands) == 10
    assert device_run.recipe_of(smoke=False).milestones[-1] * 512 == 25_600_000  # the paper's sample count


def test_a_state_saved_under_the_recipes_old_field_names_resumes_under_the_new_ones(tmp_path):
    """The committed trainer state predates the recipe's renamed fields and the one folder layout; unpacking moves its
    ``recipe.json`` to ``settings.json`` and renames the fields (same values), so the run folder's settings guard
    accepts today's recipe instead of refusing the curve stage."""
    import io
    import tarfile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_run

    from art_adp.apps.reproduce import MnistRecipe

    old = {"runs": 10, "iterations": 40, "bpda_iterations": 40, "eot": 15, "full_iterations": 40, "full_eot": 15,
           "seed": 0}  # fmt: skip
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = json.dumps(old).encode()
        info = tarfile.TarInfo("mnist/recipe.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "state.tar.part00").write_bytes(buf.getvalue())
    assert device_run.unpack_state(tmp_path / "src", tmp_path)
    new = json.loads((tmp_path / "mnist" / "settings.json").read_text())
    assert not (tmp_path / "mnist" / "recipe.json").exists()
    assert new == {"ensemble_size": 10, "max_iter": 40, "bpda_max_iter": 40, "eot_samples": 15, "full_max_iter": 40,
                   "full_eot_samples": 15, "seed": 0}  # fmt: skip
    assert set(new) <= set(MnistRecipe.__dataclass_fields__)


def test_the_cifar10_parts_commands_parse(tmp_path):
    """Part cifar10's GPU-sized levers calls parse, at the paper's BPDA budget, with the denoiser rows only."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_run

    from art_adp.apps.cli import build_parser

    calls = device_run.cifar10_commands(tmp_path, tmp_path, smoke=False)
    assert [name for name, _ in calls] == ["cifar10-bpda", "cifar10-pgd", "cifar10-apgd"]
    for _, cmd in calls:
        args = vars(build_parser().parse_args(cmd[3:]))
        assert (args["dataset"], args["device"], args["config.models"]) == ("cifar10", "cuda", ["denoiser"])
        assert args["config.settings"] == ["released (T 10, λ 0.05)"] and args["config.n_examples"] == 200
    bpda = vars(build_parser().parse_args(calls[0][1][3:]))
    assert (bpda["config.attacks"], bpda["config.max_iter"], bpda["config.eot_samples"]) == (["bpda-eot"], 40, 15)


def test_the_cifar10_data_that_travels_is_the_development_split_and_a_slice_of_training(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_run
    import numpy as np

    from art_adp.data import load_cifar10
    from test_data import _write_cifar10

    _write_cifar10(tmp_path / "full" / "cifar-10-batches-py", n=5)
    import pickle

    with open(tmp_path / "full" / "cifar-10-batches-py" / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"airplane"] * 10}, f)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("resnet20.safetensors", "tiniest.pt", "adv-resnet20.safetensors", "adv-resnet20.last.safetensors"):
        (run / name).write_bytes(b"x")
    (tmp_path / "den.safetensors").write_bytes(b"d")
    device_run.cifar10_data(tmp_path / "full", run, tmp_path / "den.safetensors", tmp_path / "out", per_batch=2)
    full, small = load_cifar10(tmp_path / "full"), load_cifar10(tmp_path / "out" / "cifar10")
    np.testing.assert_array_equal(small.x_test, full.x_test)  # the development split, whole
    assert len(small.x_train) == 10 and np.array_equal(small.x_train[:2], full.x_train[:2])
    carried = sorted(p.name for p in (tmp_path / "out" / "cifar10-run").iterdir())
    assert carried == ["adv-resnet20.safetensors", "denoiser.safetensors", "resnet20.safetensors", "tiniest.pt"]
