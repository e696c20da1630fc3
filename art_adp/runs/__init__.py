"""What every application shares, below them all: run records as JSON lines (atomic appends, torn-line repair,
resume, the settings guard, hashing of weights, data and files) in :mod:`~art_adp.runs.records`, one seed
derivation in :mod:`~art_adp.runs.seeds`, the torchrun helper in :mod:`~art_adp.runs.distributed`, the statistics of an
accuracy in :mod:`~art_adp.runs.statistics`, and the one evaluation engine in :mod:`~art_adp.runs.engine` (cells of a
plan -- a defended model, an attack at its budget, a judgement -- run in blocks into one record file; its Python entry
point :func:`~art_adp.runs.engine.evaluate_robustness`), which every command measuring accuracy under attack is a plan
of.

Nothing here but the engine knows an attack or a model, and nothing here knows a report or a command; the library
proper does not need this package.
"""
