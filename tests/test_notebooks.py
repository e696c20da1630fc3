"""The example notebooks run top to bottom at small settings (their parameters cell overridden) and print what
they claim; they are stored without outputs, each with one cell tagged ``parameters``. Executing them is end to end
(marked ``e2e``: CI runs it after the suite, ``python -m pytest -m e2e``); the checks on their sources, the run
folders and the model cache are not."""

import gzip
import hashlib
import importlib.util
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
_spec = importlib.util.spec_from_file_location("notebook_execute", EXAMPLES / "execute.py")
notebook_execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebook_execute)
_spec = importlib.util.spec_from_file_location("notebook_common", EXAMPLES / "_common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

SMALL = dict(SCORE_ITERATIONS=30, NGF=8, CLASSIFIER_EPOCHS=2, STEPS=2, RUNS=2)
SETTINGS = {
    "01_quickstart": dict(N_EXAMPLES=20, PGD_STEPS=2),
    "02_attacking_adp_honestly": dict(N_EXAMPLES=12, PGD_STEPS=2, REPEATS=2, EOT_DRAWS=[1, 2], N_GRAD=4,
                                      EOT_SWEEP=[1, 2], GRAD_REFERENCE_DRAWS=4),
    "03_torchattacks": dict(N_EXAMPLES=6, N_SLOW=3, ATTACK_STEPS=2, EOT_ITER=2, SPSA_ITERATIONS=1, SPSA_SAMPLES=4,
                            AUTOATTACK_EOT_ITER=1),
    "04_detection_and_certification": dict(N_CALIBRATION=40, N_EXAMPLES=20, PGD_STEPS=2, N_CERTIFY=3,
                                           CERT_SIGMAS=[0.25], N0=10, N_DRAWS=40, SMOOTHING_SAMPLES=20),
    "05_your_own_data": dict(CLI_ITERATIONS=2, N_EXAMPLES=12, PGD_STEPS=2, IMAGE_DIR="runs/your-own-data/images",
                             IDX_DIR="runs/your-own-data/idx", RUN_DIR="runs/your-own-data"),
    "06_evaluation_card": dict(
        EVAL_RUN_DIR="evaluate",
        EVAL_SETTINGS={"attacks": ("clf-pgd", "bpda-eot"), "n_examples": 6, "chunk_size": 6, "sanity_examples": 6}),
    "07_diffusion_purifiers": dict(
        DENOISER_DIR="denoiser", DENOISER_ITERATIONS=30, DENOISER_CHANNELS=(8, 8),
        EVAL_SETTINGS={"attacks": ("clf-pgd", "bpda-eot"), "n_examples": 6, "chunk_size": 6, "sanity_examples": 6}),
}
# What each notebook must print at any setting (checked on its text output).
CLAIMS = {
    "01_quickstart": ["defended, S = 2 ensemble:", "BPDA PGD", "Clf-PGD (preprocessor-blind)"],
    "02_attacking_adp_honestly": [
        "BPDA gradient vs the classifier's gradient at the purified point: max |difference| = 0.00e+00",
        "PGD-EOT, full, 2 draws", "S-ens. worst"],
    "03_torchattacks": ["PGD", "EOTPGD (eot_iter=2)", "APGD-CE (eot_iter=2)", "SPSA (1 it, 4 samples)",
                        'AutoAttack "rand" (APGD-CE + APGD-DLR), EOT 1'],
    "04_detection_and_certification": ["ROC AUC", "two-level ADP", "certified accuracy"],
    "05_your_own_data": ["train (1437, 1, 8, 8), test (360, 1, 8, 8)", "idx files readable: (1437, 1, 28, 28)",
                         "MSE(noisy) / MSE(denoised)"],
    "06_evaluation_card": [
        # the evaluation card of the smoke preset (overridden in SETTINGS): scale line, overrides, the four statistics
        # with CIs, the sanity report, and no claim
        "SMOKE-SCALE RUN, NOT A ROBUSTNESS CLAIM: budgets below the reference",
        "Preset: smoke, overridden: attacks = ['clf-pgd', 'bpda-eot'], chunk_size = 6, eps = 0.175, n_examples = 6",
        "| Attack | Budget | Undefended | ADP mean | ADP worst of R | ADP majority of R | ADP fixed noise | n |",
        "| BPDA+EOT | 2 it of 0.04375, EOT 2 (mean) (below reference: max_iter 2 < 40, eot_samples 2 < 15) |",
        "Sanity report", "- bpda-eot on the first 6 examples: accuracy", "% at eps 1;",
        "No strongest attack named: budgets below the reference.", "scale = 'smoke', claim = False"],
    "07_diffusion_purifiers": [
        "denoiser trained here: 30 steps", "ADP sigma = 0.25, T = 2 adaptive steps",
        "reverse diffusion to sigma* = 0.25, K = 2 ddim steps: clean accuracy",
        "denoised smoothing sigma = 0.25, one denoiser call: clean accuracy",
        "SMOKE-SCALE RUN, NOT A ROBUSTNESS CLAIM", "| Purifier | Attack | Budget | mean | worst of R |",
        "| Reverse diffusion | BPDA+EOT |", "| Denoised smoothing | Natural (clean) |", "notebook wall time"],
}


def text_output(nb) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.get("output_type") == "stream")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """A 30-step score model and a 2-epoch classifier on the digits, in the sub-folder of a MODEL_DIR where notebooks
    02-04 and 06 load them at their small settings (SMALL)."""
    root = tmp_path_factory.mktemp("models")
    common.load_or_train_digits_models(root, score_iterations=SMALL["SCORE_ITERATIONS"], ngf=SMALL["NGF"],
                                       classifier_epochs=SMALL["CLASSIFIER_EPOCHS"], seed=0)
    return root


def test_there_are_seven_notebooks():
    assert [p.stem for p in NOTEBOOKS] == list(SETTINGS)


def parameter_names(nb) -> set:
    """The names the cell tagged ``parameters`` assigns."""
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    return {line.split("=")[0].strip() for line in "".join(cell["source"]).splitlines()
            if "=" in line and not line.startswith((" ", "#"))}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs_with_one_parameters_cell(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), f"{path.name}: clear the outputs"
    assert sum("parameters" in c.get("metadata", {}).get("tags", []) for c in code) == 1
    # every override below names a real parameter (a typo would silently run the full settings in CI)
    assert set(SETTINGS[path.stem]) <= parameter_names(nb), set(SETTINGS[path.stem]) - parameter_names(nb)


def test_inject_parameters_needs_a_parameters_cell():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match="no cell tagged 'parameters'"):
        notebook_execute.inject_parameters(nb, {"x": 2})
    nb.cells[0].metadata["tags"] = ["parameters"]
    notebook_execute.inject_parameters(nb, {"x": 2, "name": "a"})
    assert nb.cells[1].source == "# Parameters injected by examples/execute.py\nx = 2\nname = 'a'\n"


def run_small(path, cwd, tiny_models, **overrides) -> str:
    """Execute a notebook at its small settings (plus ``overrides``) in ``cwd``; its text output."""
    names = parameter_names(json.loads(path.read_text()))
    parameters = {**{k: v for k, v in SMALL.items() if k in names}, **SETTINGS[path.stem], **overrides}
    if "MODEL_DIR" in names:  # notebook 01 trains its own models (the "train" branch); 02-04, 06, 07 load the tiny ones
        parameters["MODEL_DIR"] = "models" if path.stem == "01_quickstart" else str(tiny_models)
    nb, seconds = notebook_execute.execute(path, parameters, cwd=cwd, timeout=600)
    print(f"{path.name}: {seconds:.1f} s")
    return text_output(nb)


def run_again_on_other_images(path, cwd, tiny_models, first):
    """05, run again on other images (every second training image): a new score model in a new run folder, not the
    first run's checkpoint (which a folder keyed by nothing would reuse, or refuse to resume); the unchanged idx
    files reuse the CLI's model."""
    assert first.count("new, trained from scratch") == 2, first
    assert "runs/your-own-data/images was empty or absent: the digits written there as PNGs" in first
    assert "runs/your-own-data/idx was empty or absent: the digits written there as idx files" in first
    # the command it prints is the one it ran from the kernel's parent folder (a repository root's place)
    assert ("in the repository root (the notebook's parent folder): art-adp train-score --dataset mnist --data-root "
            f"{cwd.name}/runs/your-own-data/idx --iterations 2 --ngf 8 --batch-size 32 --sigma-begin 1.0 "
            f"--num-sigmas 12 --run-dir {cwd.name}/runs/your-own-data/cli/") in first, first
    images = cwd / "runs" / "your-own-data" / "images"
    for f in images.rglob("*.png"):
        if f.parts[-3] == "test" or int(f.stem) % 2 == 0:
            target = cwd / "other-images" / f.relative_to(images)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    text = run_small(path, cwd, tiny_models, WRITE_EXAMPLE_FILES=False, IMAGE_DIR="other-images")
    assert "train (719, 1, 8, 8), test (360, 1, 8, 8)" in text, text
    assert "runs/your-own-data/idx: its files are read as they are, nothing is written there" in text
    assert "score model: step 30" in text
    assert text.count("new, trained from scratch") == 1 and text.count("settings found, resumed") == 1, text
    assert len(list((cwd / "runs" / "your-own-data" / "score").iterdir())) == 2


def run_again_with_other_eps_and_sigma(path, cwd, tiny_models, first):
    """06, run again with another eps and sigma in the same place: a second card in a new run folder (a folder keyed
    by nothing would be refused by the evaluation's settings guard)."""
    text = run_small(path, cwd, tiny_models, EPS=0.1, SIGMA=0.3)
    assert "chunk_size = 6, eps = 0.1, n_examples = 6" in text and "ADP sigma = 0.3" in text, text
    assert "SMOKE-SCALE RUN, NOT A ROBUSTNESS CLAIM" in text
    assert len(list((cwd / "evaluate").glob("*/report.md"))) == 2


RUN_AGAIN = {"05_your_own_data": run_again_on_other_images, "06_evaluation_card": run_again_with_other_eps_and_sigma}


@pytest.mark.e2e
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_small_settings(path, tmp_path, tiny_models):
    """Each notebook prints what it claims; 05 and 06 also run a second time with other data or settings."""
    if path.stem == "03_torchattacks":
        pytest.importorskip("torchattacks")
    text = run_small(path, tmp_path, tiny_models)
    for claim in CLAIMS[path.stem]:
        assert claim in text, f"{path.name}: {claim!r} not in its output:\n{text}"
    if path.stem in RUN_AGAIN:
        RUN_AGAIN[path.stem](path, tmp_path, tiny_models, text)


def test_run_folder_is_keyed_by_settings_and_data(tmp_path):
    """The notebooks' run folders: the same settings give the same folder, any change another."""
    settings = {"eps": 0.1, "data": common.array_digest(np.zeros((2, 3), np.float32))}
    folder = common.run_folder(tmp_path, settings)
    assert folder.name == hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    assert json.loads((folder / "settings.json").read_text()) == settings
    assert common.run_folder(tmp_path, dict(reversed(settings.items()))) == folder
    assert common.run_folder(tmp_path, {**settings, "eps": 0.2}) != folder
    other_data = {**settings, "data": common.array_digest(np.zeros((3, 2), np.float32))}  # same bytes, other shape
    assert common.run_folder(tmp_path, other_data) != folder


def test_digits_model_folder_is_keyed_by_training_settings_and_data(tmp_path):
    """Notebooks 01-04 and 06 keep their models in a folder named by the data and every training setting: the same
    ones give the same folder, a change of any one a new folder (never a model trained otherwise)."""
    base = dict(data="0123456789abcdef", score_iterations=1000, ngf=16, classifier_epochs=15, seed=0)
    folder = common.digits_model_folder(tmp_path, **base)
    assert folder.parent == tmp_path and len(folder.name) == 16
    assert common.digits_model_folder(tmp_path, **dict(reversed(base.items()))) == folder
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["data"] == base["data"] and settings["score"]["iterations"] == 1000
    assert settings["score"]["ngf"] == 16 and settings["classifier"]["epochs"] == 15 and settings["seed"] == 0
    changed = dict(data="fedcba9876543210", score_iterations=999, ngf=8, classifier_epochs=14, seed=1)
    others = {common.digits_model_folder(tmp_path, **{**base, name: value}) for name, value in changed.items()}
    assert len(others) == len(changed) and folder not in others


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem != "05_your_own_data"], ids=lambda p: p.stem)
def test_notebook_passes_every_training_setting_to_the_model_folder(path):
    """What names the models' folder is what the parameters cell says, not a fixed folder."""
    source = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    assert ("load_or_train_digits_models(\n    MODEL_DIR, score_iterations=SCORE_ITERATIONS, ngf=NGF, "
            "classifier_epochs=CLASSIFIER_EPOCHS, seed=SEED)") in source
    assert "runs/demo" not in source


def test_interrupted_first_run_resumes_the_score_model(tmp_path, monkeypatch, capsys):
    """A score model whose training was interrupted is resumed to its step count, never used as it is; the result
    equals the uninterrupted training's weights exactly; a later run loads both models."""
    import art_adp.score.train as training
    from art_adp import load_score_model

    settings = dict(score_iterations=12, ngf=4, classifier_epochs=1, seed=0)
    real = training.tqdm

    class InterruptedAfterFiveSteps(real):  # Ctrl-C between step 5 and step 6 (the bar is updated after each step)
        def update(self, n=1):
            super().update(n)
            self.steps = getattr(self, "steps", 0) + n
            if self.steps == 5:
                raise KeyboardInterrupt

    monkeypatch.setattr(training, "tqdm", InterruptedAfterFiveSteps)
    with pytest.raises(KeyboardInterrupt):
        common.load_or_train_digits_models(tmp_path / "interrupted", **settings)
    monkeypatch.setattr(training, "tqdm", real)
    (folder,) = (tmp_path / "interrupted").iterdir()
    assert load_score_model(folder / "score.safetensors").training_info["step"] == 5
    assert not (folder / "classifier.safetensors").exists()
    capsys.readouterr()

    _, score, _, resumed_in = common.load_or_train_digits_models(tmp_path / "interrupted", **settings)
    out = capsys.readouterr().out
    assert resumed_in == folder
    assert f"score model: interrupted training resumed from step 5 to 12 in {folder / 'score.safetensors'}" in out
    assert "score model: NCSNv2, step 12;" in out and score.training_info["step"] == 12
    _, reference, _, _ = common.load_or_train_digits_models(tmp_path / "uninterrupted", **settings)
    assert "score model trained (12 steps)" in capsys.readouterr().out
    for (name, a), (_, b) in zip(score.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), name
    common.load_or_train_digits_models(tmp_path / "interrupted", **settings)
    assert f"score model loaded from {folder / 'score.safetensors'}; classifier loaded from" in capsys.readouterr().out


def test_example_files_go_only_into_empty_or_absent_folders(tmp_path):
    """new_folder fills an absent or empty folder (through a sibling renamed at the end), refuses one that holds
    anything without touching it, and an interrupted write leaves the folder as it was."""
    mine = tmp_path / "mnist"
    mine.mkdir()
    (mine / "train-images-idx3-ubyte.gz").write_bytes(b"mine")
    with pytest.raises(ValueError, match=r"mnist is not an empty folder: example files are written only into an "
                                         r"empty or absent folder\. Point it at a new folder"):
        with common.new_folder(mine):
            pass
    assert os.listdir(tmp_path) == ["mnist"] and os.listdir(mine) == ["train-images-idx3-ubyte.gz"]
    assert (mine / "train-images-idx3-ubyte.gz").read_bytes() == b"mine"

    for target in (tmp_path / "absent" / "images", tmp_path / "empty"):
        if target.name == "empty":
            target.mkdir()
        assert common.empty_or_absent(target)
        with common.new_folder(target) as folder:
            assert folder != target
            (folder / "0.png").write_bytes(b"0")
        assert os.listdir(target) == ["0.png"] and not common.empty_or_absent(target)
        assert not target.with_name(target.name + ".art-adp-partial").exists()

    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        with common.new_folder(cut) as folder:
            (folder / "half.png").write_bytes(b"x")
            raise KeyboardInterrupt
    assert not cut.exists()
    with common.new_folder(cut) as folder:  # starts afresh: the half-written file is gone
        (folder / "whole.png").write_bytes(b"y")
    assert os.listdir(cut) == ["whole.png"] and not (tmp_path / "cut.art-adp-partial").exists()


def write_idx(path, array):
    """An MNIST-format idx file (gzip), as a real MNIST download holds."""
    array = np.asarray(array, dtype=np.uint8)
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape) + array.tobytes())


def snapshot(root: Path) -> dict:
    """Every path under root (root included) with its mode, modification time and, for a file, content hash."""
    return {str(p.relative_to(root)): (p.stat().st_mode, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in [root, *sorted(root.rglob("*"))]}


@pytest.mark.e2e
def test_notebook_05_never_writes_into_folders_of_your_own(tmp_path, tiny_models):
    """Pointed at a read-only folder of class sub-folders (colour 12x12 PNGs) and a writable folder of MNIST idx
    files, notebook 05 reads them and writes, overwrites or removes nothing in either (modes, times and bytes
    unchanged); its classifier and score model take their channel count and image size from the data. (Run as root,
    the permission bits stop no write: the unchanged snapshot is then what shows that none happened.)"""
    from PIL import Image

    rng = np.random.default_rng(0)
    user = tmp_path / "user"
    for split, n in (("train", 12), ("test", 8)):
        for label in ("cat", "dog"):
            (user / "images" / split / label).mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(image, mode="RGB").save(user / "images" / split / label / f"{i:03d}.png")
    (user / "mnist").mkdir()
    for prefix, n in (("train", 20), ("t10k", 12)):
        write_idx(user / "mnist" / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(user / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, n))
    for p in [user / "images", *(user / "images").rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = snapshot(user)
    try:
        text = run_small(EXAMPLES / "05_your_own_data.ipynb", tmp_path, tiny_models, IMAGE_DIR=str(user / "images"),
                         IDX_DIR=str(user / "mnist"))
        after = snapshot(user)
    finally:
        for p in [user, *user.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)  # so that pytest can remove it
    assert after == before
    assert f"{user / 'images'}: its files are read as they are, nothing is written there" in text
    assert f"{user / 'mnist'}: its files are read as they are, nothing is written there" in text
    assert "train (24, 3, 12, 12), test (16, 3, 12, 12), classes ['cat', 'dog'], values in" in text, text
    assert "idx files readable: (20, 1, 28, 28)" in text
    assert "CLI model (28×28)" in text and "ADP ensemble" in text


def test_notebooks_page_is_rendered_from_its_record():
    """docs/notebooks.md is examples/render_notebooks_doc.py's rendering of docs/notebooks.json, one section per
    notebook, and every figure it shows is in docs/."""
    spec = importlib.util.spec_from_file_location("render_notebooks_doc", EXAMPLES / "render_notebooks_doc.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    record = json.loads((ROOT / "docs" / "notebooks.json").read_text())
    assert (ROOT / "docs" / "notebooks.md").read_text() == render.render(record), "run examples/render_notebooks_doc.py"
    assert [e["name"] for e in record] == [p.stem for p in NOTEBOOKS]
    for entry in record:
        assert all((ROOT / "docs" / name).is_file() for name in entry["figures"]), entry["figures"]
        assert "notebook wall time" in entry["output"]  # a complete run: its last cell printed
