"""EOTClassifier: exact EOT predictions and gradients, reproducibility, errors, devices."""

import copy
import re

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2
from art_adp.defended import aggregate_draws

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    score = NCSNv2(1, 8, ngf=4)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10))
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1)).numpy()
    y = np.eye(10, dtype=np.float32)[[0, 1, 2, 3, 4, 5]]
    return score, clf, x, y


def build(nets, device="cpu", seed=0, nb=4, gradient="bpda", **kwargs):
    """The wrapped ART classifier (one draw per call) and its EOTClassifier, sharing one seeded purifier."""
    score, clf, _, _ = nets
    score, clf = copy.deepcopy(score), copy.deepcopy(clf)
    purifier = ADPPurifier(score, steps=2, tau=0.0, gradient=gradient, device_type="gpu" if device == "cuda" else "cpu",
                           generator=torch.Generator(device=device).manual_seed(seed))
    art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                            clip_values=(0.0, 1.0), preprocessing_defences=[purifier],
                            device_type="gpu" if device == "cuda" else "cpu")
    return art, EOTClassifier(art, ensemble_size=nb, **kwargs), purifier


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggregate", ["softmax", "logits", "vote"])
def test_predict_is_the_ensemble_of_per_draw_predictions(nets, device, aggregate):
    _, _, x, _ = nets
    art, eot, purifier = build(nets, device, nb=5, aggregate=aggregate, batch_size=len(x))
    purifier.generator.manual_seed(11)
    scores = eot.predict(x)
    purifier.generator.manual_seed(11)
    logits = torch.from_numpy(np.stack([art.predict(x) for _ in range(5)]))  # five single draws, one after another
    probs = logits.softmax(-1).mean(0)
    assert scores.shape == (6, 10) and scores.dtype == np.float32
    if aggregate == "softmax":
        assert np.allclose(np.exp(scores), probs.numpy(), atol=1e-5)
    elif aggregate == "logits":
        assert np.allclose(scores, logits.mean(0).numpy(), atol=1e-5)
    else:
        votes = np.stack([np.bincount(row, minlength=10) for row in logits.argmax(-1).T.numpy()])
        assert np.array_equal(scores.argmax(1), (votes + probs.numpy()).argmax(1))
        assert np.allclose(np.exp(scores), (votes + probs.numpy()) / 6, atol=1e-5)


def test_vote_breaks_ties_by_the_averaged_probabilities():
    logits = torch.tensor([[[5.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]])  # one vote each for classes 0 and 1
    scores = aggregate_draws(logits, "vote")
    assert scores.argmax().item() == 0  # class 0 has the larger mean probability
    assert torch.exp(scores).sum().item() == pytest.approx(1.0, abs=1e-6)
    assert aggregate_draws(torch.tensor([[[0.0, 9.0, 0.0]], [[0.0, 0.0, 1.0]], [[0.0, 0.0, 1.0]]]),
                           "vote").argmax().item() == 2  # two votes beat one confident draw


@pytest.mark.fp32_identity
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_loss_gradient_is_the_mean_of_per_draw_gradients(nets, device, gradient):
    _, _, x, y = nets
    art, eot, purifier = build(nets, device, nb=4, gradient=gradient, batch_size=len(x))
    purifier.generator.manual_seed(3)
    grad = eot.loss_gradient(x, y)
    purifier.generator.manual_seed(3)
    expected = np.mean([art.loss_gradient(x, y) for _ in range(4)], axis=0)
    assert grad.shape == x.shape and np.abs(grad).max() > 1e-4
    assert np.allclose(grad, expected, rtol=1e-4, atol=1e-7)
    single = art.loss_gradient(x, y)
    assert not np.allclose(grad, single, rtol=1e-2, atol=1e-6)  # it is not just one draw


@pytest.mark.fp32_identity
def test_chunking_does_not_change_the_draws_on_cpu(nets):
    _, _, x, y = nets
    art, eot, purifier = build(nets, nb=3, batch_size=7)  # chunks straddle draws
    purifier.generator.manual_seed(5)
    grad, probs = eot.loss_gradient(x, y), None
    purifier.generator.manual_seed(5)
    expected = np.mean([art.loss_gradient(x, y) for _ in range(3)], axis=0)
    assert np.allclose(grad, expected, rtol=1e-5, atol=1e-8)
    purifier.generator.manual_seed(6)
    probs = np.exp(eot.predict(x))
    purifier.generator.manual_seed(6)
    expected = torch.from_numpy(np.stack([art.predict(x) for _ in range(3)])).softmax(-1).mean(0).numpy()
    assert np.allclose(probs, expected, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("label", [None, 7, [1, 2, 3, 4, 5, 6]])
def test_class_gradient_is_the_mean_of_per_draw_class_gradients(nets, device, label):
    _, _, x, _ = nets
    art, eot, purifier = build(nets, device, nb=3, batch_size=len(x))
    purifier.generator.manual_seed(4)
    grad = eot.class_gradient(x, label=label)
    purifier.generator.manual_seed(4)
    expected = np.mean([art.class_gradient(x, label=label) for _ in range(3)], axis=0)
    assert grad.shape == ((6, 10, 1, 8, 8) if label is None else (6, 1, 1, 8, 8))
    assert np.allclose(grad, expected, rtol=1e-4, atol=1e-7)


def test_loss_gradient_accepts_tensors_and_index_labels(nets):
    _, _, x, y = nets
    _, eot, purifier = build(nets, nb=2)
    purifier.generator.manual_seed(1)
    from_numpy = eot.loss_gradient(x, y)
    purifier.generator.manual_seed(1)
    from_torch = eot.loss_gradient(torch.from_numpy(x), torch.from_numpy(y.argmax(1)).int())
    assert isinstance(from_torch, torch.Tensor) and np.allclose(from_torch.numpy(), from_numpy)


@pytest.mark.fp32_identity
def test_full_eot_gradient_matches_finite_differences_with_fixed_noise(nets):
    _, _, x, y = nets
    x, y = x[:2], y[:2]
    _, eot, purifier = build(nets, nb=3, gradient="full")
    purifier.generator.manual_seed(9)
    grad = eot.loss_gradient(x, y)
    art_loss = torch.nn.CrossEntropyLoss()

    def loss(xv: np.ndarray) -> float:  # the same three draws every time
        purifier.generator.manual_seed(9)
        logits = torch.from_numpy(eot.draw_logits(xv, 3).numpy()).double()
        return float(np.mean([art_loss(z, torch.from_numpy(y.argmax(1))) for z in logits]))

    for seed in range(2):
        v = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        v /= np.linalg.norm(v)
        fd = (loss(x + 1e-2 * v) - loss(x - 1e-2 * v)) / 2e-2
        assert float((grad * v).sum()) == pytest.approx(fd, rel=0.05, abs=1e-4)


def test_a_seeded_purifier_makes_predictions_and_gradients_reproducible(nets):
    _, _, x, y = nets
    _, eot, purifier = build(nets, nb=2)
    purifier.generator.manual_seed(42)
    first = eot.predict(x), eot.loss_gradient(x, y)
    purifier.generator.manual_seed(42)
    again = eot.predict(x), eot.loss_gradient(x, y)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    later = eot.predict(x), eot.loss_gradient(x, y)  # the stream moved on: new draws
    assert not np.array_equal(first[0], later[0]) and not np.array_equal(first[1], later[1])


def test_bpda_eot_gradient_agrees_with_defended_model(nets):
    score, clf, x, y = nets
    _, eot, purifier = build(nets, nb=3, aggregate="logits", batch_size=18)
    purifier.generator.manual_seed(2)
    grad = eot.class_gradient(x, label=y.argmax(1))[:, 0]
    purifier.generator.manual_seed(2)
    xg = torch.from_numpy(x).requires_grad_(True)
    model = DefendedModel(eot.classifier.model, purifier, ensemble_size=3, aggregate="logits")
    model(xg).gather(1, torch.from_numpy(y.argmax(1))[:, None]).sum().backward()
    assert np.allclose(grad, xg.grad.numpy(), rtol=1e-5, atol=1e-8)  # mean logits: the same expectation


def test_model_is_the_defended_ensemble_used_by_rebuilt_estimators(nets):
    _, _, x, _ = nets
    _, eot, purifier = build(nets, nb=4, eot_samples=2)
    assert isinstance(eot.model, DefendedModel) and eot.model.ensemble_size == 2
    eot.set_params(eot_samples=5)
    assert eot.model.ensemble_size == 5 and eot.eot_samples == 5
    purifier.generator.manual_seed(0)
    with torch.no_grad():
        out = eot.model(torch.from_numpy(x))
    assert torch.allclose(out.exp().sum(1), torch.ones(6), atol=1e-5)


def test_empty_batches_give_empty_outputs(nets):
    _, eot, _ = build(nets)
    empty = np.zeros((0, 1, 8, 8), np.float32)
    assert eot.predict(empty).shape == (0, 10)
    assert eot.loss_gradient(empty, np.zeros((0, 10), np.float32)).shape == (0, 1, 8, 8)
    assert eot.class_gradient(empty).shape == (0, 10, 1, 8, 8)


@pytest.mark.parametrize("kwargs, message", [
    ({"ensemble_size": 0}, "ensemble_size must be an integer >= 1, got 0."),
    ({"eot_samples": 2.5}, "eot_samples must be an integer >= 1, got 2.5."),
    ({"batch_size": True}, "batch_size must be an integer >= 1, got True."),
    ({"aggregate": "max"}, "aggregate must be one of 'softmax', 'logits', 'vote', got 'max'."),
])
def test_constructor_errors(nets, kwargs, message):
    art, _, _ = build(nets)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        EOTClassifier(art, **kwargs)


def test_input_errors(nets):
    _, _, x, y = nets
    art, eot, _ = build(nets)
    with pytest.raises(ValueError, match=re.escape("classifier must be an ART PyTorchClassifier, got Sequential.")):
        EOTClassifier(art.model)
    with pytest.raises(ValueError, match=re.escape("x must have shape (N, 1, 8, 8), got (6, 64).")):
        eot.predict(x.reshape(6, 64))
    with pytest.raises(ValueError, match="x must hold floating-point images, got torch.uint8"):
        eot.predict((x * 255).astype(np.uint8))
    with pytest.raises(ValueError, match=re.escape("x and y must have the same length, got 6 and 5.")):
        eot.loss_gradient(x, y[:5])
    with pytest.raises(ValueError, match=re.escape("label must be None, a class index in [0, 10) or 6 such indices")):
        eot.class_gradient(x, label=10)
    with pytest.raises(ValueError, match="divide 0-255 images by 255"):
        eot.predict(x * 255)
    with pytest.raises(ValueError, match=re.escape("eot_samples must be an integer >= 1, got 0.")):
        eot.set_params(eot_samples=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_every_tensor_the_wrapper_makes_is_on_the_classifiers_device(nets):
    from torch.overrides import TorchFunctionMode

    _, _, x, y = nets
    _, eot, _ = build(nets, "cuda", nb=3)
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and func is not torch.Tensor.cpu:
                seen.append((getattr(func, "__name__", str(func)), out.device.type))
            return out

    with Record():
        eot.predict(x)
        eot.loss_gradient(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
        eot.class_gradient(x, label=3)
    off = [name for name, device in seen if device != "cuda"]
    assert seen and not off, off


def test_attacks_are_bit_for_bit_reproducible_on_cpu(nets):
    from art.attacks.evasion import ProjectedGradientDescent

    _, _, x, y = nets
    _, eot, purifier = build(nets, nb=2, gradient="full")
    runs = []
    for _ in range(2):
        purifier.generator.manual_seed(0)
        np.random.seed(0)  # ART's random start draws from numpy's global generator
        attack = ProjectedGradientDescent(eot, eps=0.1, eps_step=0.05, max_iter=3, num_random_init=1, verbose=False)
        runs.append(attack.generate(x, y=y))
    assert np.array_equal(runs[0], runs[1]) and np.abs(runs[0] - x).max() > 0
