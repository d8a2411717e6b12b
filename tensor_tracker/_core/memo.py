"""Recognising a tensor seen again unchanged, so that it is processed once.

A parent module often returns its last child's output object, `Dropout(p=0)` returns its
input, and every module that returned a tensor gets the same gradient object: the hooks for
all of them fire back to back with one tensor. "Unchanged" means the same in-place version
counter; tensors are held by weak references only. Inference-mode tensors have no version
counter and are never recognised.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from torch import Tensor

__all__ = ["LastTensorMemo", "RecentTensors"]

R = TypeVar("R")


class RecentTensors(Generic[R]):
    """What was kept for the last `size` tensors seen, looked up by identity and version.

    Example:
        >>> recent = RecentTensors[str](2)
        >>> x = torch.ones(2)
        >>> recent.put(x, "seen"); recent.get(x)
        'seen'
        >>> _ = x.add_(1)
        >>> recent.get(x) is None   # modified in place since
        True
    """

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        # By id, oldest first: one lookup instead of a scan (hooks call this cold).
        self._entries: dict[int, tuple[weakref.ref[Tensor], int, R]] = {}

    def get(self, tensor: Tensor) -> R | None:
        """What was put for `tensor` if it is one of the recent ones and unchanged since."""
        entry = self._entries.get(id(tensor))
        # An id can be reused once its tensor is gone: the weak reference tells. Only
        # tensors with a version counter are put (see `put`), so reading it cannot fail.
        if entry is not None and entry[0]() is tensor and tensor._version == entry[1]:
            return entry[2]
        return None

    def put(self, tensor: Tensor, value: R) -> None:
        """Remember `value` for `tensor` as it is now (forgetting the oldest entry)."""
        try:
            version = tensor._version
        except RuntimeError:  # an inference-mode tensor: no version counter to trust
            return
        entries = self._entries
        key = id(tensor)
        entries.pop(key, None)  # put again: now the newest
        if len(entries) >= self.size:
            del entries[next(iter(entries))]
        entries[key] = (weakref.ref(tensor), version, value)

    def clear(self) -> None:
        """Forget every tensor."""
        self._entries.clear()


class LastTensorMemo(Generic[R]):
    """Calls `fn`, unless the tensor is the last one seen and unchanged since."""

    __slots__ = ("_recent", "fn")

    def __init__(self, fn: Callable[[Tensor], R]) -> None:
        self.fn = fn
        self._recent = RecentTensors[R](1)

    def __call__(self, tensor: Tensor) -> R:
        result = self._recent.get(tensor)
        if result is None:
            result = self.fn(tensor)
            self._recent.put(tensor, result)
        return result
