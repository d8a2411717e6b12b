"""What to hook, decided once: the rules both hook paths apply, as pure functions.

Which hooks a module gets is decided when it is attached, from plain facts (`Setting`:
what is captured and what torch can do; `ModuleFacts`: the module's gradient flag and
parameters) by `plan_hooks`, into a `HookPlan` that `Recorder` applies. What to do with a
value a hook sees is decided per call by the functions below, which read only the value's
structure: `grad_targets` (which tensors of an output get gradient hooks),
`graph_route` (whether the compiled path can record an output in its graph) and
`graph_part` (which tensor of it), `graph_layout` (the tensors of an output of several,
and how to rebuild the eager record from theirs: `graph_value`),
`recorded_inputs` (which arguments are recorded) and `optimizer_states` (which optimizer
state is). The rule for a view whose gradient goes around it is `grad_hooks.stand_in`.
None of them runs a model; `tests/core/test_plan.py` checks them on plain descriptions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from torch import Tensor

from .structure import iter_tensors

__all__ = [
    "EAGER",
    "HOOKED_OUTPUT",
    "OUTPUT",
    "HookPlan",
    "ModuleFacts",
    "Setting",
    "grad_targets",
    "graph_layout",
    "graph_part",
    "graph_parts",
    "graph_route",
    "graph_value",
    "inner_in_graph",
    "is_flat_tuple",
    "optimizer_states",
    "plan_hooks",
    "recorded_inputs",
]

How = Literal["eager", "untraced", "graph"]
"""How a hook runs: eagerly; eagerly behind `torch.compiler.disable` (`untraced`: Dynamo
calls it as it is instead of tracing it); or traced into a compiled model's graphs."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a tracker's hooks depend on besides the module, fixed while they are attached.

    Attributes:
        outputs, inputs, params: what `capture=` names.
        graph_stats: the statistics can be computed inside a compiled graph
            (`RecordSink.graph_stats`).
        compiled: a registered model is compiled (`torch.compile`).
        can_emit: this torch can hand statistics out of a graph (`graph_sink.can_emit`).
        traces_gradients: Dynamo traces a tensor hook on an intermediate tensor.
        dynamo: Dynamo may run (it is imported): eager hooks are then `untraced`.
        ops: `ops=` records functional operations: in a compiled model's graphs where
            `inner_in_graph` says so; else their mode is pushed and popped by eager
            hooks, so a compiled graph ends at each module call anyway.
    """

    outputs: bool = True
    inputs: bool = False
    params: bool = False
    graph_stats: bool = False
    compiled: bool = False
    can_emit: bool = False
    traces_gradients: bool = False
    dynamo: bool = False
    ops: bool = False


@dataclasses.dataclass(frozen=True)
class ModuleFacts:
    """What the plan needs of one registered module.

    Attributes:
        grad: its gradients are recorded (`register(..., grad=)`).
        params: the names of its own parameters.
        trainable: those of them that require grad.
        traceable_params: its parameters can be read inside a compiled graph (plain,
            non-empty tensors: not FSDP's `DTensor` shards).
    """

    grad: bool = True
    params: tuple[str, ...] = ()
    trainable: tuple[str, ...] = ()
    traceable_params: bool = True


@dataclasses.dataclass(frozen=True)
class HookPlan:
    """The hooks one module gets.

    Attributes:
        forward: its forward hook (output, and its gradient), or None.
        pre: its forward pre-hook (inputs and/or parameters), or None.
        param_grads: the parameters that get a post-accumulate-grad hook.
    """

    forward: How | None
    pre: How | None
    param_grads: tuple[str, ...]


def inner_in_graph(setting: Setting) -> bool:
    """Whether the ops (`ops=`) and taps of a tracker are recorded in a compiled model's
    graphs (`CompiledHooks.inner`), as the outputs are: its statistics can be computed
    there, gradient hooks are traced and no input is captured.

    Example:
        >>> inner_in_graph(Setting(graph_stats=True, compiled=True, can_emit=True,
        ...                        traces_gradients=True, ops=True))
        True
        >>> inner_in_graph(Setting(graph_stats=True, compiled=True, can_emit=True, ops=True))
        False
    """
    s = setting
    return (
        s.outputs
        and s.compiled
        and s.graph_stats
        and s.can_emit
        and s.traces_gradients
        and not s.inputs
    )


def plan_hooks(setting: Setting, module: ModuleFacts) -> HookPlan:
    """The hooks a module gets: in a compiled model's graphs where the statistics can be
    computed there (and, when its gradients are recorded, Dynamo traces gradient hooks and
    no input is captured: inputs' hooks stay outside the graph, a graph break each),
    eagerly otherwise.

    Example:
        >>> compiled = Setting(graph_stats=True, compiled=True, can_emit=True, dynamo=True)
        >>> plan_hooks(compiled, ModuleFacts(grad=False))
        HookPlan(forward='graph', pre=None, param_grads=())
        >>> plan_hooks(compiled, ModuleFacts(grad=True))   # gradients not traceable
        HookPlan(forward='untraced', pre=None, param_grads=())
        >>> plan_hooks(dataclasses.replace(compiled, ops=True), ModuleFacts(grad=False))
        HookPlan(forward='untraced', pre=None, param_grads=())
        >>> plan_hooks(Setting(params=True), ModuleFacts(params=("w",), trainable=("w",)))
        HookPlan(forward='eager', pre='eager', param_grads=('w',))
    """
    s = setting
    in_graph = (
        s.outputs
        and (not s.ops or inner_in_graph(s))
        and s.compiled
        and s.graph_stats
        and s.can_emit
        and (not module.grad or (s.traces_gradients and not s.inputs))
    )
    eager: How = "untraced" if s.dynamo else "eager"
    forward: How | None = "graph" if in_graph else eager if s.outputs else None
    pre: How | None = None
    if in_graph and not s.inputs and s.params and module.params:
        # In the graph's module, an eager pre-hook would break the graph anyway.
        pre = "graph" if module.traceable_params else "untraced"
    elif s.inputs or (s.params and not in_graph):
        pre = eager
    param_grads = module.trainable if s.params and module.grad else ()
    return HookPlan(forward, pre, param_grads)


# Constant results of `grad_targets` for a lone tensor: no allocation on the hot path.
_ONE_TENSOR = (None, True)
_NO_GRAD = (None, False)


def grad_targets(value: Any) -> tuple[list[Tensor] | None, Any]:
    """Which tensors of `value` get gradient hooks: `(None, requires_grad)` for a tensor
    (the common case); otherwise `(tensors, wanted)`, every tensor of the structure in the
    order of its gradient record and the indices of those that require grad.

    Example:
        >>> x = torch.ones(2, requires_grad=True)
        >>> grad_targets(x), grad_targets(x.detach())
        ((None, True), (None, False))
        >>> tensors, wanted = grad_targets({"a": x.detach(), "b": [x * 2, None]})
        >>> len(tensors), wanted
        (2, [1])
    """
    if isinstance(value, Tensor):
        return _ONE_TENSOR if value.requires_grad else _NO_GRAD
    tensors = list(iter_tensors(value))
    return tensors, [i for i, t in enumerate(tensors) if t.requires_grad]


EAGER = -1
"""`graph_route`: the output takes the eager path, behind a graph break."""
OUTPUT = 0
"""`graph_route`: the output's statistics are computed in the graph; no gradient hook."""
HOOKED_OUTPUT = 1
"""`graph_route`: as `OUTPUT`, and the output's gradient is hooked in the graph."""


def graph_part(output: Any) -> tuple[Tensor | None, int, int]:
    """The tensor of `output` a compiled graph records, its position and the length of the
    tuple holding it: `(output, -1, 0)` for a tensor; `(tensor, i, n)` for a tuple of `n`
    holding one tensor, at `i`, and `None`s (attention's `(output, None)`, recorded as the
    eager path records it: one record of the tuple); `(None, -1, 0)` for anything else.

    Example:
        >>> x = torch.ones(2)
        >>> graph_part(x)[1:], graph_part((x, None))[1:], graph_part((x, x))
        ((-1, 0), (0, 2), (None, -1, 0))
    """
    if isinstance(output, Tensor):
        return output, -1, 0
    if type(output) is not tuple:
        return None, -1, 0
    found: Tensor | None = None
    index = -1
    for i, item in enumerate(output):
        if isinstance(item, Tensor) and found is None:
            found, index = item, i
        elif item is not None:
            return None, -1, 0
    return (found, index, len(output)) if found is not None else (None, -1, 0)


def graph_route(output: Any, grad: bool) -> int:
    """How a compiled model's hook records `output` (`grad`: its gradient is wanted): the
    tensor `graph_part` finds in it.

    A non-tensor or empty output cannot be recorded in the graph; nor can a leaf whose
    gradient is wanted (a module returning a parameter or its input): a hook on it would
    be registered for good, outside the graph.

    Example:
        >>> graph_route(torch.ones(2), True), graph_route({"a": torch.ones(2)}, True)
        (0, -1)
        >>> graph_route((torch.ones(2, requires_grad=True) * 2, None), True)
        1
    """
    tensor = graph_part(output)[0]
    if tensor is None or tensor.numel() == 0:
        return EAGER
    if not (grad and tensor.requires_grad):
        return OUTPUT
    return EAGER if tensor.is_leaf else HOOKED_OUTPUT


_CONSTANTS = (type(None), bool, int, float, str)

Layout = tuple[Any, ...]
"""`graph_layout`'s description of a structure: nested tuples of constants (strings, numbers,
classes), so that Dynamo can hand it to a trace-time constant function."""


def graph_layout(output: Any) -> tuple[list[Tensor], Layout] | None:
    """The tensors of an `output` made of several (tuples, lists, namedtuples, dicts with
    constant keys, dataclasses such as a Hugging Face `ModelOutput`, nested; `None`s and
    plain values among them), in the order `iter_tensors` yields them, and its layout:
    what `graph_value` rebuilds the eager record from (`stash_fns.keep`'s result). None for
    anything else (another object, a dict with non-constant keys, no tensor), which takes
    the eager path. Plain Python, so that Dynamo traces it into constants.

    Example:
        >>> x = torch.ones(2)
        >>> tensors, layout = graph_layout({"a": (x, None, 3), "b": [x * 2]})
        >>> len(tensors), layout
        (2, ('dict', ('a', 'b'), (('tuple', <class 'tuple'>, (('t', 0), ('c', <class 'NoneType'>, None), ('c', <class 'int'>, 3))), ('tuple', <class 'list'>, (('t', 1),)))))
        >>> graph_layout((x, object())), graph_layout((None, 1))
        (None, None)
    """
    tensors: list[Tensor] = []
    layout = _layout(output, tensors)
    return (tensors, layout) if layout is not None and tensors else None


def _layout(value: Any, tensors: list[Tensor]) -> Layout | None:
    if isinstance(value, Tensor):
        tensors.append(value)
        return ("t", len(tensors) - 1)
    if type(value) in _CONSTANTS:
        # With its type: the layouts are told apart by equality, and True == 1 == 1.0.
        return ("c", type(value), value)
    if isinstance(value, (tuple, list)):
        if not (type(value) in (tuple, list) or hasattr(value, "_fields")):
            return None  # another sequence class: `rmap` rebuilds it from a list
        items = []
        for item in value:
            found = _layout(item, tensors)
            if found is None:
                return None
            items.append(found)
        return ("tuple", type(value), tuple(items))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = []
        items = []
        for field in dataclasses.fields(value):
            if not (field.init and hasattr(value, field.name)):
                return None
            found = _layout(getattr(value, field.name), tensors)
            if found is None:
                return None
            names.append(field.name)
            items.append(found)
        return ("dataclass", type(value), tuple(names), tuple(items))
    if type(value) is dict:
        keys = []
        items = []
        for key, item in value.items():
            found = _layout(item, tensors)
            if type(key) not in _CONSTANTS or found is None:
                return None
            keys.append(key)
            items.append(found)
        return ("dict", tuple(keys), tuple(items))
    return None


def is_flat_tuple(layout: Layout) -> bool:
    """Whether `layout` (`graph_layout`) is a plain tuple of tensors and `None`s, which
    the eager path keeps as a tuple of store references.

    Example:
        >>> x = torch.ones(1)
        >>> is_flat_tuple(graph_layout((x, None, x))[1]), is_flat_tuple(graph_layout([x])[1])
        (True, False)
    """
    return (
        layout[0] == "tuple"
        and layout[1] is tuple
        and all(item[0] == "t" or item[1:] == (type(None), None) for item in layout[2])
    )


def graph_value(layout: Layout, values: list[Any]) -> Any:
    """The record the eager path keeps of an output of `layout` (`graph_layout`), its
    tensors' values being `values`: the same containers, rebuilt as `rmap_tensor` does.

    Example:
        >>> graph_value(graph_layout({"a": (torch.ones(1), None)})[1], ["stats"])
        {'a': ('stats', None)}
    """
    tag = layout[0]
    if tag == "t":
        return values[layout[1]]
    if tag == "c":
        return layout[2]
    if tag == "dict":
        return dict(zip(layout[1], [graph_value(v, values) for v in layout[2]], strict=True))
    if tag == "dataclass":
        built = [graph_value(v, values) for v in layout[3]]
        return layout[1](**dict(zip(layout[2], built, strict=True)))
    cls, items = layout[1], [graph_value(v, values) for v in layout[2]]
    if cls is tuple or cls is list:
        return cls(items)
    return cls(*items)  # a namedtuple


def graph_parts(output: Any, grad: bool) -> tuple[list[Tensor], list[int], Layout] | None:
    """How a compiled model's hook records an `output` of several tensors that `graph_part`
    does not take (`grad`: its gradient is wanted): its tensors (`graph_layout`), the
    `graph_route` of each and its layout; None when it takes the eager path (not a
    structure `graph_layout` describes, or a tensor of it that `graph_route` sends there).

    Example:
        >>> x = torch.ones(2, requires_grad=True)
        >>> _, routes, _ = graph_parts({"a": x * 2, "b": (x.detach(), 1)}, True)
        >>> routes, graph_parts((x, x * 2), True), graph_parts((x, x * 2), False)[1]
        ([1, 0], None, [0, 0])
    """
    found = graph_layout(output)
    if found is None:
        return None
    tensors, layout = found
    routes = [graph_route(t, grad) for t in tensors]
    return None if EAGER in routes else (tensors, routes, layout)


def recorded_inputs(
    arg_names: tuple[str, ...], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[tuple[str, Any]]:
    """The inputs of a call that `capture="inputs"` records, by argument name (the name in
    `forward`'s signature, else the position): those holding a tensor.

    Example:
        >>> recorded_inputs(("x", "mask"), (torch.ones(1), None, torch.ones(1)), {"k": 3})
        [('x', tensor([1.])), ('2', tensor([1.]))]
    """
    named = [(arg_names[i] if i < len(arg_names) else str(i), v) for i, v in enumerate(args)]
    named += kwargs.items()
    return [(attr, v) for attr, v in named if next(iter_tensors(v), None) is not None]


def optimizer_states(
    params: Iterable[tuple[str, Tensor]], state: Mapping[Any, Mapping[str, Any]]
) -> list[tuple[str, Tensor]]:
    """The optimizer state recorded for `params` (name, parameter): each per-element
    tensor (Adam's `exp_avg`), as `"<param>.<key>"`; scalars such as Adam's `step` are not.

    Example:
        >>> w = torch.zeros(3)
        >>> optimizer_states([("w", w)], {w: {"step": torch.tensor(1.0), "exp_avg": w}})
        [('w.exp_avg', tensor([0., 0., 0.]))]
    """
    return [
        (f"{attr}.{key}", value)
        for attr, param in params
        for key, value in state.get(param, {}).items()
        if isinstance(value, Tensor) and value.shape == param.shape
    ]
