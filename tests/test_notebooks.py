"""The example notebooks run top to bottom at small settings (their parameters cell overridden) and print what
they claim; they are stored without outputs, each with one cell tagged ``parameters``."""

import hashlib
import importlib.util
import json
import shutil
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
    "05_your_own_data": dict(CLI_ITERATIONS=2, N_EXAMPLES=12, PGD_STEPS=2),
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
        "| BPDA+EOT | 2 it of 0.04375, EOT 2 (mean) (below reference: iterations 2 < 40, eot 2 < 15) |",
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
    """A 30-step score model and a 2-epoch classifier on the digits, saved where notebooks 02-04 load them."""
    from art_adp import NCSNv2, geometric_sigmas, train_score_model
    from art_adp.data import load_digits
    from art_adp.models import DigitsCNN, save_classifier, train_classifier

    folder = tmp_path_factory.mktemp("models")
    data = load_digits()
    train_score_model(NCSNv2(1, 8, ngf=8), data.x_train, geometric_sigmas(1.0, 0.01, 12), 30, batch_size=64,
                      checkpoint_path=folder / "score.safetensors", seed=0, progress=False)
    torch.manual_seed(0)
    save_classifier(train_classifier(DigitsCNN(nb_classes=10), data.x_train, data.y_train, epochs=2, batch_size=64,
                                     seed=0, progress=False), folder / "classifier.safetensors")
    return folder


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
    images = cwd / "runs" / "your-own-data" / "images"
    for f in images.rglob("*.png"):
        if f.parts[-3] == "test" or int(f.stem) % 2 == 0:
            target = cwd / "other-images" / f.relative_to(images)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    text = run_small(path, cwd, tiny_models, WRITE_EXAMPLE_FILES=False, IMAGE_DIR="other-images")
    assert "train (719, 1, 8, 8), test (360, 1, 8, 8)" in text, text
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
