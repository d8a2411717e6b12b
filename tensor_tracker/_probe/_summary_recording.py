"""`recorded_summary`: the `Summary` of one step of a tracker's recording (what
`Tracker.summary` returns), worked out from its records without running the model:
calls and their nesting from the order outputs were recorded, gradients put in their
tensors' places."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from .._core.records import Stash
from .._core.structure import iter_leaves, iter_tensors
from .._data.frame import type_name
from .._data.nonfinite import nonfinite_flags
from ..errors import ArgumentValueError
from ..stats import Stats
from ._summary_data import ModuleCall, Summary, describe, set_params

__all__ = ["recorded_summary"]


def _enclosing_name(name: str, names: Collection[str]) -> str | None:
    """The nearest registered module containing `name`, or None."""
    while name:
        name = name.rpartition(".")[0]
        if name in names:
            return name
    return None


def recorded_summary(
    stashes: Sequence[Stash], modules: Mapping[str, nn.Module], step: int | None = None
) -> Summary:
    """The `Summary` of one step of a recording (what `Tracker.summary` returns), without
    running the model again: one `ModuleCall` per recorded module output.

    Shapes, dtypes and bytes come from recorded copies (as stored: a `dtype=` copy shows
    that dtype, a `sample=` copy its sample); statistics have none of these (empty/0, and
    `Summary.not_recorded` and the table say so).
    Input shapes and input-gradient shapes need `capture=("inputs", "outputs")`. NaN/inf
    flags come from the copies or from the statistics `first_nonfinite` reads. Times are not
    measured (NaN): `summary(model, x)` times a pass. Parameter counts come from `modules`.

    Args:
        stashes: the records (a tracker's, or a list of `Stash`).
        modules: registered name -> module, for parameter counts.
        step: which step (default: the last one recorded).

    Raises:
        ValueError: `step` was not recorded.
    """
    steps = [s.step for s in stashes]
    if step is None:
        step = max(steps, default=0)
    elif step not in set(steps):
        raise ArgumentValueError(
            f"summary: step={step} was not recorded; recorded steps: {sorted(set(steps))}"
        )
    rows = [i for i, s in enumerate(stashes) if s.step == step]
    bad = nonfinite_flags(stashes)
    # Calls in the order they finished (children before parents) and their parents: the
    # next call of the nearest registered ancestor to finish after them.
    outputs = [i for i in rows if not stashes[i].grad and stashes[i].kind == "output"]
    names = {stashes[i].name for i in outputs}
    key_of = {(stashes[i].name, stashes[i].call): i for i in outputs}
    parent_of: dict[int, int] = {}
    for position, i in enumerate(outputs):
        ancestor = _enclosing_name(stashes[i].name, names)
        later = (j for j in outputs[position + 1 :] if stashes[j].name == ancestor)
        parent_of[i] = next(later, -1)
    children: dict[int, list[int]] = {}
    for i in outputs:
        children.setdefault(parent_of[i], []).append(i)
    order: list[int] = []  # the order calls started: parents first (depth-first)
    pending = list(reversed(children.get(-1, [])))
    while pending:
        i = pending.pop()
        order.append(i)
        pending.extend(reversed(children.get(i, [])))
    index_of = {i: k for k, i in enumerate(order)}
    calls: list[ModuleCall] = []
    for i in order:
        s = stashes[i]
        parent = index_of.get(parent_of[i], -1)
        depth = calls[parent].depth + 1 if parent >= 0 else 0
        c = ModuleCall(s.name, type_name(s.type), depth, s.call, parent)
        c.output_shapes, c.output_dtypes, c.output_bytes = describe(list(iter_tensors(s.value)))
        c.output_nonfinite = bool(bad[i])
        if s.name in modules:
            set_params(c, modules[s.name])
        calls.append(c)
    # Gradient records come in backward order: each goes to its tensors' places among the
    # call's outputs or inputs (an input's by its argument), so inputs are read first.
    places: dict[tuple[int, str], int] = {}  # (call's record, argument) -> its first tensor
    grads: list[tuple[int, int, Stash]] = []
    for i in rows:
        s = stashes[i]
        k = key_of.get((s.name, s.call))
        if k is None or s.kind not in ("input", "output"):
            continue
        if s.grad:
            grads.append((i, k, s))
        elif s.kind == "input":
            c = calls[index_of[k]]
            shapes, dtypes, size = describe(list(iter_tensors(s.value)))
            places[(k, s.attr)] = len(c.input_shapes)
            c.input_shapes += shapes
            c.input_dtypes += dtypes
            c.input_bytes += size
    for i, k, s in grads:
        c = calls[index_of[k]]
        if s.kind == "input":
            start = places.get((k, s.attr))
            if start is not None:
                _place_shapes(c.grad_input_shapes, len(c.input_shapes), start, s.value)
            c.grad_input_nonfinite |= bool(bad[i])
        else:
            _place_shapes(c.grad_output_shapes, len(c.output_shapes), 0, s.value)
            c.grad_output_nonfinite |= bool(bad[i])
    found = Summary(calls, list(modules.values()), math.nan, math.nan)
    if any(isinstance(v, Stats) for i in outputs for v in iter_leaves(stashes[i].value)):
        found.not_recorded = (
            "the tracker kept statistics, not tensors; summary(model, x) runs the model "
            "and has them"
        )
    return found


def _place_shapes(shapes: list[tuple[int, ...] | None], count: int, start: int, grads: Any) -> None:
    """Put the shapes of a gradient record's value (one entry per tensor of the input or
    output it is the gradient of, None where no gradient arrived) into `shapes` from
    `start`, as `summary` lists them: `count` entries once any gradient arrived, None where
    none did. Statistics (no tensors, no shapes) leave `shapes` as they are."""
    leaves = list(iter_leaves(grads))
    if not any(isinstance(g, Tensor) for g in leaves):
        return
    if not shapes:
        shapes.extend([None] * count)
    for position, g in enumerate(leaves, start):
        # A later backward pass of the same call fills only what the first left out.
        if isinstance(g, Tensor) and position < count and shapes[position] is None:
            shapes[position] = tuple(g.shape)
