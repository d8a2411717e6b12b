"""Statistics computed inside a compiled graph, handed to their tracker as the graph runs.

A tracker's hooks on a compiled model with `stats=` are traced into the model's graphs
(`CompiledHooks.forward_hook`): forward statistics into the forward graph and, when gradients
are recorded, the tensor hooks that read them, with their statistics, into the backward
graph (Dynamo traces a hook on an intermediate tensor since torch 2.13). What they compute has to
leave the graph without a graph break and without Dynamo replaying a Python side effect,
which would make it guard on (and recompile for) the tracker's state. So they call
`tensor_tracker::emit`, a custom operator declared to have a side effect (no compiler pass
drops it), whose kernel gives the statistics (on the CPU, the tensor itself, whose
statistics the tracker computes: `compiled._emitted`) to the tracker that owns the sink, at
run time. The calls run in the order the compiled code computes them: program order with the
`eager` and `aot_eager` backends, an order of Inductor's choosing (by data dependencies)
with Inductor, so nothing may depend on it but the order of the records.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from .._torch_compat import keep_in_graph, traces_intermediate_hooks

__all__ = [
    "Sink",
    "can_emit",
    "close_sink",
    "emit_op",
    "mark_trace_constant",
    "new_sink_key",
    "open_sink",
    "traces_gradients",
]

Sink = Callable[[Tensor, list[Tensor], int, int, int, int, int, int, int], None]
"""Receives what a traced hook passed to `emit`: (raw statistics, or the tensor itself,
the statistics per channel, per sample and per attention head (`StatsFn.graph_vectors`),
site, hook call id,
element count, flags, what they are, and where the tensor was: its position in a tuple of
that length, or -1 and 0: see `plan.graph_part`)."""

_F = TypeVar("_F", bound=Callable[..., Any])

_SINKS: dict[int, Sink] = {}
_KEYS = itertools.count()
_OP: Any = None


def can_emit() -> bool:
    """Whether this torch can define `emit` (`torch.library.custom_op`, torch >= 2.4)."""
    return hasattr(torch.library, "custom_op")


def traces_gradients() -> bool:
    """Whether this torch traces gradient hooks (with `emit`) into a compiled graph."""
    return traces_intermediate_hooks() and can_emit()


def new_sink_key() -> int:
    """A key for a sink, that traced hooks pass to `emit`: a tracker keeps its key for
    good, so that the graphs compiled again when its hooks are attached again are the same
    (and Inductor finds them in its cache)."""
    return next(_KEYS)


def open_sink(key: int, sink: Sink) -> None:
    """Deliver what `emit` receives for `key` to `sink` from now on."""
    _SINKS[key] = sink


def close_sink(key: int) -> None:
    """Stop delivering for `key`: graphs compiled with it still run, their `emit`s do
    nothing."""
    _SINKS.pop(key, None)


def mark_trace_constant(fn: _F) -> _F:
    """Mark `fn` so that Dynamo calls it once, while tracing (with constant arguments), and
    keeps its result as a constant of the graph (`torch.compiler.assume_constant_result`),
    with no guard on it."""
    torch.compiler.assume_constant_result(fn)  # type: ignore[no-untyped-call]
    return fn


def _emit(
    raw: Tensor,
    vectors: list[Tensor],
    sink: int,
    site: int,
    call_id: int,
    numel: int,
    flags: int,
    what: int,
    index: int = -1,
    length: int = 0,
) -> None:
    found = _SINKS.get(sink)
    if found is not None:
        found(raw, vectors, site, call_id, numel, flags, what, index, length)


def _emit_fake(
    raw: Tensor,
    vectors: list[Tensor],
    sink: int,
    site: int,
    call_id: int,
    numel: int,
    flags: int,
    what: int,
    index: int = -1,
    length: int = 0,
) -> None:
    return None


_SCHEMA = (
    "emit(Tensor raw, Tensor[] vectors, int sink, int site, int call_id, int numel, "
    "int flags, int what, int index=-1, int length=0) -> ()"
)
_LIBRARY: Any = None


def emit_op() -> Any:
    """The operator `tensor_tracker::emit(raw, vectors, sink, site, call_id, numel, flags,
    what, index=-1, length=0) -> ()`, defined on first use (needs `can_emit()`).

    Its kernel is registered for every backend (`CompositeExplicitAutograd`) through
    `torch.library.Library`, not `torch.library.custom_op`, whose Python autograd and
    dispatch layers cost more per call than the kernel itself (measured: about three
    quarters of the time of a compiled step's `emit` calls); it returns nothing, so it
    needs no autograd formula."""
    global _OP, _LIBRARY
    if _OP is None:
        library = torch.library.Library("tensor_tracker", "FRAGMENT")  # type: ignore[no-untyped-call]
        library.define(_SCHEMA)  # type: ignore[no-untyped-call]
        library.impl("emit", _emit, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        torch.library.register_fake("tensor_tracker::emit", _emit_fake, lib=library)
        _LIBRARY = library  # the registrations last as long as it does
        _OP = torch.ops.tensor_tracker.emit.default
        # An operator that returns nothing is dead code to AOTAutograd unless declared to
        # have a side effect.
        keep_in_graph(_OP)
    return _OP
