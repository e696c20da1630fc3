"""What every application shares, below them all: run records as JSON lines (atomic appends, torn-line repair,
resume, the settings guard, hashing of weights, data and files) in :mod:`~art_adp.runs.records`, one seed
derivation in :mod:`~art_adp.runs.seeds`, and the torchrun helper in :mod:`~art_adp.runs.distributed`.

Nothing here knows an attack, a model or a report; the library proper does not need this package.
"""
