"""The paper's MNIST row measured lever by lever: which of score quality, schedule, noise level and attack decides
ADP's accuracy on real digits.

Two score models are measured side by side on the same digits, attacks and judging:

- ``oracle``: :class:`~art_adp.KernelScore` over the training split -- the exact optimum of denoising score matching
  on those images, at the level h is taken at: what a *perfectly trained* score model would do;
- ``denoiser``: a :class:`~art_adp.DenoiserUNet` trained with ``art-adp train-denoiser``, through
  :class:`~art_adp.EDMScore` at the same level.

Each *setting* is a purification: ADP (σ, T, λ, τ; the score taken at level σ) or the one-step denoise
x̂ = clip(x₀ + σ·h_σ(x₀)) -- Tweedie's estimate, ADP with one step of fixed size σ. Each is judged on the S-run
ensemble (mean softmax of S purifications) under: clean inputs; Clf-PGD, PGD on the bare classifier blind to the
purifier (the paper's MNIST attack), at ε 0.3 as 40 × 0.01 without random start and as 100 × 0.025 with one; the
same attack at ε 0.3/256 (the radius the authors' released attack code passes to foolbox, ``ptb/256``); and, on
fewer digits, BPDA+EOT and full-gradient PGD+EOT through the purification, judged worst of R.

Beside them: the undefended classifier (the paper's MLP, 2 × 512 ReLU) and the adversarial-training baseline (ART's
``AdversarialTrainer``, PGD ε 0.3), each under white-box PGD. Records go to ``RUN_DIR/records.jsonl`` one per
(setting, attack, digit), so a run resumes and more digits can be added later; ``table.json`` and ``table.md``
hold the accuracies with Wilson intervals and the provenance.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..attacks.registry import BLIND_ATTACK, FULL_ATTACK, SWEEP_ATTACK
from ..runs.provenance import provenance
from ..runs.records import append_records, read_jsonl
from ..runs.seeds import derive_seed
from .evaluation.report import wilson

__all__ = [
    "ATTACK_ROWS",
    "LeversConfig",
    "ROWS",
    "Row",
    "SETTINGS",
    "Setting",
    "levers_command",
    "render_levers",
    "run_levers",
]


@dataclass(frozen=True)
class Setting:
    """One purification: ADP at (σ, T, λ, τ), or the one-step denoise at σ when ``one_step``."""

    name: str
    sigma: float = 0.25
    steps: int = 10
    lam: float = 0.05
    tau: float = 1e-3
    one_step: bool = False

    def purifier_kwargs(self) -> dict:
        if self.one_step:  # x₁ = clip(x₀ + σ·h_σ(x₀)): one step of fixed size σ, never stopped
            return {"sigma": self.sigma, "steps": 1, "step_size": self.sigma, "tau": 0.0}
        return {"sigma": self.sigma, "steps": self.steps, "lam": self.lam, "tau": self.tau}


#: The levers: the released schedule, converged schedules (a T × λ grid, τ off), the one-step denoise, σ.
SETTINGS: tuple[Setting, ...] = (
    Setting("released (T 10, λ 0.05)"),
    Setting("T 10, λ 0.2", lam=0.2),
    Setting("T 10, λ 0.5", lam=0.5),
    Setting("T 30, λ 0.05", steps=30),
    Setting("T 30, λ 0.5, τ 0", steps=30, lam=0.5, tau=0.0),
    Setting("one-step denoise", one_step=True),
    Setting("σ 0.1, T 10, λ 0.5", sigma=0.1, lam=0.5),
    Setting("σ 0.5, T 10, λ 0.5", sigma=0.5, lam=0.5),
    Setting("σ 0.1, one-step", sigma=0.1, one_step=True),
    Setting("σ 0.5, one-step", sigma=0.5, one_step=True),
)

EPS = 0.3


@dataclass(frozen=True)
class Row:
    """One attack row: ``max_iter`` steps of ``eps_step`` in the ℓ∞ ball of ``eps`` (``max_iter`` 0: clean inputs);
    an ``adaptive`` row is the registry's attack of that name through the purification (EOT, worst of R), the others
    are PGD on the bare classifier (Clf-PGD)."""

    name: str
    eps: float = EPS
    eps_step: float = 0.01
    max_iter: int = 40
    random_start: bool = False
    adaptive: bool = False


#: The rows: clean; Clf-PGD at ε 0.3 as 40 × 0.01 and as 100 × 0.025 with a random start; Clf-PGD at ε 0.3/256
#: (the radius the authors' attack code passes to foolbox); BPDA+EOT and full-gradient PGD+EOT (registry attacks).
ROWS: tuple[Row, ...] = (
    Row("clean", max_iter=0),
    Row(BLIND_ATTACK),
    Row("clf-pgd-strong", eps_step=0.025, max_iter=100, random_start=True),
    Row("clf-pgd-eps/256", eps=EPS / 256, eps_step=EPS / 256 / 4),
    Row(SWEEP_ATTACK, adaptive=True),
    Row(FULL_ATTACK, adaptive=True),
)
ATTACK_ROWS = {row.name: row for row in ROWS}


def _estimator(model, purifier=None, device: str = "cpu"):
    from art.estimators.classification import PyTorchClassifier

    return PyTorchClassifier(
        model, torch.nn.CrossEntropyLoss(), input_shape=(1, 28, 28), nb_classes=10, clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier] if purifier is not None else None,
        device_type="gpu" if device == "cuda" else "cpu",
    )  # fmt: skip


def _pgd(model, x, y, row: str, seed: int, device: str = "cpu") -> np.ndarray:
    """White-box PGD on ``model`` itself (for a defended one: Clf-PGD against its bare classifier)."""
    from art.attacks.evasion import ProjectedGradientDescent

    r = ATTACK_ROWS[row]
    np.random.seed(derive_seed(seed, "pgd", row) % 2**32)  # ART draws its random start from NumPy's global RNG
    attack = ProjectedGradientDescent(
        _estimator(model, device=device), eps=r.eps, eps_step=r.eps_step, max_iter=r.max_iter,
        num_random_init=int(r.random_start), batch_size=250, verbose=False,
    )  # fmt: skip
    return attack.generate(x, y=y).astype(np.float32)


def _score_model(kind: str, level: float, x_train, denoiser, device: str = "cpu"):
    from ..score import EDMScore, KernelScore

    if kind == "oracle":
        return KernelScore(x_train, bandwidth=level, chunk_size=2000).to(device)
    return EDMScore(denoiser, sigma=level, data_range=(0.0, 1.0))


def _classifiers(data, run_dir: Path, seed: int, progress: bool):
    """The paper's MLP and its adversarially trained twin, trained once on the training split and kept."""
    from ..models import MLP, load_classifier, save_classifier, train_adversarial_classifier, train_classifier

    out = {}
    for name in ("mlp", "adv-mlp"):
        path = run_dir / f"{name}.safetensors"
        if path.exists():
            out[name] = load_classifier(path).eval()
            continue
        torch.manual_seed(seed)
        model = MLP(1, 28, 10, hidden=(512, 512))
        if name == "mlp":
            train_classifier(model, data.x_train, data.y_train, epochs=20, batch_size=64, lr=1e-3, seed=seed,
                             progress=progress)  # fmt: skip
        else:
            train_adversarial_classifier(model, data.x_train, data.y_train, eps=EPS, max_iter=10, epochs=20,
                                         seed=seed, verbose=progress)  # fmt: skip
        save_classifier(model, path)
        out[name] = model.eval()
    return out


def _judge(classifier, purifier, x, y, *, ensemble_size: int, repeats: int, seed: int, device: str) -> np.ndarray:
    """Correct on the S-run ensemble (mean softmax), every one of ``repeats`` fresh draws (worst of R)."""
    from ..eot import EOTClassifier

    ensemble = EOTClassifier(_estimator(classifier, purifier, device), ensemble_size=ensemble_size, batch_size=500)
    ok = np.ones(len(x), dtype=bool)
    for r in range(repeats):
        purifier.generator.manual_seed(derive_seed(seed, "judge", r))
        ok &= ensemble.predict(x).argmax(1) == y
    return ok


def _adaptive(classifier, purifier, x, y, row: str, *, eot_samples: int, seed: int, device: str) -> np.ndarray:
    from ..attacks.registry import REGISTRY, Budget

    r = ATTACK_ROWS[row]
    purifier.generator.manual_seed(derive_seed(seed, "attack", row))
    budget = Budget(eps=r.eps, eps_step=r.eps_step, max_iter=r.max_iter, eot_samples=eot_samples, batch_size=50)
    estimator = _estimator(classifier, purifier, device)
    return REGISTRY[row].build(estimator, budget, seed).generate(x, y=y).astype(np.float32)


def run_levers(
    data,
    run_dir: str | Path,
    *,
    models: Sequence[str] = ("oracle", "denoiser"),
    denoiser_path: str | Path | None = None,
    settings: Sequence[str] | None = None,
    attacks: Sequence[str] = ("clean", BLIND_ATTACK, "clf-pgd-strong"),
    n_examples: int = 1000,
    ensemble_size: int = 10,
    repeats: int = 1,
    eot_samples: int = 5,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """
    Measure ``attacks`` × ``settings`` × ``models`` on the first ``n_examples`` test digits; resumes from
    ``RUN_DIR/records.jsonl`` (digits already measured are skipped), then writes ``table.json`` / ``table.md``.

    :param data: A :class:`~art_adp.data.Dataset` of 28×28 digits (MNIST).
    :param run_dir: The run folder (classifiers, adversarial examples, records, table).
    :param models: ``"oracle"`` and/or ``"denoiser"``.
    :param denoiser_path: The :class:`~art_adp.DenoiserUNet` checkpoint (for ``"denoiser"``).
    :param settings: Names from :data:`SETTINGS` (default: all).
    :param attacks: Rows from :data:`ATTACK_ROWS`; the adaptive ones (BPDA+EOT, full-gradient PGD+EOT) attack
        through the purification with ``eot_samples`` draws per gradient.
    :param n_examples: Test digits (the first ones of the test split).
    :param ensemble_size: S, purifications averaged per prediction (the paper's 10).
    :param repeats: R: a digit counts as correct only if all R judgements (fresh noise) are.
    :param eot_samples: EOT draws per gradient of the adaptive attacks.
    :param seed: Seed of every draw (ART's PGD random starts, purification noise, training).
    :param device: Where the networks run (``"cpu"`` or ``"cuda"``).
    :param progress: Print one line per measured cell.
    """
    from ..preprocessor import ADPPurifier
    from ..score import load_score_model

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    unknown = set(attacks) - set(ATTACK_ROWS)
    if unknown:
        raise ValueError(f"Unknown attack rows {sorted(unknown)}; choose from {list(ATTACK_ROWS)}.")
    chosen = [s for s in SETTINGS if settings is None or s.name in settings]
    if settings is not None and len(chosen) != len(set(settings)):
        raise ValueError(f"Unknown settings {sorted(set(settings) - {s.name for s in SETTINGS})}; see SETTINGS.")
    if "denoiser" in models and denoiser_path is None:
        raise ValueError("models includes 'denoiser': give denoiser_path (a train-denoiser checkpoint).")
    denoiser = load_score_model(denoiser_path, device) if denoiser_path is not None else None
    kind = "gpu" if device == "cuda" else "cpu"  # ART's device_type
    x, y = data.x_test[:n_examples], data.y_test[:n_examples]
    clfs = {k: m.to(device) for k, m in _classifiers(data, run_dir, seed, progress).items()}
    path = run_dir / "records.jsonl"
    done = {(r["model"], r["setting"], r["attack"], r["index"]) for r in read_jsonl(path)}
    judged = {"ensemble_size": ensemble_size, "eot_samples": eot_samples}

    def record(model, setting, attack, idx, ok, extra=None):
        rows = [
            {"model": model, "setting": setting, "attack": attack, "index": int(i), "correct": bool(c),
             **judged, **(extra or {})}
            for i, c in zip(idx, ok)
        ]  # fmt: skip
        append_records(path, rows)
        if progress:
            print(f"{model:>9} | {setting:<24} | {attack:<15} | {np.mean(ok):6.1%} of {len(ok)}", flush=True)

    clf_rows = [a for a in attacks if not ATTACK_ROWS[a].adaptive and a != "clean"]
    for name, clf in clfs.items():  # the undefended classifiers under white-box PGD
        for attack in ["clean", *clf_rows]:
            todo = [i for i in range(len(x)) if ("none", name, attack, i) not in done]
            if todo:
                xa = x[todo] if attack == "clean" else _pgd(clf, x[todo], y[todo], attack, seed, device)
                with torch.no_grad():
                    ok = clf(torch.as_tensor(xa, device=device)).argmax(1).cpu().numpy() == y[todo]
                record("none", name, attack, todo, ok)
    adv = {}
    for attack in clf_rows:  # Clf-PGD examples against the MLP, made once, shared by every defence
        cache = run_dir / f"{attack.replace('/', '_')}.npy"
        held = np.load(cache) if cache.exists() else x[:0]
        if len(held) < len(x):  # more digits than last time: attack the new ones only
            held = np.concatenate([held, _pgd(clfs["mlp"], x[len(held) :], y[len(held) :], attack, seed, device)])
            np.save(cache, held)
        adv[attack] = held[: len(x)]
    for model in models:
        for s in chosen:
            score = _score_model(model, s.sigma, data.x_train, denoiser, device)
            gen = torch.Generator(device).manual_seed(seed)
            purifier = ADPPurifier(score, gradient="bpda", batch_size=500, generator=gen, device_type=kind,
                                   **s.purifier_kwargs())  # fmt: skip
            for attack in attacks:
                todo = [i for i in range(len(x)) if (model, s.name, attack, i) not in done]
                if not todo:
                    continue
                if ATTACK_ROWS[attack].adaptive:
                    purifier.set_params(gradient="full" if attack == FULL_ATTACK else "bpda")
                    xa = _adaptive(clfs["mlp"], purifier, x[todo], y[todo], attack, eot_samples=eot_samples, seed=seed,
                                   device=device)  # fmt: skip
                    purifier.set_params(gradient="bpda")
                    r = repeats
                else:
                    xa, r = (x[todo] if attack == "clean" else adv[attack][todo]), 1
                ok = _judge(clfs["mlp"], purifier, xa, y[todo], ensemble_size=ensemble_size, repeats=r, seed=seed,
                            device=device)  # fmt: skip
                record(model, s.name, attack, todo, ok, {"repeats": r, "purifier": asdict(s)})
    table = render_levers(read_jsonl(path))
    table["provenance"] = provenance(
        wall_time_s=time.monotonic() - started, device="cpu",
        models={"denoiser": denoiser_path, **{k: run_dir / f"{k}.safetensors" for k in clfs}}
        if denoiser_path else {k: run_dir / f"{k}.safetensors" for k in clfs},
    )  # fmt: skip
    (run_dir / "table.json").write_text(json.dumps(table, indent=1))
    (run_dir / "table.md").write_text(table_markdown(table))
    return table


def render_levers(records: list[dict]) -> dict:
    """Accuracy, n and the Wilson interval per (model, setting, attack) from the records."""
    cells: dict[tuple, list[bool]] = {}
    meta: dict[tuple, dict] = {}
    for r in records:
        key = (r["model"], r["setting"], r["attack"])
        cells.setdefault(key, []).append(bool(r["correct"]))
        meta[key] = {k: r[k] for k in ("ensemble_size", "eot_samples", "repeats") if k in r}
    rows = []
    for (model, setting, attack), ok in cells.items():
        p = float(np.mean(ok))
        lo, hi = wilson(p, len(ok))
        rows.append({"model": model, "setting": setting, "attack": attack, "accuracy": p, "n": len(ok),
                     "ci95": [lo, hi], **meta[(model, setting, attack)]})  # fmt: skip
    return {"cells": rows}


def table_markdown(table: dict) -> str:
    """One line per (model, setting), one column per attack: accuracy % (n) [95 % interval]."""
    attacks = [a for a in ATTACK_ROWS if any(c["attack"] == a for c in table["cells"])]
    lines = ["| score model | setting | " + " | ".join(attacks) + " |", "|---|---|" + "---|" * len(attacks)]
    groups: dict[tuple, dict] = {}
    for c in table["cells"]:
        groups.setdefault((c["model"], c["setting"]), {})[c["attack"]] = c
    for (model, setting), by in groups.items():
        cells = []
        for a in attacks:
            c = by.get(a)
            cells.append(
                ""
                if c is None
                else f"{100 * c['accuracy']:.1f} ({c['n']}) [{100 * c['ci95'][0]:.0f}–{100 * c['ci95'][1]:.0f}]"
            )
        lines.append(f"| {model} | {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LeversConfig:
    """Settings of ``art-adp levers`` (see :func:`run_levers` for each)."""

    models: tuple[str, ...] = ("oracle", "denoiser")
    settings: tuple[str, ...] | None = None
    attacks: tuple[str, ...] = ("clean", BLIND_ATTACK, "clf-pgd-strong")
    n_examples: int = 1000
    ensemble_size: int = 10
    repeats: int = 1
    eot_samples: int = 5
    seed: int = 0


def levers_command(
    config: LeversConfig,
    *,
    data_root: str = "",
    denoiser: str | None = None,
    run_dir: str = "runs/levers",
    device: str | None = None,
    progress: bool = True,
) -> None:
    """The paper's MNIST row lever by lever: ADP with the exact-score oracle (KernelScore over the training split)
    and a trained DenoiserUNet (--denoiser, from train-denoiser), at the released schedule, converged schedules, the
    one-step denoise and three noise levels, under Clf-PGD (two strengths and the authors' eps/256 scaling) and
    adaptive attacks, beside the undefended MLP and the adversarial-training baseline; resumable, and more digits
    can be added later. See docs/mnist.md."""
    from ..data import load_mnist

    table = run_levers(load_mnist(data_root), run_dir, denoiser_path=denoiser, **asdict(config), device=device or "cpu",
                       progress=progress)  # fmt: skip
    print(table_markdown(table))
