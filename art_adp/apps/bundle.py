"""The models shipped in :mod:`art_adp.pretrained`, made by the package's own training.

    art-adp demo --threads 1 --quiet --run-dir DIR      # the digits demo trains its two models, seeded, into DIR
    python -m art_adp.apps.bundle DIR                    # their weights, without the training state, into the package

The second step re-saves each checkpoint's weights (for the score model its EMA weights, σ schedule and step) without
the optimiser and RNG state a trainer keeps for resuming, and writes ``art_adp/pretrained/bundled.json``: each file's
SHA-256, the SHA-256 of its weights (what result files' provenance records), the command and the code version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from ..models import load_classifier, save_classifier
from ..pretrained import HERE
from ..runs.provenance import code_version
from ..runs.records import weights_sha256
from ..score import load_score_model, save_score_model

__all__ = ["bundle_digits", "COMMAND"]

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
    record = {
        "command": COMMAND,
        "code_version": version,
        "demo_run": {k: run[k] for k in ("device", "wall_time_s") if k in run},  # attacks included
        "models": {"digits": entry},
        "about": {
            "digits": "the digits demo's models (art_adp.apps.demo.DemoConfig, seed 0): an NCSNv2(ngf=8) score model, "
            "600 DSM steps of 64 on 12 levels from 1.0 to 0.01, and a DigitsCNN, 15 epochs, on scikit-learn's "
            "bundled 8x8 digits (load_digits(seed=0): 1,437 training images of a stratified split; its 360 test "
            "images were not trained on)"
        },
    }
    (out_dir / "bundled.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("run_dir", help="the folder art-adp demo trained into")
    parser.add_argument("--out", default=str(HERE), help="where the files go (default: the package's pretrained/)")
    args = parser.parse_args(argv)
    print(json.dumps(bundle_digits(args.run_dir, args.out), indent=2))


if __name__ == "__main__":
    main()
