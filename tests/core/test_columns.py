"""Columnar recording: `Columns` as a list of stashes, the `StatsStore`, and what a
statistics recording costs in memory."""

from __future__ import annotations

import pickle
import sys
import tracemalloc

import pytest
import torch
from torch import nn

from tensor_tracker import Stash, Tracker, track
from tensor_tracker._core.columns import GRAD, OBJECT, REFS, STASH, TRAINING, TUPLE, Columns
from tensor_tracker._core.memo import RecentTensors
from tensor_tracker._data.frame import to_frame
from tensor_tracker.stats import Stats, compute, histogram, parse
from tensor_tracker.stats import _store as store_module
from tests.helpers import interrupt_at, lines_run, mlp


def _columns() -> Columns:
    cols = Columns()
    a = cols.site_id("a", nn.Linear, "output", "")
    b = cols.site_id("b", nn.ReLU, "param", "weight")
    assert cols.site_id("a", nn.Linear, "output", "") == a  # each site once
    cols.add_object(a, 0, 3, TRAINING, torch.ones(1))
    cols.add_object(b, 1, 3, GRAD | TUPLE, torch.zeros(1))
    cols.add_object(a, 0, 7, 0, torch.full((1,), 2.0))
    return cols


def test_rows_read_as_stashes() -> None:
    cols = _columns()
    assert len(cols) == 3 and len(cols.sites) == 2
    first, second, third = cols
    assert (first.name, first.type, first.grad, first.step, first.training) == (
        "a",
        nn.Linear,
        False,
        3,
        True,
    )
    assert (second.kind, second.attr, second.call, second.grad, second.training) == (
        "param",
        "weight",
        1,
        True,
        False,
    )
    assert isinstance(second.value, tuple) and torch.equal(second.value[0], torch.zeros(1))
    assert third.step == 7 and [cols.step_at(i) for i in range(3)] == [3, 3, 7]
    assert cols[-1] is third and cols[0:2] == [first, second]
    with pytest.raises(IndexError, match="out of range"):
        cols[3]


def test_a_stash_read_twice_is_one_object_while_alive() -> None:
    cols = _columns()
    stash = cols[1]
    stash.attr = "edited"
    assert cols[1] is stash and cols[1].attr == "edited"


def test_list_behaviour_for_stashes_added_by_hand() -> None:
    cols = _columns()
    extra = Stash("x", nn.Tanh, False, 5, step=9)
    cols.append(extra)
    assert cols[3] is extra and cols.flags[3] & STASH
    cols.insert(0, Stash("y", nn.Tanh, True, 6))
    assert [s.name for s in cols] == ["y", "a", "b", "a", "x"]
    del cols[1]
    cols[0] = Stash("z", nn.Tanh, True, 7)
    assert [s.name for s in cols] == ["z", "b", "a", "x"]
    assert cols == list(cols) and cols != [1]
    cols.clear()
    assert len(cols) == 0 and list(cols) == [] and cols.objects == []


def test_pickles_as_a_plain_list() -> None:
    loaded = pickle.loads(pickle.dumps(_columns()))
    assert type(loaded) is list and [s.step for s in loaded] == [3, 3, 7]


def test_stats_tracker_keeps_no_object_per_stash() -> None:
    model = mlp()
    x = torch.randn(3, 4)
    with track(model, stats=True) as t:
        model(x).sum().backward()
    assert t.stashes.objects == [] and all(not f & OBJECT for f in t.stashes.flags)
    # The same values as the statistics computed directly.
    hidden = model[0](x)
    assert t[0].value.to_dict() == pytest.approx(compute(hidden).to_dict())
    grads = [s for s in t if s.grad]
    assert all(isinstance(s.value, tuple) and isinstance(s.value[0], Stats) for s in grads)
    # The root returns its last child's output object: one row of statistics for both.
    assert t.stashes.ref[2] == t.stashes.ref[3] and t.stashes.store is not None
    assert len(t.stashes.store) == 6  # 3 forward + 3 gradient tensors, not 8


def test_frame_from_columns_equals_frame_of_the_stashes() -> None:
    # Attention returns (output, None): a tuple of store references; histograms too.
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    with track(model, stats=[*parse(True).names, histogram(bins=4)]) as t:
        model(torch.randn(2, 3, 8)).sum().backward()
    tuples = [i for i, f in enumerate(t.stashes.flags) if f & REFS]
    assert len(tuples) == 1  # self_attn's output
    attention = t[tuples[0]].value
    assert isinstance(attention, tuple) and attention[1] is None
    assert isinstance(attention[0], Stats) and attention[0]["hist"].shape == (4,)
    # Its gradient, that of its one tensor, is a plain row read as a 1-tuple.
    (grad,) = [s for s in t if s.grad and s.name == "self_attn"]
    assert isinstance(grad.value, tuple) and len(grad.value) == 1
    assert isinstance(grad.value[0], Stats)
    columnar = t.to_frame()
    from_list = to_frame(list(t), stats_names=columnar.columns[8:].tolist())
    assert columnar.equals(from_list)
    assert columnar["hist"].map(len).eq(4).all()


@pytest.mark.slow
def test_statistics_recording_memory_per_stash() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    x = torch.randn(2, 4)
    with track(model, stats=True) as t:
        model(x).sum().backward()
        t.step()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1500):
            model(x).sum().backward()
            t.step()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    stashes = len(t) - 8
    # A Stash + Stats object per record is ~400 bytes; the columns hold ~60 (plus the
    # gradient hook handles of recent steps, pruned as the run goes on).
    assert grown / stashes < 80, grown / stashes


def test_device_rows_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    # The accelerator path (rows written into preallocated buffers), run on the CPU.
    monkeypatch.setattr(store_module, "_CHUNK", 2)
    fn = parse(["mean", "max"])
    rows = store_module._DeviceRows(fn.layout.width, torch.device("cpu"))
    tensors = [torch.tensor([1.0, 3.0]), torch.tensor([-2.0]), torch.empty(0), torch.ones(4)]
    for i, tensor in enumerate(tensors):
        raw, numel = fn.raw(tensor)
        raw = torch.tensor(raw, dtype=torch.float64) if raw else raw
        assert rows.add(raw, numel, fn.layout) == i
    assert len(rows.chunks) == 2
    assert rows.get(0, fn.layout).to_dict() == {"mean": 2.0, "max": 3.0}
    assert rows.get(3, fn.layout).numel == 4
    table = rows.table()
    assert table.shape == (4, fn.layout.width) and table[1, 0] == -2.0
    empty = rows.get(2, fn.layout)
    assert empty.numel == 0
    torch.testing.assert_close(empty.raw, fn.layout._empty_raw(empty.raw.device), equal_nan=True)


def test_store_table_reads_the_rows_asked_for() -> None:
    store = parse(["max", "numel"]).store()
    refs = [store.put(torch.full((n,), float(n))) for n in (1, 2, 3)]
    raw, numel = store.table(torch.tensor(refs[::-1]))
    assert numel.tolist() == [3.0, 2.0, 1.0] and raw[:, 1].tolist() == [3.0, 2.0, 1.0]
    assert store.nbytes == 3 * store.layout.width * 8
    store.clear()
    assert len(store) == 0 and store.nbytes == 0


def test_store_computes_a_tensor_again_only_when_it_changed() -> None:
    store = parse(["sum"]).store()
    x = torch.ones(3)
    first = store.put(x)
    assert store.put(x) == first and len(store) == 1  # the same tensor, unchanged
    x.add_(1)
    changed = store.put(x)
    assert changed != first and store.get(changed).to_dict() == {"sum": 6.0}
    store.truncate([changed])  # dropping the row forgets it: put again computes again
    assert store.put(x) == changed and len(store) == 2
    with torch.inference_mode():
        y = torch.ones(2)
        refs = [store.put(y), store.put(y.add_(1))]  # no version counter: never reused
    assert refs[0] != refs[1] and store.get(refs[1]).to_dict() == {"sum": 4.0}


def test_recent_tensors_never_answer_for_a_tensor_that_is_gone() -> None:
    recent = RecentTensors[str](2)
    x = torch.ones(1)
    recent.put(x, "x")
    gone = id(x)
    del x
    # CPython soon gives a new tensor the freed one's id: the weak reference tells them apart.
    fresh = [torch.ones(1) for _ in range(200)]
    assert any(id(t) == gone for t in fresh)
    assert all(recent.get(t) is None for t in fresh)
    a, b, c = torch.ones(1), torch.ones(1), torch.ones(1)
    recent.put(a, "a")
    recent.put(b, "b")
    recent.put(a, "a again")  # put again: the newest, so b is forgotten first
    recent.put(c, "c")
    assert (recent.get(a), recent.get(b), recent.get(c)) == ("a again", None, "c")


def test_tracker_nbytes_and_clear_with_the_store() -> None:
    model = mlp()
    with track(model, stats=["max"]) as t:
        model(torch.randn(2, 4)).sum().backward()
    assert t.nbytes == 6 * 2 * 8  # 6 distinct tensors, a 2-slot raw vector each
    t.clear()
    assert len(t) == 0 and t.nbytes == 0 and t.to_frame().empty


def test_custom_stash_function_keeps_its_objects() -> None:
    class Mine(Stash):
        pass

    def stash(event: object) -> Stash:
        e = event
        return Mine(e.name, e.type, e.grad, None)  # type: ignore[attr-defined]

    model = mlp()
    t = Tracker(stash)
    t.register_all(model)
    model(torch.randn(1, 4)).sum().backward()
    t.unregister()
    assert all(type(s) is Mine for s in t) and t[0] is t.stashes.objects[0]


def test_a_full_store_falls_back_to_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_MAX_ROWS", 2)
    model = mlp()
    x = torch.randn(2, 4)
    with track(model, stats=["max"]) as t:
        model(x).sum().backward()
    assert len(t.stashes.store) == 2 and len(t.stashes.objects) == len(t) - 2
    assert t[0].value.to_dict() == pytest.approx(compute(model[0](x), ["max"]).to_dict())
    assert t.to_frame()["max"].notna().all()


def test_where_and_first_of_sites_build_only_the_rows_asked_for() -> None:
    cols = _columns()
    by_hand = Stash("c", nn.Linear, True, torch.ones(1), 0, 9)
    cols.append(by_hand)
    assert [(s.name, s.step) for s in cols.where(lambda site: site.name == "a")] == [
        ("a", 3),
        ("a", 7),
        ("c", 9),  # a whole Stash: the caller checks it
    ]
    assert [s.name for s in cols.where(lambda site: True, grad=True)] == ["b", "c"]
    assert [s.name for s in cols.where(lambda site: site.kind == "param", grad=False)] == ["c"]
    assert cols.where(lambda site: True)[1] is cols[1]  # the same Stash object as indexing
    firsts = cols.first_of_sites()
    assert [(s.name, s.step) for s in firsts] == [("a", 3), ("b", 3), ("c", 9)]
    assert firsts[2] is by_hand
    assert Columns().where(lambda site: True, step=0) == [] and Columns().first_of_sites() == []


def test_where_a_step_and_the_steps_of_sites() -> None:
    cols = _columns()
    cols.append(Stash("c", nn.Linear, True, torch.ones(1), 0, 9))
    assert [(s.name, s.step) for s in cols.where(lambda site: True, step=3)] == [("a", 3), ("b", 3)]
    assert cols.where(lambda site: True, step=4) == []
    assert cols.steps_where(lambda site: site.name == "a") == [3, 7, 9]  # 9: a whole Stash
    assert cols.steps_where(lambda site: site.kind == "param") == [3, 9]
    assert Columns().steps_where(lambda site: True) == []


def _whole(cols: Columns) -> list[tuple[str, int, int, float]]:
    """Every row as (name, call, step, value), after checking that the columns line up."""
    lengths = {len(c) for c in (cols.site, cols.call, cols.flags, cols.ref)}
    assert lengths == {len(cols)}, lengths
    assert len(cols.step_rows) == len(cols.step_values)
    return [(s.name, s.call, s.step, float(s.first_value.sum())) for s in cols]


@pytest.mark.parametrize("interrupted", ["add", "_add_object"])
@pytest.mark.parametrize("by_hand", [False, True])
def test_a_ctrl_c_anywhere_in_a_row_append_adds_the_row_whole_or_not_at_all(
    interrupted: str, by_hand: bool
) -> None:
    function = getattr(Columns, interrupted)

    def append(cols: Columns) -> None:  # a new step: its run starts with this row
        value = torch.full((1,), 5.0)
        if by_hand:
            cols.append(Stash("a", nn.Linear, False, value, call=1, step=9))
        else:
            cols.add_object(cols.site_id("a", nn.Linear, "output", ""), 1, 9, 0, value)

    for line in lines_run(function, lambda: append(_columns())):
        cols = _columns()
        before = _whole(cols)
        with pytest.raises(KeyboardInterrupt), interrupt_at(function, line):
            append(cols)
        assert _whole(cols) == before, f"interrupted before line {line}"
        assert len(cols.objects) == len(before)
        append(cols)
        assert _whole(cols) == [*before, ("a", 1, 9, 5.0)]


def test_a_row_of_the_current_step_costs_its_four_appends_only() -> None:
    # `add` runs for every record a hook makes: nothing but the appends on the common path.
    cols = Columns()
    site = cols.site_id("a", nn.Linear, "output", "")
    cols.add(site, 0, 3, 0, 0)
    called: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "c_call":
            called.append(getattr(arg, "__qualname__", str(arg)))

    sys.setprofile(profile)
    try:
        cols.add(site, 1, 3, 0, 1)
    finally:
        sys.setprofile(None)
    assert called[:-1] == ["array.append"] * 4, called  # the last: setprofile(None)
    assert list(cols.call) == [0, 1] and list(cols.step_values) == [3]
