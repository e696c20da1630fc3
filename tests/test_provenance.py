"""The provenance record every result file carries (art_adp.runs.provenance)."""

import hashlib

import torch

from art_adp import __version__
from art_adp.runs.provenance import code_version, device_description, provenance
from art_adp.runs.records import module_sha256


def test_provenance_hashes_files_and_modules_and_names_the_run(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"abc")
    net = torch.nn.Linear(2, 1)
    p = provenance(wall_time_s=12.345, device="cpu", models={"file": path, "net": net}, command="art-adp demo")
    assert set(p) == {"command", "code_version", "models", "device", "wall_time_s"}
    assert p["models"]["file"] == hashlib.sha256(b"abc").hexdigest()
    assert p["models"]["net"] == module_sha256(net)
    assert p["wall_time_s"] == 12.3 and p["command"] == "art-adp demo"
    assert p["device"].startswith("CPU ") and f"torch {torch.__version__}" in p["device"]
    net.weight.data += 1  # other weights, another hash
    assert provenance(wall_time_s=0, models={"net": net})["models"]["net"] != p["models"]["net"]


def test_code_version_names_the_package_version():
    assert code_version().startswith(f"art-adp {__version__}")


def test_device_description_counts_threads(one_thread):
    assert "1 thread(s)" in device_description("cpu")
