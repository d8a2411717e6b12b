"""What `summary` found, as plain data: one `ModuleCall` per module call, and the
`Summary` of a pass, whose totals (parameters each counted once, times with the children's
taken out) are worked out here from what the recording pass (`_summary_record`) or a
tracker's records (`_summary_recording`) gave. `_summary_format` writes it as text."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from .._optional import require
from .._validate import check_count, check_int
from ._summary_format import html_table, json_text, nested, text_table

if TYPE_CHECKING:
    import pandas

__all__ = [
    "ModuleCall",
    "Summary",
    "add_times",
    "describe",
    "nbytes",
    "set_params",
    "subtree_params",
]


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

    Example:
        >>> s = tensor_tracker.summary(model, x)
        >>> call = s.calls[1]   # the first Linear (calls[0] is the model's own)
        >>> call.name, call.depth, call.output_shapes, call.grad_output_shapes, call.params
        ('0', 1, [(8, 8)], [(8, 8)], 136)
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


def nbytes(tensors: list[Tensor]) -> int:
    """The bytes of `tensors`' elements."""
    return sum(t.numel() * t.element_size() for t in tensors)


def describe(tensors: list[Tensor]) -> tuple[list[tuple[int, ...]], list[str], int]:
    """The shapes, dtypes (`"float32"`) and bytes of `tensors`, as a `ModuleCall` lists them."""
    shapes = [tuple(t.shape) for t in tensors]
    return shapes, [str(t.dtype).removeprefix("torch.") for t in tensors], nbytes(tensors)


def subtree_params(module: nn.Module) -> list[nn.Parameter]:
    """The parameters of `module` and its submodules, a shared one once."""
    return list(dict.fromkeys(module.parameters()))


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

    Example:
        >>> s = tensor_tracker.summary(model, x)
        >>> s.total_params, [c.name for c in s.calls], s.timing
        (172, ['', '0', '1', '2'], 'wall clock')
        >>> s.to_frame()[["name", "output_shapes", "params"]].values.tolist()[1]
        ['0', [(8, 8)], 136]
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
        params = list(dict.fromkeys(p for m in models for p in subtree_params(m)))
        self.total_params = sum(p.numel() for p in params)
        self.trainable_params = sum(p.numel() for p in params if p.requires_grad)
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        self.forward_ms = forward_ms
        self.backward_ms = backward_ms
        self.timing = "not measured"
        self.device: str | None = None
        self.peak_bytes: int | None = None
        self.not_recorded: str | None = None

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
        return nested(self.calls)

    def to_json(self, **kwargs: Any) -> str:
        """`to_dict()` as JSON text (`kwargs` go to `json.dumps`, e.g. `indent=2`), with
        `null` for the numbers that are NaN in `to_dict()` (times not measured): bare `NaN`
        is not JSON."""
        return json_text(self.to_dict(), **kwargs)

    def table(self, depth: int | None = None) -> str:
        """The text table `print(s)` shows, down to `depth` levels (`None`: all).

        Raises:
            TypeError, ValueError: `depth` is not a non-negative int.
        """
        if depth is not None:
            check_count(
                check_int(depth, "depth=") + 1, "depth=", "levels to show (0: the model alone) + 1"
            )
        return text_table(self, depth)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"Summary({len(self.calls)} module calls, {self.total_params:,} params)"

    def _repr_html_(self) -> str:
        return html_table(self)


def set_params(c: ModuleCall, module: nn.Module) -> list[nn.Parameter]:
    """Fill `c`'s parameter counts and bytes from `module`; return its own parameters."""
    own = list(module.parameters(recurse=False))
    c.params = sum(p.numel() for p in own)
    subtree = subtree_params(module)
    c.params_total = sum(p.numel() for p in subtree)
    c.trainable = sum(p.numel() for p in subtree if p.requires_grad)
    c.param_bytes = sum(p.numel() * p.element_size() for p in subtree)
    c.grad_bytes = sum(
        p.grad.numel() * p.grad.element_size() for p in subtree if p.grad is not None
    )
    return own


def add_times(
    calls: list[ModuleCall],
    times: list[float],
    forward_marks: dict[int, tuple[int, int]],
    node_marks: list[tuple[int, int, int]],
) -> None:
    """Fill in each call's forward and backward times, inclusive and self, from the marks
    of the pass: `times[mark]` in ms, `forward_marks` the (start, end) of each call, and
    `node_marks` (call, start, end) of each autograd node timed in the backward pass."""
    t = times
    for index, (start, end) in forward_marks.items():
        calls[index].forward_ms = t[end] - t[start]
    own_backward: dict[int, float] = {}
    for index, start, end in node_marks:
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
