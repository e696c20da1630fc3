"""What the attacks of :mod:`art_adp.attacks` share. The defended and the bare forward pass of an ART estimator
(its whole preprocessing chain, ART's standardisation included) and batched EOT gradients come from
:mod:`art_adp.ensemble` directly (:func:`~art_adp.ensemble.logits`, :func:`~art_adp.ensemble.eot_gradient`); here: the
purifiers' gradient mode, the losses, and one projected-iteration loop (Table 1 of the paper: each attack is a
different update direction inside it), which keeps each image's best iterate and runs restarts by the one rule of
:mod:`art_adp.attacks.best_iterate`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from art.attacks.attack import EvasionAttack
from art.estimators.classification import PyTorchClassifier

from .._checks import integer, non_negative_int, number, one_of, positive_int
from ..diffusion_preprocessor import DenoisedSmoothingPurifier, ReverseDiffusionPurifier
from ..ensemble import ensemble_gradient, eot_gradient, generators, logits, scripted
from ..preprocessor import DEFAULT_GRADIENT, GRADIENTS, ADPPurifier
from .best_iterate import JUDGEMENTS, BestIterate, confirmed, derived_seed

__all__ = [
    "AUTO",
    "STEP_SCHEDULES",
    "check_interval",
    "DEFAULT_GRADIENT",
    "EOT_TARGETS",
    "GRADIENTS",
    "IterativeAttack",
    "JointAttack",
    "LOSSES",
    "check_norm",
    "eot_loss_gradient",
    "gradient_mode",
    "margin",
    "normalize",
    "project",
    "purifiers",
    "seeded_numpy",
]

NORMS = (np.inf, 2)


@contextlib.contextmanager
def seeded_numpy(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded with ``seed`` (modulo 2³²) inside, restored after: ART's attacks draw their
    random starts from it, so the same seed gives the same examples and the caller's own draws are left as they were."""
    state = np.random.get_state()
    try:
        np.random.seed(int(seed) % 2**32)
        yield
    finally:
        np.random.set_state(state)


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


#: Iterations between two judgements of the iterates (``check_every`` of :class:`IterativeAttack`): a judgement is
#: ``judge_draws`` forward passes without a backward pass, an iteration ``eot_samples`` forward and backward passes.
CHECK_EVERY = 5
#: Purification draws per judgement of the iterates (``judge_draws``): the paper's ensemble size S.
JUDGE_DRAWS = 10
#: ``check_every="auto"``: judge every iterate where a judgement (``judge_draws`` forward passes) costs under a
#: quarter of an iteration (``eot_samples`` forward passes and their backward passes, counted as two more through the
#: purification with its full gradient), else every :data:`CHECK_EVERY`.
AUTO = "auto"
#: The step schedules of the projected loop (``step_schedule``): ``"constant"`` steps of ``eps_step``; ``"halving"``:
#: ``eps_step`` for the first half of the iterations, half of it to three quarters, a quarter after (the schedule of
#: a PGD that converges instead of circling the ε-ball's corners at a fixed step).
STEP_SCHEDULES = ("constant", "halving")


def check_interval(check_every: int | str, *, eot_samples: int, judge_draws: int, full: bool = True) -> int:
    """``check_every`` as an interval: itself, or for :data:`AUTO` 1 where a judgement costs under a quarter of an
    iteration (``full``: backward passes through the purification count twice a forward pass) and
    :data:`CHECK_EVERY` elsewhere."""
    if check_every != AUTO:
        return int(check_every)
    step = eot_samples * (3 if full else 1)
    return 1 if judge_draws < step / 4 else CHECK_EVERY


#: ``offer(x_adv, step)``: hand the iterate after ``step`` of ``max_iter`` iterations (0: the start) to the best-iterate
#: rule; see :meth:`IterativeAttack._best_of_runs`.
Offer = Callable[[torch.Tensor, int], None]


class IterativeAttack(EvasionAttack):
    """
    The projected loop every attack of Table 1 shares (x_{i+1} = Π_{B(x₀, ε)}(x_i + α d_i), clipped), in batches;
    a subclass supplies the direction d_i (:meth:`_direction`) and the purifier gradient mode it needs. With
    ``random_start`` (the default) the loop starts from a uniform draw in the ε-ball (Madry et al.; foolbox's and
    torchattacks' ``random_start``), drawn from ``generator``, else from x₀ itself.

    **Best iterate, judged on fresh draws, and restarts** (:mod:`art_adp.attacks.best_iterate`, the one rule): each
    image returns the iterate its judgement found most broken, not the last one. The start, every ``check_every``-th
    iterate and the last are judged by ``judgement`` (the judgement the attack is aimed at: the class attribute
    :attr:`aim` unless given) on ``judge_draws`` purification draws of the attack's own, seeded from its ``seed`` (or
    its ``generator``'s seed) -- never the draws of its gradients, which it leaves as they would be without judging.
    With ``num_random_init`` > 1 (ART's name) every run after the first starts from a fresh uniform point of the
    ε-ball (from ``generator``) and runs only on the images not confirmed broken: unbroken on the judgement's draws,
    or broken there but not again on fresh draws of their own (:func:`~art_adp.attacks.best_iterate.confirmed`; the
    kept iterate is the minimum over every iterate on the same draws, so an image can be broken on them alone).
    ``check_every=0`` judges each run's last iterate only (with one run: nothing is judged, the last iterate is
    returned).

    Subclasses supply :meth:`_direction`, may keep per-batch state in :meth:`_start` (called at the start of every
    run, on that run's images), and a subclass with a loop of its own runs it through :meth:`_best_of_runs`.
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
        "num_random_init",
        "check_every",
        "judgement",
        "judge_draws",
        "step_schedule",
    ]
    _estimator_requirements = (PyTorchClassifier,)

    #: The judgement this attack is aimed at (:data:`~art_adp.attacks.best_iterate.JUDGEMENTS`), its default
    #: ``judgement``: the S-draw ensemble (``"mean"``) unless a subclass aims at another.
    aim = "mean"
    #: Judge the iterates on the defended estimator (False: on the bare classifier, the preprocessor-blind attack's
    #: aim).
    judged_defended = True

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
        random_start: bool = True,
        generator: torch.Generator | None = None,
        batch_size: int = 512,
        verbose: bool = False,
        num_random_init: int = 1,
        check_every: int | str = AUTO,
        judgement: str | None = None,
        judge_draws: int = JUDGE_DRAWS,
        step_schedule: str = "constant",
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
        self.num_random_init = num_random_init
        self.check_every = check_every
        self.judgement = self.aim if judgement is None else judgement
        self.judge_draws = judge_draws
        self.step_schedule = step_schedule
        self._run = 0  # the run in progress (0: the first; restarts start at a random point)
        self._check_params()

    def _check_params(self) -> None:
        check_norm(self.norm)
        for name in ("eps", "eps_step"):
            number(name, getattr(self, name), low=0, low_open=True)
        for name in ("max_iter", "batch_size", "num_random_init", "judge_draws"):
            positive_int(name, getattr(self, name))
        if self.check_every != AUTO:
            non_negative_int("check_every", self.check_every)
        one_of("judgement", self.judgement, JUDGEMENTS)
        one_of("step_schedule", self.step_schedule, STEP_SCHEDULES)
        if not isinstance(self.random_start, bool):
            raise ValueError(f"random_start must be True or False, got {self.random_start!r}.")

    @property
    def runs(self) -> int:
        """Runs per batch (:meth:`_best_of_runs`): ``num_random_init``."""
        return self.num_random_init

    @property
    def starts_random(self) -> bool:
        """The run in progress starts from a random point: ``random_start``, or a restart (every run after the
        first)."""
        return self.random_start or getattr(self, "_run", 0) > 0

    def _uniform(self, x: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """A point drawn uniformly from the ε-ball around each input (ℓ∞: the box; ℓ2: the ball), clipped, drawn on
        the CPU from ``generator`` (default: torch's)."""
        u = torch.rand(x.shape, generator=self.generator)
        if self.norm == np.inf:
            delta = (2 * u - 1) * self.eps
        else:  # a uniform direction, radius ε·r^(1/d) with r uniform: uniform in the ℓ2 ball
            d = torch.randn(x.shape, generator=self.generator).flatten(1)
            r = u.flatten(1)[:, :1] ** (1 / d.shape[1])
            delta = (d / d.norm(dim=1, keepdim=True).clamp_min(1e-12) * r * self.eps).view_as(x)
        return project(x + delta.to(x.device), x, self.eps, self.norm, clip)

    def _random_point(self, x: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """The random start of a run: a uniform point of the ε-ball (:meth:`_uniform`; APGD: Croce & Hein's)."""
        return self._uniform(x, clip)

    def _start(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float]) -> torch.Tensor:
        """The first iterate of a run for a batch of clean inputs ``x`` (labels ``y``): ``x`` itself, or a random
        point of the ε-ball (:meth:`_random_point`) when :attr:`starts_random`. Called at the start of every run, on
        the images it attacks: a subclass may keep what its loss needs of the clean batch here."""
        return self._random_point(x, clip) if self.starts_random else x.clone()

    def _direction(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _best_iterate(self, y: torch.Tensor, batch: int, purpose: str = "best-iterate") -> BestIterate:
        """
        The best-iterate rule of one batch: its own draws, seeded from the attack's seed, ``purpose`` and the batch.

        :param y: The batch's labels.
        :param batch: Index of the batch's first image in the input.
        :param purpose: ``"best-iterate"``, the draws that choose the kept iterates; ``"confirm"``, the fresh draws
            that confirm a broken one before a restart leaves its image out (:func:`~.best_iterate.confirmed`).
        """
        return BestIterate(
            self.estimator,
            y,
            judgement=self.judgement,
            draws=self.judge_draws,
            seed=derived_seed(self._seed_base(), purpose, batch),
            batch_size=self.batch_size,
            defended=self.judged_defended,
        )

    def _seed_base(self) -> int:
        """What the judgement's seed is derived from: the attack's ``seed``, else its ``generator``'s initial seed,
        else 0."""
        seed = getattr(self, "seed", None)
        if isinstance(seed, int) and not isinstance(seed, bool):
            return seed
        return int(self.generator.initial_seed()) if self.generator is not None else 0

    #: Restarts attack the whole batch (offered whole): for attacks whose noise depends on a row's position.
    _restart_whole_batch = False

    @property
    def _confirms(self) -> bool:
        """An image broken on the judgement's draws is judged again on fresh draws before a restart leaves it out
        (False: a judgement without fresh draws to take, the bare classifier's or the one fixed draw's)."""
        return self.judged_defended

    def _best_of_runs(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        clip: tuple[float, float],
        run: Callable[[torch.Tensor, torch.Tensor, tuple[float, float], Offer], torch.Tensor],
        *,
        batch: int = 0,
    ) -> torch.Tensor:
        """
        The one place the best-iterate rule and restarts are applied: ``num_random_init`` calls of ``run`` on a
        batch, each but the first on the images still unbroken (with :attr:`starts_random` true), and per image the
        iterate its judgement found most broken.

        :param x: The clean batch ``N×…``; ``y`` its ``N`` labels.
        :param clip: The clip range.
        :param run: ``run(x, y, clip, offer) -> last iterate``: one run from :meth:`_start` on the images given,
            calling ``offer(x_adv, step)`` after each step (``step`` 0: the start, ``max_iter``: the last); which
            steps are judged (``check_every``) is decided here.
        :param batch: Index of the batch's first image in the input (seeds its judgement's draws).
        :return: ``N×…``: per image the best iterate (with one run and ``check_every=0``: the last).
        """
        judging = self.interval > 0 or self.runs > 1
        best = self._best_iterate(y, batch) if judging else None
        fresh = self._best_iterate(y, batch, "confirm") if self.runs > 1 and self._confirms else None
        last = x
        try:
            for r in range(self.runs):
                ran = self._one_run(r, x, y, clip, run, best, fresh)
                if ran is None:
                    break
                last = ran
        finally:
            self._run = 0
        return last if best is None or best.x is None else best.x

    def _one_run(self, r: int, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float], run, best, fresh=None):
        """Run ``r`` of :meth:`_best_of_runs`: the whole batch, or after the first the images not confirmed broken --
        unbroken on ``best``'s draws, or broken there but not on ``fresh``'s (:func:`~.best_iterate.confirmed`; the
        whole batch for :attr:`_restart_whole_batch`); its last iterate, or None when every image is broken."""
        self._run = r
        rows = None
        if r > 0 and best is not None:
            everyone = torch.arange(len(x), device=x.device)
            done = best.broken if fresh is None else confirmed(best, fresh, everyone)
            unbroken = torch.nonzero(~done)[:, 0]
            if len(unbroken) == 0:
                return None
            rows = None if self._restart_whole_batch else unbroken

        def offer(x_adv: torch.Tensor, step: int) -> None:
            if best is not None and self._judged(step):
                best.offer(x_adv, rows)

        xs, ys = (x, y) if rows is None else (x[rows], y[rows])
        return run(xs, ys, clip, offer)

    @property
    def interval(self) -> int:
        """Iterations between judgements: ``check_every``, resolved for :data:`AUTO` by :func:`check_interval` from
        the attack's EOT draws (one for an attack without)."""
        draws = getattr(self, "eot_samples", 1)
        full = self.mode != "bpda" and self.judged_defended
        return check_interval(self.check_every, eot_samples=draws, judge_draws=self.judge_draws, full=full)

    def _judged(self, step: int) -> bool:
        """The iterate after ``step`` iterations is judged: the last, and every ``check_every``-th (the start
        included)."""
        every = self.interval
        return step == self.max_iter or (every > 0 and step % every == 0)

    def step_size(self, i: int) -> float:
        """The step of iteration ``i`` (from 0) under ``step_schedule``."""
        if self.step_schedule == "constant":
            return self.eps_step
        return self.eps_step * 0.5 ** sum(i >= f * self.max_iter for f in (0.5, 0.75))

    def _loop(self, x: torch.Tensor, y: torch.Tensor, clip: tuple[float, float], offer: Offer) -> torch.Tensor:
        """One run of the projected loop from :meth:`_start`, offering every iterate."""
        x_adv = self._start(x, y, clip)
        offer(x_adv, 0)
        for i in range(self.max_iter):
            step = self.step_size(i) * self._direction(x_adv, y)
            x_adv = project(x_adv + step, x, self.eps, self.norm, clip).detach()
            offer(x_adv, i + 1)
        return x_adv

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """
        :param x: Inputs ``N×C×H×W`` in the estimator's ``clip_values``.
        :param y: True labels (indices or one-hot); default: the estimator's predictions.
        :return: Adversarial inputs, within ε of ``x`` and inside ``clip_values``: per image the iterate its
            judgement found most broken over every run.
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
                out.append(self._best_of_runs(xb, yb, clip, self._loop, batch=start).cpu().numpy())
        return np.concatenate(out).astype(x.dtype, copy=False)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy."""
    return torch.nn.functional.cross_entropy(logits, y, reduction="none")


def margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Carlini & Wagner's margin (untargeted), per example: max_{j≠y} z_j − z_y, positive exactly when ``y`` is not
    the top class. On log-probabilities (the ensemble's log mean softmax) it is the log-ratio of the runner-up's
    probability to the true class's."""
    z_y = logits.gather(1, y[:, None])[:, 0]
    return logits.scatter(1, y[:, None], float("-inf")).amax(1) - z_y


def dlr(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Croce & Hein's difference-of-logits ratio (untargeted), per example: −(z_y − max_{j≠y} z_j)/(z_π1 − z_π3)."""
    z = logits.sort(dim=1).values
    z_y = logits.gather(1, y[:, None])[:, 0]
    top_is_y = logits.argmax(1) == y
    other = torch.where(top_is_y, z[:, -2], z[:, -1])
    return -(z_y - other) / (z[:, -1] - z[:, -3] + 1e-12)


#: The per-example losses the gradient attacks ascend, by name.
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ce": cross_entropy,
    "margin": margin,
    "dlr": dlr,
}
#: What an EOT gradient differentiates (``eot_target``): ``"ensemble"``, the loss of the S-draw ensemble the tables
#: judge -- the loss of the log of the mean softmax over the EOT draws (:func:`~art_adp.ensemble.ensemble_gradient`);
#: ``"draws"``, the mean over the draws of each draw's loss (:func:`~art_adp.ensemble.eot_gradient`).
EOT_TARGETS = ("ensemble", "draws")


def eot_loss_gradient(
    estimator: PyTorchClassifier,
    x_adv: torch.Tensor,
    y: torch.Tensor,
    loss: Any,
    draws: int,
    *,
    target: str,
    batch_size: int | None,
    memory_budget: float | None,
    aggregate: str = "mean",
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    The EOT gradient and loss of ``loss`` at ``x_adv`` through the estimator's whole chain: of the ensemble's log mean
    softmax (``target="ensemble"``) or the mean of per-draw losses (``"draws"``; ``aggregate`` ``"sign"``: the
    authors' vote). With ``states`` (DiffAttack's loss on the purification states, per draw only) ``loss`` takes each
    draw's logits with its states, and labels ``N×2`` (class, row index: the row's clean image), made here from ``y``.

    :return: ``(gradient shaped like x_adv, loss N)``.
    """
    from ..defended import DefendedModel

    def plain(z: torch.Tensor) -> torch.Tensor:
        return logits(estimator, z)

    fn: Callable[[torch.Tensor], Any] = plain
    if states:
        fn = DefendedModel.from_estimator(estimator, ensemble_size=1).draw_states
        y = torch.stack([y, torch.arange(len(y), device=y.device)], 1)
    if target == "ensemble":
        return ensemble_gradient(fn, x_adv, y, loss, draws, batch_size=batch_size, memory_budget=memory_budget,
                                 generators=generators(estimator), checkpoint=not scripted(estimator))  # fmt: skip
    return eot_gradient(fn, x_adv, y, loss, draws, batch_size=batch_size, memory_budget=memory_budget,
                        aggregate=aggregate)  # fmt: skip


class JointAttack(IterativeAttack):
    """
    The two joint attacks of Table 1: a weighted sum ``w · (defence-side direction) + (1 − w) · (classifier
    gradient)``; subclasses give the direction in ``_direction``. Restarts and the best iterate (``num_random_init``,
    ``check_every``, ``judgement``, ``judge_draws``) as in :class:`IterativeAttack`; a restart starts from a uniform
    point of the ε-ball drawn from torch's generator.
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
        **best,
    ) -> None:
        self.weight = weight
        self.eot_samples = eot_samples
        super().__init__(
            estimator,
            norm=norm,
            eps=eps,
            eps_step=eps_step,
            max_iter=max_iter,
            batch_size=batch_size,
            verbose=verbose,
            **best,
        )
        self.purifier = the_purifier(estimator, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        number("weight", self.weight, low=0, high=1)
        integer("eot_samples", self.eot_samples, low=self.min_eot_samples)
