"""The compiled-graph path: statistics computed inside a `torch.compile`d model's graphs.

With `stats=` on a compiled model, a module's forward hook (`_graph_hook`) is traced by
TorchDynamo into the model's graph instead of breaking it: the statistics of the output
(and, through the gradient hooks it registers, of the gradient) are computed in the graph
and handed out through `emit` (see `graph_sink`) to `_deliver`, which numbers the calls,
matches each gradient to its forward call (`_Awaiting`) and stores the raw statistics as
a row (`_put_raw`). What cannot be traced takes the eager path (`hooks`), behind a graph
break.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from .._torch_compat import forget_compiled_code, graph_task_id, queue_at_end_of_backward
from .columns import GRAD, TRAINING, TUPLE
from .dist import local_value
from .grad_hooks import stand_in, view_replay
from .graph_sink import emit_op, mark_trace_constant, new_sink_key, open_sink
from .hooks import EagerHooks, Registration
from .options import Options

__all__ = ["CompiledHooks", "traceable_params"]

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


def traceable_params(reg: Registration) -> bool:
    """Whether `reg`'s parameters can be recorded inside a compiled graph: plain non-empty
    tensors (not FSDP's `DTensor` shards, recorded as their local part)."""
    return all(local_value(p) is p and p.numel() > 0 for _, p in reg.params)


class CompiledHooks(EagerHooks):
    """The hooks of a compiled model's modules that run inside its graphs, and where their
    statistics arrive; `Recorder` chooses them in `_attach` where they apply."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        stash_value = getattr(self._stash_fn, "stash_value", None)
        # Statistics that a compiled model computes inside its graph (see _graph_hook).
        self._graph_fn: Any = (
            stash_value
            if self.stashes.store is not None and getattr(stash_value, "traceable", False)
            else None
        )
        # The key of the sink the graphs deliver to (the same for good; open while hooks
        # are attached), the registration of each site, the calls whose gradient is
        # awaited (by site and traced hook call, latest run last), and the step (count) at
        # which each parameter site was last recorded.
        self._sink: int | None = None
        self._sink_open = False
        self._site_regs: dict[int, Registration] = {}
        self._awaiting: dict[tuple[int, int], list[_Awaiting]] = {}
        self._param_steps: dict[int, int] = {}
        # Compiled callables (torch.compile) of the registered models; see register_all.
        self._compiled: list[Callable[..., Any]] = []

    def _graph_hook(self, reg: Registration) -> Callable[..., None]:
        """The forward hook of a compiled model's module with `stats=`: TorchDynamo traces
        it, and the gradient hooks it registers when gradients are recorded (torch >=
        2.13), into the model's graphs, so it adds no graph break. The forward and gradient
        statistics are computed in the graphs and reach `_deliver` through `emit` (see
        `graph_sink`) as the graphs run; nothing in the hooks changes between calls, so
        nothing recompiles (a hook appending to a Python list would make Dynamo guard on
        its length). What it cannot trace (a non-tensor or empty output, a leaf whose
        gradient is recorded) runs eagerly, behind a graph break.

        The gradient of an output that is a view is read as in eager mode, by the one rule
        `grad_hooks.stand_in`: its base's gradient, cut to the view, stands in when the
        view's own hook does not fire (the view was modified in place)."""
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
            if not isinstance(output, Tensor) or output.numel() == 0:
                eager(module, args, kwargs, output)
                return
            hooked = reg.grad and output.requires_grad
            if hooked and output.is_leaf:
                eager(module, args, kwargs, output)
                return
            call_id = traced_call()  # a constant in the compiled graph
            what = _OUTPUT
            if hooked:
                what = _HOOKED_OUTPUT

                # Both return the gradient unchanged: under compiled autograd a hook that
                # returns None replaces it with None.
                def grad_hook(grad: Tensor) -> Tensor:
                    emit(fn.graph_raw(grad), sink, site, call_id, grad.numel(), GRAD, _OUTPUT_GRAD)
                    return grad

                output.register_hook(grad_hook)  # type: ignore[no-untyped-call]
                base = stand_in(output)
                if base is not None:
                    cut = view_replay(output, base)

                    def base_hook(grad: Tensor) -> Tensor:
                        part = cut(grad)
                        emit(
                            fn.graph_raw(part), sink, site, call_id, part.numel(), GRAD, _BASE_GRAD
                        )
                        return grad

                    base.register_hook(base_hook)  # type: ignore[no-untyped-call]
            flags = TRAINING if training else 0
            emit(fn.graph_raw(output), sink, site, call_id, output.numel(), flags, what)

        return hook

    def _graph_param_hook(self, reg: Registration) -> Callable[..., None]:
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
        # values, unless the base has other uses than the view: see `stand_in`).
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
        budget = self._budget
        if budget is not None:
            budget.count(self.stashes, site, flags, store.nbytes - before)
        self.stashes.add(site, call, step, flags, ref)

    def _untraced_hook(self, reg: Registration) -> Callable[..., None]:
        """`_forward_hook` behind `torch.compiler.disable`: what a traced hook calls (behind
        a graph break) for an output it cannot trace."""
        return cast(Callable[..., None], torch.compiler.disable(self._forward_hook(reg)))  # type: ignore[no-untyped-call]

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
