"""Issue #35, item 3: a compiled model records what the eager model records. The awkward
models (`tests/graph_models.py`, `examples/zoo.py`, and a module whose sliced output its
parent modifies in place) are trained for two steps eagerly and under `torch.compile`, with
the same statistics of outputs, parameters and their gradients.

Records are compared as sorted lists of (name, kind, attr, call, step, grad): under
torch.compile they come in another order (see the README's "Distributed and compiled
training"). Values are compared within `TOLERANCE` of each record's scale."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest
import torch
from torch import Tensor, nn
from torch._dynamo.utils import counters

from examples import zoo
from tensor_tracker import track
from tensor_tracker._core.graph_sink import traces_gradients
from tests import graph_models

pytestmark = pytest.mark.slow  # torch.compile compiles for seconds in every test

KEYS = ["name", "kind", "attr", "call", "step", "grad"]
VALUES = ["mean", "std", "rms", "min", "max"]

TOLERANCE = {"aot_eager": 1e-5, "inductor": 1e-4}
"""The largest difference allowed between a compiled and an eager statistic, relative to
the record's rms. The two paths reduce a float32 tensor differently (the eager CPU kernels
sum and square-sum in float32, the graph sums in float64 about a shift: see
`stats._kernels._graph_moments`), which alone differ by about 1e-7. aot_eager runs the model's own ATen kernels, so its
tensors are eager ones (seen: at most 5e-7); Inductor also fuses and reorders the model's
float32 arithmetic, and two SGD steps carry that rounding into the weights and every later
record (seen: at most 1.5e-6). Relative to the rms, not to each value: a mean near zero is
the difference of sums of order rms."""


class Sliced(nn.Module):
    """Returns `h[:, :2]` of its linear layer's output: a view of part of a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.lin(x)[:, :2]


class ModifiesSlice(nn.Module):
    """Modifies its child's sliced output in place: the child's gradient then comes only
    through the base of the slice (issue #35: dropped under torch.compile)."""

    def __init__(self) -> None:
        super().__init__()
        self.child = Sliced()
        self.head = nn.Linear(2, 3)

    def forward(self, x: Tensor) -> Tensor:
        y = self.child(x)
        y *= 2
        out: Tensor = self.head(y)
        return out


def sliced_view() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    return ModifiesSlice(), (torch.randn(3, 4),), {}


def resnet18() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return zoo.ResNet18(width=4), (torch.randn(2, 3, 32, 32),), {}


def encoder() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return zoo.encoder(), (torch.randn(2, 5, 16),), {}


Builder = Callable[[], tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]
MODELS: dict[str, Builder] = {
    # Not residual_mlp: its `h += x` modifies the output that the in-place ReLU saved for
    # its backward, which autograd refuses, eagerly too.
    **{name: build for name, build in graph_models.MODELS.items() if name != "residual_mlp"},
    "sliced_view": sliced_view,
    "resnet18": resnet18,
    "encoder": encoder,
}


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


def _records(build: Builder, backend: str | None, **options: Any) -> pd.DataFrame:
    """Two SGD steps of the model from `build`, compiled with `backend` (None: eager),
    tracked with statistics of outputs and parameters and their gradients (and
    `options`); the records sorted by `KEYS`."""
    model, args, kwargs = build()
    # Inductor draws random numbers with its own generator: no dropout, to compare.
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        elif isinstance(module, nn.MultiheadAttention):
            module.dropout = 0.0
    run = model if backend is None else torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with track(run, stats=True, capture=("outputs", "params"), **options) as tracker:
        for _ in range(2):
            out = run(*args, **kwargs).float()
            # Against fixed random weights: the mean square of a layer-normed output (the
            # transformer's) hardly depends on anything, its gradients would be rounding.
            weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            (out * weights).mean().backward()
            opt.step()
            opt.zero_grad()
            tracker.step()
    return tracker.to_frame().sort_values(KEYS).reset_index(drop=True)


def _assert_parity(name: str, backend: str, **options: Any) -> pd.DataFrame:
    """Assert that the compiled model's records are the eager one's; return them."""
    eager = _records(MODELS[name], None, **options)
    compiled = _records(MODELS[name], backend, **options)
    assert compiled[KEYS].values.tolist() == eager[KEYS].values.tolist()
    assert compiled["numel"].tolist() == eager["numel"].tolist()
    scale = torch.tensor(eager["rms"].values).clamp(min=1e-30)
    for column in VALUES:
        difference = torch.tensor(compiled[column].values) - torch.tensor(eager[column].values)
        worst = (difference.abs() / scale).max().item()
        assert worst <= TOLERANCE[backend], (column, worst)
    return compiled


@pytest.mark.skipif(not traces_gradients(), reason="torch < 2.13 records gradients eagerly")
@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_aot_eager_records_what_eager_records(name: str) -> None:
    _assert_parity(name, "aot_eager")


@pytest.mark.skipif(not traces_gradients(), reason="torch < 2.13 records gradients eagerly")
# The transformer under Inductor is test_compiled_ops_record_what_eager_records' case: the
# same parity of every module's and parameter's records, with ops too, for one compile
# (Inductor compiles for most of a minute here).
@pytest.mark.parametrize("name", ["sliced_view"])
def test_compiled_inductor_records_what_eager_records(name: str) -> None:
    _assert_parity(name, "inductor")


def mlp() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (torch.randn(5, 8),), {}


@pytest.mark.skipif(not traces_gradients(), reason="torch < 2.13 records gradients eagerly")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_cpu_statistics_are_the_eager_kernels_numbers(backend: str) -> None:
    # On the CPU a graph hands each tensor out and the eager kernels compute its statistics
    # (`compiled._emitted`): aot_eager's tensors are eager ones, so every number is the
    # eager one, bit for bit. Inductor writes the ReLU's output into the linear layer's
    # buffer (and the gradients likewise) in place, without counting a version: the same
    # tensor object, whose statistics must be computed again, not taken from the last put.
    eager = _records(mlp, None)
    compiled = _records(mlp, backend)
    assert compiled[KEYS].values.tolist() == eager[KEYS].values.tolist()
    if backend == "aot_eager":
        assert compiled[VALUES].values.tolist() == eager[VALUES].values.tolist()
    else:
        difference = torch.tensor(compiled[VALUES].values - eager[VALUES].values).abs()
        scale = torch.tensor(eager["rms"].values)[:, None]
        assert (difference / scale).max().item() <= TOLERANCE[backend]


OPS = ["add", "matmul", "softmax", "linear", "layer_norm", "gelu", "relu"]


@pytest.mark.skipif(not traces_gradients(), reason="torch < 2.13 records gradients eagerly")
@pytest.mark.parametrize(
    ("name", "backend"),
    [("transformer", "aot_eager"), ("encoder", "aot_eager"), ("transformer", "inductor")],
)
def test_compiled_ops_record_what_eager_records(name: str, backend: str) -> None:
    # Issue 37 item 4: the ops are recorded in the graphs, numbered and valued as eagerly.
    records = _assert_parity(name, backend, ops=OPS)
    ops = records[records["kind"] == "op"]
    assert len(set(ops["attr"])) >= 4 and ops["grad"].any()
    assert not counters["graph_break"]
