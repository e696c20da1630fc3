"""Tiny digits models shared by tests/test_attacks.py and tests/test_evaluate.py (trained in about a second)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from art_adp import NCSNv2
from art_adp.data import load_digits
from art_adp.models import MLP, train_classifier


@functools.lru_cache(maxsize=1)
def tiny_models():
    """(MLP trained on digits, untrained NCSNv2(1, 8, ngf=4), x_test, y_test)."""
    torch.manual_seed(0)
    data = load_digits(seed=0)
    mlp = train_classifier(MLP(1, 8, 10, hidden=(64,)), data.x_train, data.y_train, epochs=15, batch_size=64, lr=3e-3,
                           seed=0, progress=False)
    score = NCSNv2(1, 8, ngf=4).eval()
    return mlp.eval(), score, np.asarray(data.x_test, np.float32), np.asarray(data.y_test, np.int64)
