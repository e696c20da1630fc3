"""Score training with weight snapshots at iteration milestones and a wall-time log, for learning curves.

:func:`train_with_snapshots` calls :func:`~art_adp.score.train_score_model` once per milestone, resuming from
the same checkpoint each time, so the trained weights are exactly those of one uninterrupted run (the
trainer resumes bit-identically); after each milestone the EMA weights are saved as
``snapshots/score_<step>.safetensors`` and a line ``{"step", "wall_s", ...}`` is appended to
``snapshots/log.jsonl`` (``wall_s``: training seconds summed over all sessions, resumes included).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable

import torch

from ..runs.records import append_records, read_jsonl, write_json
from ..score import load_score_model, save_score_model, train_score_model
from ..serialization import read_checkpoint

__all__ = ["train_with_snapshots", "read_snapshot_log"]


def read_snapshot_log(run_dir: str | os.PathLike) -> list[dict]:
    """The milestone records written by :func:`train_with_snapshots`, in order (empty if none yet)."""
    return read_jsonl(Path(run_dir) / "snapshots" / "log.jsonl")


def train_with_snapshots(
    model: torch.nn.Module,
    x_train,
    sigmas,
    milestones: Iterable[int],
    run_dir: str | os.PathLike,
    *,
    batch_size: int = 64,
    lr: float = 1e-3,
    ema_decay: float = 0.999,
    seed: int = 0,
    checkpoint_every: int = 100,
    progress: bool = True,
    device: str | torch.device | None = None,
    **train_options,
) -> torch.nn.Module:
    """
    Train ``model`` up to each milestone in turn, keeping the EMA weights of every milestone.

    :param model: A freshly initialised score network (its weights are replaced when resuming).
    :param x_train: Training images ``N×C×H×W`` in [0, 1].
    :param sigmas: The DSM noise schedule.
    :param milestones: Increasing positive iteration counts; the last one is the total.
    :param run_dir: Holds ``score.safetensors`` (the resumable training checkpoint) and ``snapshots/``.
    :param checkpoint_every: Steps between checkpoints (also the most work an interruption loses).
    :param train_options: Further keywords of :func:`~art_adp.score.train_score_model` (e.g. its fast-path levers).
    :return: The EMA network at the last milestone.
    """
    milestones = [int(m) for m in milestones]
    if not milestones or any(m < 1 for m in milestones) or any(b <= a for a, b in zip(milestones, milestones[1:])):
        raise ValueError(f"milestones must be increasing positive integers, got {milestones}.")
    run_dir = Path(run_dir)
    snap_dir = run_dir / "snapshots"
    snap_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "score.safetensors"
    log = read_snapshot_log(run_dir)
    done = {rec["step"] for rec in log}
    wall = log[-1]["wall_s"] if log else 0.0
    state = run_dir / "wall_s.json"  # training seconds up to the checkpoint, for steps between milestones
    if state.exists():
        wall = max(wall, json.loads(state.read_text())["wall_s"])
    ema = None
    for m in milestones:
        snap = snap_dir / f"score_{m:07d}.safetensors"
        if m in done and snap.exists():
            continue
        if ckpt.exists():
            at = read_checkpoint(ckpt)[1].get("step", 0)
            if at > m:
                raise ValueError(
                    f"{ckpt} is at step {at}, past the milestone {m} that has no snapshot; drop {m} from "
                    "the milestones or train in a new run_dir."
                )
        start = time.perf_counter()
        ema = train_score_model(
            model,
            x_train,
            sigmas,
            m,
            batch_size=batch_size,
            lr=lr,
            ema_decay=ema_decay,
            checkpoint_path=ckpt,
            seed=seed,
            progress=progress,
            checkpoint_every=checkpoint_every,
            device=device,
            **train_options,
        )
        wall += time.perf_counter() - start
        write_json(state, {"wall_s": wall})
        save_score_model(ema, snap)
        record = {"step": m, "wall_s": round(wall, 1), "batch_size": batch_size, "snapshot": snap.name}
        append_records(snap_dir / "log.jsonl", [record])
    return ema if ema is not None else load_score_model(ckpt, device)
