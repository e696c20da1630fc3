"""The models shipped in :mod:`art_adp.pretrained`, made by the package's own training.

    art-adp demo --threads 1 --quiet --run-dir DIR      # the digits demo trains its two models, seeded, into DIR
    python -m art_adp.apps.bundle DIR                    # their weights, without the training state, into the package

    art-adp train-denoiser --dataset cifar10 ... --run-dir DIR    # a DenoiserUNet of CIFAR-10's 50,000 training images
    python -m art_adp.apps.bundle --cifar10 DIR   # its weights into the package: load_score_model("cifar10")

The second step re-saves each checkpoint's weights (for the score model its EMA weights, σ schedule and step) without
the optimiser and RNG state a trainer keeps for resuming, and writes ``art_adp/pretrained/bundled.json``: each file's
SHA-256, the SHA-256 of its weights (what result files' provenance records), the command and the code version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

from ..models import load_classifier, save_classifier
from ..pretrained import HERE
from ..runs.provenance import code_version
from ..runs.records import weights_sha256
from ..score import load_score_model, save_score_model

__all__ = ["bundle_cifar10", "bundle_digits", "COMMAND"]

COMMAND = "art-adp demo --threads 1 --quiet --run-dir DIR && python -m art_adp.apps.bundle DIR"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bundle_digits(run_dir: str | Path, out_dir: str | Path = HERE) -> dict:
    """Re-save the digits demo's two models from ``run_dir`` into ``out_dir`` and write ``bundled.json`` there.

    :return: The record written.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    trained = run_dir / "results.json"  # the demo's own record of its run (training and attacks): device, wall time
    run = json.loads(trained.read_text()).get("provenance", {}) if trained.exists() else {}
    # the code that trained the models: the demo's record, else this code, taken before the files below change the tree
    version = run.get("code_version") or code_version()
    score, classifier = out_dir / "digits_score.safetensors", out_dir / "digits_classifier.safetensors"
    save_score_model(load_score_model(run_dir / "score.safetensors"), score)
    save_classifier(load_classifier(run_dir / "classifier.safetensors"), classifier)
    entry = {
        kind: {"file": path.name, "sha256": _sha256(path), "weights_sha256": weights_sha256(path)}
        for kind, path in (("score", score), ("classifier", classifier))
    }
    held = json.loads((out_dir / "bundled.json").read_text()) if (out_dir / "bundled.json").exists() else {}
    record = {
        **held,  # the other bundled models stay recorded
        "command": COMMAND,
        "code_version": version,
        "demo_run": {k: run[k] for k in ("device", "wall_time_s") if k in run},  # attacks included
        "models": {**held.get("models", {}), "digits": entry},
        "about": {
            **held.get("about", {}),
            "digits": "the digits demo's models (art_adp.apps.demo.DemoConfig, seed 0): an NCSNv2(ngf=8) score model, "
            "600 DSM steps of 64 on 12 levels from 1.0 to 0.01, and a DigitsCNN, 15 epochs, on scikit-learn's "
            "bundled 8x8 digits (load_digits(seed=0): 1,437 training images of a stratified split; its 360 test "
            "images were not trained on)",
        },
    }
    (out_dir / "bundled.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def bundle_cifar10(run_dir: str | Path, out_dir: str | Path = HERE) -> dict:
    """Re-save the DenoiserUNet ``art-adp train-denoiser --dataset cifar10`` trained into ``run_dir`` (its EMA
    weights, without the trainer's state) as ``cifar10_score.safetensors`` in ``out_dir``, and record it in
    ``bundled.json`` there beside the models already recorded: the file's and the weights' SHA-256, the training's
    command, code version, device, wall time and its one-step denoising MSE (from ``run_dir/result.json``).

    :return: The record written.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    result = json.loads((run_dir / "result.json").read_text())
    path = out_dir / "cifar10_score.safetensors"
    save_score_model(load_score_model(run_dir / "denoiser.safetensors"), path)
    record = json.loads((out_dir / "bundled.json").read_text()) if (out_dir / "bundled.json").exists() else {}
    p = result["provenance"]
    record.setdefault("models", {})["cifar10"] = {
        "score": {"file": path.name, "sha256": _sha256(path), "weights_sha256": weights_sha256(path)}
    }
    command = re.sub(r"(--(?:data-root|run-dir)[= ])\S+", r"\1DIR", p["command"])  # no path of this machine
    record.setdefault("made", {})["cifar10"] = {
        "command": f"{command} && python -m art_adp.apps.bundle --cifar10 DIR",
        "code_version": p["code_version"],
        "training": {"device": p["device"], "training_seconds": result["final"]["train_seconds"],
                     "settings": result["settings"], "final": result["final"], "linear_mse": result.get("linear_mse")},
    }  # fmt: skip
    record.setdefault("about", {})["cifar10"] = (
        f"a DenoiserUNet{tuple(result['settings']['channels'])} ({result['parameters']:,} parameters) trained by "
        "art-adp train-denoiser on CIFAR-10's 50,000 training images (seed 0); ADP's score at any σ through "
        "EDMScore (ADPPurifier takes it at its own σ)"
    )
    (out_dir / "bundled.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("run_dir", help="the folder art-adp demo (or, with --cifar10, train-denoiser) trained into")
    parser.add_argument("--cifar10", action="store_true", help="bundle a CIFAR-10 DenoiserUNet as 'cifar10'")
    parser.add_argument("--out", default=str(HERE), help="where the files go (default: the package's pretrained/)")
    args = parser.parse_args(argv)
    bundle = bundle_cifar10 if args.cifar10 else bundle_digits
    print(json.dumps(bundle(args.run_dir, args.out), indent=2))


if __name__ == "__main__":
    main()
