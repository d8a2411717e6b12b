"""`summary`: one forward (and backward) pass of a model, summarised per module call.

Shapes, dtypes, bytes, parameter counts (each parameter once, tied weights too), forward and
backward times (inclusive and self, with the tool's own time taken out: wall clock on the
CPU, CUDA events on a GPU), on a GPU the allocator's memory per call, and whether outputs
and gradients held NaN or infinities, as a table, a nested dict, a text table like
torchinfo's and an HTML table in notebooks.

The work is split as torchinfo splits it: `_summary_record` runs the pass with the hooks,
`_summary_data` holds what one call recorded (`ModuleCall`) and works out the totals
(`Summary`), `_summary_format` writes them as text; `_summary_recording` makes the same
`Summary` from a tracker's records. This module runs them in turn.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .._core.structure import iter_tensors
from .._torch_compat import compiled_callable
from .._validate import check_bool, check_callable, check_type
from ._summary_data import ModuleCall, Summary, add_times, set_params
from ._summary_record import SummaryRecorder, run_pass
from ._summary_recording import recorded_summary
from .timeline import Clock, CudaMemory, EventClock, WallClock

__all__ = ["ModuleCall", "Summary", "recorded_summary", "summary"]


def summary(
    model: nn.Module,
    *inputs: Any,
    backward: bool = True,
    loss_fn: Callable[[Any], Tensor] | None = None,
    **kwargs: Any,
) -> Summary:
    """Run `model(*inputs, **kwargs)` once (and a backward pass) and summarise every module
    call: shapes, dtypes, bytes, parameter counts, times, NaN/inf flags (see `ModuleCall`).

    Parameter totals count each parameter once, also when it is shared (tied embeddings)
    or its module is called twice. A parent's time includes its children's, and the self
    times add up to the parent's; the summary's own work is taken out of every time. A
    call's backward time is the time the backward pass spent running the autograd
    operations that call's forward made (told apart by their sequence numbers), so calls
    that share a tensor or a tied weight are not charged for each other; what runs
    outside every module (the loss, accumulating parameter gradients) counts only in
    `Summary.backward_ms`. The model's gradients are left as the backward pass made them
    (call `zero_grad()`).

    Modules are named as `track()` names them (an aliased module by its first name; a
    compiled, DDP or FSDP model by the names of the plain model). A compiled model runs
    eagerly for the pass, as the Python it was compiled from (its compiled code stays for
    later calls): a compiled graph fuses the modules' operations, so per-module shapes and
    times exist only there; the times are the eager model's, as `timing` says.

    On the CPU, times are wall clock. When the model or its inputs are on a GPU, times come
    from CUDA events recorded on the current stream in the hooks and read after the pass
    (nothing waits for the GPU inside a hook; NaN/inf checks are read after the pass too),
    and each call gets the CUDA caching allocator's figures: the bytes it left allocated
    and its peak above what was allocated when it started (`ModuleCall.forward_mem_bytes`,
    `forward_peak_bytes`; `Summary.peak_bytes` for the pass). To measure peaks, the
    allocator's peak counter is reset at every hook, so `torch.cuda.max_memory_allocated`
    counts from the end of the pass. A model whose GPU waits for the host (many small
    kernels) shows the time the host took to launch them, the hooks' own host time
    included.

    Args:
        model: the model.
        *inputs, **kwargs: what to call it with.
        backward: also run a backward pass (of `loss_fn(output)`).
        loss_fn: turns the output into the scalar to differentiate; default: the sum of
            every floating-point tensor of the output.

    Returns:
        A `Summary`; `print(s)` for a table, `s.to_frame()` for pandas.

    Raises:
        TypeError: `model` is not an `nn.Module`, `loss_fn` is not callable or does not
            return a tensor.
        Exception: what the model raised, with `.summary_calls` attached (the calls made
            before it); the hooks are removed either way.

    Example:
        >>> s = summary(model, x)
        >>> s.total_params, len(s)
        (172, 4)
    """
    check_type(model, nn.Module, "model", "a torch.nn.Module")
    check_bool(backward, "backward=")
    if loss_fn is not None:
        check_callable(loss_fn, "loss_fn=", "output -> scalar tensor")
    device = _cuda_device(model, (inputs, kwargs))
    if device is None:
        return _measure(model, inputs, kwargs, backward, loss_fn, WallClock(), None)
    clock = EventClock(
        lambda: torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
        lambda: torch.cuda.synchronize(device),
    )
    return _measure(model, inputs, kwargs, backward, loss_fn, clock, CudaMemory(device))


def _cuda_device(model: nn.Module, inputs: Any) -> torch.device | None:
    """The CUDA device the pass runs on: its first CUDA parameter's, buffer's or input's."""
    tensors = itertools.chain(model.parameters(), model.buffers(), iter_tensors(inputs))
    return next((t.device for t in tensors if t.is_cuda), None)


def _measure(
    model: nn.Module,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    backward: bool,
    loss_fn: Callable[[Any], Tensor] | None,
    clock: Clock,
    memory: CudaMemory | None,
) -> Summary:
    """The pass of `summary`, timed by `clock` and, on CUDA, with `memory`'s figures."""
    recorder = SummaryRecorder(model, clock, memory)
    try:
        marks = run_pass(recorder, model, inputs, kwargs, backward, loss_fn)
    except Exception as error:
        recorder.remove()
        # What the calls so far found, as far as it can be read (a device error may stop
        # that too: the user's exception is what matters).
        with contextlib.suppress(Exception):
            _finish(recorder)
        with contextlib.suppress(AttributeError):  # exceptions with __slots__
            error.summary_calls = recorder.calls  # type: ignore[attr-defined]
        raise
    recorder.remove()
    times = _finish(recorder)
    forward_ms = times[marks[1]] - times[marks[0]]
    backward_ms = times[marks[3]] - times[marks[2]] if len(marks) == 4 else math.nan
    result = Summary(recorder.calls, model, forward_ms, backward_ms)
    result.timing = clock.name
    if any(compiled_callable(m) is not None for m in model.modules()):
        result.timing += ", run eagerly (not the compiled code)"
    if memory is not None:
        result.device = str(memory.device)
        result.peak_bytes = memory.pass_peak - memory.pass_start
    return result


def _finish(recorder: SummaryRecorder) -> list[float]:
    """Once the pass is over: read the NaN/inf flags and the clock's marks (this waits for
    the device), then fill in parameter counts, forward, backward and self times. Returns
    the time of every mark (ms)."""
    for index, field in recorder.flags.resolve():
        setattr(recorder.calls[index], field, True)
    times = recorder.clock.times()
    modules = dict(recorder.hooks.names)
    for c in recorder.calls:
        set_params(c, modules[c.name])
    add_times(recorder.calls, times, recorder.forward_marks, recorder.node_marks)
    return times
