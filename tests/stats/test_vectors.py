"""Statistics per channel and per sample (`stats.per_channel`, `stats.per_sample`): their
values against numpy, how a `StatsStore` keeps them (no object per record, widths per
record), and their argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tensor_tracker import stats, track
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, TensorTrackerError
from tensor_tracker.stats._vectors import VectorRows

STATS = ("abs_max", "rms", "mean", "abs_mean")


def _reference(x: np.ndarray, stat: str, dim: int) -> np.ndarray:
    """The statistic per index of `dim`, in float64 numpy."""
    moved = np.moveaxis(x.astype(np.float64), dim, 0).reshape(x.shape[dim], -1)
    if stat == "abs_max":
        return np.abs(moved).max(axis=1)
    if stat == "rms":
        return np.sqrt(np.square(moved).mean(axis=1))
    if stat == "abs_mean":
        return np.abs(moved).mean(axis=1)
    return moved.mean(axis=1)


@pytest.mark.parametrize("stat", STATS)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_values_match_numpy_for_every_dimension(stat: str, dim: int, device: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, 6, dtype=torch.float64) * torch.logspace(-2, 2, 6, dtype=torch.float64)
    for item in (stats.per_channel(stat, dim=dim), stats.per_sample(stat, dim=dim)):
        got = stats.parse([item])(x.to(device))[item.name]
        assert got.dtype == torch.float64 and got.shape == (x.shape[dim],)
        np.testing.assert_allclose(got.cpu().numpy(), _reference(x.numpy(), stat, dim), rtol=1e-12)


@pytest.mark.parametrize(
    ("shape", "kept"),
    [((2, 5, 4, 3), 1), ((2, 5, 2, 4, 3), 1), ((2, 6, 5), 2), ((6, 5), 1), ((5,), 0)],
)
def test_channels_by_default_are_each_layouts_channel_dimension(
    shape: tuple[int, ...], kept: int
) -> None:
    # [batch, channels, height, width] (and 5-D) keep dimension 1; the transformer and
    # MLP layouts their last; a 1-D tensor's entries are each their own channel.
    x = torch.randn(*shape)
    assert stats.channel_dim(x.dim()) % x.dim() == kept
    got = stats.parse([stats.per_channel("abs_max")])(x)["abs_max_per_channel"]
    np.testing.assert_allclose(got.numpy(), _reference(x.numpy(), "abs_max", kept), rtol=1e-12)
    explicit = stats.parse([stats.per_channel("abs_max", dim=-1)])(x)["abs_max_per_channel"]
    assert len(explicit) == shape[-1]


def test_only_channels_take_a_layout_dependent_dimension() -> None:
    assert stats.per_channel("rms").dim is None
    with pytest.raises(ArgumentTypeError, match=r"per_sample\(dim=...\) must be an int"):
        stats.per_sample("rms", dim=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("stat", STATS)
def test_half_integer_complex_and_strided_tensors(stat: str) -> None:
    torch.manual_seed(1)
    base = torch.randn(3, 8, 5)
    item = stats.per_channel(stat)
    fn = stats.parse([item])
    half = fn(base.half())[item.name].numpy()
    np.testing.assert_allclose(half, _reference(base.half().float().numpy(), stat, -1), rtol=1e-6)
    ints = torch.randint(-9, 9, (4, 3))
    np.testing.assert_allclose(
        fn(ints)[item.name].numpy(), _reference(ints.numpy(), stat, -1), rtol=1e-12
    )
    z = torch.complex(base, -base)
    np.testing.assert_allclose(
        fn(z)[item.name].numpy(), _reference(z.abs().numpy(), stat, -1), rtol=1e-6
    )
    transposed = base.transpose(0, 2)  # not contiguous
    np.testing.assert_allclose(
        fn(transposed)[item.name].numpy(),
        _reference(transposed.contiguous().numpy(), stat, -1),
        rtol=1e-6,
    )


def test_one_dimension_scalars_empty_and_nan() -> None:
    fn = stats.parse(["rms", stats.per_channel("abs_max"), stats.per_sample("mean", dim=1)])
    one = fn(torch.tensor([1.0, -2.0]))
    assert one["abs_max_per_channel"].tolist() == [1.0, 2.0]  # each entry its own channel
    assert one["mean_per_sample"].tolist() == []  # no dimension 1
    assert fn(torch.tensor(3.0))["abs_max_per_channel"].tolist() == []
    assert fn(torch.empty(0, 4))["abs_max_per_channel"].tolist() == []
    with_nan = fn(torch.tensor([[1.0, math.nan], [2.0, 1.0]]))
    values = with_nan["abs_max_per_channel"].tolist()
    assert values[0] == 2.0 and math.isnan(values[1])  # NaN stays in its channel
    by_column = with_nan["mean_per_sample"].tolist()  # dim=1: one entry per column
    assert by_column[0] == 1.5 and math.isnan(by_column[1])


def test_a_dimension_no_activation_has_is_refused_naming_the_argument_and_shape() -> None:
    """Issue #35 item 18: per_channel(dim=99) gave empty vectors silently. A tensor of 2+
    dimensions without `dim` stops tracking from the hook, as max_bytes= does; a 1-D one
    (a bias) still records its empty vector."""
    with pytest.raises(ArgumentValueError, match=r"per_sample\(dim=-99\).*\(2, 3\)"):
        stats.parse([stats.per_sample("rms", dim=-99)])(torch.ones(2, 3))
    model = nn.Sequential(nn.Flatten(0), nn.Unflatten(0, (3, 4)))
    x = torch.ones(12)
    with track(model, stats=[stats.per_channel("rms", dim=2)]) as t:
        with pytest.raises(ArgumentValueError) as raised:
            model(x)
        message = str(raised.value)
        assert "per_channel(dim=2)" in message and "(3, 4)" in message and "'1'" in message
        assert [s.name for s in t] == ["0"]  # kept: the 1-D output's empty vector
        assert t.to_frame()["rms_per_channel"].iloc[0].tolist() == []
        model(x)  # the hooks are gone: the pass runs, nothing more is recorded
    assert len(t) == 1


def test_stats_object_shows_vectors_in_dict_and_repr() -> None:
    s = stats.parse(["max", stats.per_sample("rms")])(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
    assert "rms_per_sample" in s and s.names == ("max",)
    assert s.to_dict()["rms_per_sample"] == pytest.approx([math.sqrt(12.5), 0.0])
    assert "rms_per_sample=<2 values>" in repr(s)
    table = stats.stats_table([s, s])
    assert table["rms_per_sample"][1] == pytest.approx([math.sqrt(12.5), 0.0])


def test_the_store_keeps_vectors_of_each_width_beside_the_rows() -> None:
    fn = stats.parse(["mean", stats.per_sample("abs_max")])
    store = fn.store()
    refs = [store.put(torch.full((n, 3), float(n))) for n in (2, 5, 1)]
    assert [store.get(r)["abs_max_per_sample"].tolist() for r in refs] == [
        [2.0] * 2,
        [5.0] * 5,
        [1.0],
    ]
    table = store.vector_table(torch.tensor(refs))["abs_max_per_sample"]
    assert [len(v) for v in table] == [2, 5, 1]
    # 8 bytes a number: a raw vector per row, 8 vector values, two integers per row.
    assert store.nbytes == 3 * 8 * fn.layout.width + 8 * 8 + 3 * 16
    store.truncate(refs[1:])  # what a tracker does when a step is dropped
    assert len(store) == 1 and store.get(refs[0])["abs_max_per_sample"].tolist() == [2.0, 2.0]
    again = store.put(torch.full((4, 3), 7.0))
    assert store.get(again)["abs_max_per_sample"].tolist() == [7.0] * 4
    store.clear()
    assert store.nbytes == 0


def test_vector_rows_read_and_truncate_on_device_chunks() -> None:
    # The accelerator code path, run on the CPU's "meta"-free path: chunks of a fixed size
    # filled in order, a vector larger than a chunk gets its own.
    from tensor_tracker.stats import _vectors as module

    rows = module._DeviceVectors(torch.device("cpu"))
    sizes = [3, module._CHUNK, 2, 0, 5]
    for i, n in enumerate(sizes):
        rows.add(torch.full((n,), float(i), dtype=torch.float64))
    data = rows.host_data()
    got = [data[s : s + n].tolist() for s, n in zip(rows.start, rows.length, strict=True)]
    assert got == [[float(i)] * n for i, n in enumerate(sizes)]
    rows.truncate(2)
    rows.add(torch.full((4,), 9.0, dtype=torch.float64))
    data = rows.host_data()
    assert data[rows.start[2] : rows.start[2] + 4].tolist() == [9.0] * 4
    assert data[rows.start[1] : rows.start[1] + 3].tolist() == [1.0] * 3


def test_vector_rows_hold_no_python_object_per_row() -> None:
    rows = VectorRows()
    for _ in range(1000):
        rows.add(0, torch.ones(4, dtype=torch.float64))
    part = rows._parts[0]
    assert type(part.data).__name__ == "array" and len(part.start) == 1000


def test_recorded_by_a_tracker_in_the_same_hook_and_in_to_frame() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU())
    spec = [*stats.DEFAULT, stats.per_channel("abs_max"), stats.per_sample("rms")]
    xs = [torch.randn(3, 4), torch.randn(5, 4)]  # a second, larger batch
    with track(model, stats=spec) as t:
        for x in xs:
            model(x).sum().backward()
            t.step()
    frame = t.to_frame()
    rows = frame[(frame["name"] == "0") & ~frame["grad"]]
    for (_, row), x in zip(rows.iterrows(), xs, strict=True):
        out = model[0](x).detach().numpy()
        assert isinstance(row["abs_max_per_channel"], np.ndarray)
        np.testing.assert_allclose(
            row["abs_max_per_channel"], _reference(out, "abs_max", -1), rtol=1e-6
        )
        np.testing.assert_allclose(row["rms_per_sample"], _reference(out, "rms", 0), rtol=1e-6)
    grads = frame[(frame["name"] == "0") & frame["grad"]]
    assert grads["abs_max_per_channel"].map(len).tolist() == [6, 6]


def test_nested_outputs_keep_their_vectors_as_objects() -> None:
    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"a": x * 2, "b": x}

    model = Pair()
    with track(model, stats=["rms", stats.per_channel("abs_max")]) as t:
        model(torch.tensor([[1.0, -3.0]]))
    frame = t.to_frame()
    assert frame["abs_max_per_channel"].iloc[0].tolist() == [2.0, 6.0]


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (lambda: stats.per_channel("std"), ArgumentValueError, "stat"),
        (lambda: stats.per_channel(3), ArgumentValueError, "stat"),  # type: ignore[arg-type]
        (lambda: stats.per_channel("rms", dim="x"), ArgumentTypeError, "dim"),  # type: ignore[arg-type]
        (lambda: stats.per_sample("rms", dim=1.0), ArgumentTypeError, "dim"),  # type: ignore[arg-type]
        (lambda: stats.per_sample("median"), ArgumentValueError, "stat"),
    ],
)
def test_argument_errors_name_the_argument(call: object, error: type, argument: str) -> None:
    with pytest.raises(error) as raised:
        call()  # type: ignore[operator]
    assert isinstance(raised.value, TensorTrackerError)
    assert f"({argument}=" in str(raised.value)


def test_two_items_of_one_name_are_refused() -> None:
    with pytest.raises(ArgumentValueError, match="abs_max_per_channel"):
        stats.parse([stats.per_channel("abs_max"), stats.per_channel("abs_max", dim=0)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_host_sync_on_cuda_and_one_transfer_to_read() -> None:
    fn = stats.parse([*stats.DEFAULT, stats.per_channel("abs_max"), stats.per_sample("rms")])
    store = fn.store()
    x = torch.randn(8, 16, 32, device="cuda")
    inputs = [x, x.half(), x[:, :5], x.transpose(1, 2), x[:0]]
    for t in inputs:  # warm-up
        fn(t.clone())
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        refs = [store.put(t.clone()) for t in inputs]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    table = store.vector_table(torch.tensor(refs))
    assert [len(v) for v in table["abs_max_per_channel"]] == [32, 32, 32, 16, 0]
    np.testing.assert_allclose(
        table["rms_per_sample"][2].numpy(),
        _reference(x[:, :5].cpu().numpy(), "rms", 0),
        rtol=1e-6,
    )
