"""A classifier trained behind a purifier (issue 39): plainly on purified inputs or adversarially through the purifier,
with ART's own ``apply_fit`` / ``AdversarialTrainer``; the checkpoint records the purifier, loading it without that
purifier warns, a resumed run equals an uninterrupted one, and the oracle leaves each training image out of its own
purification. On scikit-learn's digits (8×8) with tiny models, and on a tiny 28×28 set for ``art-adp levers``."""

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch

from art_adp.runs.plans import PLANS, Plan, plan
from art_adp import ADPPurifier
from art_adp.apps import cli, levers_classifiers, levers_presets, robust_baseline
from art_adp.apps.levers import run_levers
from art_adp.apps.levers_presets import ClassifierRecipe, Preset, Row
from art_adp.apps.levers_table import table_markdown
from art_adp.apps.train_classifier import ClassifierTraining, train_classifier_command
from art_adp.attacks.registry import FULL_ATTACK
from art_adp.data import DATASETS, Dataset, DatasetSpec, load_dataset
from art_adp.models import (
    MLP,
    load_classifier,
    purifier_record,
    save_classifier,
    train_adversarial_classifier,
    train_purified_classifier,
)
from art_adp.score import KernelScore
from art_adp.serialization import read_checkpoint
from levers_stages import train_and_measure

ONE_STEP = {"sigma": 0.25, "steps": 1, "step_size": 0.25, "tau": 0.0, "clip_noise": False}  # the exact score: unclipped


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")
    return data.x_train[:200], data.y_train[:200]


def _purifier(x, leave_out=0.0, **kwargs):
    options = {**ONE_STEP, "gradient": "bpda", **kwargs}
    return ADPPurifier(KernelScore(x, bandwidth=options["sigma"]), generator=torch.Generator(), apply_fit=True,
                       leave_out=leave_out, device_type="cpu", **options)  # fmt: skip


def _mlp():
    torch.manual_seed(0)
    return MLP(1, 8, 10, hidden=(32,))


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# --- the oracle's leave-one-out ----------------------------------------------------------------------------------


@pytest.mark.parametrize("radius, shift", [(0.0, 0.0), (0.1, 0.1), (0.1, -0.05)])
def test_leaving_out_is_the_exact_score_of_the_reference_without_the_inputs_own_image(digits, radius, shift):
    """Each row's score, its own reference image left out, equals the score of a KernelScore built without that
    image (computed separately per row); an anchor within ``radius`` of its image (an adversarial example) too."""
    x = torch.as_tensor(digits[0][:30])
    score = KernelScore(x, bandwidth=0.25, chunk_size=7)  # chunks: the left-out image falls in one of several
    anchors = (x[:4] + shift).clamp(0, 1) if shift >= 0 else (x[:4] + shift * torch.sign(x[:4] - 0.5))
    noisy = (anchors + 0.25 * torch.randn(anchors.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    with score.leaving_out(anchors, radius):
        got = score(noisy)
    for i in range(4):
        without = KernelScore(torch.cat([x[:i], x[i + 1 :]]), bandwidth=0.25)
        assert torch.allclose(got[i], without(noisy[i : i + 1])[0], atol=1e-5)
    assert not torch.allclose(got, score(noisy), atol=1e-3)  # outside the block, nothing is left out


def test_without_leaving_out_the_oracle_hands_a_training_image_back_unchanged(digits):
    """Why training behind the oracle needs the leave-one-out: at σ 0.25 the exact score over the training split
    pulls a noisy training image back onto itself, so a classifier would train on clean images."""
    x = torch.as_tensor(digits[0][:100])
    (seen,) = [_purifier(digits[0][:100], leave_out=lo).forward(x[:10])[0] for lo in (None,)]
    left_out = _purifier(digits[0][:100]).forward(x[:10])[0]
    assert (seen - x[:10]).abs().amax(dim=(1, 2, 3)).median() < (left_out - x[:10]).abs().amax(dim=(1, 2, 3)).median()


def test_leave_out_needs_a_kernel_score():
    with pytest.raises(ValueError, match="leave_out needs a KernelScore score model"):
        ADPPurifier(torch.nn.Identity(), leave_out=0.0, device_type="cpu")


# --- training behind the purifier -----------------------------------------------------------------------------------


class ConstantPurifier(PreprocessorPyTorch):
    """A planted purifier: every input becomes the same grey image."""

    def __init__(self):
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=True, apply_predict=True)
        self.generator = torch.Generator()

    def forward(self, x, y=None):
        return torch.full_like(x, 0.5), y


def test_plain_training_trains_on_what_the_purifier_outputs(digits):
    """Behind a purifier that maps every input to one image, the classifier learns nothing beyond the prior: on that
    image it gives the training labels' frequencies (cross-entropy's optimum for one input), and on the digits
    themselves it is no better than chance; the same training behind the oracle learns the digits."""
    x, y = digits
    constant = train_purified_classifier(_mlp(), x, y, ConstantPurifier(), epochs=5, batch_size=32, lr=1e-2)
    with torch.no_grad():
        prior = constant(torch.full((1, 1, 8, 8), 0.5)).softmax(1)[0].numpy()
        preds = constant(torch.as_tensor(x)).argmax(1).numpy()
    assert np.allclose(prior, np.bincount(y, minlength=10) / len(y), atol=0.05)
    assert np.mean(preds == y) < 0.35
    learned = train_purified_classifier(_mlp(), x, y, _purifier(x), epochs=3, batch_size=32, lr=1e-2)
    with torch.no_grad():
        assert np.mean(learned(torch.as_tensor(x)).argmax(1).numpy() == y) > 0.5


@pytest.mark.parametrize("adversarial", [False, True])
def test_a_resumed_run_equals_an_uninterrupted_one(digits, tmp_path, adversarial):
    """Two epochs in one go, or one epoch, stopped, and resumed from the checkpoint with a fresh purifier object (its
    generator's state comes from the checkpoint): the same weights, bit for bit."""
    x, y = digits[0][:96], digits[1][:96]

    def run(epochs, path):
        purifier = _purifier(x, leave_out=0.1 if adversarial else 0.0, gradient="full" if adversarial else "bpda")
        kw = dict(epochs=epochs, batch_size=32, seed=3, checkpoint_path=path)
        if adversarial:
            return train_adversarial_classifier(_mlp(), x, y, eps=0.1, max_iter=2, purifier=purifier, **kw)
        return train_purified_classifier(_mlp(), x, y, purifier, **kw)

    whole = run(2, tmp_path / "whole.safetensors")
    run(1, tmp_path / "parts.safetensors")
    resumed = run(2, tmp_path / "parts.safetensors")
    assert torch.equal(_weights(whole), _weights(resumed))
    assert not torch.equal(_weights(whole), _weights(run(1, tmp_path / "one.safetensors")))  # the epoch counted
    header = read_checkpoint(tmp_path / "whole.safetensors")[1]
    key = "adversarial_training" if adversarial else "training"
    assert header[key]["epochs"] == 2 and header["purifier"]["params"]["sigma"] == 0.25
    assert header["purifier"]["gradient"] == ("full" if adversarial else "bpda")


def test_a_purifier_art_would_not_apply_while_fitting_is_refused(digits):
    x, y = digits
    purifier = ADPPurifier(KernelScore(x, bandwidth=0.25), generator=torch.Generator(), device_type="cpu")
    with pytest.raises(ValueError, match="purifier.apply_fit is False: ART's fit would train on unpurified images; "
                                         "build the purifier with apply_fit=True."):  # fmt: skip
        train_purified_classifier(_mlp(), x, y, purifier, epochs=1)


# --- the recorded purifier and the warning --------------------------------------------------------------------------


def test_the_command_records_the_purifier_and_loading_without_it_warns(tmp_path, one_thread):
    """`art-adp train-classifier --purifier oracle` on digits: the header names the setting, its σ, T and step, the
    mode and the SHA-256 of the exact score's reference (the training split); loading it bare, or behind another σ,
    warns naming the purifier; behind its own, silently."""
    config = ClassifierTraining(arch="mlp", epochs=1, purifier="oracle")
    train_classifier_command(config, run_dir=str(tmp_path), progress=False, device="cpu")
    path = tmp_path / "classifier.safetensors"
    record = read_checkpoint(path)[1]["purifier"]
    data = load_dataset("digits")
    own = _purifier(data.x_train)
    assert record["params"]["sigma"] == 0.25 and record["params"]["steps"] == 1 and record["params"]["tau"] == 0.0
    assert (record["model"], record["setting"], record["mode"]) == ("oracle", "one-step denoise", "plain")
    assert record["score_sha256"] == purifier_record(own)["score_sha256"] != purifier_record(_purifier(
        data.x_train[1:]))["score_sha256"]  # fmt: skip
    assert json.loads((tmp_path / "classifier.json").read_text())["purifier"] == record
    with pytest.warns(UserWarning, match=r"was trained behind ADP sigma = 0.25 \(noisy input not clipped\), T = 1 steps "
                                         r"of alpha = 0.25 "
                                         r"\(score model KernelScore sha256 [0-9a-f]{12}, model oracle, setting "
                                         r"one-step denoise, mode plain\); evaluated without a purifier"):  # fmt: skip
        bare = load_classifier(path)
    assert bare.trained_behind == record
    with pytest.warns(UserWarning, match="evaluated behind another purifier, ADP sigma = 0.1"):
        load_classifier(path, purifier=_purifier(data.x_train, sigma=0.1, step_size=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_classifier(path, purifier=own)  # its own purifier: no warning
        save_classifier(bare, tmp_path / "plain.safetensors")
        load_classifier(tmp_path / "plain.safetensors")  # nothing recorded: nothing to warn about


def test_the_command_line_hands_over_the_purifier_flags():
    command, config, keywords = cli.parse(
        [
            "train-classifier",
            "--purifier",
            "denoiser",
            "--denoiser",
            "d.safetensors",
            "--setting",
            "σ 0.1, one-step",
            "--adversarial-training",
            "--eps",
            "0.1",
        ]
    )
    assert command is train_classifier_command and keywords["denoiser"] == "d.safetensors"
    assert (config.purifier, config.setting, config.adversarial_training) == ("denoiser", "σ 0.1, one-step", True)


@pytest.mark.parametrize("config, denoiser, message", [
    (ClassifierTraining(setting="σ 0.1, one-step"), None, "--setting and --denoiser apply only with --purifier"),
    (ClassifierTraining(purifier="oracle"), "d.safetensors", "--denoiser is the score model of --purifier denoiser"),
    (ClassifierTraining(purifier="denoiser"), None, "training behind the denoiser needs a train-denoiser checkpoint"),
])  # fmt: skip
def test_bad_purifier_flags_are_named(tmp_path, config, denoiser, message):
    with pytest.raises(ValueError, match=message):
        train_classifier_command(config, denoiser=denoiser, run_dir=str(tmp_path), progress=False, device="cpu")


# --- art-adp levers: the classifiers trained behind a purifier as baselines ----------------------------------------


@pytest.fixture(scope="module")
def tiny():
    rng = np.random.default_rng(0)
    protos = (rng.random((10, 1, 28, 28)) > 0.7).astype(np.float32)
    y_train, y_test = np.arange(40) % 10, np.arange(4) % 10

    def noisy(y):
        return np.clip(protos[y] + 0.1 * rng.standard_normal((len(y), 1, 28, 28)), 0, 1).astype(np.float32)

    return Dataset("tiny", noisy(y_train), y_train, noisy(y_test), y_test, tuple(map(str, range(10))))


def test_levers_trains_measures_and_names_the_classifiers_behind_the_purifier(tiny, tmp_path, one_thread, monkeypatch):
    """``cnn-oracle`` (plain) and ``adv-cnn-oracle`` trained to the validation rule behind the exact score's one-step
    denoise; in ``purified`` each is measured behind that purification only; in the undefended rows it warns; the
    records, the table and the classifiers' facts name them."""
    eps = 8 / 255
    behind = ("oracle", levers_presets.ONE_STEP)
    preset = Preset(
        eps=eps, classifier="cnn",
        classifiers={"cnn": ClassifierRecipe("cnn", epochs=1),
                     "cnn-oracle": ClassifierRecipe("cnn", epochs=2, patience=1, purifier=behind),
                     "adv-cnn-oracle": ClassifierRecipe("cnn", adversarial=True, epochs=1, patience=1, max_iter=1,
                                                        purifier=behind)},
        baselines=("cnn",), sigmas=(0.25,), attacks=("clean",),
        rows=(Row("clean"), levers_presets.adaptive_row(FULL_ATTACK, eps / 4, max_iter=1)),
    )  # fmt: skip
    monkeypatch.setitem(PLANS, "levers:tiny", Plan("levers", "a tiny table", preset))
    monkeypatch.setitem(DATASETS, "tiny", DatasetSpec(lambda root: tiny, (1, 28, 28), eps, sigmas=(0.25,),
                                                      levers="tiny"))  # fmt: skip
    seen = []
    real = robust_baseline.robust_accuracy

    def validation(model, x, y, **kw):  # the validation rule sees the purifier, attacked only when adversarial
        seen.append((kw["purifier"].leave_out, kw["attack"]))
        return real(model, x, y, **{**kw, "max_iter": 1})

    monkeypatch.setattr(robust_baseline, "robust_accuracy", validation)
    with pytest.warns(
        UserWarning,
        match=r"levers classifier 'cnn-oracle' was trained behind ADP sigma = 0.25 "
        r"\(noisy input not clipped\), T = 1",
    ):
        table = train_and_measure(tiny, tmp_path, dataset="tiny", models=("oracle",), attacks=("clean",),
                                  classifiers=("cnn-oracle",), purified=("cnn-oracle", "adv-cnn-oracle"), n_examples=2,
                                  ensemble_size=1, progress=False)  # fmt: skip
    assert sorted(set(seen)) == [(0.0, False), (eps, True)]
    with warnings.catch_warnings(record=True) as caught:  # measured behind its own purifier only: no warning
        warnings.simplefilter("always")
        for estimate_only in (True, False):
            run_levers(tiny, tmp_path, dataset="tiny", models=("oracle",), attacks=("clean",), classifiers=(),
                       purified=("cnn-oracle",), n_examples=2, ensemble_size=1, progress=False,
                       estimate_only=estimate_only)  # fmt: skip
    assert not [w for w in caught if "was trained behind" in str(w.message)]
    cells = {(c.get("classifier"), c["model"], c["setting"]): c for c in table["cells"]}
    assert set(cells) == {(None, "none", "cnn-oracle"), ("cnn-oracle", "oracle", levers_presets.ONE_STEP),
                          ("adv-cnn-oracle", "oracle", levers_presets.ONE_STEP)}  # fmt: skip
    assert all(c["n"] == 2 for c in cells.values())
    assert "| cnn-oracle | oracle | one-step denoise |" in table_markdown(table)
    facts = table["classifiers"]
    assert facts["cnn-oracle"]["training"]["validation"] == "clean accuracy through the purifier"
    assert facts["adv-cnn-oracle"]["purifier"]["mode"] == "adversarial"
    assert (
        facts["cnn-oracle"]["purifier"]["leave_out"] == 0.0 and facts["adv-cnn-oracle"]["purifier"]["leave_out"] == eps
    )
    spec = importlib.util.spec_from_file_location("render", Path(__file__).resolve().parents[1] / "docs" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    page = render.levers_page(table, "table.json")
    assert (
        "`cnn-oracle`: SmallCNN, trained on purified inputs behind the oracle (exact score)'s one-step denoise (σ "
        "0.25; each training image left out of its own purification), each epoch purified afresh"
    ) in page
    assert "`adv-cnn-oracle`: SmallCNN, PGD adversarial training at ε 8/255 through the purifier behind the " in page
    assert "| oracle (exact score) → adv-cnn-oracle | one-step denoise |" in page


def test_a_classifier_trained_through_the_purifier_is_trained_by_its_recipes_method(tiny, tmp_path, monkeypatch):
    """``adv-resnet20-denoiser``'s recipe: fast adversarial training through the purifier, not PGD training at its
    learning rate (the method reaches the trainer behind a purifier as it does bare)."""
    seen = {}

    def trainer(model, x, y, path, **kw):
        seen.update(kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(levers_classifiers, "train_until_plateau", trainer)
    fast = ClassifierRecipe("cnn", adversarial=True, epochs=4, patience=4, method="fgsm-rs", lr=0.02,
                            purifier=("oracle", levers_presets.ONE_STEP))  # fmt: skip
    preset = Preset(eps=8 / 255, classifier="cnn", classifiers={"fast": fast}, baselines=(), sigmas=(0.25,),
                    rows=(Row("clean"),), attacks=("clean",))  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        levers_classifiers._classifier("fast", preset, tiny, tmp_path, 0, False)
    assert (seen["method"], seen["lr"], seen["adversarial"]) == ("fgsm-rs", 0.02, True)
    assert plan("levers:cifar10").values.classifiers["adv-resnet20-denoiser"].method == "fgsm-rs"


def test_the_presets_hold_the_classifiers_behind_the_purifier():
    for preset in (plan("levers:mnist").values, plan("levers:fashion-mnist").values):
        for name in ("cnn-oracle", "adv-cnn-oracle", "cnn-denoiser", "adv-cnn-denoiser"):
            recipe = preset.classifiers[name]
            assert recipe.purifier == (name.split("-")[-1], "one-step denoise") and recipe.patience == 5
            assert recipe.adversarial == name.startswith("adv-")
    assert "cnn-oracle" in levers_presets.CLASSIFIER_NAMES


def test_a_classifier_behind_the_denoiser_needs_the_denoiser(tiny, tmp_path):
    with pytest.raises(ValueError, match="or a classifier trained behind it"):
        run_levers(tiny, tmp_path, dataset="mnist", models=("oracle",), classifiers=(), purified=("cnn-denoiser",))
