"""Turning what a hook saw into what is kept: the standard `StashFn` and `StashValueFn`s."""

from __future__ import annotations

import enum
import sys
from typing import Any

import torch
from torch import Tensor

from .._validate import check_bool, check_callable, check_count, check_int, check_type
from ..errors import ArgumentValueError
from .memo import LastTensorMemo
from .records import Event, Stash, StashFn, StashValueFn, Unrecorded
from .structure import rmap, rmap_tensor

__all__ = [
    "CopyValue",
    "check_copy_device",
    "check_copy_dtype",
    "default_stash",
    "default_stash_value",
    "get_stash_fn",
    "keep",
]


def default_stash_value(tensor: Tensor) -> Tensor:
    """A detached copy of `tensor` on the CPU that shares no memory with the original.

    Example:
        >>> x = torch.ones(2, requires_grad=True)
        >>> default_stash_value(x)
        tensor([1., 1.])
    """
    if not isinstance(tensor, Tensor):
        check_type(tensor, Tensor, "default_stash_value(tensor)", "a torch.Tensor")
    return tensor.detach().to("cpu", copy=True)


def _kept_leaf(value: Any) -> Any:
    """What the default stash keeps for a non-tensor, non-container `value` (see
    `Unrecorded`): immutable values themselves, a copy of a NumPy array, else a note."""
    if isinstance(value, IMMUTABLE):
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.generic):
            return value
        if isinstance(value, numpy.ndarray):
            return value.copy()
    cls = type(value)
    return Unrecorded(
        f"{cls.__module__}.{cls.__qualname__}",
        "not a tensor, a plain value or a container tensor_tracker walks (tuple, list, "
        "dict, dataclass, torch pytree node, Hugging Face cache), so not kept: the model "
        "may change it later. Register its class with "
        "torch.utils._pytree.register_pytree_node to record the tensors it holds.",
    )


IMMUTABLE = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    range,
    slice,
    type,
    type(Ellipsis),
    enum.Enum,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)
"""Types whose values are kept as they are: they cannot change after the step."""


def keep(value: Any, stash_value: StashValueFn) -> Any:
    """What the standard `StashFn` keeps of a value: every tensor through `stash_value`, the
    containers rebuilt (see `rmap_tensor`), plain values as they are, other objects as an
    `Unrecorded` note."""
    return stash_value(value) if isinstance(value, Tensor) else rmap(value, stash_value, _kept_leaf)


def default_stash(event: Event, stash_value: StashValueFn) -> Stash:
    """The standard `StashFn`: keep the event's value with every tensor passed through
    `stash_value`, plus the event's name, type, grad flag and position (call, step, kind).

    The value is rebuilt by `rmap_tensor` (new containers, a Hugging Face `DynamicCache`
    included). The tracker's own hooks go one step further (see `keep`): an object that is
    neither a tensor, a plain value nor a container it walks is replaced by an `Unrecorded`
    note, so a stash never holds an object the model may still change.

    Example:
        >>> default_stash(event, default_stash_value)
        Stash(name='0', type=<class 'torch.nn.modules.linear.Linear'>, grad=False, value=tensor([1., 1.]), call=0, step=0, kind='output', attr='', training=True)
    """
    e = event
    kept = rmap_tensor(e.value, stash_value)
    return Stash(e.name, e.type, e.grad, kept, e.call, e.step, e.kind, e.attr, e.training)


class BoundDefaultStash:
    """`default_stash` bound to a `stash_value`; keeps `stash_value` visible to the tracker."""

    __slots__ = ("stash_value",)

    def __init__(self, stash_value: StashValueFn) -> None:
        self.stash_value = stash_value

    def __call__(self, event: Event) -> Stash:
        return default_stash(event, self.stash_value)

    def __repr__(self) -> str:
        return f"default_stash(stash_value={self.stash_value!r})"


def check_copy_dtype(dtype: Any, argument: str) -> torch.dtype | None:
    """`dtype` must be `None` or a floating-point (or complex) `torch.dtype`: what copies
    may be stored in."""
    if dtype is None:
        return None
    check_type(dtype, torch.dtype, argument, "a torch.dtype such as torch.bfloat16")
    if not (dtype.is_floating_point or dtype.is_complex):
        # An integer or bool copy of activations truncates them (0.7 -> 0).
        raise ArgumentValueError(
            f"{argument} must be a floating-point dtype for copies (torch.float16, "
            f"torch.bfloat16, torch.float32, ...), got {dtype}: it would truncate the values"
        )
    return dtype  # type: ignore[no-any-return]


def check_copy_device(device: Any, argument: str) -> torch.device | None:
    """`device` must be `None` (each copy stays on its tensor's device) or a device this
    machine has (`"cpu"`, `"cuda:0"`, a `torch.device`); returned as a `torch.device`."""
    if device is None:
        return None
    check_type(device, (str, torch.device), argument, "a torch device ('cpu', 'cuda:0')")
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ArgumentValueError(
            f"{argument}{device!r} is not a torch device ('cpu', 'cuda:0', ...; None keeps "
            f"copies on each tensor's own device): {error}"
        ) from None
    try:
        # A device this machine lacks (cuda:7 on one GPU, CUDA on a CPU build) would fail
        # every copy in the hooks: each record an Unrecorded. Refuse it here.
        torch.empty(0, device=checked)
    except (AssertionError, RuntimeError, NotImplementedError) as error:
        raise ArgumentValueError(
            f"{argument}{device!r}: this machine cannot hold tensors there ({error}); pass a "
            "device it has ('cpu', or 'cuda:N' below torch.cuda.device_count() = "
            f"{torch.cuda.device_count()}), or None to keep copies on each tensor's own device"
        ) from None
    return checked


class CopyValue:
    """A `StashValueFn` that copies tensors with a choice of where, in what dtype, and how much.

    `track(model)` copies with `CopyValue()` (like `default_stash_value`: a detached CPU copy
    sharing no memory with the original); `track(model, device=..., dtype=..., sample=...,
    non_blocking=...)` builds one with those options. A tensor seen again unchanged (a parent
    returning its child's output object) is copied once and the copy shared by both stashes.

    Args:
        device: where copies go; `"cpu"` (the default), any torch device, or `None` to keep
            each copy on its tensor's own device (fastest on a GPU; uses GPU memory).
        dtype: store copies in this dtype (e.g. `torch.bfloat16` halves the memory of float32).
        sample: keep at most this many elements, drawn at random without replacement and
            flattened to 1-D; reproducible for a given `seed` and sequence of calls.
        seed: seed of the sampling generator.
        non_blocking: copy from a GPU into pinned CPU memory asynchronously; the tracker
            synchronises before you read the stashes.

    Example:
        >>> with track(model, sample=10, dtype=torch.float16) as t:
        ...     _ = model(x)
        >>> t[0].value.shape, t[0].value.dtype
        (torch.Size([10]), torch.float16)
    """

    builtin_stash_value = True
    """Marks the library's own stash values: the tracker records what they cannot handle
    as `Unrecorded` instead of raising (a user's function raises as it likes)."""

    def __init__(
        self,
        device: str | torch.device | None = "cpu",
        dtype: torch.dtype | None = None,
        sample: int | None = None,
        seed: int = 0,
        non_blocking: bool = False,
    ) -> None:
        check_count(sample, "sample=", "elements to keep", optional=True)
        check_int(seed, "seed=")
        check_bool(non_blocking, "non_blocking=")
        self.device = check_copy_device(device, "device=")
        self.dtype = check_copy_dtype(dtype, "dtype=")
        self.sample = sample
        self.seed = seed
        self.non_blocking = non_blocking
        self._generators: dict[torch.device, torch.Generator] = {}
        self._memo = LastTensorMemo(self._copy)

    def _generator(self, device: torch.device) -> torch.Generator:
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device=device)
            gen.manual_seed(self.seed)
        return gen

    def __call__(self, tensor: Tensor) -> Tensor:
        return self._memo(tensor)

    def _copy(self, tensor: Tensor) -> Tensor:
        value = tensor.detach()
        if self.sample is not None and value.numel() > self.sample:
            if value.layout != torch.strided:  # sparse: sample the dense tensor
                value = value.to_dense()
            index = torch.randperm(
                value.numel(), generator=self._generator(value.device), device=value.device
            )[: self.sample]
            value = value.reshape(-1)[index]
        device = value.device if self.device is None else self.device
        dtype = value.dtype if self.dtype is None else self.dtype
        if self.non_blocking and value.is_cuda and device.type == "cpu":
            out = torch.empty(value.shape, dtype=dtype, pin_memory=True)
            return out.copy_(value, non_blocking=True)
        return value.to(device=device, dtype=dtype, copy=True)

    def __repr__(self) -> str:
        return (
            f"CopyValue(device={self.device}, dtype={self.dtype}, sample={self.sample}, "
            f"seed={self.seed}, non_blocking={self.non_blocking})"
        )


def get_stash_fn(
    stash_value: StashValueFn | None = None,
    stash: StashFn | None = None,
) -> StashFn:
    """Choose the `StashFn` a tracker uses: `stash` if given, else `default_stash` bound to
    `stash_value` (or to `default_stash_value`).

    Raises:
        ValueError: when both `stash` and `stash_value` are given.

    Example:
        >>> fn = get_stash_fn(stash_value=lambda t: t.detach().std())
    """
    if stash is not None and stash_value is not None:
        raise ArgumentValueError(
            "get_stash_fn: give either stash= (builds the whole Stash) or stash_value= "
            "(transforms each tensor), not both"
        )
    if stash is not None:
        check_callable(stash, "stash=", "Event -> Stash")
        return stash
    if stash_value is not None:
        check_callable(stash_value, "stash_value=", "Tensor -> value")
    return BoundDefaultStash(stash_value or default_stash_value)
