"""Issue #15: a compiled model, tracked, records what the eager model records, and tracking
it adds no graph break and no recompilation: forward statistics (`grad=False`) and, on
torch >= 2.13, gradient statistics too (computed in the backward graph).

The graph-break tests compile a small MLP with the default backend (inductor), where the
compiled numerics are the ones that must not change. The tests that compare records with
eager mode use `backend="eager"` or `"aot_eager"`: graph breaks and the records come from
Dynamo's tracing (and AOTAutograd's, for the backward graph), the same whatever the
backend, and more inductor compiles would double this file's time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from tensor_tracker import Tracker, stats, track
from tensor_tracker._core.graph_sink import traces_gradients as graph_gradients
from tensor_tracker._core.structure import iter_leaves, iter_tensors, rmap
from tests.helpers import batch, mlp, tiny_model

pytestmark = pytest.mark.slow  # torch.compile compiles for seconds in every test

KEYS = ["name", "grad", "call", "step", "kind", "attr"]
STATS = ["mean", "std", "rms", "min", "max", "numel"]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


def _run(
    model: torch.nn.Module,
    tracker: Tracker,
    steps: int,
    backward: bool,
    inputs: torch.Tensor | None = None,
) -> list[int]:
    """Run `steps` steps in one `with tracker:` block; the graphs compiled after each."""
    tokens = batch() if inputs is None else inputs
    graphs = []
    with tracker:
        for _ in range(steps):
            out = model(tokens)
            if backward:
                out.float().pow(2).mean().backward()
            tracker.step()
            graphs.append(counters["stats"]["unique_graphs"])
    return graphs


def _comparable(tracker: Tracker) -> pd.DataFrame:
    """`tracker`'s forward records in recording order, then its gradient records sorted
    within each step: under torch.compile they come in another order (see the README's
    "Distributed and compiled training"): the parameters' after the outputs' (a compiled
    backward pass is one autograd node, parameter gradients are accumulated after it), and
    a module's before its parent's when both return the same tensor."""
    frame = tracker.to_frame()
    grads = frame[frame["grad"]].sort_values(["step", "name", "kind", "attr"], kind="stable")
    return pd.concat([frame[~frame["grad"]], grads])


def _same_records(compiled: Tracker, eager: Tracker) -> None:
    a, b = _comparable(compiled), _comparable(eager)
    assert a[KEYS].values.tolist() == b[KEYS].values.tolist()
    for column in STATS:
        assert torch.allclose(
            torch.tensor(a[column].values), torch.tensor(b[column].values), rtol=1e-4, atol=1e-5
        ), column


def _breaks() -> int:
    return sum(counters["graph_break"].values())


def test_forward_statistics_of_a_compiled_model_add_no_graph_break() -> None:
    # A small model: inductor's C++ code generation costs seconds per kernel on a CPU.
    compiled = torch.compile(mlp())
    tracker = track(compiled, stats=True, grad=False)
    x = torch.randn(8, 4)
    graphs = _run(compiled, tracker, 3, backward=False, inputs=x)
    assert _breaks() == 0
    assert graphs[0] == graphs[-1]  # compiled once: no recompilation at later steps
    eager = mlp()
    eager_tracker = track(eager, stats=True, grad=False)
    _run(eager, eager_tracker, 3, backward=False, inputs=x)
    _same_records(tracker, eager_tracker)
    assert len(tracker) == 3 * 4  # three Linear/Tanh modules and the root, three steps


def test_health_statistics_of_a_compiled_model_are_traced_and_match_eager() -> None:
    # Issue 39: kurtosis's float64 central moments are traced into the compiled graphs
    # (forward and backward) like the default statistics, with no graph break.
    compiled = torch.compile(tiny_model(), backend="aot_eager")
    tracker = track(compiled, stats=stats.health)
    graphs = _run(compiled, tracker, 2, backward=True)
    if graph_gradients():
        assert _breaks() == 0
        assert graphs[0] == graphs[-1]
    eager = tiny_model()
    eager_tracker = track(eager, stats=stats.health)
    _run(eager, eager_tracker, 2, backward=True)
    a, b = _comparable(tracker), _comparable(eager_tracker)
    assert a[KEYS].values.tolist() == b[KEYS].values.tolist()
    for column in stats.health:
        assert torch.allclose(
            torch.tensor(a[column].values),
            torch.tensor(b[column].values),
            rtol=1e-4,
            atol=1e-5,
            equal_nan=True,
        ), column
    assert a["kurtosis"].notna().any()


def test_forward_statistics_of_many_calls_per_step_and_parameters_compile_once() -> None:
    """An evaluation loop: many calls and no `step()` between them, parameters captured.
    (A hook that appended to a Python list made Dynamo guard on its length: a new graph
    per call until the recompile limit, and the parameters' hooks broke the graph.)"""
    compiled = torch.compile(mlp(), backend="eager")
    options: dict[str, Any] = {"stats": True, "grad": False, "capture": ("outputs", "params")}
    tracker = track(compiled, **options)
    x = torch.randn(8, 4)
    with tracker:
        for _ in range(12):  # beyond the recompile limit (8)
            compiled(x)
    assert _breaks() == 0 and counters["stats"]["unique_graphs"] == 1
    eager = mlp()
    eager_tracker = track(eager, **options)
    with eager_tracker:
        for _ in range(12):
            eager(x)
    _same_records(tracker, eager_tracker)
    assert len(tracker) == 12 * 4 + 4  # outputs at every call, parameters once per step


def _train_compiled(tracked: bool, x: torch.Tensor) -> tuple[list[torch.Tensor], Any, Any]:
    """Three SGD steps of a compiled `mlp()` (inductor); the outputs and parameter
    gradients of each step, the tracker (or None) and the compiled model."""
    torch.compiler.reset()
    counters.clear()
    model = mlp()
    compiled = torch.compile(model)
    tracker = track(compiled, stats=True, capture=("outputs", "params")) if tracked else None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[torch.Tensor] = []
    graphs = []
    with tracker if tracker is not None else torch.enable_grad():
        for _ in range(3):
            out = compiled(x)
            out.pow(2).mean().backward()
            seen += [out.detach().clone(), *(p.grad.clone() for p in model.parameters())]
            opt.step()
            opt.zero_grad()
            if tracker is not None:
                tracker.step()
            graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] == graphs[-1]  # no recompilation at later steps
    return seen, tracker, compiled


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 breaks the graph")
def test_gradient_statistics_of_a_compiled_model_add_no_graph_break() -> None:
    x = torch.randn(8, 4)
    untracked, _, _ = _train_compiled(False, x)
    tracked, tracker, compiled = _train_compiled(True, x)
    assert _breaks() == 0
    # The same compiled numerics, bit for bit: tracking only adds graph outputs and hooks.
    assert all(torch.equal(a, b) for a, b in zip(untracked, tracked, strict=True))
    model = mlp()
    eager = track(model, stats=True, capture=("outputs", "params"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with eager:
        for _ in range(3):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            eager.step()
    _same_records(tracker, eager)
    # Per step: 4 outputs and 4 parameters, and the gradients of each.
    assert len(tracker) == 3 * 16
    recorded = len(tracker)
    compiled(x).sum().backward()  # the hooks are gone after the block: nothing recorded
    assert len(tracker) == recorded


def test_compiled_model_with_gradients_records_what_eager_records() -> None:
    compiled = torch.compile(tiny_model(), backend="aot_eager")
    options = {"stats": True, "capture": ("outputs", "params")}
    tracker = track(compiled, **options)
    graphs = _run(compiled, tracker, 2, backward=True)
    if graph_gradients():
        assert _breaks() == 0
        assert graphs[0] == graphs[-1]
    eager = tiny_model()
    eager_tracker = track(eager, **options)
    _run(eager, eager_tracker, 2, backward=True)
    _same_records(tracker, eager_tracker)
    # The gradients recorded are those autograd computes for the first step, also for the
    # outputs modified in place later (`h += x` in each block, whose `nn.Linear` output is
    # a view) and for those a parent returns as its own.
    model = tiny_model()
    params = dict(model.named_parameters())
    outputs: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        module.register_forward_hook(lambda m, a, out, name=name: outputs.setdefault(name, out))
    loss = model(batch()).float().pow(2).mean()
    grads = torch.autograd.grad(loss, [*params.values(), *outputs.values()])
    expected = dict(zip([*params, *(f"{n}:output" for n in outputs)], grads, strict=True))
    frame = tracker.to_frame()
    rows = frame[frame["grad"] & (frame["step"] == 0)]
    found: dict[str, tuple[float, float]] = {}
    for name, kind, attr, rms, top in zip(
        rows["name"], rows["kind"], rows["attr"], rows["rms"], rows["max"], strict=True
    ):
        key = f"{name}.{attr}".lstrip(".") if kind == "param" else f"{name}:output"
        found[key] = (rms, top)
    assert found.keys() == expected.keys()
    for key, grad in expected.items():
        rms = grad.double().pow(2).mean().sqrt().item()
        assert found[key] == pytest.approx((rms, grad.max().item()), rel=1e-4, abs=1e-6), key


class _Twice(nn.Module):
    """One linear layer applied twice; the last module returns its input object."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)
        self.act = nn.Tanh()
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.drop(self.act(self.lin(self.act(self.lin(x)))))
        return out


@pytest.mark.parametrize("passes", ["one", "accumulated", "retain_graph", "summed"])
def test_gradients_of_a_module_called_twice_are_matched_with_their_calls(passes: str) -> None:
    """Two calls of one module, and per step two forward/backward passes, two backward
    passes of one graph, or two forward passes and one backward pass: each gradient record
    has its call's number, as in eager mode."""
    x = torch.randn(3, 2, 4)

    def run(model: nn.Module, tracker: Tracker) -> None:
        with tracker:
            for _ in range(2):
                if passes == "retain_graph":
                    loss = model(x).pow(2).sum()
                    loss.backward(retain_graph=True)
                    loss.backward()
                elif passes == "summed":
                    (model(x).pow(2).sum() + model(x * 2).pow(2).sum()).backward()
                else:
                    for _ in range(2 if passes == "accumulated" else 1):
                        model(x).pow(2).sum().backward()
                tracker.step()

    compiled = torch.compile(_Twice(), backend="aot_eager")
    tracker = track(compiled, stats=True)
    run(compiled, tracker)
    if graph_gradients():
        assert _breaks() == 0
    eager = _Twice()
    eager_tracker = track(eager, stats=True)
    run(eager, eager_tracker)
    _same_records(tracker, eager_tracker)
    a, b = tracker.to_frame(), eager_tracker.to_frame()
    # The same order, but for the root's gradient: the root, `drop` and `act` share one
    # tensor, whose hooks in the compiled graph may run in another order than eagerly.
    a, b = a[a["name"] != ""], b[b["name"] != ""]
    assert a[KEYS].values.tolist() == b[KEYS].values.tolist()


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 breaks the graph")
def test_calls_awaiting_their_gradients_stay_bounded_without_step() -> None:
    compiled = torch.compile(mlp(), backend="eager")
    tracker = track(compiled, stats=True)
    x = torch.randn(8, 4)
    with tracker:
        outputs = [compiled(x) for _ in range(100)]  # no backward, no step()
        # One backward pass through all 100 calls: the tracker keeps only the latest 64
        # calls waiting for their gradients, so only those are recorded (each module once).
        torch.stack(outputs).sum().backward()
    grads = tracker.to_frame().query("grad")
    assert sorted(set(grads["call"])) == list(range(100 - 64, 100))
    per_call = {call: sorted(rows["name"]) for call, rows in grads.groupby("call")}
    assert all(names == ["", "0", "1", "2"] for names in per_call.values()), per_call
    assert _breaks() == 0


def test_untraced_hooks_run_eagerly_inside_and_outside_compiled_code() -> None:
    # The tracker's eager hooks, where Dynamo may run: called as they are (Dynamo neither
    # inlines nor compiles them) inside a compiled region, and outside one with Dynamo's
    # frame callback as it is (None), without `torch.compiler.disable`'s switching.
    from torch._C._dynamo.eval_frame import get_eval_frame_callback

    from tensor_tracker._torch_compat import untraced

    seen: list[object] = []

    def hook(x: torch.Tensor) -> None:
        seen.append(get_eval_frame_callback())

    call = untraced(hook)

    @torch.compile(backend="eager")
    def f(x: torch.Tensor) -> torch.Tensor:
        call(x)
        return x + 1

    f(torch.ones(2))
    f(torch.ones(2))
    call(torch.ones(2))
    assert seen == [None, None, None]  # every call ran the hook, never traced
    assert counters["stats"]["unique_graphs"] <= 2  # the graph break at the hook, no more


class _Scores(nn.Module):
    """Returns `q @ k.transpose(-2, -1)`: eager matmul gives a new tensor, Dynamo's traced
    decomposition a view of its `bmm` result (issue 37: the compiled backward crashed)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)


class _Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 8)
        self.scores = _Scores()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x).view(2, 3, 2, 4).transpose(1, 2)  # [batch, heads, rows, features]
        out: torch.Tensor = self.scores(h, h).softmax(-1)
        return out


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 records gradients eagerly")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_module_returning_a_4d_matmul_records_its_gradient_when_compiled(backend: str) -> None:
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    model = _Heads()
    compiled = torch.compile(model, backend=backend)
    tracker = track(compiled, stats=True)
    _run(compiled, tracker, 2, backward=True, inputs=x)
    assert _breaks() == 0
    # The gradient of the scores, as autograd computes it.
    outputs: dict[str, torch.Tensor] = {}
    model.scores.register_forward_hook(lambda m, a, out: outputs.setdefault("s", out))
    (grad,) = torch.autograd.grad(model(x).float().pow(2).mean(), [outputs["s"]])
    frame = tracker.to_frame()
    rows = frame[(frame["name"] == "scores") & frame["grad"]]
    assert len(rows) == 2
    rms = grad.double().pow(2).mean().sqrt().item()
    assert rows["rms"].tolist() == pytest.approx([rms, rms], rel=1e-4)


class _Split(nn.Module):
    """Returns a real view of a 3-D tensor with one more dimension and the same last two:
    the shape Dynamo's matmul result has (see `grad_hooks.traced_stand_in`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).view(2, 2, 3, 4)


class _ChangesItInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split = _Split()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.split(x)
        out.mul_(3)  # the view's own hook never fires: the gradient goes around it
        return out


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 records gradients eagerly")
@pytest.mark.parametrize(
    "backend",
    [
        None,
        pytest.param(
            "aot_eager",
            marks=pytest.mark.xfail(
                strict=True, reason="the narrow gap grad_hooks.traced_stand_in documents"
            ),
        ),
    ],
)
def test_a_real_view_shaped_like_a_traced_matmul_modified_in_place_keeps_its_gradient(
    backend: str | None,
) -> None:
    x = torch.randn(4, 3, 4, requires_grad=True)
    model = _ChangesItInPlace()
    run = model if backend is None else torch.compile(model, backend=backend)
    with track(run, stats=True) as tracker:
        run(x).sum().backward()
    frame = tracker.to_frame()
    rows = frame[(frame["name"] == "split") & frame["grad"]]
    assert rows["mean"].tolist() == [pytest.approx(3.0)]  # d (3 * out).sum() / d out


# -- outputs of several tensors (issue 37): recorded in the graph, no graph break ----------


class _Nested(nn.Module):
    """Returns a nested dict of several tensors, `None`s and a plain value."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = self.fc(x)
        return {"a": h * 2, "b": (h.relu(), None, 3), "c": [h.sum(-1)], "d": (h.tanh(), h)}


class _UsesNested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Nested()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)  # "c" and "d" unused: their gradients never come
        return out["a"] + out["b"][0]


def _nested() -> tuple[nn.Module, dict[str, Any], Any]:
    torch.manual_seed(0)
    return _UsesNested(), {"x": torch.randn(3, 4)}, lambda out: out.pow(2).mean()


def _bert() -> tuple[nn.Module, dict[str, Any], Any]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        attn_implementation="eager",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    inputs = {"input_ids": torch.randint(0, 100, (2, 9)), "attention_mask": mask}

    def loss(out: Any) -> torch.Tensor:
        return out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()

    return transformers.BertModel(config).eval(), inputs, loss


def _gpt2() -> tuple[nn.Module, dict[str, Any], Any]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    # No cache: a `DynamicCache` in the output still takes the eager path.
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, use_cache=False
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, {"input_ids": torch.randint(0, 100, (2, 9))}, lambda out: out.logits.mean()


def _steps(
    model: nn.Module, inputs: dict[str, Any], loss: Any, tracker: Tracker | None, steps: int
) -> tuple[list[torch.Tensor], list[int]]:
    """The outputs' first tensors and the parameter gradients of each step, and the graphs
    compiled after each."""
    params = list(model.parameters())
    seen: list[torch.Tensor] = []
    graphs = []
    with tracker if tracker is not None else torch.enable_grad():
        for _ in range(steps):
            out = model(**inputs)
            seen += [next(iter_tensors(out)).detach(), *torch.autograd.grad(loss(out), params)]
            if tracker is not None:
                tracker.step()
            graphs.append(counters["stats"]["unique_graphs"])
    return seen, graphs


def _records(tracker: Tracker) -> list[tuple[Any, ...]]:
    """Each record's keys and the structure of its value (the statistics as numbers), the
    gradients sorted as in `_comparable`."""

    def row(s: Any) -> tuple[Any, ...]:
        shape = rmap(s.value, lambda t: t, lambda v: v)
        leaves = [
            (v.names, [float(v[n]) for n in v.names]) if isinstance(v, stats.Stats) else v
            for v in iter_leaves(shape)
        ]
        kinds = [type(s.value).__name__, *(type(v).__name__ for v in iter_leaves(s.value))]
        return (s.name, s.grad, s.call, s.step, s.kind, s.attr, kinds, leaves)

    rows = [row(s) for s in tracker]
    grads = sorted((r for r in rows if r[1]), key=lambda r: (r[3], r[0], r[4], r[5]))
    return [r for r in rows if not r[1]] + grads


def _same_values(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> None:
    assert [r[:7] for r in a] == [r[:7] for r in b]
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x[7], y[7], strict=True):
            if isinstance(u, tuple):
                assert u[0] == v[0] and u[1] == pytest.approx(v[1], rel=1e-4, abs=1e-5), x[:6]
            else:
                assert u == v, x[:6]


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 breaks the graph")
@pytest.mark.parametrize("make", [_nested, _bert, _gpt2], ids=["nested", "bert", "gpt2"])
def test_outputs_of_several_tensors_add_no_graph_break_and_keep_gradients_bitwise(
    make: Any,
) -> None:
    # A layer's tuple, attention's (context, weights), a ModelOutput: each tensor recorded
    # in the graph. Before, they took the eager path behind a graph break, which split the
    # backward pass and summed BERT's embedding gradients in another order (1.9e-6 off).
    model, inputs, loss = make()
    compiled = torch.compile(model, backend="aot_eager")
    untracked, _ = _steps(compiled, inputs, loss, None, 4)
    counters.clear()
    tracker = track(compiled, stats=True, every=2)
    tracked, graphs = _steps(compiled, inputs, loss, tracker, 4)
    assert _breaks() == 0
    assert graphs[1] == graphs[-1]  # after the first recorded and unrecorded step
    assert all(torch.equal(a, b) for a, b in zip(untracked, tracked, strict=True))
    eager = track(model, stats=True, every=2)
    _steps(model, inputs, loss, eager, 4)
    assert len(tracker) > 0
    # BERT's root returns last_hidden_state and feeds it to its pooler in the same graph:
    # its gradient record is the whole gradient (`hooks_in_frame`).
    _same_values(_records(tracker), _records(eager))


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 breaks the graph")
def test_an_output_of_several_tensors_under_inductor_keeps_gradients_bitwise() -> None:
    # The numerics that must not change are inductor's: tracking adds kernels of its own,
    # never a change to the model's (no graph break to split them).
    model, inputs, loss = _nested()
    compiled = torch.compile(model)
    untracked, _ = _steps(compiled, inputs, loss, None, 2)
    counters.clear()
    tracker = track(compiled, stats=True)
    tracked, _ = _steps(compiled, inputs, loss, tracker, 2)
    assert _breaks() == 0
    assert all(torch.equal(a, b) for a, b in zip(untracked, tracked, strict=True))
    eager = track(model, stats=True)
    _steps(model, inputs, loss, eager, 2)
    _same_values(_records(tracker), _records(eager))


class _ReusesItsOutput(nn.Module):
    """Returns `h` and also computes from it, inside the same compiled graph (as BERT's
    pooler reads `last_hidden_state`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.p = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x)
        return h, self.p(h)


@pytest.mark.skipif(not graph_gradients(), reason="torch < 2.13 records gradients eagerly")
def test_the_gradient_of_a_compiled_models_own_output_counts_its_uses_inside_the_graph() -> None:
    """Tracking `torch.compile(model)`: the root's gradient record is the whole gradient of
    its output `h`, also what flows back from `p(h)` inside the graph (the wrapper ran the
    root's hooks outside the graph, where only the gradient from outside reached them);
    the wrapper's `forward` is put back on exit."""
    model = _ReusesItsOutput()
    compiled = torch.compile(model, backend="aot_eager")
    forward = compiled.forward
    x = torch.randn(3, 4)
    with track(compiled, stats=["rms"]) as t:
        h, q = compiled(x)
        (h.sum() + q.pow(2).sum()).backward()
    assert compiled.forward is forward
    h, q = model(x)
    (expected,) = torch.autograd.grad(h.sum() + q.pow(2).sum(), h)
    frame = t.to_frame()
    (rms,) = frame[frame["grad"] & (frame["name"] == "")]["rms"]
    assert rms == pytest.approx(expected.pow(2).mean().sqrt().item(), rel=1e-6)
    assert _breaks() == 0
