"""The measuring parts of `summary`: NaN/inf flags read after the pass, the wall clock, and
(with a GPU) a real CUDA pass that never waits for the device inside a hook."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensor_tracker import summary
from tensor_tracker._probe._summary_record import SummaryRecorder
from tensor_tracker._probe.timeline import (
    CudaMemory,
    EventClock,
    NonFiniteFlags,
    WallClock,
)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.float8_e5m2]


def flagged(*tensors: torch.Tensor) -> set[int]:
    """The indices of `tensors` that `NonFiniteFlags` finds a NaN or an infinity in."""
    flags = NonFiniteFlags()
    for i, tensor in enumerate(tensors):
        flags.note(i, [tensor])
    return flags.resolve()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_flag_per_tensor_whatever_its_float_dtype(dtype: torch.dtype, bad: float) -> None:
    values = torch.tensor([1.0, bad, -2.0]).to(dtype)
    huge = torch.tensor([torch.finfo(dtype).max, torch.finfo(dtype).min], dtype=torch.float64)
    huge = huge.to(dtype)
    assert flagged(torch.ones(4, dtype=dtype), values, huge) == {1}


def test_complex_integer_and_empty_tensors() -> None:
    nan = torch.tensor([1 + 1j, complex(0, float("nan"))])
    assert flagged(torch.tensor([1 + 1j]), nan, torch.arange(3), torch.ones(0)) == {1}


def test_one_kernel_per_tensor_in_the_hook() -> None:
    """Each launch in a hook leaves a launch-bound GPU idle and inflates summary()'s event
    times: a flag is one aminmax written into the buffer (no isfinite, no copy)."""
    from torch.profiler import ProfilerActivity, profile

    flags = NonFiniteFlags()
    flags.note(-1, [torch.ones(3)])  # the buffer's allocation
    x = torch.randn(5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        flags.note(0, [x])
    ops = {e.name for e in prof.events()} - {
        "aten::select",
        "aten::as_strided",
        "aten::detach",
        "detach",
    }
    assert ops <= {"aten::aminmax", "aten::fill_"}, ops  # the CPU kernel fills its output first


def test_flags_are_read_after_the_pass_over_several_chunks() -> None:
    flags = NonFiniteFlags()
    bad = torch.tensor([float("nan")])
    for i in range(2500):  # three chunks of 1024
        flags.note(i, [bad if i % 1000 == 7 else torch.ones(2), torch.arange(2)])
    assert flags.resolve() == {7, 1007, 2007}
    assert NonFiniteFlags().resolve() == set()


def test_the_wall_clock_leaves_its_own_time_out() -> None:
    clock = WallClock()
    first = clock.enter()
    sum(range(200_000))  # the summary's own work
    clock.leave()
    second = clock.enter()
    clock.leave()
    times = clock.times()
    assert 0 <= times[second] - times[first] < 1.0  # the work took longer than that


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_summary_times_with_events_and_never_waits_in_a_hook() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(64, 256, device="cuda")
    s = summary(model, x)
    assert s.timing == "CUDA events" and s.device == "cuda:0"
    root = s.calls[0]
    assert root.forward_ms > 0 and root.backward_ms > 0
    assert root.forward_ms >= sum(c.forward_ms for c in s.calls[1:]) - 1e-3
    up = s.calls[1]
    assert up.forward_mem_bytes is not None and up.forward_mem_bytes >= 64 * 1024 * 4
    assert up.forward_peak_bytes is not None and up.forward_peak_bytes >= up.forward_mem_bytes
    assert s.peak_bytes is not None and s.peak_bytes >= root.forward_peak_bytes  # type: ignore[operator]
    # The hooks themselves: no synchronisation between the forward and the backward's end.
    clock = EventClock(lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize)
    recorder = SummaryRecorder(model, clock, CudaMemory(torch.device("cuda", 0)))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(x.requires_grad_()).square().mean().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        recorder.remove()
    assert len(recorder.calls) == 4 and recorder.flags.resolve() == set()
    assert len(clock.times()) >= 2 * len(recorder.calls)  # read after the pass
