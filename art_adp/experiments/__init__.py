"""Applications that write a run directory: reproduction recipes and their score-training schedules.

Nothing in the library depends on this package; it is built on the public API (data loaders, trainers,
:func:`art_adp.evaluate`, the attack classes).
"""
