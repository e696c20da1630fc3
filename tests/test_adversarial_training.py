"""PGD adversarial training (art_adp.models.adversarial): robustness gain on digits, argument checks, checkpoint
round trip, determinism and the `train-classifier --adversarial-training` command."""
import json
import re

import numpy as np
import pytest
import torch

from art_adp.apps.cli import main
from art_adp.data import load_digits
from art_adp.models import MLP, evaluate_accuracy, load_classifier, save_classifier, train_classifier
from art_adp.models.adversarial import train_adversarial_classifier
from art_adp.serialization import read_checkpoint


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def _mlp(seed: int) -> MLP:
    torch.manual_seed(seed)
    return MLP(1, 8, 10, hidden=(64,))


def _pgd_accuracy(model, x, y, eps):
    """Accuracy under ART's l_inf PGD (10 steps of eps/4, no random start: deterministic)."""
    from art.attacks.evasion import ProjectedGradientDescent
    from art.estimators.classification import PyTorchClassifier

    clf = PyTorchClassifier(model=model, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                            clip_values=(0.0, 1.0))
    x_adv = ProjectedGradientDescent(clf, norm=np.inf, eps=eps, eps_step=eps / 4, max_iter=10, batch_size=len(x),
                                     verbose=False).generate(x, y=y)
    assert np.abs(x_adv - x).max() <= eps + 1e-6 and x_adv.min() >= 0 and x_adv.max() <= 1
    return float((clf.predict(x_adv).argmax(1) == y).mean())


def test_adversarial_training_is_more_robust_than_standard_training(digits):
    eps, common = 0.15, dict(epochs=6, batch_size=64, lr=5e-3, seed=0)
    standard = train_classifier(_mlp(0), digits.x_train, digits.y_train, progress=False, **common)
    robust = train_adversarial_classifier(_mlp(0), digits.x_train, digits.y_train, eps=eps, max_iter=5, **common)
    x, y = digits.x_test, digits.y_test  # all 360 test digits
    # Measured with seeds 0-3: PGD accuracy 15-21 % (standard) vs 54-55 % (adversarial); clean 89-91 % adversarial.
    assert _pgd_accuracy(robust, x, y, eps) >= _pgd_accuracy(standard, x, y, eps) + 0.2
    assert evaluate_accuracy(robust, x, y) >= 0.8
    assert not robust.training


def test_same_seed_same_weights_and_global_rngs_untouched(digits, capsys):
    x, y = digits.x_train[:200], digits.y_train[:200]
    kwargs = dict(eps=0.1, max_iter=2, epochs=1, batch_size=64, ratio=0.5)  # ratio < 1: ART draws the subset too
    models = [_mlp(1) for _ in range(4)]  # the same initial weights
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state()
    a = train_adversarial_classifier(models[0], x, y, seed=3, verbose=True, **kwargs)
    assert "Adversarial training epochs" in capsys.readouterr().err
    b = train_adversarial_classifier(models[1], x, y, seed=3, **kwargs)
    c = train_adversarial_classifier(models[2], x, y, seed=4, **kwargs)
    assert a is models[0] and not a.training
    assert capsys.readouterr().err == ""  # not verbose: ART's progress bars are hidden
    assert np.array_equal(np.random.get_state()[1], np_state) and torch.equal(torch.get_rng_state(), torch_state)
    sa, sb, sc, s0 = a.state_dict(), b.state_dict(), c.state_dict(), models[3].state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa) and any(not torch.equal(sa[k], s0[k]) for k in sa)


def test_saved_model_round_trips(digits, tmp_path):
    model = train_adversarial_classifier(_mlp(2), digits.x_train[:128], digits.y_train[:128], eps=0.1, max_iter=1,
                                         epochs=1)
    save_classifier(model, tmp_path / "adv.safetensors")
    loaded = load_classifier(tmp_path / "adv.safetensors")
    assert type(loaded) is MLP and loaded.config == model.config and not loaded.training
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    x = torch.from_numpy(digits.x_test[:32])
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))


X8 = load_digits().x_train[:8]
Y8 = np.arange(8)
BAD_ARGUMENTS = [
    (dict(eps=0), "eps must be a number > 0, got 0."),
    (dict(eps=float("nan")), "eps must be a number > 0, got nan."),
    (dict(eps=2.0), "eps must not exceed the pixel range clip_values[1] - clip_values[0] = 1, got 2; "
                    "give eps on the scale of the images"),
    (dict(eps_step=-0.1), "eps_step must be a number > 0, got -0.1."),
    (dict(max_iter=0), "max_iter must be an integer >= 1, got 0."),
    (dict(epochs=1.5), "epochs must be an integer >= 1, got 1.5."),
    (dict(batch_size=0), "batch_size must be an integer >= 1, got 0."),
    (dict(ratio=0), "ratio must be a number in (0, 1], got 0."),
    (dict(ratio=1.5), "ratio must be a number in (0, 1], got 1.5."),
    (dict(seed=-1), "seed must be an integer in [0, 4294967295], got -1."),
    (dict(seed=None), "seed must be an integer in [0, 4294967295], got None."),
    (dict(clip_values=(1, 0)), "clip_values must be a pair (min, max) of finite numbers with min < max, got (1, 0)"),
    (dict(clip_values="ab"), "clip_values must be a pair (min, max) of numbers, got 'ab'"),
    (dict(lr=0.0), "lr must be a number > 0, got 0.0."),
    (dict(x_train=X8 * 255), "x_train must lie in [0, 1], got values in [0, 255]"),
    (dict(clip_values=(0, 0.5)), "x_train must lie in [0, 0.5], got values in [0, 1]"),
    (dict(x_train=X8[:, 0]), "x_train must have shape (N, C, H, W), got (8, 8, 8)"),
    (dict(x_train=X8.astype(np.int64)), "x_train must be a floating-point array, got dtype torch.int64"),
    (dict(y_train=Y8.astype(np.float32)), "y_train must hold integer class labels, got dtype torch.float32"),
    (dict(y_train=Y8 + 5), "y_train must hold class labels in [0, 10), got labels in [5, 12]"),
    (dict(y_train=Y8[:7]), "x_train and y_train must have the same length, got 8 and 7"),
    (dict(x_train=X8[:0], y_train=Y8[:0]), "x_train and y_train must not be empty"),
]


@pytest.mark.parametrize("override, message", BAD_ARGUMENTS)
def test_bad_arguments_are_clear_errors(override, message):
    model = _mlp(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    kwargs = dict(x_train=X8, y_train=Y8, eps=0.1, epochs=1) | override
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        train_adversarial_classifier(model, **kwargs)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_cli_adversarial_training(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train-classifier", "--adversarial-training", "--eps", "0.1", "--arch", "mlp", "--epochs", "1",
                 "--max-iter", "1", "--run-dir", str(run), "--device", "cpu", "--quiet"]) == 0
    assert "adversarially trained classifier:" in capsys.readouterr().out
    model = load_classifier(run / "adv_classifier.safetensors")
    record = json.loads((run / "adv_classifier.json").read_text())
    assert type(model) is MLP and record["arch"] == "mlp"
    assert record["adversarial_training"] == {"eps": 0.1, "eps_step": 0.25, "max_iter": 1, "ratio": 1.0, "epochs": 1,
                                              "batch_size": 64, "lr": 1e-3, "seed": 0}
    assert not (run / "classifier.safetensors").exists()  # the undefended classifier's file is left alone


@pytest.mark.parametrize("argv, message", [
    (["--adversarial-training"], "--adversarial-training needs --eps"),
    (["--eps", "0.1"], "--eps, --eps-step, --max-iter and --ratio apply only with --adversarial-training"),
    (["--adversarial-training", "--eps", "0.1", "--ratio", "2"], "ratio must be a number in (0, 1]"),
])
def test_cli_adversarial_training_errors(tmp_path, capsys, argv, message):
    assert main(["train-classifier", "--run-dir", str(tmp_path), "--quiet", *argv]) == 2
    assert message in capsys.readouterr().err


RESUME = dict(eps=0.1, max_iter=2, epochs=3, batch_size=64, ratio=0.5, seed=5)  # ratio < 1: ART draws the subset too


def test_epoch_by_epoch_training_is_arts_own_multi_epoch_fit(digits, tmp_path):
    from art_adp.models.adversarial import _madry_trainer, _seeded_global_rngs

    x, y = digits.x_train[:150], digits.y_train[:150]
    ours = train_adversarial_classifier(_mlp(3), x, y, checkpoint_path=tmp_path / "ck.safetensors", **RESUME)
    model = _mlp(3)  # ART's AdversarialTrainer.fit once, over all epochs, as before checkpoints existed
    pgd = {"eps": 0.1, "eps_step": 0.125, "max_iter": 2, "batch_size": 64}
    trainer, _ = _madry_trainer(model, torch.from_numpy(x), torch.device("cpu"), pgd, ratio=0.5, lr=1e-3,
                                clip_values=(0.0, 1.0))
    with _seeded_global_rngs(5):
        trainer.fit(x, y.astype(np.int64), batch_size=64, nb_epochs=3)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in ours.state_dict().items())


def test_an_interrupted_run_resumes_to_the_uninterrupted_weights(digits, tmp_path, monkeypatch):
    from art.defences.trainer import AdversarialTrainer

    x, y = digits.x_train[:150], digits.y_train[:150]
    whole = train_adversarial_classifier(_mlp(4), x, y, **RESUME)
    one_epoch = train_adversarial_classifier(_mlp(4), x, y, **{**RESUME, "epochs": 1})
    fit, calls = AdversarialTrainer.fit, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # ^C during the second epoch
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(AdversarialTrainer, "fit", interrupted)
    path = tmp_path / "adv.train.safetensors"
    with pytest.raises(KeyboardInterrupt):
        train_adversarial_classifier(_mlp(4), x, y, checkpoint_path=path, **RESUME)
    saved = load_classifier(path)  # the checkpoint after epoch 1: one epoch's weights, loadable as a classifier
    assert all(torch.equal(v, saved.state_dict()[k]) for k, v in one_epoch.state_dict().items())
    monkeypatch.setattr(AdversarialTrainer, "fit", fit)
    np_state = np.random.get_state()[1].copy()
    resumed = train_adversarial_classifier(_mlp(9), x, y, checkpoint_path=path, **RESUME)  # other initial weights
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in whole.state_dict().items())
    assert np.array_equal(np.random.get_state()[1], np_state)  # the caller's RNG untouched by the restore
    with pytest.raises(ValueError, match=r"^Cannot resume from .*adv.train.safetensors: it was trained with other "
                                         r"settings \(.*'eps': 0.1.*now .*'eps': 0.2.*\) or holds no training state"):
        train_adversarial_classifier(_mlp(4), x, y, checkpoint_path=path, **{**RESUME, "eps": 0.2})


def test_cli_adversarial_training_continues_to_more_epochs(tmp_path, monkeypatch):
    from art.defences.trainer import AdversarialTrainer

    fit, epochs = AdversarialTrainer.fit, []

    def counted(self, *args, **kwargs):
        epochs.append(kwargs["nb_epochs"])
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(AdversarialTrainer, "fit", counted)
    argv = ["train-classifier", "--adversarial-training", "--eps", "0.1", "--arch", "mlp", "--max-iter", "1",
            "--batch-size", "512", "--device", "cpu", "--quiet"]
    assert main([*argv, "--epochs", "1", "--run-dir", str(tmp_path / "a")]) == 0
    header = read_checkpoint(tmp_path / "a" / "adv_classifier.train.safetensors")[1]
    assert header["train"]["epoch"] == 1 and epochs == [1]
    assert main([*argv, "--epochs", "2", "--run-dir", str(tmp_path / "a")]) == 0  # resumes after epoch 1
    assert epochs == [1, 1]  # one more epoch, not two
    assert main([*argv, "--epochs", "2", "--run-dir", str(tmp_path / "b")]) == 0
    a, b = (load_classifier(tmp_path / run / "adv_classifier.safetensors") for run in "ab")
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
