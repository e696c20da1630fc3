"""What the example notebooks share: the digits models (loaded, or trained with the demo's recipe), run folders keyed
by their settings and data, and saving figures.

The notebooks import it as ``_common``: Jupyter runs a notebook in its own folder (``examples/``), which is on the
kernel's ``sys.path``, and ``examples/execute.py`` puts that folder on the kernel's ``PYTHONPATH`` wherever the
kernel runs. It uses the public API of art_adp only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from art_adp import NCSNv2, geometric_sigmas, load_score_model, train_score_model
from art_adp.data import load_digits
from art_adp.models import DigitsCNN, evaluate_accuracy, load_classifier, save_classifier, train_classifier

__all__ = ["array_digest", "file_digest", "load_or_train_digits_models", "run_folder", "save_figure"]


def array_digest(*arrays) -> str:
    """First 16 hex digits of the SHA-256 of the arrays' shapes, dtypes and bytes: names a data set."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def file_digest(path: str | os.PathLike) -> str:
    """First 16 hex digits of the SHA-256 of a file (e.g. a checkpoint)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def run_folder(root: str | os.PathLike, settings: dict) -> Path:
    """
    The run folder for these settings: ``root/<16 hex digits of their SHA-256>``, with the settings in its
    ``settings.json``. The same settings (and data, when a digest of it is among them) give the same folder, so a
    second run resumes or reuses it; any change gives a fresh one, so nothing trained or attacked under other
    settings is reused, and no settings guard refuses the run.

    :param root: The folder that holds one sub-folder per setting.
    :param settings: JSON-able values that change what the run computes (tuples are stored as lists).
    :return: The folder, created.
    """
    text = json.dumps(settings, sort_keys=True, default=str)
    folder = Path(root) / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n")
    return folder


def load_or_train_digits_models(
    model_dir: str | os.PathLike,
    *,
    score_iterations: int = 1000,
    ngf: int = 16,
    classifier_epochs: int = 15,
    seed: int = 0,
):
    """
    The digits score model and classifier of ``art-adp demo``: loaded from ``model_dir/score.safetensors`` and
    ``model_dir/classifier.safetensors`` where they exist, otherwise trained with the demo's recipe and saved there
    (an NCSNv2 of width ``ngf`` trained by denoising score matching on 12 noise levels from 1 to 0.01, batch 64; a
    DigitsCNN, batch 64). Prints which it did, with the classifier's test accuracy. A model found there is used
    whatever the training settings: point ``model_dir`` at an empty folder to train with other ones.

    :param model_dir: Folder of the two models (the demo's ``runs/demo``, or any other).
    :param score_iterations: DSM steps, if the score model is trained here.
    :param ngf: The NCSNv2's width, if trained here.
    :param classifier_epochs: Epochs, if the classifier is trained here.
    :param seed: Seed of the training generators and of the classifier's initial weights.
    :return: ``(data, score, classifier)``: the digits (``art_adp.data.load_digits()``), the score model and the
        classifier, both on the CPU in eval mode.
    """
    data = load_digits()
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    score_path, classifier_path = model_dir / "score.safetensors", model_dir / "classifier.safetensors"
    done = []
    if score_path.exists():
        score = load_score_model(score_path, "cpu")
        done.append(f"score model loaded from {score_path}")
    else:
        score = train_score_model(
            NCSNv2(1, 8, ngf=ngf),
            data.x_train,
            geometric_sigmas(1.0, 0.01, 12),
            score_iterations,
            batch_size=64,
            checkpoint_path=score_path,
            checkpoint_every=100,
            seed=seed,
            progress=False,
        )
        done.append(f"score model trained ({score_iterations} steps) and saved to {score_path}")
    if classifier_path.exists():
        classifier = load_classifier(classifier_path, "cpu")
        done.append(f"classifier loaded from {classifier_path}")
    else:
        torch.manual_seed(seed)  # the initial weights
        classifier = train_classifier(
            DigitsCNN(nb_classes=10),
            data.x_train,
            data.y_train,
            epochs=classifier_epochs,
            batch_size=64,
            seed=seed,
            progress=False,
        )
        save_classifier(classifier, classifier_path)
        done.append(f"classifier trained ({classifier_epochs} epochs) and saved to {classifier_path}")
    classifier.eval()
    print("; ".join(done))
    step = getattr(score, "training_info", {}).get("step")
    print(
        f"score model: {type(score).__name__}, step {step}; classifier test accuracy "
        f"{100 * evaluate_accuracy(classifier, data.x_test, data.y_test):.1f} %"
    )
    return data, score, classifier.cpu()


def save_figure(fig, name: str, figure_dir: str | os.PathLike | None) -> None:
    """Keep a figure as ``figure_dir/name`` (120 dpi) when a folder is given; a notebook shows it inline either way."""
    if figure_dir is not None:
        Path(figure_dir).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(figure_dir) / name, dpi=120, bbox_inches="tight")
