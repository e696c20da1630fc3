"""One seed derivation for every application: a unit of work's seed from its identity alone, so a unit gives the
same draws whichever process runs it, in any order; and the seed schemes of a block, by name."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["SCHEME", "SCHEMES", "Seeds", "check_scheme", "derive_seed"]


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


def apart(seed: int, *identity, repeats: int = 1) -> Seeds:
    """The seed scheme: the attack's seed, the purifiers' noise seed and each judgement's derived apart from the run's
    ``seed`` and the block's ``identity`` (its cell's key and first image)."""
    return Seeds(attack=derive_seed(seed, "attack", *identity), noise=derive_seed(seed, "noise", *identity),
                 judge=_judges(seed, identity, repeats))  # fmt: skip


def shared(seed: int, *identity, repeats: int = 1) -> Seeds:
    """The scheme before :func:`apart`: the attack and the purifiers' noise seeded alike, ``derive_seed(seed,
    *identity)``; kept by name so that a run folder measured with it resumes with its own draws."""
    s = derive_seed(seed, *identity)
    return Seeds(attack=s, noise=s, judge=_judges(seed, identity, repeats))


#: Seed schemes by name: ``"apart"`` for every new run folder, ``"shared"`` for those measured before it (their
#: settings name no scheme). The judgements' seeds are the same in both: a re-judgement gives either's predictions.
SCHEMES: Mapping[str, Callable[..., Seeds]] = MappingProxyType({"apart": apart, "shared": shared})
#: The scheme of a new run folder.
SCHEME = "apart"


def check_scheme(scheme: str) -> str:
    """``scheme`` if it is one of :data:`SCHEMES`.

    :raises ValueError: Naming the schemes, otherwise."""
    if scheme not in SCHEMES:
        raise ValueError(f"Unknown seed scheme {scheme!r}; choose from {list(SCHEMES)}.")
    return scheme
