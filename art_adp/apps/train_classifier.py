"""``art-adp train-classifier``: one of the paper's classifiers, plainly or adversarially trained (PGD, ART's
AdversarialTrainer), bare or behind a purifier (``--purifier``: trained on purified inputs, or adversarially through
the purifier), its settings beside it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .commands import CLASSIFIERS
from .levers_presets import ONE_STEP, SETTING_NAMES
from ..runs.records import write_json

__all__ = ["ClassifierTraining", "train_classifier_command", "HELPS", "OPTIONS"]

#: The flags' help (the command line reads it from here).
HELPS = {
    "adversarial_training": "l_inf PGD adversarial training (Madry et al.; ART AdversarialTrainer), the baseline "
    "defence, through the purifier with --purifier; saves adv_classifier.safetensors",
    "eps": "l_inf radius of the training attack (with --adversarial-training; demo: 0.175)",
    "eps_step": "PGD step (None: 2.5 eps / max-iter)", "max_iter": "PGD steps per batch (None: 10)",
    "ratio": "fraction of each batch made adversarial (None: 1)",
    "purifier": "train behind a purification: the exact score over the training split (oracle; each training image "
    "left out of its own) or --denoiser's; plainly (each epoch purified afresh) or with --adversarial-training through "
    "it (full gradient, one draw per PGD step); the checkpoint records it",
    "setting": "the purification (art-adp levers' names: the one-step denoise at sigma, ADP's schedules)",
}  # fmt: skip
#: The flags' choices.
OPTIONS: dict[str, dict[str, Any]] = {
    "purifier": {"choices": ["oracle", "denoiser"]},
    "setting": {"choices": SETTING_NAMES, "type": str},
}


@dataclass(frozen=True)
class ClassifierTraining:
    """
    Settings of ``art-adp train-classifier``.

    :param arch: A name of :data:`~art_adp.apps.commands.CLASSIFIERS`.
    :param adversarial_training: l_inf PGD adversarial training (Madry et al.), saved as ``adv_classifier.safetensors``.
    :param eps: Radius of the training attack (needed with ``adversarial_training``).
    :param eps_step, max_iter, ratio: The training attack's step, PGD iterations and adversarial fraction of each
        batch (None: :func:`~art_adp.models.adversarial.train_adversarial_classifier`'s defaults).
    :param purifier: None, ``"oracle"`` or ``"denoiser"``: train behind that score model's purification
        (:func:`~art_adp.apps.levers_classifiers.training_purifier`), resumable per epoch.
    :param setting: The purification, a name of :data:`~art_adp.apps.levers_presets.SETTING_NAMES`.
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
    purifier: str | None = None
    setting: str = ONE_STEP
    seed: int = 0


def train_classifier_command(
    config: ClassifierTraining,
    *,
    dataset: str = "digits",
    data_root: str | None = None,
    denoiser: str | None = None,
    run_dir: str = "runs/classifier",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """``art-adp train-classifier``: one of the paper's classifiers, plainly or adversarially trained, bare or behind
    a purifier (--purifier oracle|denoiser, --setting, --denoiser PATH): trained on purified inputs, or adversarially
    through the purifier; the checkpoint's header records the purifier, and loading it without that one warns."""
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
    if c.purifier is None and (c.setting != ONE_STEP or denoiser is not None):
        raise ValueError("--setting and --denoiser apply only with --purifier (oracle or denoiser)")
    if c.purifier == "oracle" and denoiser is not None:
        raise ValueError("--denoiser is the score model of --purifier denoiser; drop it or pass --purifier denoiser")
    data = load_dataset(dataset, data_root)
    _, channels, size, _ = data.x_train.shape
    cls = getattr(models, CLASSIFIERS[c.arch])
    torch.manual_seed(c.seed)  # the initial weights too: the same command gives the same model
    model = cls(in_channels=channels, image_size=size, nb_classes=data.nb_classes)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if c.purifier is not None:
        _train_behind(c, model.to(device), data, Path(run_dir), denoiser, device, progress)
        return
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
    write_json(Path(run_dir) / "classifier.json", {"test_accuracy": acc, "arch": c.arch})
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
    write_json(run_dir / "adv_classifier.json",
               {"test_accuracy": acc, "arch": c.arch, "adversarial_training": settings})  # fmt: skip
    print(
        f"adversarially trained classifier: {path} (clean test accuracy {100 * acc:.2f} %, "
        f"PGD eps {c.eps:g}, {max_iter} steps of {eps_step:.4g})"
    )


def _train_behind(c: ClassifierTraining, model, data, run_dir: Path, denoiser: str | None, device: str,
                  progress: bool) -> None:  # fmt: skip
    """``train-classifier --purifier``: trained behind the purification, plainly or adversarially through it;
    checkpointed after every epoch to ``<name>.train.safetensors`` (the same command resumes)."""
    from .. import models
    from ..models.adversarial import default_eps_step
    from ..score import load_score_model
    from .levers_classifiers import training_purifier
    from .levers_presets import FASHION_MNIST, setting_named
    from .robust_baseline import robust_accuracy

    setting = setting_named(c.setting, FASHION_MNIST.sigmas)  # the σ grid of both presets
    score = load_score_model(denoiser, device) if denoiser is not None else None
    adversarial, kind = c.adversarial_training, str(c.purifier)
    purifier = training_purifier(kind, setting, data.x_train, score, adversarial=adversarial,
                                 eps=c.eps or 0.0, device=device)  # fmt: skip
    name = "adv_classifier" if adversarial else "classifier"
    checkpoint = run_dir / f"{name}.train.safetensors"
    common: dict[str, Any] = {"epochs": c.epochs, "batch_size": c.batch_size, "lr": c.lr, "seed": c.seed,
                              "verbose": progress, "checkpoint_path": checkpoint}  # fmt: skip
    if adversarial:
        assert c.eps is not None  # checked by the command
        max_iter = 10 if c.max_iter is None else c.max_iter
        eps_step = default_eps_step(c.eps, max_iter) if c.eps_step is None else c.eps_step
        models.train_adversarial_classifier(model, data.x_train, data.y_train, eps=c.eps, eps_step=eps_step,
                                            max_iter=max_iter, ratio=c.ratio or 1.0, purifier=purifier,
                                            **common)  # fmt: skip
    else:
        models.train_purified_classifier(model, data.x_train, data.y_train, purifier, **common)
    mode = "adversarial" if adversarial else "plain"
    record = models.purifier_record(purifier, model=c.purifier, setting=setting.name, mode=mode)
    settings = {k: v for k, v in vars(c).items() if k not in ("purifier", "setting")}
    path = run_dir / f"{name}.safetensors"
    models.save_classifier(model, path, training=settings, purifier=record)
    purifier.generator.manual_seed(c.seed)  # the test images' draw (unseen images: nothing to leave out)
    purifier.set_params(leave_out=None)
    behind, _ = robust_accuracy(model, data.x_test, data.y_test, purifier=purifier, attack=False, device=device)
    bare = models.evaluate_accuracy(model, data.x_test, data.y_test, device=device)
    facts = {"test_accuracy_behind_purifier": behind, "test_accuracy_bare": bare, "arch": c.arch, "training": settings,
             "purifier": record}  # fmt: skip
    write_json(run_dir / f"{name}.json", facts)
    print(
        f"classifier trained behind {record['describe']} ({c.purifier}, {mode}): {path} (test accuracy behind it "
        f"{100 * behind:.2f} %, bare {100 * bare:.2f} %)"
    )
