"""The certification run (``art-adp certify``): :func:`~art_adp.certification.certify` and
:func:`~art_adp.certification.certify_approximate` over a test set at several σ, one JSON line per input (resumable, the
settings guarded), then the certified-accuracy table and curves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..certification import Certificate, _check, approximate_radius, certified_accuracy, certify, certify_approximate
from ..purification import DEFAULTS
from ..runs.records import append_records, file_sha256, guard_settings, read_jsonl, settings_path, write_json
from ..runs.seeds import derive_seed
from ..runs.render import accuracy_cell, markdown_table
from .plots import certified_accuracy_curve

__all__ = ["CertifyConfig", "certify_command", "run_certify"]


@dataclass(frozen=True)
class CertifyConfig:
    """
    Settings of a certification run (``art-adp certify``; defaults: the command line's).

    :param sigmas: Smoothing noise levels σ, one table row pair each.
    :param n0: CERTIFY's selection samples per input; ``n``: its estimation samples; ``alpha``: failure probability.
    :param n_approximate: Samples of the paper's approximate variant (= ``n0``: reuses the selection draws).
    :param n_examples: The first N test inputs certified.
    :param radii: Radii of the certified-accuracy table.
    :param steps: ADP purification steps T of the smoothed classifier.
    :param batch_size: Noisy samples per forward pass.
    :param seed: Input i draws its noise from ``derive_seed(seed, i)``.
    """

    sigmas: tuple[float, ...] = (0.12, 0.25, 0.5)
    n0: int = 100
    n: int = 1000
    alpha: float = 0.001
    n_approximate: int = 100
    n_examples: int = 100
    radii: tuple[float, ...] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
    steps: int = DEFAULTS.steps
    batch_size: int = 1000
    seed: int = 0


def certify_command(
    config: CertifyConfig,
    *,
    score: str,
    classifier: str,
    weights: str | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    score_config: str | None = None,
    dataset: str = "digits",
    data_root: str | None = None,
    run_dir: str = "runs/certify",
    device: str | None = None,
    progress: bool = True,
) -> dict:
    """``art-adp certify``: load the models (:mod:`~art_adp.apps.loading`: ``weights``, ``mean``, ``std``,
    ``score_config`` as for ``evaluate``) and the first ``config.n_examples`` test inputs, certify the ADP-smoothed
    classifier (:func:`run_certify`; the score at each smoothing σ, :func:`~art_adp.score.diffusion.score_at`) and
    print the table."""
    from ..certification import adp_base_classifier
    from ..data import load_dataset
    from ..runs.records import module_sha256
    from ..score import score_at
    from .loading import load_classifier_arg, load_score_arg

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    score_model = load_score_arg(score, config=score_config)[0].to(dev)
    model = load_classifier_arg(classifier, weights=weights, mean=mean, std=std)[0].to(dev).eval()
    data = load_dataset(dataset, data_root)
    x, y = torch.from_numpy(data.x_test[: config.n_examples]).to(dev), data.y_test[: config.n_examples]

    def model_for_sigma(sigma):
        return adp_base_classifier(
            model,
            score_at(score_model, sigma),
            steps=config.steps,
            batch_size=config.batch_size,
            channels_last=dev.type == "cpu",
            device_type="gpu" if dev.type == "cuda" else "cpu",
        )

    def sha256(spec: str, module: torch.nn.Module) -> str:  # a file's bytes, else the weights (a factory's, a folder's)
        return file_sha256(spec) if Path(spec).is_file() else module_sha256(module)

    checkpoints = {"score_sha256": sha256(score, score_model), "classifier_sha256": sha256(classifier, model)}
    standardised = {} if mean is None else {"mean": list(mean), "std": list(std or ())}
    settings = {"steps": config.steps, **checkpoints, "dataset": dataset, **standardised}
    results = run_certify(run_dir, model_for_sigma, x, y, config=config, progress=progress, settings=settings)
    print((Path(run_dir) / "certify.md").read_text())
    print(
        f"wrote {run_dir}/certify.md, certify.png, certify.json and per-input records "
        f"({results['n_examples']} inputs, device {dev})"
    )
    return results


def _read_records(path: Path) -> dict[int, dict]:
    """Complete records of a certification JSONL file by input index (a line cut short by an interruption is
    ignored here and cut off before the next append)."""
    return {record["index"]: record for record in read_jsonl(path)}


def run_certify(
    run_dir: str | Path,
    model_for_sigma: Callable[[float], Callable],
    x: torch.Tensor,
    y: np.ndarray,
    *,
    config: CertifyConfig = CertifyConfig(),
    progress: bool = True,
    settings: dict | None = None,
) -> dict:
    """
    Certify every input of ``x`` at each σ (CERTIFY and the approximate variant), writing one JSON line per input
    to ``run_dir/certify_sigma{σ}.jsonl`` as it finishes, so an interrupted run resumes where it stopped (input i
    always draws its noise from a generator seeded by ``derive_seed(seed, i)``); then ``certify.json``,
    ``certify.md`` (the certified-accuracy table) and ``certify.png`` (the curves). ``settings.json`` records
    n₀, n, α, the approximate variant's n and the seed; resuming with other settings raises
    (:func:`~art_adp.runs.records.guard_settings`). When ``n_approximate == n0`` the approximate radius comes from
    CERTIFY's n₀ selection draws (no extra samples; the paper's variant uses 100 draws).

    :param run_dir: Output folder.
    :param model_for_sigma: σ → base classifier (e.g. ``lambda s: adp_base_classifier(clf, score)``).
    :param x: ``N×C×H×W`` inputs; ``y``: their ``N`` labels (all of them are certified).
    :param config: σ values, sample counts, α, radii, batch size, seed.
    :param settings: Further settings that change the certificates (e.g. the checkpoints' SHA-256, the purification
        steps), stored and compared with n₀, n, α, the approximate n and the seed.
    :return: ``{"table": {σ: {"certify": [...], "approximate": [...]}}, "radii": [...], ...}``.
    """
    c = config
    for sigma in c.sigmas:
        _check(lambda z: z, x, sigma, c.n0, c.n, c.alpha, c.batch_size)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    guarded = {"n0": c.n0, "n": c.n, "alpha": c.alpha, "n_approximate": c.n_approximate, "seed": c.seed}
    guard_settings(settings_path(run_dir), {**(settings or {}), **guarded}, what="the certificates")
    y = np.asarray(y)
    table, curves = {}, {}
    for sigma in c.sigmas:
        records = _certify_sigma(run_dir, model_for_sigma(sigma), x, y, sigma, c, progress)
        exact, approx = _certificates([records[i] for i in range(len(x))], sigma)
        grid = np.linspace(0, max(c.radii[-1], 2.6 * max(c.sigmas)), 200)
        curves[f"{sigma:g}"] = {
            "CERTIFY": (grid, certified_accuracy(exact, y, grid)),
            "approximate": (grid, certified_accuracy(approx, y, grid)),
        }
        table[f"{sigma:g}"] = {
            "certify": certified_accuracy(exact, y, c.radii).tolist(),
            "approximate": certified_accuracy(approx, y, c.radii).tolist(),
            "abstained": int(np.sum(exact.prediction == -1)),
        }
    (run_dir / "certify.md").write_text(_markdown(table, c) + "\n")
    certified_accuracy_curve(
        run_dir / "certify.png",
        curves,
        title=f"ADP-smoothed classifier, {len(x)} inputs, n0={c.n0}, n={c.n}, α={c.alpha:g}",
    )
    results = {
        "table": table,
        "radii": list(c.radii),
        "n0": c.n0,
        "n": c.n,
        "alpha": c.alpha,
        "n_approximate": c.n_approximate,
        "n_examples": len(x),
        "seed": c.seed,
    }
    write_json(run_dir / "certify.json", results, indent=2)
    return results


def _certify_sigma(run_dir: Path, model, x, y, sigma: float, c: CertifyConfig, progress: bool) -> dict[int, dict]:
    """Certify the inputs of ``x`` without a record at σ, appending one record each; all records by index."""
    path = run_dir / f"certify_sigma{sigma:g}.jsonl"
    records = _read_records(path)
    todo = [i for i in range(len(x)) if i not in records]
    for i in tqdm(todo, desc=f"certify sigma={sigma:g} ({len(records)} done)", disable=not progress):
        gen = torch.Generator(x.device).manual_seed(derive_seed(c.seed, i))
        exact = certify(
            model, x[i : i + 1], sigma=sigma, n0=c.n0, n=c.n, alpha=c.alpha, batch_size=c.batch_size, generator=gen,
            progress=False,
        )  # fmt: skip
        if c.n_approximate == c.n0 and exact.selection_counts is not None:  # the selection draws double as the
            approx = approximate_radius(exact.selection_counts, sigma)  # paper's approximate estimate
        else:
            approx = certify_approximate(
                model, x[i : i + 1], sigma=sigma, n=c.n_approximate, batch_size=c.batch_size, generator=gen,
                progress=False,
            )  # fmt: skip
        record = {
            "index": i,
            "label": int(y[i]),
            "prediction": int(exact.prediction[0]),
            "radius": float(exact.radius[0]),
            "p_a_lower": float(exact.p_a[0]),
            "approx_prediction": int(approx.prediction[0]),
            "approx_radius": float(approx.radius[0]),
        }
        append_records(path, [record])
        records[i] = record
    return records


def _certificates(rec: list[dict], sigma: float) -> tuple[Certificate, Certificate]:
    """The exact and the approximate certificates of the records ``rec``."""
    exact = Certificate(
        np.array([r["prediction"] for r in rec]),
        np.array([r["radius"] for r in rec]),
        np.array([r["p_a_lower"] for r in rec]),
        np.zeros((len(rec), 0)),
        sigma,
        False,
    )
    approx = Certificate(
        np.array([r["approx_prediction"] for r in rec]),
        np.array([r["approx_radius"] for r in rec]),
        np.zeros(len(rec)),
        np.zeros((len(rec), 0)),
        sigma,
        True,
    )
    return exact, approx


def _markdown(table: dict, c: CertifyConfig) -> str:
    """The certified-accuracy table: two lines per σ (CERTIFY, the approximate variant)."""
    variants = {"certify": f"CERTIFY (n0={c.n0}, n={c.n}, α={c.alpha:g})",
                "approximate": f"approximate (n={c.n_approximate}, not a certificate)"}  # fmt: skip
    rows = [[key, name, *(accuracy_cell(a) for a in row[v])]
            for key, row in table.items() for v, name in variants.items()]  # fmt: skip
    return "\n".join(markdown_table(["σ", "variant", *(f"r = {r:g}" for r in c.radii)], rows))
