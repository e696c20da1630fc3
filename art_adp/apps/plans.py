"""``art-adp plans``: the named plans the commands select (:data:`art_adp.runs.plans.PLANS`), the lever tables' and
reproduce's registered by their modules."""

from __future__ import annotations

from ..runs.plans import PLANS, plan_names
from . import levers, reproduce  # noqa: F401  # pylint: disable=unused-import  (they register their plans)

__all__ = ["plans_command"]


def plans_command(only: str | None = None) -> None:
    """Print the named plans the commands select (``only``: one command's): each one's name, the command that runs
    it and what it measures."""
    for name in plan_names(only):
        print(f"{name:<21} {PLANS[name].command:<9} {PLANS[name].what}")
