"""One seed derivation for every application: a unit of work's seed from its identity alone, so a unit gives the
same draws whichever process runs it, in any order."""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed"]


def derive_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (their ``str`` joined by ``|``, SHA-256): the same parts, the same seed."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little") >> 1
