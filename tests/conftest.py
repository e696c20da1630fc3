"""Shared test set-up. The suite runs in two pytest-xdist workers (``-n 2`` in setup.cfg): each worker computes with
one torch thread, and so does every process a test starts (notebook kernels, the CLI, torchrun, the device-run
smoke test: they inherit ``OMP_NUM_THREADS``), so that the suite does not oversubscribe a 2-core machine, where
spinning threads slow everything several-fold."""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # for the processes the tests start
    os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny networks gain nothing from intra-op threads, and spinning threads stall
    on a busy shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny():
    """Forty random 1×8×8 images and a four-level σ schedule from 1 to 0.05: the score trainer's smallest problem."""
    from art_adp.score import geometric_sigmas

    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    return x, geometric_sigmas(1.0, 0.05, 4)


def pytest_addoption(parser):
    parser.addoption(
        "--attack-precision", choices=("fp32", "bf16"), default="fp32",
        help="run every test's attack gradient passes at this precision (art_adp.ensemble.gradient_precision; "
             "judgements stay fp32): `pytest --attack-precision bf16 tests/test_attacks.py ...` runs the planted "
             "attack tests under bf16")  # fmt: skip


@pytest.fixture(autouse=True)
def _attack_precision(request):
    """The gradient passes of the attacks a test runs at ``--attack-precision`` (fp32 by default: nothing changes);
    under bf16 the tests of gradient identities to float32 rounding (``fp32_identity``) are skipped: bf16 keeps 8
    significant bits."""
    from art_adp.ensemble import gradient_precision

    precision = request.config.getoption("--attack-precision")
    if precision != "fp32" and request.node.get_closest_marker("fp32_identity"):
        pytest.skip(f"a gradient identity to float32 rounding; --attack-precision {precision} rounds at ~4e-3")
    with gradient_precision(precision):
        yield
