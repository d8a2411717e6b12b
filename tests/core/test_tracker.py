"""The Tracker / track contract (../shared/API.md) and issue #2's robustness cases."""

from __future__ import annotations

import collections
import dataclasses
import re
import warnings
from typing import Any, NamedTuple

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import Event, Stash, Tracker, get_stash_fn, track
from tests.helpers import hook_count, mlp

# -- the contract ---------------------------------------------------------------------


def test_forward_then_gradient_order_and_values() -> None:
    model = mlp()
    x = torch.randn(5, 4)
    with track(model) as t:
        model(x).sum().backward()
    assert [(s.name, s.grad) for s in t] == [
        ("0", False), ("1", False), ("2", False), ("", False),
        ("", True), ("2", True), ("1", True), ("0", True),
    ]  # fmt: skip
    h0 = x @ model[0].weight.T + model[0].bias
    assert torch.allclose(t[0].value, h0)
    assert torch.allclose(t[1].value, torch.tanh(h0))
    # d(sum)/d(out) = 1; back through Linear(3, 2): ones @ W2; through tanh: * (1 - tanh^2).
    assert isinstance(t[4].value, tuple) and torch.equal(t[4].value[0], torch.ones(5, 2))
    g1 = torch.ones(5, 2) @ model[2].weight
    assert torch.allclose(t[6].value[0], g1)
    assert torch.allclose(t[7].value[0], g1 * (1 - torch.tanh(h0) ** 2))
    assert t[0].type is nn.Linear and t[3].type is nn.Sequential


def test_stashes_are_cpu_copies_not_views() -> None:
    model = mlp()
    with track(model) as t:
        out = model(torch.randn(2, 4))
    assert not t[-1].value.requires_grad
    assert t[-1].value.untyped_storage().data_ptr() != out.untyped_storage().data_ptr()


def test_include_exclude_strings_and_patterns() -> None:
    model = mlp()
    with track(model, include=r"^\d$", exclude=re.compile("1"), grad=False) as t:
        model(torch.randn(2, 4))
    assert [s.name for s in t] == ["0", "2"]


def test_stash_value_transform() -> None:
    model = mlp()
    x = torch.randn(6, 4)
    with track(model, grad=False, stash_value=lambda v: v.std().detach()) as t:
        out = model(x)
    assert torch.allclose(t[-1].value, out.std())


def test_custom_stash_sees_events_with_inputs() -> None:
    events: list[Event] = []

    def stash(event: Event) -> Stash:
        events.append(event)
        return Stash(event.name, event.type, event.grad, None)

    class Scale(nn.Module):
        def forward(self, x: Tensor, *, factor: float) -> Tensor:
            return x * factor

    model = Scale()
    x = torch.ones(2, requires_grad=True)
    with track(model, stash=stash) as t:
        model(x, factor=3.0).sum().backward()
    fwd, bwd = events
    assert fwd.args[0] is x and fwd.kwargs == {"factor": 3.0} and not fwd.grad
    assert bwd.grad and bwd.args == () and bwd.kwargs == {}
    assert [s.value for s in t] == [None, None]


def test_manual_register_unregister_and_str() -> None:
    model = mlp()
    tracker = Tracker(get_stash_fn())
    tracker.register(model[0], "first", grad=False)
    tracker.register(model[2], "last")
    assert str(tracker) == "Tracker(stashes=0, tracking=2)"
    model(torch.randn(1, 4)).sum().backward()
    assert [(s.name, s.grad) for s in tracker] == [
        ("first", False),
        ("last", False),
        ("last", True),
    ]
    tracker.unregister()
    assert str(tracker) == "Tracker(stashes=3, tracking=0)" and hook_count(model) == 0
    model(torch.randn(1, 4))
    assert len(tracker) == 3
    tracker.clear()
    assert len(tracker) == 0


def test_tracker_without_arguments_uses_default_stash() -> None:
    model = mlp()
    tracker = Tracker()
    tracker.register_all(model, grad=False)
    out = model(torch.randn(2, 4))
    tracker.unregister()
    assert torch.equal(tracker[-1].value, out.detach())


def test_sequence_behaviour() -> None:
    model = mlp()
    with track(model, grad=False) as t:
        model(torch.randn(1, 4))
    assert len(t) == 4 and t[-1] is list(t)[-1] and t[1:3] == list(t)[1:3]


# -- hooks are removed --------------------------------------------------------------


def test_hooks_removed_on_exit_and_on_exception() -> None:
    model = mlp()
    with track(model):
        assert hook_count(model) == 4
    assert hook_count(model) == 0
    with pytest.raises(ZeroDivisionError), track(model):
        model(torch.randn(1, 4))
        _ = 1 / 0
    assert hook_count(model) == 0


def test_gradient_hooks_removed_on_exit() -> None:
    model = mlp()
    with track(model) as t:
        out = model(torch.randn(2, 4))
    out.sum().backward()  # after the block: no gradient stash
    assert not any(s.grad for s in t)


# -- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"include": "("}, ValueError, "include="),
        ({"exclude": "[a-"}, ValueError, "exclude="),
        ({"include": 3}, TypeError, "include="),
        ({"stash": lambda e: e, "stash_value": lambda t: t}, ValueError, "stash"),
        ({"stats": True, "stash_value": lambda t: t}, ValueError, r"stats\="),
        ({"sample": 10, "stash_value": lambda t: t}, ValueError, "sample="),
        ({"stats": ["no_such_statistic"]}, ValueError, "stats="),
        ({"every": 0}, ValueError, "every="),
        ({"capture": "weights"}, ValueError, "capture="),
        ({"max_bytes": -1}, ValueError, "max_bytes="),
        ({"optimizer": "adam"}, TypeError, "optimizer="),
        ({"device": "gpu"}, ValueError, "device="),
        ({"device": 3}, TypeError, "device="),
    ],
)
def test_bad_arguments_raise_before_any_hook(
    kwargs: dict[str, Any], error: type, match: str
) -> None:
    model = mlp()
    with pytest.raises(error, match=match):
        track(model, **kwargs)
    assert hook_count(model) == 0


def test_non_module_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        track(lambda x: x)  # type: ignore[arg-type]


def test_get_stash_fn_rejects_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        get_stash_fn(stash_value=lambda t: t, stash=lambda e: Stash(e.name, e.type, e.grad, 0))


# -- in-place operations --------------------------------------------------------------


class LinearReluInplace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.relu(self.linear(x))
        return out


def test_inplace_relu_records_gradient_of_returned_value() -> None:
    torch.manual_seed(0)
    model = LinearReluInplace()
    x = torch.randn(6, 4)
    weights = torch.arange(24.0).view(6, 4)
    with track(model) as t:
        (model(x) * weights).sum().backward()
    linear_out = x @ model.linear.weight.T + model.linear.bias
    grads = {s.name: s.value[0] for s in t if s.grad}
    assert torch.equal(grads["relu"], weights)
    # The linear's output was later overwritten by ReLU in place; its gradient is for the
    # value it returned: upstream * relu'(linear_out).
    assert torch.allclose(grads["linear"], weights * (linear_out > 0))
    forward = {s.name: s.value for s in t if not s.grad}
    assert torch.allclose(forward["linear"], linear_out)  # copied before the in-place ReLU


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.inner(x)
        out += x
        return out


def test_inplace_residual_add() -> None:
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(2, 3, requires_grad=True)
    with track(model) as t:
        (model(x) ** 2).sum().backward()
    out = model.inner(x) + x
    grads = {s.name: s.value[0] for s in t if s.grad}
    assert torch.allclose(grads[""], 2 * out)
    assert torch.allclose(grads["inner"], 2 * out)


# -- bitwise invisibility ------------------------------------------------------------


def run_encoder(tracked: bool) -> tuple[Tensor, list[Tensor]]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(3, 7, 32)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, 5:] = True
    with track(model) if tracked else _null() as t:
        out = model(x, src_key_padding_mask=mask)
        out.pow(2).mean().backward()
    if tracked:
        assert t is not None and any(s.grad for s in t)
    return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        pass


def test_transformer_encoder_bitwise_identical() -> None:
    out_a, grads_a = run_encoder(tracked=False)
    out_b, grads_b = run_encoder(tracked=True)
    assert torch.equal(out_a, out_b)
    assert len(grads_a) == len(grads_b) > 0
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b, strict=True))


@pytest.mark.parametrize("tracked_kwargs", [{}, {"stats": True}, {"capture": ("inputs", "params")}])
def test_tiny_transformer_with_inplace_residuals_bitwise_identical(
    tracked_kwargs: dict[str, Any], device: torch.device
) -> None:
    from examples.tiny_transformer import TinyTransformer, copy_task_batch

    def run(tracked: bool) -> tuple[Tensor, list[Tensor]]:
        torch.manual_seed(0)
        model = TinyTransformer(vocab=16, d_model=16, n_layers=2).to(device)
        tokens, _ = copy_task_batch(2, 8, 16, torch.Generator().manual_seed(0))
        tokens = tokens.to(device)
        mask = torch.zeros(2, 8, dtype=torch.bool, device=device)
        mask[1, 6:] = True
        with track(model, **tracked_kwargs) if tracked else _null():
            out = model(tokens, padding_mask=mask)
            out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    out_a, grads_a = run(False)
    out_b, grads_b = run(True)
    assert torch.equal(out_a, out_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b, strict=True))


# -- output structures ---------------------------------------------------------------


class Named(NamedTuple):
    main: Tensor
    aux: Tensor


@dataclasses.dataclass
class Out:
    main: Tensor
    count: int
    extra: Tensor = dataclasses.field(init=False)


class OutDict(collections.OrderedDict[str, Any]):
    pass


class Emit(nn.Module):
    """Returns `kind`-shaped output built from a Linear's result."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.linear = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Any:
        h = self.linear(x)
        k = self.kind
        if k == "tuple":
            return h, 2 * h
        if k == "list":
            return [h, torch.arange(3)]
        if k == "dict":
            return OutDict(a=h, b=None, c="text")
        if k == "namedtuple":
            return Named(h, h.detach())
        if k == "dataclass":
            out = Out(h, 3)
            out.extra = 3 * h
            return out
        if k == "none":
            return None
        if k == "int":
            return 7
        if k == "int_tensor":
            return (h > 0).long()
        raise AssertionError(k)


def loss_of(value: Any) -> Tensor:
    tensors = [
        t for t in tensor_tracker._core.structure.iter_tensors(value) if t.is_floating_point()
    ]
    return sum((t.sum() for t in tensors if t.requires_grad), torch.zeros(()))


@pytest.mark.parametrize(
    ("kind", "grad_pattern", "first_grad"),
    [
        # A gradient is d loss / d tensor: for (h, 2h) the tensor h also feeds 2h, so 1 + 2.
        ("tuple", (True, True), 3.0),
        ("list", (True, False), 1.0),
        ("dict", (True,), 1.0),
        ("namedtuple", (True, False), 1.0),
        ("dataclass", (True, True), 4.0),
        ("none", None, None),
        ("int", None, None),
        ("int_tensor", None, None),
    ],
)
def test_output_structures(
    kind: str, grad_pattern: tuple[bool, ...] | None, first_grad: float | None
) -> None:
    model = Emit(kind)
    x = torch.randn(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with track(model) as t:
            out = model(x)
            loss = loss_of(out) + model.linear(x).sum() * 0
            loss.backward()
    root = [s for s in t if s.name == ""]
    forward = root[0].value
    assert type(forward) is type(out)
    if kind == "dataclass":
        assert torch.allclose(forward.extra, 3 * out.main) and forward.count == 3
    if kind == "dict":
        assert list(forward) == ["a", "b", "c"] and forward["c"] == "text"
    grads = [s.value for s in root if s.grad]
    if grad_pattern is None:
        assert grads == []
    else:
        (g,) = grads
        assert tuple(v is not None for v in g) == grad_pattern
        assert torch.equal(g[0], torch.full((3, 2), first_grad))


def test_module_called_twice_has_call_index() -> None:
    linear = nn.Linear(2, 2)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = linear

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = self.linear(self.linear(x))
            return out

    model = Twice()
    with track(model, include="linear") as t:
        model(torch.randn(1, 2)).sum().backward()
    assert [(s.grad, s.call) for s in t] == [(False, 0), (False, 1), (True, 1), (True, 0)]
    assert torch.allclose(t[1].value, linear(t[0].value))


def test_frozen_and_detached_subgraphs_get_no_gradient_stash() -> None:
    frozen = nn.Linear(2, 2).requires_grad_(False)
    trained = nn.Linear(2, 2)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.frozen = frozen
            self.trained = trained
            self.side = nn.Linear(2, 2)

        def forward(self, x: Tensor) -> Tensor:
            self.side(x).detach()
            out: Tensor = self.trained(self.frozen(x))
            return out

    model = Model()
    with track(model) as t:
        model(torch.randn(1, 2)).sum().backward()
    grads = [s.name for s in t if s.grad]
    assert grads == ["", "trained"]


def test_unused_output_gets_no_gradient_stash() -> None:
    model = nn.ModuleDict({"used": nn.Linear(2, 2), "unused": nn.Linear(2, 2)})
    x = torch.randn(1, 2)
    with track(model) as t:
        model["unused"](x)
        model["used"](x).sum().backward()
    assert [s.name for s in t if s.grad] == ["used"]


def test_forward_under_no_grad_and_inference_mode() -> None:
    model = mlp()
    for context in (torch.no_grad, torch.inference_mode):
        with context(), track(model) as t:
            model(torch.randn(1, 4))
        assert len(t) == 4 and not any(s.grad for s in t)


def test_no_pytorch_hook_warnings() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with track(model) as t:
            model(torch.randn(2, 3, requires_grad=True)).sum().backward()
    assert len(t) == 8


# -- to_frame ------------------------------------------------------------------------


# -- in-place operations on views (nn.Linear on 3-D inputs returns a view) ---------------


class Child(nn.Module):
    def __init__(self, returns: str) -> None:
        super().__init__()
        self.returns = returns
        self.linear = nn.Linear(3, 5)

    def forward(self, x: Tensor) -> Any:
        h = self.linear(x)
        if self.returns == "view":
            return h  # x is 3-D, so h is a view of the matmul's 2-D result
        if self.returns == "slice":
            return h[..., 1:4]  # a view with a storage offset
        return h[..., :2], h[..., 2:]


class InplaceParent(nn.Module):
    def __init__(self, returns: str) -> None:
        super().__init__()
        self.child = Child(returns)

    def forward(self, x: Tensor) -> Any:
        out = self.child(x)
        if isinstance(out, tuple):
            out[0].mul_(2)
            out[1].mul_(5)
            return out
        out.mul_(3)
        return out


@pytest.mark.parametrize("returns", ["view", "slice"])
def test_inplace_on_a_view_records_pre_modification_gradient(returns: str) -> None:
    torch.manual_seed(0)
    model = InplaceParent(returns)
    x = torch.randn(2, 4, 3)
    with track(model, include="^child$|^$") as t:
        out = model(x)
        weights = torch.randn(out.shape)
        (out * weights).sum().backward()
    grads = {s.name: s.value[0] for s in t if s.grad}
    assert torch.allclose(grads[""], weights)
    assert torch.allclose(grads["child"], 3 * weights)  # before mul_(3)
    assert grads["child"].shape == out.shape


def test_inplace_on_a_tuple_of_views() -> None:
    torch.manual_seed(0)
    model = InplaceParent("pair")
    x = torch.randn(2, 4, 3)
    w1, w2 = torch.randn(2, 4, 2), torch.randn(2, 4, 3)
    with track(model, include="^child$") as t:
        a, b = model(x)
        ((a * w1).sum() + (b * w2).sum()).backward()
    (grad,) = [s.value for s in t if s.grad]
    assert torch.allclose(grad[0], 2 * w1) and torch.allclose(grad[1], 5 * w2)


def test_userdict_output_is_copied_and_gets_gradients() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: Tensor) -> collections.UserDict[str, Tensor]:
            return collections.UserDict(y=self.lin(x))

    model = M()
    with track(model, include="^$") as t:
        out = model(torch.ones(1, 2))
        out["y"].sum().backward()
    assert [s.grad for s in t] == [False, True]
    assert t[0].value is not out and not t[0].value["y"].requires_grad
    assert torch.equal(t[1].value[0], torch.ones(1, 2))


def test_stashes_of_a_stats_run_can_be_saved_and_reloaded(tmp_path: Any) -> None:
    model = mlp()
    with track(model, stats=True) as t:
        model(torch.randn(3, 4)).sum().backward()
    path = tmp_path / "run.pt"
    torch.save(t.stashes, path)
    reloaded = Tracker()
    reloaded.stashes.extend(torch.load(path, weights_only=False))
    assert reloaded.to_frame().equals(t.to_frame())


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_records_each_forward_once(use_reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = self.b(torch.relu(self.a(x)))
            return out

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()
            self.head = nn.Linear(8, 1)

        def forward(self, x: Tensor) -> Tensor:
            hidden = checkpoint(self.block, x, use_reentrant=use_reentrant)
            out: Tensor = self.head(hidden)
            return out

    def run(tracked: bool) -> tuple[list[Stash], list[Tensor]]:
        torch.manual_seed(0)
        model = Model()
        x = torch.randn(4, 8, requires_grad=True)
        with track(model) if tracked else _null() as t:
            model(x).sum().backward()
        return (list(t) if t is not None else []), [p.grad.clone() for p in model.parameters()]

    stashes, grads = run(True)
    _, reference = run(False)
    assert all(torch.equal(a, b) for a, b in zip(grads, reference, strict=True))
    forward = [s.name for s in stashes if not s.grad]
    assert forward == ["block.a", "block.b", "block", "head", ""]
    gradients = [(s.name, s.call) for s in stashes if s.grad]
    assert sorted(gradients) == [("", 0), ("block", 0), ("block.a", 0), ("block.b", 0), ("head", 0)]


def test_compiled_model_keeps_its_module_names_and_numerics() -> None:
    model = mlp()
    x = torch.randn(4, 4)
    reference = model(x)
    reference.sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    compiled = torch.compile(model, backend="eager")  # dynamo tracing, no code generation
    with track(compiled) as t:
        out = compiled(x)
        out.sum().backward()
    assert [(s.name, s.grad) for s in t][:4] == [
        ("0", False),
        ("1", False),
        ("2", False),
        ("", False),
    ]
    assert torch.equal(out, reference)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))


@pytest.mark.parametrize("how", ["wrapper", "in_place", "child"])
def test_a_compiled_model_that_already_ran_is_recorded(how: str) -> None:
    model = mlp()
    x = torch.randn(4, 4)
    with track(model) as expected:
        model(x).sum().backward()
    model.zero_grad()
    compiled: nn.Module = model
    if how == "wrapper":
        compiled = torch.compile(model, backend="eager")
    elif how == "in_place":
        model.compile(backend="eager")
    else:
        model[0] = torch.compile(model[0], backend="eager")  # type: ignore[assignment]
    compiled(x).sum().backward()  # compiled, and run, before tracking
    model.zero_grad()
    with track(compiled) as t:
        compiled(x).sum().backward()
    assert [(s.name, s.grad) for s in t] == [(s.name, s.grad) for s in expected]
    assert all(
        torch.equal(a.value, b.value) for a, b in zip(t, expected, strict=True) if not a.grad
    )
    before = len(t)
    compiled(x).sum().backward()  # after the block: nothing more is recorded
    assert len(t) == before


def test_a_tracker_records_again_in_a_second_with_block() -> None:
    model = mlp()
    x = torch.randn(2, 4)
    t = track(model)
    with t:
        model(x).sum().backward()
    first = len(t)
    model(x)  # between the blocks: no hooks
    assert len(t) == first and hook_count(model) == 0
    with t:
        model(x).sum().backward()
    assert len(t) == 2 * first
    assert hook_count(model) == 0


def test_a_stash_function_returning_no_stash_is_a_type_error_naming_stash() -> None:
    model = mlp()
    calls = []

    def stash(event: Event) -> Any:
        calls.append(event.name)
        return Stash(event.name, event.type, event.grad, None) if len(calls) < 2 else "oops"

    t = track(model, stash=stash)
    with pytest.raises(TypeError, match=r"stash= must return a tensor_tracker\.Stash.*str"), t:
        model(torch.randn(2, 4))
    assert [s.name for s in t] == ["0"]  # what was recorded before is kept
    assert hook_count(model) == 0
    assert isinstance(t.to_frame(), object)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sample": True}, TypeError, "sample="),
        ({"sample": 0}, ValueError, "sample="),
        ({"seed": "x"}, TypeError, "seed="),
        ({"seed": 1.5}, TypeError, "seed="),
        ({"grad": "no"}, TypeError, "grad="),
        ({"train_only": "yes"}, TypeError, "train_only="),
        ({"non_blocking": "x"}, TypeError, "non_blocking="),
        ({"capture": 123}, TypeError, "capture="),
        ({"capture": ()}, ValueError, "capture="),
        ({"every": True}, TypeError, "every="),
        ({"every": 0}, ValueError, "every="),
        ({"max_bytes": True}, TypeError, "max_bytes="),
        ({"max_bytes": 1.5}, TypeError, "max_bytes="),
        ({"include": 3}, TypeError, "include="),
        ({"exclude": "("}, ValueError, "exclude="),
        ({"stash": "f"}, TypeError, "stash="),
        ({"stash_value": 3}, TypeError, "stash_value="),
        ({"dtype": "float16"}, TypeError, "dtype="),
        ({"stash_value": lambda t: t, "seed": "x"}, TypeError, "seed="),
    ],
)
def test_every_argument_is_checked_up_front(
    kwargs: dict[str, Any], error: type, match: str
) -> None:
    model = mlp()
    with pytest.raises(error, match=match) as info:
        track(model, **kwargs)
    assert isinstance(info.value, tensor_tracker.errors.TensorTrackerError)
    assert hook_count(model) == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t, m: t.register(m, name=3), "name"),
        (lambda t, m: t.register(m, grad="no"), "grad="),
        (lambda t, m: t.register_all(m, grad=1), "grad="),
        (lambda t, m: t.step(True), "step"),
        (lambda t, m: t.step("3"), "step"),
    ],
)
def test_tracker_methods_check_their_arguments(call: Any, match: str) -> None:
    model = mlp()
    t = Tracker()
    with pytest.raises(TypeError, match=match):
        call(t, model)
    assert hook_count(model) == 0


def test_error_types_form_one_vocabulary() -> None:
    errors = tensor_tracker.errors
    assert issubclass(errors.MemoryBudgetError, errors.TensorTrackerError)
    assert issubclass(errors.MemoryBudgetError, RuntimeError)
    assert tensor_tracker.MemoryBudgetError is errors.MemoryBudgetError
    assert issubclass(errors.ArgumentTypeError, TypeError)
    assert issubclass(errors.ArgumentValueError, ValueError)
