"""The provenance record every result file carries (art_adp.runs.provenance)."""

import hashlib
import subprocess

import numpy as np
import pytest
import torch

from art_adp import NCSNv2, __version__, load_score_model, save_score_model
from art_adp.runs import provenance as provenance_module
from art_adp.runs.provenance import MODELS_HASH, code_diff, code_version, device_description, provenance
from art_adp.runs.records import array_sha256, module_sha256, weights_sha256


def test_provenance_hashes_checkpoints_and_modules_alike_and_names_the_run(tmp_path):
    net = NCSNv2(1, 8, ngf=4)
    path = tmp_path / "score.safetensors"
    save_score_model(net, path)
    loaded = load_score_model(path)
    p = provenance(wall_time_s=12.345, device="cpu", models={"file": path, "net": loaded}, command="art-adp demo")
    assert {"command", "code_version", "models", "models_hash", "device", "wall_time_s"} <= set(p)
    # one method: the weights' SHA-256, whether the model is given as its checkpoint file or as the loaded module
    assert p["models"]["file"] == p["models"]["net"] == module_sha256(net)
    assert p["models"]["file"] != hashlib.sha256(path.read_bytes()).hexdigest()  # not the file's bytes
    assert p["models_hash"] == MODELS_HASH == "SHA-256 of the weights (state dict)"
    assert p["wall_time_s"] == 12.3 and p["command"] == "art-adp demo"
    assert p["device"].startswith("CPU ") and f"torch {torch.__version__}" in p["device"]
    with torch.no_grad():
        loaded.begin_conv.weight += 1  # other weights, another hash
    assert provenance(wall_time_s=0, models={"net": loaded})["models"]["net"] != p["models"]["file"]


def test_provenance_records_a_digest_of_the_data_measured():
    x, y = np.zeros((3, 1, 2, 2), np.float32), np.array([0, 1, 2])
    assert "data_sha256" not in provenance(wall_time_s=0)
    assert provenance(wall_time_s=0, data=(x, y))["data_sha256"] == array_sha256(x, y)  # the records' digest
    assert provenance(wall_time_s=0, data=(x + 1 / 255, y))["data_sha256"] != array_sha256(x, y)  # other images
    assert provenance(wall_time_s=0, data=(x, y[::-1]))["data_sha256"] != array_sha256(x, y)  # other labels


def test_weights_hash_ignores_the_header_and_refuses_a_foreign_file(tmp_path):
    net = NCSNv2(1, 8, ngf=4)
    save_score_model(net, tmp_path / "a.safetensors")
    save_score_model(net, tmp_path / "b.safetensors", step=7)  # another header, the same weights
    a, b = (tmp_path / "a.safetensors").read_bytes(), (tmp_path / "b.safetensors").read_bytes()
    assert a != b and weights_sha256(tmp_path / "a.safetensors") == weights_sha256(tmp_path / "b.safetensors")
    (tmp_path / "c.bin").write_bytes(b"abc")
    with pytest.raises(ValueError, match="c.bin is not a safetensors file"):
        weights_sha256(tmp_path / "c.bin")


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_uncommitted_code_leaves_its_diff_in_the_record(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "start")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "code")
    monkeypatch.setattr(provenance_module, "_PACKAGE", repo)
    clean = provenance(wall_time_s=1, command="c")
    assert not clean["code_version"].endswith("-dirty)") and "code_diff" not in clean
    (repo / "code.py").write_text("x = 2\n")
    dirty = provenance(wall_time_s=1, command="c")
    assert dirty["code_version"].endswith("-dirty)")
    assert "-x = 1\n+x = 2\n" in dirty["code_diff"] and dirty["code_diff"] == code_diff()
    assert dirty["code_diff_sha256"] == hashlib.sha256(dirty["code_diff"].encode()).hexdigest()


def test_code_version_names_the_package_version():
    assert code_version().startswith(f"art-adp {__version__}")


def test_device_description_counts_threads(one_thread):
    assert "1 thread(s)" in device_description("cpu")


def test_a_run_that_outlives_its_checkout_keeps_the_code_it_started_with(monkeypatch):
    monkeypatch.setattr(provenance_module, "code_version", lambda: "art-adp 9.9 (bbbbbbb)")
    moved = provenance(wall_time_s=1, command="c", started_at="art-adp 9.9 (aaaaaaa)")
    assert (moved["code_version"], moved["code_version_at_end"]) == ("art-adp 9.9 (aaaaaaa)", "art-adp 9.9 (bbbbbbb)")
    still = provenance(wall_time_s=1, command="c", started_at="art-adp 9.9 (bbbbbbb)")
    assert still["code_version"] == "art-adp 9.9 (bbbbbbb)" and "code_version_at_end" not in still


def test_a_run_started_on_uncommitted_code_carries_the_diff_it_started_with(monkeypatch):
    """A run that started dirty and ended clean (the change committed meanwhile) keeps the diff it loaded; without
    it the result could not carry its code, and provenance refuses."""
    monkeypatch.setattr(provenance_module, "code_version", lambda: "art-adp 9.9 (bbbbbbb)")
    started = provenance(wall_time_s=1, command="c", started_at="art-adp 9.9 (aaaaaaa-dirty)", started_diff="-a\n+b\n")
    assert started["code_version"] == "art-adp 9.9 (aaaaaaa-dirty)" and started["code_diff"] == "-a\n+b\n"
    assert started["code_diff_sha256"] == hashlib.sha256(b"-a\n+b\n").hexdigest()
    with pytest.raises(ValueError, match="pass started_diff=code_diff"):
        provenance(wall_time_s=1, command="c", started_at="art-adp 9.9 (aaaaaaa-dirty)")


def test_device_description_names_a_cap_on_the_kernels_instruction_set(monkeypatch, one_thread):
    """Weights depend on the kernels, not the processor: a run with its kernels capped (ATEN_CPU_CAPABILITY, oneDNN's
    or MKL's cap) says so, with the set torch dispatches to; an uncapped run names none."""
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
        monkeypatch.delenv(name, raising=False)
    assert "kernels" not in device_description("cpu")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    kernels = torch.backends.cpu.get_cpu_capability()
    assert f"; kernels {kernels} (ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2); 1 thread(s)" in device_description("cpu")
