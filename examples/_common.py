"""What the example notebooks share: the digits models (trained with the demo's recipe of art-adp 0.1, NCSNv2 ngf 16
for 1,000 steps, into a folder keyed by their settings and data, then loaded), run folders keyed by their settings
and data, writing example files only into empty folders, and saving figures.

The notebooks import it as ``_common``: Jupyter runs a notebook in its own folder (``examples/``), which is on the
kernel's ``sys.path``, and ``examples/execute.py`` puts that folder on the kernel's ``PYTHONPATH`` wherever the
kernel runs. It uses the public API of art_adp only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from art_adp import NCSNv2, geometric_sigmas, load_score_model, train_score_model
from art_adp.data import load_digits
from art_adp.models import DigitsCNN, evaluate_accuracy, load_classifier, save_classifier, train_classifier

__all__ = [
    "array_digest",
    "digits_model_folder",
    "empty_or_absent",
    "file_digest",
    "load_or_train_digits_models",
    "new_folder",
    "run_folder",
    "save_figure",
]


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


DIGITS_SIGMAS = [float(s) for s in geometric_sigmas(1.0, 0.01, 12)]  # the demo's training noise levels


def digits_model_folder(
    root: str | os.PathLike, *, data: str, score_iterations: int, ngf: int, classifier_epochs: int, seed: int
) -> Path:
    """
    The folder of the digits models trained with these settings on this data: ``root/<16 hex digits>``
    (:func:`run_folder` of the data's digest and every training setting), created. The same settings and data give
    the same folder, so a second run reuses its models (or resumes an interrupted training); changing any of them
    gives a new folder, so a model trained under other settings is never loaded in their place.

    :param root: The folder that holds one sub-folder per setting (the notebooks' ``MODEL_DIR``).
    :param data: Digest of the training images and labels (:func:`array_digest`).
    :param score_iterations: DSM steps of the score model.
    :param ngf: The NCSNv2's width.
    :param classifier_epochs: Epochs of the classifier.
    :param seed: Seed of the training generators and of both models' initial weights.
    :return: The folder.
    """
    return run_folder(
        root,
        {
            "data": data,
            "score": {
                "model": "NCSNv2",
                "ngf": ngf,
                "iterations": score_iterations,
                "sigmas": DIGITS_SIGMAS,
                "batch_size": 64,
            },
            "classifier": {"model": "DigitsCNN", "epochs": classifier_epochs, "batch_size": 64},
            "seed": seed,
        },
    )


def load_or_train_digits_models(
    root: str | os.PathLike,
    *,
    score_iterations: int = 1000,
    ngf: int = 16,
    classifier_epochs: int = 15,
    seed: int = 0,
):
    """
    The digits score model and classifier, trained with the recipe of ``art-adp demo`` (an NCSNv2 of width ``ngf``
    trained by denoising score matching on 12 noise levels from 1 to 0.01, batch 64; a DigitsCNN, batch 64) in the
    sub-folder of ``root`` that these settings and the data name (:func:`digits_model_folder`). A finished model
    found there is loaded; a score model whose training was interrupted is resumed from its checkpoint up to
    ``score_iterations`` (``train_score_model``'s own resume, bit for bit the uninterrupted run), never used as it
    is; anything missing is trained and saved there. Prints which it did, with the classifier's test accuracy.

    :param root: The folder that holds one sub-folder per setting (the notebooks' ``MODEL_DIR``).
    :param score_iterations: DSM steps of the score model.
    :param ngf: The NCSNv2's width.
    :param classifier_epochs: Epochs of the classifier.
    :param seed: Seed of the training generators and of both models' initial weights.
    :return: ``(data, score, classifier, folder)``: the digits (``art_adp.data.load_digits()``), the score model and
        the classifier, both on the CPU in eval mode, and the folder that holds them.
    """
    data = load_digits()
    folder = digits_model_folder(
        root,
        data=array_digest(data.x_train, data.y_train),
        score_iterations=score_iterations,
        ngf=ngf,
        classifier_epochs=classifier_epochs,
        seed=seed,
    )
    score_path, classifier_path = folder / "score.safetensors", folder / "classifier.safetensors"
    found = load_score_model(score_path, "cpu").training_info["step"] if score_path.exists() else None
    torch.manual_seed(seed)  # the initial weights (a resumed training takes its own from the checkpoint)
    score = train_score_model(  # continues a checkpoint found there; returns it at once if it is finished
        NCSNv2(1, 8, ngf=ngf),
        data.x_train,
        DIGITS_SIGMAS,
        score_iterations,
        batch_size=64,
        checkpoint_path=score_path,
        resume=True,
        checkpoint_every=100,
        seed=seed,
        progress=False,
    )
    if found is None:
        done = [f"score model trained ({score_iterations} steps) and saved to {score_path}"]
    elif found < score_iterations:
        done = [f"score model: interrupted training resumed from step {found} to {score_iterations} in {score_path}"]
    else:
        done = [f"score model loaded from {score_path}"]
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
    print(
        f"score model: {type(score).__name__}, step {score.training_info['step']}; classifier test accuracy "
        f"{100 * evaluate_accuracy(classifier, data.x_test, data.y_test):.1f} %"
    )
    return data, score, classifier.cpu(), folder


def empty_or_absent(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` does not exist or is a folder with nothing in it."""
    folder = Path(folder)
    return not folder.exists() or (folder.is_dir() and not any(folder.iterdir()))


@contextlib.contextmanager
def new_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """
    Write files into ``folder`` only if it is absent or empty. Yields a fresh sibling, ``<folder>.art-adp-partial``,
    to write into; when the block ends without an error it becomes ``folder``. An interrupted write leaves only that
    sibling (started afresh by the next call), never a half-filled ``folder`` that a later run would take for
    complete data; a folder that holds anything (a data set of your own) is never written to.

    :param folder: The folder to fill.
    :raises ValueError: If ``folder`` exists and is not an empty folder.
    """
    folder = Path(folder)
    if not empty_or_absent(folder):
        raise ValueError(
            f"{folder} is not an empty folder: example files are written only into an empty or absent folder. "
            "Point it at a new folder, or read the files that are there without writing."
        )
    partial = folder.with_name(folder.name + ".art-adp-partial")
    if partial.exists():  # left by an interrupted write
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    yield partial
    if folder.exists():
        folder.rmdir()  # empty (checked above); rename needs the name free on every platform
    partial.rename(folder)


def save_figure(fig, name: str, figure_dir: str | os.PathLike | None) -> None:
    """Keep a figure as ``figure_dir/name`` (120 dpi) when a folder is given; a notebook shows it inline either way."""
    if figure_dir is not None:
        Path(figure_dir).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(figure_dir) / name, dpi=120, bbox_inches="tight")
