"""Issue #31: `StatsStore.put_many` (statistics of many tensors in batches) against `put`
(one tensor at a time), the reference: identical but for the sum of squares behind
`std`/`rms` (within `ROW_TOLERANCE`)."""

from __future__ import annotations

import math

import pytest
import torch

from tensor_tracker.stats import parse
from tensor_tracker.stats.batch import ROW_TOLERANCE
from tensor_tracker.stats.store import _DeviceRows

NAMES = ["mean", "std", "rms", "abs_max", "min", "max", "numel"]
MORE = ["sum", "abs_mean", "nonfinite", "zero_frac", "min", "max", "mean", "std", "numel"]
SQUARES = {"std", "rms"}  # from the sum of squares: added in another order


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 12, generator=g)
    return [
        w * 3 + 1,
        w.t(),  # not contiguous
        torch.randn(16, 12, generator=g).bfloat16(),
        torch.randn(192, generator=g) * 1e-4,
        torch.full((64,), 0.5) + torch.randn(64, generator=g) * 1e-6,  # mean >> spread
        torch.ones(64),  # a LayerNorm's weight: no spread at all
        torch.zeros(64),
        torch.randn(7, generator=g).half(),
        torch.randn(5, generator=g).double(),
        torch.arange(12),
        torch.tensor([True, False, True]),
        torch.tensor([1.0, math.nan, 2.0]),
        torch.tensor([1.0, math.inf, -2.0]),
        torch.empty(0),
        torch.randn(4, generator=g, dtype=torch.complex64),
        torch.sparse_coo_tensor([[0, 2]], [1.0, -3.0], (5,), check_invariants=True),
    ]


def _same(batched: dict[str, float], reference: dict[str, float]) -> None:
    assert batched.keys() == reference.keys()
    for name, want in reference.items():
        got = batched[name]
        if math.isnan(want):
            assert math.isnan(got), name
        elif name in SQUARES:
            scale = max(abs(reference.get("max", 0.0)), abs(reference.get("min", 0.0)), 1.0)
            assert got == pytest.approx(want, rel=ROW_TOLERANCE["rtol"], abs=1e-7 * scale), name
        else:
            assert got == want, name  # bit for bit


@pytest.mark.parametrize("names", [NAMES, MORE, ["sum"], ["min", "max"]])
def test_put_many_equals_put_tensor_by_tensor(names: list[str]) -> None:
    fn = parse(names)
    tensors = _tensors()
    batched, reference = fn.store(), fn.store()
    refs = batched.put_many(tensors)
    assert len(refs) == len(tensors)
    for tensor, ref in zip(tensors, refs, strict=True):
        _same(batched.get(ref).to_dict(), reference.get(reference.put(tensor)).to_dict())


def test_put_many_computes_a_tensor_given_twice_once() -> None:
    store = parse(True).store()
    w = torch.randn(8, 8)
    refs = store.put_many([w, torch.randn(8, 8), w])
    assert refs[0] == refs[2] != refs[1]
    assert len(store) == 2


def test_put_many_batches_only_the_builtin_statistics() -> None:
    custom = parse(["mean", ("l1", lambda t: t.abs().sum())])
    histogram = parse(["mean", "bf16_overflow"])
    for fn in (custom, histogram):
        assert fn.batch_core is None
        store, reference = fn.store(), fn.store()
        x = torch.randn(10)
        assert (
            store.get(store.put_many([x])[0]).to_dict() == reference.get(reference.put(x)).to_dict()
        )
    assert parse(True).batch_core is not None
    assert parse(True, compile=True).batch_core is None


def test_put_many_batches_tensors_of_one_size_into_one_block() -> None:
    store = parse(True).store()
    refs = store.put_many([torch.randn(3, 4), torch.randn(5), torch.randn(3, 4), torch.randn(5)])
    rows = [ref >> 4 for ref in refs]  # see store._SLOT_BITS
    assert rows == [0, 2, 1, 3]  # one block: the two 3 x 4 tensors, then the two of 5


def test_put_many_sees_nonfinite_values_for_the_tripwire() -> None:
    for names in (["sum"], ["min", "max"], ["nonfinite"]):
        store = parse(names).store()
        store.watch()
        store.put_many([torch.randn(4), torch.randn(4)])
        assert not store.nonfinite()
        store.put_many([torch.randn(4), torch.tensor([1.0, math.inf, 0.0, 1.0])])
        assert store.nonfinite(), names


def test_device_rows_take_a_block_across_buffers() -> None:
    rows = _DeviceRows(2, torch.device("cpu"))
    raw = torch.arange(2 * 4090, dtype=torch.float64).view(-1, 2)
    assert rows.add_block(raw, [3.0] * 4090) == 0
    more = torch.arange(2 * 10, dtype=torch.float64).view(-1, 2) + 0.5
    assert rows.add_block(more, [5.0] * 10) == 4090  # rows 4090..4099: across the 4096-row buffers
    table = rows.table()
    assert torch.equal(table, torch.cat((raw, more)))
    assert list(rows.numel) == [3] * 4090 + [5] * 10
