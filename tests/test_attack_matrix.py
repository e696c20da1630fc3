"""ART and torchattacks attacks run unchanged against ADP: each stays in the ε-ball and [0, 1], and is not a no-op.

Every attack runs against the undefended classifier too, and must lower its accuracy. Iteration counts are cut for
test speed (the settings stay those of the attacks' own code otherwise); against ADP, where only a move is asserted,
the query-based attacks (Square, SPSA) are cut further: their queries are most of the cost there.
"""

import numpy as np
import pytest
import torch
from art.attacks.evasion import (
    AutoAttack,
    AutoProjectedGradientDescent,
    FastGradientMethod,
    ProjectedGradientDescent,
    ProjectedGradientDescentNumpy,
    SquareAttack,
)
from art.attacks.evasion.projected_gradient_descent.projected_gradient_descent_pytorch import (
    ProjectedGradientDescentPyTorch,
)
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2
from art_adp.data import load_digits
from art_adp.models import MLP, train_classifier

EPS = 0.3
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    data = load_digits()
    clf = train_classifier(MLP(1, 8, 10, hidden=(64,)), data.x_train, data.y_train, epochs=5, seed=0, progress=False)
    clf.eval().requires_grad_(False)
    return clf, NCSNv2(1, 8, ngf=4), data.x_test[:12], data.y_test[:12]


def purifier(score, device):
    return ADPPurifier(score, steps=2, tau=0.0, device_type="gpu" if device == "cuda" else "cpu",
                       generator=torch.Generator(device=device).manual_seed(0))


def art_classifier(clf, device, defences=None):
    return PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                             clip_values=(0.0, 1.0), preprocessing_defences=defences,
                             device_type="gpu" if device == "cuda" else "cpu")


def art_attacks(estimator, square_iter=30):
    autoattack = AutoAttack(estimator, eps=EPS, eps_step=0.1, batch_size=12)  # its default list, iterations cut
    for attack in autoattack.attacks:
        cut = {"max_iter": 3}
        if isinstance(attack, AutoProjectedGradientDescent):
            cut["nb_random_init"] = 1
        if isinstance(attack, SquareAttack):
            cut.update(max_iter=square_iter, nb_restarts=1)
        attack.set_params(**cut)
    pgd = ProjectedGradientDescent(estimator, eps=EPS, eps_step=0.1, max_iter=5, verbose=False)
    assert isinstance(pgd._attack, ProjectedGradientDescentPyTorch)  # ART's fast path is taken
    return {
        "FGM": FastGradientMethod(estimator, eps=EPS),
        "PGD (PyTorch)": pgd,
        "PGD (numpy)": ProjectedGradientDescentNumpy(estimator, eps=EPS, eps_step=0.1, max_iter=5, verbose=False),
        "APGD": AutoProjectedGradientDescent(estimator, eps=EPS, eps_step=0.1, max_iter=5, nb_random_init=1,
                                             verbose=False),
        "AutoAttack": autoattack,
        "Square": SquareAttack(estimator, eps=EPS, max_iter=square_iter, nb_restarts=1, verbose=False),
    }


def assert_valid(adv, x):
    assert adv.shape == x.shape
    assert np.abs(adv - x).max() <= EPS + 1e-5, "left the eps-ball"
    assert adv.min() >= 0.0 and adv.max() <= 1.0, "left [0, 1]"


@pytest.mark.parametrize("device", DEVICES)
def test_art_attacks_run_unchanged(setup, device):
    clf, score, x, y = setup
    undefended = art_classifier(clf, device)
    clean = (undefended.predict(x).argmax(1) == y).mean()
    defended = {
        "preprocessor": art_classifier(clf, device, [purifier(score, device)]),
        "EOTClassifier": EOTClassifier(art_classifier(clf, device, [purifier(score, device)]), ensemble_size=2),
    }
    for name, attack in art_attacks(undefended).items():
        adv = attack.generate(x)
        assert_valid(adv, x)
        robust = (undefended.predict(adv).argmax(1) == y).mean()
        assert robust <= clean - 0.25, f"{name} is a no-op on the undefended classifier: {clean} -> {robust}"
    for kind, estimator in defended.items():
        for name, attack in art_attacks(estimator, square_iter=3).items():  # its first step moves every image
            adv = attack.generate(x)
            assert_valid(adv, x)
            assert np.abs(adv - x).max() > 0, f"{name} did not move against {kind}"


@pytest.mark.parametrize("device", DEVICES)
def test_torchattacks_run_unchanged_against_defended_model(setup, device):
    torchattacks = pytest.importorskip("torchattacks")
    clf, score, x, y = setup
    clf = clf.to(device)
    x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    def attacks(model, spsa=(4, 32), square_queries=30):
        autoattack = torchattacks.AutoAttack(model, norm="Linf", eps=EPS, version="rand", n_classes=10, seed=0)
        for apgd in autoattack._autoattack.attacks:  # 20 EOT × 10 steps by default: cut for speed
            apgd.eot_iter, apgd.steps = 2, 3
        return {
            "PGD": torchattacks.PGD(model, eps=EPS, alpha=0.1, steps=5),
            "EOTPGD": torchattacks.EOTPGD(model, eps=EPS, alpha=0.1, steps=3, eot_iter=2),
            "APGD": torchattacks.APGD(model, eps=EPS, steps=3, eot_iter=2, seed=0),
            "SPSA": torchattacks.SPSA(model, eps=EPS, delta=0.01, lr=0.05, nb_iter=spsa[0], nb_sample=spsa[1]),
            "Square": torchattacks.Square(model, eps=EPS, n_queries=square_queries, seed=0),
            "AutoAttack(rand)": autoattack,
        }

    def accuracy(model, images):
        with torch.no_grad():
            return (model(images).argmax(1) == y).float().mean().item()

    clean = accuracy(clf, x)
    for name, attack in attacks(clf).items():
        adv = attack(x, y)
        assert_valid(adv.detach().cpu().numpy(), x.cpu().numpy())
        assert accuracy(clf, adv) <= clean - 0.25, f"{name} is a no-op on the undefended classifier"
    model = DefendedModel(clf, purifier(score, device), ensemble_size=2).eval()
    for name, attack in attacks(model, spsa=(1, 4), square_queries=3).items():  # one step of each moves the images
        adv = attack(x, y)
        assert adv.device == x.device
        assert_valid(adv.detach().cpu().numpy(), x.cpu().numpy())
        assert (adv - x).abs().max() > 0, f"{name} did not move against DefendedModel"
