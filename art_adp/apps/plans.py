"""``art-adp plans``: the named plans the commands select (:data:`art_adp.runs.plans.PLANS`), the lever tables' and
reproduce's registered by their modules; ``art-adp migrate``: an old run folder's records in the one layout
(:func:`art_adp.runs.migrate.migrate`)."""

from __future__ import annotations

from ..runs.migrate import migrate
from ..runs.records import SETTINGS
from ..runs.plans import PLANS, plan_names
from . import levers, reproduce  # noqa: F401  # pylint: disable=unused-import  (they register their plans)

__all__ = ["MIGRATE_HELP", "migrate_command", "plans_command"]

MIGRATE_HELP = (
    "Convert RUN_DIR's records (records.jsonl, rejudged-*.jsonl, an evaluation's records/*.jsonl) to the one record "
    "layout once, and an evaluation's settings.json from digests to cells, the old files kept beside as NAME.v0: the "
    "fields the layout derives from the predictions (correct, undefended_correct) are checked against them and "
    "dropped; nothing is measured again. A record that contradicts its predictions is refused, naming its line. Then "
    "the files of an earlier folder layout move into the one every command writes: records.jsonl to "
    "records/rank-0.jsonl, cells.json (a lever table's), recipe.json (reproduce's) and certify_settings.json to "
    "settings.json."
)


def plans_command(only: str | None = None) -> None:
    """Print the named plans the commands select (``only``: one command's): each one's name, the command that runs
    it and what it measures."""
    for name in plan_names(only):
        print(f"{name:<21} {PLANS[name].command:<9} {PLANS[name].what}")


def migrate_command(run_dir: str) -> None:
    """Convert ``run_dir``'s records to the one layout (:data:`MIGRATE_HELP`) and say what was converted."""
    done = migrate(run_dir)
    for name, n in done.items():
        if " -> " in name:
            print(f"{run_dir}: moved {name} (the one folder layout)")
            continue
        what = "cells" if name == SETTINGS else "records"
        print(f"{run_dir}/{name}: {n} {what} converted (the old file kept beside as {name}.v0)")
    if not done:
        print(f"{run_dir}: its records are in the one layout already; nothing converted")
