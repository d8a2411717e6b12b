"""The recording pass of `summary`: the model run once (and its backward pass) with
temporary hooks, noting per module call its tensors' shapes, dtypes and bytes, marks on a
clock, NaN/inf flags and, on a GPU, the allocator's figures. Times and totals are worked
out afterwards, from the marks, by `_summary_data`."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .._core.calls import CallHooks, eager_calls
from .._core.grad_hooks import hook_grad
from .._core.structure import iter_tensors
from .._data.frame import type_name
from .._torch_compat import next_sequence_nr
from ..errors import ArgumentTypeError
from ._summary_data import ModuleCall, describe
from .timeline import Clock, CudaMemory, NonFiniteFlags

__all__ = ["SummaryRecorder", "run_pass"]


class SummaryRecorder:
    """The hooks of one summary pass (`CallHooks`, with the gradient and autograd node
    hooks it adds, all removed by `remove()`). They note marks on `clock` (resolved to times after
    the pass), NaN/inf flags as device tensors, shapes, and, with `memory`, the CUDA
    allocator's figures; nothing waits for a device.

    Backward times come from the autograd nodes themselves: each node a call's forward made
    (told by their sequence numbers) is timed as it runs, and a call's backward time is
    the time its nodes and its children's took. Times of tensors' gradients arriving would
    not do: a tensor used by several calls (a tied weight, a cache passed to every block)
    gets its gradient when the last user's backward is done."""

    def __init__(self, model: nn.Module, clock: Clock, memory: CudaMemory | None) -> None:
        self.calls: list[ModuleCall] = []
        self.clock = clock
        self.memory = memory
        self.flags = NonFiniteFlags()
        self.stack: list[tuple[int, int]] = []  # (call index, start mark) of running calls
        self.forward_marks: dict[int, tuple[int, int]] = {}  # call index -> (start, end)
        # Per call, the sequence numbers of the autograd nodes its forward made: [start, end).
        self.sequence: dict[int, tuple[int, int]] = {}
        self.node_marks: list[tuple[int, int, int]] = []  # (call, node start, node end)
        self.counts: dict[str, int] = {}
        self.handles: list[Any] = []  # of the gradient and autograd node hooks
        self.hooks = CallHooks(model, self._pre, self._post)

    def remove(self) -> None:
        self.hooks.remove()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _pre(
        self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        now = self.clock.enter()
        call = self.counts.get(name, 0)
        self.counts[name] = call + 1
        inputs = list(iter_tensors((args, kwargs)))
        parent = self.stack[-1][0] if self.stack else -1
        record = ModuleCall(name, type_name(type(module)), len(self.stack), call, parent)
        record.input_shapes, record.input_dtypes, record.input_bytes = describe(inputs)
        index = len(self.calls)
        self.calls.append(record)
        self.stack.append((index, now))
        for position, tensor in enumerate(inputs):
            if tensor.requires_grad and torch.is_grad_enabled():
                hook = self._grad_hook(index, position, len(inputs), output=False)
                self.handles.append(hook_grad(tensor, hook))
        if self.memory is not None:
            self.memory.enter()
        first = next_sequence_nr()
        if first is not None:
            self.sequence[index] = (first, first)
        self.clock.leave()

    def _post(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        now = self.clock.enter()
        index, start = self.stack.pop()
        self.forward_marks[index] = (start, now)
        if index in self.sequence:
            self.sequence[index] = (self.sequence[index][0], next_sequence_nr() or 0)
        record = self.calls[index]
        if self.memory is not None:
            record.forward_mem_bytes, record.forward_peak_bytes = self.memory.leave()
        outputs = list(iter_tensors(output))
        record.output_shapes, record.output_dtypes, record.output_bytes = describe(outputs)
        self.flags.note((index, "output_nonfinite"), outputs)
        for position, tensor in enumerate(outputs):
            if tensor.requires_grad:
                hook = self._grad_hook(index, position, len(outputs), output=True)
                self.handles.append(hook_grad(tensor, hook))
        self.clock.leave()

    def _grad_hook(
        self, index: int, position: int, count: int, output: bool
    ) -> Callable[[Tensor], None]:
        """The hook reading the gradient of output (or input) tensor number `position` of
        the `count` of call `index`."""
        record = self.calls[index]
        shapes, flag = (
            (record.grad_output_shapes, "grad_output_nonfinite")
            if output
            else (record.grad_input_shapes, "grad_input_nonfinite")
        )

        def hook(grad: Tensor) -> None:
            self.clock.enter()
            # Gradients arrive in backward order, not the outputs' order: each goes to its
            # tensor's place, and those no gradient reaches stay None.
            if not shapes:
                shapes.extend([None] * count)
            shapes[position] = tuple(grad.shape)
            self.flags.note((index, flag), [grad])
            self.clock.leave()

        return hook

    def time_nodes(self, roots: list[Any]) -> None:
        """Time, in the coming backward pass, every autograd node that `roots` (the loss's
        nodes) reach and that a module call's forward made, for that (innermost) call."""
        if len(self.sequence) != len(self.calls):
            return  # this torch does not number the nodes
        # Calls are numbered in the order they started, parents before their children.
        starts = [self.sequence[index][0] for index in range(len(self.calls))]
        seen: set[Any] = set()
        pending = [node for node in roots if node is not None]
        while pending:
            node = pending.pop()
            if node in seen:
                continue
            seen.add(node)
            pending.extend(n for n, _ in node.next_functions if n is not None)
            number = node._sequence_nr()
            # The innermost call that made it: of the last call to start before it, the
            # nearest enclosing call (itself first) that had not ended yet.
            index = bisect.bisect_right(starts, number) - 1
            while index >= 0 and number >= self.sequence[index][1]:
                index = self.calls[index].parent
            if index >= 0:
                self._time_node(node, index)

    def _time_node(self, node: Any, index: int) -> None:
        started: list[int] = []

        def before(grad_outputs: Any) -> None:
            started.append(self.clock.enter())
            self.clock.leave()

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            end = self.clock.enter()
            if started:
                self.node_marks.append((index, started.pop(), end))
            self.clock.leave()

        self.handles.append(node.register_prehook(before))
        self.handles.append(node.register_hook(after))


def _mark(clock: Clock) -> int:
    mark = clock.enter()
    clock.leave()
    return mark


def run_pass(
    recorder: SummaryRecorder,
    model: nn.Module,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    backward: bool,
    loss_fn: Callable[[Any], Tensor] | None,
) -> list[int]:
    """Run `model(*inputs, **kwargs)` (and, with `backward`, the backward pass of
    `loss_fn(output)`, by default the sum of its floating-point tensors) under `recorder`'s
    hooks; return the clock's marks of the forward start and end, then of the backward's.
    The hooks stay: the caller removes them, error or not.

    Raises:
        TypeError: `loss_fn` did not return a tensor.
    """
    clock, memory = recorder.clock, recorder.memory
    marks: list[int] = []
    # A compiled model runs its Python modules (see `CallHooks`).
    with eager_calls():
        if memory is not None:
            memory.begin_pass()
        marks.append(_mark(clock))
        output = model(*inputs, **kwargs)
        marks.append(_mark(clock))
        if backward:
            if loss_fn is not None:
                loss = loss_fn(output)
            else:
                floats = [t for t in iter_tensors(output) if t.is_floating_point()]
                loss = sum((t.sum() for t in floats if t.requires_grad), torch.zeros(()))
            if not isinstance(loss, Tensor):
                raise ArgumentTypeError(
                    f"loss_fn= must return a tensor to differentiate, got {type(loss).__name__}"
                )
            if loss.requires_grad:
                recorder.time_nodes([loss.grad_fn])
                marks.append(_mark(clock))
                loss.backward()  # type: ignore[no-untyped-call]
                marks.append(_mark(clock))
        if memory is not None:
            memory.end_pass()
    return marks
