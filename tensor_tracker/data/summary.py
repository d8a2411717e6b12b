"""`summary`: one forward (and backward) pass of a model, summarised per module call.

Shapes, dtypes, bytes, parameter counts (each parameter once, tied weights too), forward and
backward wall-clock times (inclusive and self, with the tool's own time taken out), and
whether outputs and gradients held NaN or infinities, as a table, a nested dict, a text
table like torchinfo's and an HTML table in notebooks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .._optional import require
from .._validate import check_callable, check_count, check_int, check_type
from ..core.grad_hooks import hook_grad
from ..core.records import Stash
from ..core.structure import iter_tensors
from ..errors import ArgumentTypeError, ArgumentValueError
from .frame import type_name
from .nonfinite import nonfinite_flags

if TYPE_CHECKING:
    import pandas

__all__ = ["ModuleCall", "Summary", "recorded_summary", "summary"]


@dataclasses.dataclass
class ModuleCall:
    """One call of one module in the summarised pass (see `summary`).

    Attributes:
        name: the module's name (`""` for the model itself); `type`: its class name.
        depth: nesting depth (0 for the model); `call`: which call of this module.
        parent: index of the enclosing call in `Summary.calls` (-1 for the model's call).
        input_shapes, input_dtypes, output_shapes, output_dtypes: one entry per tensor.
        grad_output_shapes, grad_input_shapes: shapes of the gradients of the outputs and
            of the inputs (empty without a backward pass or where none arrived).
        params: parameters of this module itself; params_total: of it and its submodules,
            each parameter counted once; trainable: of those, the ones requiring grad.
        param_bytes, grad_bytes: bytes of `params_total`'s parameters and of their `.grad`.
        input_bytes, output_bytes: bytes of the input and output tensors.
        forward_ms, backward_ms: wall-clock time of the call and of its backward, children
            included; self_forward_ms, self_backward_ms: without the children's.
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
    grad_output_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    grad_input_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    params: int = 0
    params_total: int = 0
    trainable: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    forward_ms: float = 0.0
    self_forward_ms: float = 0.0
    backward_ms: float = float("nan")
    self_backward_ms: float = float("nan")
    output_nonfinite: bool = False
    grad_output_nonfinite: bool = False
    grad_input_nonfinite: bool = False


def _nonfinite(tensors: list[Tensor]) -> bool:
    return any(
        (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())
        for t in tensors
    )


def _nbytes(tensors: list[Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class _Clock:
    """Wall clock minus the summary's own time, so hooks do not inflate what they time."""

    def __init__(self) -> None:
        self.spent = 0.0  # seconds spent inside the summary's hooks so far
        self._entered = 0.0

    def enter(self) -> float:
        self._entered = time.perf_counter()
        return self._entered - self.spent

    def leave(self) -> None:
        self.spent += time.perf_counter() - self._entered


class _Recorder:
    """The hooks of one summary pass."""

    def __init__(self, model: nn.Module) -> None:
        self.calls: list[ModuleCall] = []
        self.clock = _Clock()
        self.stack: list[tuple[int, float]] = []  # (call index, start) of running calls
        self.counts: dict[str, int] = {}
        # Adjusted times: per call, when its output's gradient arrived and when the last
        # gradient of its inputs was computed; per parameter, when its .grad was written.
        self.grad_out_at: dict[int, float] = {}
        self.grad_in_at: dict[int, float] = {}
        self.param_at: dict[int, float] = {}
        self.handles: list[Any] = []
        names = {m: n for n, m in model.named_modules(remove_duplicate=False)}
        self.names = names
        for module in dict.fromkeys(names):
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post, with_kwargs=True))
        for param in _subtree_params(model):
            if param.requires_grad:
                self.handles.append(
                    param.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                        self._param_done
                    )
                )

    def _param_done(self, param: Tensor) -> None:
        self.param_at[id(param)] = self.clock.enter()
        self.clock.leave()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        now = self.clock.enter()
        name = self.names[module]
        call = self.counts.get(name, 0)
        self.counts[name] = call + 1
        inputs = list(iter_tensors((args, kwargs)))
        parent = self.stack[-1][0] if self.stack else -1
        record = ModuleCall(name, type_name(type(module)), len(self.stack), call, parent)
        record.input_shapes = [tuple(t.shape) for t in inputs]
        record.input_dtypes = [str(t.dtype).removeprefix("torch.") for t in inputs]
        record.input_bytes = _nbytes(inputs)
        index = len(self.calls)
        self.calls.append(record)
        self.stack.append((index, now))
        for tensor in inputs:
            if tensor.requires_grad and torch.is_grad_enabled():
                self.handles.append(hook_grad(tensor, self._grad_hook(index, output=False)))
        self.clock.leave()

    def _post(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        now = self.clock.enter()
        index, start = self.stack.pop()
        record = self.calls[index]
        record.forward_ms = (now - start) * 1e3
        outputs = list(iter_tensors(output))
        record.output_shapes = [tuple(t.shape) for t in outputs]
        record.output_dtypes = [str(t.dtype).removeprefix("torch.") for t in outputs]
        record.output_bytes = _nbytes(outputs)
        record.output_nonfinite = _nonfinite(outputs)
        for tensor in outputs:
            if tensor.requires_grad:
                self.handles.append(hook_grad(tensor, self._grad_hook(index, output=True)))
        self.clock.leave()

    def _grad_hook(self, index: int, output: bool) -> Callable[[Tensor], None]:
        """The hook reading the gradient of an output (or input) of call `index`."""

        def hook(grad: Tensor) -> None:
            now = self.clock.enter()
            record = self.calls[index]
            if output:  # the first output gradient to arrive starts the call's backward
                self.grad_out_at[index] = min(self.grad_out_at.get(index, now), now)
                record.grad_output_shapes.append(tuple(grad.shape))
                record.grad_output_nonfinite |= _nonfinite([grad])
            else:  # the last input gradient computed ends it
                self.grad_in_at[index] = max(self.grad_in_at.get(index, now), now)
                record.grad_input_shapes.append(tuple(grad.shape))
                record.grad_input_nonfinite |= _nonfinite([grad])
            self.clock.leave()

        return hook


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
        forward_ms, backward_ms: the whole pass.
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
        """`to_dict()` as JSON text (`kwargs` go to `json.dumps`, e.g. `indent=2`)."""
        return json.dumps(self.to_dict(), **kwargs)

    def _rows(self, depth: int | None) -> list[list[str]]:
        rows = []
        for c in self.calls:
            if depth is not None and c.depth > depth:
                continue
            label = "  " * c.depth + (c.name.rsplit(".", 1)[-1] or "(model)")
            if c.call:
                label += f" #{c.call}"
            shapes = ", ".join(str(list(s)) for s in c.output_shapes) or "-"
            flag = "NaN/inf" if c.output_nonfinite or c.grad_input_nonfinite else ""
            rows.append(
                [
                    f"{label} ({c.type.rsplit('.', 1)[-1]})",
                    shapes,
                    f"{c.params:,}" if c.params else "-",
                    _ms(c.forward_ms),
                    _ms(c.backward_ms),
                    flag,
                ]
            )
        return rows

    _HEADER = ("module (type)", "output shape", "params", "fwd ms", "bwd ms", "")

    def table(self, depth: int | None = None) -> str:
        """The text table `print(s)` shows, down to `depth` levels (`None`: all).

        Raises:
            TypeError, ValueError: `depth` is not a non-negative int.
        """
        if depth is not None:
            check_count(
                check_int(depth, "depth=") + 1, "depth=", "levels to show (0: the model alone) + 1"
            )
        rows = [list(self._HEADER), *self._rows(depth)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._HEADER))]
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
            times = f"Forward: {_ms(self.forward_ms)} ms, backward: {_ms(self.backward_ms)} ms"
        return [
            f"Total params: {self.total_params:,} (trainable: {self.trainable_params:,}, "
            f"{self.param_bytes / 2**20:.2f} MiB)",
            times,
        ]

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"Summary({len(self.calls)} module calls, {self.total_params:,} params)"

    def _repr_html_(self) -> str:
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in self._HEADER)
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
    or its module is called twice. Times are wall clock with the summary's own work taken
    out (on a GPU, that is the host's time, kernel launches, not the kernels' own: CUDA
    event timing and allocator figures are not implemented yet); a parent's time includes its children's, and the self times add up to the
    whole pass. Backward times run from the gradient reaching a call's output to the
    gradients of its inputs being computed (NaN for calls whose inputs need no gradient).
    The model's gradients are left as the backward pass made them (call `zero_grad()`).

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
    if loss_fn is not None:
        check_callable(loss_fn, "loss_fn=", "output -> scalar tensor")
    recorder = _Recorder(model)
    backward_ms = float("nan")
    try:
        start = time.perf_counter()
        output = model(*inputs, **kwargs)
        forward_ms = (time.perf_counter() - start - recorder.clock.spent) * 1e3
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
                spent = recorder.clock.spent
                start = time.perf_counter()
                loss.backward()  # type: ignore[no-untyped-call]
                backward_ms = (time.perf_counter() - start - (recorder.clock.spent - spent)) * 1e3
    except Exception as error:
        with contextlib.suppress(AttributeError):  # exceptions with __slots__
            error.summary_calls = recorder.calls  # type: ignore[attr-defined]
        raise
    finally:
        recorder.remove()
    _finish(recorder, model)
    return Summary(recorder.calls, model, forward_ms, backward_ms)


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


def _finish(recorder: _Recorder, model: nn.Module) -> None:
    """Parameter counts, backward times and self times, once the pass is over."""
    modules = dict(model.named_modules(remove_duplicate=False))
    calls = recorder.calls
    children: dict[int, list[int]] = {}
    for index, c in enumerate(calls):
        children.setdefault(c.parent, []).append(index)
    # A call's backward ends with the last of its inputs' gradients, its parameters'
    # gradients and its children's backward ends; children come after their parent.
    starts_at: dict[int, float] = {}
    ends: dict[int, float] = {}
    for index in range(len(calls) - 1, -1, -1):
        c = calls[index]
        own = _set_params(c, modules[c.name])
        candidates = [recorder.param_at[id(p)] for p in own if id(p) in recorder.param_at]
        candidates += [ends[k] for k in children.get(index, []) if k in ends]
        if index in recorder.grad_in_at:
            candidates.append(recorder.grad_in_at[index])
        # A parent's output is often its last child's: whichever hook ran first, the
        # parent's backward starts no later than its children's.
        starts = [starts_at[k] for k in children.get(index, []) if k in starts_at]
        if index in recorder.grad_out_at:
            starts.append(recorder.grad_out_at[index])
        if starts and candidates:
            starts_at[index], ends[index] = min(starts), max(candidates)
            # Siblings' backward passes touch (one's start is the other's end, seen by two
            # hooks microseconds apart), so their measured sum can exceed the parent's by
            # that much: a parent takes at least its children's time.
            kid_times = [calls[k].backward_ms for k in children.get(index, [])]
            measured = (ends[index] - starts_at[index]) * 1e3
            c.backward_ms = max(measured, sum(t for t in kid_times if t == t))
    for index, c in enumerate(calls):
        kids = [calls[k] for k in children.get(index, [])]
        c.self_forward_ms = c.forward_ms - sum(k.forward_ms for k in kids)
        if c.backward_ms == c.backward_ms:
            c.self_backward_ms = c.backward_ms - sum(
                k.backward_ms for k in kids if k.backward_ms == k.backward_ms
            )


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
    that dtype, a `sample=` copy its sample); statistics have none of these (empty/0).
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
        c.forward_ms = c.self_forward_ms = float("nan")
        if s.name in modules:
            _set_params(c, modules[s.name])
        calls.append(c)
    for i in rows:
        s = stashes[i]
        k = key_of.get((s.name, s.call))
        if k is None or (s.kind, s.grad) not in (
            ("input", False),
            ("input", True),
            ("output", True),
        ):
            continue
        c = calls[index_of[k]]
        tensors = list(iter_tensors(s.value))
        shapes = [tuple(t.shape) for t in tensors]
        if s.kind == "input" and not s.grad:
            c.input_shapes += shapes
            c.input_dtypes += [str(t.dtype).removeprefix("torch.") for t in tensors]
            c.input_bytes += _nbytes(tensors)
        elif s.kind == "input":
            c.grad_input_shapes += shapes
            c.grad_input_nonfinite |= bool(bad[i])
        elif s.grad:
            c.grad_output_shapes += shapes
            c.grad_output_nonfinite |= bool(bad[i])
    return Summary(calls, list(modules.values()), float("nan"), float("nan"))
