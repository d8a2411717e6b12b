"""`Columns`: a tracker's records kept as columns of integers, with `Stash` views on access.

A `Stash` object with its `Stats` costs ~500 bytes of Python objects; the numbers it stands
for are a few integers and, with `stats=`, a few floats. So a tracker keeps one row per
record in growable arrays and builds each `Stash` only when it is read (`t[i]`, `iter(t)`).

The schema (one row per record, in recording order; a later issue streams these arrays to
disk and gathers them across ranks, so everything is plain numbers plus two small tables):

============  ========  =================================================================
column        type      meaning
============  ========  =================================================================
``site``      int32     index into `sites`: (module name, module class, kind, attr);
                        -1 for a row holding a whole `Stash` object
``call``      int32     which call of the module in its step
``flags``     uint8     `GRAD` | `TRAINING` | `TUPLE` | `OBJECT` | `STASH` | `REFS` bits
``ref``       int32     where the value is: an index into `objects` (`OBJECT`, `STASH`),
                        else a reference into the `ValueStore` (e.g. a statistics row)
step          int64     run-length encoded: `step_rows[k]` is the first row of the run
                        whose step is `step_values[k]` (steps change once per step)
============  ========  =================================================================

`sites` holds each (name, class, kind, attr) once; `objects` holds values that are not
columnar (copies of tensors, nested outputs, stashes a user's `stash=` built).
"""

import bisect
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSequence, Sequence
from typing import Any, NamedTuple, Protocol, overload

import torch
from torch import Tensor, nn

from .records import Kind, Stash

__all__ = [
    "GRAD",
    "OBJECT",
    "REFS",
    "STASH",
    "TRAINING",
    "TUPLE",
    "Columns",
    "Site",
    "ValueStore",
]

GRAD = 1
"""Flag: the row holds gradients."""
TRAINING = 2
"""Flag: the module was in training mode."""
TUPLE = 4
"""Flag: the value is a 1-tuple around what `ref` points to (a gradient of one tensor)."""
OBJECT = 8
"""Flag: `ref` indexes `objects` (a value kept as a Python object)."""
STASH = 16
"""Flag: `objects[ref]` is a whole `Stash` (built by a user's `stash=`, or added by hand)."""
REFS = 32
"""Flag (with `OBJECT`): `objects[ref]` is a tuple of `ValueStore` references and `None`s,
standing for a tuple of the values they refer to (e.g. attention's `(output, None)`)."""


class Site(NamedTuple):
    """What every record of one module part shares."""

    name: str
    cls: type[nn.Module]
    kind: Kind
    attr: str


class ValueStore(Protocol):
    """Keeps the values of single tensors in columns; a `StashValueFn` offering one (its
    `store()` method) has its values recorded without a Python object per record."""

    def put(
        self,
        tensor: Tensor,
        attention: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
        memo: bool = True,
    ) -> int:
        """Keep the value of `tensor` and return a reference (>= 0) to it; may raise, the
        tracker then records the tensor another way. `attention`: the `(args, kwargs)` of
        the attention call that returned `tensor`; `memo`: whether the last tensor's value
        may be reused (see `StatsStore.put`)."""

    def get(self, ref: int) -> Any:
        """The value `put` returned `ref` for, as the stash function would have given it."""

    @property
    def nbytes(self) -> int:
        """Bytes held."""

    def clear(self) -> None:
        """Forget every value (references given out become invalid)."""


class Columns(MutableSequence[Stash]):
    """A tracker's records (see the module docstring), readable as a list of `Stash`.

    Indexing and iterating build `Stash` objects on the fly; while one is alive, reading
    its row again gives the same object. Appending a `Stash` keeps that object as it is.
    Pickling gives a plain list of stashes.

    Example:
        >>> cols = Columns()
        >>> site = cols.site_id("0", nn.Linear, "output", "")
        >>> cols.add_object(site, 0, 5, TRAINING, torch.ones(2))
        >>> cols[0].name, cols[0].step, cols[0].value
        ('0', 5, tensor([1., 1.]))
    """

    def __init__(self, store: ValueStore | None = None) -> None:
        self.store = store
        self.sites: list[Site] = []
        self._site_ids: dict[Site, int] = {}
        self.objects: list[Any] = []
        self._reset()

    def _reset(self) -> None:
        self.site = array("i")
        self.call = array("i")
        self.flags = array("B")
        self.ref = array("i")
        self.step_rows = array("q")
        self.step_values = array("q")
        self._last_step: int | None = None
        # The stashes built and still alive, so that reading a row twice gives one object.
        self._views: weakref.WeakValueDictionary[int, Stash] = weakref.WeakValueDictionary()

    # -- writing (hot path) ----------------------------------------------------------

    def site_id(self, name: str, cls: type[nn.Module], kind: Kind, attr: str) -> int:
        """The index of a site in `sites`, added on first use."""
        site = Site(name, cls, kind, attr)
        index = self._site_ids.get(site)
        if index is None:
            # In this order, an interrupt in between leaves a site no row uses, harmless.
            index = len(self.sites)
            self.sites.append(site)
            self._site_ids[site] = index
        return index

    def add(self, site: int, call: int, step: int, flags: int, ref: int) -> None:
        """Append one record, whole or not at all: an exception between two column appends
        (a Ctrl-C) takes the row back out before it propagates."""
        try:  # free until something raises (Python >= 3.11)
            if step != self._last_step:
                self.step_rows.append(len(self.ref))
                self.step_values.append(step)
                self._last_step = step
            self.site.append(site)
            self.call.append(call)
            self.flags.append(flags)
            self.ref.append(ref)
        except BaseException:
            # `ref` is appended last, so its length counts the whole rows: read here and
            # not before the appends, which would cost a call on every record.
            self._cut(len(self.ref))
            raise

    def add_rows(self, site: Any, call: Any, step: Any, flags: Any, ref: Any) -> None:
        """Append many records at once from numpy arrays (what loading a recording does):
        `site`, `call`, `ref` int32, `step` int64, `flags` uint8, none of them `OBJECT`."""
        if not len(ref):
            return
        n = len(self.ref)
        starts = [0, *(i + 1 for i in (step[1:] != step[:-1]).nonzero()[0].tolist())]
        for start in starts:
            value = int(step[start])
            if value != self._last_step:
                self._last_step = value
                self.step_rows.append(n + start)
                self.step_values.append(value)
        self.site.frombytes(site.astype("int32").tobytes())
        self.call.frombytes(call.astype("int32").tobytes())
        self.flags.frombytes(flags.astype("uint8").tobytes())
        self.ref.frombytes(ref.astype("int32").tobytes())

    def add_object(self, site: int, call: int, step: int, flags: int, value: Any) -> None:
        """Append one record whose value is kept as a Python object (whole or not at all)."""
        self._add_object(site, call, step, flags | OBJECT, value)

    def _add_object(self, site: int, call: int, step: int, flags: int, value: Any) -> None:
        index = len(self.objects)
        try:
            self.objects.append(value)
            self.add(site, call, step, flags, index)
        except BaseException:
            del self.objects[index:]
            raise

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ref)

    def step_at(self, row: int) -> int:
        """The step of record `row`."""
        return self.step_values[bisect.bisect_right(self.step_rows, row) - 1]

    def _stash(self, row: int) -> Stash:
        stash = self._views.get(row)
        if stash is None:
            stash = self._views[row] = self._build(row)
        return stash

    def value_at(self, row: int) -> Any:
        """The value of record `row` (what its `Stash` holds), without building the `Stash`."""
        flags = self.flags[row]
        ref = self.ref[row]
        if flags & STASH:
            return self.objects[ref].value
        if flags & REFS:
            get = self._store().get
            return tuple(None if r is None else get(r) for r in self.objects[ref])
        value = self.objects[ref] if flags & OBJECT else self._store().get(ref)
        return (value,) if flags & TUPLE else value

    def _build(self, row: int) -> Stash:
        flags = self.flags[row]
        if flags & STASH:
            stash: Stash = self.objects[self.ref[row]]
            return stash
        site = self.sites[self.site[row]]
        return Stash(
            site.name,
            site.cls,
            bool(flags & GRAD),
            self.value_at(row),
            self.call[row],
            self.step_at(row),
            site.kind,
            site.attr,
            bool(flags & TRAINING),
        )

    def _store(self) -> ValueStore:
        assert self.store is not None  # only rows put into a store refer to it
        return self.store

    def where(
        self, keep: Callable[[Site], bool], grad: bool | None = None, step: int | None = None
    ) -> list[Stash]:
        """The stashes of the rows whose site `keep` accepts and, unless None, whose
        gradient flag equals `grad` and whose step is `step`, in recording order, building
        no other `Stash`. Rows holding a whole `Stash` (added by hand or by a user's
        `stash=`) pass the site and gradient tests: the caller checks them like any stash."""
        if not len(self):
            return []
        mask = self._mask(keep, grad)
        if step is not None:
            in_step = torch.tensor([value == step for value in self.step_values])
            mask &= in_step[self._row_runs()]
        return [self._stash(row) for row in mask.nonzero().flatten().tolist()]

    def steps_where(self, keep: Callable[[Site], bool]) -> list[int]:
        """The steps, ascending, at which a site that `keep` accepts was recorded."""
        if not len(self):
            return []
        mask = self._mask(keep, None)
        by_hand = mask & (torch.frombuffer(self.flags, dtype=torch.uint8) & STASH != 0)
        runs = self._row_runs()
        hit = torch.zeros(len(self.step_values), dtype=torch.bool)
        hit[runs[mask & ~by_hand]] = True
        found = {self.step_values[k] for k in hit.nonzero().flatten().tolist()}
        found.update(self._stash(row).step for row in by_hand.nonzero().flatten().tolist())
        return sorted(found)

    def _mask(self, keep: Callable[[Site], bool], grad: bool | None) -> Tensor:
        """Rows (of a non-empty table) that pass the site and gradient tests of `where`."""
        # One mark per site, and a last one for the -1 of rows holding a whole Stash.
        marks = torch.tensor([bool(keep(site)) for site in self.sites] + [True])
        mask = marks[torch.frombuffer(self.site, dtype=torch.int32).long()]
        if grad is not None:
            flags = torch.frombuffer(self.flags, dtype=torch.uint8)
            mask &= ((flags & GRAD) != 0).eq(grad) | ((flags & STASH) != 0)
        return mask

    def _row_runs(self) -> Tensor:
        """For every row, the index of its run in `step_rows`/`step_values`."""
        starts = torch.tensor([*self.step_rows, len(self)], dtype=torch.long)
        return torch.arange(len(self.step_rows)).repeat_interleave(starts.diff())

    def first_of_sites(self) -> list[Stash]:
        """The first stash of each site for forward values and for gradients, in recording
        order (plus every row holding a whole `Stash`): what a tracker holds, in a few
        stashes, without building the others."""
        if not len(self):
            return []
        site = torch.frombuffer(self.site, dtype=torch.int32).long()
        grad = (torch.frombuffer(self.flags, dtype=torch.uint8) & GRAD).long()
        key = torch.where(site < 0, -1 - torch.arange(len(site)), 2 * site + grad)
        _, inverse = torch.unique(key, return_inverse=True)
        rows = torch.arange(len(site))
        first = torch.full((int(inverse.max()) + 1,), len(site), dtype=torch.long)
        first = first.scatter_reduce(0, inverse, rows, reduce="amin")
        return [self._stash(row) for row in first.sort().values.tolist()]

    @overload
    def __getitem__(self, index: int) -> Stash: ...
    @overload
    def __getitem__(self, index: slice) -> list[Stash]: ...
    def __getitem__(self, index: int | slice) -> Stash | list[Stash]:
        if isinstance(index, slice):
            return [self._stash(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"stash index {index} out of range ({n} stashes)")
        return self._stash(index % n)

    def __iter__(self) -> Iterator[Stash]:
        for row in range(len(self)):
            yield self._stash(row)

    # -- list behaviour for stashes added by hand ------------------------------------------

    def append(self, value: Stash) -> None:
        """Append a `Stash` object (kept as it is)."""
        self._add_object(-1, value.call, value.step, STASH, value)

    def extend(self, values: Iterable[Stash]) -> None:
        """Append each `Stash` of `values`."""
        for value in list(values):
            self.append(value)

    def insert(self, index: int, value: Stash) -> None:
        """Insert a `Stash` before position `index`."""
        stashes = list(self)
        stashes.insert(index, value)
        self._rebuild(stashes)

    @overload
    def __setitem__(self, index: int, value: Stash) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[Stash]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        stashes = list(self)
        stashes[index] = value
        self._rebuild(stashes)

    def __delitem__(self, index: int | slice) -> None:
        stashes = list(self)
        del stashes[index]
        self._rebuild(stashes)

    def _rebuild(self, stashes: list[Stash]) -> None:
        # Rare (editing a recording by hand): every row becomes a Stash object.
        self.clear()
        self.extend(stashes)

    def keep_recent_steps(self, n: int) -> None:
        """Drop every record but those of the `n` most recent steps (in recording order);
        for records whose values are objects (a store's rows cannot be dropped one by one).

        Example:
            >>> cols = Columns()
            >>> site = cols.site_id("0", nn.Linear, "output", "")
            >>> for step in (3, 3, 7):
            ...     cols.add_object(site, 0, step, 0, torch.ones(1))
            >>> cols.keep_recent_steps(1)
            >>> [s.step for s in cols]
            [7]
        """
        assert self.store is None
        recent: set[int] = set()
        cut = len(self.step_values)
        while cut and (self.step_values[cut - 1] in recent or len(recent) < n):
            recent.add(self.step_values[cut - 1])
            cut -= 1
        if not cut:
            return
        first = self.step_rows[cut] if cut < len(self.step_rows) else len(self)
        # Objects are appended in row order: those of the dropped rows are a prefix.
        kept = [self.ref[r] for r in range(first, len(self)) if self.flags[r] & (OBJECT | STASH)]
        shift = min(kept, default=len(self.objects))
        self.objects = self.objects[shift:]
        ref = self.ref[first:]
        for r in range(len(ref)):
            if self.flags[first + r] & (OBJECT | STASH):
                ref[r] -= shift
        self.site, self.call, self.flags, self.ref = (
            self.site[first:],
            self.call[first:],
            self.flags[first:],
            ref,
        )
        self.step_rows = array("q", [r - first for r in self.step_rows[cut:]])
        self.step_values = self.step_values[cut:]
        self._views = weakref.WeakValueDictionary()  # rows have moved

    def drop_from(self, first: int) -> None:
        """Drop the records from row `first` on (the most recent ones) and the values they
        hold, also the store's rows (`truncate(refs)` on the store)."""
        if first >= len(self):
            return
        dropped = range(first, len(self))
        objects = [self.ref[r] for r in dropped if self.flags[r] & (OBJECT | STASH)]
        stored = [self.ref[r] for r in dropped if not self.flags[r] & (OBJECT | STASH)]
        stored += [
            ref
            for r in dropped
            if self.flags[r] & REFS
            for ref in self.objects[self.ref[r]]
            if ref is not None
        ]
        if objects:
            del self.objects[min(objects) :]
        if stored:
            truncate = getattr(self.store, "truncate", None)
            assert callable(truncate)
            truncate(stored)
        self._cut(first)
        self._views = weakref.WeakValueDictionary()

    def _cut(self, first: int) -> None:
        """Cut every column back to `first` rows (the values they refer to stay)."""
        for column in (self.site, self.call, self.flags, self.ref):
            del column[first:]
        # By position, not in pairs: `add` may have been cut between its two appends.
        runs = bisect.bisect_left(self.step_rows, first)
        del self.step_rows[runs:], self.step_values[runs:]
        self._last_step = self.step_values[-1] if self.step_values else None

    def clear(self) -> None:
        """Drop every record (and the values they hold)."""
        self._reset()
        self.objects = []
        if self.store is not None:
            self.store.clear()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Columns, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))

    def __repr__(self) -> str:
        return f"Columns({len(self)} records)"
