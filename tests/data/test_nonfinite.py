"""`first_nonfinite`: the module where the first NaN or infinity appeared, for each way one
appears (forward op, input batch, custom backward, fp16 overflow), by statistics or copies."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import NonFinite, Stash, first_nonfinite, track
from tensor_tracker._core import tracker as tracker_module
from tensor_tracker._core.records import Unrecorded
from tensor_tracker.errors import NonFiniteError, NotRecordedError
from tensor_tracker.stats import Stats, parse
from tests.helpers import hook_count


class Log(nn.Module):
    """log(x + offset): NaN for the (finite) inputs below -offset."""

    offset = 100.0

    def forward(self, x: Tensor) -> Tensor:
        return torch.log(x + self.offset)


class ZeroDivBackward(torch.autograd.Function):
    """Identity forward; the backward divides by zero (0/0: NaN)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * 0 / torch.zeros_like(grad)


class BadBackward(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        out = ZeroDivBackward.apply(x)
        assert isinstance(out, Tensor)
        return out


def _model(middle: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), middle, nn.Linear(4, 2))


STATS = {"stats": True}
COPIES: dict[str, Any] = {}


@pytest.mark.parametrize("options", [STATS, COPIES], ids=["stats", "copies"])
def test_a_nan_made_in_a_forward(options: dict[str, Any]) -> None:
    model = _model(Log())
    with track(model, **options) as t:
        for step in range(3):
            model[1].offset = 100.0 if step < 2 else -100.0  # NaN from step 2 on
            model(torch.rand(2, 4)).sum().backward()
            t.step()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.step) == ("1", False, 2)
    assert found.seen_in == ("1", "output", "", False)
    assert "forward of '1'" in found.explanation
    assert t[found.row].name == "1" and t[found.row].step == 2
    assert set(found.evidence["name"]) == {"1"}


class Pair(nn.Module):
    """(x, log(x + offset)): a NaN in the second tensor of a tuple output."""

    offset = 100.0

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x * 2, torch.log(x + self.offset)


class _UsesPair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.pair, self.last = nn.Linear(4, 4), Pair(), nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.pair(self.first(x))
        return self.last(a) + b[:, :2]


@pytest.mark.parametrize(
    "options",
    [STATS, {"stats": ["sum"]}, {"stats": ["min", "max"]}, COPIES],
    ids=["stats", "sum", "min-max", "copies"],
)
def test_a_nan_in_the_second_tensor_of_a_tuple_output(options: dict[str, Any]) -> None:
    """The frame shows a value's first tensor; the NaN of the second is found all the same,
    in the tracker and in a list of its stashes."""
    torch.manual_seed(0)
    model = _UsesPair()
    model.pair.offset = -100.0
    with track(model, **options) as t:
        model(torch.rand(2, 4)).sum().backward()
    for recording in (t, list(t)):
        found = first_nonfinite(recording)
        assert found is not None
        assert (found.name, found.grad, found.seen_in) == (
            "pair",
            False,
            ("pair", "output", "", False),
        )
    model.pair.offset = 100.0
    with track(model, **options) as t:
        model(torch.rand(2, 4)).sum().backward()
    assert first_nonfinite(t) is None
    if "stats" in options:  # the tripwire names the same module
        model.pair.offset = -100.0
        raises = pytest.raises(NonFiniteError, match=r"'pair' \(forward\)")
        with raises, track(model, on_nonfinite="raise", **options):
            model(torch.rand(2, 4)).sum().backward()


def test_a_nan_in_the_input_batch_is_blamed_on_the_input() -> None:
    model = _model(nn.Tanh())
    x = torch.rand(2, 4)
    x[0, 1] = float("nan")
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        model(x).sum().backward()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.seen_in) == ("", False, ("", "input", "input", False))
    assert "came in with the batch" in found.explanation


def test_a_nan_between_submodules_is_blamed_on_the_enclosing_module() -> None:
    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.b(torch.log(self.a(x) - 100))  # NaN from an op, not a module

    model = nn.Sequential(Parent())
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        model(torch.rand(2, 4)).sum().backward()
    found = first_nonfinite(t)
    assert found is not None
    assert found.seen_in == ("0.b", "input", "input", False) and found.name == "0"


@pytest.mark.parametrize("capture", [("outputs",), ("inputs", "outputs")])
def test_a_nan_made_in_a_custom_backward(capture: tuple[str, ...]) -> None:
    model = _model(BadBackward())
    x = torch.rand(2, 4)
    with track(model, stats=True, capture=capture) as t:
        model(x).sum().backward()
    # Check the premise with autograd itself: the gradient reaching "1" is finite, the one
    # leaving it is not.
    hidden = model[0](x)
    out_1 = model[1](hidden)
    g_out, g_in = torch.autograd.grad(model[2](out_1).sum(), [out_1, hidden])
    assert torch.isfinite(g_out).all() and not torch.isfinite(g_in).all()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.step) == ("1", True, 0)
    assert "backward of '1'" in found.explanation
    if "inputs" in capture:
        assert found.seen_in == ("1", "input", "x", True)
    else:
        assert found.seen_in == ("0", "output", "", True)


def test_an_fp16_overflow_under_autocast() -> None:
    model = _model(nn.Linear(4, 4))
    with torch.no_grad():
        model[1].weight.fill_(3e4)
    x = torch.full((2, 4), 30.0)
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        out.float().sum().backward()
    assert t.to_frame().query("name == '0' and not grad")["max"].abs().max() < 6e4
    found = first_nonfinite(t)
    assert found is not None and (found.name, found.grad) == ("1", False)
    row = found.evidence.query("kind == 'output' and not grad").iloc[0]
    assert row["abs_max"] == float("inf") and row["numel"] == 4 * 2


def test_a_finite_run_finds_nothing_and_bad_arguments_are_named() -> None:
    model = _model(nn.Tanh())
    with track(model, stats=True) as t:
        model(torch.rand(2, 4)).sum().backward()
    assert first_nonfinite(t) is None
    assert first_nonfinite([Stash("a", nn.Tanh, False, torch.ones(2))]) is None
    with pytest.raises(TypeError, match="recording"):
        first_nonfinite(3)
    with track(model, stats=["std", "zero_frac"]) as std_only:
        model(torch.rand(2, 4))
    with pytest.raises(KeyError, match="min and max, nonfinite, or at least sum"):
        first_nonfinite(std_only)


def test_records_holding_no_tensor_are_refused_not_called_finite() -> None:
    """Issue #35 item 18: copies that all failed (each an Unrecorded) gave None, "no NaN"."""
    failed = Unrecorded("torch.Tensor", "Torch not compiled with CUDA enabled")
    with pytest.raises(NotRecordedError, match=r"recording.*holds a tensor.*CUDA"):
        first_nonfinite([Stash("a", nn.Tanh, False, failed), Stash("b", nn.Tanh, False, 1.0)])
    assert first_nonfinite([]) is None  # nothing recorded: nothing to find


def test_empty_tensors_and_missing_values_are_not_non_finite() -> None:
    class Odd(nn.Module):
        def forward(self, x: Tensor) -> tuple[Tensor, None]:
            return x[:0], None

    model = nn.Sequential(Odd())
    with track(model, stats=True) as t:
        model(torch.ones(2))
    assert len(t) == 2 and first_nonfinite(t) is None


# -- the tripwire: track(..., on_nonfinite=...) ---------------------------------------------


def _train(model: nn.Sequential, t: Any, steps: int, bad_from: int) -> list[int]:
    """SGD steps; the Log module makes NaN from step `bad_from` on. Returns the steps whose
    optimizer step ran."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = []
    for step in range(steps):
        model[1].offset = 100.0 if step < bad_from else -100.0
        optimizer.zero_grad()
        model(torch.rand(2, 4)).sum().backward()
        optimizer.step()
        done.append(step)
        t.step()
    return done


def test_the_tripwire_stops_before_the_optimizer_writes_nan() -> None:
    model = _model(Log())
    done: list[int] = []
    with (
        pytest.raises(NonFiniteError, match=r"step 2 in '1' \(forward\)") as info,
        track(model, stats=True, on_nonfinite="raise") as t,
    ):
        done = _train(model, t, steps=5, bad_from=2)
    assert isinstance(info.value, FloatingPointError)
    assert info.value.found.name == "1" and info.value.found.step == 2
    assert all(torch.isfinite(p).all() for p in model.parameters())  # no NaN step ran
    assert hook_count(model) == 0
    assert {s.step for s in t} == {0, 1, 2} and len(t) > 0  # the stashes so far are kept
    assert done == []  # _train never returned


def test_the_tripwire_fires_at_step_without_backward() -> None:
    model = _model(Log())
    with track(model, stats=True, on_nonfinite="raise") as t:
        model[1].offset = -100.0
        with torch.no_grad():
            model(torch.rand(2, 4))
        with pytest.raises(NonFiniteError, match="step 0"):
            t.step()
    assert hook_count(model) == 0


def test_the_tripwire_can_warn_or_call_back_once() -> None:
    model = _model(Log())
    with (
        track(model, stats=True, on_nonfinite="warn") as t,
        pytest.warns(RuntimeWarning, match="appeared at step 1"),
    ):
        _train(model, t, steps=3, bad_from=1)
    assert len({s.step for s in t}) == 3  # training went on
    seen: list[NonFinite] = []
    model = _model(Log())
    with track(model, stats=["min", "max"], on_nonfinite=seen.append) as t:
        _train(model, t, steps=3, bad_from=2)
    assert [(f.name, f.step) for f in seen] == [("1", 2)]


@pytest.mark.parametrize("stats", [["nonfinite"], ["sum"], ["rms"], ["abs_mean"]])
def test_the_tripwire_reads_a_count_or_a_sum_too(stats: list[str]) -> None:
    model = _model(Log())
    with (
        pytest.raises(NonFiniteError, match=r"step 1 in '1' \(forward\)") as info,
        track(model, stats=stats, on_nonfinite="raise") as t,
    ):
        _train(model, t, steps=3, bad_from=1)
    assert info.value.found.name == "1" and not info.value.found.grad
    assert all(torch.isfinite(p).all() for p in model.parameters())


class Wrapped(nn.Module):
    """Returns `(h, log(h - 10))` (NaN: h is small) wrapped by `wrap`."""

    def __init__(self, wrap: Any) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.wrap = wrap

    def forward(self, x: Tensor) -> Any:
        h = self.linear(x)
        return self.wrap(h, torch.log(h - 10))


class Picks(nn.Module):
    """Uses `pick` of its child's output: the NaN reaches no loss, only the tripwire sees it."""

    def __init__(self, wrap: Any, pick: Any) -> None:
        super().__init__()
        self.inner = Wrapped(wrap)
        self.pick = pick

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.pick(self.inner(x)).sum()
        return out


@pytest.mark.parametrize(
    ("wrap", "pick"),
    [
        (lambda h, bad: (h, bad), lambda out: out[0]),
        (lambda h, bad: {"h": h, "bad": bad}, lambda out: out["h"]),
        (lambda h, bad: {"bad": bad, "h": h}, lambda out: out["h"]),
        (lambda h, bad: [h, [bad]], lambda out: out[0]),
    ],
    ids=["tuple", "dict", "dict-first", "nested-list"],
)
@pytest.mark.parametrize("stats", [["sum"], ["min", "max"]])
def test_the_tripwire_sees_every_tensor_of_an_output(
    wrap: Any, pick: Any, stats: list[str]
) -> None:
    # A dict or nested output's statistics are kept as objects, not in the store that the
    # tripwire watched: a NaN there (a Hugging Face ModelOutput's loss) went by.
    model = Picks(wrap, pick)
    with (
        pytest.raises(NonFiniteError, match=r"in 'inner' \(forward\)") as info,
        track(model, stats=stats, on_nonfinite="raise"),
    ):
        model(torch.randn(2, 4)).backward()
    assert info.value.found.name == "inner" and not info.value.found.grad
    assert hook_count(model) == 0


def test_the_tripwire_notices_statistics_kept_as_objects_on_the_device_path() -> None:
    # Accelerator statistics of objects go through the device-side note; run it on the CPU.
    store = parse(["sum"]).store()
    store.watch()
    finite = Stats(store.layout, torch.tensor([1.0], dtype=torch.float64), 3)
    bad = Stats(store.layout, torch.tensor([math.nan], dtype=torch.float64), 3)
    empty = Stats(store.layout, torch.tensor([math.nan], dtype=torch.float64), 0)
    store.notice({"a": [finite, empty], "b": 1.0})
    assert not store.nonfinite()
    store.notice({"a": (finite, bad)})
    assert store.nonfinite()


def test_a_sum_also_trips_on_finite_values_beyond_its_range() -> None:
    # Documented: a sum is non-finite whenever the tensor is, and also when it overflows.
    model = nn.Sequential(nn.Identity())
    with (
        pytest.raises(NonFiniteError, match="step 0"),
        track(model, stats=["sum"], on_nonfinite="raise") as t,
    ):
        model(torch.full((4,), 3e38))
        t.step()
    with track(model, stats=["min", "max"], on_nonfinite="raise") as t:
        model(torch.full((4,), 3e38))
        t.step()  # min and max are exact: no trip


@pytest.mark.parametrize(
    ("stats", "finite", "bad"),
    [
        (["mean", "min", "max"], [0.0, 1.0, -2.0, 3.0], [0.0, 1.0, -2.0, math.inf]),
        (["sum"], [5.0], [math.nan]),
        (["sum", "nonfinite"], [0.0, 5.0], [1.0, 5.0]),
        (["rms"], [1.0, 2.0], [1.0, math.inf]),
    ],
)
def test_the_tripwire_on_the_device_path_of_the_store(
    stats: list[str], finite: list[float], bad: list[float]
) -> None:
    # Accelerator rows are noted with device ops and read once; run that code on the CPU.
    store = parse(stats).store()
    store.watch()
    cpu = torch.device("cpu")
    store._note(torch.tensor(finite, dtype=torch.float64), cpu)
    assert not store.nonfinite()
    store._note(torch.tensor(bad, dtype=torch.float64), cpu)
    assert store.nonfinite()
    store.clear()
    assert not store.nonfinite()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({}, ValueError, "stats=True"),
        ({"stats": ["zero_frac", "numel"]}, ValueError, 'stats=\\["sum"\\]'),
        ({"stats": True, "on_nonfinite": "explode"}, ValueError, "on_nonfinite="),
        ({"stats": True, "on_nonfinite": 3}, TypeError, "on_nonfinite="),
    ],
)
def test_tripwire_arguments_are_checked_before_anything_is_attached(
    options: dict[str, Any], error: type, match: str
) -> None:
    model = _model(nn.Tanh())
    options = {"on_nonfinite": "raise", **options}
    with pytest.raises(error, match=match):
        track(model, **options)
    assert hook_count(model) == 0


# -- a flight recorder: full copies of the last steps, beside the tripwire --------------------


def test_a_flight_recorder_keeps_the_steps_that_led_to_the_tripwire() -> None:
    model = _model(Log())
    sizes = []
    with (
        pytest.raises(NonFiniteError),
        track(model, stats=True, on_nonfinite="raise") as t,
        track(model, keep_steps=3) as flight,
    ):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            model[1].offset = 100.0 if step < 6 else -100.0  # NaN from step 6 on
            x = torch.rand(2, 4)
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            t.step()
            flight.step()
            sizes.append(len(flight))
    assert {s.step for s in flight} == {4, 5, 6}  # the failing step and the two before
    assert max(sizes) <= 3 * 8  # 4 modules, output and gradient: bounded all along
    last = [s for s in flight if s.step == 6 and s.name == "1" and not s.grad]
    assert len(last) == 1 and torch.isnan(last[0].value).any()  # the full copy is there
    assert hook_count(model) == 0 and len(t) > 0


def test_keep_steps_keeps_the_last_steps_of_a_loop_ending_in_step() -> None:
    model = _model(nn.Tanh())
    held = []
    with track(model, keep_steps=3) as flight:
        for _ in range(10):
            model(torch.rand(2, 4)).sum().backward()
            held.append({s.step for s in flight})
            flight.step()  # opens step 10, which records nothing
    assert {s.step for s in flight} == {7, 8, 9}
    assert held[-1] == {7, 8, 9} and max(len(steps) for steps in held) == 3


def test_keep_recent_steps_rebases_object_references() -> None:
    from tensor_tracker._core.columns import Columns

    cols = Columns()
    site = cols.site_id("m", nn.Linear, "output", "")
    for step in range(4):
        cols.add_object(site, 0, step, 0, torch.full((1,), float(step)))
        cols.append(Stash("hand", nn.Tanh, False, step, step=step))
    cols.keep_recent_steps(2)
    assert [(s.name, s.step) for s in cols] == [("m", 2), ("hand", 2), ("m", 3), ("hand", 3)]
    assert [s.value.item() if s.name == "m" else s.value for s in cols] == [2.0, 2, 3.0, 3]
    assert len(cols.objects) == 4
    cols.keep_recent_steps(0)
    assert len(cols) == 0 and cols.objects == []


@pytest.mark.parametrize(
    ("options", "error"),
    [({"keep_steps": 2, "stats": True}, ValueError), ({"keep_steps": 0}, ValueError)],
)
def test_keep_steps_arguments(options: dict[str, Any], error: type) -> None:
    model = _model(nn.Tanh())
    with pytest.raises(error, match="keep_steps="):
        track(model, **options)
    assert hook_count(model) == 0


def test_keep_steps_frees_its_share_of_max_bytes() -> None:
    model = _model(nn.Tanh())
    x = torch.rand(2, 4)
    with track(model, keep_steps=1) as probe:
        model(x).sum().backward()
    one_step = probe.nbytes
    with track(model, keep_steps=1, max_bytes=one_step + 8) as t:  # not two steps' worth
        for _ in range(4):
            model(x).sum().backward()
            t.step()
    # The last step's copies are held; the one before went when the next one recorded.
    assert {s.step for s in t} == {3} and t.nbytes == one_step


def test_a_block_whose_records_were_dropped_does_not_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    # The "nothing was recorded" warning (for compiled models) looks at what the hooks did,
    # not at what is left after clear() dropped it.
    monkeypatch.setattr(tracker_module, "dynamo_has_compiled_code", lambda: True)
    model = _model(nn.Tanh())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with track(model) as t:
            model(torch.rand(2, 4)).sum().backward()
            t.clear()
    assert len(t) == 0
    with pytest.warns(RuntimeWarning, match="nothing was recorded"), track(model):
        pass
