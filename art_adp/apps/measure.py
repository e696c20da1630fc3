"""Measurements the recipes share: the ADP-defended estimator, judging on the S-run ensemble (worst case over
R repeats, as the evaluation harness judges), the attack rows, the denoising ratio and Wilson intervals.

Built on the public pieces only (:class:`~art_adp.ADPPurifier`, :class:`~art_adp.EOTClassifier`, the attack
classes of :mod:`art_adp.attacks`), so a recipe's numbers mean what ``art-adp evaluate``'s mean.
"""

from __future__ import annotations

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from ..attacks.registry import REGISTRY, Budget
from .._device import to_model
from ..eot import EOTClassifier
from ..preprocessor import ADPPurifier
from ..purification import purify
from ..runs.seeds import derive_seed
from .evaluation.report import wilson

__all__ = ["wilson", "defended_estimator", "judge", "attack", "denoising_ratio"]


def defended_estimator(
    classifier: torch.nn.Module,
    score_model: torch.nn.Module,
    input_shape,
    nb_classes: int,
    *,
    sigma: float = 0.25,
    steps: int = 10,
    batch_size: int = 256,
    device: str = "cpu",
) -> tuple[PyTorchClassifier, ADPPurifier]:
    """The classifier behind one ADP purification per call (the paper's defaults: σ = 0.25, T = 10, adaptive α)."""
    purifier = ADPPurifier(
        score_model,
        sigma=sigma,
        steps=steps,
        batch_size=batch_size,
        generator=torch.Generator(device).manual_seed(0),
        channels_last=device == "cpu",
        device_type="gpu" if device == "cuda" else "cpu",
    )
    estimator = PyTorchClassifier(
        classifier.to(device).eval(),
        torch.nn.CrossEntropyLoss(),
        input_shape=input_shape,
        nb_classes=nb_classes,
        clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier],
        device_type="gpu" if device == "cuda" else "cpu",
    )
    return estimator, purifier


def _generator(purifier: ADPPurifier) -> torch.Generator:
    """The purifier's generator, which every defended estimator of this module is built with."""
    if purifier.generator is None:
        raise ValueError("the purifier needs a generator to seed its draws; build it with defended_estimator")
    return purifier.generator


def judge(
    estimator: PyTorchClassifier,
    purifier: ADPPurifier,
    x: np.ndarray,
    y: np.ndarray,
    *,
    ensemble_size: int = 10,
    repeats: int = 1,
    seed: int = 0,
    batch_size: int = 512,
) -> np.ndarray:
    """
    Whether the defence classifies each input correctly: the S = ``ensemble_size`` purification ensemble (mean softmax),
    judged ``repeats`` times with fresh noise; an input counts as correct only if every repeat is (worst case).

    :return: Boolean array of length N.
    """
    ensemble = EOTClassifier(estimator, ensemble_size=ensemble_size, batch_size=batch_size)
    ok = np.ones(len(x), dtype=bool)
    xt = torch.as_tensor(x, dtype=torch.float32)
    for r in range(repeats):
        _generator(purifier).manual_seed(derive_seed(seed, "judge", r))
        ok &= ensemble.predict(xt).argmax(1) == np.asarray(y)
    return ok


def attack(
    name: str,
    estimator: PyTorchClassifier,
    purifier: ADPPurifier,
    x: np.ndarray,
    y: np.ndarray,
    *,
    eps: float,
    eps_step: float,
    max_iter: int,
    eot_samples: int = 1,
    seed: int = 0,
    batch_size: int = 64,
) -> np.ndarray:
    """
    Adversarial examples of the row ``name``: ``"clean"`` (``x`` itself) or an attack of the registry
    (:data:`~art_adp.attacks.registry.REGISTRY`) under the budget given here, e.g. ``clf-pgd`` (PGD on the bare
    classifier, blind to the purifier: the paper's MNIST row), ``bpda-eot`` (straight-through gradients, EOT over
    ``eot_samples`` purifications) or a full-gradient attack (``full-pgd-eot``, ``apgd-eot``).
    """
    if name == "clean":
        return x
    if name not in REGISTRY:
        raise ValueError(f"Unknown row {name!r}; choose from clean, {', '.join(REGISTRY)}.")
    _generator(purifier).manual_seed(derive_seed(seed, "attack", name))
    budget = Budget(eps=eps, eps_step=eps_step, max_iter=max_iter, eot_samples=eot_samples, batch_size=batch_size)
    atk = REGISTRY[name].build(estimator, budget, seed)
    return atk.generate(np.asarray(x, dtype=np.float32), y=np.asarray(y))


def denoising_ratio(
    score_model: torch.nn.Module,
    x,
    *,
    sigma: float = 0.25,
    steps: int = 10,
    seed: int = 0,
    batch_size: int = 256,
    x_start=None,
) -> float:
    """
    How many times purification shrinks the squared distance to the clean images ``x``.

    Without ``x_start``: the MSE of the noisy start x₀ = clip(x + σε) to x, divided by the MSE of the purified
    output (same ε) -- the denoising ratio (> 1: it denoises). With ``x_start`` (e.g. adversarial images of x):
    MSE(x_start, x) / MSE(purify(x_start), x) -- 1 means the perturbation survives purification intact.
    """
    x = to_model(x if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float32), score_model)
    start = x if x_start is None else to_model(np.asarray(x_start, dtype=np.float32), score_model)
    if start.shape != x.shape:
        raise ValueError(f"x_start must have the shape of x, {tuple(x.shape)}; got {tuple(start.shape)}.")
    before = after = 0.0
    with torch.no_grad():
        for i, (xb, sb) in enumerate(zip(x.split(batch_size), start.split(batch_size))):
            g = torch.Generator().manual_seed(derive_seed(seed, "denoise", i))
            clean = purify(score_model, sb, sigma=sigma, steps=steps, generator=g)
            if x_start is None:
                g.manual_seed(derive_seed(seed, "denoise", i))
                before += float((purify(score_model, sb, sigma=sigma, steps=0, generator=g) - xb).pow(2).sum())
            else:
                before += float((sb - xb).pow(2).sum())
            after += float((clean - xb).pow(2).sum())
    return before / max(after, 1e-30)
