"""``art-adp evaluate``: load the data and the models, build the defence, optionally train the adversarial-training
baseline, then :func:`~art_adp.apps.evaluation.evaluate` with the :class:`~art_adp.apps.evaluation.EvalConfig`
the command line built (a preset and the flags that override it)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch

from ...purify import DEFAULTS
from ..commands import DATASET_EPS, DEMO_CLASSIFIER, DEMO_SCORE
from .config import EvalConfig

__all__ = ["SIGMA_SWEEP", "EOT_SWEEP", "adversarial_baseline", "evaluate_command", "with_eps"]

SIGMA_SWEEP = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the paper's Table 5 (evaluate --sigma-sweep)
EOT_SWEEP = (1, 3, 5, 10, 15, 30, 50)  # the paper's Table 6 (evaluate --eot-sweep)


def with_eps(config: EvalConfig, eps: float | None, dataset: str) -> EvalConfig:
    """``config`` at radius ``eps`` (an override of the preset), or at the data set's radius when None (a threat
    model, not an override: the digits demo's 0.175, else the paper's 8/255)."""
    if eps is not None:
        return EvalConfig.preset(config.preset_name, **{**_overrides(config), "eps": eps})
    return dataclasses.replace(config, eps=DATASET_EPS.get(dataset, 8 / 255))


def _overrides(config: EvalConfig) -> dict:
    return {k: getattr(config, k) for k in config.overridden}


def evaluate_command(
    config: EvalConfig,
    *,
    eps: float | None = None,
    dataset: str = "digits",
    data_root: str | None = None,
    score: str = DEMO_SCORE,
    classifier: str = DEMO_CLASSIFIER,
    sigma: float = DEFAULTS.sigma,
    steps: int = DEFAULTS.steps,
    purify_batch_size: int = 4096,
    baseline: str | None = None,
    adv_epochs: int = 20,
    adv_max_iter: int = 10,
    estimate_only: bool = False,
    run_dir: str = "runs/evaluate",
    device: str | None = None,
    progress: bool = True,
) -> dict | None:
    """
    ``art-adp evaluate``: attack the ADP-defended classifier; the evaluation card.

    :param config: The preset with the flags' overrides (the CLI builds it with :meth:`EvalConfig.preset`).
    :param eps: The radius (None: the data set's, :func:`with_eps`).
    :param score, classifier: Checkpoints (default: the digits demo's).
    :param sigma, steps, purify_batch_size: The :class:`~art_adp.ADPPurifier`'s σ, T and batch size.
    :param baseline: ``"adversarial-training"``: add the adversarially trained classifier (:func:`adversarial_baseline`,
        ``adv_epochs`` epochs of PGD with ``adv_max_iter`` iterations).
    """
    from ...data import load_dataset
    from ...models import load_classifier
    from ...preprocessor import ADPPurifier
    from ...runs.records import file_sha256
    from ...score import load_score_model
    from .run import evaluate

    config = with_eps(config, eps, dataset)
    config.check()
    score_path, clf_path = Path(score), Path(classifier)
    for path, what in ((score_path, "--score"), (clf_path, "--classifier")):
        if not path.exists():
            raise ValueError(
                f"{path} not found: train the digits models with `art-adp demo` (they land in runs/demo) "
                f"or pass {what} PATH."
            )
    data = load_dataset(dataset, data_root)
    n = len(data.x_test) if config.n_examples is None else min(config.n_examples, len(data.x_test))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    score_model, model = load_score_model(score_path, "cpu"), load_classifier(clf_path, "cpu")
    purifier = ADPPurifier(
        score_model,
        sigma=sigma,
        steps=steps,
        batch_size=purify_batch_size,
        device_type="gpu" if device == "cuda" else "cpu",
        channels_last=device == "cpu",
    )
    description = {
        "Defence": f"{purifier.describe()}, S = {config.ensemble_size} runs averaged",
        "Data": f"{dataset}, first {n} test images",
        "Models": f"score {score_path} ({type(score_model).__name__}, sha256 {file_sha256(score_path)[:12]}), "
        f"classifier {clf_path} ({type(model).__name__}, sha256 {file_sha256(clf_path)[:12]})",
        "Device": f"{device}" + (f", {torch.get_num_threads()} CPU threads" if device == "cpu" else ""),
    }
    baselines = {}
    if baseline == "adversarial-training":
        trained, where = adversarial_baseline(
            model, data, config, run_dir=run_dir, epochs=adv_epochs, max_iter=adv_max_iter, progress=progress
        )
        baselines["adv. training"] = trained
        description["Baseline"] = f"adversarial training, {where}"
    return evaluate(
        model,
        purifier,
        data.x_test[:n],
        data.y_test[:n],
        config=config,
        run_dir=run_dir,
        nb_classes=data.nb_classes,
        description=description,
        progress=progress,
        device=device,
        baselines=baselines,
        estimate_only=estimate_only,
    )


def _fresh_copy(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A re-initialised copy of ``model`` (same architecture and constructor arguments)."""
    fresh = copy.deepcopy(model)
    torch.manual_seed(seed)
    for module in fresh.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return fresh


def adversarial_baseline(
    classifier: torch.nn.Module,
    data,
    config: EvalConfig,
    *,
    run_dir: str | Path,
    epochs: int = 20,
    max_iter: int = 10,
    progress: bool = True,
) -> tuple[torch.nn.Module, str]:
    """
    Load ``<run_dir>/adv_classifier.safetensors``, or train it with ART's AdversarialTrainer and PGD (a fresh copy
    of ``classifier``'s architecture, on the data set's training split, the run's ε and step) and save it there.

    :return: The model and where it came from, in words (for the card's header).
    """
    from ...models import load_classifier, save_classifier

    path = Path(run_dir) / "adv_classifier.safetensors"
    if path.exists():
        return load_classifier(path, "cpu"), f"{path} (loaded)"
    try:
        from ...models.adversarial import train_adversarial_classifier
    except ImportError as err:
        raise ValueError(
            f"--baseline adversarial-training needs art_adp.models.adversarial ({err}); or put a "
            f"trained classifier at {path}."
        ) from err
    model = train_adversarial_classifier(
        _fresh_copy(classifier, config.seed),
        data.x_train,
        data.y_train,
        eps=config.eps,
        eps_step=config.step,
        max_iter=max_iter,
        epochs=epochs,
        seed=config.seed,
        verbose=progress,
    )
    save_classifier(model.cpu(), path)
    return model, (
        f"{path} (trained: ART AdversarialTrainer with PGD, eps = {config.eps:.4g}, step "
        f"{config.step:.4g}, {max_iter} PGD steps, {epochs} epochs)"
    )
