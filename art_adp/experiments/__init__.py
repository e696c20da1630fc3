"""Applications that write a run directory (records, resume, settings guard): the corruption table, reproduction
recipes and their score-training schedules, and the torchrun helper they share.

Nothing in the library proper depends on this package; it is built on the public API (data loaders, trainers,
:func:`art_adp.evaluate`, the attack classes).
"""
