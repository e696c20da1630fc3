"""Running under ``torchrun``: one helper for data-parallel score training and sharded evaluations (one GPU per
process when CUDA is available, gloo on CPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

import torch

__all__ = ["barrier", "finish", "setup", "shard"]

T = TypeVar("T")


def setup(device: str | None = None) -> tuple[torch.device, int, int]:
    """
    Join the process group that ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1): NCCL with
    ``cuda:LOCAL_RANK`` made the current device when CUDA is used, gloo on CPU. Outside torchrun, nothing is joined.

    :param device: ``"cpu"``, ``"cuda"`` (or ``"cuda:K"`` outside torchrun), or None for CUDA when available.
    :return: ``(device, rank, world_size)``; ``(device, 0, 1)`` outside torchrun.
    """
    cuda = device != "cpu" and (device is not None or torch.cuda.is_available())
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return torch.device(device or ("cuda" if cuda else "cpu")), 0, 1
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return torch.device("cuda", local_rank) if cuda else torch.device("cpu"), dist.get_rank(), dist.get_world_size()


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
