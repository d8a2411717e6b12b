"""Statistics computed inside a compiled graph, handed to their tracker as the graph runs.

A tracker's hooks on a compiled model that records gradients are traced into the model's
graphs (`Recorder._graph_grad_hook`): forward statistics into the forward graph, and the
tensor hooks that read the gradients, with their statistics, into the backward graph
(Dynamo traces a hook on an intermediate tensor since torch 2.13). What they compute has to
leave the graph without a graph break and without Dynamo replaying a Python side effect,
which would make it guard on (and recompile for) the tracker's state. So they call
`tensor_tracker::emit`, a custom operator declared to have an ordered side effect (no
compiler pass drops it or moves it past another `emit`), whose kernel gives the statistics
to the tracker that owns the sink: at run time, in the order the graph computes them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._torch_compat import declare_ordered_effect, traces_intermediate_hooks

__all__ = ["Sink", "add_sink", "available", "emit_op", "hook_call_id", "remove_sink"]

Sink = Callable[[Tensor, int, int, int, int, int], None]
"""Receives what a traced hook passed to `emit`: (raw statistics, site, hook call id,
element count, flags, what they are)."""

_SINKS: dict[int, Sink] = {}
_KEYS = itertools.count()
_CALL_IDS = itertools.count()
_OP: Any = None


def available() -> bool:
    """Whether this torch can trace gradient hooks with `emit` into a compiled graph."""
    return traces_intermediate_hooks() and hasattr(torch.library, "custom_op")


def add_sink(sink: Sink) -> int:
    """Register `sink`; returns the key a traced hook passes to `emit` to reach it."""
    key = next(_KEYS)
    _SINKS[key] = sink
    return key


def remove_sink(key: int) -> None:
    """Forget a sink: graphs compiled with its key still run, and their `emit`s do nothing."""
    _SINKS.pop(key, None)


def hook_call_id() -> int:
    """A new number for each call of a traced hook. Under torch.compile it is evaluated
    once, while Dynamo traces the hook, and the graph keeps it as a constant (see
    `emit_op`): in every run of the graph it names the same traced call, so that the
    gradient hooks registered by that call can say which forward call their gradient
    belongs to, in whatever order the compiled graphs run them."""
    return next(_CALL_IDS)


def _emit(
    raw: Tensor, sink: int, site: int, call_id: int, numel: int, flags: int, what: int
) -> None:
    found = _SINKS.get(sink)
    if found is not None:
        found(raw, site, call_id, numel, flags, what)


def _emit_fake(
    raw: Tensor, sink: int, site: int, call_id: int, numel: int, flags: int, what: int
) -> None:
    return None


def emit_op() -> Any:
    """The operator `tensor_tracker::emit(raw, sink, site, call_id, numel, flags, what)
    -> ()`, defined on first use (needs `available()`)."""
    global _OP
    if _OP is None:
        op = torch.library.custom_op("tensor_tracker::emit", _emit, mutates_args=())
        op.register_fake(_emit_fake)
        # Without a declared effect, an operator that returns nothing is dead code to
        # AOTAutograd. (Inductor still schedules the calls by their data dependencies
        # alone: independent ones may run in another order than traced.)
        declare_ordered_effect(op)
        # Marked here, not where it is defined: the marker imports torch._dynamo.
        torch.compiler.assume_constant_result(hook_call_id)  # type: ignore[no-untyped-call]
        _OP = torch.ops.tensor_tracker.emit.default
    return _OP
