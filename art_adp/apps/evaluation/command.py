"""``art-adp evaluate``: load the data and the models, build the defence of each purifier family, optionally train the
adversarial-training baseline, then :func:`~art_adp.apps.evaluation.evaluate` with the
:class:`~art_adp.apps.evaluation.EvalConfig` the command line built (a preset and the flags that override it); for
several families, their side-by-side comparison (:mod:`~art_adp.apps.evaluation.compare`)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch

from ..._hardware import require_native

from ...data import dataset_spec
from ...purification import DEFAULTS
from ...runs.engine import build_defence
from ..commands import DEMO_CLASSIFIER, DEMO_SCORE
from .config import EvalConfig

__all__ = ["SIGMA_SWEEP", "EOT_SWEEP", "adversarial_baseline", "build_purifier", "evaluate_command", "with_eps"]

SIGMA_SWEEP = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the paper's Table 5 (evaluate --sigma-sweep)
EOT_SWEEP = (1, 3, 5, 10, 15, 30, 50)  # the paper's Table 6 (evaluate --eot-sweep)


def with_eps(config: EvalConfig, eps: float | None, dataset: str) -> EvalConfig:
    """``config`` at the data set's radius (its :class:`~art_adp.data.DatasetSpec`'s ``eps``: a threat model, not an
    override), or at ``eps`` when given and different (an override, which the card lists). The steps follow ε
    (``eps_step`` None: ε/4; APGD's own steps are fractions of ε) unless ``--eps-step`` set one."""
    config = dataclasses.replace(config, eps=dataset_spec(dataset).eps)
    if eps is None or eps == config.eps:
        return config
    return dataclasses.replace(config, eps=eps, overridden=tuple(sorted({*config.overridden, "eps"})))


def evaluate_command(
    config: EvalConfig,
    *,
    eps: float | None = None,
    dataset: str = "digits",
    data_root: str | None = None,
    score: str = DEMO_SCORE,
    classifier: str = DEMO_CLASSIFIER,
    weights: str | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    score_config: str | None = None,
    sigma: float = DEFAULTS.sigma,
    steps: int = DEFAULTS.steps,
    purify_batch_size: int = 4096,
    baseline: str | None = None,
    adv_epochs: int = 20,
    adv_max_iter: int = 10,
    estimate_only: bool = False,
    seed_scheme: str | None = None,
    run_dir: str = "runs/evaluate",
    device: str | None = None,
    progress: bool = True,
) -> dict | None:
    """
    ``art-adp evaluate``: attack the classifier defended by each purifier family of ``config.purifier``; the
    evaluation card of each (in ``run_dir``, or ``run_dir/<family>`` for several) and, for several, their side-by-side
    comparison (``comparison.md``/``.json`` in ``run_dir``).

    :param config: The preset with the flags' overrides (the CLI builds it with :meth:`EvalConfig.preset`); its
        ``purifier`` and ``sampler`` choose the defences.
    :param eps: The radius (None: the data set's, :func:`with_eps`).
    :param score, classifier: The models (default: the digits demo's), read by
        :func:`~art_adp.apps.loading.load_score_arg` and :func:`~art_adp.apps.loading.load_classifier_arg`. The
        diffusion families need a σ-conditional denoiser (``art-adp train-denoiser``) or a diffusion model (a
        diffusers folder) as ``score``; either serves ADP too.
    :param weights, mean, std: The classifier's weights (for ``package.module:factory``) and input standardisation,
        applied after the purification as ART's ``preprocessing=(mean, std)``.
    :param score_config: The YAML config of an NCSNv2 reference checkpoint given as ``score``.
    :param sigma, steps, purify_batch_size: The purifiers' noise level (ADP's σ, reverse diffusion's σ*, denoised
        smoothing's σ), steps (ADP's T, reverse diffusion's K) and batch size (:func:`build_purifier`).
    :param baseline: ``"adversarial-training"``: add the adversarially trained classifier (:func:`adversarial_baseline`,
        ``adv_epochs`` epochs of PGD with ``adv_max_iter`` iterations).
    :param seed_scheme: The seed scheme (None: the run folder's own, ``"apart"`` for a new one; ``evaluate``'s).
    :return: The card of the one family, or the comparison of several (None with ``estimate_only``).
    """
    import time

    from ...data import load_dataset
    from ...models.checkpoint import ARCHITECTURES
    from ...runs.provenance import provenance
    from ..loading import load_classifier_arg, load_score_arg
    from . import compare
    from .run import evaluate

    started = time.perf_counter()
    config = with_eps(config, eps, dataset)
    config.check()
    score_model, score_text = load_score_arg(score, config=score_config)
    model, model_text = load_classifier_arg(classifier, weights=weights, mean=mean, std=std)
    if baseline is not None and type(model) not in ARCHITECTURES.values():
        raise ValueError(
            f"--baseline {baseline} trains a fresh copy of an art-adp classifier architecture; {classifier} "
            "is not one (or is standardised by --mean/--std): train your adversarially trained model yourself and "
            "evaluate it as --classifier."
        )
    data = load_dataset(dataset, data_root)
    n = len(data.x_test) if config.n_examples is None else min(config.n_examples, len(data.x_test))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    require_native(config.attack_precision, device, force=config.force_precision)
    defences = {
        family: build_purifier(
            family, score_model, sigma=sigma, steps=steps, sampler=config.sampler, batch_size=purify_batch_size,
            device=device,
        )
        for family in config.purifier
    }  # fmt: skip
    description = {
        "Data": f"{dataset}, first {n} test images",
        "Models": f"score {score_text}, classifier {model_text}",
        "Device": f"{device}" + (f", {torch.get_num_threads()} CPU threads" if device == "cpu" else ""),
    }
    baselines = {}
    if baseline == "adversarial-training":
        trained, where = adversarial_baseline(
            model, data, config, run_dir=run_dir, epochs=adv_epochs, max_iter=adv_max_iter, progress=progress
        )
        baselines["adv. training"] = trained
        description["Baseline"] = f"adversarial training, {where}"
    cards = {
        family: evaluate(
            model,
            purifier,
            data.x_test[:n],
            data.y_test[:n],
            config=config,
            run_dir=run_dir if len(defences) == 1 else Path(run_dir) / family,
            nb_classes=data.nb_classes,
            description={"Defence": f"{purifier.describe()}, S = {config.ensemble_size} runs averaged", **description},
            progress=progress,
            device=device,
            baselines=baselines,
            estimate_only=estimate_only,
            seed_scheme=seed_scheme,
        )
        for family, purifier in defences.items()
    }
    if len(cards) == 1:
        return next(iter(cards.values()))
    complete = {family: card for family, card in cards.items() if card is not None}
    if estimate_only or len(complete) < len(cards):
        return None
    result = compare.compare(complete)
    result["provenance"] = provenance(
        wall_time_s=time.perf_counter() - started,
        device=device,
        models={"classifier": model, "score": score_model},
        data=(data.x_test[:n], data.y_test[:n]),
    )
    compare.write(result, run_dir)
    if progress:
        print(compare.markdown(result))
    return result


def build_purifier(
    family: str,
    score_model: torch.nn.Module,
    *,
    sigma: float = DEFAULTS.sigma,
    steps: int = DEFAULTS.steps,
    sampler: str = "ddim",
    batch_size: int = 4096,
    device: str = "cpu",
):
    """
    The purifier of ``family`` (``"adp"``, ``"reverse-diffusion"``, ``"denoised-smoothing"``) at noise level
    ``sigma`` with ``steps`` steps. A σ-conditional denoiser (``DenoiserUNet``) and a diffusion model (a
    ``VPScore``, e.g. a diffusers UNet: ADP through the score its ε-prediction gives) serve all three, ADP at σ
    (:func:`~art_adp.score.diffusion.score_at`); a score model at one level (NCSNv2) serves ADP only.

    :raises ValueError: For a diffusion family on a score model at one level, naming the fix.
    """
    from ...score import DiffusionScore, score_at

    if family == "adp":
        adp = {"sigma": sigma, "steps": steps, "channels_last": device == "cpu", "batch_size": batch_size}
        return build_defence(adp, score_at(score_model, sigma), device=device)
    if not (getattr(score_model, "sigma_conditional", False) or isinstance(score_model, DiffusionScore)):
        raise ValueError(
            f"--purifier {family} needs a sigma-conditional denoiser (train one with `art-adp train-denoiser`) or a "
            f"diffusion model (a diffusers folder) as --score; {type(score_model).__name__} is a score model at one "
            "level, for adp only."
        )
    if family == "reverse-diffusion":
        description = {"type": "ReverseDiffusionPurifier", "sigma": sigma, "steps": steps, "sampler": sampler}
    else:
        description = {"type": "DenoisedSmoothingPurifier", "sigma": sigma}
    return build_defence({**description, "batch_size": batch_size}, score_model, device=device)


def _fresh_copy(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A re-initialised copy of ``model`` (same architecture and constructor arguments)."""
    fresh = copy.deepcopy(model)
    torch.manual_seed(seed)
    for module in fresh.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
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
