"""What a hook saw (`Event`), what the tracker keeps (`Stash`), and where a value came from
(`Origin`, built once per hook call and shared by the stashes that call makes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from torch import Tensor, nn

__all__ = [
    "Event",
    "Kind",
    "LogEntry",
    "Origin",
    "Stash",
    "StashFn",
    "StashValueFn",
    "Unrecorded",
    "first_value",
]

Kind = Literal[
    "output",
    "input",
    "param",
    "optimizer",
    "update",
    "update_ratio",
    "named",
    "target",
    "loss",
    "helper",
    "op",
    "tap",
]
"""What a stash holds: a module's output, one of its inputs, one of its own parameters, the
optimizer's state for one of those parameters, what `optimizer.step()` changed in one of
them (`capture="updates"`: the update, and its rms relative to the parameter's), a tensor
named with `tensor_tracker.stash`
(its `attr` is the name): `"named"`, or the role given there (`"input"`, `"target"`,
`"loss"`, `"param"`, `"helper"`), the result of an operation `track(..., ops=...)` names
(`"op"`, attr `"<op>#<k>"`), or a value given to `tensor_tracker.tap` (`"tap"`)."""


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

    Example:
        >>> def keep_shape(event: tensor_tracker.Event) -> tensor_tracker.Stash:
        ...     # a custom `stash=`: keep each tensor's shape, not the tensor
        ...     return tensor_tracker.default_stash(event, lambda t: t.shape)
        >>> with track(model, stash=keep_shape) as t:
        ...     model(x).sum().backward()
        >>> [(s.name, s.value) for s in t][:2]
        [('0', torch.Size([8, 8])), ('1', torch.Size([8, 8]))]
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
            A gradient stash's value is a tuple with one entry per tensor of the output:
            read `first_value` for the tensor in both directions.
        call: which call of this module in its step (modules can run several times per step).
        step: the tracker's step (see `Tracker.step`).
        kind: `"output"`, `"input"`, `"param"` or `"optimizer"`.
        attr: the input argument, parameter (`"weight"`) or optimizer entry (`"weight.exp_avg"`).
        training: whether the module was in training mode.

    Example:
        >>> s = tracker[0]
        >>> s.name, s.grad, s.first_value.shape
        ('0', False, torch.Size([8, 8]))
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
        take its first element. Dicts are not unwrapped.

        This is "the tensor" of a record whichever its direction: a forward record of a
        module that returns a tensor holds that tensor, while a gradient record's `value`
        is always a tuple (one entry per tensor of the output), so `value` differs and
        `first_value` does not. With `stats=`, it is the tensor's `Stats`.

        Example:
            >>> forward, gradient = tracker["0"]  # one Linear's output and its gradient
            >>> type(gradient.value), gradient.first_value.shape == forward.first_value.shape
            (<class 'tuple'>, True)
        """
        return first_value(self.value)


def first_value(value: Any) -> Any:
    """`value` with tuples and lists unwrapped, as `Stash.first_value`.

    Example:
        >>> first_value(([3, 4], 5))
        3
    """
    while isinstance(value, (tuple, list)) and value:
        value = value[0]
    return value


StashFn = Callable[[Event], Stash]
"""Builds a `Stash` from an `Event`; pass one as `track(model, stash=...)`."""

StashValueFn = Callable[[Tensor], Any]
"""Transforms each stashed tensor; pass one as `track(model, stash_value=...)`. It receives
the live tensor (possibly requiring grad): return something detached."""


@dataclasses.dataclass(frozen=True)
class LogEntry:
    """A scalar (`Tracker.log`) or a note (`Tracker.note`), with the step it was made in.

    Attributes:
        step: the tracker's step then.
        name: the scalar's name (`None` for a note).
        value: the scalar (a float, or a 0-d tensor not read yet; NaN for a note).
        text: the note (`None` for a scalar).

    Example:
        >>> with track(model, stats=True) as t:
        ...     t.log("loss", model(x).square().mean())
        ...     t.note("lr halved")
        >>> [(e.step, e.name, e.text) for e in t.logged]
        [(0, 'loss', None), (0, None, 'lr halved')]
        >>> round(float(t.logged[0].value), 4)
        0.1009
    """

    step: int
    name: str | None
    value: Any
    text: str | None


@dataclasses.dataclass(frozen=True)
class Unrecorded:
    """Stands in a stash for something that was not recorded, with the reason.

    Two cases:

    - An object a module returned (or took as input) that is neither a tensor, nor a plain
      value (number, string, `None`, dtype, device, enum...), nor a container the tracker
      walks. A stash never keeps such an object itself: the model may keep changing it
      after the hook ran (a cache it updates in place), and it may hold tensors that are
      not copied, not counted in `nbytes` and still attached to the autograd graph. To
      record the tensors inside your own class, register it with
      `torch.utils._pytree.register_pytree_node`.
    - A tensor the library could not handle (an exotic layout, ...): a hook never breaks
      your forward or backward pass; it records this instead, and warns once per reason.

    Attributes:
        type: the object's class as `"<module>.<qualname>"` (for a tensor, also its layout,
            dtype and shape).
        reason: why it was not recorded.

    Example:
        >>> Unrecorded("mylib.State", "not a tensor, a plain value or a container")
        Unrecorded(type='mylib.State', reason='not a tensor, a plain value or a container')
    """

    type: str
    reason: str
    nbytes: ClassVar[int] = 0


class Origin:
    """Where a recorded value came from: the module, which call of it, which step, and what
    part of the call (output, input, parameter, optimizer state). One is built per hook
    call; the gradient hooks of that call keep it for their stashes.

    Example:
        >>> o = Origin("0", nn.Linear, call=0, step=3, kind="output", attr="", training=True)
        >>> o.stash(False, None).step
        3
    """

    __slots__ = ("attr", "call", "cls", "kind", "name", "site", "step", "training")

    def __init__(
        self,
        name: str,
        cls: type[nn.Module],
        call: int,
        step: int,
        kind: Kind,
        attr: str,
        training: bool,
        site: int = -1,
    ) -> None:
        self.site = site  # the tracker's index of (name, cls, kind, attr); see `Columns`
        self.name = name
        self.cls = cls
        self.call = call
        self.step = step
        self.kind = kind
        self.attr = attr
        self.training = training

    def stash(self, grad: bool, value: Any) -> Stash:
        """A `Stash` of `value` from here."""
        return Stash(
            self.name,
            self.cls,
            grad,
            value,
            self.call,
            self.step,
            self.kind,
            self.attr,
            self.training,
        )

    def event(self, grad: bool, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Event:
        """An `Event` of `value` from here (for a user's own `StashFn`)."""
        return Event(
            self.name,
            self.cls,
            grad,
            value,
            args,
            kwargs,
            self.call,
            self.step,
            self.kind,
            self.attr,
            self.training,
        )

    def stamp(self, stash: Stash) -> None:
        """Set the position fields of a `Stash` a user's `StashFn` built."""
        stash.call, stash.step, stash.kind = self.call, self.step, self.kind
        stash.attr, stash.training = self.attr, self.training
