"""What `summary` measures a pass with: clocks that leave the summary's own work out, the
CUDA allocator's figures per module call, and NaN/inf flags resolved after the pass.

Nothing here waits for a device inside a hook: CUDA times are events recorded on the
current stream and read after the pass, NaN/inf flags are 0-d tensors computed where the
tensor lives and read after the pass, and the allocator's counters are host-side
bookkeeping (what was allocated when the host queued the work).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

__all__ = ["Clock", "CudaMemory", "EventClock", "NonFiniteFlags", "WallClock"]


class Clock(Protocol):
    """Marks points of a pass on a timeline from which the summary's own work is left out.

    `enter()` marks "now" and starts a stretch of the summary's own work, which `leave()`
    ends; `times()` gives each mark's time in milliseconds, minus all the own work before
    it (so hooks do not inflate what they time)."""

    name: str

    def enter(self) -> int: ...

    def leave(self) -> None: ...

    def times(self) -> list[float]: ...


class WallClock:
    """The host's wall clock (`time.perf_counter`): right for CPU work, which runs as it is
    called."""

    name = "wall clock"

    def __init__(self) -> None:
        self._marks: list[float] = []
        self._spent = 0.0  # seconds spent in the summary's own work so far
        self._entered = 0.0

    def enter(self) -> int:
        self._entered = time.perf_counter()
        self._marks.append(self._entered - self._spent)
        return len(self._marks) - 1

    def leave(self) -> None:
        self._spent += time.perf_counter() - self._entered

    def times(self) -> list[float]:
        return [mark * 1e3 for mark in self._marks]


class EventClock:
    """Device time from timing events recorded on the current stream (CUDA): each
    `enter()` and `leave()` records one, and the device time between them (the summary's
    own kernels, its NaN checks) is left out of the marks after it. `times()` waits for
    the device once, after the pass.

    Args:
        make_event: a new timing event (`torch.cuda.Event(enable_timing=True)`); it has
            `record()` and `elapsed_time(later_event)` in milliseconds.
        synchronize: waits until every recorded event has happened.
    """

    name = "CUDA events"

    def __init__(self, make_event: Callable[[], Any], synchronize: Callable[[], None]) -> None:
        self._make_event = make_event
        self._synchronize = synchronize
        self._marks: list[tuple[Any, Any]] = []  # (enter event, leave event or None)

    def _record(self) -> Any:
        event = self._make_event()
        event.record()
        return event

    def enter(self) -> int:
        self._marks.append((self._record(), None))
        return len(self._marks) - 1

    def leave(self) -> None:
        start, _ = self._marks[-1]
        self._marks[-1] = (start, self._record())

    def times(self) -> list[float]:
        if not self._marks:
            return []
        self._synchronize()
        origin = self._marks[0][0]
        own = 0.0
        times = []
        for start, end in self._marks:
            times.append(origin.elapsed_time(start) - own)
            if end is not None:
                own += start.elapsed_time(end)
        return times


class CudaMemory:
    """The CUDA caching allocator's view of one device during a pass: per module call,
    what it left allocated and the most it had allocated at once.

    The allocator's peak counter is read and reset at every hook (so the peak of a call is
    the largest of the peaks between the hooks inside it): `torch.cuda.max_memory_allocated`
    starts again from the end of the pass.

    Args:
        device: the CUDA device.
        read: `(allocated now, peak since the last reset)` in bytes, then resets the peak;
            default: the allocator's counters of `device`.
    """

    def __init__(
        self, device: torch.device, read: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        self.device = device
        self._read = read or self._read_allocator
        # Per running call (innermost last): [allocated at its start, peak so far].
        self._open: list[list[int]] = []
        self.pass_start = 0
        self.pass_peak = 0

    def _read_allocator(self) -> tuple[int, int]:
        device = self.device
        peak = torch.cuda.max_memory_allocated(device)
        now = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return now, peak

    def _sample(self) -> int:
        now, peak = self._read()
        self.pass_peak = max(self.pass_peak, peak)
        for frame in self._open:
            frame[1] = max(frame[1], peak)
        return now

    def begin_pass(self) -> None:
        self.pass_start = self.pass_peak = self._sample()

    def end_pass(self) -> None:
        self._sample()

    def enter(self) -> None:
        """A module call starts."""
        now = self._sample()
        self._open.append([now, now])

    def leave(self) -> tuple[int, int]:
        """The innermost running call ends: `(bytes it left allocated, the most it had
        allocated at once above what was allocated when it started)`."""
        now = self._sample()
        start, peak = self._open.pop()
        return now - start, max(peak, now) - start


_REDUCED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""Dtypes with a min/max kernel; others (the float8s) are widened to float32 first."""


def _reducible(tensor: Tensor) -> Tensor | None:
    """`tensor` as what its min and max are taken of (real, of a dtype with a min/max
    kernel); `None` for integer, bool and empty tensors, which hold no NaN or infinity."""
    if tensor.numel() == 0 or not (tensor.is_floating_point() or tensor.is_complex()):
        return None
    x = tensor.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x if x.dtype in _REDUCED else x.float()


class NonFiniteFlags:
    """NaN/inf flags noted in hooks and read after the pass: `resolve()` gives the set of
    keys whose tensors held a NaN or an infinity.

    A hook launches one kernel per tensor: `aminmax` (min and max propagate NaN and show
    infinities) written straight into a row of a small buffer per device and dtype (1024
    rows of two numbers, so the allocator figures of the calls around barely move). The
    test for finiteness and the read happen in `resolve()`, one transfer per buffer. On a
    GPU whose model is bound by kernel launches, every launch in a hook leaves the device
    idle for as long and inflates the event times around it (an H100 measured 12 launches
    per tensor before, 1 now)."""

    _CHUNK = 1024

    def __init__(self) -> None:
        self._keys: dict[tuple[torch.device, torch.dtype], list[Any]] = {}
        self._chunks: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}

    def note(self, key: Any, tensors: list[Tensor]) -> None:
        for tensor in tensors:
            x = _reducible(tensor)
            if x is None:
                continue
            where = (x.device, x.dtype)
            keys = self._keys.setdefault(where, [])
            chunks = self._chunks.setdefault(where, [])
            chunk, slot = divmod(len(keys), self._CHUNK)
            if chunk == len(chunks):
                chunks.append(torch.zeros((self._CHUNK, 2), dtype=x.dtype, device=x.device))
            row = chunks[chunk][slot]
            torch.aminmax(x, out=(row[0], row[1]))
            keys.append(key)

    def resolve(self) -> set[Any]:
        flagged: set[Any] = set()
        for where, keys in self._keys.items():
            extremes = torch.cat(self._chunks[where])[: len(keys)].to("cpu")
            bad = (~torch.isfinite(extremes).all(dim=1)).tolist()
            flagged.update(key for key, b in zip(keys, bad, strict=True) if b)
        return flagged
