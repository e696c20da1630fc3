"""What ``reproduce mnist`` does, as data: the recipe (:class:`MnistRecipe`, registered as the plan
``reproduce:mnist``) and the paper's MNIST figures it is set against (:data:`PAPER_MNIST`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..attacks import registry
from ..runs.plans import Plan, register
from ..runs.seeds import REPRODUCE_SCHEMES, check_scheme

__all__ = ["CURVE_DIRECTIONS", "MNIST_PLAN", "PAPER_MNIST", "MnistRecipe"]


CURVE_DIRECTIONS = 4  # random directions per image of the curve's compression rate


PAPER_MNIST = {
    "source": "Yoon, Hwang & Lee (ICML 2021), appendix table 'Evaluation results for more datasets'",
    "data": "MNIST, 60,000 training / 10,000 test images",
    "score_model": "NCSNv2, sigma_1 = 15, sigma_L = 0.005253, L = 110, 200,000 iterations of batch 128",
    "clean": 98.07,
    registry.BLIND_ATTACK: 96.41,
}


@dataclass(frozen=True)
class MnistRecipe:
    """
    Everything ``reproduce mnist`` does, with the defaults of the recipe documented in ``docs/mnist_results.md``.

    Score model: NCSNv2 of width ``ngf`` trained on σ from ``sigma_begin`` to ``sigma_end`` (geometric,
    ``num_sigmas`` levels; purification starts at σ = 0.25, so the paper's σ₁ = 15 only matters for sampling), batch
    ``batch_size``, Adam ``lr`` after ``lr_warmup`` steps of linear warm-up, EMA ``ema_decay``, forward pass in
    ``precision`` (``"fp32"`` or ``"bf16"``, as :func:`~art_adp.score.train_score_model` takes them, or ``"auto"``:
    bf16 where the device computes it natively, else fp32, and on a resume the stored recipe's; ``settings.json``
    holds the precision used; one written before ``lr_warmup`` and ``precision`` existed reads as 0 and
    ``"fp32"``). The table is measured at every iteration count of ``budgets``; the learning curve at every
    ``curve_milestones`` entry (the budgets are milestones too).

    Attack budgets: ℓ∞ ε = ``eps``; Clf-PGD ``max_iter`` steps of ``eps_step`` (the paper's row: 40 × 0.01);
    BPDA+EOT ``bpda_max_iter`` steps of ``attack_eps_step`` with ``eot_samples`` draws; the full-gradient row
    (``full_attack``) ``full_max_iter`` steps of ``attack_eps_step`` with ``full_eot_samples`` draws (APGD sets its
    own step). Judged on the S = ``ensemble_size`` ensemble, worst case over R = ``repeats`` (10, DiffHammer's
    Wor.Rob@10, as every preset judges). Rows run on the first ``n_examples`` / ``n_bpda`` / ``n_full`` test images
    (``None``: all). Each block's seeds come from ``seed`` by ``seed_scheme``: ``"apart"`` (the attack's, the noise's
    and the judgements' derived apart from the snapshot, the row and the block's first image), or ``"reproduce"``, the
    scheme of the folders measured before it; None: the folder's own, ``"apart"`` for a new one.
    """

    hidden: tuple[int, ...] = (512, 512)
    clf_epochs: int = 20
    clf_batch_size: int = 64
    clf_lr: float = 1e-3
    ngf: int = 16
    sigma_begin: float = 1.0
    sigma_end: float = 0.01
    num_sigmas: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    lr_warmup: int = 0
    precision: str = "fp32"
    ema_decay: float = 0.999
    budgets: tuple[int, ...] = (2000, 8000)
    curve_milestones: tuple[int, ...] = (250, 500, 1000, 2000, 4000, 8000)
    checkpoint_every: int = 100
    sigma: float = 0.25
    steps: int = 10
    ensemble_size: int = 10
    repeats: int = 10
    eps: float = 0.3
    eps_step: float = 0.01
    max_iter: int = 40
    bpda_max_iter: int = 40
    eot_samples: int = 15
    attack_eps_step: float = 0.01
    full_attack: str = registry.FULL_ATTACK
    full_max_iter: int = 40
    full_eot_samples: int = 15
    n_examples: int | None = None
    n_bpda: int | None = 100
    n_full: int | None = 20
    n_curve: int = 200
    chunk_size: int = 50
    seed: int = 0
    seed_scheme: str | None = None

    def check(self) -> None:
        if self.seed_scheme is not None:
            check_scheme(self.seed_scheme, REPRODUCE_SCHEMES)
        if not self.budgets or any(int(b) != b or b < 1 for b in self.budgets):
            raise ValueError(f"budgets must be positive iteration counts, got {self.budgets}.")
        if self.full_attack not in registry.names(full=True):
            raise ValueError(
                f"full_attack must be a full-gradient attack, one of {registry.names(full=True)}, got "
                f"{self.full_attack!r}."
            )
        for name in ("n_examples", "n_bpda", "n_full"):
            value = getattr(self, name)
            if value is not None and (int(value) != value or value < 0):
                raise ValueError(f"{name} must be None or an integer >= 0, got {value!r}.")
        for name in (
            "ensemble_size",
            "repeats",
            "max_iter",
            "bpda_max_iter",
            "eot_samples",
            "full_max_iter",
            "full_eot_samples",
            "chunk_size",
            "n_curve",
        ):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}.")

    @property
    def milestones(self) -> list[int]:
        return sorted({int(m) for m in (*self.curve_milestones, *self.budgets)})

    def rows(self) -> dict[str, dict]:
        """Row name → its attack budget and the number of test images it runs on."""
        return {
            "clean": {"n": self.n_examples},
            registry.BLIND_ATTACK: {"n": self.n_examples, "max_iter": self.max_iter, "eps_step": self.eps_step},
            registry.SWEEP_ATTACK: {
                "n": self.n_bpda,
                "max_iter": self.bpda_max_iter,
                "eps_step": self.attack_eps_step,
                "eot_samples": self.eot_samples,
            },
            self.full_attack: {
                "n": self.n_full,
                "max_iter": self.full_max_iter,
                "eps_step": self.attack_eps_step,
                "eot_samples": self.full_eot_samples,
            },
        }


#: The recipe of docs/mnist_results.md, the plan ``reproduce mnist`` runs.
MNIST_PLAN = register("reproduce:mnist", Plan(
    "reproduce", "the paper's MNIST row (docs/mnist_results.md): an MLP and an NCSNv2 trained here, its learning "
    "curve, Clf-PGD and the adaptive attacks, the paper beside", MnistRecipe()))  # fmt: skip
