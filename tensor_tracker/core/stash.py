"""What a hook saw (`Event`), what the tracker keeps (`Stash`), and how one becomes the other."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .._validate import check_bool, check_callable, check_count, check_int, check_type
from ..errors import ArgumentValueError
from .memo import LastTensorMemo
from .structure import rmap_tensor

__all__ = [
    "CopyValue",
    "Event",
    "Kind",
    "Stash",
    "StashFn",
    "StashValueFn",
    "default_stash",
    "default_stash_value",
    "get_stash_fn",
]

Kind = Literal["output", "input", "param", "optimizer"]
"""What a stash holds: a module's output, one of its inputs, one of its own parameters, or
the optimizer's state for one of those parameters."""


@dataclasses.dataclass
class Event:
    """What one hook call saw; a `StashFn` turns it into a `Stash`.

    Attributes:
        name: the module's name in the tracked model (`""` for the root, else a dotted path).
        type: the module's class.
        grad: `True` for a gradient, `False` for a forward value.
        value: for a forward event the module's output; for a gradient event a tuple with
            the gradient for each tensor of the output (`None` where none reached it).
        args: the module's positional inputs (empty for gradient events).
        kwargs: the module's keyword inputs (empty for gradient events).
        call: which call of this module in the current step this was (0 for the first).
        step: the tracker's step when the event happened (see `Tracker.step`).
        kind: `"output"`, `"input"`, `"param"` or `"optimizer"` (see `Kind`).
        attr: which input argument, parameter, or `"param.state"` optimizer entry; `""` for outputs.
        training: the module's `training` flag at the time.
    """

    name: str
    type: type[nn.Module]
    grad: bool
    value: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call: int = 0
    step: int = 0
    kind: Kind = "output"
    attr: str = ""
    training: bool = True


@dataclasses.dataclass
class Stash:
    """One recorded value: a module's output or gradient (or input, parameter, optimizer state).

    `Stash(name, type, grad, value)` still works; the other fields have defaults.

    Attributes:
        name: the module's name (`""` for the root model).
        type: the module's class.
        grad: `True` when `value` holds gradients.
        value: what was kept, e.g. a CPU copy of the output, or its `Stats` with `stats=True`.
            A gradient stash's value is a tuple with one entry per tensor of the output.
        call: which call of this module in its step (modules can run several times per step).
        step: the tracker's step (see `Tracker.step`).
        kind: `"output"`, `"input"`, `"param"` or `"optimizer"`.
        attr: the input argument, parameter (`"weight"`) or optimizer entry (`"weight.exp_avg"`).
        training: whether the module was in training mode.

    Example:
        >>> s = tracker[0]
        >>> s.name, s.grad, s.first_value.shape
        ('0', False, torch.Size([8, 16]))
    """

    name: str
    type: type[nn.Module]
    grad: bool
    value: Any
    call: int = 0
    step: int = 0
    kind: Kind = "output"
    attr: str = ""
    training: bool = True

    @property
    def first_value(self) -> Any:
        """The value with tuples and lists unwrapped: while it is a non-empty tuple or list,
        take its first element. Dicts are not unwrapped."""
        value = self.value
        while isinstance(value, (tuple, list)) and value:
            value = value[0]
        return value


StashFn = Callable[[Event], Stash]
"""Builds a `Stash` from an `Event`; pass one as `track(model, stash=...)`."""

StashValueFn = Callable[[Tensor], Any]
"""Transforms each stashed tensor; pass one as `track(model, stash_value=...)`. It receives
the live tensor (possibly requiring grad): return something detached."""


def default_stash_value(tensor: Tensor) -> Tensor:
    """A detached copy of `tensor` on the CPU that shares no memory with the original.

    Example:
        >>> x = torch.ones(2, requires_grad=True)
        >>> default_stash_value(x)
        tensor([1., 1.])
    """
    return tensor.detach().to("cpu", copy=True)


def default_stash(event: Event, stash_value: StashValueFn) -> Stash:
    """The standard `StashFn`: keep the event's value with every tensor passed through
    `stash_value`, plus the event's name, type, grad flag and position (call, step, kind).

    Example:
        >>> default_stash(event, default_stash_value)
        Stash(name='0', type=<class 'torch.nn.modules.linear.Linear'>, grad=False, value=tensor(...))
    """
    e = event
    return _stash(
        e.name, e.type, e.grad, e.value, stash_value, e.call, e.step, e.kind, e.attr, e.training
    )


def _stash(
    name: str,
    type_: type[nn.Module],
    grad: bool,
    value: Any,
    stash_value: StashValueFn,
    call: int,
    step: int,
    kind: Kind,
    attr: str,
    training: bool,
) -> Stash:
    # What default_stash builds, from the fields themselves: the tracker's hooks call this
    # directly, without building an Event first.
    kept = rmap_tensor(value, stash_value)
    return Stash(name, type_, grad, kept, call, step, kind, attr, training)


class _BoundDefaultStash:
    """`default_stash` bound to a `stash_value`; keeps `stash_value` visible to the tracker."""

    __slots__ = ("stash_value",)

    def __init__(self, stash_value: StashValueFn) -> None:
        self.stash_value = stash_value

    def __call__(self, event: Event) -> Stash:
        return default_stash(event, self.stash_value)

    def __repr__(self) -> str:
        return f"default_stash(stash_value={self.stash_value!r})"


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
        >>> with track(model, sample=1000, dtype=torch.float16) as t:
        ...     model(x)
    """

    builtin_stash_value = True
    """Marks the library's own stash values: the tracker records what they cannot handle
    as `Unrecordable` instead of raising (a user's function raises as it likes)."""

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
        if dtype is not None:
            check_type(dtype, torch.dtype, "dtype=", "a torch.dtype such as torch.bfloat16")
        if device is not None:
            check_type(device, (str, torch.device), "device=", "a torch device ('cpu', 'cuda:0')")
        try:
            self.device = None if device is None else torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ArgumentValueError(
                f"device={device!r} is not a torch device ('cpu', 'cuda:0', ...; None keeps "
                f"copies on each tensor's own device): {error}"
            ) from None
        self.dtype = dtype
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
    return _BoundDefaultStash(stash_value or default_stash_value)
