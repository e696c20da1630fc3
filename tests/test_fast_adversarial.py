"""CIFAR ResNets (He et al.) and fast adversarial training (Wong et al.): sizes, the reference's parameter names,
the option-A shortcut, the one-cycle schedule, the augmentation, and what one epoch trains on."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from art_adp.models import CifarResNet
from art_adp.models.fast_adversarial import cyclic_lr, fgsm_rs_epoch, random_crop_flip

# The state-dict names of one block of the reference implementation (akamaster/pytorch_resnet_cifar10).
REFERENCE_BLOCK = ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                   "bn1.num_batches_tracked", "conv2.weight", "bn2.weight", "bn2.bias", "bn2.running_mean",
                   "bn2.running_var", "bn2.num_batches_tracked"]  # fmt: skip


def test_resnet20_size_and_reference_names():
    model = CifarResNet(depth=20)
    assert sum(p.numel() for p in model.parameters()) == 269_722  # He et al.: 0.27 M
    names = list(model.state_dict())
    blocks = [f"layer{s}.{i}.{n}" for s in (1, 2, 3) for i in range(3) for n in REFERENCE_BLOCK]
    stem = [f"bn1.{n}" for n in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]
    assert names == ["conv1.weight", *stem, *blocks, "linear.weight", "linear.bias"]  # no standardisation buffers
    assert sum(p.numel() for p in CifarResNet(depth=56).parameters()) == 853_018  # He et al.: 0.85 M


def test_option_a_shortcut_pads_channels_with_zeros():
    block = CifarResNet(depth=20).layer2[0]  # 16 -> 32 channels, stride 2
    for p in block.parameters():
        torch.nn.init.zeros_(p)
    block.eval()
    x = torch.rand(2, 16, 8, 8)
    out = block(x)  # residual branch is 0 (BN weight 0): out = relu(shortcut)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])
    assert torch.equal(out[:, :8], torch.zeros_like(out[:, :8])) and torch.equal(
        out[:, 24:], torch.zeros_like(out[:, 24:])
    )


def test_standardisation_is_part_of_the_model():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    plain, standardised = CifarResNet(), CifarResNet(mean=mean, std=std)
    standardised.load_state_dict(plain.state_dict())
    x = torch.rand(3, 3, 32, 32)
    z = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(standardised.eval()(x), plain.eval()(z))
    assert CifarResNet(**standardised.config).config == standardised.config


@pytest.mark.parametrize("kwargs, message", [
    (dict(depth=21), "depth must satisfy"),
    (dict(mean=(0.5, 0.5, 0.5)), "mean and std must be given together"),
    (dict(mean=(0.5, 0.5), std=(1, 1)), "3 values each"),
    (dict(mean=(0.5, 0.5, 0.5), std=(1, 0, 1)), "std > 0"),
])  # fmt: skip
def test_resnet_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CifarResNet(**kwargs)


def test_cyclic_lr_is_the_one_cycle_schedule():
    assert cyclic_lr(0, 15, 0.2) == 0.0
    assert cyclic_lr(6, 15, 0.2) == pytest.approx(0.2)  # peak at 2/5 of the epochs
    assert cyclic_lr(3, 15, 0.2) == pytest.approx(0.1)
    assert cyclic_lr(10.5, 15, 0.2) == pytest.approx(0.1)
    assert cyclic_lr(15, 15, 0.2) == 0.0


def test_random_crop_flip_shifts_and_flips_within_the_padding():
    x = torch.rand(64, 3, 8, 8)
    out = random_crop_flip(x, torch.Generator().manual_seed(0), pad=2)
    padded = F.pad(x, (2, 2, 2, 2))
    windows = {(dy, dx, f) for dy in range(5) for dx in range(5) for f in (False, True)}
    seen = set()
    for i in range(64):
        match = [(dy, dx, f) for dy, dx, f in windows
                 if torch.equal(out[i], (lambda w: w.flip(2) if f else w)(padded[i, :, dy : dy + 8, dx : dx + 8]))]  # fmt: skip
        assert match, f"image {i} is no flipped or unflipped crop of its padded copy"
        seen.update(match)
    assert any(f for *_, f in seen) and any(not f for *_, f in seen)
    assert len({(dy, dx) for dy, dx, _ in seen}) > 5


class Recording(torch.nn.Module):
    """A linear classifier of 2×4×4 images that records what it is trained on (in training mode)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 3)
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        if self.training:
            self.seen.append(x.detach().clone())
        return self.fc(x.flatten(1))


def _data(n=96):
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, 2, 4, 4, generator=g).numpy(), torch.randint(0, 3, (n,), generator=g).numpy()


def test_fgsm_rs_epoch_trains_on_the_fgsm_step_from_a_random_start():
    x, y = _data()
    eps = 0.1
    torch.manual_seed(0)
    model = Recording()
    fgsm_rs_epoch(model, x, y, eps=eps, epoch=1, epochs=1, batch_size=32, lr_max=1e-9, augment=False, seed=3)
    assert len(model.seen) == 6  # per batch: the random start (gradient), then the step's point (training)
    xs = torch.as_tensor(x)
    w = model.fc.weight.detach()
    for start, adv in zip(model.seen[0::2], model.seen[1::2]):
        # each training point lies within eps of a clean image, in [0, 1], and is an FGSM step of 1.25 eps away
        # from its random start (before projection): it raises the loss over the random start
        clean = torch.stack([xs[(xs - a).flatten(1).abs().amax(1).argmin()] for a in adv])
        assert (adv - clean).abs().max() <= eps + 1e-6 and adv.min() >= 0 and adv.max() <= 1
        assert (start - clean).abs().max() <= eps + 1e-6
        assert not torch.equal(start, adv)
    losses = []
    for start, adv in zip(model.seen[0::2], model.seen[1::2]):
        idx = [int((xs - a).flatten(1).abs().amax(1).argmin()) for a in adv]
        yy = torch.as_tensor(y[idx])
        with torch.no_grad():
            losses.append(float(F.cross_entropy(adv.flatten(1) @ w.T + model.fc.bias, yy))
                          - float(F.cross_entropy(start.flatten(1) @ w.T + model.fc.bias, yy)))  # fmt: skip
    assert all(d > 0 for d in losses)


def test_fgsm_rs_epoch_is_reproducible_and_learns_with_its_progress_bar_or_without(capsys):
    x, y = _data(256)
    y = y % 2
    x = (0.6 * x + 0.4 * y[:, None, None, None]).astype(np.float32)  # classes apart by 0.4 a pixel, ε 0.01
    models = []
    for progress in (False, True):
        torch.manual_seed(0)
        m = Recording()
        for epoch in (1, 2, 3):
            stats = fgsm_rs_epoch(m, x, y, eps=0.01, epoch=epoch, epochs=3, batch_size=32, lr_max=0.5, augment=False,
                                  progress=progress)  # fmt: skip
        models.append(m)
        assert ("epoch 3/3" in capsys.readouterr().err) == progress  # 8 batches an epoch, shown only when asked
    assert torch.equal(models[0].fc.weight, models[1].fc.weight)
    assert stats["accuracy"] > 0.8


class Noisy(Recording):
    """Recording behind input noise from its own generator (as a purifier's), killed after ``stop`` forward passes."""

    def __init__(self, stop=None):
        super().__init__()
        self.generator, self.stop, self.calls = torch.Generator().manual_seed(5), stop, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.stop:
            raise KeyboardInterrupt
        return super().forward(x + 0.05 * torch.randn(x.shape, generator=self.generator))


def test_an_interrupted_epoch_resumes_where_its_checkpoint_was_and_equals_an_uninterrupted_one(tmp_path):
    x, y = _data(256)  # 8 batches of 32, two passes (FGSM's gradient, the update) each
    kw = dict(eps=0.05, epoch=2, epochs=3, batch_size=32, lr_max=0.5, seed=4, every=3)
    torch.manual_seed(0)
    whole = Noisy()
    stats = fgsm_rs_epoch(whole, x, y, **kw, generators=(whole.generator,))
    torch.manual_seed(0)
    killed, path = Noisy(stop=2 * 7 + 1), tmp_path / "epoch.safetensors"  # dies in batch 8, after the write at 6
    with pytest.raises(KeyboardInterrupt):
        fgsm_rs_epoch(killed, x, y, **kw, checkpoint=path, generators=(killed.generator,))
    torch.manual_seed(1)
    resumed = Noisy()  # other initial weights: all it needs comes from the checkpoint
    again = fgsm_rs_epoch(resumed, x, y, **kw, checkpoint=path, generators=(resumed.generator,))
    assert len(resumed.seen) == 2 * 2  # batches 7 and 8 only
    torch.testing.assert_close(resumed.fc.weight, whole.fc.weight, rtol=0, atol=1e-6)
    assert again == pytest.approx(stats)
    assert not torch.equal(killed.fc.weight, whole.fc.weight)
    done = Noisy()  # the finished epoch's file: nothing left to train, its outcome restored
    assert fgsm_rs_epoch(done, x, y, **kw, checkpoint=path, generators=(done.generator,)) == pytest.approx(stats)
    assert not done.seen and torch.equal(done.fc.weight, whole.fc.weight)
    other = Noisy()
    fgsm_rs_epoch(other, x, y, **{**kw, "epoch": 3}, checkpoint=path, generators=(other.generator,))
    assert len(other.seen) == 2 * 8  # another epoch's file is no resume point
    with pytest.raises(ValueError, match="other settings.*delete it"):
        fgsm_rs_epoch(Noisy(), x, y, **{**kw, "epoch": 3, "lr_max": 0.1}, checkpoint=path)


def test_fgsm_rs_epoch_refuses_an_epoch_outside_the_schedule():
    x, y = _data()
    with pytest.raises(ValueError, match="epoch"):
        fgsm_rs_epoch(Recording(), x, y, eps=0.1, epoch=4, epochs=3)


def test_fast_adversarial_training_through_a_purifier_attacks_and_trains_on_purified_inputs(tmp_path, monkeypatch):
    """method="fgsm-rs" behind a purifier: the classifier is trained on purified images (what it will see), the FGSM
    gradient goes through the purification (full gradient: the purifier's noise reaches the input's gradient), and
    the facts record the purifier; without the purifier the same epoch trains on unpurified images."""
    from art_adp import ADPPurifier
    from art_adp.apps import robust_baseline

    class Halve(torch.nn.Module):  # h(x) = −x: one step of α = ½ halves the noisy input
        def forward(self, x):
            return -x

    from art_adp.models import MLP

    def recording():  # one of the package's classifiers (it is saved), noting its training-mode inputs
        m = MLP(2, 4, 3, hidden=())
        m.seen = []
        m.register_forward_pre_hook(lambda mod, a: mod.seen.append(a[0].detach().clone()) if mod.training else None)
        return m

    monkeypatch.setattr(robust_baseline, "robust_accuracy", lambda m, x, y, **kw: (0.5, 0.5))
    x, y = _data()
    model = recording()
    purifier = ADPPurifier(Halve(), sigma=0.0, steps=1, step_size=0.5, tau=0.0, gradient="full", apply_fit=True,
                           generator=torch.Generator(), device_type="cpu")  # fmt: skip
    _, facts = robust_baseline.train_until_plateau(model, x, y, tmp_path / "m.safetensors", eps=0.1, method="fgsm-rs",
                                                   max_epochs=1, patience=1, batch_size=32, lr=0.01, progress=False,
                                                   val_fraction=0.25, purifier=purifier)  # fmt: skip
    seen = torch.cat(model.seen)
    assert seen.max() <= 0.5 + 1e-6  # every training input went through the halving purifier (images in [0, 1])
    assert facts["method"] == "fgsm-rs" and facts["curve"][0]["robust"] == 0.5
    assert not (tmp_path / "m.epoch.safetensors").exists()  # the progress within the epoch, gone once it is saved
    bare = recording()
    robust_baseline.train_until_plateau(bare, x, y, tmp_path / "b.safetensors", eps=0.1, method="fgsm-rs",
                                        max_epochs=1, patience=1, batch_size=32, lr=0.01, progress=False,
                                        val_fraction=0.25)  # fmt: skip
    assert torch.cat(bare.seen).max() > 0.9
