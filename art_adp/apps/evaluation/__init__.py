"""The evaluation harness (``evaluate`` and ``art-adp evaluate``): config.py (EvalConfig, the presets
``paper``, ``croce``, ``smoke``, reference budgets), run.py (attacks × examples, judged on the S-run ensemble R
times and with fixed noise; records through :mod:`art_adp.runs.records`), report.py (the evaluation card with
confidence intervals), sanity.py (checks that can fail), command.py (``art-adp evaluate``: data, models, the
defence, the adversarial-training baseline); sharding over torchrun processes uses :mod:`art_adp.runs.distributed`.
``python -m art_adp evaluate`` is ``art-adp evaluate``, also under ``torchrun``.
"""

from .config import ATTACKS, PAPER_ATTACKS, PRESETS, EvalConfig
from .run import PAPER, evaluate

__all__ = ["ATTACKS", "PAPER", "PAPER_ATTACKS", "PRESETS", "EvalConfig", "evaluate"]
