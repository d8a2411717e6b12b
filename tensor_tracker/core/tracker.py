"""`Recorder`: attaches hooks to modules and keeps what they saw as a list of `Stash`.

The recording core of `tensor_tracker.Tracker`, which adds the ways to read a recording
(`to_frame`, ...) from the layers above."""

from __future__ import annotations

import difflib
import inspect
import math
import re
import sys
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any, TypeVar, cast, overload

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .._torch_compat import (
    compiled_callable,
    dynamo_has_compiled_code,
    forget_compiled_code,
    graph_task_id,
    queue_at_end_of_backward,
)
from .._validate import (
    check_bool,
    check_callable,
    check_choices,
    check_count,
    check_int,
    check_type,
)
from ..errors import (
    ArgumentTypeError,
    ArgumentValueError,
    MemoryBudgetError,
    NotRecordedError,
    TrackerStateError,
)
from .columns import GRAD, REFS, TRAINING, TUPLE, Columns, Site
from .dist import local_value, rank_info
from .grad_hooks import Gather, Tap, handle_is_dead, unrecordable
from .graph_sink import (
    can_emit,
    close_sink,
    emit_op,
    mark_trace_constant,
    new_sink_key,
    open_sink,
    traces_gradients,
)
from .memo import RecentTensors
from .records import Kind, LogEntry, Origin, Stash, StashFn, StashValueFn
from .stash_fns import BoundDefaultStash, default_stash_value, get_stash_fn, keep
from .structure import iter_leaves, iter_tensors

__all__ = ["CAPTURE", "Pattern", "Recorder", "stash"]

Pattern = str | re.Pattern[str] | None
"""A module-name filter: `None`, a regular expression string, or a compiled pattern."""

CAPTURE = ("outputs", "inputs", "params")
"""What `capture=` can name: module outputs, module inputs, and each module's own parameters."""


def _a_few(names: list[str], n: int = 6) -> str:
    """Up to `n` of `names`, and how many more there are."""
    shown = ", ".join(names[:n])
    return shown + (f", ... ({len(names) - n} more)" if len(names) > n else "")


def _caller_level() -> int:
    """The `stacklevel` of a warning that points at the user's code: the first frame
    outside this package."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("tensor_tracker."):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


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


def check_module(module: Any, argument: str = "module") -> None:
    """Raise `ArgumentTypeError` naming `argument` unless `module` is an `nn.Module`."""
    check_type(module, nn.Module, argument, "a torch.nn.Module (the model to track)")


def _value_nbytes(value: Any, seen: set[int] | None = None) -> int:
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


def _objects_nbytes(columns: Columns, seen: set[int]) -> int:
    """Bytes held by the values `columns` keeps as objects, each object counted once."""
    return sum(_value_nbytes(o.value if isinstance(o, Stash) else o, seen) for o in columns.objects)


def _traceable_params(reg: _Registration) -> bool:
    """Whether `reg`'s parameters can be recorded inside a compiled graph: plain non-empty
    tensors (not FSDP's `DTensor` shards, recorded as their local part)."""
    return all(local_value(p) is p and p.numel() > 0 for _, p in reg.params)


def _flat_tensors(value: Any) -> bool:
    """Whether `value` is a plain tuple of tensors and `None`s, with at least one tensor."""
    if type(value) is not tuple:
        return False
    found = False
    for item in value:
        if isinstance(item, Tensor):
            found = True
        elif item is not None:
            return False
    return found


_R = TypeVar("_R", bound="Recorder")

# What a traced hook's `emit` delivers (`_graph_hook`): the statistics of an output
# whose gradient is not hooked or is, of a parameter, of an output's gradient, or of the
# gradient of the output's base (for a view: it stands in when the view's is missing).
_OUTPUT = 0
_HOOKED_OUTPUT = 1
_PARAM = 2
_OUTPUT_GRAD = 3
_BASE_GRAD = 4


_AWAITED_CALLS = 64
"""The most calls of one traced hook call whose gradients a tracker still matches."""


class _Awaiting:
    """A compiled module call whose output's gradient is hooked (`_graph_hook`), and
    the backward passes (graph tasks) in which the output's and the base's hooks last
    delivered: the first of the two in a pass is recorded."""

    __slots__ = ("base_task", "call", "flags", "output_task", "site", "step")

    def __init__(self, site: int, call: int, step: int, flags: int) -> None:
        self.site = site
        self.call = call
        self.step = step
        self.flags = flags  # of the gradient record
        self.output_task = -1
        self.base_task = -1


_ACTIVE: list[Recorder] = []
"""Trackers with hooks attached now: those `stash` records into."""


ROLES = ("input", "target", "loss", "param", "helper")
"""The roles `stash(..., role=...)` accepts: they become the record's `kind`."""


def stash(name: str, value: Any, role: str | None = None) -> Any:
    """Record `value` (a tensor, or a structure of tensors) under `name` with every tracker
    that is recording now, as a record of the innermost tracked module whose `forward` is
    running (kind `"named"`, or `role`; attr `name`), and its gradient too when it has one;
    return `value` unchanged. Call it anywhere, e.g. inside `forward` for a tensor that is
    no module's output; with no tracker recording it does nothing (one list check).

    Outside any tracked module (e.g. the loss in the training loop) the record is the root
    module's (name `""`).

    Args:
        name: the name to record it under.
        value: what to record.
        role: what the tensor is, one of `ROLES` (`"input"`, `"target"`, `"loss"`,
            `"param"`, `"helper"`): the record's `kind`, so plots and `to_frame()` can
            select by it; `None` for `"named"`.

    Raises:
        TypeError, ValueError: `name` is not a str, or an unknown `role` (also with no
            tracker recording).

    Returns:
        `value`, so it can wrap an expression: `scores = stash("scores", q @ k.T)`.

    Example:
        >>> class Attention(nn.Module):
        ...     def forward(self, q):
        ...         scores = tensor_tracker.stash("scores", q @ q.T)
        ...         return scores.softmax(-1) @ q
        >>> attention = Attention()
        >>> with track(attention) as t:
        ...     attention(torch.randn(3, 4, requires_grad=True)).sum().backward()
        >>> [(s.name, s.kind, s.attr, s.grad) for s in t]
        [('', 'named', 'scores', False), ('', 'output', '', False), ('', 'output', '', True), ('', 'named', 'scores', True)]
    """
    if role is not None and role not in ROLES:
        raise ArgumentValueError(f"stash(role=...): one of {list(ROLES)} or None, got {role!r}")
    if not isinstance(name, str):  # also when nothing tracks: the model code is wrong
        check_type(name, str, "stash(name, value): name", "a str")
    if not _ACTIVE:
        return value
    frame = sys._getframe(1)
    kind = cast(Kind, role or "named")
    for tracker in list(_ACTIVE):
        tracker._stash_named(name, value, frame, kind)
    return value


_COMPILED_PREFIX = re.compile(r"^_orig_mod\.?")


def _is_compiled(module: nn.Module) -> bool:
    return type(module).__name__ == "OptimizedModule" and isinstance(
        getattr(module, "_orig_mod", None), nn.Module
    )


def _is_ddp(module: nn.Module) -> bool:
    return type(module).__name__ == "DistributedDataParallel" and isinstance(
        getattr(module, "module", None), nn.Module
    )


def _unwrapped_name(name: str, wrappers: list[str]) -> str:
    """`name` without the `module.` that the DDP wrappers named in `wrappers` add."""
    for wrapper in wrappers:
        inner = f"{wrapper}.module" if wrapper else "module"
        if name == inner:
            return wrapper
        if name.startswith(inner + "."):
            return (f"{wrapper}." if wrapper else "") + name[len(inner) + 1 :]
    return name


class _Guarded:
    """One of the library's own `StashValueFn`s, made never to raise into the user's pass:
    a tensor it cannot handle is kept as an `Unrecorded` (with one warning)."""

    __slots__ = ("fn",)

    def __init__(self, fn: StashValueFn) -> None:
        self.fn = fn

    def __call__(self, tensor: Tensor) -> Any:
        try:
            return self.fn(tensor)
        except Exception as error:
            return unrecordable(tensor, error)


def _guard(fn: StashValueFn) -> StashValueFn:
    # A user's own stash_value raises as it likes: that error is theirs to see.
    builtin = fn is default_stash_value or getattr(fn, "builtin_stash_value", False)
    return _Guarded(fn) if builtin else fn


class _Registration:
    """One registered module and what its hooks need, resolved once at `register` time."""

    __slots__ = (
        "arg_names",
        "calls",
        "grad",
        "module",
        "name",
        "no_grad_call",
        "no_grad_hooked",
        "param_step",
        "params",
        "sites",
        "traced_calls",
        "type",
    )

    def __init__(self, module: nn.Module, name: str, grad: bool) -> None:
        self.module = module
        self.name = name
        self.type = type(module)
        self.grad = grad
        self.calls = 0
        self.traced_calls = 0  # see Recorder._graph_hook
        self.sites: dict[tuple[Kind, str], int] = {}  # see Recorder._site
        self.param_step = -1
        # The last call that ran without autograd (as in reentrant activation checkpointing)
        # and the sites (output, an input...) whose gradients were hooked all the same
        # (tensors that required grad already): a recomputation of that call hooks the others.
        self.no_grad_call = -1
        self.no_grad_hooked: set[int] = set()
        self.params = list(module.named_parameters(recurse=False))
        self.arg_names: tuple[str, ...] = ()
        try:
            signature = inspect.signature(module.forward)
            self.arg_names = tuple(
                p.name
                for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            )
        except (TypeError, ValueError):  # builtins and odd callables have no signature
            pass

    def arg_name(self, index: int) -> str:
        return self.arg_names[index] if index < len(self.arg_names) else str(index)


class Recorder:
    """Records what modules compute, as a list of `Stash`; users get a `Tracker` (a
    `Recorder` that can also be read as a table) from `track` or `Tracker(...)`.

    A tracker is a sequence of stashes (`len`, indexing, iteration, in recording order) and a
    context manager that removes its hooks on exit.

    Args:
        stash: the `StashFn` that turns each hook `Event` into a `Stash`; default: a detached
            CPU copy of every tensor (`default_stash` with `default_stash_value`).
        capture: what to record for each registered module, one or more of `"outputs"` (the
            default), `"inputs"` (each positional/keyword argument holding tensors) and
            `"params"` (the module's own parameters, not its children's). With `grad=True`
            the gradients of each are recorded too (parameter gradients once accumulated).
        optimizer: also record this optimizer's per-parameter state (e.g. Adam's `exp_avg`
            and `exp_avg_sq`) for the registered modules' parameters after each
            `optimizer.step()`.
        every: record only every N-th step (see `step`); between recorded steps no hook is
            attached at all. A dict `{kind: N}` sets it per kind of step (see
            `step(kind=...)`; `"default"` for the steps of no declared kind, 1 unless given),
            so that each kind is recorded at least every N of its steps.
        train_only: record only while modules are in training mode.
        max_bytes: raise `MemoryBudgetError` (after removing the hooks, keeping what was
            stashed) instead of letting the stashes grow past this many bytes.
        keep_steps: keep only the records of the current step and the `keep_steps - 1`
            before it (older ones are dropped at each `step()`): a flight recorder of
            full copies, bounded in memory, e.g. beside a `stats=` tracker with
            `on_nonfinite="raise"`. Not with `stats=` (statistics are cheap to keep).

    Example:
        >>> tracker = Recorder()
        >>> tracker.register(model[0], "first")
        >>> model(x).sum().backward()
        >>> tracker.unregister()
        >>> [(s.name, s.grad) for s in tracker]
        [('first', False), ('first', True)]
    """

    def __init__(
        self,
        stash: StashFn | None = None,
        *,
        capture: str | Iterable[str] = "outputs",
        optimizer: torch.optim.Optimizer | None = None,
        every: int | Mapping[str, int] = 1,
        train_only: bool = False,
        max_bytes: int | None = None,
        keep_steps: int | None = None,
    ) -> None:
        if isinstance(capture, str):
            capture_set = {capture}
        else:
            check_type(capture, Iterable, "capture=", f"one or several of {CAPTURE}")
            capture_set = set(capture)
        check_choices(capture_set, "capture=", CAPTURE)
        if stash is not None:
            check_callable(stash, "stash=", "Event -> Stash")
        if isinstance(every, Mapping):
            for key, value in every.items():
                check_type(key, str, "every= keys", "step kinds (str)")
                check_count(value, f"every[{key!r}]", "record every N-th step of that kind")
        else:
            check_count(every, "every=", "record every N-th step")
        check_bool(train_only, "train_only=")
        check_count(max_bytes, "max_bytes=", "bytes", optional=True)
        check_count(keep_steps, "keep_steps=", "steps to keep", optional=True)
        if optimizer is not None:
            check_type(optimizer, torch.optim.Optimizer, "optimizer=", "a torch.optim.Optimizer")
        self._stash_fn: StashFn = stash if stash is not None else get_stash_fn()
        # With the standard StashFn the hooks build each Stash directly (no Event); only
        # stashes built by a user's own StashFn need the tracker to stamp call/step/kind.
        self._default_value: StashValueFn | None = (
            _guard(self._stash_fn.stash_value)
            if isinstance(self._stash_fn, BoundDefaultStash)
            else None
        )
        stash_value = getattr(self._stash_fn, "stash_value", None)
        # Values that a store keeps as columns (statistics) need no Python object each.
        make_store = getattr(stash_value, "store", None) if self._default_value else None
        self.stashes = Columns(make_store() if callable(make_store) else None)
        """The records, readable as a list of `Stash` (see `Columns`)."""
        if keep_steps is not None and self.stashes.store is not None:
            raise ArgumentValueError(
                "keep_steps= keeps the full copies of the last steps (a flight recorder); "
                "with stats= every step's statistics are kept anyway: drop one of them"
            )
        self._keep_steps = keep_steps
        # Statistics that a compiled model computes inside its graph (see _graph_hook).
        self._graph_fn: Any = (
            stash_value
            if self.stashes.store is not None and getattr(stash_value, "traceable", False)
            else None
        )
        # Compiled models (see _graph_hook): the key of the sink
        # their graphs deliver to (the same for good; open while hooks are attached), the
        # registration of each site, the calls whose gradient is awaited (by site and
        # traced hook call, latest run last), and the step (count) at which each parameter
        # site was last recorded.
        self._sink: int | None = None
        self._sink_open = False
        self._site_regs: dict[int, _Registration] = {}
        self._awaiting: dict[tuple[int, int], list[_Awaiting]] = {}
        self._param_steps: dict[int, int] = {}
        self._non_blocking = bool(getattr(stash_value, "non_blocking", False))
        self._pending_copies = False
        self._outputs = "outputs" in capture_set
        self._inputs = "inputs" in capture_set
        self._params = "params" in capture_set
        self._optimizer = optimizer
        self._every_default = every if isinstance(every, int) else every.get("default", 1)
        self._every: dict[str, int] = {} if isinstance(every, int) else dict(every)
        self._kind = "default"
        self._kind_index = 0
        self._kind_counts: dict[str, int] = {"default": 1}
        self.step_kinds: dict[int, str] = {}
        """The kind of each step declared with `step(kind=...)` other than "default"."""
        self._train_only = train_only
        self._max_bytes = max_bytes
        self._nbytes = 0
        self._counted: set[int] = set()  # ids of the objects max_bytes has counted
        self._step = 0
        self._step_count = 0
        self._registrations: list[_Registration] = []
        self.modules: weakref.WeakValueDictionary[str, nn.Module] = weakref.WeakValueDictionary()
        """Every module registered so far, by name, also after `unregister()` (held weakly:
        the tracker does not keep a model alive); what `summary()` counts parameters of."""
        # Compiled callables (torch.compile) of the registered models; see _attach_all.
        self._compiled: list[Callable[..., Any]] = []
        # What __exit__ detached, for re-entering `with tracker:`; see __enter__.
        self._resume: tuple[list[_Registration], list[Callable[..., Any]]] | None = None
        self._unregistered = False
        self._loose: _Registration | None = None  # see _stash_named
        self.logged: list[LogEntry] = []
        """Scalars and notes made with `log` and `note`, in order."""
        # Set by `track(..., stream_to=...)`: writes the records so far to disk and drops
        # them; called at `step()` and at the end of each `with` block.
        self._flush: Callable[[bool], None] | None = None
        self.stream_path: Any = None
        """The directory `track(..., stream_to=...)` writes to (None otherwise)."""
        self.rank: int | None = None
        """This process's rank under `torch.distributed` (`None` without it): read when the
        tracker is made and when a `with` block starts, never in a hook; `to_frame()` then
        has a `rank` column."""
        self.world_size: int | None = None
        """The number of ranks under `torch.distributed` (`None` without it)."""
        self._read_rank()
        self._recorded = False  # whether a hook recorded anything in the current block
        self._depth = 0  # nested `with tracker:` blocks; the outermost one detaches
        self._handles: list[RemovableHandle] = []
        self._grad_handles: list[Any] = []
        self._attached = False
        self._prune_at = 1024
        # A few, not one: a parent returning (loss, logits) hooks loss before it meets its
        # child's logits again.
        self._recent_taps = RecentTensors[Tap](8)
        # See `_watch_nonfinite`.
        self._nonfinite: (
            tuple[Callable[[], bool], Callable[[], None], Callable[[Any], None]] | None
        ) = None
        self._watched_task = -1

    def _read_rank(self) -> None:
        info = rank_info()
        if info is not None:
            self.rank, self.world_size = info

    # -- registration ------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        """Whether the current step is recorded (always, unless `every` > 1)."""
        return self._kind_index % self._every.get(self._kind, self._every_default) == 0

    @property
    def step_kind(self) -> str:
        """The kind of the current step (see `step(kind=...)`)."""
        return self._kind

    def register(self, module: nn.Module, name: str = "", grad: bool = True) -> None:
        """Record `module`'s forward output under `name` and, when `grad` is true, the
        gradient with respect to its output(s) (plus inputs/parameters per `capture`).

        Example:
            >>> tracker.register(model[0], "first", grad=False)
        """
        check_module(module)
        check_type(name, str, "name", "the module's name (str)")
        check_bool(grad, "grad=")
        registration = _Registration(module, name, grad)
        self._registrations.append(registration)
        self.modules[name] = module
        self._unregistered = False
        if self.recording:
            self._attach(registration)

    def register_all(
        self,
        module: nn.Module,
        grad: bool = True,
        include: Pattern = None,
        exclude: Pattern = None,
    ) -> None:
        """`register` every module of `module.named_modules()` whose name matches `include`
        (or `include` is None) and does not match `exclude` (both searched with `re.search`).
        The root's name is `""`; children have dotted names like `"0.linear"`.

        Example:
            >>> tracker.register_all(model, include=r"layers\\.\\d+$", exclude="dropout")
        """
        check_module(module)
        check_bool(grad, "grad=")
        include_re = compile_pattern(include, "include")
        exclude_re = compile_pattern(exclude, "exclude")
        wrappers: list[str] = []
        included = 0
        for name, child in module.named_modules():
            compiled = compiled_callable(child)
            if compiled is not None:
                self._compiled.append(compiled)  # before registering: _attach looks at it
            if _is_compiled(child):
                continue  # its _orig_mod is registered instead, under the same name
            # torch.compile wraps modules; they keep the names they have uncompiled.
            name = _COMPILED_PREFIX.sub("", name.replace("._orig_mod", ""))
            # So does DistributedDataParallel (its `.module` is registered under its name).
            name = _unwrapped_name(name, wrappers)
            if _is_ddp(child):
                wrappers.append(name)
                continue
            if include_re is not None and not include_re.search(name):
                continue
            included += 1
            if exclude_re is not None and exclude_re.search(name):
                continue
            self.register(child, name, grad)
        if not included and include_re is not None:
            names = [n for n, _ in module.named_modules()]
            warnings.warn(
                f"include={include_re.pattern!r} matches no module name, so nothing will be "
                f"recorded (it is searched with re.search in the names: "
                f"{_a_few([repr(n) for n in names])})",
                UserWarning,
                stacklevel=_caller_level(),
            )
        if self._compiled and self._attached:
            self._forget_compiled_code()

    def unregister(self) -> None:
        """Remove every hook this tracker attached and forget the registered modules; the
        stashes stay. (Leaving a `with tracker:` block also removes the hooks, but keeps the
        modules, for a later `with tracker:` to record them again.)"""
        self._detach()
        self._registrations = []
        self._compiled = []
        self._resume = None
        self._unregistered = True

    def log(self, name: str, value: float | Tensor) -> None:
        """Record a scalar for the current step, e.g. the loss or the learning rate; on
        every step, also those `every=` does not record tensors in. A tensor is kept as it
        is (no host synchronisation now) and read when the log is.

        Args:
            name: the scalar's name.
            value: a number or a one-element tensor.

        Example:
            >>> with track(model, stats=True) as t:
            ...     loss = model(x).square().mean()
            ...     t.log("loss", loss)
            >>> [(e.step, e.name) for e in t.logged]
            [(0, 'loss')]
        """
        check_type(name, str, "log(name, value): name", "a str")
        if not name:
            raise ArgumentValueError("log(name, value): name must be a non-empty str, got ''")
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ArgumentValueError(
                    f"log({name!r}, value): value must hold one number, got a tensor of shape "
                    f"{tuple(value.shape)}"
                )
            value = value.detach()
        else:
            check_type(value, (int, float), "log(name, value): value", "a number or a tensor")
            value = float(value)
        self.logged.append(LogEntry(self._step, name, value, None))

    def note(self, text: str) -> None:
        """Write a note for the current step (e.g. "lr halved"); saved with the recording.

        Example:
            >>> t.note("switched to the long sequences")
        """
        check_type(text, str, "note(text)", "a str")
        self.logged.append(LogEntry(self._step, None, math.nan, text))

    def clear(self) -> None:
        """Drop all stashes (the hooks stay attached)."""
        self.stashes.clear()
        self._nbytes = 0
        self._counted.clear()

    def step(self, n: int | None = None, *, kind: str = "default", keep: bool = True) -> None:
        """Advance to the next step (or to step `n`, for an x-axis of your choice such as
        epochs or tokens seen). Later stashes carry the new `step`; call indices restart.
        With `every=N`, hooks are attached only during every N-th step.

        Args:
            n: the number of the next step (default: this one's plus 1), >= 0.
            kind: the kind of the next step, e.g. `"long_sequence"`; with
                `every={"default": 10, "long_sequence": 2}` each kind is recorded at its
                own pace (every N-th step of that kind). `step_kinds` keeps the kinds.
            keep: `False` drops what the step that ends now recorded (decide after the
                fact, e.g. keep only steps whose loss jumped); its scalars and notes stay.

        Example:
            >>> with track(model, stats=True) as tracker:
            ...     for batch in loader:
            ...         loss_fn(model(batch)).backward(); opt.step(); opt.zero_grad()
            ...         tracker.step()
            >>> sorted(set(tracker.to_frame()["step"]))
            [0, 1, 2]
        """
        if n is not None:
            # Readers take steps as >= 0: a step -1 would pass for real records.
            check_count(n, "step(n): n", "the next step's number", minimum=0)
        check_type(kind, str, "step(kind=...)", "a str naming the kind of the next step")
        if not kind:
            raise ArgumentValueError('step(kind=...) must be a non-empty str, got ""')
        check_bool(keep, "step(keep=...)")
        self._check_nonfinite()  # forward-only loops have no end of backward
        if not keep:
            self._drop_step()
        if self._flush is not None:
            self._flush(False)
        if self._keep_steps is not None:
            self.stashes.keep_recent_steps(self._keep_steps - 1)
            self._recount()
        # A gradient may still come after step(), for the calls of the step ending now.
        self._awaiting = {
            key: kept
            for key, awaiting in self._awaiting.items()
            if (kept := [a for a in awaiting if a.step == self._step])
        }
        self._step = self._step + 1 if n is None else n
        self._step_count += 1
        self._kind = kind
        self._kind_index = self._kind_counts.get(kind, 0)
        self._kind_counts[kind] = self._kind_index + 1
        if kind != "default":
            self.step_kinds[self._step] = kind
        for registration in self._registrations:
            registration.calls = 0
        if self.recording and not self._attached:
            self._attach_all()
        elif not self.recording:
            self._detach()

    def _drop_step(self) -> None:
        """Drop the records of the current step (`step(keep=False)`)."""
        columns = self.stashes
        if columns.step_values and columns.step_values[-1] == self._step:
            self._sync()
            columns.drop_from(columns.step_rows[-1])
            self._recount()

    def _recount(self) -> None:
        """Count again the bytes `max_bytes` holds against, after records were dropped."""
        if self._max_bytes is not None:
            self._counted.clear()
            self._nbytes = self._held(self._counted)

    def _held(self, seen: set[int]) -> int:
        """Bytes held by the records; each object in `seen` (ids) counted once."""
        store = self.stashes.store
        return (0 if store is None else store.nbytes) + _objects_nbytes(self.stashes, seen)

    def _attach_all(self) -> None:
        for registration in self._registrations:
            self._attach(registration)
        if self._compiled and self._attached:
            self._forget_compiled_code()

    def _watch_nonfinite(
        self,
        seen: Callable[[], bool],
        handler: Callable[[], None],
        notice: Callable[[Any], None],
    ) -> None:
        """At the end of every backward pass that records gradients, and at `step()`, call
        `handler` if `seen()` (which may wait for the device: once per pass, never in a
        hook) says a non-finite value was recorded; `handler` may raise, which the
        `backward()` call then raises, before any optimizer step. `seen` watches what the
        store keeps; the values kept as objects (a dict or nested output's statistics) are
        shown to `notice` as they are recorded."""
        self._nonfinite = (seen, handler, notice)

    def _check_nonfinite(self) -> None:
        if self._nonfinite is not None:
            seen, handler, _ = self._nonfinite
            if seen():
                self._nonfinite = None  # once: the handler decides what happens next
                handler()

    def _forget_compiled_code(self) -> None:
        """Make compiled models see the hooks just attached (see `_torch_compat`)."""
        modules = [reg.module for reg in self._registrations]
        if not forget_compiled_code(self._compiled, modules):
            warnings.warn(
                "tensor_tracker: this version of torch lacks what is needed to make "
                "torch.compile recompile the tracked model with the tracking hooks; if the "
                "compiled model already ran, nothing may be recorded. Call "
                "torch.compiler.reset() before tracking, or track the uncompiled model "
                "(compiled._orig_mod).",
                RuntimeWarning,
                stacklevel=3,
            )

    def _attach(self, reg: _Registration) -> None:
        if self._optimizer is not None and not self._attached:
            self._handles.append(self._optimizer.register_step_post_hook(self._optimizer_hook))
        if not self._attached:
            _ACTIVE.append(self)
        self._attached = True
        module = reg.module
        # Under torch.compile, Dynamo would trace the hooks (slowly, recompiling as their
        # state changes); disabled, it calls them as they are. The wrapper costs a little
        # per call, so only where Dynamo may run (torch.compile imports it; so does
        # transformers).
        untraced = bool(self._compiled) or "torch._dynamo" in sys.modules
        # Statistics computed in a compiled model's graphs and handed out by `emit` (see
        # `_graph_hook`): the outputs', and the gradients' where Dynamo traces a tensor hook
        # on an intermediate tensor (torch >= 2.13) and no input is captured (inputs'
        # hooks stay outside the graph, a graph break each).
        in_graph = (
            self._outputs
            and bool(self._compiled)
            and self._graph_fn is not None
            and can_emit()
            and (not reg.grad or (traces_gradients() and not self._inputs))
        )
        if in_graph:
            hook = self._graph_hook(reg)
            self._handles.append(module.register_forward_hook(hook, with_kwargs=True))
        elif self._outputs:
            # Otherwise one graph break per module, at the disabled hook.
            hook = self._forward_hook(reg)
            if untraced:
                hook = torch.compiler.disable(hook)  # type: ignore[no-untyped-call]
            self._handles.append(module.register_forward_hook(hook, with_kwargs=True))
        if in_graph and not self._inputs and self._params and reg.params:
            if _traceable_params(reg):
                graph_pre_hook = self._graph_param_hook(reg)
                self._handles.append(module.register_forward_pre_hook(graph_pre_hook))
            else:
                pre_hook = torch.compiler.disable(self._pre_hook(reg))  # type: ignore[no-untyped-call]
                self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        elif self._inputs or (self._params and not in_graph):
            pre_hook = self._pre_hook(reg)
            if untraced:
                pre_hook = torch.compiler.disable(pre_hook)  # type: ignore[no-untyped-call]
            self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        if self._params and reg.grad:
            for attr, param in reg.params:
                if param.requires_grad:
                    self._handles.append(
                        param.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                            self._param_grad_hook(reg, attr)
                        )
                    )

    def _detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        for handle in self._grad_handles:
            handle.remove()
        self._handles.clear()
        self._grad_handles.clear()
        self._attached = False
        self._recent_taps.clear()
        if self._sink_open:
            assert self._sink is not None
            close_sink(self._sink)
            self._sink_open = False
        self._awaiting.clear()
        _ACTIVE[:] = [t for t in _ACTIVE if t is not self]

    def _stash_named(self, name: str, value: Any, frame: Any, kind: Kind) -> None:
        """Record `value` for `stash`, under the innermost registered module whose
        `forward` is on the call stack from `frame` up."""
        if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
            return
        by_module = {id(reg.module): reg for reg in self._registrations}
        reg = None
        while frame is not None and reg is None:
            owner = frame.f_locals.get("self")
            reg = None if owner is None else by_module.get(id(owner))
            frame = frame.f_back
        if reg is None:
            reg = next((r for r in self._registrations if r.name == ""), None)
            if reg is None:
                if self._loose is None:  # for records outside every tracked module
                    self._loose = _Registration(nn.Module(), "", True)
                reg = self._loose
        training = reg.module.training
        if self._train_only and not training:
            return
        # Inside forward the forward hook has not counted this call yet (the pre-hook has,
        # when there is no forward hook).
        call = reg.calls if self._outputs else max(reg.calls - 1, 0)
        flags = TRAINING if training else 0
        site = self._site(reg, kind, name)
        self._record(site, call, self._step, flags, value)
        if reg.grad:
            self._hook_grads(reg, site, call, self._step, flags, value)

    # -- hooks (hot path: no host synchronisation, little Python) -------------------------

    def _site(self, reg: _Registration, kind: Kind, attr: str) -> int:
        """The `Columns` site of (`reg`, `kind`, `attr`), resolved once."""
        site = reg.sites.get((kind, attr))
        if site is None:
            site = reg.sites[kind, attr] = self.stashes.site_id(reg.name, reg.type, kind, attr)
        return site

    def _forward_hook(self, reg: _Registration) -> Callable[..., None]:
        site = self._site(reg, "output", "")

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            training = module.training
            if self._train_only and not training:
                return
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                self._recomputed(reg, output, site)
                return
            call = reg.calls
            reg.calls = call + 1
            flags = TRAINING if training else 0
            step = self._step
            self._record(site, call, step, flags, output, args, kwargs)
            if reg.grad:
                self._hook_grads(reg, site, call, step, flags, output)

        return hook

    def _untraced_hook(self, reg: _Registration) -> Callable[..., None]:
        """`_forward_hook` behind `torch.compiler.disable`: what a traced hook calls (behind
        a graph break) for an output it cannot trace."""
        return cast(Callable[..., None], torch.compiler.disable(self._forward_hook(reg)))  # type: ignore[no-untyped-call]

    def _graph_hook(self, reg: _Registration) -> Callable[..., None]:
        """The forward hook of a compiled model's module with `stats=`: TorchDynamo traces
        it, and the gradient hooks it registers when gradients are recorded (torch >=
        2.13), into the model's graphs, so it adds no graph break. The forward and gradient
        statistics are computed in the graphs and reach `_deliver` through `emit` (see
        `graph_sink`) as the graphs run; nothing in the hooks changes between calls, so
        nothing recompiles (a hook appending to a Python list would make Dynamo guard on
        its length). What it cannot trace (a non-tensor or empty output, a leaf whose
        gradient is recorded) runs eagerly, behind a graph break.

        As in eager mode (`grad_hooks.Tap`), the gradient of an output that is a view of a
        tensor of the same size (`nn.Linear`'s output for a 3-D input) is read from that
        tensor when the view's own hook does not fire (the view was modified in place)."""
        site = self._site(reg, "output", "")
        self._site_regs[site] = reg
        fn = self._graph_fn
        emit = emit_op()
        if self._sink is None:
            self._sink = new_sink_key()
        sink = self._sink
        if not self._sink_open:
            open_sink(sink, self._deliver)
            self._sink_open = True
        # Each traced call of the hook gets a number, fixed in the compiled graph, that its
        # gradient hooks deliver with: it tells which forward call a gradient belongs to,
        # whatever order the compiled code runs the hooks in. Numbered from 0 at every
        # attach, so that the graphs traced again are the same (Inductor's cache).
        reg.traced_calls = 0

        def traced_call() -> int:
            number = reg.traced_calls
            reg.traced_calls = number + 1
            return number

        traced_call = mark_trace_constant(traced_call)
        eager = self._untraced_hook(reg)

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            training = module.training
            if self._train_only and not training:
                return
            # A hook on a leaf (a module returning a parameter or its input) would be
            # registered for good, outside the graph: that one takes the eager path.
            if (
                not isinstance(output, Tensor)
                or output.numel() == 0
                or (reg.grad and output.requires_grad and output.is_leaf)
            ):
                eager(module, args, kwargs, output)
                return
            call_id = traced_call()  # a constant in the compiled graph
            what = _OUTPUT
            if reg.grad and output.requires_grad:
                what = _HOOKED_OUTPUT

                # Both return the gradient unchanged: under compiled autograd a hook that
                # returns None replaces it with None.
                def grad_hook(grad: Tensor) -> Tensor:
                    emit(fn.graph_raw(grad), sink, site, call_id, grad.numel(), GRAD, _OUTPUT_GRAD)
                    return grad

                def base_hook(grad: Tensor) -> Tensor:
                    emit(fn.graph_raw(grad), sink, site, call_id, grad.numel(), GRAD, _BASE_GRAD)
                    return grad

                output.register_hook(grad_hook)  # type: ignore[no-untyped-call]
                base = output._base
                if base is not None and base.requires_grad and base.numel() == output.numel():
                    base.register_hook(base_hook)  # type: ignore[no-untyped-call]
            flags = TRAINING if training else 0
            emit(fn.graph_raw(output), sink, site, call_id, output.numel(), flags, what)

        return hook

    def _graph_param_hook(self, reg: _Registration) -> Callable[..., None]:
        """The forward pre-hook of a `_graph_hook`'s module with `capture="params"`:
        traced into the graph, it computes the statistics of the module's parameters at
        every call, and `_deliver` records them at the first call of each step."""
        fn = self._graph_fn
        emit = emit_op()
        sink = self._sink
        assert sink is not None  # the forward hook is made first
        params = [(self._site(reg, "param", attr), p) for attr, p in reg.params]

        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            training = module.training
            if self._train_only and not training:
                return
            flags = TRAINING if training else 0
            for site, param in params:
                emit(fn.graph_raw(param), sink, site, -1, param.numel(), flags, _PARAM)

        return hook

    def _deliver(
        self, raw: Tensor, site: int, call_id: int, numel: int, flags: int, what: int
    ) -> None:
        """Record statistics that a `_graph_hook` computed in a compiled graph, as the
        graph runs. A forward call is numbered here, in the order the graph runs the hooks;
        a gradient belongs to the latest run of the traced hook call (`site`, `call_id`)
        whose gradient has not come yet in this backward pass."""
        if what == _PARAM:
            if self._param_steps.get(site) != self._step_count:
                self._param_steps[site] = self._step_count
                self._put_raw(site, 0, self._step, flags, raw, numel)
            return
        if what in (_OUTPUT, _HOOKED_OUTPUT):
            reg = self._site_regs[site]
            call = reg.calls
            reg.calls = call + 1
            self._put_raw(site, call, self._step, flags, raw, numel)
            if what == _HOOKED_OUTPUT:
                entry = _Awaiting(site, call, self._step, flags | GRAD | TUPLE)
                recent = self._awaiting.setdefault((site, call_id), [])
                recent.append(entry)
                # step() forgets the calls of earlier steps; a loop that never calls it
                # must not grow this without bound (a graph kept with retain_graph for
                # more than this many later calls would find no call to match).
                if len(recent) > _AWAITED_CALLS:
                    del recent[0]
            return
        task = graph_task_id()
        from_base = what == _BASE_GRAD
        for awaiting in reversed(self._awaiting.get((site, call_id), ())):
            if (awaiting.base_task if from_base else awaiting.output_task) != task:
                break
        else:
            return  # no call of this tracker's awaits it (e.g. it ran before `with`)
        # The view's own hook fires unless the view was modified in place; its base's fires
        # either way: the first of the two in this pass is recorded (both carry the same
        # values, unless the base has other uses than the view: see `grad_hooks`).
        if from_base:
            awaiting.base_task = task
            first = awaiting.output_task != task
        else:
            awaiting.output_task = task
            first = awaiting.base_task != task
        if first:
            self._put_raw(awaiting.site, awaiting.call, awaiting.step, awaiting.flags, raw, numel)
            if self._nonfinite is not None and task != self._watched_task:
                self._watched_task = task
                queue_at_end_of_backward(self._check_nonfinite)

    def _put_raw(
        self, site: int, call: int, step: int, flags: int, raw: Tensor, numel: int
    ) -> None:
        """Record statistics computed in a compiled graph as record (`site`, `call`, ...)."""
        self._recorded = True
        store = self.stashes.store
        assert store is not None
        before = store.nbytes
        ref = getattr(store, "put_raw")(raw, numel)  # noqa: B009 (a StatsStore's)
        if self._max_bytes is not None:
            self._count(site, flags, store.nbytes - before)
        self.stashes.add(site, call, step, flags, ref)

    def _pre_hook(self, reg: _Registration) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            training = module.training
            if self._train_only and not training:
                return
            inputs = [(reg.arg_name(i), v) for i, v in enumerate(args)] if self._inputs else []
            if self._inputs:
                inputs += kwargs.items()
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                for attr, value in inputs:
                    self._recomputed(reg, value, self._site(reg, "input", attr))
                return
            call = reg.calls
            if not self._outputs:  # otherwise the forward hook counts the call
                reg.calls = call + 1
            flags = TRAINING if training else 0
            step = self._step
            for attr, value in inputs:
                if next(iter_tensors(value), None) is not None:
                    site = self._site(reg, "input", attr)
                    self._record(site, call, step, flags, value, args, kwargs)
                    if reg.grad:
                        self._hook_grads(reg, site, call, step, flags, value)
            if self._params and reg.param_step != self._step_count:
                reg.param_step = self._step_count
                for attr, param in reg.params:
                    site = self._site(reg, "param", attr)
                    self._record(site, 0, step, flags, local_value(param))

        return hook

    def _recomputed(self, reg: _Registration, value: Any, site: int) -> None:
        """Activation checkpointing re-runs a forward pass during `backward()`: its values
        were recorded already, but when the first run had no autograd graph
        (`use_reentrant=True`), this run's graph is the one whose gradients come back."""
        call = max(reg.calls - 1, 0)
        if reg.grad and reg.no_grad_call == call and site not in reg.no_grad_hooked:
            flags = TRAINING if reg.module.training else 0
            self._hook_grads(reg, site, call, self._step, flags, value)

    def _param_grad_hook(self, reg: _Registration, attr: str) -> Callable[[Tensor], None]:
        site = self._site(reg, "param", attr)

        def hook(param: Tensor) -> None:
            training = reg.module.training
            if self._train_only and not training:
                return
            flags = GRAD | TUPLE | (TRAINING if training else 0)
            grad = param.grad
            self._record(site, 0, self._step, flags, None if grad is None else local_value(grad))

        return hook

    def _optimizer_hook(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        for reg in self._registrations:
            training = reg.module.training
            if self._train_only and not training:
                continue
            for attr, param in reg.params:
                for key, value in optimizer.state.get(param, {}).items():
                    # Skip scalars such as Adam's "step"; keep per-element state.
                    if isinstance(value, Tensor) and value.shape == param.shape:
                        site = self._site(reg, "optimizer", f"{attr}.{key}")
                        flags = TRAINING if training else 0
                        self._record(site, 0, self._step, flags, local_value(value))

    def _hook_grads(
        self, reg: _Registration, site: int, call: int, step: int, flags: int, value: Any
    ) -> None:
        """Hook the gradients of the tensors in `value`, recorded as one gradient stash per
        backward pass (see `grad_hooks`). Tensor hooks add no autograd node, so gradients
        stay bitwise identical and later in-place ops on `value` are allowed; a hook
        registered now sees the gradient of the value as it is now."""
        if isinstance(value, Tensor):  # the common case, without the lists below
            tensors = None
            wanted: Any = value.requires_grad
        else:
            tensors = list(iter_tensors(value))
            wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
        if not torch.is_grad_enabled():
            if reg.no_grad_call != call:
                reg.no_grad_call = call
                reg.no_grad_hooked.clear()
            if wanted:
                reg.no_grad_hooked.add(site)
        if not wanted:
            return
        # partial, not a lambda: one Python frame fewer per gradient.
        if tensors is None:
            self._hook_tensor(value, partial(self._record, site, call, step, flags | GRAD | TUPLE))
            return
        gather = Gather(len(tensors), partial(self._record, site, call, step, flags | GRAD))
        for i in wanted:
            tap = self._hook_tensor(tensors[i], gather.callback(i))
            gather.add(i, tensors[i], tap)

    def _hook_tensor(self, tensor: Tensor, callback: Callable[[Any], None]) -> Tap:
        """Call `callback` with `tensor`'s gradient. A parent module often returns its last
        child's output object unchanged; then one hook serves both, and calls the parent's
        callback first so gradients are recorded from the output back towards the input."""
        tap = self._recent_taps.get(tensor)
        if tap is not None:
            tap.callbacks.insert(0, callback)
            return tap
        tap = Tap(tensor, [callback])
        handles = self._grad_handles
        handles += tap.handles
        if len(handles) > self._prune_at:
            # Handles of finished graphs are dead; forget them so long runs don't grow.
            handles[:] = [h for h in handles if not handle_is_dead(h)]
            self._prune_at = max(1024, 2 * len(handles))
        self._recent_taps.put(tensor, tap)
        return tap

    def _record(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Keep `value` as record (`site`, `call`, `step`, `flags`); with `TUPLE` in `flags`,
        `value` is the one gradient of a 1-tuple."""
        self._recorded = True  # see __exit__
        if self._nonfinite is not None and flags & GRAD:
            task = graph_task_id()
            if task != self._watched_task:
                self._watched_task = task
                queue_at_end_of_backward(self._check_nonfinite)
        stash_value = self._default_value
        if stash_value is None:
            self._record_custom(site, call, step, flags, value, args, kwargs)
            return
        columns = self.stashes
        store = columns.store
        tensor = isinstance(value, Tensor)
        if store is not None and (tensor or _flat_tensors(value)):
            counting = self._max_bytes is not None
            before = store.nbytes if counting else 0
            try:
                if tensor:
                    ref = store.put(value)
                else:  # e.g. attention's (output, None)
                    refs = tuple(None if v is None else store.put(v) for v in value)
            except Exception:  # the object path records it, or says why it could not
                pass
            else:
                if counting:
                    self._count(site, flags, store.nbytes - before)
                if tensor:
                    columns.add(site, call, step, flags, ref)
                else:
                    columns.add_object(site, call, step, flags | REFS, refs)
                return
        # The standard StashFn's result, without building an Event or a Stash.
        kept = keep(value, stash_value)
        if self._nonfinite is not None:
            self._nonfinite[2](kept)
        if self._max_bytes is not None:
            # Counted like `nbytes`: an object shared with an earlier stash (a parent
            # returning its child's output) is counted once.
            self._count(site, flags, _value_nbytes(kept, self._counted))
        self._pending_copies = self._non_blocking
        columns.add_object(site, call, step, flags, kept)

    def _record_custom(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None:
        """Record through a user's own `StashFn`, which gets an `Event`."""
        name, cls, kind, attr = self.stashes.sites[site]
        origin = Origin(name, cls, call, step, kind, attr, bool(flags & TRAINING), site)
        if flags & TUPLE:
            value = (value,)
        stash = self._stash_fn(origin.event(bool(flags & GRAD), value, args, kwargs or {}))
        if not isinstance(stash, Stash):
            self._bad_stash(stash)
        origin.stamp(stash)
        if self._max_bytes is not None:
            self._count(site, flags, _value_nbytes(stash.value, self._counted))
        self.stashes.append(stash)

    def _count(self, site: int, flags: int, size: int) -> None:
        """Count `size` more bytes against `max_bytes`; stop tracking past it."""
        assert self._max_bytes is not None
        if self._nbytes + size > self._max_bytes:
            self.unregister()
            name, _, kind, _ = self.stashes.sites[site]
            grad = "gradient " if flags & GRAD else ""
            raise MemoryBudgetError(
                f"tensor_tracker: stashing the {kind} {grad}of {name or '<root>'!r} "
                f"({size:,} bytes) would exceed max_bytes={self._max_bytes:,}. Tracking "
                f"stopped (hooks removed); the {len(self.stashes)} stashes so far "
                f"({self._nbytes:,} bytes) are kept. "
                "To stash less: stats=True (a few numbers per tensor instead of the tensor), "
                "include=/exclude= to track fewer modules, grad=False, sample=N, "
                "dtype=torch.bfloat16, every=N, or a larger max_bytes."
            )
        self._nbytes += size

    def _bad_stash(self, stash: object) -> None:
        self.unregister()
        raise ArgumentTypeError(
            "stash= must return a tensor_tracker.Stash (e.g. "
            "Stash(event.name, event.type, event.grad, value)), but it returned "
            f"{type(stash).__name__}. Tracking stopped (hooks removed); the "
            f"{len(self.stashes)} stashes so far are kept."
        )

    # -- reading ---------------------------------------------------------------------

    def _sync(self) -> None:
        if self._pending_copies:
            torch.cuda.synchronize()
            self._pending_copies = False

    @property
    def nbytes(self) -> int:
        """Bytes held by the tensors in the stashes (statistics count their few numbers);
        a copy shared by several stashes counts once."""
        self._sync()
        return self._held(set())

    def __len__(self) -> int:
        return len(self.stashes)

    @overload
    def __getitem__(self, index: int) -> Stash: ...
    @overload
    def __getitem__(self, index: slice) -> list[Stash]: ...
    @overload
    def __getitem__(self, index: str) -> list[Stash]: ...
    def __getitem__(self, index: int | slice | str) -> Stash | list[Stash]:
        """`tracker[i]`: the i-th stash; `tracker[i:j]`: a list of them; `tracker["0.linear"]`:
        the stashes of the module of that name, in recording order.

        Raises:
            NotRecordedError: (a `KeyError`) no stash of a module of that name; the message
                names close matches.
            IndexError: `i` out of range.
        """
        self._sync()
        if isinstance(index, str):
            found = self._where(lambda site: site.name == index)
            if found:
                return found
            names = list(dict.fromkeys(site.name for site in self.stashes.sites))
            close = difflib.get_close_matches(index, names, n=5, cutoff=0.5)
            hint = f"close matches: {close}" if close else f"recorded: {_a_few(names)}"
            raise NotRecordedError(f"no stash of a module named {index!r}; {hint}")
        if not isinstance(index, (int, slice)) or isinstance(index, bool):
            check_int(index, "tracker[index]", "an int, a slice or a module name (str)")
        return self.stashes[index]

    def __iter__(self) -> Iterator[Stash]:
        self._sync()
        return iter(self.stashes)

    def _where(
        self, keep: Callable[[Site], bool], grad: bool | None = None, step: int | None = None
    ) -> list[Stash]:
        """The stashes whose site (name, class, kind, attr) `keep` accepts and, unless None,
        whose `grad` and `step` equal these; the others are never built (see
        `Columns.where`), so choosing a few modules of a long run is fast."""
        self._sync()
        return self.stashes.where(keep, grad, step)

    def _steps_where(self, keep: Callable[[Site], bool]) -> list[int]:
        """The steps at which a site `keep` accepts was recorded (see `Columns.steps_where`)."""
        self._sync()
        return self.stashes.steps_where(keep)

    def _first_of_sites(self) -> list[Stash]:
        """The first forward and first gradient stash of each (module, kind, attr), in
        recording order (see `Columns.first_of_sites`)."""
        self._sync()
        return self.stashes.first_of_sites()

    def __str__(self) -> str:
        return f"Tracker(stashes={len(self.stashes)}, tracking={len(self._handles)})"

    __repr__ = __str__

    def __enter__(self: _R) -> _R:
        """Start a `with` block. Entering again a tracker whose block ended attaches the
        hooks to the same modules again, so that one tracker can record several runs; a
        tracker emptied by `unregister()` (or a `MemoryBudgetError`) raises instead."""
        if self._depth:
            self._depth += 1
            return self
        if self._resume is not None:
            (registrations, compiled), self._resume = self._resume, None
            # Modules registered since the block ended are already attached; keep them.
            self._registrations = registrations + self._registrations
            self._compiled = compiled + self._compiled
            self._unregistered = False
            if self.recording:
                for registration in registrations:
                    self._attach(registration)
                if self._compiled:
                    self._forget_compiled_code()
        elif self._unregistered and not self._registrations:
            raise TrackerStateError(
                "tensor_tracker: this tracker has no modules to track: unregister() (or a "
                "MemoryBudgetError) removed them, so `with tracker:` would record nothing. "
                "Register them again first (tracker.register_all(model)), or start a new "
                "tracker with tensor_tracker.track(model)."
            )
        self._read_rank()  # the process group may have started after the tracker was made
        self._recorded = False
        self._depth = 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth:
            return
        resume = (self._registrations, self._compiled)
        # Not len(self.stashes): clear() and keep_steps= drop records made in the block.
        silent = self._attached and not self._recorded
        unregistered = self._unregistered
        self.unregister()
        if self._flush is not None:
            self._flush(True)
        self._unregistered = unregistered  # by unregister() or MemoryBudgetError in the block
        if resume[0]:
            self._resume = resume
        if exc_type is None and silent and dynamo_has_compiled_code():
            warnings.warn(
                "tensor_tracker: nothing was recorded in this `with` block. If the model ran "
                "under torch.compile, it may have run code compiled before the hooks were "
                "added (torch.compile does not recompile when hooks are added). Track the "
                "compiled model itself (track(torch.compile(model))), which recompiles it, "
                "or call torch.compiler.reset() before tracking, or track an uncompiled "
                "model.",
                RuntimeWarning,
                stacklevel=2,
            )
