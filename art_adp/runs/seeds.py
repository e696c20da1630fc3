"""One seed derivation for every application: a unit of work's seed from its identity alone, so a unit gives the
same draws whichever process runs it, in any order; and the seed schemes of a block, by name, in one table: a cell
names its scheme (:class:`SeedPlan`), so its seeds are data."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "FOLDER_SCHEMES", "LEVERS_SCHEMES", "REPRODUCE_SCHEMES", "SCHEME", "SCHEMES", "SeedPlan", "Seeds", "check_scheme",
    "derive_seed",
]  # fmt: skip


def derive_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (their ``str`` joined by ``|``, SHA-256): the same parts, the same seed."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


@dataclass(frozen=True)
class Seeds:
    """The draws of one block: the attack's own (random start, directions), the purifiers' noise while attacking (or
    the frozen draw of a fixed judgement) and each of the R judgements' noise."""

    attack: int
    noise: int
    judge: tuple[int, ...] = ()


def _judges(seed: int, identity: tuple, repeats: int) -> tuple[int, ...]:
    return tuple(derive_seed(seed, "judge", *identity, r) for r in range(repeats))


def apart(seed: int, block: int, first: int, *identity, repeats: int = 1) -> Seeds:  # pylint: disable=unused-argument
    """The seed scheme: the attack's seed, the purifiers' noise seed and each judgement's derived apart from the run's
    ``seed``, the cell's ``identity`` and the block's first image."""
    unit = (*identity, first)
    return Seeds(attack=derive_seed(seed, "attack", *unit), noise=derive_seed(seed, "noise", *unit),
                 judge=_judges(seed, unit, repeats))  # fmt: skip


def shared(seed: int, block: int, first: int, *identity, repeats: int = 1) -> Seeds:  # pylint: disable=unused-argument
    """The scheme before :func:`apart`: the attack and the purifiers' noise seeded alike, ``derive_seed(seed,
    *identity, first)``; kept by name so that a run folder measured with it resumes with its own draws."""
    s = derive_seed(seed, *identity, first)
    return Seeds(attack=s, noise=s, judge=_judges(seed, (*identity, first), repeats))


#: Images per block of ``levers``' fixed-noise view (its seeds come from the block's first index).
FIXED_BLOCK = 50


def _levers_block(seed: int, block: int) -> int:
    return seed if block == 0 else derive_seed(seed, "block", block)


def levers(seed: int, block: int, first: int, row: str, repeats: int = 1) -> Seeds:  # pylint: disable=unused-argument
    """``levers``' adaptive rows: from the block's seed (the run's for block 0, else derived from its number), the
    attack's by the row's name, the noise's by ``"attack"`` and the name, the judgements' by ``"judge"``."""
    part = _levers_block(seed, block)
    return Seeds(attack=derive_seed(part, row), noise=derive_seed(part, "attack", row),
                 judge=tuple(derive_seed(part, "judge", k) for k in range(repeats)))  # fmt: skip


# pylint: disable-next=unused-argument
def levers_fixed(seed: int, block: int, first: int, row: str, repeats: int = 1) -> Seeds:
    """``levers``' fixed-noise view, blocks of :data:`FIXED_BLOCK` images: the row's attack seed, the block's frozen
    draw (from its first index, ``block · FIXED_BLOCK``)."""
    return Seeds(derive_seed(seed, row), derive_seed(seed, "fixed", block * FIXED_BLOCK))


def levers_white(
    seed: int, block: int, first: int, *parts, repeats: int = 1
) -> Seeds:  # pylint: disable=unused-argument
    """``levers``' white-box rows on the undefended classifiers (one block): the attack's from the run's seed and
    ``parts`` (AutoAttack's name; ``"pgd"`` and a PGD row's name), the noise's the run's."""
    return Seeds(derive_seed(seed, *parts), seed)


def levers_once(seed: int, block: int, first: int, repeats: int = 1) -> Seeds:  # pylint: disable=unused-argument
    """``levers``' clean and Clf-PGD rows behind a purifier: the run's seed, one judgement."""
    return Seeds(seed, seed, (derive_seed(seed, "judge", 0),))


# pylint: disable-next=unused-argument
def reproduce(seed: int, block: int, first: int, budget: int, row: str, repeats: int = 1) -> Seeds:
    """``reproduce``'s rows: from the snapshot's training budget, the row and the block's first image."""
    s = derive_seed(seed, budget, row, first)
    return Seeds(s, derive_seed(s, "attack", row), tuple(derive_seed(s, "judge", r) for r in range(repeats)))


#: Seed schemes by name, each ``(seed, block, first image, *identity, repeats=R) -> Seeds``: ``"apart"`` for every
#: new evaluation folder, ``"shared"`` for those measured before it (their settings name no scheme; the judgements'
#: seeds are the same in both), and the plans' own: ``levers``' four and ``reproduce``'s.
SCHEMES: Mapping[str, Callable[..., Seeds]] = MappingProxyType({
    "apart": apart, "shared": shared, "levers": levers, "levers-fixed": levers_fixed, "levers-white": levers_white,
    "levers-once": levers_once, "reproduce": reproduce,
})  # fmt: skip
#: The schemes an evaluation folder may name (``evaluate --seed-scheme``, ``evaluate_robustness(seed_scheme=)``).
FOLDER_SCHEMES = ("apart", "shared")
#: The schemes a levers folder may name: ``"apart"``, or ``"levers"`` for those measured before it (each kind of cell
#: seeded by its own of ``levers``' four: ``levers``, ``levers-fixed``, ``levers-white``, ``levers-once``).
LEVERS_SCHEMES = ("apart", "levers")
#: The schemes a reproduce folder may name: ``"apart"``, or ``"reproduce"`` for those measured before it.
REPRODUCE_SCHEMES = ("apart", "reproduce")
#: The scheme of a new run folder.
SCHEME = "apart"


def check_scheme(scheme: str, among: Sequence[str] = FOLDER_SCHEMES) -> str:
    """``scheme`` if it is one of ``among``.

    :raises ValueError: Naming the schemes, otherwise."""
    if scheme not in among:
        raise ValueError(f"Unknown seed scheme {scheme!r}; choose from {list(among)}.")
    return scheme


@dataclass(frozen=True)
class SeedPlan:
    """
    A cell's seeds as data (JSON-able): the scheme's name (:data:`SCHEMES`), the run's seed, the cell's identity and
    R; called with a block's number and first image, that block's :class:`Seeds`.
    """

    scheme: str
    seed: int
    identity: tuple = ()
    repeats: int = 1

    def __post_init__(self):
        check_scheme(self.scheme, tuple(SCHEMES))

    def __call__(self, block: int, first: int) -> Seeds:
        return SCHEMES[self.scheme](self.seed, block, first, *self.identity, repeats=self.repeats)
