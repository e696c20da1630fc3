"""Do the attacks see ART's standardisation? Each attack of art_adp.attacks runs, same seeds, against
``PyTorchClassifier(net, preprocessing=(mean, std))`` and against the same network with the standardisation folded
into the model; the figure is the fraction of pixels whose adversarial values differ (> 1e-5). 0 everywhere means
every attack attacks the function the estimator computes.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/preprocessing_chain.py --models runs/demo --n 40

``--models`` holds the digits demo's ``score.safetensors`` and ``classifier.safetensors``; without it (or when the
folder has none) a tiny MLP is trained on digits in a second and the score network is an untrained NCSNv2.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from art.estimators.classification import PyTorchClassifier

import art_adp.attacks as A
from art_adp import ADPPurifier, NCSNv2
from art_adp.data import load_digits


class Folded(torch.nn.Module):
    """``net((x - mean) / std)``: the standardisation inside the model."""

    def __init__(self, net: torch.nn.Module, mean: float, std: float) -> None:
        super().__init__()
        self.net, self.mean, self.std = net, mean, std

    def forward(self, x):
        x = x - torch.tensor(self.mean, dtype=torch.float32)
        return self.net(x / torch.tensor(self.std, dtype=torch.float32))


def models(folder: Path | None):
    data = load_digits(seed=0)
    if folder is not None and (folder / "score.safetensors").exists():
        from art_adp.models import load_classifier
        from art_adp.score import load_score_model

        return load_classifier(folder / "classifier.safetensors", "cpu").eval(), \
            load_score_model(folder / "score.safetensors", "cpu").eval(), data, "demo models"
    from art_adp.models import MLP, train_classifier

    torch.manual_seed(0)
    mlp = train_classifier(MLP(1, 8, 10, hidden=(64,)), data.x_train, data.y_train, epochs=15, batch_size=64, lr=3e-3,
                           seed=0, progress=False)
    return mlp.eval(), NCSNv2(1, 8, ngf=4).eval(), data, "tiny MLP, untrained NCSNv2(ngf=4)"


ATTACKS = {
    "ClassifierPGD": lambda e: A.ClassifierPGD(e, eps=0.2, eps_step=0.05, max_iter=5),
    'PGDEOT(gradient="bpda")': lambda e: A.PGDEOT(e, gradient="bpda", eps=0.2, eps_step=0.05, max_iter=5,
                                                  eot_samples=2),
    "JointScore(eot_samples=0)": lambda e: A.JointScore(e, eps=0.2, eps_step=0.05, max_iter=5, eot_samples=0),
    "JointScore": lambda e: A.JointScore(e, eps=0.2, eps_step=0.05, max_iter=5, eot_samples=2),
    "JointFull": lambda e: A.JointFull(e, eps=0.2, eps_step=0.05, max_iter=5, eot_samples=2),
    "BlackBoxSPSA": lambda e: A.BlackBoxSPSA(e, eps=0.2, eps_step=0.05, max_iter=3, samples_per_step=16, seed=0),
    'PGDEOT(gradient="full")': lambda e: A.PGDEOT(e, gradient="full", eps=0.2, eps_step=0.05, max_iter=5,
                                                  eot_samples=2),
    "APGDEOT": lambda e: A.APGDEOT(e, eps=0.2, max_iter=5, eot_samples=2, seed=0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=None)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--mean", type=float, default=0.3)
    parser.add_argument("--std", type=float, default=0.4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    net, score, data, which = models(args.models)
    x, y = data.x_test[: args.n].astype(np.float32), data.y_test[: args.n]

    def estimator(standardised: bool):
        purifier = ADPPurifier(score, sigma=0.1, steps=2, generator=torch.Generator().manual_seed(0),
                               device_type="cpu")
        model = net if standardised else Folded(net, args.mean, args.std)
        return PyTorchClassifier(model, torch.nn.CrossEntropyLoss(), input_shape=x.shape[1:], nb_classes=10,
                                 clip_values=(0.0, 1.0), preprocessing_defences=[purifier], device_type="cpu",
                                 preprocessing=(args.mean, args.std) if standardised else None)

    start, rows = time.perf_counter(), {}
    for name, make in ATTACKS.items():
        outs = []
        for standardised in (True, False):
            np.random.seed(0)
            torch.manual_seed(0)
            outs.append(make(estimator(standardised)).generate(x, y=y))
        rows[name] = float((np.abs(outs[0] - outs[1]) > 1e-5).mean())
        print(f"{name:28s} {100 * rows[name]:6.2f} % of pixels differ")
    seconds = time.perf_counter() - start
    print(f"{which}; {len(x)} digits test images; mean/std = {args.mean}/{args.std}; {seconds:.0f} s on CPU, 1 thread")
    if args.out:
        args.out.write_text(json.dumps({"differing_pixel_fraction": rows, "models": which, "n": len(x),
                                        "mean": args.mean, "std": args.std, "seconds": seconds}, indent=2))


if __name__ == "__main__":
    main()
