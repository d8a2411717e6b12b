"""`StatsStore`: the statistics of many tensors in one buffer per device, for a tracker.

Each tensor's raw vector (see `Layout`) is one row: CPU rows are host floats appended to a
growable array (8 bytes per number, no Python object); rows of accelerator tensors are
written into preallocated device buffers with one copy kernel each, never read back until
the recording is read (then one transfer per device).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.structure import iter_leaves
from ..errors import ArgumentValueError, TrackerStateError
from ._kernels import F64
from ._values import Stats
from ._vectors import VectorRows

if TYPE_CHECKING:
    from ._fn import StatsFn
    from ._layout import Layout

__all__ = ["StatsStore"]

_SLOT_BITS = 4
_SLOTS = 1 << _SLOT_BITS
_CHUNK = 4096  # rows per device buffer
# References are int32 in a tracker's columns (4 bytes per record less than int64).
_MAX_ROWS = (2**31 - 1) >> _SLOT_BITS
# The tracker then keeps the statistics as objects instead.
_TOO_MANY_ROWS = f"a StatsStore keeps at most {_MAX_ROWS:,} rows per device"
_CPU = torch.device("cpu")


def _shows_nonfinite(watch: tuple[tuple[int, int] | None, int], raw: list[float]) -> bool:
    """Whether the host floats `raw` of a tensor show a NaN or an infinity in the slots
    `watch` names (see `StatsFn.watch_slots`)."""
    finite, count = watch
    return (
        finite is not None and not all(map(math.isfinite, raw[finite[0] : finite[0] + finite[1]]))
    ) or (count >= 0 and raw[count] > 0)


class _HostRows:
    __slots__ = ("numel", "raw", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self.raw = array("d")
        self.numel = array("q")

    def add(self, raw: list[float] | Tensor | None, numel: int, layout: Layout) -> int:
        row = len(self.numel)
        if isinstance(raw, list):
            self.raw.extend(raw)
        elif raw is None:
            self.raw.extend(layout._empty_values)
        else:
            self.raw.extend(raw.tolist())
        self.numel.append(numel)
        return row

    def get(self, row: int, layout: Layout) -> Stats:
        w = self.width
        if not w:
            return Stats(layout, torch.empty(0, dtype=F64), self.numel[row])
        return Stats._of_floats(layout, self.raw[row * w : (row + 1) * w].tolist(), self.numel[row])

    def table(self) -> Tensor:
        if not self.numel or not self.width:
            return torch.empty((len(self.numel), self.width), dtype=F64)
        return torch.frombuffer(self.raw, dtype=F64).view(-1, self.width)


class _DeviceRows:
    __slots__ = ("chunks", "device", "numel", "width")

    def __init__(self, width: int, device: torch.device) -> None:
        self.width = width
        self.device = device
        self.chunks: list[Tensor] = []
        self.numel = array("q")

    def add(self, raw: list[float] | Tensor | None, numel: int, layout: Layout) -> int:
        row = len(self.numel)
        chunk, index = divmod(row, _CHUNK)
        if chunk == len(self.chunks):
            self.chunks.append(torch.empty((_CHUNK, self.width), dtype=F64, device=self.device))
        if isinstance(raw, Tensor):
            self.chunks[chunk][index].copy_(raw)
        elif raw is None:
            self.chunks[chunk][index].copy_(layout._empty_raw(self.device))
        # else: a list from a device tensor is the empty list of "numel" alone
        self.numel.append(numel)
        return row

    def get(self, row: int, layout: Layout) -> Stats:
        chunk, index = divmod(row, _CHUNK)
        return Stats(layout, self.chunks[chunk][index], self.numel[row])

    def table(self) -> Tensor:
        rows = len(self.numel)
        if not rows:
            return torch.empty((0, self.width), dtype=F64)
        return torch.cat(self.chunks)[:rows].to("cpu")  # one transfer


class StatsStore:
    """Keeps the statistics of many tensors as rows of numbers (see the module docstring);
    what a tracker with `stats=` records into. `put(tensor)` computes and keeps a tensor's
    statistics and returns a reference; `get(ref)` gives them back as `Stats`.

    A tensor put again unchanged (same object, same in-place version) is not computed
    again: `put` returns the same reference.

    Example:
        >>> store = parse(["mean", "max"]).store()
        >>> ref = store.put(torch.tensor([1.0, 3.0]))
        >>> store.get(ref).to_dict(), store.nbytes
        ({'mean': 2.0, 'max': 3.0}, 32)
    """

    __slots__ = (
        "_badness",
        "_fn",
        "_host",
        "_last",
        "_on_host",
        "_parts",
        "_seen",
        "_slots",
        "_vectors",
        "_watch",
        "layout",
    )

    def __init__(self, fn: StatsFn) -> None:
        self._fn = fn
        self.layout = fn.layout
        self._parts: list[_HostRows | _DeviceRows] = []
        self._slots: dict[torch.device, int] = {}
        # The CPU's rows and their slot, once there are any (the hot path goes straight there).
        self._host: tuple[_HostRows, int] | None = None
        # The last tensor put (weakly), its in-place version and its reference: a parent
        # returning its child's output, and the gradient every such module gets, come
        # back to back and are computed once.
        self._last: tuple[weakref.ref[Tensor], int, int] | None = None
        self._watch: tuple[tuple[int, int] | None, int] | None = None
        self._seen = False  # a non-finite value among host rows
        # Per device, 0 while every watched row was finite (NaN or > 0 after one was not):
        # summed on the device, read once by `nonfinite`.
        self._badness: dict[torch.device, Tensor] = {}
        # The statistics per channel / per sample: one `VectorRows` each, row for row with
        # the raw vectors (same slot, same row number).
        self._vectors = tuple(VectorRows() for _ in fn.layout.vectors)
        # Inside `on_host()`: each device part's rows read to the host (on first use).
        self._on_host: dict[int, Tensor] | None = None

    def watch(self) -> None:
        """From now on, note whether any tensor put holds a NaN or an infinity (read it
        with `nonfinite`): a test of statistics already computed (`min`/`max` or
        `nonfinite`, exact; else `sum`, the moments or `abs_mean`, which are also
        non-finite when finite values overflow them), with no host synchronisation on
        accelerators.

        Raises:
            ValueError: the statistics include none of these.
        """
        if self._fn.watch_slots == (None, -1):
            raise ArgumentValueError(
                "on_nonfinite= reads the sum, mean, min/max or nonfinite statistic; add one "
                'to stats= (stats=True includes them; stats=["sum"] is the cheapest)'
            )
        self._watch = self._fn.watch_slots

    def nonfinite(self) -> bool:
        """Whether a tensor put since `watch` (or the last `clear`) held a NaN or an
        infinity; waits for the devices once."""
        return self._seen or any(bool(b.item() != 0) for b in self._badness.values())

    def _note(self, raw: Tensor, device: torch.device) -> None:
        """Add to `device`'s badness whether `raw` (on that device) shows a non-finite value."""
        assert self._watch is not None
        finite, count = self._watch
        badness = self._badness.get(device)
        if badness is None:
            badness = self._badness[device] = torch.zeros((), dtype=F64, device=device)
        if finite is not None:
            # NaN unless every slot is finite.
            badness.add_(raw[finite[0] : finite[0] + finite[1]].sum() * 0)
        if count >= 0:
            badness.add_(raw[count])

    def notice(self, value: Any) -> None:
        """Watch (see `watch`) the `Stats` inside `value`, kept somewhere else than in the
        store (a tracker keeps the statistics of a dict or nested output as objects)."""
        if self._watch is None:
            return
        for leaf in iter_leaves(value):
            # An empty tensor's statistics are NaN where they are undefined (its min...).
            if isinstance(leaf, Stats) and leaf.numel:
                if leaf._floats is not None:  # a CPU tensor's host floats
                    self._seen = self._seen or _shows_nonfinite(self._watch, leaf._floats)
                else:
                    self._note(leaf.raw, leaf.raw.device)

    def put(
        self,
        tensor: Tensor,
        attention: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
        memo: bool = True,
    ) -> int:
        """Compute `tensor`'s statistics into the store; return their reference.
        `attention`: the `(args, kwargs)` of the `scaled_dot_product_attention` call that
        returned `tensor`, for `attention_logits` (see `StatsFn.vectors`). `memo=False`:
        computed again even if `tensor` was the last one put, unchanged by its version
        counter (a compiled graph's kernels write its buffers in place without counting)."""
        # Hooks call this cold for every tensor: the memo and the CPU rows are inline.
        last = self._last
        if (
            memo
            and last is not None
            and last[0]() is tensor
            and last[1] == tensor._version
            and attention is None
        ):
            return last[2]
        raw, numel = self._fn.raw(tensor)
        vectors = self._fn.vectors(tensor, attention) if self._vectors else ()
        if type(raw) is list and raw:  # host floats: a CPU tensor's
            watch = self._watch
            if watch is not None and not self._seen:
                # `_shows_nonfinite`, inline: one call fewer per tensor (hooks run cold).
                finite, count = watch
                if (
                    finite is not None
                    and not all(map(math.isfinite, raw[finite[0] : finite[0] + finite[1]]))
                ) or (count >= 0 and raw[count] > 0):
                    self._seen = True
            rows, slot = self._host or self._host_rows()
            row = len(rows.numel)
            if row == _MAX_ROWS:
                raise TrackerStateError(_TOO_MANY_ROWS)
            rows.raw.extend(raw)
            rows.numel.append(numel)
            ref = row << _SLOT_BITS | slot
        else:
            ref = self._add(raw, numel, tensor.device)
        if vectors:
            slot = ref & (_SLOTS - 1)
            for kept, vector in zip(self._vectors, vectors, strict=True):
                kept.add(slot, vector)
        if attention is not None or not memo:
            # Its row holds the call's attention vectors: a module returning the same
            # tensor gets a row of its own, where they are empty.
            self._last = None
            return ref
        try:
            self._last = (weakref.ref(tensor), tensor._version, ref)
        except RuntimeError:  # an inference-mode tensor has no version counter to trust
            self._last = None
        return ref

    def put_raw(self, raw: Tensor, numel: int, vectors: Sequence[Tensor] | None = None) -> int:
        """Keep a raw vector computed elsewhere (`StatsFn.graph_raw`, inside a compiled
        graph) for a tensor of `numel` elements, with its vectors (`StatsFn.graph_vectors`;
        `None`: empty ones); return its reference."""
        ref = self._add(raw, numel, raw.device)
        if self._vectors:
            slot = ref & (_SLOTS - 1)
            if not vectors:
                empty = torch.empty(0, dtype=F64, device=raw.device)
                vectors = (empty,) * len(self._vectors)
            for kept, vector in zip(self._vectors, vectors, strict=True):
                kept.add(slot, vector)
        return ref

    def _add(self, raw: list[float] | Tensor | None, numel: int, device: torch.device) -> int:
        # Host floats that say anything (not the empty list of "numel" alone) go to `put`'s
        # own path, which watches them.
        if self._watch is not None and isinstance(raw, Tensor):
            self._note(raw, device)
        slot = self._slots.get(device)
        if slot is None:
            slot = self._slot(device)
        part = self._parts[slot]
        if len(part.numel) == _MAX_ROWS:
            raise TrackerStateError(_TOO_MANY_ROWS)
        return part.add(raw, numel, self.layout) << _SLOT_BITS | slot

    def truncate(self, refs: list[int]) -> None:
        """Drop the rows `refs` and every row added after them (the most recent rows: what
        a tracker drops when a step is not kept)."""
        for slot, part in enumerate(self._parts):
            rows = [ref >> _SLOT_BITS for ref in refs if ref & (_SLOTS - 1) == slot]
            if rows:
                first = min(rows)
                del part.numel[first:]
                if isinstance(part, _HostRows):
                    del part.raw[first * part.width :]
                for vectors in self._vectors:
                    vectors.truncate(slot, first)
        self._last = None  # it may refer to a dropped row

    def add_host_rows(
        self,
        raw: bytes,
        numel: bytes,
        vectors: Sequence[tuple[Sequence[int], bytes]] | None = None,
    ) -> tuple[int, int]:
        """Keep raw vectors read back from somewhere (a saved recording) as CPU rows:
        `raw` the float64 bytes of `[n, width]`, `numel` the int64 bytes of `[n]`, and for
        each of `layout.vectors` the rows' lengths and float64 values (`None`: empty
        vectors). Returns `(first, step)`: row `i`'s reference is `first + i * step`."""
        part, slot = self._host or self._host_rows()
        first = len(part.numel)
        n = len(numel) // 8
        if len(part.numel) + n > _MAX_ROWS:
            raise TrackerStateError(_TOO_MANY_ROWS)
        part.raw.frombytes(raw)
        part.numel.frombytes(numel)
        for k, rows in enumerate(self._vectors):
            lengths, data = ([0] * n, b"") if vectors is None else vectors[k]
            rows.add_host(slot, lengths, data)
        return first << _SLOT_BITS | slot, 1 << _SLOT_BITS

    def _host_rows(self) -> tuple[_HostRows, int]:
        """The CPU's rows and their slot, made on first use."""
        self._slot(_CPU)
        assert self._host is not None
        return self._host

    def _slot(self, device: torch.device) -> int:
        slot = len(self._parts)
        if slot == _SLOTS:
            # The tracker then keeps these statistics as objects instead.
            raise TrackerStateError(f"a StatsStore keeps rows of at most {_SLOTS} devices")
        width = self.layout.width
        if device.type == "cpu":
            rows = _HostRows(width)
            self._parts.append(rows)
            self._host = (rows, slot)
        else:
            self._parts.append(_DeviceRows(width, device))
        self._slots[device] = slot
        return slot

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """Inside the block, `get` and `table` read the rows of a device from one host copy
        made at the first read (one transfer per device, however many rows are read), not
        one transfer per row: for writing many records at once. Rows put meanwhile are not
        seen."""
        self._on_host = {}
        try:
            yield
        finally:
            self._on_host = None

    def _part_table(self, slot: int) -> Tensor:
        copies = self._on_host
        if copies is None:
            return self._parts[slot].table()
        if slot not in copies:
            copies[slot] = self._parts[slot].table()
        return copies[slot]

    def get(self, ref: int) -> Stats:
        """The `Stats` kept under `ref`."""
        slot, row = ref & (_SLOTS - 1), ref >> _SLOT_BITS
        part = self._parts[slot]
        if self._on_host is not None and isinstance(part, _DeviceRows):
            floats = self._part_table(slot)[row].tolist()
            stats = Stats._of_floats(self.layout, floats, part.numel[row])
        else:
            stats = part.get(row, self.layout)
        if self._vectors:
            stats.vectors = tuple(rows.get(slot, row) for rows in self._vectors)
        return stats

    def vector_bytes(self, refs: Tensor) -> list[tuple[list[int], bytes]] | None:
        """The vectors of the rows `refs` as `add_host_rows` takes them (per statistic:
        lengths and float64 bytes); `None` when there are none."""
        if not self._vectors:
            return None
        out = []
        for vectors in self.vector_table(refs).values():
            data = torch.cat(vectors) if vectors else torch.empty(0, dtype=F64)
            out.append(([len(v) for v in vectors], data.numpy().tobytes()))
        return out

    def vector_table(self, refs: Tensor) -> dict[str, list[Tensor]]:
        """The statistics per channel / per sample (`layout.vectors`) of the rows `refs`
        (int64): `{name: [1-D float64 CPU tensor per ref]}`, read with one transfer per
        device; `{}` when there are none."""
        if not self._vectors:
            return {}
        where = list(
            zip((refs & (_SLOTS - 1)).tolist(), (refs >> _SLOT_BITS).tolist(), strict=True)
        )
        return {
            name: rows.read(where)
            for name, rows in zip(self.layout.vectors, self._vectors, strict=True)
        }

    def table(self, refs: Tensor) -> tuple[Tensor, Tensor]:
        """The raw vectors `[N, width]` and element counts `[N]` (float64, on the CPU) of the
        rows `refs` (int64), read with one transfer per device; see `Layout.derive`."""
        width = self.layout.width
        raw = torch.empty((len(refs), width), dtype=F64)
        numel = torch.empty(len(refs), dtype=F64)
        slots = refs & (_SLOTS - 1)
        rows = refs >> _SLOT_BITS
        for slot, part in enumerate(self._parts):
            mask = slots == slot if len(self._parts) > 1 else slice(None)
            picked = rows[mask]
            raw[mask] = self._part_table(slot)[picked]
            numel[mask] = torch.frombuffer(part.numel, dtype=torch.int64)[picked].to(F64)
        return raw, numel

    @property
    def nbytes(self) -> int:
        """Bytes of statistics held (8 per number; vectors also 16 per row)."""
        rows = sum(len(p.numel) for p in self._parts) * self.layout.width * 8
        return rows + sum(v.nbytes for v in self._vectors)

    def clear(self) -> None:
        """Forget every row."""
        self._parts.clear()
        self._slots.clear()
        self._host = None
        self._last = None
        self._seen = False
        self._badness.clear()
        for rows in self._vectors:
            rows.clear()

    def __len__(self) -> int:
        return sum(len(p.numel) for p in self._parts)
