"""What the attacks of :mod:`art_adp.attacks` share. The defended and the bare forward pass of an ART estimator
(its whole preprocessing chain, ART's standardisation included) and batched EOT gradients come from
:mod:`art_adp.ensemble` directly (:func:`~art_adp.ensemble.logits`, :func:`~art_adp.ensemble.eot_gradient`); here: the
purifiers' gradient mode, the losses, and one projected-iteration loop (Table 1 of the paper: each attack is a
different update direction inside it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import integer, number, positive_int
from ..diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
from ..preprocessor import GRADIENTS, ADPPurifier

__all__ = [
    "GRADIENTS",
    "IterativeAttack",
    "JointAttack",
    "check_norm",
    "gradient_mode",
    "normalize",
    "project",
    "purifiers",
]

NORMS = (np.inf, 2)


PURIFIERS = (ADPPurifier, ReverseDiffusionPurifier, DenoisedSmoothingPurifier)


def purifiers(estimator: PyTorchClassifier) -> list[ADPPurifier | ReverseDiffusionPurifier | DenoisedSmoothingPurifier]:
    """The purifiers of ``estimator`` (ADP, reverse diffusion, denoised smoothing: randomized, with a gradient mode
    and a generator), in order."""
    return [p for p in estimator.preprocessing_operations if isinstance(p, PURIFIERS)]


def the_purifier(estimator: PyTorchClassifier, attack: str) -> ADPPurifier:
    """The one ADPPurifier an ADP-specific attack needs, or a ValueError naming the fix."""
    found = [p for p in purifiers(estimator) if isinstance(p, ADPPurifier)]
    if len(found) != 1:
        raise ValueError(
            f"{attack} needs an estimator with exactly one ADPPurifier in preprocessing_defences, "
            f"found {len(found)}; build it as "
            "PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)])."
        )
    return found[0]


@contextlib.contextmanager
def gradient_mode(estimator: PyTorchClassifier, mode: str | None) -> Iterator[None]:
    """Set every purifier of ``estimator`` to ``gradient=mode`` ("bpda" or "full") and restore it afterwards."""
    saved = [(p, p.gradient) for p in purifiers(estimator)]
    try:
        if mode is not None:
            for p, _ in saved:
                p.set_params(gradient=mode)
        yield
    finally:
        for p, old in saved:
            p.set_params(gradient=old)


def normalize(g: torch.Tensor, norm) -> torch.Tensor:
    """The steepest-ascent direction of ``g`` for the norm: ``sign(g)`` (ℓ∞) or ``g/‖g‖₂`` (ℓ2)."""
    if norm == np.inf:
        return g.sign()
    return g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (g.ndim - 1)))


def project(x_adv: torch.Tensor, x: torch.Tensor, eps: float, norm, clip_values) -> torch.Tensor:
    """Project ``x_adv`` onto the ε-ball around ``x`` (ℓ∞ or ℓ2), then into ``clip_values``."""
    delta = x_adv - x
    if norm == np.inf:
        delta = delta.clamp(-eps, eps)
    else:
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
        delta = delta * (eps / norms).clamp(max=1.0).view(-1, *([1] * (x.ndim - 1)))
    return (x + delta).clamp(*clip_values)


def check_norm(norm) -> None:
    """The threat model's norm: ``np.inf`` or ``2`` (after ``"inf"`` was mapped to ``np.inf``)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be np.inf (or 'inf') or 2, got {norm!r}.")


def labels(estimator: PyTorchClassifier, x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """Class indices from one-hot or index labels, or the estimator's predictions when ``y`` is None."""
    if y is None:
        return estimator.predict(x).argmax(1)
    y = np.asarray(y)
    return y.argmax(1) if y.ndim == 2 else y.astype(np.int64)


class IterativeAttack(EvasionAttack):
    """
    The projected loop every attack of Table 1 shares (x_{i+1} = Π_{B(x₀, ε)}(x_i + α d_i), clipped), in batches;
    a subclass supplies the direction d_i (:meth:`_direction`) and the purifier gradient mode it needs. With
    ``random_start`` the loop starts from a uniform draw in the ε-ball (Madry et al.; foolbox's and torchattacks'
    ``random_start``), drawn from ``generator``, else from x₀ itself.
    """

    attack_params = EvasionAttack.attack_params + [
        "norm",
        "eps",
        "eps_step",
        "max_iter",
        "random_start",
        "generator",
        "batch_size",
        "verbose",
    ]
    _estimator_requirements = (PyTorchClassifier,)

    @property
    def mode(self) -> str | None:
        """The gradient mode set on the estimator's ADPPurifiers while attacking (None: leave theirs)."""
        return None

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float = 2 / 255,
        max_iter: int = 40,
        random_start: bool = False,
        generator: torch.Generator | None = None,
        batch_size: int = 512,
        verbose: bool = False,
    ) -> None:
        super().__init__(estimator=estimator)
        self.norm = np.inf if norm in ("inf", np.inf, float("inf")) else norm
        self.eps = eps
        self.eps_step = eps_step
        self.max_iter = max_iter
        self.random_start = random_start
        self.generator = generator
        self.batch_size = batch_size
        self.verbose = verbose
        self._check_params()

    def _check_params(self) -> None:
        check_norm(self.norm)
        for name in ("eps", "eps_step"):
            number(name, getattr(self, name), low=0, low_open=True)
        for name in ("max_iter", "batch_size"):
            positive_int(name, getattr(self, name))
        if not isinstance(self.random_start, bool):
            raise ValueError(f"random_start must be True or False, got {self.random_start!r}.")

    def _start(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """The first iterate for a batch of clean inputs ``x`` (labels ``y``): ``x`` itself, or with ``random_start``
        a point drawn uniformly from the ε-ball around it (ℓ∞: the box; ℓ2: the ball), clipped, drawn on the CPU from
        ``generator`` (default: torch's). A subclass may keep what its loss needs of the clean batch here."""
        if not self.random_start:
            return x.clone()
        u = torch.rand(x.shape, generator=self.generator)
        if self.norm == np.inf:
            delta = (2 * u - 1) * self.eps
        else:  # a uniform direction, radius ε·r^(1/d) with r uniform: uniform in the ℓ2 ball
            d = torch.randn(x.shape, generator=self.generator).flatten(1)
            r = u.flatten(1)[:, :1] ** (1 / d.shape[1])
            delta = (d / d.norm(dim=1, keepdim=True).clamp_min(1e-12) * r * self.eps).view_as(x)
        return project(x + delta.to(x.device), x, self.eps, self.norm, clip)

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs, within ε of ``x`` and inside ``clip_values``.
        """
        from tqdm.auto import tqdm

        y = labels(self.estimator, x, y)
        clip = self.estimator.clip_values if self.estimator.clip_values is not None else (-np.inf, np.inf)
        clip = (float(clip[0]), float(clip[1]))
        device = self.estimator.device
        out = []
        with gradient_mode(self.estimator, self.mode):
            for start in tqdm(range(0, len(x), self.batch_size), desc=type(self).__name__, disable=not self.verbose):
                xb = torch.as_tensor(x[start : start + self.batch_size], dtype=torch.float32, device=device)
                yb = torch.as_tensor(y[start : start + self.batch_size], device=device)
                x_adv = self._start(xb, yb, clip)
                for _ in range(self.max_iter):
                    step = self.eps_step * self._direction(x_adv, yb)
                    x_adv = project(x_adv + step, xb, self.eps, self.norm, clip).detach()
                out.append(x_adv.cpu().numpy())
        return np.concatenate(out).astype(x.dtype, copy=False)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy."""
    return torch.nn.functional.cross_entropy(logits, y, reduction="none")


def dlr(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Croce & Hein's difference-of-logits ratio (untargeted), per example: −(z_y − max_{j≠y} z_j)/(z_π1 − z_π3)."""
    z = logits.sort(dim=1).values
    z_y = logits.gather(1, y[:, None])[:, 0]
    top_is_y = logits.argmax(1) == y
    other = torch.where(top_is_y, z[:, -2], z[:, -1])
    return -(z_y - other) / (z[:, -1] - z[:, -3] + 1e-12)


class JointAttack(IterativeAttack):
    """
    The two joint attacks of Table 1: a weighted sum ``w · (defence-side direction) + (1 − w) · (classifier
    gradient)``; subclasses give the direction in ``_direction``.
    """

    attack_params = IterativeAttack.attack_params + ["weight", "eot_samples"]
    mode = "bpda"
    min_eot_samples = 1

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float = 2 / 255,
        max_iter: int = 40,
        weight: float = 0.5,
        eot_samples: int = 15,
        batch_size: int = 512,
        verbose: bool = False,
    ) -> None:
        self.weight = weight
        self.eot_samples = eot_samples
        super().__init__(
            estimator, norm=norm, eps=eps, eps_step=eps_step, max_iter=max_iter, batch_size=batch_size, verbose=verbose
        )
        self.purifier = the_purifier(estimator, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        number("weight", self.weight, low=0, high=1)
        integer("eot_samples", self.eot_samples, low=self.min_eot_samples)
