"""Selective EOT as DiffHammer runs it: E/M-weighted draws, the shared-vulnerability start, APGD steps, restarts,
gradient grafting, the best iterate by N-evaluation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import (
    boolean,
    memory_budget as check_memory_budget,
    non_negative_int,
    number,
    one_of,
    positive_int,
)
from ..ensemble import at_gradient_precision, current_gradient_precision, defend, draw_gradients, logits, stack_draws
from ._core import (
    DEFAULT_GRADIENT,
    GRADIENTS,
    check_norm,
    cross_entropy,
    dlr,
    gradient_mode,
    labels,
    normalize,
    project,
)
from .best_iterate import CONFIRMATIONS, JUDGEMENTS, BestIterate, confirmed, derived_seed

__all__ = [
    "CHECKPOINTS",
    "LOSSES",
    "REPLAY_TOLERANCE",
    "SelectiveEOT",
    "margin",
    "selective_gradient",
    "shared_vulnerability_draw",
]


def margin(logits_: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """DiffHammer's ``cw_loss``, per example: ``max_{j≠y} z_j − z_y`` (positive exactly when misclassified)."""
    z_y = logits_.gather(1, y[:, None])[:, 0]
    others = logits_.scatter(1, y[:, None], -math.inf)
    return others.amax(1) - z_y


#: The losses of the restarts, by name (DiffHammer's ``LOSS_NAMES = ['CW', 'CE', 'DLR']``).
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "margin": margin,
    "ce": cross_entropy,
    "dlr": dlr,
}
#: APGD's checkpoints as fractions of the iterations (DiffHammer's ``APGD.init_params``; Croce & Hein's p_j).
CHECKPOINTS = (0.22, 0.41, 0.57, 0.7, 0.8, 0.87, 0.93)
RHO = 0.75  # Croce & Hein's ρ: halve the step when fewer than ρ of the steps since the last checkpoint raised the loss
MOMENTUM = 0.75  # APGD's α: x_{k+1} = x_k + α (z_{k+1} − x_k) + (1 − α)(x_k − x_{k−1})
#: The grafting replay check's tolerance at the gradient passes' precision, ``(rtol, atol)`` with ``atol`` a fraction
#: of one plus the recorded states' largest magnitude: how far the replayed purification may be from the recorded one
#: (the same noise, another pass: kernels may round in another order, e.g. for another batch size) before the replay
#: counts as another draw. fp32: 1e-3 and 1e-4, thousands of fp32 roundings. bf16 keeps 8 significant bits, so one
#: rounding is up to 2⁻⁸ ≈ 3.9e-3 of the value, above fp32's rtol: four of them of the value (2⁻⁶ ≈ 1.6e-2) and one
#: of the states' scale (2⁻⁸), where a replay of other noise moves the states by the noise's scale.
REPLAY_TOLERANCE = MappingProxyType({"fp32": (1e-3, 1e-4), "bf16": (2.0**-6, 2.0**-8)})


def _cross(grads: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """``[j, i, b] = ⟨directions[j, b], grads[i, b]⟩`` for ``directions`` and ``grads`` both ``N×B×…``."""
    n, b = grads.shape[:2]
    return torch.einsum("jbd,ibd->jib", directions.reshape(n, b, -1), grads.reshape(n, b, -1))


def shared_vulnerability_draw(grads: torch.Tensor, losses: torch.Tensor, *, eps: float, norm: float) -> torch.Tensor:
    """
    DiffHammer's starting draw (``Attacker.seeds_select``): per example, the draw j whose step direction d(g_j)
    raises the most draws' losses,

        j* = argmax_j Σ_i ELU(ℓ_i + ε ⟨d(g_j), g_i⟩),

    where ELU counts a predicted gain linearly but a predicted loss at most −1: the direction of a vulnerability the
    draws share, not that of the single draw nearest to broken (which a draw no other shares can be).

    :param grads: ``N×B×C×H×W``, each draw's loss gradient.
    :param losses: ``N×B``, each draw's loss.
    :param eps: ε, the length of the predicted step.
    :param norm: ``np.inf`` (d = sign) or ``2`` (d = g/‖g‖₂).
    :return: ``B`` draw indices.
    """
    n, b = losses.shape
    units = normalize(grads.reshape(n * b, *grads.shape[2:]), norm).view_as(grads)
    predicted = losses[None] + eps * _cross(grads, units)  # [j, i, b]
    return torch.nn.functional.elu(predicted).sum(1).argmax(0)


def selective_gradient(
    grads: torch.Tensor,
    losses: torch.Tensor,
    *,
    start: torch.Tensor,
    em_steps: int,
    em_lambda: float,
    eps: float,
    norm: float,
) -> torch.Tensor:
    """
    DiffHammer's E and M steps over N draws of each example (``Attacker.EM`` with one selected draw, its default
    ``N_EOT = 1``): r starts at the gradient of the draw ``start``; then ``em_steps`` times

        E:  w_i = sigmoid(λ ℓ̂_i),   ℓ̂_i = ℓ_i + ε ⟨d(r), g_i⟩   (draw i's loss predicted after a step of ε along r)
        M:  r = Σ_i w_i g_i / Σ_i w_i

    Each draw's weight is its own posterior of being broken by the step (a sigmoid, not a softmax over draws): every
    draw the step breaks counts fully, so r follows the vulnerability those draws share, while draws that the step
    leaves far from broken drop out instead of cancelling it (EOT's gradient dilemma).

    Differs from the authors' code: their loop assigns the M-step to a variable the next E-step does not read, so
    however many ``EM_STEPS`` it runs one E-step from the start draw; here each E-step reads the previous M-step's r.
    Their E-step adds ⟨d(r), g_i⟩ without ε (their ``seeds_select`` scales by ε); here both scale by ε.

    :param grads: ``N×B×C×H×W``, each draw's loss gradient.
    :param losses: ``N×B``, each draw's loss.
    :param start: ``B`` draw indices (:func:`shared_vulnerability_draw`).
    :param em_steps: E/M iterations (0: the start draw's gradient alone).
    :param em_lambda: λ ≥ 0, the sigmoid's slope (λ = 0: EOT's mean).
    :param eps: ε, the length of the predicted step.
    :param norm: ``np.inf`` or ``2``.
    :return: ``B×C×H×W``, the selective gradient r.
    """
    n, b = losses.shape
    r = grads[start, torch.arange(b, device=grads.device)]
    for _ in range(em_steps):
        ahead = losses + eps * (grads * normalize(r, norm)[None]).flatten(2).sum(2)  # E: ℓ̂_i
        w = torch.sigmoid(em_lambda * ahead).view(n, b, *([1] * (grads.ndim - 2)))
        r = (w * grads).sum(0) / w.sum(0).clamp_min(1e-30)  # M
    return r


def _kept(best: BestIterate) -> tuple[torch.Tensor, torch.Tensor]:
    """The iterates a :class:`BestIterate` keeps and their scores (after its first offer)."""
    assert best.x is not None and best.score is not None
    return best.x, best.score


class _NoiseTape:
    """
    The Gaussian noise the purifiers draw (``torch.randn``) while they purify N stacked draws of a batch, kept, so one
    later purification of the batch can replay, for each example, the noise of the draw chosen for it: row b of the
    replay meets the noise of row ``choice[b] · B + b`` of the recorded draws. Every purifier of art_adp draws its
    noise this way, one ``torch.randn`` of rows-first shape per chunk of rows; a defence that draws otherwise is
    refused (:meth:`SelectiveEOT._replay` also checks that the replayed purification is the recorded one).
    """

    def __init__(self) -> None:
        self.parts: list[torch.Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Keep every ``torch.randn`` drawn in the block."""
        original = torch.randn

        def randn(*args, **kwargs):
            out = original(*args, **kwargs)
            self.parts.append(out.detach())
            return out

        torch.randn = randn
        try:
            yield
        finally:
            torch.randn = original

    @contextlib.contextmanager
    def replaying(self, choice: torch.Tensor, draws: int) -> Iterator[None]:
        """In the block, ``torch.randn`` of rows-first shape gives the recorded rows of the chosen draws, in order."""
        n = len(choice)
        tape = self._tape(draws * n)
        original, state = torch.randn, {"offset": 0}

        def randn(*args, **kwargs):
            size = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
            size = tuple(kwargs.get("size", size))
            a = state["offset"]
            if tape is None or not size or size[1:] != tuple(tape.shape[1:]) or a + size[0] > n:
                raise ValueError(_UNREPLAYABLE)
            rows = torch.arange(a, a + size[0], device=tape.device)
            state["offset"] = (a + size[0]) % n
            out = tape[choice.to(tape.device)[rows] * n + rows]
            return out.to(device=kwargs.get("device") or tape.device, dtype=kwargs.get("dtype") or tape.dtype)

        torch.randn = randn
        try:
            yield
        finally:
            torch.randn = original

    def _tape(self, rows: int) -> torch.Tensor | None:
        if not self.parts:
            return None
        if any(p.ndim == 0 or p.shape[1:] != self.parts[0].shape[1:] for p in self.parts):
            raise ValueError(_UNREPLAYABLE)
        tape = torch.cat(self.parts)
        if len(tape) != rows:
            raise ValueError(_UNREPLAYABLE)
        return tape


_UNREPLAYABLE = (
    "graft=True replays one purification draw per example, which needs a defence that draws its noise as art_adp's "
    "purifiers do (one torch.randn of rows-first shape per chunk, from its generator); this one does not: "
    "use graft=False (every draw's gradient through the purification)."
)


@dataclass
class _Draws:
    """The N draws at one iterate: each draw's loss gradient (input space, or purified space when grafting), loss,
    and for grafting the purified states and their noise."""

    grads: torch.Tensor
    losses: torch.Tensor
    states: torch.Tensor | None = None
    tape: _NoiseTape | None = None


class SelectiveEOT(EvasionAttack):  # pylint: disable=too-many-instance-attributes
    """
    DiffHammer's selective attack, as its ``attacker.py`` runs it against a randomized purifier. Per batch, per
    loss of ``losses`` (margin, then cross-entropy, then DLR: one run each, a restart), from a random start:

    1. **N draws** (``eot_samples``) at the iterate: each draw's loss ℓ_i and gradient g_i.
    2. **The starting draw** by the shared-vulnerability rule (:func:`shared_vulnerability_draw`, the code's
       ``seeds_select``), then **E/M steps** (:func:`selective_gradient`): sigmoid per-draw weights, r = their
       weighted mean of the g_i.
    3. **The step direction**: with ``gradient="full"`` and ``graft=True`` (DiffHammer's gradient grafting) the g_i
       are the classifier's gradients at the purified states (no backward pass through purification) and r is
       back-propagated once through the purification of the starting draw, replayed with that draw's own noise
       (:class:`_NoiseTape`): one backward pass through purification per iteration instead of N. With
       ``graft=False`` the g_i are each draw's gradient through the purification (N backward passes) and r is the
       direction. With ``gradient="bpda"`` the g_i are straight-through gradients and nothing is replayed.
    4. **Gradient averaging over iterates** (``em_alpha``, the code's ``v = (i+1)^−α``): ĝ_i = v r_i + (1 − v) ĝ_{i−1}.
    5. **APGD's step** (Croce & Hein 2020; the code's ``APGD``): initial step ``eps_step`` (2ε), momentum 0.75,
       the step halved at the checkpoints :data:`CHECKPOINTS` where fewer than 75 % of the steps since the last
       checkpoint raised the loss (the largest of the N draws' losses), or where the step and the best loss are both
       unchanged since it; a halved image goes back to its best iterate of this run.
    6. **The best iterate by N-evaluation**: after every step each image's iterate is judged on ``judge_samples``
       draws that made no gradient (:class:`~art_adp.attacks.best_iterate.BestIterate`, ``judgement="worst"``:
       broken when any draw misclassifies, more failing draws more broken); a run stops once every image of the
       batch fails on every judging draw.
    7. **Restarts** on what is left: the next loss runs, from a fresh random start, on the images whose kept iterate
       fails on at most ``restart_threshold`` of the judging draws (DiffHammer's ``RESTART_THR`` on its average
       success), or fails on more of them but not again on each of
       :data:`~art_adp.attacks.best_iterate.CONFIRMATIONS` sets of as many fresh draws of its own, new at every loss
       (:func:`~art_adp.attacks.best_iterate.confirmed`: the kept iterate is the most broken of every iterate on the
       same judging draws, so an image can be broken on those alone); the output is, per image, the best iterate over
       all runs.

    Differs from the authors' code: each E-step reads the previous M-step (see :func:`selective_gradient`); the
    judging draws are a fixed set of their own (common noise across iterates) instead of the next iteration's E/M
    draws; the E/M draws are taken at the iterate the step starts from (the code takes them before a checkpoint's
    return to the best iterate); the step-size rule's second condition uses the best loss so far (Croce & Hein; the
    code compares two iterates' losses), and only halved images return to their best iterate (the code returns
    every image); an image is left out of the next loss only once fresh draws confirm it broken (the code restarts by
    the success its own judging draws measured). Grafting replays the whole noise of the chosen draw (the code
    replays the forward-diffusion noise per image and reseeds the rest per batch). Backward passes through
    purification per iterate and image, counted by :attr:`purifier_backward_rows`: ``graft=True`` 1, ``graft=False``
    N.

    | Paper link: Wang, Fu, Han & Xiang, "DiffHammer: Rethinking the Robustness of Diffusion-Based Adversarial
      Purification", NeurIPS 2024; code https://github.com/Ka1b0/DiffHammer (``attacker.py``: ``Attacker.EM``,
      ``seeds_select``, ``perturb``, ``APGD``; ``config.py``: N = 10, 50 iterations per loss, λ 5, α 0.5,
      5 E/M steps, restart threshold 0.5).

    :param estimator: ``PyTorchClassifier(..., preprocessing_defences=[purifier])`` (ADP, reverse diffusion,
        denoised smoothing; switched to ``gradient`` while attacking).
    :param gradient: ``"full"`` (through purification) or ``"bpda"``.
    :param graft: With ``gradient="full"``: back-propagate the weighted gradient once through the starting draw's
        replayed purification (True) or every draw's gradient through its own (False).
    :param norm: ``np.inf`` or ``2``.
    :param eps: Radius of the threat model.
    :param eps_step: APGD's initial step (None: 2ε).
    :param max_iter: Iterations per loss.
    :param eot_samples: N, the draws of the E/M steps at every iterate.
    :param losses: The runs' losses in order, from :data:`LOSSES`.
    :param em_steps: E/M iterations per iterate.
    :param em_lambda: λ, the slope of the E-step's sigmoid.
    :param em_alpha: α of the averaging over iterates (0: r_i alone).
    :param judge_samples: Draws of the N-evaluation that judges the iterates (None: ``eot_samples``).
    :param judgement: What the iterates are judged by, and the restarts decided on
        (:data:`~art_adp.attacks.best_iterate.JUDGEMENTS`; None: :attr:`aim`, DiffHammer's N-evaluation ``"worst"``).
        The applications aim it at the judgement of their tables, the S-draw ensemble (``"mean"``): an attack aimed at
        another judgement keeps iterates that table may not find broken.
    :param restart_threshold: The fraction of judging draws an image's kept iterate may fail on and still restart.
    :param batch_size: Images per batch (and most rows per forward pass).
    :param memory_budget: MiB of autograd graph per block of draws (``graft=False``; None:
        :func:`art_adp.ensemble.default_memory_budget`).
    :param seed: Seed of the random starts, of the judging draws and of the fresh draws that confirm an image broken
        (derived from it and the batch).
    :param verbose: Show a progress bar over batches.
    """

    #: The name of this attack in :data:`~art_adp.attacks.registry.REGISTRY`, its records and on the command line.
    name = "selective-eot"
    #: The judgement this attack is aimed at, the one its iterates are judged by
    #: (:data:`~art_adp.attacks.best_iterate.JUDGEMENTS`):
    #: any draw that misclassifies breaks an image, more failing draws more broken.
    aim = "worst"
    attack_params = EvasionAttack.attack_params + [
        "gradient",
        "graft",
        "norm",
        "eps",
        "eps_step",
        "max_iter",
        "eot_samples",
        "losses",
        "em_steps",
        "em_lambda",
        "em_alpha",
        "judge_samples",
        "judgement",
        "restart_threshold",
        "batch_size",
        "memory_budget",
        "seed",
        "verbose",
    ]
    _estimator_requirements = (PyTorchClassifier,)

    def __init__(
        self,
        estimator: PyTorchClassifier,
        *,
        gradient: str = DEFAULT_GRADIENT,
        graft: bool = True,
        norm=np.inf,
        eps: float = 8 / 255,
        eps_step: float | None = None,
        max_iter: int = 50,
        eot_samples: int = 10,
        losses: tuple[str, ...] = ("margin", "ce", "dlr"),
        em_steps: int = 5,
        em_lambda: float = 5.0,
        em_alpha: float = 0.5,
        judge_samples: int | None = None,
        judgement: str | None = None,
        restart_threshold: float = 0.5,
        batch_size: int = 512,
        memory_budget: float | None = None,
        seed: int = 0,
        verbose: bool = False,
    ) -> None:
        super().__init__(estimator=estimator)
        self.gradient, self.graft = gradient, graft
        self.norm = np.inf if norm in ("inf", np.inf) else norm
        self.eps, self.eps_step, self.max_iter, self.eot_samples = eps, eps_step, max_iter, eot_samples
        self.losses = tuple(losses) if isinstance(losses, (list, tuple)) else losses
        self.em_steps, self.em_lambda, self.em_alpha = em_steps, em_lambda, em_alpha
        self.judge_samples, self.restart_threshold = judge_samples, restart_threshold
        self.judgement = self.aim if judgement is None else judgement
        self.batch_size, self.memory_budget, self.seed, self.verbose = batch_size, memory_budget, seed, verbose
        #: Rows (images × draws) back-propagated through the purification by the last :meth:`generate`.
        self.purifier_backward_rows = 0
        self._generator: torch.Generator | None = None
        self._check_params()

    @property
    def mode(self) -> str:
        """The purifier gradient mode set while attacking: ``gradient``."""
        return self.gradient

    def _check_params(self) -> None:
        one_of("gradient", self.gradient, GRADIENTS)
        boolean("graft", self.graft)
        check_norm(self.norm)
        number("eps", self.eps, low=0, low_open=True)
        if self.eps_step is not None:
            number("eps_step", self.eps_step, low=0, low_open=True)
        for name in ("max_iter", "eot_samples", "batch_size"):
            positive_int(name, getattr(self, name))
        positive_int("judge_samples", self.judge_samples, optional=True)
        one_of("judgement", self.judgement, JUDGEMENTS)
        if not isinstance(self.losses, tuple) or not self.losses:
            raise ValueError(f"losses must be a non-empty tuple of {tuple(LOSSES)}, got {self.losses!r}.")
        for loss in self.losses:
            one_of("losses", loss, LOSSES)
        classes = getattr(self.estimator, "nb_classes", None)
        if "dlr" in self.losses and classes is not None and classes < 3:
            raise ValueError(
                f"The DLR loss needs at least 3 classes, the estimator has {classes}; leave it out of losses "
                "(e.g. losses=('margin', 'ce'))."
            )
        non_negative_int("em_steps", self.em_steps)
        number("em_lambda", self.em_lambda, low=0)
        number("em_alpha", self.em_alpha, low=0)
        number("restart_threshold", self.restart_threshold, low=0, high=1)
        check_memory_budget(self.memory_budget)
        non_negative_int("seed", self.seed)

    # -- the draws and the step direction ------------------------------------------------------------------------

    def _classifier_gradients(
        self, states: torch.Tensor, y: torch.Tensor, loss: Callable
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each purified state's loss gradient through the classifier alone (``N×B×…`` states): grads, losses."""
        n, b = states.shape[:2]
        flat, labels_ = states.reshape(n * b, *states.shape[2:]), y.repeat(n)
        grads, losses = torch.empty_like(flat), flat.new_empty(n * b)
        for a in range(0, n * b, self.batch_size):
            rows = flat[a : a + self.batch_size].detach().requires_grad_(True)
            with torch.enable_grad():
                out = at_gradient_precision(lambda r: logits(self.estimator, r, defended=False))(rows)
                lk = loss(out, labels_[a : a + self.batch_size])
                (g,) = torch.autograd.grad(lk.sum(), rows)
            grads[a : a + len(rows)], losses[a : a + len(rows)] = g, lk.detach()
        return grads.view_as(states), losses.view(n, b)

    def _draws(self, x_adv: torch.Tensor, y: torch.Tensor, loss: Callable) -> _Draws:
        """The N draws at ``x_adv`` (see the class docstring, step 1)."""
        n = self.eot_samples
        if self.gradient == "full" and not self.graft:

            def through(rows: torch.Tensor) -> torch.Tensor:
                z = defend(self.estimator, rows)
                if z.requires_grad:
                    z.register_hook(self._count(len(rows)))
                return logits(self.estimator, z, defended=False)

            grads, losses = draw_gradients(
                through, x_adv, y, loss, n, batch_size=self.batch_size, memory_budget=self.memory_budget
            )
            return _Draws(grads, losses)
        tape = _NoiseTape() if self.gradient == "full" else None
        with torch.no_grad(), tape.recording() if tape is not None else contextlib.nullcontext():
            purified = at_gradient_precision(lambda rows: defend(self.estimator, rows))
            states = stack_draws(purified, x_adv, n, batch_size=self.batch_size)
        grads, losses = self._classifier_gradients(states, y, loss)
        return _Draws(grads, losses, states, tape)

    def _count(self, rows: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            self.purifier_backward_rows += rows

        return hook

    def _direction(self, x_adv: torch.Tensor, draws: _Draws) -> torch.Tensor:
        """The selective gradient r at ``x_adv`` in input space (steps 2 and 3)."""
        start = shared_vulnerability_draw(draws.grads, draws.losses, eps=self.eps, norm=self.norm)
        r = selective_gradient(
            draws.grads,
            draws.losses,
            start=start,
            em_steps=self.em_steps,
            em_lambda=self.em_lambda,
            eps=self.eps,
            norm=self.norm,
        )
        if draws.tape is None:
            return r
        return self._replay(x_adv, draws, start, r)

    def _replay(self, x_adv: torch.Tensor, draws: _Draws, start: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Gradient grafting: ∇_x ⟨r, P_s(x)⟩ through the purification P_s of each example's starting draw s,
        replayed with its recorded noise: one backward pass through purification."""
        assert draws.tape is not None and draws.states is not None
        rows = x_adv.detach().requires_grad_(True)
        with torch.enable_grad(), draws.tape.replaying(start, self.eot_samples):
            purified = at_gradient_precision(lambda part: defend(self.estimator, part))
            z = torch.cat([purified(part) for part in rows.split(self.batch_size)])
        recorded = draws.states[start, torch.arange(len(start), device=start.device)]
        rtol, atol = REPLAY_TOLERANCE[current_gradient_precision()]
        if not torch.allclose(z.detach(), recorded, rtol=rtol, atol=atol * (1 + float(recorded.abs().max()))):
            raise ValueError(_UNREPLAYABLE)
        if not z.requires_grad:  # nothing in the defences depends on the input: the identity's gradient
            return r
        z.register_hook(self._count(len(rows)))
        (g,) = torch.autograd.grad(z, rows, grad_outputs=r)
        return g

    # -- the loop --------------------------------------------------------------------------------------------------

    @property
    def _done(self) -> float:
        """A kept score at or below which an image is as broken as the judgement can say (every draw failing, for
        N-evaluation); the others have no such floor (−inf: a run ends at its last iteration)."""
        return -1.0 if self.judgement == "worst" else -math.inf

    @property
    def _restart_below(self) -> float:
        """The next loss restarts the images whose kept score is at least this: N-evaluation, those failing on fewer
        than ``restart_threshold`` of the draws (DiffHammer's); another judgement, those it does not call broken."""
        return -self.restart_threshold if self.judgement == "worst" else 0.0

    def _judge(self, y: torch.Tensor, seed: int) -> BestIterate:
        """The judgement of the iterates of images labelled ``y``: ``judge_samples`` draws seeded by ``seed``."""
        return BestIterate(
            self.estimator,
            y,
            judgement=self.judgement,
            draws=self.judge_samples or self.eot_samples,
            seed=seed,
            batch_size=self.batch_size,
        )

    def _random_start(self, x: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """A random start in the ε-ball (ℓ∞: uniform in the box, DiffHammer's ``initialize``; ℓ2: a uniform direction
        at a uniform radius), clipped, from the attack's seeded generator."""
        assert self._generator is not None
        u = torch.rand(x.shape, generator=self._generator).to(x.device)
        if self.norm == np.inf:
            delta = self.eps * (2 * u - 1)
        else:
            d = normalize(torch.randn(x.shape, generator=self._generator).to(x.device), 2)
            delta = d * (self.eps * u.flatten(1)[:, :1]).view(-1, *([1] * (x.ndim - 1)))
        return project(x + delta, x, self.eps, self.norm, clip)

    def _run(
        self, x: torch.Tensor, y: torch.Tensor, loss: Callable, clip: tuple[float, float], seed: int
    ) -> BestIterate:
        """One APGD run with the selective gradient from a random start: this run's best iterates."""
        best = self._judge(y, seed)
        x_adv = self._random_start(x, clip)
        best.offer(x_adv)
        view = (-1,) + (1,) * (x.ndim - 1)
        eta = torch.full((len(x),), 2 * self.eps if self.eps_step is None else self.eps_step, device=x.device)
        eta_before = eta.clone()
        x_prev = x_adv.clone()
        draws = self._draws(x_adv, y, loss)
        history = [draws.losses.amax(0)]
        top = history[0].clone()
        top_before, last = top.clone(), 0
        checks = sorted({int(p * self.max_iter) for p in CHECKPOINTS} - {0})
        past: torch.Tensor | None = None
        for i in range(self.max_iter):
            g = self._direction(x_adv, draws)
            if past is not None and self.em_alpha > 0:
                v = (i + 1) ** -self.em_alpha
                g = v * g + (1 - v) * past
            past = g
            z = project(x_adv + eta.view(view) * normalize(g, self.norm), x, self.eps, self.norm, clip)
            a = MOMENTUM if i else 1.0
            x_next = project(x_adv + a * (z - x_adv) + (1 - a) * (x_adv - x_prev), x, self.eps, self.norm, clip)
            x_prev, x_adv = x_adv, x_next.detach()
            best.offer(x_adv)
            if i + 1 == self.max_iter or bool((_kept(best)[1] <= self._done).all()):  # done, or every image as broken
                # as the judgement can call it (N-evaluation: every draw fails)
                break
            draws = self._draws(x_adv, y, loss)
            history.append(draws.losses.amax(0))
            top = torch.maximum(top, history[-1])
            if i + 1 in checks:
                k = i + 1
                rises = (torch.stack(history[last + 1 : k + 1]) > torch.stack(history[last:k])).sum(0)
                halve = (rises < RHO * (k - last)) | ((eta == eta_before) & (top == top_before))
                eta_before, eta = eta.clone(), torch.where(halve, eta / 2, eta)
                last, top_before = k, top.clone()
                if bool(halve.any()):
                    x_adv = torch.where(halve.view(view), _kept(best)[0], x_adv)
                    x_prev = torch.where(halve.view(view), x_adv, x_prev)
                    draws = self._draws(x_adv, y, loss)
                    history[-1] = torch.where(halve, draws.losses.amax(0), history[-1])
        return best

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :param kwargs: Ignored (ART's signature).
        :return: Adversarial inputs within ε of ``x`` and inside ``clip_values``: per image the best iterate of all
            runs by the N-evaluation.
        """
        from tqdm.auto import tqdm

        y = labels(self.estimator, x, y)
        clip = self.estimator.clip_values if self.estimator.clip_values is not None else (-np.inf, np.inf)
        clip = (float(clip[0]), float(clip[1]))
        device = self.estimator.device
        self._generator = torch.Generator().manual_seed(self.seed)
        self.purifier_backward_rows = 0
        judge_seed = (self.seed * 7919 + 1) % 2**62  # the judging draws: a seed of their own
        out = []
        with gradient_mode(self.estimator, self.mode):
            for start in tqdm(range(0, len(x), self.batch_size), desc=type(self).__name__, disable=not self.verbose):
                xb = torch.as_tensor(x[start : start + self.batch_size], dtype=torch.float32, device=device)
                yb = torch.as_tensor(y[start : start + self.batch_size], device=device)
                best: BestIterate | None = None
                fresh = self._judge(yb, derived_seed(self.seed, "confirm", start))
                everyone = torch.arange(len(xb), device=device)
                for name in self.losses:
                    # the next loss restarts every image not confirmed broken: its kept iterate, the most broken of
                    # every iterate on the judging draws, judged again before it is left out on CONFIRMATIONS sets of
                    # fresh draws, new at every loss
                    done = None if best is None else confirmed(best, fresh, everyone, below=self._restart_below,
                                                               sets=CONFIRMATIONS)  # fmt: skip
                    rows = everyone if done is None else torch.nonzero(~done)[:, 0]
                    if len(rows) == 0:
                        break
                    run = self._run(xb[rows], yb[rows], LOSSES[name], clip, judge_seed)
                    if best is None:
                        best = run
                    else:
                        best.offer(_kept(run)[0], rows)
                assert best is not None and best.x is not None
                out.append(best.x.cpu().numpy())
        return np.concatenate(out).astype(x.dtype, copy=False)
