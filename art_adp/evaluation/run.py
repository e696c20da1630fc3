"""The evaluation harness: attacks × examples, judged on the S-run ensemble repeated R times, with per-example
records, resume, torchrun sharding, sweeps and the sanity report.

Work is cut into units (setting, attack, chunk of examples). Every random draw of a unit -- purification noise
while attacking and while judging, SPSA's directions -- comes from seeds derived from (seed, setting, attack,
chunk, repeat) alone, so a unit gives the same records whichever process runs it, in any order, and an
interrupted evaluation redoes only the units without records.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

from .. import attacks as A
from ..attacks._core import bare_logits, defended_logits, purifiers
from ..eot import EOTClassifier
from ..preprocessor import ADPPurifier
from . import distributed, report, sanity
from .records import append_records, load_records

__all__ = ["ATTACKS", "DIGITS", "EvalConfig", "evaluate"]

ATTACKS = ("clf-pgd", "bpda-eot", "joint-score", "joint-full", "spsa", "full-pgd-eot", "apgd-eot")
GRADIENT_ATTACKS = ("full-pgd-eot", "apgd-eot", "bpda-eot")  # sanity checks use the first one evaluated


@dataclass(frozen=True)
class EvalConfig:
    """
    What to run. Defaults: the paper's CIFAR-10 protocol (Table 3: ℓ∞ ε = 8/255, α = 2/255, 40 iterations, 15 EOT
    samples, SPSA with 1,280 samples per step; ensemble of S = 10) and Croce et al.'s APGD (100 iterations, 200
    EOT samples). :data:`DIGITS` is the reduced budget of ``art-adp evaluate --dataset digits``.

    :param attacks: Names from :data:`ATTACKS`; the clean row is always evaluated.
    :param eps_step: Step α; None: ε/4 (the paper's 2/255 at 8/255).
    :param runs: S, purifications averaged per judged prediction.
    :param repeats: R, independent judgements of every example (mean and worst case are reported).
    :param chunk_size: Examples per unit of work (the resume and sharding granularity).
    :param batch_size: Images per forward pass (examples × EOT copies).
    :param sanity_examples: Examples (the first ones, whole chunks) the sanity attacks run on.
    :param sigma_sweep: σ values for the Table-5 sweep (clean, Clf-PGD, BPDA+EOT at each).
    :param eot_sweep: EOT sample counts for the Table-6 sweep (BPDA+EOT at each).
    :param note: A line printed under the table (e.g. which counts were reduced).
    """

    attacks: tuple[str, ...] = ATTACKS
    norm: float = math.inf
    eps: float = 8 / 255
    eps_step: float | None = None
    iterations: int = 40
    eot: int = 15
    eot_aggregate: str = "mean"
    joint_weight: float = 0.5
    spsa_iterations: int = 40
    spsa_samples: int = 1280
    apgd_iterations: int = 100
    apgd_eot: int = 200
    runs: int = 10
    repeats: int = 3
    seed: int = 0
    chunk_size: int = 64
    batch_size: int = 4096
    sanity: bool = True
    sanity_examples: int = 64
    sigma_sweep: tuple[float, ...] = ()
    eot_sweep: tuple[int, ...] = ()
    note: str = ""

    @property
    def step(self) -> float:
        return self.eps / 4 if self.eps_step is None else self.eps_step

    def check(self) -> None:
        unknown = [a for a in self.attacks if a not in ATTACKS]
        if unknown:
            raise ValueError(f"Unknown attack(s) {unknown}; choose from {ATTACKS}.")
        if self.norm not in (math.inf, 2):
            raise ValueError(f"norm must be inf or 2, got {self.norm!r}.")
        for name in ("iterations", "eot", "spsa_iterations", "spsa_samples", "apgd_iterations", "apgd_eot", "runs",
                     "repeats", "chunk_size", "batch_size", "sanity_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}.")
        if self.norm == 2 and "spsa" in self.attacks:
            raise ValueError("SPSA (torchattacks) is an l_inf attack; leave 'spsa' out of the attacks for norm 2.")
        if self.eot_aggregate not in ("mean", "sign"):
            raise ValueError(f"eot_aggregate must be 'mean' or 'sign', got {self.eot_aggregate!r}.")


PAPER = EvalConfig()
DIGITS = EvalConfig(
    eps=0.175, eps_step=2.5 * 0.175 / 4, iterations=4, eot=2, spsa_iterations=1, spsa_samples=4, apgd_iterations=2,
    apgd_eot=1, runs=2, repeats=2, chunk_size=120, sanity_examples=120,
    note="Counts reduced for digits so that every attack runs on all 360 test digits within 10 minutes on 2 CPU "
         "cores: 4 iterations of 2.5 eps/4, EOT 2, SPSA 1 step of 4 samples, APGD 2 iterations per loss with EOT 1, "
         "judged with S = 2 (the demo's defence averages 10); the paper: 40 iterations of eps/4, EOT 15, SPSA "
         "1,280 samples per step, S = 10; Croce et al.: APGD 100 iterations, EOT 200.",
)


@dataclass(frozen=True)
class Setting:
    name: str
    attacks: tuple[str, ...]
    overrides: dict = field(default_factory=dict)  # EvalConfig fields, or "sigma" for the purifiers
    subset: bool = False  # only the sanity examples


def plan(c: EvalConfig) -> list[Setting]:
    """The settings an evaluation runs: the main table, the sanity attacks, the sweeps."""
    settings = [Setting("main", ("clean", *c.attacks))]
    white = next((a for a in GRADIENT_ATTACKS if a in c.attacks), None)
    if c.sanity and white is not None:
        settings += [
            Setting("sanity:eps=1", (white,), {"eps": 1.0, "eps_step": c.step / c.eps}, True),
            Setting("sanity:eps/2", (white,), {"eps": c.eps / 2, "eps_step": c.step / 2}, True),
            Setting("sanity:iterations/2", (white,), {"iterations": max(1, c.iterations // 2),
                                                      "apgd_iterations": max(1, c.apgd_iterations // 2)}, True),
        ]
    settings += [Setting(f"sigma={s:g}", ("clean", "clf-pgd", "bpda-eot"), {"sigma": float(s)}) for s in c.sigma_sweep]
    settings += [Setting(f"eot={k}", ("bpda-eot",), {"eot": int(k)}) for k in c.eot_sweep]
    return settings


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def build_attack(name: str, estimator: PyTorchClassifier, c: EvalConfig, seed: int):
    """The attack ``name`` of :data:`ATTACKS` with the budget of ``c``."""
    common = dict(norm=c.norm, eps=c.eps, eps_step=c.step, batch_size=c.batch_size)
    if name == "clf-pgd":
        return A.ClassifierPGD(estimator, max_iter=c.iterations, **common)
    if name == "bpda-eot":
        return A.BPDAEOT(estimator, max_iter=c.iterations, eot_samples=c.eot, aggregate=c.eot_aggregate, **common)
    if name == "joint-score":
        return A.JointScore(estimator, max_iter=c.iterations, eot_samples=c.eot, weight=c.joint_weight, **common)
    if name == "joint-full":
        return A.JointFull(estimator, max_iter=c.iterations, eot_samples=c.eot, weight=c.joint_weight, **common)
    if name == "full-pgd-eot":
        return A.FullGradientPGDEOT(estimator, max_iter=c.iterations, eot_samples=c.eot, aggregate=c.eot_aggregate,
                                    **common)
    if name == "apgd-eot":
        return A.APGDEOT(estimator, norm=c.norm, eps=c.eps, max_iter=c.apgd_iterations, eot_samples=c.apgd_eot,
                         batch_size=c.batch_size, seed=seed)
    if name == "spsa":
        return A.SPSA(estimator, eps=c.eps, eps_step=c.step, max_iter=c.spsa_iterations, nb_sample=c.spsa_samples,
                      batch_size=c.batch_size, seed=seed)
    raise ValueError(f"Unknown attack {name!r}; choose from {ATTACKS}.")


def _reseed(estimator: PyTorchClassifier, seed: int) -> None:
    for p in purifiers(estimator):
        p.set_params(generator=torch.Generator(p.device).manual_seed(seed))


def _run_unit(estimator, setting: Setting, attack: str, idx: np.ndarray, x: np.ndarray, y: np.ndarray,
              c: EvalConfig) -> list[dict]:
    cs = replace(c, **{k: v for k, v in setting.overrides.items() if k != "sigma"})
    seed = _seed(c.seed, setting.name, attack, int(idx[0]))
    _reseed(estimator, seed)
    xb, yb = x[idx], y[idx]
    x_adv = xb if attack == "clean" else build_attack(attack, estimator, cs, seed).generate(xb, y=yb)
    device = estimator.device
    xt = torch.as_tensor(x_adv, dtype=torch.float32, device=device)
    preds, ensemble = [], EOTClassifier(estimator, nb_samples=c.runs, batch_size=c.batch_size)
    for r in range(c.repeats):
        _reseed(estimator, _seed(c.seed, "judge", setting.name, attack, int(idx[0]), r))
        preds.append(ensemble.predict(xt).argmax(1))
    with torch.no_grad():
        bare = bare_logits(estimator, xt).argmax(1).cpu().numpy()
    delta = (x_adv - xb).reshape(len(idx), -1)
    return [{"setting": setting.name, "attack": attack, "index": int(i), "label": int(yb[j]),
             "pred": [int(p[j]) for p in preds], "undefended_pred": int(bare[j]),
             "linf": round(float(np.abs(delta[j]).max()), 6), "l2": round(float(np.linalg.norm(delta[j])), 6)}
            for j, i in enumerate(idx)]


def evaluate(classifier: torch.nn.Module, defences: ADPPurifier | Sequence[PreprocessorPyTorch], x: np.ndarray,
             y: np.ndarray, *, config: EvalConfig = PAPER, run_dir: str = "runs/evaluate", nb_classes: int | None = None,
             clip_values: tuple[float, float] = (0.0, 1.0), description: dict | None = None, progress: bool = True,
             device: str | None = None, log: Callable[[str], None] = print) -> dict | None:
    """
    Attack ``classifier`` defended by ``defences`` with every attack of ``config`` and judge each adversarial
    example on the S-run ensemble, R times; write per-example records as they finish, then the markdown table
    (paper Table 3 shape, with the sanity report), the JSON report and plots.

    | Paper link: https://arxiv.org/abs/2106.06041 (Tables 3, 5, 6); Croce et al. 2022,
      https://arxiv.org/abs/2202.13711; Carlini et al. 2019, https://arxiv.org/abs/1902.06705 (sanity checks)

    Under ``torchrun --nproc_per_node=N`` the units are shared round-robin between the processes (one GPU each
    when present, gloo on CPU); rank 0 merges the records and writes the report, which equals a one-process run's.
    Re-running with the same ``run_dir`` and settings resumes: units with records are skipped.

    :param classifier: ``N×C×H×W`` → ``N×K`` logits.
    :param defences: An :class:`~art_adp.ADPPurifier` or a list of ART PyTorch preprocessors (e.g. a toy
        defence to test the sanity checks).
    :param x: Test inputs ``N×C×H×W`` in ``clip_values``.
    :param y: Labels, ``N`` indices.
    :param config: Attacks, budgets, S, R, sweeps (:class:`EvalConfig`).
    :param run_dir: Output folder: ``records/rank-*.jsonl``, ``report.md``, ``report.json``, ``*.png``.
    :param nb_classes: K (default: the classifier's output width).
    :param description: Extra header lines for the report (data, models, defence).
    :param progress: tqdm bars per attack.
    :param device: ``"cpu"`` or ``"cuda"`` (default: CUDA when available, one per torchrun process).
    :param log: Where report lines go.
    :return: The report (rank 0), else None.
    """
    from tqdm.auto import tqdm

    config.check()
    rank, world = distributed.setup()
    dev = distributed.device_for_rank(device)
    defences = [defences] if isinstance(defences, PreprocessorPyTorch) else list(defences)
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"x must be N×C×H×W and y N labels, got shapes {x.shape} and {y.shape}.")
    classifier = classifier.to(dev).eval()
    if nb_classes is None:
        with torch.no_grad():
            nb_classes = int(classifier(torch.as_tensor(x[:1], device=dev)).shape[-1])
    estimator = PyTorchClassifier(classifier, torch.nn.CrossEntropyLoss(), input_shape=x.shape[1:],
                                  nb_classes=nb_classes, clip_values=clip_values, preprocessing_defences=defences,
                                  device_type="gpu" if dev.type == "cuda" else "cpu")
    run_dir = Path(run_dir)
    records_dir = run_dir / "records"
    done = load_records(sorted(records_dir.glob("*.jsonl")))
    mine = records_dir / f"rank-{rank}.jsonl"
    chunks = [np.arange(s, min(s + config.chunk_size, len(x))) for s in range(0, len(x), config.chunk_size)]
    sanity_chunks = [ch for ch in chunks if ch[0] < config.sanity_examples]
    settings = plan(config)
    units = [(s, a, ch) for s in settings for a in s.attacks for ch in (sanity_chunks if s.subset else chunks)]
    seconds: dict[str, float] = {}
    saved = [(p, p.sigma, p.generator) for p in purifiers(estimator)]
    try:
        for s in settings:
            for p, sigma, _ in saved:
                p.set_params(sigma=s.overrides.get("sigma", sigma))
            for a in s.attacks:
                todo = [ch for (su, au, ch) in distributed.shard(units, rank, world) if su is s and au == a
                        and not all((s.name, a, int(i)) in done for i in ch)]
                start = time.perf_counter()
                for ch in tqdm(todo, desc=f"{s.name}: {a}", disable=not progress or not todo, unit="chunk"):
                    append_records(mine, _run_unit(estimator, s, a, ch, x, y, config))
                seconds[f"{s.name}/{a}"] = time.perf_counter() - start
    finally:
        for p, sigma, generator in saved:
            p.set_params(sigma=sigma, generator=generator)
    distributed.barrier()
    if rank != 0:
        distributed.finish()
        return None
    records = load_records(sorted(records_dir.glob("*.jsonl")))
    expected = {(s.name, a, int(i)) for (s, a, ch) in units for i in ch}
    missing = expected - set(records)
    if missing:
        raise RuntimeError(f"{len(missing)} records missing after the evaluation (e.g. {sorted(missing)[:3]}).")
    result = report.build(records, config, plan(config), description=description or {}, seconds=seconds,
                          world_size=world)
    report.write(result, run_dir, log=log)
    distributed.finish()
    return result
