"""Remembering the result for the last tensor seen, so the same tensor is processed once."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from torch import Tensor

__all__ = ["LastTensorMemo"]

R = TypeVar("R")


class LastTensorMemo(Generic[R]):
    """Calls `fn`, unless the tensor is the last one seen and unchanged since.

    A parent module often returns its last child's output object, `Dropout(p=0)` returns its
    input, and every module that returned a tensor gets the same gradient object: the hooks
    for all of them fire back to back with one tensor. "Unchanged" means the same in-place
    version counter; the tensor is held by a weak reference only. Inference-mode tensors have
    no version counter and are never memoised.
    """

    __slots__ = ("_last", "fn")

    def __init__(self, fn: Callable[[Tensor], R]) -> None:
        self.fn = fn
        self._last: tuple[weakref.ref[Tensor], int, R] | None = None

    def __call__(self, tensor: Tensor) -> R:
        last = self._last
        if tensor.is_inference():
            return self.fn(tensor)
        version = tensor._version
        if last is not None and last[0]() is tensor and last[1] == version:
            return last[2]
        result = self.fn(tensor)
        self._last = (weakref.ref(tensor), version, result)
        return result
