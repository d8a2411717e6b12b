"""`Options`: how a tracker records, every option checked once, when it is made."""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Iterable, Mapping

import torch

from .._validate import check_bool, check_callable, check_choices, check_count, check_type
from ..errors import ArgumentValueError
from .records import StashFn
from .stash_fns import get_stash_fn

__all__ = ["CAPTURE", "Options", "Pattern", "check_filters", "compile_pattern"]

Pattern = str | re.Pattern[str] | None
"""A module-name filter: `None`, a regular expression string, or a compiled pattern."""

CAPTURE = ("outputs", "inputs", "params")
"""What `capture=` can name: module outputs, module inputs, and each module's own parameters."""


def compile_pattern(pattern: Pattern, argument: str) -> re.Pattern[str] | None:
    """Compile a module-name filter, naming `argument` in the error when it is not valid."""
    if pattern is None or isinstance(pattern, re.Pattern):
        return pattern
    check_type(pattern, str, f"{argument}=", "a regex string, a compiled pattern or None")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ArgumentValueError(
            f"{argument}={pattern!r} is not a valid regular expression: {error}"
        ) from None


def check_filters(
    grad: bool, include: Pattern, exclude: Pattern
) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    """Check `register_all`'s `grad`, `include` and `exclude`; the patterns compiled."""
    check_bool(grad, "grad=")
    return compile_pattern(include, "include"), compile_pattern(exclude, "exclude")


@dataclasses.dataclass(frozen=True)
class Options:
    """How a tracker records: what `track` and `Tracker(...)` pass to `Recorder`, checked
    when made (a wrong option raises here, before anything touches the model). Made by
    `track` from its arguments; `Tracker(stash, capture=..., ...)` makes one too.

    Attributes:
        stash: the `StashFn` that turns each hook `Event` into a `Stash`; default: a
            detached CPU copy of every tensor (`default_stash` with `default_stash_value`).
        grad: also record gradients (of outputs, and of inputs/parameters per `capture`).
        include: only modules whose name matches this regex (`re.search`; a string or a
            compiled pattern, kept compiled).
        exclude: skip modules whose name matches this regex.
        capture: what to record for each registered module, one or more of `"outputs"`
            (the default), `"inputs"` (each positional/keyword argument holding tensors) and
            `"params"` (the module's own parameters, not its children's); kept as a
            frozenset. With `grad` the gradients of each are recorded too (parameter
            gradients once accumulated).
        optimizer: also record this optimizer's per-parameter state (e.g. Adam's `exp_avg`
            and `exp_avg_sq`) for the registered modules' parameters after each
            `optimizer.step()`.
        every: record only every N-th step (see `Recorder.step`); between recorded steps no
            hook is attached at all. A dict `{kind: N}` sets it per kind of step (see
            `step(kind=...)`; the `"default"` entry, which it must have, for the steps of no
            declared kind), so that each kind is recorded at least every N of its steps.
            Kept as a read-only mapping.
        train_only: record only while modules are in training mode.
        max_bytes: raise `MemoryBudgetError` (after removing the hooks, keeping what was
            stashed) instead of letting the stashes grow past this many bytes.
        keep_steps: keep only the records of the last `keep_steps` steps that recorded
            anything (the oldest is dropped when the first record of a new step comes, so
            no more than `keep_steps` steps are ever held, and after a loop ending in
            `step()` the last `keep_steps` steps of the loop are there): a flight
            recorder of full copies, bounded in memory, e.g. beside a `stats=` tracker
            with `on_nonfinite="raise"`. Not with `stats=` (statistics are cheap to
            keep).

    Example:
        >>> options = Options(capture=["outputs", "params"], every={"default": 10, "eval": 2})
        >>> sorted(options.capture), options.every_of("eval"), options.every_of("long")
        (['outputs', 'params'], 2, 10)
        >>> Options(every=0)
        Traceback (most recent call last):
        ...
        tensor_tracker.errors.ArgumentValueError: every= must be a positive int (record every N-th step), got 0
    """

    stash: StashFn | None = None
    grad: bool = True
    include: Pattern = None
    exclude: Pattern = None
    capture: str | Iterable[str] = "outputs"
    optimizer: torch.optim.Optimizer | None = None
    every: int | Mapping[str, int] = 1
    train_only: bool = False
    max_bytes: int | None = None
    keep_steps: int | None = None

    def __post_init__(self) -> None:
        if self.stash is not None:
            check_callable(self.stash, "stash=", "Event -> Stash")
        include, exclude = check_filters(self.grad, self.include, self.exclude)
        if isinstance(self.capture, str):
            capture = frozenset({self.capture})
        else:
            check_type(self.capture, Iterable, "capture=", f"one or several of {CAPTURE}")
            capture = frozenset(self.capture)
        check_choices(capture, "capture=", CAPTURE)
        if isinstance(self.every, Mapping):
            for key, value in self.every.items():
                check_type(key, str, "every= keys", "step kinds (str)")
                check_count(value, f"every[{key!r}]", "record every N-th step of that kind")
            if "default" not in self.every:
                # Without it the steps of no declared kind would be recorded every step,
                # which `every={"eval": 10}` does not say.
                example = {"default": 1, **self.every}
                raise ArgumentValueError(
                    f"every={dict(self.every)!r} has no 'default' entry (the pace of the steps "
                    f"of no declared kind): add one, e.g. every={example!r}"
                )
            every: int | Mapping[str, int] = types.MappingProxyType(dict(self.every))
        else:
            check_count(self.every, "every=", "record every N-th step")
            every = self.every
        check_bool(self.train_only, "train_only=")
        check_count(self.max_bytes, "max_bytes=", "bytes", optional=True)
        check_count(self.keep_steps, "keep_steps=", "steps to keep", optional=True)
        if self.optimizer is not None:
            check_type(
                self.optimizer, torch.optim.Optimizer, "optimizer=", "a torch.optim.Optimizer"
            )
        # Frozen: the checked, normalised values replace what was passed.
        set_field = object.__setattr__
        set_field(self, "stash", self.stash if self.stash is not None else get_stash_fn())
        set_field(self, "include", include)
        set_field(self, "exclude", exclude)
        set_field(self, "capture", capture)
        set_field(self, "every", every)

    def every_of(self, kind: str) -> int:
        """Every how many steps of `kind` one is recorded (a kind `every` does not name
        goes at the `"default"` pace)."""
        every = self.every
        if isinstance(every, int):
            return every
        return every.get(kind, every["default"])
