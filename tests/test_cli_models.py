"""Any classifier and any score model on the command line (``art_adp.apps.loading``): a user's classifier defined
outside the package (``package.module:factory`` with ``--weights``, a TorchScript file), its standardisation after
the purification as ART applies it, diffusers folders and NCSNv2 reference checkpoints as ``--score``, a diffusers
score saved and loaded like the others, and ``--dataset`` setting ε; every bad input refused with its fix."""

import json
import re
import sys
import textwrap

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier
from safetensors.torch import save_file

import art_adp
from art_adp import NCSNv2, save_score_model
from art_adp.apps import cli
from art_adp.apps.evaluation.command import with_eps
from art_adp.apps.evaluation.config import attack_budget
from art_adp.apps.loading import Standardised, load_classifier_arg, load_score_arg
from art_adp.data import load_digits
from art_adp.score import DiffusersScore, load_score_model, score_at

USER_MODULE = """
import torch
from torch import nn


class SmallNet(nn.Module):
    def __init__(self, nb_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, nb_classes)

    def forward(self, x):
        return self.fc(nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).flatten(1))


def make_cnn():
    return SmallNet()


def needs_width(width):
    return SmallNet()


def not_a_module():
    return "a string"
"""
N = 24  # test digits evaluated
RUN = ["--dataset", "digits", "--preset", "smoke", "--n-examples", str(N), "--chunk-size", str(N), "--attacks",
       "clf-pgd", "--max-iter", "1", "--ensemble-size", "1", "--repeats", "1", "--no-sanity", "--no-fixed-noise",
       "--threads", "1", "--quiet"]  # fmt: skip
IDENTITY = ["--sigma", "0", "--steps", "0"]  # ADP with sigma 0 and no step is the identity: clean accuracy is known


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """usermodels.py (outside the package), its CNN trained briefly on digits, the weights as safetensors and as a
    torch.save state dict, a TorchScript trace, and a tiny NCSNv2 as art-adp score checkpoint."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "usermodels.py").write_text(textwrap.dedent(USER_MODULE))
    sys.path.insert(0, str(folder))
    try:
        import usermodels  # pylint: disable=import-error

        torch.manual_seed(0)
        model = usermodels.make_cnn()
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("usermodels", None)
    data = load_digits(seed=0)
    x, y = torch.as_tensor(data.x_train[:512]), torch.as_tensor(data.y_train[:512])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(20):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimiser.step()
    torch.set_num_threads(threads)
    model.eval()
    save_file(model.state_dict(), folder / "weights.safetensors")
    torch.save(model.state_dict(), folder / "weights.pt")
    torch.jit.trace(model, x[:2]).save(str(folder / "model_ts.pt"))
    torch.manual_seed(0)
    save_score_model(NCSNv2(1, 8, ngf=4).eval(), folder / "score.safetensors")
    return folder, model


@pytest.fixture
def user_path(user_files, monkeypatch):
    """The user's folder on sys.path, as PYTHONPATH puts it; usermodels imported afresh by each test."""
    monkeypatch.syspath_prepend(str(user_files[0]))
    monkeypatch.delitem(sys.modules, "usermodels", raising=False)
    return user_files[0]


def clean_accuracy(model, mean=None, std=None) -> float:
    """The model's accuracy on the first N digits, computed here, without the package's loaders or the CLI."""
    data = load_digits(seed=0)
    x, y = torch.as_tensor(data.x_test[:N]), data.y_test[:N]
    if mean is not None:
        x = (x - torch.tensor(mean).reshape(1, -1, 1, 1)) / torch.tensor(std).reshape(1, -1, 1, 1)
    with torch.no_grad():
        return float((model(x).argmax(1).numpy() == y).mean())


def card(run) -> dict:
    return {r["attack"]: r for r in json.loads((run / "report.json").read_text())["card"]}


def evaluate(folder, run, *models):
    argv = ["evaluate", *RUN, *IDENTITY, "--score", str(folder / "score.safetensors"), *models, "--run-dir", str(run)]
    assert cli.main(argv) == 0
    return card(run)["clean"]


@pytest.mark.parametrize("weights", ["weights.safetensors", "weights.pt"])
def test_a_factory_outside_the_package_with_its_weights_goes_through_evaluate(user_files, user_path, tmp_path, weights):
    folder, model = user_files
    clean = evaluate(folder, tmp_path, "--classifier", "usermodels:make_cnn", "--weights", str(folder / weights))
    expected = clean_accuracy(model)
    assert expected > 0.5  # a trained model, so the number means something
    assert clean["mean"]["value"] == pytest.approx(expected)
    assert clean["baselines"]["undefended"]["value"] == pytest.approx(expected)  # the classifier attacked bare
    header = json.loads((tmp_path / "report.json").read_text())["description"]["Models"]
    assert f"classifier usermodels:make_cnn() with weights {folder / weights}" in header


def test_a_factory_is_found_in_the_working_directory(user_files, tmp_path, monkeypatch):
    monkeypatch.chdir(user_files[0])
    monkeypatch.delitem(sys.modules, "usermodels", raising=False)
    model, _ = load_classifier_arg("usermodels:make_cnn", weights="weights.safetensors")
    assert str(user_files[0]) not in sys.path  # the working directory was on the path for the import only
    assert clean_accuracy(model) == clean_accuracy(user_files[1])


def test_a_torchscript_file_goes_through_evaluate(user_files, tmp_path):
    folder, model = user_files
    clean = evaluate(folder, tmp_path, "--classifier", str(folder / "model_ts.pt"))
    assert clean["mean"]["value"] == pytest.approx(clean_accuracy(model))
    assert "(TorchScript, sha256 " in json.loads((tmp_path / "report.json").read_text())["description"]["Models"]


def test_mean_and_std_standardise_after_the_purification(user_files, user_path, tmp_path):
    folder, model = user_files
    mean, std = [0.5], [0.25]
    clean = evaluate(folder, tmp_path, "--classifier", "usermodels:make_cnn", "--weights",
                     str(folder / "weights.safetensors"), "--mean", "0.5", "--std", "0.25")  # fmt: skip
    expected = clean_accuracy(model, mean, std)
    assert expected != clean_accuracy(model)  # the standardisation changes the answer, so the test sees it
    assert clean["mean"]["value"] == pytest.approx(expected)
    assert clean["baselines"]["undefended"]["value"] == pytest.approx(expected)


def test_standardised_is_arts_preprocessing_behind_the_defences(user_files):
    """PyTorchClassifier(Standardised(model), defences) == PyTorchClassifier(model, preprocessing=(mean, std),
    defences): the same predictions and input gradients, ADP's noise drawn alike."""
    _, model = user_files
    mean, std = (0.3,), (0.45,)
    x = load_digits(seed=0).x_test[:8]
    y = np.eye(10, dtype=np.float32)[load_digits(seed=0).y_test[:8]]

    def estimator(net, **kwargs):
        purifier = art_adp.ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), sigma=0.1, steps=2, device_type="cpu")
        return PyTorchClassifier(net, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                                 clip_values=(0.0, 1.0), preprocessing_defences=[purifier], device_type="cpu",
                                 **kwargs)  # fmt: skip

    torch.manual_seed(0)
    ours = estimator(Standardised(model, mean, std))
    torch.manual_seed(0)
    art = estimator(model, preprocessing=(np.array(mean), np.array(std)))
    outputs = []
    for est in (ours, art):
        torch.manual_seed(1)
        outputs.append((est.predict(x), est.loss_gradient(x, y)))
    assert np.allclose(outputs[0][0], outputs[1][0], atol=1e-5) and np.allclose(outputs[0][1], outputs[1][1], atol=1e-6)


BAD_CLASSIFIERS = [
    (["usermodels.make_cnn"], "--classifier usermodels.make_cnn: no such file, and not package.module:factory (a ':' "
     "separates the module from the factory): write usermodels:make_cnn."),
    (["nosuchmodule:make"], "cannot import nosuchmodule (no module named 'nosuchmodule'): put it in the working "
     "directory"),
    (["usermodels:missing"], "usermodels ({usermodels.py}) has no 'missing' (--classifier usermodels:missing)."),
    (["usermodels:needs_width"], "--classifier usermodels:needs_width: the factory is called with no arguments, but "
     "its signature is needs_width(width); wrap it, e.g. def make(): return needs_width(...)."),
    (["usermodels:not_a_module"], "--classifier usermodels:not_a_module: the factory returned a str, not a "
     "torch.nn.Module."),
    (["usermodels:make_cnn", "--weights", "{score.safetensors}"], "--weights {score.safetensors} does not match the "
     "model of usermodels:make_cnn: missing ['conv.bias', 'conv.weight', 'fc.bias', 'fc.weight'], unexpected ["),
    (["{model_ts.pt}", "--weights", "{weights.pt}"], "--weights goes with --classifier package.module:factory; "
     "{model_ts.pt} is a file that holds its own weights."),
    (["{weights.pt}"], "{weights.pt} is neither an art-adp checkpoint (.safetensors) nor TorchScript (torch.jit.save); "
     "a torch.save file is never unpickled"),
    (["{weights.safetensors}"], "{weights.safetensors} is a safetensors file but not an art-adp checkpoint: for the "
     "weights of your own architecture give --classifier package.module:factory --weights {weights.safetensors}."),
    (["{model_ts.pt}", "--mean", "0.5"], "--mean and --std go together: give both (one value per channel each) or "
     "neither."),
    (["{model_ts.pt}", "--mean", "0.5,0.5,0.5", "--std", "0.2,0.2,0.2"], "--mean/--std give 3 values; the images "
     "have 1 channels."),
    (["{model_ts.pt}", "--mean", "0.5", "--std", "0"], "--mean must be finite and --std > 0, got mean [0.5] and std "
     "[0.0]."),
]  # fmt: skip


@pytest.mark.parametrize("args, message", BAD_CLASSIFIERS)
def test_bad_classifiers_are_refused_with_the_fix(user_files, user_path, tmp_path, capsys, args, message):
    folder = user_files[0]
    names = ("score.safetensors", "model_ts.pt", "weights.pt", "weights.safetensors", "usermodels.py")

    def fill(text):
        for name in names:
            text = text.replace("{" + name + "}", str(folder / name))
        return text

    argv = ["evaluate", *RUN, "--score", str(folder / "score.safetensors"), "--classifier", *map(fill, args),
            "--run-dir", str(tmp_path)]  # fmt: skip
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"art-adp evaluate: error: {fill(message)}")


def test_a_pickled_module_as_weights_is_refused_without_running_it(user_files, user_path, tmp_path, capsys):
    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)), tmp_path / "whole_model.pt")  # torch.load would run code
    argv = [
        "evaluate",
        *RUN,
        "--score",
        str(user_files[0] / "score.safetensors"),
        "--classifier",
        "usermodels:make_cnn",
        "--weights",
        str(tmp_path / "whole_model.pt"),
        "--run-dir",
        str(tmp_path),
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "was refused: torch.load(weights_only=True) met something other than tensors and plain containers" in err
    assert "save the weights as a plain state dict (model.state_dict()" in err


# -- score models: diffusers folders, NCSNv2 reference checkpoints ----------------------------------------------------


@pytest.fixture(scope="module")
def diffusers_models(tmp_path_factory):
    """A small random UNet2DModel for digits with a DDPMScheduler, written by save_pretrained in three layouts."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16),
                                 norm_num_groups=4, layers_per_block=1, add_attention=False,
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D")).eval()  # fmt: skip
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000)
    folder = tmp_path_factory.mktemp("diffusers")
    diffusers.DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder / "pipeline")
    unet.save_pretrained(folder / "flat")  # the Hub's flat layout: config.json, weights, scheduler_config.json
    scheduler.save_pretrained(folder / "flat")
    return folder, unet, scheduler


@pytest.mark.parametrize("layout", ["pipeline", "flat", "pipeline/unet"])
def test_a_diffusers_folder_gives_diffusers_own_epsilon_prediction(diffusers_models, layout):
    folder, unet, scheduler = diffusers_models
    assert (folder / "pipeline" / "model_index.json").is_file()
    model, what = load_score_arg(str(folder / layout))
    assert isinstance(model, DiffusersScore) and "diffusers UNet2DModel" in what
    h = score_at(model, 0.1)
    t = h.timestep
    alpha = scheduler.alphas_cumprod[t]
    assert ((1 - alpha) / alpha).sqrt() / 2 == pytest.approx(h.sigma) and h.sigma == pytest.approx(0.1, rel=0.02)
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x_t = alpha.sqrt() * (2 * x - 1)  # the network's scale [-1, 1], scaled to step t's variance
        theirs = unet(x_t, t).sample
        assert torch.allclose(h.noise(2 * x - 1), theirs, atol=1e-6)  # ε̂: diffusers' own prediction
        assert torch.allclose(h(x), -theirs, atol=1e-6)  # ADP's h = −ε̂


def test_a_diffusers_score_saves_and_loads_like_the_others(diffusers_models, tmp_path):
    folder = diffusers_models[0]
    h = score_at(load_score_arg(str(folder / "pipeline"))[0], 0.2)
    save_score_model(h, tmp_path / "ddpm.safetensors")  # safetensors + JSON header through art_adp.serialization
    again = load_score_model(tmp_path / "ddpm.safetensors")
    assert type(again) is DiffusersScore and (again.timestep, again.sigma) == (h.timestep, h.sigma)
    assert torch.equal(again.alphas_cumprod, h.alphas_cumprod)
    header = json.loads(__import__("safetensors").safe_open(str(tmp_path / "ddpm.safetensors"), "pt").metadata()[
        "art_adp"])  # fmt: skip
    assert header["architecture"] == "DiffusersScore" and not any(k.startswith("_") for k in header["config"]["unet"])
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(again(x), h(x))
    assert load_score_arg(str(tmp_path / "ddpm.safetensors"))[0].timestep == h.timestep


@pytest.mark.parametrize("purifier", ["adp", "reverse-diffusion"])
def test_evaluate_defends_with_a_diffusers_folder(diffusers_models, user_files, tmp_path, purifier):
    folder = diffusers_models[0]
    argv = ["evaluate", *RUN, "--n-examples", "4", "--chunk-size", "4", "--sigma", "0.1", "--steps", "2",
            "--purifier", purifier, "--score", str(folder / "pipeline"), "--classifier",
            str(user_files[0] / "model_ts.pt"), "--run-dir", str(tmp_path)]  # fmt: skip
    assert cli.main(argv) == 0
    result = json.loads((tmp_path / "report.json").read_text())
    assert [r["attack"] for r in result["card"]] == ["clean", "clf-pgd"] and result["results"]["main/clean"]["n"] == 4
    assert f"score {folder / 'pipeline'} (diffusers UNet2DModel" in result["description"]["Models"]
    defence = result["description"]["Defence"]
    assert ("VP step" in defence) if purifier == "reverse-diffusion" else defence.startswith("ADP")


def test_bad_score_folders_are_refused_with_the_fix(diffusers_models, tmp_path):
    folder = diffusers_models[0]
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ValueError,
        match=r"is not a diffusers model folder \(no unet/config.json or config.json\): "
        r"give a pipeline folder \(model_index.json, unet/, scheduler/",
    ):
        load_score_arg(str(tmp_path / "empty"))
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "config.json").write_text((folder / "flat" / "config.json").read_text())
    with pytest.raises(
        ValueError,
        match=r"has a UNet .* but no scheduler config \(scheduler_config.json in it or in "
        r"a scheduler/ folder beside it\)",
    ):
        load_score_arg(str(lonely))
    latent = tmp_path / "latent"
    latent.mkdir()
    (latent / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    with pytest.raises(
        ValueError, match=r"describes a UNet2DConditionModel; ADP reads unconditional pixel-space " r"UNet2DModels"
    ):
        load_score_arg(str(latent))
    with pytest.raises(
        ValueError, match=r"--score-config is the YAML config of an NCSNv2 reference checkpoint; .* " r"is not one\."
    ):
        load_score_arg(str(folder / "flat"), config="cifar10.yml")


def test_an_ncsnv2_reference_checkpoint_is_imported_on_the_fly(tmp_path):
    from test_import_ncsnv2 import reference_checkpoint, reference_config  # pylint: disable=import-outside-toplevel
    import yaml

    torch.save(reference_checkpoint(), tmp_path / "checkpoint_5000.pth")
    (tmp_path / "cifar10.yml").write_text(yaml.safe_dump(reference_config()))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "it needs its YAML config: pass --score-config FILE " "(configs/cifar10.yml) or put config.yml beside it."
        ),
    ):
        load_score_arg(str(tmp_path / "checkpoint_5000.pth"))
    given, what = load_score_arg(str(tmp_path / "checkpoint_5000.pth"), config=str(tmp_path / "cifar10.yml"))
    (tmp_path / "config.yml").write_text((tmp_path / "cifar10.yml").read_text())
    beside, _ = load_score_arg(str(tmp_path / "checkpoint_5000.pth"))
    expected = art_adp.score.import_ncsnv2(tmp_path / "checkpoint_5000.pth", reference_config())
    x = torch.rand(2, expected.config["in_channels"], expected.config["image_size"], expected.config["image_size"])
    with torch.no_grad():
        assert torch.equal(given(x), expected(x)) and torch.equal(beside(x), expected(x))
    assert given.training_info["weights"] == "ema" and "NCSNv2 reference checkpoint, imported" in what


def test_evaluate_detect_and_certify_take_the_same_model_flags():
    for name in ("evaluate", "detect", "certify"):
        keywords = cli.parse([name, "--classifier", "m:f", "--weights", "w.pt", "--mean", "0.5", "--std", "0.25",
                              "--score", "s", "--score-config", "c.yml"])[2]  # fmt: skip
        assert (keywords["classifier"], keywords["weights"], keywords["mean"], keywords["std"]) == (
            "m:f", "w.pt", (0.5,), (0.25,)), name  # fmt: skip
        assert keywords["score_config"] == "c.yml"


# -- --dataset sets the threat model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset, eps", [("digits", 0.175), ("mnist", 0.3), ("fashion-mnist", 8 / 255),
                                          ("cifar10", 8 / 255), ("cifar100", 8 / 255)])  # fmt: skip
def test_dataset_sets_eps_and_the_steps_follow(dataset, eps):
    _, config, keywords = cli.parse(["evaluate", "--dataset", dataset])
    c = with_eps(config, keywords["eps"], keywords["dataset"])
    assert c.eps == eps and "eps" not in c.overridden  # the data set's threat model, not an override
    assert c.step == pytest.approx(eps / 4) and c.budget("bpda-eot").eps_step == pytest.approx(eps / 4)
    assert attack_budget("apgd-eot", c)["eps"] == eps


def test_an_explicit_eps_or_step_wins_over_the_dataset():
    _, config, keywords = cli.parse(["evaluate", "--dataset", "mnist", "--eps", "0.1"])
    c = with_eps(config, keywords["eps"], keywords["dataset"])
    assert (c.eps, c.step) == (0.1, 0.025) and "eps" in c.overridden
    _, config, keywords = cli.parse(["evaluate", "--dataset", "mnist", "--eps-step", "0.01"])
    c = with_eps(config, keywords["eps"], keywords["dataset"])
    assert (c.eps, c.step) == (0.3, 0.01) and c.overridden == ("eps_step",)
    _, config, keywords = cli.parse(["evaluate", "--dataset", "mnist", "--eps", "0.3"])
    assert "eps" not in with_eps(config, keywords["eps"], keywords["dataset"]).overridden  # the data set's own


def test_detect_and_certify_take_a_users_classifier_and_a_diffusers_score(
    user_files, user_path, diffusers_models, tmp_path
):
    folder = user_files[0]
    user = ["--classifier", "usermodels:make_cnn", "--weights", str(folder / "weights.pt"), "--mean", "0.5", "--std",
            "0.25", "--device", "cpu", "--threads", "1", "--quiet"]  # fmt: skip
    detect = ["detect", "--score", str(folder / "score.safetensors"), "--attacks", "--auc-eps", "--n-calibration", "8",
              "--n-examples", "8", "--steps", "1", "--run-dir", str(tmp_path / "detect"), *user]  # fmt: skip
    assert cli.main(detect) == 0
    assert json.loads((tmp_path / "detect" / "detect.json").read_text())["n_examples"] == 8
    certify = ["certify", "--score", str(diffusers_models[0] / "pipeline"), "--sigmas", "0.25", "--n0", "4", "--n",
               "8", "--n-approximate", "4", "--n-examples", "2", "--steps", "1", "--run-dir", str(tmp_path / "certify"),
               *user]  # fmt: skip
    assert cli.main(certify) == 0
    settings = json.loads((tmp_path / "certify" / "settings.json").read_text())
    assert (settings["mean"], settings["std"]) == ([0.5], [0.25]) and len(settings["classifier_sha256"]) == 64


def test_a_model_taken_by_name_is_described_by_its_name_not_by_this_machines_path():
    """A card's Models line is committed with its result: the bundled digits models given as --score digits and
    --classifier digits were described by the absolute path of the checkout that ran them."""
    _, score = load_score_arg("digits")
    _, classifier = load_classifier_arg("digits")
    assert score.startswith("digits (NCSNv2, sha256 ") and classifier.startswith("digits (DigitsCNN, sha256 ")
    assert "/" not in score.split(" (")[0] and "/" not in classifier.split(" (")[0]
