"""`summary`: one forward (and backward) pass of a model, summarised per module call.

Shapes, dtypes, bytes, parameter counts (each parameter once, tied weights too), forward and
backward times (inclusive and self, with the tool's own time taken out: wall clock on the
CPU, CUDA events on a GPU), on a GPU the allocator's memory per call, and whether outputs
and gradients held NaN or infinities, as a table, a nested dict, a text table like
torchinfo's and an HTML table in notebooks.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import html
import itertools
import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .._optional import require
from .._torch_compat import compiled_callable, next_sequence_nr
from .._validate import check_bool, check_callable, check_count, check_int, check_type
from ..core.calls import CallHooks, eager_calls
from ..core.grad_hooks import hook_grad
from ..core.records import Stash
from ..core.structure import iter_leaves, iter_tensors
from ..data.frame import type_name
from ..data.nonfinite import nonfinite_flags
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import Stats
from .timeline import Clock, CudaMemory, EventClock, NonFiniteFlags, WallClock

if TYPE_CHECKING:
    import pandas

__all__ = ["ModuleCall", "Summary", "recorded_summary", "summary"]


@dataclasses.dataclass
class ModuleCall:
    """One call of one module in the summarised pass (see `summary`).

    Attributes:
        name: the module's name (`""` for the model itself), as `track()` names it;
            `type`: its class name.
        depth: nesting depth (0 for the model); `call`: which call of this module.
        parent: index of the enclosing call in `Summary.calls` (-1 for the model's call).
        input_shapes, input_dtypes, output_shapes, output_dtypes: one entry per tensor.
        grad_output_shapes, grad_input_shapes: shapes of the gradients of the outputs and
            of the inputs, one entry per tensor of `output_shapes` / `input_shapes` in the
            same order, `None` for a tensor no gradient reached (empty when none reached
            any, e.g. without a backward pass).
        params: parameters of this module itself; params_total: of it and its submodules,
            each parameter counted once; trainable: of those, the ones requiring grad.
        param_bytes, grad_bytes: bytes of `params_total`'s parameters and of their `.grad`.
        input_bytes, output_bytes: bytes of the input and output tensors.
        forward_ms: time of the call, children included (NaN where not measured).
        backward_ms: time the backward pass spent in the autograd operations this call's
            forward made, children included (NaN when none ran).
        self_forward_ms, self_backward_ms: the same without the children's.
        forward_mem_bytes: on a GPU, the bytes the call left allocated (its outputs and
            what it saved for the backward pass); `None` on the CPU.
        forward_peak_bytes: on a GPU, the most the call had allocated at once above what
            was allocated when it started (outputs and working memory, its children's
            included); `None` on the CPU.
        output_nonfinite, grad_output_nonfinite, grad_input_nonfinite: whether any of
            those tensors held a NaN or an infinity.
    """

    name: str
    type: str
    depth: int
    call: int
    parent: int
    input_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    input_dtypes: list[str] = dataclasses.field(default_factory=list)
    output_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    output_dtypes: list[str] = dataclasses.field(default_factory=list)
    grad_output_shapes: list[tuple[int, ...] | None] = dataclasses.field(default_factory=list)
    grad_input_shapes: list[tuple[int, ...] | None] = dataclasses.field(default_factory=list)
    params: int = 0
    params_total: int = 0
    trainable: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    forward_ms: float = math.nan
    self_forward_ms: float = math.nan
    backward_ms: float = math.nan
    self_backward_ms: float = math.nan
    forward_mem_bytes: int | None = None
    forward_peak_bytes: int | None = None
    output_nonfinite: bool = False
    grad_output_nonfinite: bool = False
    grad_input_nonfinite: bool = False


def _nbytes(tensors: list[Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtypes(tensors: list[Tensor]) -> list[str]:
    return [str(t.dtype).removeprefix("torch.") for t in tensors]


class _Recorder:
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
        record.input_shapes = [tuple(t.shape) for t in inputs]
        record.input_dtypes = _dtypes(inputs)
        record.input_bytes = _nbytes(inputs)
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
        record.output_shapes = [tuple(t.shape) for t in outputs]
        record.output_dtypes = _dtypes(outputs)
        record.output_bytes = _nbytes(outputs)
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


def _finite(value: Any) -> Any:
    """`value` with every non-finite float inside its dicts, lists and tuples replaced by
    None: `json.dumps` writes them as bare `NaN` and `Infinity`, which are not JSON
    (JavaScript's `JSON.parse` and jq reject the whole text)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


def _subtree_params(module: nn.Module) -> list[nn.Parameter]:
    return list(dict.fromkeys(module.parameters()))  # shared parameters once


class Summary:
    """What `summary` found: one `ModuleCall` per module call, in the order calls started.

    Read it as `to_frame()` (pandas), `to_dict()` / `to_json()` (nested by module tree),
    `print(s)` (a text table; `s.table(depth=2)` for fewer levels) or, in a notebook, as an
    HTML table.

    Attributes:
        calls: the `ModuleCall`s.
        total_params, trainable_params, param_bytes: of the whole model, each parameter once.
        forward_ms, backward_ms: the whole pass (NaN where not measured).
        timing: how times were measured: `"wall clock"` (CPU), `"CUDA events"` (GPU) or
            `"not measured"` (a tracker's recording); followed by `", run eagerly (not the
            compiled code)"` for a compiled model (see `summary`).
        device: the CUDA device whose memory was measured (`None` on the CPU).
        peak_bytes: on a GPU, the most the pass had allocated at once above what was
            allocated before it (`None` on the CPU).
        not_recorded: why shapes, dtypes and bytes are missing (a tracker that kept
            statistics, not tensors), shown in the table; `None` when they are there.
    """

    def __init__(
        self,
        calls: list[ModuleCall],
        model: nn.Module | Sequence[nn.Module],
        forward_ms: float,
        backward_ms: float,
    ) -> None:
        self.calls = calls
        models = [model] if isinstance(model, nn.Module) else model
        params = list(dict.fromkeys(p for m in models for p in _subtree_params(m)))
        self.total_params = sum(p.numel() for p in params)
        self.trainable_params = sum(p.numel() for p in params if p.requires_grad)
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        self.forward_ms = forward_ms
        self.backward_ms = backward_ms
        self.timing = "not measured"
        self.device: str | None = None
        self.peak_bytes: int | None = None
        self.not_recorded: str | None = None

    def _header(self) -> list[str]:
        memory = ["fwd peak MiB"] if self.device is not None else []
        return ["module (type)", "output shape", "params", "fwd ms", "bwd ms", *memory, ""]

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[ModuleCall]:
        return iter(self.calls)

    def to_frame(self) -> pandas.DataFrame:
        """One row per module call, one column per `ModuleCall` field.

        Example:
            >>> frame = summary(model, x).to_frame()
            >>> frame.loc[frame["name"] == "0", ["params", "output_shapes"]].values.tolist()
            [[136, [(8, 8)]]]
        """
        pd = require("pandas", "pandas")
        frame: pandas.DataFrame = pd.DataFrame([dataclasses.asdict(c) for c in self.calls])
        return frame

    def to_dict(self) -> dict[str, Any]:
        """The calls nested by module tree: `{"model": {"info": {...}, "children": {...}}}`,
        children keyed by name (with `#call` for a module's later calls).

        Example:
            >>> list(summary(model, x).to_dict()["model"]["children"])
            ['0', '1', '2']
        """
        nodes: list[dict[str, Any]] = []
        root: dict[str, Any] = {}
        for call in self.calls:
            node: dict[str, Any] = {"info": dataclasses.asdict(call), "children": {}}
            nodes.append(node)
            short = call.name.rsplit(".", 1)[-1] if call.parent >= 0 else "model"
            parent = nodes[call.parent]["children"] if call.parent >= 0 else root
            parent[short if short not in parent else f"{short}#{call.call}"] = node
        return root

    def to_json(self, **kwargs: Any) -> str:
        """`to_dict()` as JSON text (`kwargs` go to `json.dumps`, e.g. `indent=2`), with
        `null` for the numbers that are NaN in `to_dict()` (times not measured): bare `NaN`
        is not JSON."""
        return json.dumps(_finite(self.to_dict()), **kwargs)

    def _rows(self, depth: int | None) -> list[list[str]]:
        rows = []
        for c in self.calls:
            if depth is not None and c.depth > depth:
                continue
            label = "  " * c.depth + (c.name.rsplit(".", 1)[-1] or "(model)")
            if c.call:
                label += f" #{c.call}"
            # A Hugging Face model returns its cache too: the first shapes say enough.
            shapes = ", ".join(str(list(s)) for s in c.output_shapes[:2])
            shapes = shapes or ("not recorded" if self.not_recorded else "-")
            if len(c.output_shapes) > 2:
                shapes += f" (+{len(c.output_shapes) - 2} more)"
            flag = "NaN/inf" if c.output_nonfinite or c.grad_input_nonfinite else ""
            memory = []
            if self.device is not None:
                peak = c.forward_peak_bytes
                memory.append("-" if peak is None else f"{peak / 2**20:.2f}")
            rows.append(
                [
                    f"{label} ({c.type.rsplit('.', 1)[-1]})",
                    shapes,
                    f"{c.params:,}" if c.params else "-",
                    _ms(c.forward_ms),
                    _ms(c.backward_ms),
                    *memory,
                    flag,
                ]
            )
        return rows

    def table(self, depth: int | None = None) -> str:
        """The text table `print(s)` shows, down to `depth` levels (`None`: all).

        Raises:
            TypeError, ValueError: `depth` is not a non-negative int.
        """
        if depth is not None:
            check_count(
                check_int(depth, "depth=") + 1, "depth=", "levels to show (0: the model alone) + 1"
            )
        header = self._header()
        rows = [header, *self._rows(depth)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        line = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [line]
        for i, row in enumerate(rows):
            out.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
            if i == 0:
                out.append(line)
        return "\n".join([*out, line, *self._totals(), line])

    def _totals(self) -> list[str]:
        if self.forward_ms != self.forward_ms:
            times = "Times: not measured (a tracker's recording; summary(model, x) times them)"
        else:
            times = (
                f"Forward: {_ms(self.forward_ms)} ms, backward: {_ms(self.backward_ms)} ms "
                f"({self.timing})"
            )
        lines = [
            f"Total params: {self.total_params:,} (trainable: {self.trainable_params:,}, "
            f"{self.param_bytes / 2**20:.2f} MiB)",
            times,
        ]
        if self.not_recorded is not None:
            lines.append(f"Shapes, dtypes and bytes: not recorded ({self.not_recorded})")
        if self.peak_bytes is not None:
            lines.append(
                f"Peak memory of the pass on {self.device}: {self.peak_bytes / 2**20:.2f} MiB"
            )
        return lines

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"Summary({len(self.calls)} module calls, {self.total_params:,} params)"

    def _repr_html_(self) -> str:
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in self._header())
        body = [f"<tr>{cells}</tr>"]
        for row in self._rows(None):
            indent = len(row[0]) - len(row[0].lstrip(" "))
            name = "&nbsp;" * indent + html.escape(row[0].lstrip(" "))
            rest = "".join(f"<td>{html.escape(v)}</td>" for v in row[1:])
            body.append(f"<tr><td style='text-align:left'>{name}</td>{rest}</tr>")
        totals = "<br>".join(html.escape(line) for line in self._totals())
        return f"<table>{''.join(body)}</table><p>{totals}</p>"


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


def _mark(clock: Clock) -> int:
    mark = clock.enter()
    clock.leave()
    return mark


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
    recorder = _Recorder(model, clock, memory)
    marks: list[int] = []  # forward start and end, then backward start and end
    try:
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


def _set_params(c: ModuleCall, module: nn.Module) -> list[nn.Parameter]:
    """Fill `c`'s parameter counts and bytes from `module`; return its own parameters."""
    own = list(module.parameters(recurse=False))
    c.params = sum(p.numel() for p in own)
    subtree = _subtree_params(module)
    c.params_total = sum(p.numel() for p in subtree)
    c.trainable = sum(p.numel() for p in subtree if p.requires_grad)
    c.param_bytes = sum(p.numel() * p.element_size() for p in subtree)
    c.grad_bytes = sum(
        p.grad.numel() * p.grad.element_size() for p in subtree if p.grad is not None
    )
    return own


def _finish(recorder: _Recorder) -> list[float]:
    """Once the pass is over: read the NaN/inf flags and the clock's marks (this waits for
    the device), then fill in parameter counts, forward, backward and self times. Returns
    the time of every mark (ms)."""
    for index, field in recorder.flags.resolve():
        setattr(recorder.calls[index], field, True)
    t = recorder.clock.times()
    modules = dict(recorder.hooks.names)
    calls = recorder.calls
    for c in calls:
        _set_params(c, modules[c.name])
    for index, (start, end) in recorder.forward_marks.items():
        calls[index].forward_ms = t[end] - t[start]
    own_backward: dict[int, float] = {}
    for index, start, end in recorder.node_marks:
        own_backward[index] = own_backward.get(index, 0.0) + t[end] - t[start]
    children: dict[int, list[int]] = {}
    for index, c in enumerate(calls):
        children.setdefault(c.parent, []).append(index)
    for index in range(len(calls) - 1, -1, -1):  # children before their parents
        c = calls[index]
        kids = [calls[k] for k in children.get(index, [])]
        c.self_forward_ms = c.forward_ms - sum(k.forward_ms for k in kids)
        kid_backward = [k.backward_ms for k in kids if k.backward_ms == k.backward_ms]
        if index in own_backward or kid_backward:
            c.self_backward_ms = own_backward.get(index, 0.0)
            c.backward_ms = c.self_backward_ms + sum(kid_backward)
    return t


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
        tensors = list(iter_tensors(s.value))
        c.output_shapes = [tuple(t.shape) for t in tensors]
        c.output_dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
        c.output_bytes = _nbytes(tensors)
        c.output_nonfinite = bool(bad[i])
        if s.name in modules:
            _set_params(c, modules[s.name])
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
            tensors = list(iter_tensors(s.value))
            places[(k, s.attr)] = len(c.input_shapes)
            c.input_shapes += [tuple(t.shape) for t in tensors]
            c.input_dtypes += [str(t.dtype).removeprefix("torch.") for t in tensors]
            c.input_bytes += _nbytes(tensors)
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
