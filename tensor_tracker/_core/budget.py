"""`max_bytes=`: the bytes a tracker's records hold, counted as they are recorded, and the
error raised (hooks removed, records kept) before a record would go past the limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from ..errors import MemoryBudgetError
from .columns import GRAD, Columns
from .records import Stash
from .structure import iter_leaves

__all__ = ["MemoryBudget", "held_nbytes", "value_nbytes"]


def value_nbytes(value: Any, seen: set[int] | None = None) -> int:
    """Bytes held by the tensors inside a stash's value, plus the `nbytes` of any other
    object that declares it (e.g. statistics); with `seen`, each object is counted once (a
    parent's stash often shares its child's copy)."""
    total = 0
    for leaf in iter_leaves(value):
        if seen is not None:
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
        if isinstance(leaf, Tensor):
            total += leaf.numel() * leaf.element_size()
        else:
            size = getattr(leaf, "nbytes", None)
            if isinstance(size, int):
                total += size
    return total


def held_nbytes(columns: Columns, seen: set[int]) -> int:
    """Bytes held by `columns`: its store's numbers and the values it keeps as objects,
    each object (by id, in `seen`) counted once."""
    store = columns.store
    objects = sum(
        value_nbytes(o.value if isinstance(o, Stash) else o, seen) for o in columns.objects
    )
    return (0 if store is None else store.nbytes) + objects


class MemoryBudget:
    """The bytes a tracker's records hold, against a limit.

    The hooks count each record as they keep it (`count`; a value kept as an object is
    sized by `value_nbytes` with `counted`, so that an object two records share counts
    once); a record that
    would go past `limit` calls `stop` (which removes the hooks) and raises
    `MemoryBudgetError`, so what was recorded so far stays.

    Args:
        limit: the most bytes the records may hold (`max_bytes=`).
        stop: what to call before raising: the tracker's `unregister`.
    """

    __slots__ = ("counted", "held", "limit", "stop")

    def __init__(self, limit: int, stop: Callable[[], None]) -> None:
        self.limit = limit
        self.stop = stop
        self.held = 0
        self.counted: set[int] = set()  # ids of the objects counted (each once)

    def count(self, columns: Columns, site: int, flags: int, size: int) -> None:
        """Count `size` more bytes for a record of `site`; past the limit, stop tracking."""
        if self.held + size > self.limit:
            self.stop()
            name, _, kind, _ = columns.sites[site]
            grad = "gradient " if flags & GRAD else ""
            raise MemoryBudgetError(
                f"tensor_tracker: stashing the {kind} {grad}of {name or '<root>'!r} "
                f"({size:,} bytes) would exceed max_bytes={self.limit:,}. Tracking "
                f"stopped (hooks removed); the {len(columns)} stashes so far "
                f"({self.held:,} bytes) are kept. "
                "To stash less: stats=True (a few numbers per tensor instead of the tensor), "
                "include=/exclude= to track fewer modules, grad=False, sample=N, "
                "dtype=torch.bfloat16, every=N, or a larger max_bytes."
            )
        self.held += size

    def recount(self, columns: Columns) -> None:
        """Count again what `columns` holds, after records were dropped."""
        self.counted.clear()
        self.held = held_nbytes(columns, self.counted)

    def clear(self) -> None:
        """Nothing is held any more (the records were cleared)."""
        self.held = 0
        self.counted.clear()
