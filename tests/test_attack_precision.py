"""The attacks' precision (``Budget.precision``): bf16 autocast for the gradient passes only -- every prediction an
attack judges its iterates by, the projection and the clip stay fp32 -- recorded in the budget, refused where ADP's
finite-difference step would drown in bf16 rounding."""

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, DenoiserUNet
from art_adp.attacks.registry import REGISTRY, Budget, recorded
from art_adp.ensemble import at_gradient_precision, eot_gradient, gradient_precision


class Spy(torch.nn.Module):
    """A linear classifier that notes, per forward pass, whether autograd records it and whether autocast is on."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 3)
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, x):
        self.calls.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return self.lin(x.flatten(1))


def _estimator(clf, **purifier):
    torch.manual_seed(0)
    unet = DenoiserUNet(1, channels=(4, 8), emb_dim=8).eval()
    one_step = {"sigma": 0.1, "steps": 1, "step_size": 0.1, "tau": 0.0, "clip_noise": False, **purifier}
    adp = ADPPurifier(unet, generator=torch.Generator().manual_seed(0), device_type="cpu", **one_step)
    return PyTorchClassifier(clf, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=3,
                             clip_values=(0.0, 1.0), preprocessing_defences=[adp])  # fmt: skip


@pytest.mark.parametrize("name", ["full-pgd-eot", "full-pgd-eot-ensemble", "apgd-eot", "full-pgd-eot-dev", "selective-eot",
                                  "lowfreq-vote"])  # fmt: skip
def test_a_bf16_attack_runs_its_gradient_passes_in_bf16_and_judges_in_fp32(name):
    torch.manual_seed(1)
    clf = Spy()
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(2)).numpy()
    y = np.array([0, 1, 2, 0])
    b = Budget(eps=0.1, eps_step=0.05, max_iter=3, eot_samples=2, random_start=True, judge_draws=2, precision="bf16")
    x_adv = REGISTRY[name].build(_estimator(clf), b, 3).generate(x, y=y)
    gradient = [autocast for grad, autocast in clf.calls if grad]
    judged = [autocast for grad, autocast in clf.calls if not grad]
    assert gradient and all(gradient)  # every forward pass that a gradient is taken through: bf16 autocast
    assert judged and not any(judged)  # every prediction that judges an iterate: fp32
    assert x_adv.dtype == np.float32 and np.abs(x_adv - x).max() <= 0.1 + 1e-6 and x_adv.min() >= 0 <= 1 - x_adv.max()
    assert recorded(b, REGISTRY[name])["precision"] == "bf16" and "precision" not in recorded(
        Budget(eps=0.1, eps_step=0.05, max_iter=3), REGISTRY[name])
    assert REGISTRY[name].describe(b).endswith(", bf16 gradient passes")
    clf.calls.clear()
    REGISTRY[name].build(_estimator(clf), Budget(**{**b.__dict__, "precision": "fp32"}), 3).generate(x, y=y)
    assert clf.calls and not any(autocast for _, autocast in clf.calls)  # fp32: no autocast anywhere


def test_bf16_gradients_follow_fp32_ones_and_stay_fp32_tensors():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(512, 10))  # fmt: skip
    x, y = torch.rand(16, 1, 8, 8), torch.arange(16) % 10
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    g32, l32 = eot_gradient(net, x, y, loss, 2)
    with gradient_precision("bf16"):
        g16, l16 = eot_gradient(net, x, y, loss, 2)
        assert at_gradient_precision(net)(x).dtype == torch.float32
    assert g16.dtype == l16.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(g16.flatten(1), g32.flatten(1)).min()
    assert cosine > 0.97 and not torch.equal(g16, g32)  # bf16 arithmetic: close, not equal
    torch.testing.assert_close(l16, l32, rtol=0.05, atol=0.02)
    with pytest.raises(ValueError, match="precision must be one of"):
        with gradient_precision("fp16"):
            pass


def test_bf16_is_refused_through_adps_finite_difference_step():
    clf = Spy()
    est = _estimator(clf, steps=2, step_size="adaptive", tau=1e-3)
    b = Budget(eps=0.1, eps_step=0.05, max_iter=1, eot_samples=1, precision="bf16")
    with pytest.raises(ValueError, match="use step_size='adaptive-jvp' or a fixed schedule"):
        REGISTRY["full-pgd-eot"].build(est, b, 0)
    REGISTRY["full-pgd-eot"].build(est, Budget(eps=0.1, eps_step=0.05, max_iter=1), 0)  # fp32: fine


def test_the_entry_point_refuses_bf16_where_the_processor_emulates_it(monkeypatch, tmp_path):
    from art_adp import _hardware
    from art_adp.runs.engine import evaluate_robustness

    monkeypatch.setattr(_hardware, "cpu_features", lambda: {"AVX2": True, "AVX-512": False, "AVX-512-BF16": False,
                                                            "AMX": False})  # fmt: skip
    x, y = np.zeros((2, 1, 8, 8), np.float32), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match=r"bf16 is not native on this CPU, .*\(AVX2; no AVX-512, AVX-512-BF16, AMX\)"):
        evaluate_robustness(Spy(), None, x, y, eps=0.1, attacks=("full-pgd-eot",), run_dir=tmp_path,
                            attack_precision="bf16", progress=False)  # fmt: skip
    assert not (tmp_path / "records" / "rank-0.jsonl").exists()  # refused before anything ran


@pytest.mark.e2e
def test_the_compiled_step_gives_the_eager_gradients_and_records_nothing_new():
    """torch.compile of the classifier and the purifier's score network (Budget.compile): the same EOT gradients as
    eager to float rounding, on the same noise; not part of the recorded budget."""
    from art_adp.attacks.registry import budget_settings
    from art_adp.ensemble import compiled_networks, logits

    clf = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(256, 3))  # fmt: skip
    est = _estimator(clf)
    x, y = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2])
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    purifier = est.preprocessing_defences[0]

    def gradient():
        purifier.generator.manual_seed(7)
        return eot_gradient(lambda z: logits(est, z), x, y, loss, 2)[0]

    eager = gradient()
    with compiled_networks(est):
        compiled = gradient()
        assert type(est.model).__name__ == "CompiledOrEager" and est.model.failed is None
    assert est.model is clf and not purifier.compile  # restored
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6)
    b = Budget(eps=0.1, eps_step=0.05, max_iter=1)
    assert budget_settings(Budget(**{**b.__dict__, "compile": True})) == budget_settings(b)


def test_a_network_that_does_not_compile_runs_eagerly_with_a_warning(monkeypatch):
    from art_adp._fast_paths import CompiledOrEager

    class Broken(torch.nn.Module):
        def forward(self, *args):
            raise RuntimeError("inductor: no C++ compiler")

    net = torch.nn.Linear(3, 2)
    wrapped = CompiledOrEager(net)
    wrapped.compiled = Broken()
    x = torch.rand(4, 3)
    with pytest.warns(RuntimeWarning, match=r"torch.compile failed on Linear \(RuntimeError: inductor: no C\+\+ "
                                            r"compiler\); running it eagerly"):
        out = wrapped(x)
    assert torch.equal(out, net(x)) and wrapped.failed.startswith("RuntimeError")
    assert torch.equal(wrapped(x), net(x))  # eager from then on, without a second warning
