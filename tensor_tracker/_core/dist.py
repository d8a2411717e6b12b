"""Where a tracker runs under `torch.distributed`: its rank, and the one collective it uses.

Hooks never talk to other ranks (they may fire a different number of times on each); the
rank is read once, when a tracker is made or entered, and records move between ranks only
in `gather_objects`, at a point the user chooses (`Tracker.gather`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["RankInfo", "gather_objects", "local_value", "rank_info"]

RankInfo = tuple[int, int]
"""`(rank, world_size)` in the default process group."""


def rank_info() -> RankInfo | None:
    """`(rank, world_size)` when `torch.distributed` is initialised in this process, else
    `None` (also when torch was built without distributed support)."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def gather_objects(obj: Any, dst: int, group: Any = None) -> list[Any] | None:
    """Every rank's `obj` on rank `dst` (in rank order; `None` on the other ranks), with one
    `gather_object` over `group` (default: the default process group). A collective: every
    rank of the group must call it, whatever it recorded.

    Under NCCL, `gather_object` moves the pickled objects through the current CUDA device
    (`torch.cuda.set_device(local_rank)` first, as `torch.distributed` requires)."""
    dist = torch.distributed
    world = dist.get_world_size(group)
    me = dist.get_rank()
    received: list[Any] | None = [None] * world if me == dst else None
    dist.gather_object(obj, received, dst=dst, group=group)
    return received


def local_value(tensor: Tensor) -> Tensor:
    """The part of `tensor` this rank holds: a `DTensor`'s local shard (FSDP2's sharded
    parameters and their gradients), else `tensor` itself. Statistics of a `DTensor` would
    run collectives (a sum over a sharded dimension is reduced across ranks), which a hook
    must never do; the shards' statistics combine exactly afterwards instead."""
    to_local = getattr(tensor, "to_local", None)
    if to_local is not None and type(tensor).__name__ == "DTensor":
        local: Tensor = to_local()
        return local
    return tensor
