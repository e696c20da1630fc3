"""Shared test set-up. The suite runs in two pytest-xdist workers (``-n 2`` in setup.cfg): each worker computes with
one torch thread, so that the two workers do not oversubscribe a 2-core machine."""

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
