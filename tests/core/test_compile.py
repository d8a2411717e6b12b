"""Issue #15: a compiled model, tracked, records what the eager model records, and tracking
its forward statistics (`grad=False`) adds no graph break and no recompilation.

The graph-break test compiles a small MLP with the default backend (inductor).
The gradient test uses `backend="eager"`: graph breaks and the records come from Dynamo's
tracing, the same whatever the backend, and a second inductor compile (forward and
backward) would double this file's time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch._dynamo.utils import counters

from tensor_tracker import Tracker, track
from tests.helpers import batch, mlp, tiny_model

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


def _same_records(compiled: Tracker, eager: Tracker) -> None:
    a, b = compiled.to_frame(), eager.to_frame()
    assert a[KEYS].values.tolist() == b[KEYS].values.tolist()
    for column in STATS:
        assert torch.allclose(
            torch.tensor(a[column].values), torch.tensor(b[column].values), rtol=1e-4, atol=1e-5
        ), column


def test_forward_statistics_of_a_compiled_model_add_no_graph_break() -> None:
    # A small model: inductor's C++ code generation costs seconds per kernel on a CPU.
    compiled = torch.compile(mlp())
    tracker = track(compiled, stats=True, grad=False)
    x = torch.randn(8, 4)
    graphs = _run(compiled, tracker, 3, backward=False, inputs=x)
    assert sum(counters["graph_break"].values()) == 0
    assert graphs[0] == graphs[-1]  # compiled once: no recompilation at later steps
    eager = mlp()
    eager_tracker = track(eager, stats=True, grad=False)
    _run(eager, eager_tracker, 3, backward=False, inputs=x)
    _same_records(tracker, eager_tracker)
    assert len(tracker) == 3 * 4  # three Linear/Tanh modules and the root, three steps


def test_compiled_model_with_gradients_records_what_eager_records() -> None:
    compiled = torch.compile(tiny_model(), backend="eager")
    options = {"stats": True, "capture": ("outputs", "params")}
    tracker = track(compiled, **options)
    _run(compiled, tracker, 2, backward=True)
    eager = tiny_model()
    eager_tracker = track(eager, **options)
    _run(eager, eager_tracker, 2, backward=True)
    _same_records(tracker, eager_tracker)
    # The parameter gradients recorded are those autograd computes for the first step.
    model = tiny_model()
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(model(batch()).float().pow(2).mean(), list(params.values()))
    frame = tracker.to_frame()
    rows = frame[(frame["kind"] == "param") & frame["grad"] & (frame["step"] == 0)]
    pairs = zip(rows["name"], rows["attr"], rows["max"], strict=True)
    found = {f"{n}.{a}".lstrip("."): m for n, a, m in pairs}
    expected = {n: g.max().item() for n, g in zip(params, grads, strict=True)}
    assert found.keys() == expected.keys()
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
