"""`CompiledHooks`: statistics computed inside a `torch.compile`d model's graphs.

With `stats=` on a compiled model, a module's forward hook (`forward_hook`) is traced by
TorchDynamo into the model's graph instead of breaking it: the statistics of the output
(and, through the gradient hooks it registers, of the gradient) are computed in the graph
(on the CPU, the tensor itself is handed out and they are computed at delivery: `_emitted`)
and handed out through `emit` (see `graph_sink`) to `_deliver`, which numbers the calls,
matches each gradient to its forward call (`_Awaiting`) and gives the raw statistics to
`RecordSink.put_raw`. What cannot be traced (`plan.graph_route`) takes the eager path
(`EagerHooks.forward_hook`), behind a graph break. The view rule is `grad_hooks.stand_in`
(`traced_stand_in`), as in eager mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .._torch_compat import (
    compile_attempt,
    forget_compiled_code,
    graph_task_id,
    never_a_frame,
    queue_at_end_of_backward,
    untraced,
)
from .clock import Clock
from .columns import GRAD, TRAINING, TUPLE
from .dist import local_value
from .grad_hooks import traced_stand_in, view_replay
from .graph_sink import close_sink, emit_op, mark_trace_constant, new_sink_key, open_sink
from .plan import EAGER, HOOKED_OUTPUT, OUTPUT, Layout, graph_part, graph_parts, graph_route
from .records import Kind
from .registrations import Registration
from .sink import RecordSink

__all__ = ["CompiledHooks", "recompile", "traceable_params"]

# What a traced hook's `emit` delivers (`forward_hook`): the statistics of an output
# whose gradient is not hooked or is (`plan.OUTPUT`, `plan.HOOKED_OUTPUT`), of a parameter,
# of an output's gradient, or of the gradient of the output's base (for a view: it stands
# in when the view's is missing).
_PARAM = 2
_OUTPUT_GRAD = 3
_BASE_GRAD = 4
_INNER = 8
"""Or'ed into `what`: an op's or a tap's record (`inner`), made inside its module's call,
which it does not count (the module's output, delivered after it, does)."""
_NEW = 16
"""Or'ed into `what` with `_INNER`: an op's result, a new tensor (not a view)."""
_HOST = 32
"""Or'ed into `what`: `emit`'s `raw` is the CPU tensor itself, whose statistics `_deliver`
computes as eager tracking does (`_put`)."""
_PART = 64
"""Or'ed into `what`: one tensor of a module's output of several (`plan.graph_parts`);
`index` is its number and `length` the output's layout (`CompiledHooks._layouts`)."""
_HOOKS_WORK = -1
"""On the owner stack (`owner_hooks`): the tracker's own hooks run (their ops are no
module's)."""
_NO_MODULE = -2
"""The owner when no registered module's call is being traced."""


_TOKENS_PER_MODULE = 1 << 32
"""Owner tokens (`owner_hooks`) are numbered per module: `position * _TOKENS_PER_MODULE +
n`, the module's `n`-th traced call, or the last number for its calls outside a trace."""

_AWAITED_CALLS = 64
"""The most calls of one traced hook call whose gradients a tracker still matches."""


class _Awaiting:
    """A compiled module call whose output's gradient is hooked (`forward_hook`), and
    the backward passes (graph tasks) in which the output's and the base's hooks last
    delivered: the first of the two in a pass is recorded. For one tensor of an output of
    several, `gather` collects it with the others (`_Gather`)."""

    __slots__ = ("base_task", "call", "flags", "gather", "output_task", "site", "step")

    def __init__(
        self, site: int, call: int, step: int, flags: int, gather: _Gather | None = None
    ) -> None:
        self.site = site
        self.call = call
        self.step = step
        self.flags = flags  # of the gradient record
        self.gather = gather
        self.output_task = -1
        self.base_task = -1


_Raw = tuple[Tensor, int, list[Tensor], bool]


class _Gather:
    """The gradients of the tensors of one compiled call's output of several, recorded as
    one record per backward pass as the eager path's `grad_hooks.Gather` does: when all
    the hooked ones came, else at the end of the pass (`None` for those that did not)."""

    __slots__ = ("arrived", "awaiting", "expected", "refs", "sink", "task")

    def __init__(self, sink: RecordSink, awaiting: _Awaiting, count: int, expected: int) -> None:
        self.sink = sink
        self.awaiting = awaiting  # where the record goes
        self.expected = expected
        self.refs: list[int | None] = [None] * count
        self.arrived = 0
        self.task = -1

    def put(self, task: int, index: int, raw: _Raw) -> None:
        if task != self.task:
            self.flush()
            self.task = task
            self.arrived = 0
            queue_at_end_of_backward(self.flush)
        a = self.awaiting
        self.refs[index] = self.sink.store_raw(a.site, a.flags, *raw)
        self.arrived += 1
        if self.arrived == self.expected:
            self.flush()

    def flush(self) -> None:
        if not self.arrived:
            return
        a = self.awaiting
        self.sink.put_refs(a.site, a.call, a.step, a.flags, self.refs)
        self.sink.watch_pass()
        self.refs = [None] * len(self.refs)
        self.arrived = 0


def traceable_params(reg: Registration) -> bool:
    """Whether `reg`'s parameters can be recorded inside a compiled graph: plain non-empty
    tensors (not FSDP's `DTensor` shards, recorded as their local part)."""
    return all(local_value(p) is p and p.numel() > 0 for _, p in reg.params)


class CompiledHooks:
    """Makes the hooks of a compiled model's modules that run inside its graphs, and
    receives what the graphs hand out.

    Args:
        clock: the step records carry and its count.
        sink: where records go; its `graph_stats` computes the statistics in the graph.
        train_only: record only while a module is in training mode.
        eager_hook: the eager forward hook of a registration (`EagerHooks.forward_hook`),
            for the outputs a graph cannot record.
        eager_inner: records an op or a tap eagerly (registration, kind, name, its
            number in the call, value), for the values a graph cannot record.
    """

    def __init__(
        self,
        clock: Clock,
        sink: RecordSink,
        train_only: bool,
        eager_hook: Callable[[Registration], Callable[..., None]],
        eager_inner: Callable[[Registration, Kind, str, int, Any], None],
    ) -> None:
        self._clock = clock
        self._eager_inner = eager_inner
        self._sink = sink
        self._train_only = train_only
        self._eager_hook = eager_hook
        # The key of the sink the graphs deliver to (the same for good; open while hooks
        # are attached), the registration of each site, the calls whose gradient is
        # awaited (by site and traced hook call, latest run last), and the step (count) at
        # which each parameter site was last recorded.
        self._key: int | None = None
        self._open = False
        self._site_regs: dict[int, Registration] = {}
        self._awaiting: dict[tuple[int, ...], list[_Awaiting]] = {}
        self._param_steps: dict[int, int] = {}
        # The registered module calls being traced, innermost last: each a token
        # (`owner_hooks`), or `_HOOKS_WORK`. Dynamo traces its changes (and undoes them
        # when it restarts a trace); it is empty whenever a compiled model is called.
        self._owners: list[int] = []
        # Per token: its registration and how many of each op and tap it made so far (at
        # trace time); the registrations with owner hooks, in the order they were attached.
        self._tokens: dict[int, tuple[Registration, dict[tuple[str, str], int]]] = {}
        self._owner_regs: list[Registration] = []
        self._inner_calls = 0
        # The layouts of outputs of several tensors (`plan.graph_parts`) and their number
        # of tensors, by number (traced in as a constant); the forward statistics of those
        # being delivered, by tensor, by (site, traced hook call).
        self._layouts: list[tuple[Layout, int]] = []
        self._layout_ids: dict[Layout, int] = {}
        self._parts: dict[tuple[int, int], list[tuple[int, bool] | None]] = {}

    def forward_hook(self, reg: Registration) -> Callable[..., None]:
        """The forward hook of a compiled model's module with `stats=`: TorchDynamo traces
        it, and the gradient hooks it registers when gradients are recorded (torch >=
        2.13), into the model's graphs, so it adds no graph break. The forward and gradient
        statistics are computed in the graphs and reach `_deliver` through `emit` (see
        `graph_sink`) as the graphs run; nothing in the hooks changes between calls, so
        nothing recompiles (a hook appending to a Python list would make Dynamo guard on
        its length). What it cannot trace (`plan.graph_route`) runs eagerly, behind a graph
        break.

        The gradient of an output that is a view is read as in eager mode, by the one rule
        `grad_hooks.stand_in`: its base's gradient, cut to the view, stands in when the
        view's own hook does not fire (the view was modified in place)."""
        site = reg.site("output", "")
        self._site_regs[site] = reg
        put = self._put()
        train_only = self._train_only
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
        layout_id = self._layout_id()
        # `torch.compiler.disable`: what the traced hook calls, behind a graph break; it
        # stays attached through the steps `every=` skips, as the hook does.
        eager_hook = self._clock.gate(self._eager_hook(reg))
        eager = cast(Callable[..., None], torch.compiler.disable(eager_hook))  # type: ignore[no-untyped-call]

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            training = module.training
            if train_only and not training:
                return
            what = graph_route(output, reg.grad)
            if what == EAGER:
                # Run outside a trace (the hook of the module a compiled frame is called
                # from), a hook on a tensor the graph returns would see only the gradient
                # from outside the graph (not a pooler's inside it): the eager path reads
                # the whole, and there is no graph to break.
                parts = graph_parts(output, reg.grad) if torch.compiler.is_compiling() else None
                if parts is None:
                    eager(module, args, kwargs, output)
                    return
                # An output of several tensors (a layer's tuple, a `ModelOutput`): each
                # tensor recorded in the graph, delivered as one record of the output.
                tensors, routes, layout = parts
                call_id = traced_call()
                number = layout_id(layout, len(tensors))
                flags = TRAINING if training else 0
                for i, item in enumerate(tensors):
                    put(item, site, call_id, flags, routes[i] | _PART, i, number)
                return
            # `output` itself, or the one tensor of a tuple such as attention's
            # `(output, None)`: traced, not sent the eager way behind a graph break.
            tensor, index, length = graph_part(output)
            assert tensor is not None  # graph_route said so
            call_id = traced_call()  # a constant in the compiled graph
            put(tensor, site, call_id, TRAINING if training else 0, what, index, length)

        return hook

    def _put(self) -> Callable[..., None]:
        """What a traced hook calls to record `tensor` at `site` in the graph:
        `put(tensor, site, call_id, flags, what, index, length, attention=None)` emits its
        statistics (with `attention`, the `(args, kwargs)` of the
        `scaled_dot_product_attention` call that returned it: `stats.attention_logits`) and,
        for a `HOOKED_OUTPUT` (`what`, possibly with `_INNER`), hooks its gradient (and, for
        a module's output that is a view, its base's: `grad_hooks.stand_in`), delivered
        with `call_id`."""
        fn = self._sink.graph_stats
        emit = emit_op()
        sink = self._open_sink()
        vectors = fn.graph_vectors

        def put(
            tensor: Tensor,
            site: int,
            call_id: int,
            flags: int,
            what: int,
            index: int,
            length: int,
            attention: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
        ) -> None:
            if what & ~(_INNER | _NEW | _PART) == HOOKED_OUTPUT:
                # With `_PART`, the gradients say which tensor of the output they are of.
                grad_what = what & _PART

                # Both return the gradient unchanged: under compiled autograd a hook that
                # returns None replaces it with None.
                def grad_hook(grad: Tensor) -> Tensor:
                    raw, host = _emitted(fn, grad)
                    emit(
                        raw,
                        vectors(grad),
                        sink,
                        site,
                        call_id,
                        grad.numel(),
                        GRAD,
                        _OUTPUT_GRAD | grad_what | host,
                        index,
                        length,
                    )
                    return grad

                tensor.register_hook(grad_hook)  # type: ignore[no-untyped-call]
                # An op's result is a new tensor, not a view (see `traced_stand_in`).
                base = None if what & _NEW else traced_stand_in(tensor)
                if base is not None:
                    cut = view_replay(tensor, base)

                    def base_hook(grad: Tensor) -> Tensor:
                        part = cut(grad)
                        raw, host = _emitted(fn, part)
                        emit(
                            raw,
                            vectors(part),
                            sink,
                            site,
                            call_id,
                            part.numel(),
                            GRAD,
                            _BASE_GRAD | grad_what | host,
                            index,
                            length,
                        )
                        return grad

                    base.register_hook(base_hook)  # type: ignore[no-untyped-call]
            raw, host = _emitted(fn, tensor)
            emit(
                raw,
                vectors(tensor, attention),
                sink,
                site,
                call_id,
                tensor.numel(),
                flags,
                what | host,
                index,
                length,
            )

        return put

    def owner_hooks(
        self, reg: Registration, mode: TorchFunctionMode | None
    ) -> tuple[Callable[..., None], Callable[..., None], Callable[..., None], Callable[..., None]]:
        """The hooks that keep the owner stack while `reg`'s module's call is traced, so
        that an op or a tap (`inner`) knows at trace time which module's `forward` made
        it: `(first pre-hook, last pre-hook, first forward hook, last forward hook)`, to
        be registered in these places (the forward hooks also on an exception), so that
        the tracker's own hooks run with `_HOOKS_WORK` on top. `mode` (`ops=`'s), when
        given, is pushed at the outermost call and popped at its end: Dynamo traces it.

        A token is a number fixed at trace time (`mark_trace_constant`) for each traced
        call: ops and taps are numbered within it (`"softmax#1"`). It is numbered per
        module (`_TOKENS_PER_MODULE`), from 0 at every attach: Dynamo keeps a frame
        compiled under an earlier attach (the tracker's hooks look the same to its
        guards), and a token it replays must name the same module now."""
        owners = self._owners
        tokens = self._tokens
        first = len(self._owner_regs) * _TOKENS_PER_MODULE
        self._owner_regs.append(reg)
        traced = [0]

        def token() -> int:
            number = first + traced[0]
            traced[0] += 1
            tokens[number] = (reg, {})
            return number

        token = mark_trace_constant(token)
        # Hooks that run outside a trace (those of the module a compiled frame is called
        # from: Dynamo starts tracing at its `forward`) push the same token at every call,
        # or the frame's guard on the stack would fail at each; `inner` numbers its ops
        # again in each trace.
        outside = first + _TOKENS_PER_MODULE - 1
        outside_counts: dict[tuple[str, str], int] = {}
        tokens[outside] = (reg, outside_counts)

        def pre_first(module: nn.Module, args: tuple[Any, ...]) -> None:
            owners.append(_HOOKS_WORK)
            if mode is not None and len(owners) == 1:
                mode.__enter__()  # type: ignore[no-untyped-call]

        def pre_last(module: nn.Module, args: tuple[Any, ...]) -> None:
            if torch.compiler.is_compiling():
                owners[-1] = token()
            else:
                # A call run eagerly numbers its ops from 0 again (a forward Dynamo
                # gave up compiling, past its recompile limit, runs `inner` eagerly).
                outside_counts.clear()
                owners[-1] = outside

        def post_first(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            owners[-1] = _HOOKS_WORK

        def post_last(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            owners.pop()
            if mode is not None and not owners:
                mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]

        # Inlined where the module's call is traced; run eagerly, never compiled on
        # their own: one frame compiled for these closures' shared code would give every
        # module the token of the first (`never_a_frame`).
        hooks = (pre_first, pre_last, post_first, post_last)
        for hook in hooks:
            never_a_frame(hook)
        return hooks

    def inner(self, kind: Kind, outside: Callable[[str, Any], None]) -> Callable[..., None]:
        """Records an op's or a tap's value (`kind`) in the graph: `record(name, value,
        args=(), kwargs=None)` (an op's arguments: an attention call's give
        `stats.attention_logits` its logits),
        traced, as a record of the module whose call is traced (`owner_hooks`), numbered
        in that call at trace time (`"softmax#0"`; a tap from its second use). Nothing
        while the tracker's own hooks run; `outside(name, value)` (eager) for a value
        outside every registered module's call, and the eager path for a value the graph
        cannot record (`plan.graph_route`), behind a graph break."""
        owners = self._owners
        tokens = self._tokens
        owner_regs = self._owner_regs
        site_regs = self._site_regs
        train_only = self._train_only
        put = self._put()
        inner_what = _INNER | _NEW if kind == "op" else _INNER

        def resolve(token: int, name: str) -> tuple[int, int, bool, int]:
            """(site, flags or -1 to skip, grad, number) of a value named `name`."""
            # A token that a frame compiled under an earlier attach replays: its module's.
            reg, counts = tokens.setdefault(token, (owner_regs[token // _TOKENS_PER_MODULE], {}))
            key = (name, compile_attempt())
            k = counts.get(key, 0)
            counts[key] = k + 1
            attr = f"{name}#{k}" if k or kind == "op" else name
            site = reg.site(kind, attr)
            site_regs[site] = reg
            training = reg.module.training
            flags = -1 if train_only and not training else TRAINING if training else 0
            return site, flags, reg.grad, k

        def inner_call() -> int:
            self._inner_calls += 1
            return self._inner_calls

        resolve = mark_trace_constant(resolve)
        inner_call = mark_trace_constant(inner_call)
        eager_inner = self._eager_inner

        def eager(token: int, name: str, k: int, value: Any) -> None:
            if self._clock.recording:
                eager_inner(tokens[token][0], kind, name, k, value)

        eager = untraced(eager)

        # An attention op's arguments, for `stats.attention_logits` (when vectors are asked).
        attention_op = kind == "op" and bool(self._sink.graph_stats.layout.vectors)

        def record(
            name: str, value: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> None:
            token = owners[-1] if owners else _NO_MODULE  # a constant while tracing
            if token == _HOOKS_WORK:
                return
            if token == _NO_MODULE:
                # Traced outside every registered module's call (another tracker's
                # model): nothing of this tracker's to record, and no graph break.
                if not torch.compiler.is_compiling():
                    outside(name, value)
                return
            site, flags, grad, k = resolve(token, name)
            if flags < 0:
                return
            what = graph_route(value, grad)
            if what == EAGER:
                eager(token, name, k, value)
                return
            tensor, index, length = graph_part(value)
            assert tensor is not None  # graph_route said so
            attention = (
                (args, kwargs or {})
                if attention_op and name == "scaled_dot_product_attention" and index < 0
                else None
            )
            # A tap is called from the model's code, where `ops=`'s mode sees every call:
            # the statistics `put` computes are the tracker's work, not the module's ops.
            owners.append(_HOOKS_WORK)
            try:
                put(tensor, site, inner_call(), flags, what | inner_what, index, length, attention)
            finally:
                owners.pop()

        return record

    def param_hook(self, reg: Registration) -> Callable[..., None]:
        """The forward pre-hook of a `forward_hook`'s module with `capture="params"`:
        traced into the graph, it computes the statistics of the module's parameters at
        every call, and `_deliver` records them at the first call of each step."""
        fn = self._sink.graph_stats
        emit = emit_op()
        sink = self._open_sink()
        vectors = fn.graph_vectors
        params = [(reg.site("param", attr), p) for attr, p in reg.params]
        train_only = self._train_only

        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            training = module.training
            if train_only and not training:
                return
            flags = TRAINING if training else 0
            for site, param in params:
                raw, host = _emitted(fn, param)
                emit(raw, vectors(param), sink, site, -1, param.numel(), flags, _PARAM | host)

        return hook

    def _layout_id(self) -> Callable[[Layout, int], int]:
        """`layout_id(layout, count)`: the number of an output's layout of `count` tensors
        (`plan.graph_layout`), for `_deliver`; called by Dynamo once while tracing, its
        result a constant of the graph."""
        layouts, ids = self._layouts, self._layout_ids

        def layout_id(layout: Layout, count: int) -> int:
            number = ids.get(layout)
            if number is None:
                number = ids[layout] = len(layouts)
                layouts.append((layout, count))
            return number

        return mark_trace_constant(layout_id)

    def _open_sink(self) -> int:
        """The key the graphs deliver to, open (until `close`)."""
        if self._key is None:
            self._key = new_sink_key()
        if not self._open:
            open_sink(self._key, self._deliver)
            self._open = True
        return self._key

    def close(self) -> None:
        """The hooks were removed: the graphs deliver nowhere; no gradient is awaited; the
        owner tokens and op numbers start again with the hooks attached next (so that the
        graphs traced again are the same: Inductor's cache)."""
        if self._open:
            assert self._key is not None
            close_sink(self._key)
            self._open = False
        self._awaiting.clear()
        self._owners.clear()
        self._tokens.clear()
        self._owner_regs.clear()
        self._inner_calls = 0
        self._parts.clear()

    def await_only(self, step: int) -> None:
        """Await only the gradients of the calls of `step`, the step `step()` ends (a
        gradient may still come after `step()` for them; earlier ones are forgotten)."""
        self._awaiting = {
            key: kept
            for key, awaiting in self._awaiting.items()
            if (kept := [a for a in awaiting if a.step == step])
        }

    def _deliver(
        self,
        raw: Tensor,
        vectors: list[Tensor],
        site: int,
        call_id: int,
        numel: int,
        flags: int,
        what: int,
        index: int,
        length: int,
    ) -> None:
        """Record statistics that a `forward_hook` computed in a compiled graph, as the
        graph runs. A forward call is numbered here, in the order the graph runs the hooks;
        a gradient belongs to the latest run of the traced hook call (`site`, `call_id`)
        whose gradient has not come yet in this backward pass.

        The graphs compute the statistics at every step and `every=` decides here, at run
        time, which steps keep them: the hooks stay attached and the graphs the same
        whether a step is recorded or not, so changing between them recompiles nothing
        (a Python branch in the hook would be a guard, and detaching the hooks a
        recompile)."""
        clock = self._clock
        if not clock.recording:
            return
        host = bool(what & _HOST)
        what &= ~_HOST
        if what == _PARAM:
            if self._param_steps.get(site) != clock.count:
                self._param_steps[site] = clock.count
                self._sink.put_raw(
                    site, 0, clock.step, flags, raw, numel, vectors=vectors, tensor=host
                )
            return
        inner = what & _INNER
        part = what & _PART
        what &= ~(_INNER | _NEW | _PART)
        if part and what in (OUTPUT, HOOKED_OUTPUT):
            self._deliver_part(raw, vectors, site, call_id, numel, flags, what, index, length, host)
            return
        if what in (OUTPUT, HOOKED_OUTPUT):
            reg = self._site_regs[site]
            call = reg.calls
            if not inner:  # an op or a tap is of the call its module's output ends
                reg.calls = call + 1
            self._sink.put_raw(
                site, call, clock.step, flags, raw, numel, index, length, vectors, host
            )
            if what == HOOKED_OUTPUT:
                self._await(
                    (site, call_id), _Awaiting(site, call, clock.step, flags | GRAD | TUPLE)
                )
            return
        task = graph_task_id()
        from_base = what == _BASE_GRAD
        key = (site, call_id, index) if part else (site, call_id)
        for awaiting in reversed(self._awaiting.get(key, ())):
            if (awaiting.base_task if from_base else awaiting.output_task) != task:
                break
        else:
            return  # no call of this tracker's awaits it (e.g. it ran before `with`)
        # The view's own hook fires unless the view was modified in place; its base's fires
        # either way: the first of the two in this pass is recorded (both carry the same
        # values, unless the base has other uses than the view: see `stand_in`).
        if from_base:
            awaiting.base_task = task
            first = awaiting.output_task != task
        else:
            awaiting.output_task = task
            first = awaiting.base_task != task
        if first and awaiting.gather is not None:
            awaiting.gather.put(task, index, (raw, numel, vectors, host))
        elif first:
            self._sink.put_raw(
                awaiting.site,
                awaiting.call,
                awaiting.step,
                awaiting.flags,
                raw,
                numel,
                vectors=vectors,
                tensor=host,
            )
            self._sink.watch_pass()

    def _deliver_part(
        self,
        raw: Tensor,
        vectors: list[Tensor],
        site: int,
        call_id: int,
        numel: int,
        flags: int,
        what: int,
        index: int,
        layout: int,
        host: bool,
    ) -> None:
        """Collect the statistics of tensor `index` of an output of several (`_PART`); at
        its last, record the output as the eager path does (one call, one record of the
        whole structure) and await the gradients of its hooked tensors, gathered into one
        record per backward pass (`_Gather`)."""
        shape, count = self._layouts[layout]
        # Inductor may deliver them in any order, and another call's between them.
        parts = self._parts.setdefault((site, call_id), [None] * count)
        parts[index] = (
            self._sink.store_raw(site, flags, raw, numel, vectors, host),
            what == HOOKED_OUTPUT,
        )
        if None in parts:
            return
        del self._parts[(site, call_id)]
        done = cast(list[tuple[int, bool]], parts)
        reg = self._site_regs[site]
        call = reg.calls
        reg.calls = call + 1
        step = self._clock.step
        self._sink.put_refs(site, call, step, flags, [ref for ref, _ in done], shape)
        hooked = [i for i, (_, grad) in enumerate(done) if grad]
        if hooked:
            record = _Awaiting(site, call, step, flags | GRAD)
            gather = _Gather(self._sink, record, count, len(hooked))
            for i in hooked:
                self._await((site, call_id, i), _Awaiting(site, call, step, 0, gather))

    def _await(self, key: tuple[int, ...], entry: _Awaiting) -> None:
        """Await the gradient of `entry`'s call, delivered under `key`."""
        recent = self._awaiting.setdefault(key, [])
        recent.append(entry)
        # step() forgets the calls of earlier steps; a loop that never calls it must not
        # grow this without bound (a graph kept with retain_graph for more than this many
        # later calls would find no call to match).
        if len(recent) > _AWAITED_CALLS:
            del recent[0]


def _emitted(fn: Any, tensor: Tensor) -> tuple[Tensor, int]:
    """What a traced hook hands to `emit` as `raw` for `tensor`, and the bit to or into
    `what`: on the CPU, when no vectors are asked for, the tensor itself (`_HOST`), whose
    statistics `_deliver` computes with the eager kernels (`StatsFn.raw`: one pass in C),
    which take less time than the loops Inductor generates for the same sums, and only in
    the steps `every=` records; else its raw statistics computed in the graph
    (`StatsFn.graph_raw`). Vectors stay in the graph: an attention call's arguments,
    which `stats.attention_logits` reads, are only there."""
    if tensor.is_cpu and not fn.layout.vectors:
        return tensor.detach(), _HOST
    return fn.graph_raw(tensor), 0


def recompile(compiled: list[Callable[..., Any]], modules: list[nn.Module]) -> None:
    """Make compiled models see the hooks just attached to `modules` (see
    `_torch_compat.forget_compiled_code`), or warn that this torch cannot."""
    if not forget_compiled_code(compiled, modules):
        warnings.warn(
            "tensor_tracker: this version of torch lacks what is needed to make "
            "torch.compile recompile the tracked model with the tracking hooks; if the "
            "compiled model already ran, nothing may be recorded. Call "
            "torch.compiler.reset() before tracking, or track the uncompiled model "
            "(compiled._orig_mod).",
            RuntimeWarning,
            stacklevel=3,
        )
