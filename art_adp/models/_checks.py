"""Argument checks shared by the models and the training loop."""
from __future__ import annotations

import numbers


def positive_int(name: str, value: object) -> int:
    """
    Return `value` as a plain `int` if it is an integer >= 1 (bools are rejected).

    :param name: Argument name used in the error message.
    :param value: Value to check.
    :return: The value as a Python `int` (JSON-serialisable, also for NumPy integers).
    :raises ValueError: If `value` is not a positive integer.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
