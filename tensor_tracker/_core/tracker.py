"""`Recorder`: registers modules, attaches hooks to them, and keeps what they saw as a
list of `Stash`; steps, `with` blocks, and `stash()` for values that are no module's output.

The recording core of `tensor_tracker.Tracker`, which adds the ways to read a recording
(`to_frame`, ...) from the layers above. A `Recorder` is a facade over parts that each do
one job and get what they need as arguments: the `Clock` (steps, `every=`), the
`RecordSink` (where records go: store, budget, `keep_steps=`, non-finite watch), the
`Registrations` (modules and hook handles), the `EagerHooks` and the `CompiledHooks`
(siblings, both writing to the sink), and `plan.plan_hooks`, which decides the hooks of
each module; the options, checked once, in `options`."""

from __future__ import annotations

import difflib
import math
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast, overload

from torch import Tensor, nn

from .._torch_compat import (
    compiled_callable,
    dynamo_has_compiled_code,
    hooks_in_frame,
    untraced,
)
from .._validate import check_bool, check_count, check_int, check_type
from ..errors import ArgumentValueError, NotRecordedError, TrackerStateError
from .clock import Clock
from .columns import Columns, Site
from .compiled import CompiledHooks, recompile, traceable_params
from .dist import rank_info
from .graph_sink import can_emit, traces_gradients
from .hooks import EagerHooks
from .naming import module_names
from .ops import GraphOpsMode, OpsHooks
from .options import CAPTURE, Options, Pattern, check_filters, compile_pattern
from .plan import ModuleFacts, Setting, inner_in_graph, plan_hooks
from .records import Kind, LogEntry, Stash
from .registrations import Registration, Registrations
from .sink import RecordSink
from .updates import UpdateHooks

__all__ = ["CAPTURE", "Options", "Pattern", "Recorder", "compile_pattern", "stash", "tap"]


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


def check_module(module: Any, argument: str = "module") -> None:
    """Raise `ArgumentTypeError` naming `argument` unless `module` is an `nn.Module`."""
    check_type(module, nn.Module, argument, "a torch.nn.Module (the model to track)")


def _weak_call(method: Callable[..., None]) -> Callable[..., None]:
    """`method`, called through a weak reference: a part holding it (the sink's `stop`,
    the compiled hooks' eager fallback) keeps no reference cycle with the tracker (which
    would keep a streaming tracker's writer and files open until a garbage collection)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


def _record_nothing(name: str, value: Any) -> None:
    """An op outside every registered module's call: not recorded (`ops=`)."""


def _as_is(hook: Callable[..., Any]) -> Callable[..., Any]:
    """`hook` itself: an eager model's hooks are detached in the steps `every=` skips."""
    return hook


_R = TypeVar("_R", bound="Recorder")


_ACTIVE: list[Callable[[str, Any, Any, Kind], None]] = []
"""What `stash` calls: one entry per tracker with hooks attached now."""


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
    for record in list(_ACTIVE):
        record(name, value, frame, kind)
    return value


def tap(name: str, value: Any) -> Any:
    """Return `value` unchanged; inside a tracked module's `forward`, record it (and its
    gradient) with every tracker that is recording now, as a record of that module with
    `kind="tap"` and `attr=name` (`name#1`, `name#2`, ... when called again in the same
    call of the module). With no tracker recording it does nothing but return `value`.

    Put it on any intermediate value of your model's code, once; it records only while a
    tracker does, with the tracker's `stats=` or copies, `every=`, `stream_to=`...

    Args:
        name: the record's `attr`.
        value: a tensor, or a structure of tensors.

    Raises:
        ArgumentTypeError: `name` is not a str (checked while a tracker records).

    Example:
        >>> class Attention(nn.Module):
        ...     def forward(self, q):
        ...         scores = tensor_tracker.tap("scores", q @ q.T)
        ...         return scores.softmax(-1) @ q
        >>> attention = Attention()
        >>> with track(attention) as t:
        ...     attention(torch.randn(3, 4, requires_grad=True)).sum().backward()
        >>> [(s.kind, s.attr, s.grad) for s in t if s.kind == "tap"]
        [('tap', 'scores', False), ('tap', 'scores', True)]
    """
    if _TAPS:
        for record in _TAPS:
            record(name, value)
    return value


_TAPS: list[Callable[[str, Any], None]] = []
"""What `tap` calls: one entry per tracker with hooks attached now, its `_eager_tap` (where
Dynamo may run, `untraced`: Dynamo cannot trace the frame walk that finds the module), or
for a compiled model recorded in its graphs (`plan.inner_in_graph`) a traced one
(`CompiledHooks.inner`), which adds no graph break. With no tracker `tap` traces as it is."""


class Recorder:
    """Records what modules compute, as a list of `Stash`; users get a `Tracker` (a
    `Recorder` that can also be read as a table) from `track` or `Tracker(...)`.

    A tracker is a sequence of stashes (`len`, indexing, iteration, in recording order) and a
    context manager that removes its hooks on exit.

    Args:
        options: how it records (see `Options`; `Options()` for the defaults).

    Example:
        >>> tracker = Recorder(Options())
        >>> tracker.register(model[0], "first")
        >>> model(x).sum().backward()
        >>> tracker.unregister()
        >>> [(s.name, s.grad) for s in tracker]
        [('first', False), ('first', True)]
    """

    def __init__(self, options: Options) -> None:
        check_type(options, Options, "options=", "a tensor_tracker._core.options.Options")
        self.options = options
        """The options this tracker records with (checked when it was made)."""
        capture = options.capture
        self._outputs = "outputs" in capture
        self._inputs = "inputs" in capture
        self._params = "params" in capture
        self._optimizer = options.optimizer
        # The parts: each gets what it needs, none reads another's state.
        self._clock = Clock(options.every_of)
        self._sink = RecordSink(options, stop=_weak_call(self.unregister))
        self._regs = Registrations(self._sink.site_id)
        # The compiled models among those registered (`torch.compile`'s wrappers and
        # modules compiled in place), for `_recompile`.
        self._wrappers: list[nn.Module] = []
        self._in_frame: list[Any] = []  # what puts their forward back (`hooks_in_frame`)
        self._eager = EagerHooks(self._clock, self._sink, options.train_only)
        self._updates = (
            UpdateHooks(self._clock, self._sink, options.train_only)
            if "updates" in capture
            else None
        )
        self._graph = CompiledHooks(
            self._clock,
            self._sink,
            options.train_only,
            self._eager.forward_hook,
            _weak_call(self._eager_inner),
        )
        self._tap: Callable[[str, Any], None] | None = None  # this tracker's, in `_TAPS`
        self._stash: Callable[..., None] | None = None  # this tracker's, in `_ACTIVE`
        self._graph_ops: GraphOpsMode | None = None  # see `_attach`
        self._inner_graph = False  # ops and taps recorded in compiled graphs
        self._ops = None if options.ops is None else OpsHooks(options.ops, self._record_op)
        self.step_kinds: dict[int, str] = self._clock.kinds
        """The kind of each step declared with `step(kind=...)` other than "default"."""
        self.modules: weakref.WeakValueDictionary[str, nn.Module] = self._regs.modules
        """Every module registered so far, by name, also after `unregister()` (held weakly:
        the tracker does not keep a model alive); what `summary()` counts parameters of."""
        self.logged: list[LogEntry] = []
        """Scalars and notes made with `log` and `note`, in order."""
        self.partial_steps: list[int] = []
        """The steps an exception (a Ctrl-C, an error in the model) cut short: the `with`
        block ended during the step, before `step()` ended it; its records are those made
        before the exception. Kept by `save` and `stream_to=`, read back by `load`."""
        # `step`, `log`, `note` and the end of a block take turns, so that threads calling
        # them (a logging thread) never write a step twice or lose an entry. The hooks do
        # not take it: see `step`.
        self._lock = threading.RLock()
        self._ending: int | None = None  # the step `step()` is ending, until it has
        # See `on_flush`.
        self._flush: Callable[[bool, int], None] | None = None
        self.stream_path: Any = None
        """The directory `track(..., stream_to=...)` writes to (None otherwise)."""
        self.complete: bool | None = None
        """For a `load`ed recording: whether its writer closed it (`False` while a writer
        still appends, or after it was killed mid-run); `None` for a live tracker."""
        self.rank: int | None = None
        """This process's rank under `torch.distributed` (`None` without it): read when the
        tracker is made and when a `with` block starts, never in a hook; `to_frame()` then
        has a `rank` column."""
        self.world_size: int | None = None
        """The number of ranks under `torch.distributed` (`None` without it)."""
        self._read_rank()
        self._depth = 0  # nested `with tracker:` blocks; the outermost one detaches
        self._attached = False

    @property
    def stashes(self) -> Columns:
        """The records, readable as a list of `Stash` (see `Columns`)."""
        return self._sink.stashes

    @stashes.setter
    def stashes(self, columns: Columns) -> None:  # what `load` reads a recording into
        self._sink.stashes = columns

    def watch_nonfinite(
        self,
        seen: Callable[[], bool],
        handler: Callable[[], None],
        notice: Callable[[Any], None],
    ) -> None:
        """See `RecordSink.watch_nonfinite` (what `track(..., on_nonfinite=...)` arms)."""
        self._sink.watch_nonfinite(seen, handler, notice)

    def _check_nonfinite(self) -> None:
        self._sink.check_nonfinite()

    def on_flush(self, flush: Callable[[bool, int], None], path: Any = None) -> None:
        """Call `flush(block_ended, step)` at every `step()` and at the end of each `with`
        block (`block_ended` true; `step`: the step being ended): how
        `track(..., stream_to=path)` writes the records so far to disk and drops them.
        `path` becomes `stream_path`."""
        self._flush = flush
        self.stream_path = path

    def _read_rank(self) -> None:
        info = rank_info()
        if info is not None:
            self.rank, self.world_size = info

    # -- registration ------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        """Whether the current step is recorded (always, unless `every` > 1)."""
        return self._clock.recording

    @property
    def step_kind(self) -> str:
        """The kind of the current step (see `step(kind=...)`)."""
        return self._clock.kind

    def register(self, module: nn.Module, name: str = "", grad: bool = True) -> None:
        """Record `module`'s forward output under `name` and, when `grad` is true, the
        gradient with respect to its output(s) (plus inputs/parameters per `capture`).

        Example:
            >>> tracker.register(model[0], "first", grad=False)
        """
        check_module(module)
        check_type(name, str, "name", "the module's name (str)")
        check_bool(grad, "grad=")
        registration = self._regs.add(module, name, grad)
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
        The root's name is `""`; children have dotted names like `"0.linear"`. A module
        held under two names is registered once, under the first; wrappers (torch.compile,
        DDP, FSDP, activation checkpointing) are not registered, the module they wrap is,
        under the wrapper's name: the names of the plain model (see `naming`).

        Example:
            >>> tracker.register_all(model, include=r"layers\\.\\d+$", exclude="dropout")
        """
        check_module(module)
        include_re, exclude_re = check_filters(grad, include, exclude)
        # Names as everywhere (`naming`): wrappers (compile, DDP, FSDP) left out, the
        # module they wrap under their name; an aliased module once, by its first name.
        names = {id(child): name for name, child in module_names(module)}
        included = 0
        for child in module.modules():
            compiled = compiled_callable(child)
            if compiled is not None:
                self._regs.compiled.append(compiled)  # before registering: _attach looks at it
                if not any(child is w for w in self._wrappers):
                    self._wrappers.append(child)
            name = names.get(id(child))
            if name is None:
                continue  # a wrapper
            if include_re is not None and not include_re.search(name):
                continue
            included += 1
            if exclude_re is not None and exclude_re.search(name):
                continue
            self.register(child, name, grad)
        if not included and include_re is not None:
            warnings.warn(
                f"include={include_re.pattern!r} matches no module name, so nothing will be "
                f"recorded (it is searched with re.search in the names: "
                f"{_a_few([repr(n) for n in names.values()])})",
                UserWarning,
                stacklevel=_caller_level(),
            )
        if self._regs.compiled and self._attached:
            self._recompile()

    def unregister(self) -> None:
        """Remove every hook this tracker attached and forget the registered modules; the
        stashes stay. (Leaving a `with tracker:` block also removes the hooks, but keeps the
        modules, for a later `with tracker:` to record them again.)"""
        self._detach()
        self._regs.forget()
        if self._updates is not None:
            self._updates.release()

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
        with self._lock:
            self.logged.append(LogEntry(self._clock.step, name, value, None))

    def note(self, text: str) -> None:
        """Write a note for the current step (e.g. "lr halved"); saved with the recording.

        Example:
            >>> t.note("switched to the long sequences")
        """
        check_type(text, str, "note(text)", "a str")
        with self._lock:
            self.logged.append(LogEntry(self._clock.step, None, math.nan, text))

    def clear(self) -> None:
        """Drop all stashes (the hooks stay attached)."""
        self._sink.clear()

    def step(self, n: int | None = None, *, kind: str = "default", keep: bool = True) -> None:
        """Advance to the next step (or to step `n`, for an x-axis of your choice such as
        epochs or tokens seen). Later stashes carry the new `step`; call indices restart.
        With `every=N`, hooks are attached only during every N-th step (a compiled
        model's stay attached, so that it does not recompile, and record nothing in the
        other steps).

        `step`, `log` and `note` may be called from several threads (a logging thread, a
        callback): they take turns, and with `stream_to=` each step is written once, whole.
        The model's hooks record from whichever thread runs it; a record made in another
        thread while `step()` writes the step to disk is dropped, with a warning: call
        `step()` between the model's passes.

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
        with self._lock:
            ending = self._clock.step
            self._ending = ending  # an exception from here on: the step was whole
            self._check_nonfinite()  # forward-only loops have no end of backward
            if not keep:
                self._sink.drop_step(ending)
            if self._flush is not None:
                self._flush(False, ending)
            self._graph.await_only(ending)
            self._clock.advance(n, kind)
            self._sink.start_step(self._clock.step)
            self._regs.restart_calls()
            if self.recording and not self._attached:
                self._attach_all()
            elif not self.recording and not self._regs.compiled:
                # A compiled model's hooks stay: detaching them would recompile it, twice
                # per recorded step; they record nothing while `recording` is false.
                self._detach()
            self._ending = None

    def _mark_partial(self) -> None:
        """Add the current step to `partial_steps` when it recorded anything."""
        step = self._clock.step
        logged = any(e.step == step for e in self.logged)
        if (self._sink.last_step_is(step) or logged) and step not in self.partial_steps:
            self.partial_steps.append(step)

    def _attach_all(self) -> None:
        for registration in self._regs.items:
            self._attach(registration)
        if self._regs.compiled and self._attached:
            self._recompile()

    def _recompile(self) -> None:
        # The hooks of a compiled model's root traced into its graph, as its children's
        # are, until the hooks come off (`hooks_in_frame`).
        for wrapper in self._wrappers:
            handle = hooks_in_frame(wrapper)
            if handle is not None:
                self._in_frame.append(handle)
        entries = [*self._regs.compiled, *(compiled_callable(w) for w in self._wrappers)]
        recompile([e for e in entries if e is not None], [reg.module for reg in self._regs.items])

    def _setting(self) -> Setting:
        """What the hooks of every module depend on, as it is now (see `plan`)."""
        compiled = bool(self._regs.compiled)
        return Setting(
            outputs=self._outputs,
            inputs=self._inputs,
            params=self._params,
            graph_stats=self._sink.graph_stats is not None,
            compiled=compiled,
            can_emit=can_emit(),
            traces_gradients=traces_gradients(),
            # Under torch.compile, Dynamo would trace eager hooks (slowly, recompiling as
            # their state changes); `untraced`, it calls them as they are. The wrapper
            # costs a check per call, so only where Dynamo may run (torch.compile imports
            # it; so do torch.optim's optimizers and transformers).
            dynamo=compiled or "torch._dynamo" in sys.modules,
            ops=self._ops is not None,
        )

    def _attach(self, reg: Registration) -> None:
        """Attach the hooks `plan_hooks` decides for `reg`'s module."""
        handles = self._regs.handles
        # A compiled model's hooks stay attached through the steps `every=` skips (see
        # `step`): the eager ones among them check that the step is recorded.
        gate = self._clock.gate if self._regs.compiled else _as_is
        # Once per module (it asks torch what it can do): `every=` attaches every
        # recorded step.
        setting = self._setting()
        if not self._attached:
            if self._optimizer is not None:
                hook = gate(self._eager.optimizer_hook(self._regs))
                handles.append(self._optimizer.register_step_post_hook(hook))
                if self._updates is not None:
                    handles += self._updates.attach(self._optimizer, self._regs)
            self._inner_graph = inner_in_graph(setting)
            quiet = self._quiet()
            self._stash = quiet(self._stash_named)
            _ACTIVE.append(self._stash)
            eager_tap = quiet(self._eager_tap)
            eager_tap = untraced(eager_tap) if setting.dynamo else eager_tap
            self._tap, self._graph_ops = eager_tap, None
            if self._inner_graph:
                self._tap = self._graph.inner("tap", eager_tap)
                if self.options.ops is not None:
                    self._graph_ops = GraphOpsMode(
                        self.options.ops, self._graph.inner("op", _record_nothing)
                    )
            _TAPS.append(self._tap)
            self._attached = True
        quiet = self._quiet()
        module = reg.module
        facts = ModuleFacts(
            grad=reg.grad,
            params=tuple(attr for attr, _ in reg.params),
            trainable=tuple(attr for attr, p in reg.params if p.requires_grad),
            traceable_params=traceable_params(reg),
        )
        plan = plan_hooks(setting, facts)
        if plan.forward is not None:
            if plan.forward == "graph":
                hook = self._graph.forward_hook(reg)
            else:
                hook = gate(quiet(self._eager.forward_hook(reg)))
                if plan.forward == "untraced":
                    hook = untraced(hook)
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        if plan.pre == "graph":
            handles.append(module.register_forward_pre_hook(self._graph.param_hook(reg)))
        elif plan.pre is not None:
            pre_hook = gate(
                quiet(self._eager.pre_hook(reg, self._inputs, self._params, not self._outputs))
            )
            if plan.pre == "untraced":
                pre_hook = untraced(pre_hook)
            handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        if self._inner_graph:
            pre_first, pre_last, post_first, post_last = self._graph.owner_hooks(
                reg, self._graph_ops
            )
            handles.append(module.register_forward_pre_hook(pre_first, prepend=True))
            handles.append(module.register_forward_pre_hook(pre_last))
            handles.append(module.register_forward_hook(post_first, prepend=True, always_call=True))
            handles.append(module.register_forward_hook(post_last, always_call=True))
        elif self._ops is not None:  # after the other pre-hooks: they record no op
            self._ops.attach(module, reg)
        params = dict(reg.params)
        for attr in plan.param_grads:
            hook = gate(self._eager.param_grad_hook(reg, attr))
            handles.append(params[attr].register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]

    def _quiet(self) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """What wraps the tracker's own work run inside a tracked call (see `OpsHooks.quiet`):
        with eager `ops=`, that takes the mode off; else nothing."""
        return self._ops.quiet if self._ops is not None and not self._inner_graph else _as_is

    def _detach(self) -> None:
        self._regs.detach()
        for handle in self._in_frame:
            handle.remove()
        self._in_frame.clear()
        self._eager.detach()
        self._graph.close()
        if self._ops is not None:
            self._ops.detach()
        self._attached = False
        _ACTIVE[:] = [record for record in _ACTIVE if record is not self._stash]
        _TAPS[:] = [record for record in _TAPS if record is not self._tap]
        self._tap = self._stash = self._graph_ops = None

    def _stash_named(self, name: str, value: Any, frame: Any, kind: Kind) -> None:
        """Record `value` for `stash`, under the innermost registered module whose
        `forward` is on the call stack from `frame` up."""
        if not self.recording:  # a compiled model's step that `every=` skips
            return
        reg = self._regs.innermost(frame)
        # Inside forward the forward hook has not counted this call yet (the pre-hook has,
        # when there is no forward hook).
        self._eager.stash_named(reg, name, value, kind, counted=not self._outputs)

    def _eager_tap(self, name: str, value: Any) -> None:
        """`tap`'s record, made eagerly, under the innermost registered module whose
        `forward` is on the call stack."""
        if not isinstance(name, str):
            check_type(name, str, "tap(name, value): name", "a str")
        self._stash_named(name, value, sys._getframe(1), "tap")

    def _eager_inner(self, reg: Registration, kind: Kind, name: str, k: int, value: Any) -> None:
        """An op or tap record of a compiled graph's module that the graph cannot make
        (see `CompiledHooks.inner`), numbered `k` in its call already."""
        self._eager.stash_named(reg, name, value, kind, not self._outputs, number=k)

    def _record_op(
        self,
        reg: Registration,
        name: str,
        value: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Record a call of op `name` in `reg`'s `forward` (see `ops`)."""
        if not self.recording:  # a compiled model's step that `every=` skips
            return
        self._eager.stash_named(reg, name, value, "op", not self._outputs, args, kwargs)

    # -- reading ---------------------------------------------------------------------

    def _sync(self) -> None:
        self._sink.sync()

    @property
    def nbytes(self) -> int:
        """Bytes held by the tensors in the stashes (statistics count their few numbers);
        a copy shared by several stashes counts once."""
        return self._sink.nbytes

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
        the stashes of the module of that name, in recording order. A stash's
        `first_value` is its tensor, forward or gradient (a gradient's `value` is a tuple).

        Example:
            >>> tracker["0"][-1].first_value.shape  # the last record of module "0"
            torch.Size([8, 8])

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
        return f"Tracker(stashes={len(self.stashes)}, tracking={len(self._regs.handles)})"

    __repr__ = __str__

    def __enter__(self: _R) -> _R:
        """Start a `with` block. Entering again a tracker whose block ended attaches the
        hooks to the same modules again, so that one tracker can record several runs; a
        tracker emptied by `unregister()` (or a `MemoryBudgetError`) raises instead."""
        if self._depth:
            self._depth += 1
            return self
        resumed = self._regs.resume()
        if resumed:
            # Modules registered since the block ended are already attached; keep them.
            if self.recording:
                for registration in resumed:
                    self._attach(registration)
                if self._regs.compiled:
                    self._recompile()
        elif self._regs.forgotten and not self._regs.items:
            raise TrackerStateError(
                "tensor_tracker: this tracker has no modules to track: unregister() (or a "
                "MemoryBudgetError) removed them, so `with tracker:` would record nothing. "
                "Register them again first (tracker.register_all(model)), or start a new "
                "tracker with tensor_tracker.track(model)."
            )
        self._read_rank()  # the process group may have started after the tracker was made
        self._sink.recorded = False
        self._depth = 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth:
            return
        registrations, compiled = self._regs.items, self._regs.compiled
        # Not len(self.stashes): clear() drops records made in the block.
        silent = self._attached and not self._sink.recorded
        forgotten = self._regs.forgotten
        with self._lock:
            if exc_type is not None and self._ending != self._clock.step:
                self._mark_partial()
            self._ending = None
            self.unregister()
            if self._flush is not None:
                self._flush(True, self._clock.step)
        # Forgotten by unregister() or a MemoryBudgetError in the block, or kept for the next.
        self._regs.forgotten = forgotten
        self._regs.suspend(registrations, compiled)
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
