"""`plan`: what to hook, decided on plain descriptions, without running a model."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch

from tensor_tracker._core.plan import (
    EAGER,
    HOOKED_OUTPUT,
    OUTPUT,
    HookPlan,
    ModuleFacts,
    Setting,
    grad_targets,
    graph_layout,
    graph_part,
    graph_parts,
    graph_route,
    graph_value,
    is_flat_tuple,
    optimizer_states,
    plan_hooks,
    recorded_inputs,
)
from tensor_tracker._core.stash_fns import keep

# A compiled model whose statistics can be computed in its graphs, on a torch that traces
# gradient hooks.
GRAPH = Setting(graph_stats=True, compiled=True, can_emit=True, traces_gradients=True, dynamo=True)
LINEAR = ModuleFacts(grad=True, params=("weight", "bias"), trainable=("weight", "bias"))
FROZEN = ModuleFacts(grad=True, params=("weight",), trainable=())


@pytest.mark.parametrize(
    ("setting", "module", "expected"),
    [
        # Eager models: eager hooks, behind `untraced` once Dynamo is imported.
        (Setting(), LINEAR, HookPlan("eager", None, ())),
        (Setting(dynamo=True), LINEAR, HookPlan("untraced", None, ())),
        (Setting(outputs=False, inputs=True), LINEAR, HookPlan(None, "eager", ())),
        (Setting(params=True), LINEAR, HookPlan("eager", "eager", ("weight", "bias"))),
        (Setting(params=True), FROZEN, HookPlan("eager", "eager", ())),
        (
            Setting(params=True),
            ModuleFacts(grad=False, params=("w",), trainable=("w",)),
            HookPlan("eager", "eager", ()),
        ),
        # Compiled models: in the graph where it can compute the statistics...
        (GRAPH, LINEAR, HookPlan("graph", None, ())),
        (GRAPH, ModuleFacts(grad=False), HookPlan("graph", None, ())),
        (
            Setting(**{**GRAPH.__dict__, "params": True}),
            LINEAR,
            HookPlan("graph", "graph", ("weight", "bias")),
        ),
        (
            Setting(**{**GRAPH.__dict__, "params": True}),
            ModuleFacts(params=("w",), trainable=("w",), traceable_params=False),
            HookPlan("graph", "untraced", ("w",)),
        ),
        (Setting(**{**GRAPH.__dict__, "params": True}), ModuleFacts(), HookPlan("graph", None, ())),
        # ...and eagerly behind a graph break where it cannot.
        (
            Setting(**{**GRAPH.__dict__, "inputs": True}),
            LINEAR,
            HookPlan("untraced", "untraced", ()),
        ),
        (
            Setting(**{**GRAPH.__dict__, "inputs": True}),
            ModuleFacts(grad=False),
            HookPlan("graph", "untraced", ()),
        ),
        (
            Setting(**{**GRAPH.__dict__, "traces_gradients": False}),
            LINEAR,
            HookPlan("untraced", None, ()),
        ),
        (
            Setting(**{**GRAPH.__dict__, "graph_stats": False}),
            LINEAR,
            HookPlan("untraced", None, ()),
        ),
        (Setting(**{**GRAPH.__dict__, "can_emit": False}), LINEAR, HookPlan("untraced", None, ())),
        (
            Setting(graph_stats=True, can_emit=True, traces_gradients=True),
            LINEAR,
            HookPlan("eager", None, ()),
        ),
    ],
)
def test_the_hooks_of_a_module(setting: Setting, module: ModuleFacts, expected: HookPlan) -> None:
    assert plan_hooks(setting, module) == expected


def test_which_tensors_of_an_output_get_gradient_hooks() -> None:
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    assert grad_targets(y) == (None, True)
    assert grad_targets(y.detach()) == (None, False)
    # A lone tensor allocates nothing: the answer is one of two constants.
    assert grad_targets(y) is grad_targets(x)
    d = y.detach()
    tensors, wanted = grad_targets((d, {"b": [y, None], "a": x}, 3))
    assert tensors is not None and len(tensors) == 3
    assert all(t is u for t, u in zip(tensors, (d, y, x), strict=True)) and wanted == [1, 2]
    assert grad_targets(("text", None)) == ([], [])


def test_where_a_compiled_hook_records_an_output() -> None:
    leaf = torch.ones(2, requires_grad=True)
    made = leaf * 2
    assert graph_route(made, grad=True) == HOOKED_OUTPUT
    assert graph_route(made, grad=False) == OUTPUT
    assert graph_route(made.detach(), grad=True) == OUTPUT
    assert graph_route(leaf, grad=False) == OUTPUT
    # A hook on a leaf would outlive the graph; a non-tensor or empty output has no graph
    # statistics: both go the eager way.
    assert graph_route(leaf, grad=True) == EAGER
    assert graph_route(torch.ones(0), grad=False) == EAGER
    # A tuple of one tensor and Nones (attention's `(output, None)`) is recorded in the
    # graph as that tensor; any other structure is not.
    assert graph_route((made, None), grad=True) == HOOKED_OUTPUT
    assert graph_route((None, made.detach()), grad=True) == OUTPUT
    assert graph_route((None, leaf), grad=True) == EAGER
    assert graph_route((made, made), grad=False) == EAGER
    assert graph_route([made], grad=False) == EAGER
    assert graph_route((None,), grad=False) == EAGER


def test_which_tensor_of_an_output_a_compiled_hook_records() -> None:
    x = torch.ones(2)
    assert graph_part(x) == (x, -1, 0)
    assert graph_part((None, x, None)) == (x, 1, 3)
    assert graph_part((x,)) == (x, 0, 1)
    for other in ((x, x), (x, 1), [x], {"a": x}, (None,), ()):
        assert graph_part(other) == (None, -1, 0)


_Pair = collections.namedtuple("_Pair", "first second")


@dataclasses.dataclass
class _Output:  # a Hugging Face `ModelOutput` is a dataclass too
    hidden: torch.Tensor
    attentions: tuple[torch.Tensor, ...] | None = None
    loss: torch.Tensor | None = None


def _outputs() -> list[object]:
    x = torch.ones(2, requires_grad=True) * 2
    return [
        (x, x.detach()),
        [x, None, 3, "s", 1.5, True],
        {"a": x, "b": (x, {"c": [x.detach()]})},
        _Pair(x, (None, x)),
        _Output(x, (x, x.detach())),
        (x, _Output(x)),
    ]


@pytest.mark.parametrize("output", _outputs())
def test_an_output_of_several_tensors_is_rebuilt_as_the_eager_path_keeps_it(
    output: object,
) -> None:
    # The compiled hook records each tensor of `graph_layout` and `graph_value` rebuilds the
    # record from their values: the same as `keep`, the eager path's, whatever the nesting.
    found = graph_layout(output)
    assert found is not None
    tensors, layout = found
    hash(layout)  # a constant Dynamo can hand to a trace-time function
    x = tensors[0]
    value = graph_value(layout, [t.sum().item() for t in tensors])
    assert value == keep(output, lambda t: t.sum().item())
    assert type(value) is type(output)
    assert graph_layout((x, 1))[1] != graph_layout((x, True))[1]  # type: ignore[index]


def test_what_a_compiled_hook_leaves_to_the_eager_path() -> None:
    x = torch.ones(2, requires_grad=True)
    made = x * 2
    assert graph_layout((x, object())) is None  # an object the eager path notes as such
    assert graph_layout({(1, 2): x}) is None  # a key that is not a plain value
    assert graph_layout((None, 1)) is None  # no tensor
    assert graph_layout(collections.OrderedDict(a=x)) is None  # another mapping class
    assert graph_parts((made, x), True) is None  # a leaf whose gradient is wanted
    assert graph_parts((made, torch.ones(0)), True) is None  # an empty tensor
    parts = graph_parts({"a": made, "b": (made.detach(), x)}, False)
    assert parts is not None and parts[1] == [OUTPUT, OUTPUT, OUTPUT]
    parts = graph_parts({"a": made, "b": made.detach()}, True)
    assert parts is not None and parts[1] == [HOOKED_OUTPUT, OUTPUT]


def test_which_layouts_the_eager_path_keeps_as_a_tuple_of_references() -> None:
    x = torch.ones(2)
    flat = [(x, x), (x, None, x)]
    nested = [(x, 1), [x, x], (x, (x,)), _Pair(x, x), {"a": x}]
    assert [is_flat_tuple(graph_layout(v)[1]) for v in flat] == [True, True]  # type: ignore[index]
    assert not any(is_flat_tuple(graph_layout(v)[1]) for v in nested)  # type: ignore[index]


def test_which_inputs_are_recorded_and_under_which_names() -> None:
    a, b = torch.ones(1), torch.zeros(2)
    got = recorded_inputs(("x", "mask"), (a, None, [b]), {"scale": 2.0, "extra": b})
    assert [(name, value) for name, value in got] == [("x", a), ("2", [b]), ("extra", b)]
    assert recorded_inputs((), (), {}) == []


def test_which_optimizer_state_is_recorded() -> None:
    w, b = torch.zeros(3), torch.zeros(2)
    state = {w: {"step": torch.tensor(4.0), "exp_avg": w + 1, "exp_avg_sq": w + 2, "lr": 0.1}}
    got = optimizer_states([("weight", w), ("bias", b)], state)
    assert [name for name, _ in got] == ["weight.exp_avg", "weight.exp_avg_sq"]
    assert torch.equal(got[1][1], w + 2)
