"""Shared test set-up. The suite runs in two pytest-xdist workers (``-n 2`` in setup.cfg): each worker computes with
one torch thread, so that the two workers do not oversubscribe a 2-core machine."""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny networks gain nothing from intra-op threads, and spinning threads stall
    on a busy shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
