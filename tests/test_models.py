"""Tests of art_adp.models: shapes, config round trips, WRN size, and training on the scikit-learn digits."""
import copy
import json
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from art_adp.models import MLP, DigitsCNN, SmallCNN, WideResNet, evaluate_accuracy, train_classifier


def build(cls, seed=0, **kwargs):
    """Construct a model with a fixed initialisation, leaving the global RNG state untouched."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(**kwargs)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# (class, kwargs, input shape (N, C, H, W), K) -- small widths for speed
SHAPE_CASES = [
    (MLP, dict(hidden=(32,)), (3, 1, 28, 28), 10),
    (MLP, dict(in_channels=3, image_size=32, nb_classes=5, hidden=()), (3, 3, 32, 32), 5),
    (SmallCNN, dict(width=4, fc_width=16), (3, 1, 28, 28), 10),
    (SmallCNN, dict(in_channels=3, image_size=30, nb_classes=7, width=4, fc_width=16), (3, 3, 30, 30), 7),
    (DigitsCNN, dict(width=4), (3, 1, 8, 8), 10),
    (DigitsCNN, dict(nb_classes=3, width=2), (3, 1, 8, 8), 3),
    (WideResNet, dict(depth=10, widen_factor=1), (3, 3, 32, 32), 10),
    (WideResNet, dict(depth=16, widen_factor=1, nb_classes=100, in_channels=1, dropout=0.3), (3, 1, 16, 16), 100),
]
SHAPE_IDS = [f"{cls.__name__}-{i}" for i, (cls, *_rest) in enumerate(SHAPE_CASES)]


@pytest.mark.parametrize("cls, kwargs, shape, k", SHAPE_CASES, ids=SHAPE_IDS)
def test_output_shape_and_config_round_trip(cls, kwargs, shape, k):
    model = build(cls, **kwargs).eval()
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(x)
    assert out.shape == (shape[0], k)
    assert torch.isfinite(out).all()

    config = json.loads(json.dumps(model.config))  # JSON-serialisable
    clone = type(model)(**config)
    assert clone.config == model.config
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(clone.eval()(x), out)


def test_default_sizes():
    assert n_params(MLP()) == 669_706
    assert n_params(SmallCNN()) == 3_274_634
    assert n_params(DigitsCNN()) == 65_994


def test_wrn_28_10_parameter_count():
    model = WideResNet()  # WRN-28-10: widths 16, 160, 320, 640
    assert model.config == {"in_channels": 3, "image_size": 32, "nb_classes": 10, "depth": 28, "widen_factor": 10,
                            "dropout": 0.0}
    assert abs(n_params(model) - 36.48e6) / 36.48e6 < 0.01


BAD_ARGS = [
    (WideResNet, dict(depth=27), "depth must satisfy (depth - 4) % 6 == 0 with depth >= 10 (10, 16, 22, 28, ...), got 27"),
    (WideResNet, dict(depth=4), "depth must satisfy (depth - 4) % 6 == 0 with depth >= 10 (10, 16, 22, 28, ...), got 4"),
    (WideResNet, dict(depth=10, dropout=1.0), "dropout must be a number in [0, 1), got 1.0."),
    (WideResNet, dict(depth=10, widen_factor=0), "widen_factor must be an integer >= 1, got 0."),
    (MLP, dict(hidden=(8, 0)), "hidden[1] must be an integer >= 1, got 0."),
    (MLP, dict(nb_classes=2.5), "nb_classes must be an integer >= 1, got 2.5."),
    (SmallCNN, dict(image_size=3), "image_size must be at least 4 (two 2x2 max-pools), got 3"),
    (SmallCNN, dict(width=True), "width must be an integer >= 1, got True."),
    (DigitsCNN, dict(width=-1), "width must be an integer >= 1, got -1."),
]


@pytest.mark.parametrize("cls, kwargs, message", BAD_ARGS)
def test_invalid_constructor_args(cls, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**kwargs)


# ----------------------------------------------------------------------------------------------- training on digits


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    x = (data.data / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    return train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=0)


def test_digits_cnn_learns_digits(digits, one_thread):
    x_train, x_test, y_train, y_test = digits
    model = build(DigitsCNN)
    rng_state = torch.random.get_rng_state()
    out = train_classifier(model, x_train, y_train, epochs=10, batch_size=64, seed=0, x_val=x_test, y_val=y_test)
    assert out is model and not model.training
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # global RNG neither reseeded nor consumed
    accuracy = evaluate_accuracy(model, torch.from_numpy(x_test), torch.from_numpy(y_test), batch_size=100)
    assert accuracy >= 0.95
    assert not model.training


def test_training_is_reproducible_given_seed(digits, one_thread):
    x_train, _, y_train, _ = digits
    x_train, y_train = x_train[:300], y_train[:300]
    init = build(DigitsCNN, width=8)

    def trained(seed):
        return train_classifier(copy.deepcopy(init), x_train, y_train, epochs=2, batch_size=32, seed=seed,
                                progress=False).state_dict()

    a, b, c = trained(1), trained(1), trained(2)
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert not all(torch.equal(a[key], c[key]) for key in a)


def _bad(x=None, y=None, **kwargs):
    xs = np.full((4, 1, 8, 8), 0.5, np.float32) if x is None else x
    ys = np.array([0, 1, 2, 3]) if y is None else y
    return dict(x_train=xs, y_train=ys, **kwargs)


TRAIN_ERRORS = [
    (_bad(x=np.ones((4, 64), np.float32)), "x_train must have shape (N, C, H, W), got (4, 64)"),
    (_bad(x=np.ones((4, 1, 8, 8), np.uint8)), "x_train must be a floating-point array, got dtype torch.uint8"),
    (_bad(y=np.zeros((4, 1), np.int64)), "y_train must have shape (N,), got (4, 1)"),
    (_bad(y=np.array([0, 1, 2])), "x_train and y_train must have the same length, got 4 and 3"),
    (_bad(x=np.ones((0, 1, 8, 8), np.float32), y=np.zeros(0, np.int64)), "x_train and y_train must not be empty"),
    (_bad(x=np.full((4, 1, 8, 8), np.nan, np.float32)), "x_train must be finite, got NaN or infinite values"),
    (_bad(x=np.full((4, 1, 8, 8), 255.0, np.float32)), "x_train must lie in [0, 1], got values in [255, 255]"),
    (_bad(x=np.full((4, 1, 8, 8), -0.5, np.float32)), "x_train must lie in [0, 1], got values in [-0.5, -0.5]"),
    (_bad(y=np.array([0.0, 1.0, 2.0, 3.0])), "y_train must hold integer class labels, got dtype torch.float64"),
    (_bad(y=np.array([0, 1, 2, 10])), "y_train must hold class labels in [0, 10), got labels in [0, 10]"),
    (_bad(y=np.array([-1, 1, 2, 3])), "y_train must hold class labels in [0, 10), got labels in [-1, 3]"),
    (_bad(x_val=np.zeros((2, 1, 8, 8), np.float32)), "x_val and y_val must be given together"),
    (_bad(x_val=np.zeros((2, 1, 8, 8), np.float32), y_val=np.array([0, 11])),
     "y_val must hold class labels in [0, 10), got labels in [0, 11]"),
    (_bad(epochs=0), "epochs must be an integer >= 1, got 0."),
    (_bad(batch_size=1.5), "batch_size must be an integer >= 1, got 1.5."),
    (_bad(lr=-1e-3), "lr must be a number > 0, got -0.001."),
    (_bad(seed="0"), "seed must be an integer or None, got '0'."),
]


@pytest.mark.parametrize("kwargs, message", TRAIN_ERRORS)
def test_train_classifier_rejects_bad_input(kwargs, message):
    model = DigitsCNN(width=1)
    with pytest.raises(ValueError, match=re.escape(message)):
        train_classifier(model, progress=False, **kwargs)


def test_evaluate_accuracy_validates_and_counts():
    model = DigitsCNN(width=1).eval()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        predicted = model(x).argmax(dim=1)
    assert evaluate_accuracy(model, x, predicted, batch_size=4) == 1.0
    assert evaluate_accuracy(model, x.numpy(), ((predicted + 1) % 10).numpy()) == 0.0
    with pytest.raises(ValueError, match=re.escape("y must hold class labels in [0, 10), got labels in [0, 12]")):
        evaluate_accuracy(model, x, torch.tensor([0, 1, 2, 3, 4, 12]))
