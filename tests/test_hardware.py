"""The precision and the thread count chosen from the hardware (art_adp._hardware): bf16 only where it is native,
an explicit precision always wins, a resume keeps its own; threads from affinity, cgroup quota and load; the command's
first line and its result file name the choice."""

import json

import pytest
import torch

from art_adp import _hardware as hardware
from art_adp.apps import commands
from art_adp.apps.cli import main
from art_adp.runs.provenance import device_description

AVX2 = {"AVX2": True, "AVX-512": False, "AVX-512-BF16": False, "AMX": False}
COOPER_LAKE = {"AVX2": True, "AVX-512": True, "AVX-512-BF16": True, "AMX": False}
AMX_ONLY = {"AVX2": True, "AVX-512": True, "AVX-512-BF16": False, "AMX": True}
EMULATED = (
    "auto: this CPU has no native bf16 (AVX2; no AVX-512, AVX-512-BF16, AMX); bf16 would be emulated, about 10x slower"
)


@pytest.mark.parametrize("precision, features, held, expected", [
    ("auto", AVX2, None, ("fp32", EMULATED)),
    ("auto", COOPER_LAKE, None, ("bf16", "auto: this CPU has native bf16 (AVX2, AVX-512, AVX-512-BF16; no AMX)")),
    ("auto", AMX_ONLY, None, ("bf16", "auto: this CPU has native bf16 (AVX2, AVX-512, AMX; no AVX-512-BF16)")),
    ("fp32", COOPER_LAKE, None, ("fp32", "as given")),  # an explicit precision always wins
    ("bf16", AVX2, None, ("bf16", "as given")),
    ("bf16", AVX2, "fp32", ("bf16", "as given")),  # (the trainer then refuses the switch)
    ("auto", AVX2, "bf16", ("bf16", "auto: the run being resumed was trained in bf16")),
    ("auto", COOPER_LAKE, "fp32", ("fp32", "auto: the run being resumed was trained in fp32")),
])  # fmt: skip
def test_auto_is_bf16_only_where_native_and_explicit_wins(precision, features, held, expected):
    assert hardware.resolve_precision(precision, "cpu", held=held, features=features) == expected


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match=r"^precision must be 'auto', 'fp32' or 'bf16', got 'fp16'\.$"):
        hardware.resolve_precision("fp16", "cpu")


@pytest.mark.parametrize("supported", [True, False])
def test_on_cuda_auto_follows_the_gpus_bf16_support(supported, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")
    assert hardware.native_bf16("cuda") is supported
    expected = ("bf16", "auto: NVIDIA H100 computes in bf16 natively") if supported else (
        "fp32", "auto: NVIDIA H100 has no native bf16")
    assert hardware.resolve_precision("auto", "cuda", features=COOPER_LAKE) == expected


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile

processor\t: 1
model name\t: another
"""


def test_without_torchs_queries_the_cpu_flags_answer(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    for query in ("_is_avx2_supported", "_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.delattr(torch.cpu, query, raising=False)
    features = hardware.cpu_features(tmp_path / "cpuinfo")
    assert features == {"AVX2": True, "AVX-512": True, "AVX-512-BF16": True, "AMX": True}
    assert hardware.native_bf16("cpu", features=features)
    assert hardware.instruction_sets(features) == "AVX2, AVX-512, AVX-512-BF16, AMX"
    assert hardware.cpu_model(tmp_path / "cpuinfo") == "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143)"
    (tmp_path / "cpuinfo").write_text("flags\t: sse2 avx2\n")
    assert hardware.cpu_features(tmp_path / "cpuinfo") == AVX2 and not hardware.native_bf16("cpu", features=AVX2)


def test_torchs_queries_come_first(monkeypatch, tmp_path):
    (tmp_path / "cpuinfo").write_text("flags\t: avx2\n")  # the flags say no bf16; torch says yes
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert hardware.cpu_features(tmp_path / "cpuinfo")["AVX-512-BF16"] is True


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])  # fmt: skip
def test_cgroup_quota_v2_and_v1(files, quota, tmp_path):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert hardware.cgroup_cpu_quota(tmp_path) == quota


@pytest.mark.parametrize("affinity, quota, load, cpu_count, threads", [
    (2, None, 0.0, 2, 2),  # an idle 2-core machine: both
    (2, None, 0.4, 2, 2),  # round(0.4) = 0 busy
    (2, None, 1.2, 2, 1),  # another job on one core: one thread (two ran 25-50x slower there)
    (2, None, 3.0, 2, 1),  # overloaded: still one
    (8, 4.0, 0.0, 64, 4),  # the quota caps the affinity
    (8, 1.5, 0.0, 8, 1),  # 1.5 cores of quota: one thread
    (16, 0.5, 0.0, 16, 1),  # under one core: one
    (64, None, 16.4, 64, 48),
    (4, None, 40.0, 64, 1),  # a container's view of the host's load: 40 × 4/64 = 2.5 -> 3 busy of 4
    (4, None, 20.0, 64, 3),  # 20 × 4/64 = 1.25 -> 1 busy
])  # fmt: skip
def test_default_threads_are_the_free_cores(affinity, quota, load, cpu_count, threads):
    assert hardware.default_threads(affinity=affinity, quota=quota, load=load, cpu_count=cpu_count)[0] == threads


def test_default_threads_say_why():
    assert hardware.default_threads(affinity=8, quota=4.0, load=8.0, cpu_count=16) == (
        2, "auto: 4 core(s) for this process (affinity 8, cgroup quota 4), 2 busy (load 8.00)")


@pytest.fixture(name="keep_threads")
def fixture_keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_threads_explicit_then_omp_then_the_rule_and_run_sets_them(keep_threads, monkeypatch):
    monkeypatch.setattr(hardware, "default_threads", lambda: (1, "auto: rule"))
    torch.set_num_threads(2)
    assert hardware.choose_threads(3) == (3, "as given")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert hardware.choose_threads(None) == (2, "OMP_NUM_THREADS=2")  # torch's, which follows the variable
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert hardware.choose_threads(None) == (1, "auto: rule")
    assert commands.run(torch.get_num_threads, None) == 1  # the command runs with the rule's count
    assert commands.run(torch.get_num_threads, None, threads=2) == 2


@pytest.mark.parametrize("features, precision", [(AVX2, "fp32"), (COOPER_LAKE, "bf16")])
def test_train_denoiser_says_and_records_its_choice(features, precision, tmp_path, monkeypatch, capsys, keep_threads):
    monkeypatch.setattr(hardware, "cpu_features", lambda: features)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = ["train-denoiser", "--run-dir", str(tmp_path), "--minutes", "1e-6", "--milestone", "1", "--batch-size",
            "4", "--channels", "4,4", "--device", "cpu", "--quiet", "--precision", "auto"]  # fmt: skip
    assert main(argv) == 0
    reason = hardware.resolve_precision("auto", "cpu", features=features)[1]
    assert capsys.readouterr().out.splitlines()[0] == f"precision: {precision} ({reason}); threads: 1"
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["settings"]["precision"], result["precision_reason"]) == (precision, reason)
    assert f"1 thread(s), {precision}, load average" in result["provenance"]["device"]
    assert main([*argv[:-2], "--precision", "fp32" if precision == "bf16" else "bf16"]) == 2  # explicit: other ones
    assert "holds a run with other settings" in capsys.readouterr().err
    assert main(argv) == 0  # resumed: auto keeps the run's precision, whatever the CPU
    assert capsys.readouterr().out.splitlines()[0].startswith(
        f"precision: {precision} (auto: the run being resumed was trained in {precision})")


def test_provenance_names_the_cpu_its_instruction_sets_threads_and_precision(monkeypatch, keep_threads):
    monkeypatch.setattr(hardware, "cpu_features", lambda: AVX2)
    torch.set_num_threads(1)
    text = device_description("cpu", precision="fp32")
    assert text.startswith(f"CPU {hardware.cpu_model()}; AVX2; no AVX-512, AVX-512-BF16, AMX; 1 thread(s), fp32, ")
    assert text.endswith(f", torch {torch.__version__}")


def test_bf16_gradient_passes_are_refused_where_emulated_naming_the_processor(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_model", lambda: "AMD EPYC 7B12 (family 23, model 49)")
    with pytest.raises(ValueError, match=r"^bf16 is not native on this CPU, AMD EPYC 7B12 \(family 23, model 49\) "
                                         r"\(AVX2; no AVX-512, AVX-512-BF16, AMX\): torch would emulate it"):
        hardware.require_native("bf16", "cpu", features=AVX2)
    assert hardware.require_native("bf16", "cpu", features=AVX2, force=True) == "bf16"  # forced
    assert hardware.require_native("bf16", "cpu", features=COOPER_LAKE) == "bf16"
    assert hardware.require_native("fp32", "cpu", features=AVX2) == "fp32"
    with pytest.raises(ValueError, match="precision must be 'fp32' or 'bf16', got 'auto'"):
        hardware.require_native("auto", "cpu")
    with hardware.autocast("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with hardware.autocast("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu")
