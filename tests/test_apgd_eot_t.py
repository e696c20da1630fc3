"""APGD-EOT-T (AutoAttack's APGD-T against randomized defences): a planted classifier behind a random defence whose
top runner-up is a decoy -- CE and the untargeted DLR follow it and leave the image robust, APGD-EOT with them --
while the targeted DLR aimed at the second runner-up breaks it; each target attacks only the images the ones before
left unbroken; the targets are the top runner-ups of the clean mean softmax over EOT draws, in order (not of one
draw, not of the mean logits); messages. Tiny planted models only."""

import re

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp.attacks.apgd_eot_t import N_TARGET_CLASSES, targeted_dlr

EPS = 0.05
#: The decoy's slope: over the whole ε-ball its logit rises by 0.15, from −0.3 to −0.15, never above the true class's 0.
DECOY = 0.15 / EPS
#: The target's slope: from −6 at the image to +1 at u = −ε, above the true class's 0.
REACH = 7 / EPS


class Decoy(torch.nn.Module):
    """
    Five classes on 1×8×8 images of base value 0.3 (kind A) or 0.7 (kind B), true class 0, read from the mean offset
    u of the pixels from the base.

    Kind A: logits ``[0, −0.3 + DECOY·u, −6 − REACH·u, −8, −9]``. Class 1, the top runner-up, is a decoy: raising it
    (u up) never breaks the image. Class 2 breaks it at u < −6/7 ε. CE's gradient follows the decoy -- its weight
    p₁/p₂ = e^(5.7 + …) outweighs REACH/DECOY ≈ 47 wherever u > −0.27 ε -- and so does the untargeted DLR (the
    decoy is the largest other logit): both push u to +ε. The targeted DLR aimed at class 1 does too; aimed at class 2
    it pushes u to −ε, where class 2 wins by a logit of 1.

    Kind B: logits ``[0, −0.3 − 1.5/ε·u, −6, −8, −9]``: its top runner-up breaks it at u < −0.2 ε, and every loss
    finds it.
    """

    def forward(self, x):
        m = x.flatten(1).mean(1)
        kind_b = m > 0.5
        u = m - torch.where(kind_b, 0.7, 0.3)
        const = torch.ones_like(u)
        z1 = torch.where(kind_b, -0.3 - 1.5 / EPS * u, -0.3 + DECOY * u)
        z2 = torch.where(kind_b, -6 * const, -6 - REACH * u)
        return torch.stack([0 * const, z1, z2, -8 * const, -9 * const], 1)


class Jitter(PreprocessorPyTorch):
    """A random defence: adds N(0, s²) from its own generator."""

    def __init__(self, s: float = 0.01, seed: int = 7) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.s, self.generator = s, torch.Generator().manual_seed(seed)

    def forward(self, x, y=None):
        return x + self.s * torch.randn(x.shape, generator=self.generator), y


def estimator(model, defence, classes=5):
    return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=classes,
                             clip_values=(0, 1), preprocessing_defences=[defence], device_type="cpu")  # fmt: skip


def mean_softmax(est, x, draws=32):
    """The mean softmax of ``draws`` predictions of the defended estimator."""
    return np.mean([torch.softmax(torch.from_numpy(est.predict(x)), 1).numpy() for _ in range(draws)], 0)


KW = dict(eps=EPS, max_iter=10, eot_samples=4, seed=0)


def planted():
    x = np.full((3, 1, 8, 8), 0.3, np.float32)
    x[2] = 0.7  # kind B: broken through its top runner-up
    return estimator(Decoy(), Jitter()), x, np.zeros(3, np.int64)


def test_only_the_targeted_dlr_at_the_second_runner_up_breaks_the_decoy(one_thread):
    est, x, y = planted()
    assert mean_softmax(est, x).argmax(1).tolist() == [0, 0, 0]
    # APGD-EOT: CE, then DLR, both follow the decoy: the kind-A images stay robust (kind B breaks: the attack works)
    apgd = A.APGDEOT(est, **KW).generate(x, y)
    assert mean_softmax(est, apgd).argmax(1).tolist() == [0, 0, 1]
    assert ((apgd[:2] - x[:2]).reshape(2, -1).mean(1) > 0.9 * EPS).all()  # u at +ε: where the decoy led
    # APGD-EOT-T at the top runner-up alone (n_target_classes=1): the decoy again
    one = A.APGDEOTT(est, n_target_classes=1, **KW).generate(x, y)
    assert mean_softmax(est, one).argmax(1).tolist() == [0, 0, 1]

    attacked = []

    class Counting(A.APGDEOTT):
        def _loop(self, xb, yb, clip, offer):
            attacked.append((self._run, yb[:, 1].tolist()))
            return super()._loop(xb, yb, clip, offer)

    # the targets in turn: the decoy (class 1) first, then class 2 on the images it left unbroken -- the kind-A ones
    # only -- which it breaks at u = −ε; nothing is left for the third target
    adv = Counting(est, **KW).generate(x, y)
    assert mean_softmax(est, adv).argmax(1).tolist() == [2, 2, 1]
    np.testing.assert_allclose((adv[:2] - x[:2]).reshape(2, -1).mean(1), [-EPS, -EPS], atol=1e-6)
    assert np.abs(adv - x).max() <= EPS + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert attacked == [(0, [1, 1, 1]), (1, [2, 2])]


def test_the_targeted_dlr_is_autoattacks():
    z = torch.tensor([[3.0, 1.0, 2.0, -1.0, 0.0], [0.0, 4.0, 1.0, 2.0, 3.0]])
    labels = torch.tensor([[0, 2], [1, 0]])
    # −(z_y − z_t)/(z_π1 − (z_π3 + z_π4)/2): (3 − 2)/(3 − (1 + 0)/2) and (4 − 0)/(4 − (2 + 1)/2)
    torch.testing.assert_close(targeted_dlr(z, labels), torch.tensor([-1 / 2.5, -4 / 2.5]))


class Coin(PreprocessorPyTorch):
    """A random defence: pixel (0, 0) of each row set to 0 or 1, each with probability 1/2, from its own generator."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, x, y=None):
        x = x.clone()
        x[:, 0, 0, 0] = (torch.rand(len(x), generator=self.generator) < 0.5).to(x.dtype)
        return x, y


class TwoFaces(torch.nn.Module):
    """
    Five classes; the coin (pixel (0, 0)) picks one of two faces, ``[10, 6, −20, 4.5, −30]`` (heads) or ``[10, −20,
    5.5, 4.5, −30]`` (tails); where pixel (7, 7) is set, classes 1 and 2 swap. The mean softmax of the draws ranks
    the runner-ups 1, 2, 3, 4 (p₁ ≈ e^−4/2 > p₂ ≈ e^−4.5/2 > p₃ ≈ e^−5.5): neither face does (heads 1, 3, 2; tails
    2, 3, 1), nor the mean logits (class 3 first: 4.5 against about −7 for classes 1 and 2).
    """

    def forward(self, x):
        heads, swap = x[:, 0, 0, 0] > 0.5, x[:, 0, 7, 7] > 0.5
        one = torch.ones_like(heads, dtype=x.dtype)
        a, b = torch.where(heads, 6.0, -20.0), torch.where(heads, -20.0, 5.5)
        z1, z2 = torch.where(swap, b, a), torch.where(swap, a, b)
        return torch.stack([10 * one, z1, z2, 4.5 * one, -30 * one], 1)


def test_the_targets_are_the_runner_ups_of_the_clean_mean_softmax_in_order():
    coin = Coin()
    est = estimator(TwoFaces(), coin)
    x = torch.zeros(3, 1, 8, 8)
    x[1, 0, 7, 7] = 1.0  # classes 1 and 2 swapped
    y = torch.tensor([0, 0, 1])  # the third image's label is its runner-up: every class but the label, ranked
    attack = A.APGDEOTT(est, eot_samples=64, seed=0)
    assert attack.targets == 4  # n_target_classes (9), at most the other classes
    state = coin.generator.get_state()
    assert attack.runner_ups(x, y).tolist() == [[1, 2, 3, 4], [2, 1, 3, 4], [0, 2, 3, 4]]
    assert torch.equal(coin.generator.get_state(), state)  # the ranking's draws are the attack's own
    assert A.APGDEOTT(est, eot_samples=64, n_target_classes=2).runner_ups(x, y).tolist() == [[1, 2], [2, 1], [0, 2]]


def test_messages():
    est = estimator(Decoy(), Jitter())
    x, y = np.full((1, 1, 8, 8), 0.3, np.float32), np.zeros(1, np.int64)
    with pytest.raises(ValueError, match=re.escape("n_target_classes must be an integer >= 1, got 0.")):
        A.APGDEOTT(est, n_target_classes=0)
    with pytest.raises(ValueError, match=r"^apgd-eot-t takes no dev_weight .*: use APGDEOTDev for the state loss"):
        A.APGDEOTT(est, dev_weight=1.0)
    three = estimator(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)), Jitter(), classes=3)
    message = "apgd-eot-t's targeted DLR divides by z_π1 − (z_π3 + z_π4)/2 and needs at least 4 classes, the "
    with pytest.raises(ValueError, match=f"^{re.escape(message)}estimator has 3: run apgd-eot"):
        A.APGDEOTT(three, max_iter=1).generate(x, y)
    assert A.APGDEOTT(est).n_target_classes == N_TARGET_CLASSES == 9  # AutoAttack's standard version
