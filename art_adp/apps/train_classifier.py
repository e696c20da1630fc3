"""``art-adp train-classifier``: one of the paper's classifiers, plainly or adversarially trained (PGD, ART's
AdversarialTrainer), its settings beside it."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

from .commands import CLASSIFIERS

__all__ = ["ClassifierTraining", "train_classifier_command"]


@dataclass(frozen=True)
class ClassifierTraining:
    """
    Settings of ``art-adp train-classifier``.

    :param arch: A name of :data:`~art_adp.apps.commands.CLASSIFIERS`.
    :param adversarial_training: l_inf PGD adversarial training (Madry et al.), saved as ``adv_classifier.safetensors``.
    :param eps: Radius of the training attack (needed with ``adversarial_training``).
    :param eps_step, max_iter, ratio: The training attack's step, PGD iterations and adversarial fraction of each
        batch (None: :func:`~art_adp.models.adversarial.train_adversarial_classifier`'s defaults).
    """

    arch: str = "digits-cnn"
    epochs: int = 15
    batch_size: int = 64
    lr: float = 1e-3
    adversarial_training: bool = False
    eps: float | None = None
    eps_step: float | None = None
    max_iter: int | None = None
    ratio: float | None = None
    seed: int = 0


def train_classifier_command(
    config: ClassifierTraining,
    *,
    dataset: str = "digits",
    data_root: str | None = None,
    run_dir: str = "runs/classifier",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """``art-adp train-classifier``: one of the paper's classifiers, plainly or adversarially trained."""
    import torch

    from .. import models
    from ..data import load_dataset

    c = config
    if c.adversarial_training and c.eps is None:
        raise ValueError(
            "--adversarial-training needs --eps, the l_inf radius of the training attack on the [0, 1] "
            "pixel scale (the digits demo attacks at 0.175)"
        )
    if not c.adversarial_training and any(v is not None for v in (c.eps, c.eps_step, c.max_iter, c.ratio)):
        raise ValueError("--eps, --eps-step, --max-iter and --ratio apply only with --adversarial-training")
    data = load_dataset(dataset, data_root)
    _, channels, size, _ = data.x_train.shape
    cls = getattr(models, CLASSIFIERS[c.arch])
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same model
    model = cls(in_channels=channels, image_size=size, nb_classes=data.nb_classes)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if c.adversarial_training:
        _train_adversarial(c, model.to(device), data, Path(run_dir), progress)
        return
    model = models.train_classifier(
        model,
        data.x_train,
        data.y_train,
        epochs=c.epochs,
        batch_size=c.batch_size,
        lr=c.lr,
        seed=c.seed,
        progress=progress,
        device=device,
        x_val=data.x_test,
        y_val=data.y_test,
    )
    path = Path(run_dir) / "classifier.safetensors"
    models.save_classifier(model, path)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    (Path(run_dir) / "classifier.json").write_text(json.dumps({"test_accuracy": acc, "arch": c.arch}))
    print(f"classifier: {path} (test accuracy {100 * acc:.2f} %)")


def _train_adversarial(c: ClassifierTraining, model, data, run_dir: Path, progress: bool) -> None:
    """``train-classifier --adversarial-training``: PGD adversarial training, saved as adv_classifier.safetensors.
    Checkpointed after every epoch to adv_classifier.train.safetensors: the same command resumes an interrupted run
    (or continues to a larger --epochs) where it stopped."""
    from .. import models
    from ..models.adversarial import default_eps_step, train_adversarial_classifier

    assert c.eps is not None  # checked by the command
    defaults = inspect.signature(train_adversarial_classifier).parameters
    max_iter = defaults["max_iter"].default if c.max_iter is None else c.max_iter
    ratio = defaults["ratio"].default if c.ratio is None else c.ratio
    eps_step = default_eps_step(c.eps, max_iter) if c.eps_step is None else c.eps_step
    model = train_adversarial_classifier(
        model,
        data.x_train,
        data.y_train,
        eps=c.eps,
        eps_step=eps_step,
        max_iter=max_iter,
        epochs=c.epochs,
        batch_size=c.batch_size,
        ratio=ratio,
        seed=c.seed,
        verbose=progress,
        lr=c.lr,
        checkpoint_path=run_dir / "adv_classifier.train.safetensors",
    )
    settings = {
        "eps": c.eps,
        "eps_step": eps_step,
        "max_iter": max_iter,
        "ratio": ratio,
        "epochs": c.epochs,
        "batch_size": c.batch_size,
        "lr": c.lr,
        "seed": c.seed,
    }
    path = run_dir / "adv_classifier.safetensors"
    models.save_classifier(model, path, adversarial_training=settings)
    acc = models.evaluate_accuracy(model, data.x_test, data.y_test)
    (run_dir / "adv_classifier.json").write_text(
        json.dumps({"test_accuracy": acc, "arch": c.arch, "adversarial_training": settings})
    )
    print(
        f"adversarially trained classifier: {path} (clean test accuracy {100 * acc:.2f} %, "
        f"PGD eps {c.eps:g}, {max_iter} steps of {eps_step:.4g})"
    )
