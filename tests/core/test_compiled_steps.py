"""Issue 37, item 4: a compiled model's module hooks add no graph break, and changing
between recorded and unrecorded steps (`every=`) recompiles nothing.

Attention's `(output, None)` is recorded inside the graph (it used to take the eager path,
behind a graph break, and Dynamo then compiled the hook itself once per module class until
its recompile limit); the hooks stay attached through the steps `every=` skips, and the
statistics the graphs compute are kept only in recorded steps (detaching the hooks made
Dynamo recompile the model twice per recorded step).

The fast tests use the `aot_eager` backend: graph breaks and recompiles come from Dynamo's
tracing, the same whatever the backend; one slow test runs Inductor."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from tensor_tracker import Tracker, track
from tensor_tracker._core.graph_sink import traces_gradients

pytestmark = pytest.mark.skipif(
    not traces_gradients(), reason="torch < 2.13 records gradients eagerly, behind graph breaks"
)

KEYS = ["name", "kind", "attr", "call", "step", "grad"]
VALUES = ["mean", "std", "rms", "min", "max"]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


def _encoder_model() -> nn.Module:
    """The issue's model, small: a linear layer, a 2-layer transformer encoder (its
    attention returns `(output, None)`), a linear layer; no dropout, to compare."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return nn.Sequential(nn.Linear(8, 8), encoder, nn.Linear(8, 8))


def _run(backend: str | None, steps: int, **options: object) -> tuple[Tracker, list[int]]:
    """`steps` SGD steps of `_encoder_model`, compiled with `backend` (None: eager) and
    tracked with `stats=True` and `options`; the graphs compiled so far after each step."""
    model = _encoder_model()
    run = model if backend is None else torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    graphs = []
    with track(run, stats=True, **options) as tracker:  # type: ignore[arg-type]
        for _ in range(steps):
            run(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            tracker.step()
            graphs.append(counters["stats"]["unique_graphs"])
    return tracker, graphs


def _breaks() -> int:
    return sum(counters["graph_break"].values())


def _sorted(tracker: Tracker) -> pd.DataFrame:
    return tracker.to_frame().sort_values(KEYS).reset_index(drop=True)


def _assert_same_records(compiled: Tracker, eager: Tracker, tolerance: float) -> None:
    a, b = _sorted(compiled), _sorted(eager)
    assert a[KEYS].values.tolist() == b[KEYS].values.tolist()
    scale = torch.tensor(b["rms"].values).clamp(min=1e-30)
    for column in VALUES:
        difference = torch.tensor(a[column].values) - torch.tensor(b[column].values)
        assert (difference.abs() / scale).max().item() <= tolerance, column


@pytest.mark.slow  # Dynamo traces a transformer encoder: seconds
def test_a_compiled_transformer_encoder_records_attention_without_a_graph_break() -> None:
    compiled, graphs = _run("aot_eager", 2)
    assert _breaks() == 0
    assert graphs == [1, 1]
    eager, _ = _run(None, 2)
    _assert_same_records(compiled, eager, 1e-5)
    # Attention's (output, None) is one record of the tuple, as eagerly.
    attention = compiled["1.layers.0.self_attn"]
    assert [type(s.value).__name__ for s in attention] == ["tuple"] * 4


@pytest.mark.slow  # Dynamo traces a transformer encoder: seconds
def test_every_n_on_a_compiled_model_compiles_once_and_records_its_steps() -> None:
    # Parameters too: their gradients' hooks run eagerly, after the compiled backward,
    # and stay attached through the skipped steps as the graphs' hooks do.
    options = {"every": 3, "capture": ("outputs", "params")}
    compiled, graphs = _run("aot_eager", 7, **options)
    assert _breaks() == 0
    assert graphs == [graphs[0]] * 7
    eager, _ = _run(None, 7, **options)
    assert sorted(set(compiled.to_frame()["step"])) == [0, 3, 6]
    _assert_same_records(compiled, eager, 1e-5)


@pytest.mark.slow  # Inductor compiles for seconds
def test_every_n_under_inductor_compiles_once_and_records_what_eager_records() -> None:
    compiled, graphs = _run("inductor", 5, every=2)
    assert _breaks() == 0
    assert graphs == [graphs[0]] * 5
    eager, _ = _run(None, 5, every=2)
    # Inductor fuses and reorders float32 arithmetic (see test_compile_parity.TOLERANCE).
    _assert_same_records(compiled, eager, 1e-4)
