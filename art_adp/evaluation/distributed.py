"""Sharding an evaluation over ``torchrun`` processes (one GPU each when present; gloo on CPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

import torch

__all__ = ["barrier", "device_for_rank", "finish", "setup", "shard"]

T = TypeVar("T")


def setup() -> tuple[int, int]:
    """
    Join the process group that ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1), with NCCL when
    CUDA is available and gloo otherwise.

    :return: ``(rank, world_size)``; ``(0, 1)`` outside torchrun.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def device_for_rank(device: str | None) -> torch.device:
    """``cuda:LOCAL_RANK`` when CUDA is available (or asked for), else the CPU."""
    if device == "cpu" or (device is None and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """Round-robin share of ``items`` for ``rank`` (the units' contents never depend on ``world``)."""
    return list(items[rank::world])


def barrier() -> None:
    """Wait for every process (no-op outside a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def finish() -> None:
    """Leave the process group, if one was joined."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
