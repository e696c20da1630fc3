"""The best iterate, judged on fresh draws: the one rule by which every iterative attack of :mod:`art_adp.attacks`
chooses what it returns (AutoAttack's and APGD's best point, DiffHammer's ``x_adv_best`` by N-evaluation, DiffBreak's
best vote).

Against a randomized purifier the last iterate is a poor output: an image broken at step 12 may be lucky at step 40.
At checkpoints an attack offers its current iterates to :class:`BestIterate`, which judges them on purification draws
of its own -- a generator seeded once per attack is put into every purifier of the estimator for the judgement and
taken out again, so the draws that made the gradients are neither reused nor disturbed -- by the judgement the attack
is aimed at (:data:`JUDGEMENTS`), and keeps, per image, the iterate that judgement finds most broken. Every
judgement of one :class:`BestIterate` replays the same draws (the generator is re-seeded each time), so two iterates
of an image offered at the same position are compared on common noise. The table's own judgement is a further,
separate set of draws.

The kept iterate is the minimum over every iterate offered on those same draws, so an image can be broken on them
alone. Before an attack stops attacking an image, or leaves it out of a later run, it asks :func:`confirmed`: the
kept iterate judged again on fresh draws -- fresh at every use (:meth:`BestIterate.fresh_seed`), so that the many
confirmations of one run are as many draws, none of them the attack's own -- and, where an attack asks for it, on
several such sets at once (:data:`CONFIRMATIONS`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch
from art.estimators.classification import PyTorchClassifier

from .._checks import non_negative_int, one_of, positive_int
from ..ensemble import defences, logits, stack_draws

__all__ = [
    "BestIterate",
    "CONFIRMATIONS",
    "JUDGEMENTS",
    "confirmed",
    "derived_seed",
    "judged_noise",
    "judgement_scores",
    "probability_margin",
]

#: The judgements an attack can aim at: ``"mean"`` (the S-draw ensemble's mean softmax, the paper's eq. 12),
#: ``"worst"`` (N-evaluation: broken when any of the draws fails, DiffHammer's), ``"majority"`` (the vote of the
#: draws, DiffBreak's).
JUDGEMENTS = ("mean", "worst", "majority")
#: Fresh sets of draws on which an early stop asks the kept iterate to be broken, every one of them, before it stops
#: attacking an image (:func:`confirmed`'s ``sets``). An attack that asks after every step asks up to ``max_iter``
#: times per image: an iterate that breaks an ensemble by luck with probability 0.15 passes one set in 15 % of the
#: asks -- fresh draws or the same ones, the asks are dozens -- and the early stop ends the attack on an image the
#: table calls robust. Five sets pass such an iterate with probability 0.15⁵ ≈ 7.6e-5, under 1 % over 100 asks; an
#: iterate broken on every draw passes them all. The sets are judged one after the other, each only on the images the
#: sets before confirmed, so an unbroken image costs about one set. Planted (``test_systemic_lowfreq.py``, 200
#: images, 100 steps of the low-frequency vote attack, the table's broken fraction 1.0 without the early stop): with
#: the early stop 1.0 at five fresh sets per ask, 0.47 at one fresh set, 0.51 at the one set per batch of before.
CONFIRMATIONS = 5


def derived_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (their ``str`` joined by ``|``, SHA-256; the applications' ``derive_seed``): an
    attack's judgement draws from its own seed, so they are reproducible and are not the draws of its gradients."""
    text = "|".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def probability_margin(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``p_y − max_{j≠y} p_j`` over the last axis of ``p`` (``…×K``) for labels ``y`` (broadcast to ``p``'s
    leading shape): negative exactly when ``y`` is not the top class."""
    y = y.expand(p.shape[:-1])
    p_y = p.gather(-1, y[..., None])[..., 0]
    others = p.scatter(-1, y[..., None], float("-inf"))
    return p_y - others.amax(-1)


def judgement_scores(z: torch.Tensor, y: torch.Tensor, judgement: str) -> torch.Tensor:
    """
    How far each image is from broken under ``judgement``, from the logits of its draws: lower is more broken, and
    negative exactly when the judgement calls it broken.

    - ``"mean"``: the margin of the mean softmax over the draws.
    - ``"worst"``: broken when any draw is misclassified; a broken image scores minus the fraction of its draws that
      fail (more failing draws: more broken), an unbroken one the smallest margin of its draws.
    - ``"majority"``: the vote's lead of ``y`` over the next class (a fraction of the draws), broken only at a
      negative lead -- another class strictly wins the vote; a tie is no win for the attack -- plus the mean-softmax
      margin scaled below one vote (it orders images of equal lead; a tie scores above every broken image and below
      every lead of one vote).

    :param z: ``D×N×K`` logits of ``D`` draws of ``N`` images.
    :param y: ``N`` labels.
    :param judgement: One of :data:`JUDGEMENTS`.
    :return: ``N`` scores.
    """
    one_of("judgement", judgement, JUDGEMENTS)
    p = torch.softmax(z.float(), dim=-1)
    mean = probability_margin(p.mean(0), y)
    if judgement == "mean":
        return mean
    if judgement == "worst":
        per_draw = probability_margin(p, y)  # D×N
        failing = (per_draw < 0).float().mean(0)
        return torch.where(failing > 0, -failing, per_draw.amin(0))
    draws = z.shape[0]
    votes = torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).float().mean(0)  # N×K
    lead = probability_margin(votes, y)
    order = mean / (8 * draws)  # in [−1/(8d), 1/(8d)]
    tie = (2 + mean) / (8 * draws)  # in [1/(8d), 3/(8d)]: > 0
    return torch.where(
        lead > 0, lead + 1 / (4 * draws) + order, torch.where(lead < 0, lead - 1 / (4 * draws) + order, tie)
    )


@contextlib.contextmanager
def judged_noise(estimator: PyTorchClassifier, generator: torch.Generator, seed: int) -> Iterator[None]:
    """
    Within the block, every preprocessing defence of ``estimator`` that draws from a ``generator`` attribute (the
    purifiers of art_adp) draws from ``generator`` re-seeded with ``seed``, and torch's global generators (which the
    others draw from) are forked and seeded with ``seed``; afterwards each defence has its own generator back and the
    global ones their state, as they were left.
    """
    saved = [(d, d.generator) for d in defences(estimator) if hasattr(d, "generator")]
    generator.manual_seed(seed)
    devices = [estimator.device] if estimator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        try:
            for d, _ in saved:
                d.generator = generator
            yield
        finally:
            for d, own in saved:
                d.generator = own


class BestIterate:
    """
    Per image, the iterate its judgement found most broken so far, judged on draws of its own.

        best = BestIterate(estimator, y, judgement="mean", draws=10, seed=s)
        best.offer(x_start)
        ... every k iterations and after the last: best.offer(x_adv)
        return best.x

    :param estimator: The attacked ``PyTorchClassifier`` (its whole preprocessing chain, as the attack sees it).
    :param y: ``N`` labels of the images, on the estimator's device.
    :param judgement: One of :data:`JUDGEMENTS`.
    :param draws: Purification draws per judgement (one when the estimator has no purifier: nothing is random).
    :param seed: Seed of the judgement's draws (the same draws at every offer: iterates compared on common noise).
    :param batch_size: Images per forward pass (images × draws).
    :param defended: False judges the bare classifier (the preprocessor-blind attack's aim).
    """

    def __init__(
        self,
        estimator: PyTorchClassifier,
        y: torch.Tensor,
        *,
        judgement: str = "mean",
        draws: int = 10,
        seed: int = 0,
        batch_size: int = 512,
        defended: bool = True,
    ) -> None:
        one_of("judgement", judgement, JUDGEMENTS)
        positive_int("draws", draws)
        non_negative_int("seed", seed)
        positive_int("batch_size", batch_size)
        self.estimator, self.y, self.judgement, self.seed = estimator, y, judgement, seed
        self.batch_size, self.defended = batch_size, defended
        self.draws = draws if defended and defences(estimator) else 1
        self.generator = torch.Generator(estimator.device)
        self.x: torch.Tensor | None = None
        self.score: torch.Tensor | None = None
        #: How many fresh uses :meth:`fresh_seed` has given out.
        self.uses = 0

    def judge(self, x_adv: torch.Tensor, rows: torch.Tensor | None = None, *, seed: int | None = None) -> torch.Tensor:
        """The scores (:func:`judgement_scores`) of ``x_adv`` on this judgement's draws (on the draws of ``seed``
        where given): ``x_adv`` holds all ``N`` images (``rows`` None) or the images ``rows`` (indices) only."""
        with torch.no_grad(), judged_noise(self.estimator, self.generator, self.seed if seed is None else seed):
            z = stack_draws(
                lambda part: logits(self.estimator, part, defended=self.defended),
                x_adv,
                self.draws,
                batch_size=self.batch_size,
            )
        return judgement_scores(z, self.y if rows is None else self.y[rows], self.judgement)

    def offer(self, x_adv: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """
        Judge ``x_adv`` and keep it for every image it scores lower than the best so far (all of them at the first
        offer).

        :param x_adv: Iterates of all ``N`` images, or of the images ``rows`` (indices) only.
        :param rows: Which images ``x_adv`` holds (None: all, in order).
        :return: The improved images' mask over ``x_adv``'s rows.
        """
        x_adv = x_adv.detach()
        if self.x is None or self.score is None:
            if rows is not None:
                raise ValueError("The first offer to a BestIterate must hold every image (rows=None).")
            self.x, self.score = x_adv.clone(), self.judge(x_adv)
            return torch.ones(len(x_adv), dtype=torch.bool, device=x_adv.device)
        idx = torch.arange(len(self.x), device=x_adv.device) if rows is None else rows
        if len(idx) == 0:
            return torch.zeros(0, dtype=torch.bool, device=x_adv.device)
        score = self.judge(x_adv, idx)
        better = score < self.score[idx]
        self.x[idx[better]] = x_adv[better]
        self.score[idx[better]] = score[better]
        return better

    def fresh_seed(self) -> int:
        """
        The seed of this judgement's next fresh use (:func:`confirmed` takes one per set of draws it judges on):
        ``seed`` itself at the first use, ``derived_seed(seed, "use", k)`` at use ``k`` -- deterministic given
        ``seed`` (which the attacks derive from their own, apart from their other draws), and new at every use, so
        the candidates an attack asks about one after the other meet draws none of them met before.
        """
        k, self.uses = self.uses, self.uses + 1
        return self.seed if k == 0 else derived_seed(self.seed, "use", k)

    @property
    def broken(self) -> torch.Tensor:
        """Per image: the kept iterate is broken under the judgement (score < 0)."""
        if self.score is None:
            raise ValueError("Nothing offered yet: call offer(x_start) first.")
        return self.score < 0


def confirmed(
    best: BestIterate, fresh: BestIterate, rows: torch.Tensor, below: float = 0.0, *, sets: int = 1
) -> torch.Tensor:
    """
    Over ``rows`` (indices): ``best``'s kept iterate is broken -- its score below ``below`` -- on ``best``'s draws
    and again on each of ``sets`` fresh sets of ``fresh``'s, draws that did not choose it. An attack asks this before
    it stops attacking an image or leaves it out of a later run: the kept iterate is the minimum over every iterate
    offered on the same draws, so some images are broken only on those draws. Every set is fresh
    (:meth:`BestIterate.fresh_seed`: a new seed at every use), so an attack that asks again and again -- after every
    step -- meets new draws each time, never the same lucky ones; the sets are judged one after the other, each on
    the images the sets before confirmed. Where a set does not confirm, the kept score becomes that set's (the higher
    of the two, at least ``below``): the image counts as unbroken again, and a later iterate that ``best``'s draws
    find broken replaces its kept one.

    :param best: The judgement that chose the kept iterates (after its first offer).
    :param fresh: A judgement of the same images on draws of its own (its labels ``best``'s).
    :param rows: The images asked about.
    :param below: The score below which an image counts as broken (0: the judgement's own verdict; selective EOT's
        N-evaluation drops an image only when more than a fraction of the draws fail).
    :param sets: Fresh sets of draws the kept iterate must be broken on, every one (1: one set; an attack that asks
        after every step asks :data:`CONFIRMATIONS`).
    :return: Over ``rows``, the confirmed images' mask.
    """
    if best.x is None or best.score is None:
        raise ValueError("Nothing offered yet: call offer(x_start) first.")
    positive_int("sets", sets)
    won = best.score[rows] < below
    if not bool(won.any()):
        return won
    asked = rows[won]
    passing = torch.ones(len(asked), dtype=torch.bool, device=won.device)
    for _ in range(sets):
        left = passing.nonzero()[:, 0]
        if len(left) == 0:
            break
        again = fresh.judge(best.x[asked[left]], asked[left], seed=fresh.fresh_seed())
        failed = again >= below
        lost = asked[left[failed]]
        best.score[lost] = torch.maximum(best.score[lost], again[failed])
        passing[left[failed]] = False
    out = won.clone()
    out[won] = passing
    return out
