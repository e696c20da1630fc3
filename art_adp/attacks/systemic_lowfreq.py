"""DiffBreak's systemic low-frequency attack on the majority vote: exact gradients through the purification, a margin
loss over the draws the vote judges, and a perturbation that lives in the low-frequency DCT basis (Kassis et al. 2025).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import integer, memory_budget as check_memory_budget, number, one_of, positive_int
from ..ensemble import eot_gradient, logits, stack_draws
from ._core import DEFAULT_GRADIENT, GRADIENTS, IterativeAttack, gradient_mode, labels

__all__ = ["LowFrequencyBasis", "SystemicLowFrequency", "dct_matrix", "vote_lead", "vote_margin"]

#: Rounds of Dykstra's alternating projections in the ℓ∞ projection of :class:`SystemicLowFrequency`.
PROJECTION_ROUNDS = 20


def dct_matrix(n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """
    The orthonormal DCT-II of length ``n``: row ``k`` is the basis vector
    ``D[k, i] = sqrt((1 if k == 0 else 2) / n) · cos(π (2i + 1) k / (2n))`` (frequency ``k``), so ``D Dᵀ = I``.

    :return: ``n×n`` tensor.
    """
    i = torch.arange(n, dtype=torch.float64)
    k = i[:, None]
    d = torch.cos(math.pi * (2 * i[None, :] + 1) * k / (2 * n)) * math.sqrt(2 / n)
    d[0] = 1 / math.sqrt(n)
    return d.to(dtype=dtype, device=device)


class LowFrequencyBasis:
    """
    The separable 2-D DCT-II basis images of an ``H×W`` image whose frequencies are below ``cutoff`` of each side:
    ``kh = max(1, ceil(cutoff·H))`` row frequencies × ``kw = max(1, ceil(cutoff·W))`` column frequencies. A
    perturbation is ``δ = D_Hᵀ[:, :kh] c D_W[:kw]`` for coefficients ``c`` (``…×kh×kw``, one set per channel); the
    basis images are orthonormal, so ``‖δ‖₂ = ‖c‖₂``, and :meth:`coefficients` is the adjoint (and left inverse) of
    :meth:`pixels`: ``coefficients(g)`` is the gradient with respect to ``c`` of a loss whose pixel gradient is ``g``.

    :param height, width: The image's size.
    :param cutoff: Fraction of the frequencies kept along each side, in (0, 1] (1: the whole basis, i.e. pixel space
        rotated).
    """

    def __init__(
        self,
        height: int,
        width: int,
        cutoff: float,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        number("cutoff", cutoff, low=0, high=1, low_open=True)
        self.kh, self.kw = max(1, math.ceil(cutoff * height)), max(1, math.ceil(cutoff * width))
        self.rows = dct_matrix(height, dtype=dtype, device=device)[: self.kh]  # kh×H
        self.cols = dct_matrix(width, dtype=dtype, device=device)[: self.kw]  # kw×W

    def pixels(self, c: torch.Tensor) -> torch.Tensor:
        """The image ``…×H×W`` of coefficients ``c`` (``…×kh×kw``), with autograd."""
        return self.rows.T @ c @ self.cols

    def coefficients(self, x: torch.Tensor) -> torch.Tensor:
        """The low-frequency coefficients ``…×kh×kw`` of an image ``x`` (``…×H×W``): the orthogonal projection's."""
        return self.rows @ x @ self.cols.T


def vote_margin(z: torch.Tensor, y: torch.Tensor, confidence: float | None) -> torch.Tensor:
    """
    The per-draw loss the attack ascends: ``min(max_{j≠y} z_j − z_y, κ)``, the Carlini-Wagner margin capped at the
    confidence κ -- a draw misclassified by more than κ stops pulling, so the gradient concentrates on the draws the
    vote still gives to ``y`` (``confidence=None``: no cap, every draw pulls alike).

    :param z: ``M×K`` logits of ``M`` draws.
    :param y: ``M`` class indices.
    :return: ``M`` losses.
    """
    z_y = z.gather(1, y[:, None])[:, 0]
    other = z.masked_fill(torch.nn.functional.one_hot(y, z.shape[1]).bool(), -torch.inf).amax(1)
    loss = other - z_y
    return loss if confidence is None else loss.clamp(max=confidence)


class _Votes:
    """:func:`vote_margin`, which also counts each image's votes as :func:`~art_adp.ensemble.eot_gradient` passes it
    the stacked rows, in order (row ``r`` is draw ``r // n`` of image ``r % n``)."""

    def __init__(self, n: int, nb_classes: int, confidence: float | None, device: torch.device) -> None:
        self.n, self.confidence, self.seen = n, confidence, 0
        self.counts = torch.zeros(n, nb_classes, device=device)

    def __call__(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        idx = (torch.arange(len(z), device=z.device) + self.seen) % self.n
        self.counts.index_add_(
            0, idx, torch.nn.functional.one_hot(z.detach().argmax(1), z.shape[1]).to(self.counts.dtype)
        )
        self.seen += len(z)
        return vote_margin(z, y, self.confidence)


def vote_lead(counts: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How far the label leads the vote: ``votes_y − max_{j≠y} votes_j`` per image (≤ 0: the vote is not ``y``'s
    alone, the attack has won it). ``counts`` is ``N×K`` votes."""
    mine = counts.gather(1, y[:, None])[:, 0]
    return mine - counts.scatter(1, y[:, None], -1.0).amax(1)


class SystemicLowFrequency(IterativeAttack):
    """
    The systemic low-frequency attack of DiffBreak (Kassis et al., 2025), aimed at the majority vote over S
    purifications: a perturbation that every draw of the purifier passes on, not one that breaks some draws strongly
    and leaves the rest (which is what PGD+EOT's mean gradient converges to when the draws disagree).

    - **Low-frequency parametrisation.** The perturbation is ``δ = B c``: ``c`` the coefficients of the DCT-II basis
      images below ``cutoff`` of each side (:class:`LowFrequencyBasis`), ``x_adv = clip(x + B c)``. Purifiers remove
      or randomise high frequencies (injected white noise, then denoising); a perturbation with no high frequencies
      has nothing there to lose. DiffBreak's LF attack (adapted from UnMarker's attack on watermarks) optimises a
      perturbation together with learnable low-pass (bilateral-like) filters under a perceptual-distance bound; this
      attack keeps the ε-ball of the threat model instead and fixes the filter to an ideal DCT low-pass, so its
      radius is the suite's other attacks' radius.
    - **Loss on the vote's draws.** Each step draws ``eot_samples`` purifications and ascends the mean over them of
      :func:`vote_margin` (the margin capped at ``confidence``), with exact gradients through the purification
      (``gradient="full"``; :func:`art_adp.ensemble.eot_gradient`, blocks that fit ``memory_budget``), chained through
      ``c ↦ clip(x + B c)`` by autograd.
    - **Steps and projection.** ``c ← Π(c + α u)``, ``u`` the coefficient gradient made a unit step in the threat
      model's norm (ℓ∞: the low-frequency part of PGD's sign step, :meth:`_ascent`), so each step moves the image by
      ``eps_step``; ``Π`` brings ``B c`` back into the ε-ball without leaving the subspace (ℓ2: scaling, the exact
      projection; ℓ∞: Dykstra's alternating projections, then scaling, :meth:`_project`); ``x_adv`` is clipped
      into ``clip_values`` afterwards. With ``cutoff=1`` the basis is complete, a step is PGD's sign step and the
      projection its clamp to the ε-box: the attack is PGD with the capped margin loss.
    - **Random start**: ``c₀`` Gaussian (from a generator seeded with ``seed``), scaled to a radius uniform in [0, ε].
    - **Judged by the vote.** Each step's draws also vote; every example returns the iterate whose vote was furthest
      from its label (:func:`vote_lead`, ties: the higher loss), the last iterate scored by one more vote of
      ``eot_samples`` draws without gradients -- as DiffBreak keeps its best majority-vote iterate.

    The estimator's purifiers are switched to ``gradient`` while attacking and restored afterwards.

    | Paper link: Kassis, Hengartner & Yu, "DiffBreak: Is Diffusion-Based Purification Robust?", 2025,
      https://arxiv.org/abs/2411.16598

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[purifier])``, any purifier family (or none).
    :param gradient: ``"full"`` (exact, through purification; DiffBreak's) or ``"bpda"`` (straight-through).
    :param norm, eps, eps_step, max_iter, batch_size, verbose: As in :class:`~art_adp.attacks.PGDEOT`;
        ``eps_step`` is each step's length in the threat model's norm.
    :param eot_samples: Purifications per step: the draws the loss sums over and that vote.
    :param cutoff: Fraction of the DCT frequencies kept along each side, in (0, 1] (0.5: 4×4 of 8×8 digits, 14×14 of
        28×28 MNIST, 16×16 of 32×32 CIFAR-10: a quarter of the basis).
    :param confidence: κ, the logit margin past which a draw stops pulling; None: no cap.
    :param random_start: Start from a random point of the ball ∩ subspace (else from ``x``).
    :param seed: Seed of the random start, or None for torch's global generator. Purification noise comes from the
        purifiers' own generators.
    :param memory_budget: MiB of autograd graph per block of draws (None:
        :func:`art_adp.ensemble.default_memory_budget`).
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "systemic-lowfreq"
    #: Aimed at the majority vote: the best iterate is judged by the vote of ``judge_draws`` fresh draws.
    aim = "majority"

    attack_params = IterativeAttack.attack_params + [
        "gradient",
        "eot_samples",
        "cutoff",
        "confidence",
        "random_start",
        "seed",
        "memory_budget",
    ]

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        gradient: str = DEFAULT_GRADIENT,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float = 2 / 255,
        max_iter: int = 40,
        eot_samples: int = 15,
        cutoff: float = 0.5,
        confidence: float | None = 1.0,
        random_start: bool = True,
        seed: int | None = 0,
        batch_size: int = 512,
        memory_budget: float | None = None,
        verbose: bool = False,
    ) -> None:
        self.gradient = gradient
        self.eot_samples = eot_samples
        self.cutoff = cutoff
        self.confidence = confidence
        self.seed = seed
        self.memory_budget = memory_budget
        super().__init__(
            estimator, norm=norm, eps=eps, eps_step=eps_step, max_iter=max_iter, random_start=random_start,
            batch_size=batch_size, verbose=verbose,
        )  # fmt: skip

    @property
    def mode(self) -> str:
        """The purifier gradient mode set while attacking: ``gradient``."""
        return self.gradient

    def _check_params(self) -> None:
        super()._check_params()
        one_of("gradient", self.gradient, GRADIENTS)
        positive_int("eot_samples", self.eot_samples)
        number("cutoff", self.cutoff, low=0, high=1, low_open=True)
        number("confidence", self.confidence, low=0, optional=True)
        if self.seed is not None:
            integer("seed", self.seed, low=0, high=2**63 - 1)
        check_memory_budget(self.memory_budget)

    # -- the parametrisation ---------------------------------------------------------------------------------------

    def _size(self, basis: LowFrequencyBasis, c: torch.Tensor) -> torch.Tensor:
        """``‖B c‖`` per example in the threat model's norm, shaped to broadcast over ``c``."""
        p = basis.pixels(c).flatten(1)
        size = p.abs().amax(1) if self.norm == np.inf else p.norm(dim=1)
        return size.clamp_min(1e-12).view(-1, *([1] * (c.ndim - 1)))

    def _ascent(self, basis: LowFrequencyBasis, d: torch.Tensor) -> torch.Tensor:
        """
        The step direction from the coefficient gradient ``d``, one unit long in the threat model's norm: ℓ2, ``d``
        itself (the steepest ascent in the subspace); ℓ∞, the coefficients of ``sign(B d)`` (the low-frequency part
        of PGD's sign step, an ascent direction since ``⟨B d, P sign(B d)⟩ = ‖B d‖₁``).
        """
        if self.norm == np.inf:
            d = basis.coefficients(basis.pixels(d).sign())
        return d / self._size(basis, d)

    def _project(self, basis: LowFrequencyBasis, c: torch.Tensor) -> torch.Tensor:
        """
        Coefficients whose image ``B c`` is in the ε-ball, still in the subspace: ℓ2, ``c`` scaled (the exact
        projection: the basis is orthonormal); ℓ∞, :data:`PROJECTION_ROUNDS` rounds of Dykstra's alternating
        projections between the subspace and the ε-box (they converge to the nearest point of the intersection),
        then scaled so that ``‖B c‖∞ ≤ ε`` exactly. The clip range is left to :meth:`image`, as PGD clips after its
        projection (a low-frequency ``δ`` kept non-negative wherever ``x`` is 0 would be a weak one).
        """
        if self.norm == np.inf:
            correction = torch.zeros_like(basis.pixels(c))
            for _ in range(PROJECTION_ROUNDS):
                wanted = basis.pixels(c) + correction
                boxed = wanted.clamp(-self.eps, self.eps)
                correction = wanted - boxed
                c = basis.coefficients(boxed)
        return c * (self.eps / self._size(basis, c)).clamp(max=1.0)

    def _start_coefficients(
        self, basis: LowFrequencyBasis, x: torch.Tensor, generator: torch.Generator | None
    ) -> torch.Tensor:
        """Zero coefficients, or (``random_start``) Gaussian ones scaled to a radius uniform in [0, ε], projected."""
        c = torch.zeros(*x.shape[:-2], basis.kh, basis.kw, dtype=x.dtype, device=x.device)
        if not self.starts_random:
            return c
        c = torch.randn(c.shape, generator=generator, dtype=x.dtype).to(x.device)
        radius = self.eps * torch.rand(len(x), generator=generator, dtype=x.dtype).to(x.device)
        return self._project(basis, c * radius.view(-1, *([1] * (c.ndim - 1))) / self._size(basis, c))

    @staticmethod
    def image(x: torch.Tensor, c: torch.Tensor, basis: LowFrequencyBasis, clip_values) -> torch.Tensor:
        """``clip(x + B c)``, with autograd: the attack's input as a function of its coefficients."""
        return (x + basis.pixels(c)).clamp(*clip_values)

    # -- one step ----------------------------------------------------------------------------------------------------

    def _draws(self, x_adv: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Pixel gradient of the mean :func:`vote_margin` over ``eot_samples`` draws, that mean loss, vote lead)."""
        votes = _Votes(len(x_adv), self.estimator.nb_classes, self.confidence, x_adv.device)
        g, loss = eot_gradient(
            lambda z: logits(self.estimator, z),
            x_adv,
            y,
            votes,
            self.eot_samples,
            batch_size=self.batch_size,
            memory_budget=self.memory_budget,
        )
        return g, loss, vote_lead(votes.counts, y)

    def _final_lead(self, x_adv: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean :func:`vote_margin`, vote lead) of ``eot_samples`` draws at ``x_adv``, without gradients."""
        votes = _Votes(len(x_adv), self.estimator.nb_classes, self.confidence, x_adv.device)
        with torch.no_grad():
            z = stack_draws(lambda r: logits(self.estimator, r), x_adv, self.eot_samples, batch_size=self.batch_size)
            loss = votes(z.flatten(0, 1), y.repeat(self.eot_samples)).view(self.eot_samples, -1).mean(0)
        return loss.to(x_adv.dtype), vote_lead(votes.counts, y)

    def _attack(self, x: torch.Tensor, y: torch.Tensor, basis: LowFrequencyBasis, clip, generator) -> torch.Tensor:
        """One batch: ``max_iter`` steps from the (random) start; per example the iterate whose vote was furthest
        from ``y`` (ties: the higher loss)."""
        c = self._start_coefficients(basis, x, generator)
        best = best_lead = best_loss = None
        for i in range(self.max_iter + 1):
            c = c.detach().requires_grad_(True)
            with torch.enable_grad():
                x_adv = self.image(x, c, basis, clip)
            if i < self.max_iter:
                g, loss, lead = self._draws(x_adv.detach(), y)
            else:  # the last iterate is scored, not stepped from
                loss, lead = self._final_lead(x_adv.detach(), y)
            if best is None or best_lead is None or best_loss is None:
                best, best_lead, best_loss = x_adv.detach().clone(), lead, loss
            else:
                better = (lead < best_lead) | ((lead == best_lead) & (loss > best_loss))
                best[better], best_lead[better], best_loss[better] = x_adv.detach()[better], lead[better], loss[better]
            if i < self.max_iter:
                with torch.enable_grad():
                    (d,) = torch.autograd.grad(x_adv, c, grad_outputs=g)  # through clip(x + B c): the exact chain rule
                c = self._project(basis, c.detach() + self.eps_step * self._ascent(basis, d))
        assert best is not None  # max_iter >= 1: at least one iterate was scored
        return best

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :param kwargs: Unused (ART's ``generate`` signature).
        :return: Adversarial inputs within ε of ``x`` (in the threat model's norm) and inside ``clip_values``: per
            example the iterate whose vote was furthest from its label (between restarts, ``num_random_init``: the
            best-iterate rule of :class:`~art_adp.attacks._core.IterativeAttack`, on fresh draws).
        """
        from tqdm.auto import tqdm

        y = labels(self.estimator, x, y)
        clip = self.estimator.clip_values if self.estimator.clip_values is not None else (-np.inf, np.inf)
        clip = (float(clip[0]), float(clip[1]))
        device = self.estimator.device
        generator = None if self.seed is None else torch.Generator().manual_seed(self.seed)
        basis = LowFrequencyBasis(x.shape[-2], x.shape[-1], self.cutoff, device=device)
        out = []

        def run(xs, ys, clip_, offer):  # one run (its own best by the vote); the runs' iterates judged on fresh draws
            x_adv = self._attack(xs, ys, basis, clip_, generator)
            offer(x_adv, self.max_iter)
            return x_adv

        with gradient_mode(self.estimator, self.mode):
            for start in tqdm(range(0, len(x), self.batch_size), desc=type(self).__name__, disable=not self.verbose):
                xb = torch.as_tensor(x[start : start + self.batch_size], dtype=torch.float32, device=device)
                yb = torch.as_tensor(y[start : start + self.batch_size], dtype=torch.long, device=device)
                out.append(self._best_of_runs(xb, yb, clip, run, batch=start).cpu().numpy())
        return np.concatenate(out).astype(x.dtype, copy=False)
