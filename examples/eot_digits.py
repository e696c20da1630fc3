"""ADP on digits under ART's PGD through EOTClassifier: BPDA vs full gradients, EOT 1 / 5 / 15 draws.

    art-adp demo                          # trains (or reuses) runs/demo/score.safetensors and classifier.safetensors
    python examples/eot_digits.py         # then this: prints a markdown table, writes runs/eot_digits.json

Every attack is ART's unchanged ``ProjectedGradientDescent`` (l_inf, eps = 0.175, 10 steps of 2.5·eps/10, the
demo's threat model) against ``EOTClassifier(PyTorchClassifier(..., preprocessing_defences=[ADPPurifier(...)]))``
with ``eot_samples`` = EOT draws per gradient; robust accuracy is the ADP ensemble of S = 10 purifications.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from art.attacks.evasion import ProjectedGradientDescent
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, EOTClassifier, load_score_model
from art_adp.data import load_digits
from art_adp.models import load_classifier
from art_adp.runs.provenance import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/demo", help="folder with the demo's two checkpoints")
    parser.add_argument("--n-examples", type=int, default=None, help="first N test digits (default: all 360)")
    parser.add_argument("--eot", type=int, nargs="+", default=[1, 5, 15])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="runs/eot_digits.json")
    args = parser.parse_args()

    device, run_dir = torch.device(args.device), Path(args.run_dir)
    if not (run_dir / "score.safetensors").exists():
        raise SystemExit(f"{run_dir}/score.safetensors not found: run `art-adp demo` first (it trains both models).")
    score = load_score_model(run_dir / "score.safetensors", device)
    classifier = load_classifier(run_dir / "classifier.safetensors", device).eval()
    data = load_digits()
    x, y = data.x_test[: args.n_examples], data.y_test[: args.n_examples]
    device_type = "gpu" if device.type == "cuda" else "cpu"
    art_args = dict(model=classifier, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10,
                    clip_values=(0.0, 1.0), device_type=device_type)
    pgd = dict(eps=0.175, eps_step=2.5 * 0.175 / 10, max_iter=10, batch_size=len(x), verbose=False)
    undefended = PyTorchClassifier(**art_args)

    def accuracy(estimator, images) -> float:
        return float((estimator.predict(images).argmax(1) == y).mean())

    def defence(gradient: str, draws: int, seed: int) -> EOTClassifier:
        purifier = ADPPurifier(score, gradient=gradient, batch_size=4096, device_type=device_type,
                               generator=torch.Generator(device).manual_seed(seed), channels_last=device.type == "cpu")
        return EOTClassifier(PyTorchClassifier(**art_args, preprocessing_defences=[purifier]), ensemble_size=10,
                             eot_samples=draws,
                             batch_size=8192 if gradient == "bpda" else 2048 if device.type == "cuda" else 512)

    start = time.perf_counter()
    judge = defence("bpda", 1, seed=1234)  # the S = 10 ensemble, its own noise
    x_blind = ProjectedGradientDescent(undefended, **pgd).generate(x, y=y)
    rows = [("Clean", "-", "-", accuracy(undefended, x), accuracy(judge, x), 0.0),
            ("Clf-PGD (preprocessor-blind)", "-", "-", accuracy(undefended, x_blind), accuracy(judge, x_blind), 0.0)]
    for gradient in ("bpda", "full"):
        for draws in args.eot:
            t0 = time.perf_counter()
            adv = ProjectedGradientDescent(defence(gradient, draws, seed=draws), **pgd).generate(x, y=y)
            assert np.abs(adv - x).max() <= pgd["eps"] + 1e-5 and adv.min() >= 0 and adv.max() <= 1
            rows.append((f"PGD-EOT, {gradient.upper() if gradient == 'bpda' else 'full'} gradient", gradient, draws,
                         accuracy(undefended, adv), accuracy(judge, adv), time.perf_counter() - t0))
            print(f"{rows[-1][0]}, EOT {draws}: ADP {100 * rows[-1][4]:.1f} % ({rows[-1][5]:.0f} s)", flush=True)

    print(f"\nDigits, first {len(x)} test images; l_inf eps = 0.175, ART PGD 10 steps; ADP judged with S = 10; "
          f"device {device}; {time.perf_counter() - start:.0f} s\n")
    print("| Attack | EOT draws | Undefended | ADP (S = 10) | attack time |")
    print("|---|---|---|---|---|")
    for name, _, draws, und, adp, seconds in rows:
        print(f"| {name} | {draws} | {100 * und:.1f} | {100 * adp:.1f} | {seconds:.0f} s |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    models = {"score": run_dir / "score.safetensors", "classifier": run_dir / "classifier.safetensors"}
    Path(args.out).write_text(json.dumps({"n_examples": len(x), "device": str(device), "rows": [
        dict(zip(("attack", "gradient", "eot", "undefended", "adp", "seconds"), row)) for row in rows],
        "provenance": provenance(wall_time_s=time.perf_counter() - start, device=device, models=models)}, indent=2))


if __name__ == "__main__":
    main()
