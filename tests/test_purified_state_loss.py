"""DiffAttack's purified-state loss: its value by hand, its gradient against finite differences (gradcheck in float64
on a tiny purifier and classifier), a planted case where the classifier's loss is flat around every purified state so
PGD+EOT and APGD-EOT stay put while their -dev variants push the purified state out of the flat region, and every
purifier family in both gradient modes. Tiny models only."""

import re

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, DenoisedSmoothingPurifier, EOTClassifier, NCSNv2, ReverseDiffusionPurifier
from art_adp.attacks._core import cross_entropy
from art_adp.attacks.purified_state_loss import PurifiedStateLoss, deviation
from art_adp.score.unet import DenoiserUNet

EPS, SHIFT, START = 0.1, 0.2, 0.3


def test_deviation_and_the_loss_by_hand():
    purified = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]], [[[1.0, 0.0], [0.0, 0.0]]]])
    clean = torch.tensor([[[[0.2, 0.1], [0.5, 0.5]]], [[[0.0, 0.0], [0.0, 0.0]]]])
    torch.testing.assert_close(deviation(purified, clean), torch.tensor([0.5, 1.0]))  # sqrt(0.09 + 0.16), 1
    logits, y = torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([0, 1])
    ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    # the rows are attacked inputs near their clean ones, passed in another order: matched by nearest clean input
    inputs = torch.stack([clean[1] + 0.01, clean[0] - 0.01])
    loss = PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.5)
    out = loss((logits, purified.flip(0), inputs), y)
    torch.testing.assert_close(out, ce + 0.5 * torch.tensor([1.0, 0.5]))
    torch.testing.assert_close(PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.0)(
        (logits, purified, clean), y), ce)


def test_gradient_against_finite_differences():
    torch.manual_seed(0)
    w_p, w_c = torch.randn(4, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    clean = torch.rand(2, 1, 2, 2, dtype=torch.float64)
    y = torch.tensor([0, 2])
    loss = PurifiedStateLoss(cross_entropy, reference=clean, dev_weight=0.7)

    def objective(x):  # a tiny smooth "purifier" and classifier, the loss of their states
        purified = torch.tanh(x.flatten(1) @ w_p.T).view_as(x)
        return loss((purified.flatten(1) @ w_c.T, purified, x), y)

    x = (clean + 0.05 * torch.randn_like(clean)).requires_grad_(True)
    assert torch.autograd.gradcheck(objective, (x,), eps=1e-6, atol=1e-7)


class Shift(PreprocessorPyTorch):
    """A purifier that adds SHIFT to every pixel: its state moves with its input, one for one."""

    def __init__(self) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)

    def forward(self, x, y=None):
        return x + SHIFT, y


class Flat(torch.nn.Module):
    """Three classes (DLR needs three): class 0 until the mean pixel exceeds 0.55, then class 1; the loss is exactly
    flat below (a dead ReLU)."""

    def forward(self, z):
        live = torch.relu(z.flatten(1).mean(1) - 0.55)
        return torch.stack([torch.full_like(live, 0.5), 20.0 * live, torch.zeros_like(live)], 1)


def flat_estimator() -> PyTorchClassifier:
    return PyTorchClassifier(Flat(), torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                             clip_values=(0, 1), preprocessing_defences=[Shift()], device_type="cpu")


@pytest.mark.parametrize("old, new", [
    (lambda e: A.PGDEOT(e, eps=EPS, eps_step=0.025, max_iter=6, eot_samples=2),
     lambda e: A.PGDEOTDev(e, eps=EPS, eps_step=0.025, max_iter=6, eot_samples=2)),
    (lambda e: A.APGDEOT(e, eps=EPS, max_iter=6, eot_samples=2),
     lambda e: A.APGDEOTDev(e, eps=EPS, max_iter=6, eot_samples=2)),
], ids=["pgd-eot", "apgd-eot"])
def test_the_classifier_loss_is_flat_and_the_deviation_moves_the_purified_state_out(one_thread, old, new):
    est = flat_estimator()
    x, y = np.full((3, 1, 8, 8), START, np.float32), np.zeros(3, np.int64)  # purified 0.5: flat, class 0
    assert (est.predict(x).argmax(1) == 0).all()
    x_old = old(est).generate(x, y)
    assert (est.predict(x_old).argmax(1) == 0).all()  # no gradient: the old attack stays correct
    x_new = new(est).generate(x, y)
    assert np.abs(x_new - x).max() <= EPS + 1e-6
    clean = torch.from_numpy(x)
    assert (deviation(torch.from_numpy(x_new) + SHIFT, clean) > deviation(clean + SHIFT, clean)).all()
    assert (est.predict(x_new).argmax(1) == 1).all()  # the state moved to mean 0.6 > 0.55: broken


@pytest.fixture(scope="module")
def families():
    torch.manual_seed(0)
    net = DenoiserUNet(1, channels=(4, 8), emb_dim=8).eval()
    return {
        "adp": lambda: ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), sigma=0.1, steps=1, gradient_checkpointing=True,
                                   device_type="cpu"),
        "reverse-diffusion": lambda: ReverseDiffusionPurifier(net, sigma=0.3, steps=2, gradient_checkpointing=True,
                                                              device_type="cpu"),
        "denoised-smoothing": lambda: DenoisedSmoothingPurifier(net, sigma=0.3, device_type="cpu"),
    }


@pytest.mark.parametrize("family", ["adp", "reverse-diffusion", "denoised-smoothing"])
@pytest.mark.parametrize("attack", ["pgd", "apgd"])
@pytest.mark.parametrize("gradient", ["bpda", "full"])
def test_every_purifier_family_in_both_modes(one_thread, families, family, attack, gradient):
    torch.manual_seed(1)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()
    purifier = families[family]()
    est = PyTorchClassifier(clf, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3, clip_values=(0, 1),
                            preprocessing_defences=[purifier], device_type="cpu")
    x = np.random.default_rng(0).random((2, 1, 8, 8)).astype(np.float32)
    cls = A.PGDEOTDev if attack == "pgd" else A.APGDEOTDev
    kw = {"eps_step": 0.05} if attack == "pgd" else {}
    x_adv = cls(est, gradient=gradient, eps=0.1, max_iter=2, eot_samples=2, memory_budget=64, **kw).generate(
        x, np.array([0, 1]))
    assert np.abs(x_adv - x).max() <= 0.1 + 1e-6 and np.abs(x_adv - x).max() > 0
    assert purifier.gradient == "full"  # the purifier's own mode (the default), restored


def test_eot_classifier_states_need_a_loss_and_names_and_checks():
    est = flat_estimator()
    with pytest.raises(ValueError, match=re.escape("states=True needs a per-example loss of (logits, purified")):
        EOTClassifier(est, states=True)
    with pytest.raises(ValueError, match=f"^{re.escape('dev_weight must be a number >= 0, got -1.')}$"):
        A.PGDEOT(est, dev_weight=-1)
    assert (A.PGDEOTDev(est).name, A.PGDEOTDev(est, gradient="bpda").name, A.APGDEOTDev(est).name) == (
        "full-pgd-eot-dev", "bpda-eot-dev", "apgd-eot-dev")
    assert A.PGDEOT(est).dev_weight == 0.0 and A.PGDEOTDev(est).dev_weight == 1.0
