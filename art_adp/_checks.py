"""Argument checks shared by the whole library: one place, one message dialect.

Every check raises ``ValueError`` with a message of the form ``"{name} must be <what>, got {value!r}."``:

    positive_int("steps", 0)            -> "steps must be an integer >= 1, got 0."
    number("eps", -1, low=0, low_open=True)  -> "eps must be a number > 0, got -1."
    one_of("gradient", "x", ("bpda", "full")) -> "gradient must be one of 'bpda', 'full', got 'x'."
    memory_budget(0)                    -> "memory_budget must be a number of MiB > 0 or None, got 0."
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any, Literal, overload

__all__ = [
    "MIB",
    "boolean",
    "integer",
    "memory_budget",
    "non_negative_int",
    "number",
    "one_of",
    "positive_int",
    "probability",
]

MIB = 2**20  # bytes per MiB: ``memory_budget`` is in MiB everywhere, in bytes only inside art_adp.ensemble


# -- checks -------------------------------------------------------------------------------------------------------


def _fail(name: str, what: str, value: object, optional: bool) -> ValueError:
    return ValueError(f"{name} must be {what}{' or None' if optional else ''}, got {value!r}.")


def _bounds(
    kind: str,
    low: float | None,
    high: float | None,
    low_open: bool = False,
    high_open: bool = False,
    *,
    unbounded: str = "",
) -> str:
    """How a message names the allowed values: "an integer in [0, 9]", "a number > 0", "a number in (0, 1)"."""

    def show(v: float) -> str:
        return str(v) if kind == "an integer" else f"{v:g}"

    if low is not None and high is not None:
        return f"{kind} in {'(' if low_open else '['}{show(low)}, {show(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {show(low)}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {show(high)}"
    return unbounded or kind


@overload
def integer(
    name: str, value: object, *, low: int | None = ..., high: int | None = ..., optional: Literal[False] = ...
) -> int:
    """Without ``optional``: never None."""


@overload
def integer(name: str, value: object, *, low: int | None = ..., high: int | None = ..., optional: bool) -> int | None:
    """With ``optional=True``: None passes through."""


def integer(
    name: str, value: object, *, low: int | None = None, high: int | None = None, optional: bool = False
) -> int | None:
    """
    ``value`` as a plain ``int`` if it is an integer (bools rejected; NumPy integers accepted) in ``[low, high]``.

    :param optional: Also accept ``None`` (returned as is; the message then says ``"... or None"``).
    :raises ValueError: ``"{name} must be an integer >= {low}, got {value!r}."`` (or ``<= high``, ``in [low, high]``).
    """
    if optional and value is None:
        return None
    as_int = int(value) if not isinstance(value, bool) and isinstance(value, numbers.Integral) else None
    if as_int is None or (low is not None and as_int < low) or (high is not None and as_int > high):
        raise _fail(name, _bounds("an integer", low, high), value, optional)
    return as_int


@overload
def positive_int(name: str, value: object, *, optional: Literal[False] = ...) -> int:
    """Without ``optional``: never None."""


@overload
def positive_int(name: str, value: object, *, optional: bool) -> int | None:
    """With ``optional=True``: None passes through."""


def positive_int(name: str, value: object, *, optional: bool = False) -> int | None:
    """``value`` as an ``int`` >= 1: ``"{name} must be an integer >= 1, got {value!r}."``"""
    return integer(name, value, low=1, optional=optional)


@overload
def non_negative_int(name: str, value: object, *, optional: Literal[False] = ...) -> int:
    """Without ``optional``: never None."""


@overload
def non_negative_int(name: str, value: object, *, optional: bool) -> int | None:
    """With ``optional=True``: None passes through."""


def non_negative_int(name: str, value: object, *, optional: bool = False) -> int | None:
    """``value`` as an ``int`` >= 0: ``"{name} must be an integer >= 0, got {value!r}."``"""
    return integer(name, value, low=0, optional=optional)


@overload
def number(
    name: str,
    value: object,
    *,
    low: float | None = ...,
    high: float | None = ...,
    low_open: bool = ...,
    high_open: bool = ...,
    optional: Literal[False] = ...,
) -> float:
    """Without ``optional``: never None."""


@overload
def number(
    name: str,
    value: object,
    *,
    low: float | None = ...,
    high: float | None = ...,
    low_open: bool = ...,
    high_open: bool = ...,
    optional: bool,
) -> float | None:
    """With ``optional=True``: None passes through."""


def number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> float | None:
    """
    ``value`` as a ``float`` if it is a finite real number (bools rejected) within the bounds.

    :param low, high: Bounds (None: unbounded on that side).
    :param low_open, high_open: Exclude the bound itself.
    :param optional: Also accept ``None``.
    :raises ValueError: ``"{name} must be a number > 0, got ..."``, ``"... a number in [0, 1), got ..."``,
        ``"... a finite number, got ..."``.
    """
    if optional and value is None:
        return None
    as_float = float(value) if not isinstance(value, bool) and isinstance(value, numbers.Real) else math.nan
    ok = math.isfinite(as_float)
    if ok and low is not None:
        ok = as_float > low if low_open else as_float >= low
    if ok and high is not None:
        ok = as_float < high if high_open else as_float <= high
    if not ok:
        raise _fail(
            name, _bounds("a number", low, high, low_open, high_open, unbounded="a finite number"), value, optional
        )
    return as_float


def probability(name: str, value: object) -> float:
    """A number in the open interval (0, 1): ``"{name} must be a number in (0, 1), got {value!r}."``"""
    return number(name, value, low=0, high=1, low_open=True, high_open=True)


def one_of(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``: ``"{name} must be one of 'a', 'b', got {value!r}."``"""
    choices = tuple(choices)
    try:
        ok = value in choices
    except TypeError:  # an unhashable or incomparable value
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}.")
    return value


def boolean(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False``: ``"{name} must be True or False, got {value!r}."``"""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return value


def memory_budget(value: object) -> float | None:
    """
    The memory budget: MiB of autograd graph per block of draws, checked in this one place for every estimator,
    attack and command that takes one (bytes appear only inside :mod:`art_adp.ensemble`).

    :return: ``value`` (a number of MiB > 0), or None (the library's default for the device).
    :raises ValueError: ``"memory_budget must be a number of MiB > 0 or None, got {value!r}."``
    """
    if value is None:
        return None
    as_float = float(value) if not isinstance(value, bool) and isinstance(value, numbers.Real) else math.nan
    if not (math.isfinite(as_float) and as_float > 0):
        raise _fail("memory_budget", "a number of MiB > 0", value, optional=True)
    return as_float
