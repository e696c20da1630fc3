"""The evaluation harness (``art_adp.evaluate`` and ``art-adp evaluate``): run.py (attacks × examples, judged on
the S-run ensemble R times), records.py (JSONL, resume), report.py (tables), sanity.py (gradient-masking checks),
distributed.py (torchrun sharding). ``python -m art_adp.evaluation`` (or ``python -m art_adp.evaluate``) is
``art-adp evaluate``, for ``torchrun``.
"""

from .run import ATTACKS, DIGITS, PAPER, EvalConfig, evaluate

__all__ = ["ATTACKS", "DIGITS", "PAPER", "EvalConfig", "evaluate"]
