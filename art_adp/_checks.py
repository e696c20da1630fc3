"""Argument checks and deprecation helpers shared by the whole library: one place, one message dialect.

Every check raises ``ValueError`` with a message of the form ``"{name} must be <what>, got {value!r}."``:

    positive_int("steps", 0)            -> "steps must be an integer >= 1, got 0."
    number("eps", -1, low=0, low_open=True)  -> "eps must be a number > 0, got -1."
    one_of("gradient", "x", ("bpda", "full")) -> "gradient must be one of 'bpda', 'full', got 'x'."

Renamed arguments go through :func:`renamed_kwargs` (a decorator) or :func:`warn_renamed`, which all warn with
one ``DeprecationWarning`` text: ``"X(old=...) is deprecated, use new=...; the old name will be removed in 0.3."``
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, overload

__all__ = [
    "REMOVAL",
    "boolean",
    "integer",
    "moved_module",
    "non_negative_int",
    "number",
    "one_of",
    "positive_int",
    "probability",
    "renamed_kwargs",
    "take_positional",
    "take_renamed",
    "warn_deprecated",
    "warn_renamed",
    "warn_renamed_attribute",
]

REMOVAL = "0.3"  # the release that drops the deprecated names


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


# -- deprecations ---------------------------------------------------------------------------------------------------


def warn_deprecated(message: str, *, stacklevel: int = 2, subject: str = "the old name") -> None:
    """A ``DeprecationWarning``: ``"{message}; {subject} will be removed in 0.3."`` (``stacklevel`` as in
    ``warnings``: 2 points at the caller of the function calling this)."""
    warnings.warn(f"{message}; {subject} will be removed in {REMOVAL}.", DeprecationWarning, stacklevel=stacklevel + 1)


def warn_renamed(owner: str, old: str, new: str, *, stacklevel: int = 2) -> None:
    """``"{owner}(old=...) is deprecated, use new=...; the old name will be removed in 0.3."``"""
    warn_deprecated(f"{owner}({old}=...) is deprecated, use {new}=...", stacklevel=stacklevel + 1)


def warn_renamed_attribute(owner: str, old: str, new: str, *, stacklevel: int = 2) -> None:
    """``"{owner}.old is deprecated, use {owner}.new; the old name will be removed in 0.3."``"""
    warn_deprecated(f"{owner}.{old} is deprecated, use {owner}.{new}", stacklevel=stacklevel + 1)


def take_renamed(kwargs: dict, renames: Mapping[str, str], owner: str, *, stacklevel: int = 2) -> dict:
    """
    Move every deprecated key of ``kwargs`` (``renames``: old → new) to its new name, warning for each.

    :return: ``kwargs`` with the new names.
    :raises TypeError: If both the old and the new name are given.
    """
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise TypeError(f"{owner}() got both {old}= (deprecated) and {new}=; pass {new}= only.")
            warn_renamed(owner, old, new, stacklevel=stacklevel + 1)
            kwargs[new] = kwargs.pop(old)
    return kwargs


def take_positional(
    owner: str, args: tuple, old_order: Iterable[str], kwargs: dict, *, new: str, stacklevel: int = 2
) -> dict:
    """
    Map deprecated positional arguments, in their old order, onto keywords (warning once), for a constructor whose
    arguments became keyword-only.

    :param new: How the new call reads, for the message (e.g. ``"DigitsCNN(nb_classes=...)"``).
    :raises TypeError: For too many positional arguments or one also given by keyword.
    """
    if not args:
        return kwargs
    old_order = tuple(old_order)
    if len(args) > len(old_order):
        raise TypeError(
            f"{owner}() takes at most {len(old_order)} positional arguments ({', '.join(old_order)}), "
            f"got {len(args)}; pass them by keyword."
        )
    warn_deprecated(
        f"{owner}() with positional arguments ({', '.join(old_order[:len(args)])}) is deprecated, "
        f"use keywords: {new}",
        stacklevel=stacklevel + 1,
        subject="positional arguments",
    )
    for name, value in zip(old_order, args):
        if name in kwargs:
            raise TypeError(f"{owner}() got multiple values for argument {name!r}.")
        kwargs[name] = value
    return kwargs


def renamed_kwargs(**renames: str) -> Callable:
    """
    Decorator accepting the old keyword names of a function (``old="new"``) with a ``DeprecationWarning`` pointing
    at the caller. The owner in the message is the class for ``__init__``, else the function name.
    """

    def decorate(fn: Callable) -> Callable:
        parts = [p for p in fn.__qualname__.split(".") if p != "<locals>"]
        if parts[-1] == "__init__" and len(parts) > 1:
            owner = parts[-2]  # "DefendedModel(runs=...)"
        else:
            owner = ".".join(parts[-2:])  # "purify(...)", "DefendedModel.from_estimator(...)"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if kwargs and not renames.keys().isdisjoint(kwargs):
                take_renamed(kwargs, renames, owner, stacklevel=2)
            return fn(*args, **kwargs)

        setattr(wrapper, "__renamed_kwargs__", dict(renames))
        return wrapper

    return decorate


def moved_module(old: str, new: str, *, submodules: Mapping[str, str] | None = None):
    """
    The module ``new`` for an import of its old path ``old``, with a ``DeprecationWarning``: ``"{old} is deprecated,
    use {new}; the old name will be removed in 0.3."``. An old module file is then one line,
    ``sys.modules[__name__] = moved_module(__name__, "art_adp.apps.demo")``, and the old path is the *same* module
    object as the new one (private names and monkeypatching included).

    :param submodules: Old dotted path -> new dotted path of submodules also reachable under the old package.
    """
    import importlib
    import sys

    warn_deprecated(f"{old} is deprecated, use {new}", stacklevel=3)
    module = importlib.import_module(new)
    for old_sub, new_sub in (submodules or {}).items():
        sys.modules[old_sub] = importlib.import_module(new_sub)
        if not hasattr(module, old_sub.rpartition(".")[2]):  # `import old.sub as s` reads it from the package
            setattr(module, old_sub.rpartition(".")[2], sys.modules[old_sub])
    return module
