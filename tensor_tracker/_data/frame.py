"""`to_frame`: stashes as a pandas DataFrame, one row per stash."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.columns import GRAD, OBJECT, REFS, STASH, TRAINING, Columns
from .._core.records import Stash, first_value
from .._core.structure import iter_leaves
from .._files import utf8_safe
from .._optional import require
from .._validate import check_type
from ..errors import ArgumentTypeError, ArgumentValueError, NotRecordedError
from ..stats import NAMES, Stats, compute, stats_table
from ..stats._store import StatsStore
from .select import as_stashes, first_leaf

if TYPE_CHECKING:
    import pandas

__all__ = ["KEYS", "holds_copies", "later_tensor_stats", "recording_frame", "to_frame", "type_name"]

_TYPE_NAMES: dict[type, str] = {}


def type_name(cls: type) -> str:
    """`"<module>.<qualname>"` of a class, as in the `type` column."""
    name = _TYPE_NAMES.get(cls)
    if name is None:
        name = _TYPE_NAMES[cls] = f"{cls.__module__}.{cls.__qualname__}"
    return name


def _stat_fn(stat: Callable[[Tensor], Any] | str | None) -> Callable[[Tensor], Any]:
    if stat is None:
        return torch.std
    if isinstance(stat, str):
        if stat not in NAMES:
            raise ArgumentValueError(
                f"to_frame: stat={stat!r} is not a statistic; use one of {list(NAMES)} "
                "or a function of a tensor"
            )
        return lambda t: compute(t, (stat,))[stat]
    if not callable(stat):
        raise ArgumentTypeError(
            f"to_frame: stat must be a callable or a statistic name, got {stat!r}"
        )
    return stat


def _tensor_stats(fn: Callable[[Tensor], Any], values: Sequence[Any]) -> list[float]:
    """Apply `fn` to each tensor and read all results back with one transfer per device."""
    out = [math.nan] * len(values)
    pending: dict[torch.device, tuple[list[int], list[Tensor]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. std of one element: NaN, as documented
        for i, value in enumerate(values):
            if not isinstance(value, Tensor) or value.numel() == 0:
                continue
            if value.layout != torch.strided:  # sparse: the dense tensor it stands for
                value = value.to_dense()
            try:
                result = fn(value)
            except (RuntimeError, TypeError, ValueError, KeyError):
                continue  # e.g. torch.std of an integer tensor: NaN, not a crash
            if isinstance(result, Tensor):
                if result.numel() == 1 and not result.is_complex():
                    rows, tensors = pending.setdefault(result.device, ([], []))
                    rows.append(i)
                    tensors.append(result.reshape(()).detach())
            elif isinstance(result, (int, float)):
                out[i] = float(result)
    for rows, tensors in pending.values():
        for i, v in zip(rows, torch.stack(tensors).to("cpu", torch.float64).tolist(), strict=True):
            out[i] = v
    return out


def first_stats(value: Any) -> Stats | None:
    """The statistics of the first tensor in a stash's value (a tuple, dict, `ModelOutput`,
    ...), or None when it holds none."""
    stats: Stats | None = first_leaf(value, Stats)
    return stats


_META = ("name", "type", "grad", "call", "step", "kind", "attr", "training")
KEYS = (*_META, "rank")
"""Columns of `to_frame()` that say what a row is, not a statistic of it (`rank` in the
frame of a distributed run's ranks)."""


def meta_columns(cols: Columns, objects: dict[int, Stash]) -> dict[str, Any]:
    """The position columns, vectorised over the rows; the rows holding a whole `Stash`
    (`objects`, by row) take them from it."""
    np = require("numpy", "pandas")
    n = len(cols)
    flags = np.frombuffer(cols.flags, dtype=np.uint8) if n else np.empty(0, np.uint8)
    site = np.frombuffer(cols.site, dtype=np.int32) if n else np.empty(0, np.int32)
    sites = cols.sites

    # One extra entry at the end for rows without a site (site -1), set below.
    def table(values: list[Any]) -> Any:
        return np.array([*values, ""], dtype=object)[site]

    out: dict[str, Any] = {
        # pandas' str columns (Arrow) hold UTF-8 only: a lone surrogate as its escape.
        "name": table([utf8_safe(s.name) for s in sites]),
        "type": table([type_name(s.cls) for s in sites]),
        "grad": (flags & GRAD) != 0,
        "call": np.array(cols.call, dtype=np.int64),
        "step": np.repeat(
            np.array(cols.step_values, dtype=np.int64),
            np.diff(np.array([*cols.step_rows, n], dtype=np.int64)),
        ),
        "kind": table([utf8_safe(s.kind) for s in sites]),
        "attr": table([utf8_safe(s.attr) for s in sites]),
        "training": (flags & TRAINING) != 0,
    }
    for row, stash in objects.items():
        out["name"][row], out["type"][row] = utf8_safe(stash.name), type_name(stash.type)
        out["grad"][row], out["call"][row], out["step"][row] = stash.grad, stash.call, stash.step
        out["kind"][row], out["attr"][row] = utf8_safe(stash.kind), utf8_safe(stash.attr)
        out["training"][row] = stash.training
    return out


def _store_table(cols: Columns, refs: Any) -> dict[str, Any]:
    """The statistics under `refs` (int64 array) in the tracker's `StatsStore`, as numpy
    columns."""
    store = cols.store
    if not len(refs) or not isinstance(store, StatsStore):
        return {}
    raw, numel = store.table(torch.from_numpy(refs))
    derived = store.layout.derive(raw, numel)
    # Histogram counts stay one 2-D array until a frame column needs them as lists: a frame
    # of one scalar statistic then makes no list per row.
    out: dict[str, Any] = {k: v.numpy() for k, v in derived.items()}
    for name, vectors in store.vector_table(torch.from_numpy(refs)).items():
        out[name] = [v.numpy() for v in vectors]
    return out


def _columns(stashes: Sequence[Stash]) -> Columns:
    """A tracker's `Columns` as they are; a list of stashes put into new ones."""
    if isinstance(stashes, Columns):
        return stashes
    cols = Columns()
    cols.extend(as_stashes(stashes, "to_frame(stashes)"))
    return cols


def _store_refs(cols: Columns, row: int) -> list[int]:
    """The store references of a row holding a tuple of them (`REFS`), one per tensor."""
    return [r for r in cols.objects[cols.ref[row]] if r is not None]


def later_tensor_stats(stashes: Sequence[Stash]) -> list[tuple[Any, dict[str, Any]]]:
    """The statistics of every tensor after the first in each record's value (the second
    tensor of a tuple output, a dict's other entries, ...), which `to_frame` leaves out:
    blocks of (rows, numpy columns), one entry per such tensor, `rows` giving its record.

    Reads a tracker's `Columns` without building a `Stash` for the records of one tensor."""
    np = require("numpy", "pandas")
    cols = _columns(getattr(stashes, "stashes", stashes))
    n = len(cols)
    flags = np.frombuffer(cols.flags, dtype=np.uint8) if n else np.empty(0, np.uint8)
    rows: list[int] = []
    refs: list[int] = []
    for i in np.flatnonzero(flags & REFS):
        kept = _store_refs(cols, int(i))
        rows += [int(i)] * (len(kept) - 1)
        refs += kept[1:]
    object_rows: list[int] = []
    found: list[Stats] = []
    for i in np.flatnonzero((flags & (OBJECT | STASH) != 0) & (flags & REFS == 0)):
        leaves = [v for v in iter_leaves(cols.value_at(int(i))) if isinstance(v, Stats)]
        object_rows += [int(i)] * (len(leaves) - 1)
        found += leaves[1:]
    return [
        (np.array(rows, dtype=np.int64), _store_table(cols, np.array(refs, dtype=np.int64))),
        (np.array(object_rows, dtype=np.int64), stats_table(found) if found else {}),
    ]


def to_frame(
    stashes: Sequence[Stash],
    stat: Callable[[Tensor], Any] | str | None = None,
    stat_name: str | None = None,
    stats_names: Sequence[str] = (),
) -> pandas.DataFrame:
    """Build the DataFrame of `Tracker.to_frame` (see there) from a list of stashes or a
    tracker's `Columns`.

    Stashes holding statistics (`track(..., stats=...)`) fill one column per statistic, from
    the first tensor of their value; the others fill the `stat` column from their
    `first_value`. Both kinds can be mixed without one overwriting the other's values.
    Statistics kept in columns (a tracker's `StatsStore`) are read without building any
    `Stash`, with one transfer per device.

    Args:
        stashes: the stashes, one row each.
        stat: the statistic of the plain stashes (default `torch.std`), or a recorded
            statistic's name to keep only that column.
        stat_name: the name of that column.
        stats_names: statistic columns to include even when no stash holds them (a
            `stats=` tracker passes its statistics, so an empty frame has their columns).

    Example:
        >>> frame = tensor_tracker.to_frame(tracker["0"], stat=torch.max, stat_name="max")
        >>> frame[["name", "grad", "max"]].round(3).values.tolist()
        [['0', False, 1.208], ['0', True, 0.324]]
    """
    if stat_name is not None:
        check_type(stat_name, str, "to_frame(stat_name=...)", "a column name (str) or None")
    pd = require("pandas", "pandas")
    np = require("numpy", "pandas")
    cols = _columns(stashes)
    n = len(cols)
    flags = np.frombuffer(cols.flags, dtype=np.uint8) if n else np.empty(0, np.uint8)
    refs = np.frombuffer(cols.ref, dtype=np.int32).astype(np.int64) if n else np.empty(0, np.int64)
    in_store = (flags & (OBJECT | STASH)) == 0
    # Tuples of store references: their first statistics are read with the store's rows.
    tuples = np.flatnonzero(flags & REFS)
    first_refs = [_store_refs(cols, int(i))[0] for i in tuples]
    others = np.flatnonzero(~in_store & ((flags & REFS) == 0))
    values = {int(i): cols.value_at(int(i)) for i in others}
    whole = {i: cols.objects[cols.ref[i]] for i in values if cols.flags[i] & STASH}
    columns = meta_columns(cols, whole)

    # Statistics: a block per source (the store's rows, the Stats objects of other rows).
    store_rows = np.concatenate([np.flatnonzero(in_store), tuples])
    store_refs = np.concatenate([refs[in_store], np.array(first_refs, dtype=np.int64)])
    blocks: list[tuple[Any, dict[str, Any]]] = [(store_rows, _store_table(cols, store_refs))]
    found = {i: first_stats(v) for i, v in values.items()}
    with_stats = [i for i, v in found.items() if v is not None]
    object_table = stats_table([found[i] for i in with_stats])  # type: ignore[misc]
    for name in {n for i in with_stats for n in found[i].layout.vectors}:  # type: ignore[union-attr]
        object_table[name] = [
            v if isinstance(v, float) else np.array(v, dtype=np.float64) for v in object_table[name]
        ]
    blocks.append((with_stats, object_table))
    table: dict[str, list[tuple[Any, Any]]] = {}
    for rows, block in blocks:
        for name, column in block.items():
            table.setdefault(name, []).append((rows, column))
    for name in stats_names:
        table.setdefault(name, [])
    if stat is not None and table:
        wanted = stat if isinstance(stat, str) else getattr(stat, "__name__", "")
        if wanted not in table:
            raise NotRecordedError(
                f"to_frame: stat={wanted!r} was not recorded; recorded statistics: {list(table)}"
            )
        table = {stat_name or wanted: table[wanted]}
    for name, parts in table.items():
        columns[name] = _assemble(np, n, parts)

    plain = [i for i, v in found.items() if v is None]
    firsts = {i: first_value(values[i]) for i in plain}
    # A stats recording's rows without statistics (a module returning None) add no column;
    # plain stashes do, or an empty frame of a plain recording.
    if not table or any(isinstance(v, Tensor) for v in firsts.values()):
        fn = _stat_fn(stat)
        label = stat_name or (stat if isinstance(stat, str) else getattr(fn, "__name__", None))
        label = label or "value"
        results = _tensor_stats(fn, [firsts[i] for i in plain])
        # A plain column named like a statistic shares it: each row keeps its own value.
        full = columns[label] if label in table else np.full(n, math.nan)
        if plain:
            full[plain] = results
        columns[label] = full
    frame: pandas.DataFrame = pd.DataFrame(columns)
    return frame


def _assemble(np: Any, n: int, parts: list[tuple[Any, Any]]) -> Any:
    """One column of `n` rows from `(rows, values)` parts, NaN elsewhere; a histogram's
    counts (a list per row) and statistics per channel or sample (a numpy array per row)
    make an object column."""
    listed = any(
        getattr(values, "ndim", 1) == 2
        or (isinstance(values, list) and any(not isinstance(v, float) for v in values))
        for _, values in parts
    )
    full = np.full(n, math.nan, dtype=object if listed else np.float64)
    for rows, values in parts:
        if len(rows):
            if listed:
                values = values.tolist() if getattr(values, "ndim", 1) == 2 else values
                for r, v in zip(rows, values, strict=True):
                    full[r] = v
            else:
                full[rows] = values
    return full


def recording_frame(recording: Any, caller: str) -> tuple[pandas.DataFrame, Sequence[Stash]]:
    """The frame and the stashes of what a reading function was given: a `Tracker` (its
    own `to_frame()`) or a list of `Stash`.

    Raises:
        TypeError: something else (the error names `caller`).
    """
    to_frame_method = getattr(recording, "to_frame", None)
    if callable(to_frame_method):
        frame: pandas.DataFrame = to_frame_method()
        return frame, recording
    if isinstance(recording, Sequence) and all(isinstance(s, Stash) for s in recording):
        return to_frame(recording), recording
    raise ArgumentTypeError(
        f"{caller}: pass a Tracker (or a list of Stash), got {type(recording).__name__}"
    )


def holds_copies(stashes: Sequence[Stash]) -> bool:
    """Whether the records hold copies rather than statistics (judged by the first 64)."""
    return not any(first_stats(s.value) is not None for s in itertools.islice(stashes, 64))
