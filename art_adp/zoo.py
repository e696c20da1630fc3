"""The model zoo: the weights behind the project's published figures, by name (``zoo:cifar10/adv-resnet20``).

The zoo is a folder of the repository (``zoo/``), not part of the wheel: ``zoo/manifest.json`` lists each entry
with its data set, architecture, the SHA-256 of its weights as a result file's provenance records them
(:func:`~art_adp.serialization.weights_sha256`, the state dict), the SHA-256 of the file's bytes where the file is
shipped, how it was made (training command, clean commit, processor, wall time), its licence and the result files
that use it. Third-party weights are not copied: their entries name the source file, its SHA-256 and the converter
that writes the zoo's file from it; a model shipped inside the package (``bundled``) is named by its path there.

Where the zoo is: ``$ART_ADP_ZOO`` when set, else ``zoo/`` beside the package in a clone (an editable install). A
wheel install has no zoo: set ``ART_ADP_ZOO`` to a clone's ``zoo/`` folder. Every name is checked against its entry
when read: a file whose hash differs is refused, naming both hashes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PREFIX", "ZooError", "by_weights", "entry", "manifest", "root", "weights_of", "zoo_file", "zoo_name"]

#: What marks a zoo name where a model path is taken (``--classifier zoo:mnist/cnn-oracle``).
PREFIX = "zoo:"
#: The environment variable naming the zoo folder.
ENV = "ART_ADP_ZOO"
SCHEMA = "art-adp/zoo/1"


class ZooError(FileNotFoundError):
    """A zoo name that cannot be read: no zoo, no such entry, weights not shipped or not converted, a hash that
    differs. The message says which, and what to do."""


def zoo_name(spec: str | os.PathLike) -> str | None:
    """The entry ``spec`` names (``"zoo:cifar10/resnet20"`` → ``"cifar10/resnet20"``), None for anything else."""
    text = str(spec)
    return text[len(PREFIX) :] if text.startswith(PREFIX) else None


def root(folder: str | os.PathLike | None = None) -> Path:
    """
    The zoo folder: ``folder``, else ``$ART_ADP_ZOO``, else ``zoo/`` of the clone the package is imported from.

    :raises ZooError: When there is none (a wheel install without ``ART_ADP_ZOO``), saying how to point at one.
    """
    if folder is None:
        folder = os.environ.get(ENV) or Path(__file__).resolve().parents[1] / "zoo"
    path = Path(folder)
    if not (path / "manifest.json").is_file():
        raise ZooError(
            f"No model zoo at {path} (no manifest.json). The zoo is a folder of the art-adp repository, not of the "
            f"wheel: clone the repository and set {ENV}=CLONE/zoo (or run from the clone)."
        )
    return path


def manifest(folder: str | os.PathLike | None = None) -> dict[str, Any]:
    """The zoo's manifest (``zoo/manifest.json``), checked for its schema."""
    held = json.loads((root(folder) / "manifest.json").read_text(encoding="utf-8"))
    if held.get("schema") != SCHEMA:
        raise ZooError(f"{root(folder) / 'manifest.json'} is not an art-adp zoo manifest ({SCHEMA}).")
    return held


def entry(name: str, folder: str | os.PathLike | None = None) -> dict[str, Any]:
    """The manifest's entry ``name`` (``"cifar10/adv-resnet20"``; a ``zoo:`` prefix is dropped)."""
    name = zoo_name(name) or name
    entries = manifest(folder)["entries"]
    if name not in entries:
        raise ZooError(f"No zoo entry {name!r}; the zoo has {sorted(entries)}.")
    return entries[name]


def by_weights(folder: str | os.PathLike | None = None) -> dict[str, str]:
    """Entry name by the SHA-256 of its weights as provenance records it (a result file's ``provenance.models``)."""
    return {e["weights_sha256"]: name for name, e in manifest(folder)["entries"].items()}


def weights_of(path: str | os.PathLike) -> str:
    """The state dict's SHA-256 as provenance records it: an art-adp checkpoint's tensors, or a TorchScript
    module's (read by ``torch.jit.load``, as ``--classifier`` reads it)."""
    from .serialization import is_safetensors, weights_sha256

    if is_safetensors(Path(path)):
        return weights_sha256(path)
    import torch

    return weights_sha256(torch.jit.load(str(path), map_location="cpu"))


def zoo_file(name: str, folder: str | os.PathLike | None = None) -> Path:
    """
    The file of the zoo entry ``name``, after checking it against the entry: the SHA-256 of its bytes (where the
    manifest records one) and of its weights as provenance records them.

    :raises ZooError: For an unknown name, weights that are not in the zoo (not shipped yet, or third-party weights
        not converted: the message gives the source and the converter's command), or a hash that differs (both named).
    """
    from .serialization import file_sha256

    key = zoo_name(name) or name
    held = entry(key, folder)
    if not held.get("file") and not held.get("bundled"):
        raise ZooError(f"zoo:{key}: its weights are not in the zoo: {held.get('status', 'not shipped')}.")
    path = Path(__file__).resolve().parent / held["bundled"] if held.get("bundled") else root(folder) / held["file"]
    if not path.is_file():
        source = held.get("source")
        if source:
            raise ZooError(
                f"zoo:{key} is third-party weights, not copied into the zoo: take {source['path']} of "
                f"{source['repository']} (SHA-256 {source['sha256']}) and write {path} with: "
                f"{held['converter'].format(zoo=root(folder))}"
            )
        raise ZooError(f"zoo:{key}: {path} is missing from the zoo folder (its manifest lists it).")
    for field, measure in (("sha256", file_sha256), ("weights_sha256", weights_of)):
        if field in held and (found := measure(path)) != held[field]:
            what = "file" if field == "sha256" else "weights (state dict)"
            raise ZooError(
                f"zoo:{key}: {path} is not the zoo's {what}: its SHA-256 is {found}, the manifest's {held[field]}. "
                "Restore the file from the repository (or convert the source again); a model that differs is not "
                "the one behind the published figures."
            )
    return path
