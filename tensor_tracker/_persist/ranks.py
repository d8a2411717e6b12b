"""The records of several ranks in one tracker: what `Tracker.gather` and loading a run
directory written by several ranks build.

Records travel between processes as a `Part`: the columns as bytes, each statistic as its
raw vector (one float64 row, see `Layout`), module classes by name, and only the values
that are not columnar (copies of tensors) as objects; `merge` appends parts to one
`Columns`, remembering the rank of each row.

Ranks may have recorded different statistics (`stats=True` on one, `["mean",
"fp16_overflow"]` on another, only a histogram on a third). Their raw vectors then have
different layouts, so `merged_stats` builds one layout holding every statistic any rank
recorded, and `merge` reads each rank's rows with its own layout into it: a statistic a
rank did not record is NaN on that rank's rows (an empty vector for statistics per
channel / per sample).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._core.columns import OBJECT, REFS, STASH, Columns
from .._core.records import LogEntry
from .._data.frame import type_name
from .._optional import require
from ..errors import ArgumentValueError, RecordingError, TensorTrackerError
from ..stats import Histogram, StatsFn
from ..stats._kernels import F64, NAN
from ..stats._layout import Layout
from ..stats._spec import AttentionLogits, Blocks, CustomName, PerAxis
from ..stats._store import StatsStore
from .recording import module_class
from .recording_codec import META

__all__ = [
    "Part",
    "combined_frame",
    "merge",
    "merged_stats",
    "part_of",
    "rank_parts",
    "spec_names",
    "stats_fn_of",
]


@dataclasses.dataclass
class Part:
    """One rank's records, as plain data that pickles compactly (see the module docstring).

    Attributes:
        rank: the rank that recorded them.
        world_size: the number of ranks then.
        sites: `(name, type name, kind, attr)` of each site.
        site, call, flags, ref: the `Columns` arrays as bytes; `ref` of a statistics row
            (and each reference in a `REFS` tuple) is its row in `raw`.
        step_rows, step_values: the run-length encoded steps, as bytes.
        raw, numel: the statistics rows, float64 `[k, width]` and int64 `[k]` bytes.
        spec: the statistics' layout spec (`None` without `stats=`).
        objects: the values kept as objects.
        log: the scalars and notes of `Tracker.log`/`note`.
        vectors: the statistics per channel / per sample of the statistics rows, per
            statistic `(lengths, float64 bytes)` (`None` when there are none).
    """

    rank: int
    world_size: int
    sites: list[tuple[str, str, str, str]]
    site: bytes
    call: bytes
    flags: bytes
    ref: bytes
    step_rows: bytes
    step_values: bytes
    raw: bytes
    numel: bytes
    spec: tuple[Any, ...] | None
    objects: list[Any]
    log: list[LogEntry]
    vectors: list[tuple[list[int], bytes]] | None = None


def part_of(columns: Columns, rank: int, world_size: int, log: Sequence[LogEntry] = ()) -> Part:
    """`columns` as a `Part` of rank `rank` (the columns are not changed)."""
    store = columns.store
    stored: dict[int, int] = {}  # store reference -> row of the part's raw table
    ref = array("i", columns.ref)
    objects = list(columns.objects)
    for row in range(len(columns)):
        flags = columns.flags[row]
        if not flags & (OBJECT | STASH):
            ref[row] = stored.setdefault(ref[row], len(stored))
        elif flags & REFS:
            index = columns.ref[row]
            objects[index] = tuple(
                None if r is None else stored.setdefault(r, len(stored))
                for r in columns.objects[index]
            )
    raw, numel = b"", b""
    spec = None
    vectors = None
    if isinstance(store, StatsStore):
        spec = store.layout.spec
        if stored:
            table, counts = store.table(torch.tensor(list(stored), dtype=torch.int64))
            raw = table.contiguous().numpy().tobytes()
            numel = counts.to(torch.int64).numpy().tobytes()
            vectors = store.vector_bytes(torch.tensor(list(stored), dtype=torch.int64))
    # Classes travel by name: a class defined in a function cannot be pickled.
    sites = [(s.name, type_name(s.cls), str(s.kind), s.attr) for s in columns.sites]
    return Part(
        rank,
        world_size,
        sites,
        columns.site.tobytes(),
        columns.call.tobytes(),
        columns.flags.tobytes(),
        ref.tobytes(),
        columns.step_rows.tobytes(),
        columns.step_values.tobytes(),
        raw,
        numel,
        spec,
        objects,
        list(log),
        vectors,
    )


def _columns_of(part: Part) -> Columns:
    """A `Columns` holding `part`'s records (statistics as CPU rows of a new store)."""
    fn = stats_fn_of(part.spec)
    store = None if fn is None else fn.store()
    columns = Columns(store)
    for name, type_, kind, attr in part.sites:
        columns.site_id(name, module_class(type_), kind, attr)  # type: ignore[arg-type]
    first, stride = (
        (0, 1) if store is None else store.add_host_rows(part.raw, part.numel, part.vectors)
    )
    ref = array("i")
    ref.frombytes(part.ref)
    flags = array("B")
    flags.frombytes(part.flags)
    objects = list(part.objects)
    for row in range(len(ref)):
        if not flags[row] & (OBJECT | STASH):
            ref[row] = first + stride * ref[row]
        elif flags[row] & REFS:
            objects[ref[row]] = tuple(
                None if r is None else first + stride * r for r in objects[ref[row]]
            )
    columns.site.frombytes(part.site)
    columns.call.frombytes(part.call)
    columns.flags = flags
    columns.ref = ref
    columns.step_rows.frombytes(part.step_rows)
    columns.step_values.frombytes(part.step_values)
    columns.objects = objects
    return columns


def merge(parts: Sequence[Part | tuple[int, Columns]], into: Columns) -> Sequence[int]:
    """Append the records of `parts` (each a `Part`, or `(rank, columns)`) to `into`, in
    order; returns the rank of each appended row.

    Statistics rows are copied into `into`'s store as CPU rows (raw vectors of the same
    layout spec); other values are appended as they are."""
    ranks = array("i")
    for part in parts:
        if isinstance(part, Part):
            rank, columns = part.rank, _columns_of(part)
        else:
            rank, columns = part
        before = len(into)
        _append(into, columns)
        ranks.extend([rank] * (len(into) - before))
    return ranks


def _append(into: Columns, source: Columns) -> None:
    n = len(source)
    if not n:
        return
    store = into.store
    refs: dict[int, int] = {}
    for row in range(n):
        flags = source.flags[row]
        if not flags & (OBJECT | STASH):
            refs.setdefault(source.ref[row], len(refs))
        elif flags & REFS:
            for r in source.objects[source.ref[row]]:
                if r is not None:
                    refs.setdefault(r, len(refs))
    first, stride = 0, 1
    if refs:
        assert isinstance(source.store, StatsStore) and isinstance(store, StatsStore)
        raw, numel = source.store.table(torch.tensor(list(refs), dtype=torch.int64))
        vectors = source.store.vector_bytes(torch.tensor(list(refs), dtype=torch.int64))
        if source.store.layout.spec != store.layout.spec:
            # Ranks with different statistics: values and counts into the merged layout,
            # each vector to its place in it (empty where the rank did not record it).
            raw = _convert(source.store.layout, store.layout, raw, numel)
            held = dict(zip(source.store.layout.vectors, vectors or (), strict=True))
            empty: tuple[list[int], bytes] = ([0] * len(refs), b"")
            vectors = [held.get(name, empty) for name in store.layout.vectors] or None
        first, stride = store.add_host_rows(
            raw.contiguous().numpy().tobytes(), numel.to(torch.int64).numpy().tobytes(), vectors
        )
    site_map = [into.site_id(*site) for site in source.sites]
    for row in range(n):
        flags = source.flags[row]
        step = source.step_at(row)
        if flags & STASH:
            into.append(source.objects[source.ref[row]])
        elif flags & REFS:
            value = tuple(
                None if r is None else first + stride * refs[r]
                for r in source.objects[source.ref[row]]
            )
            into.add_object(site_map[source.site[row]], source.call[row], step, flags, value)
        elif flags & OBJECT:
            value = source.objects[source.ref[row]]
            into.add_object(site_map[source.site[row]], source.call[row], step, flags, value)
        else:
            ref = first + stride * refs[source.ref[row]]
            into.add(site_map[source.site[row]], source.call[row], step, flags, ref)


def merged_stats(
    specs: Sequence[tuple[Any, ...] | None], error: type[TensorTrackerError]
) -> StatsFn | None:
    """The statistics of a tracker merging ranks whose statistics' layout specs are
    `specs` (one per rank, in rank order; `None` for a rank that kept full copies): `None`
    when every rank recorded the same (read them with that rank's own function), else a
    `StatsFn` whose layout holds every statistic any rank recorded, in order of first
    appearance (see the module docstring).

    Raises:
        error: some ranks kept statistics and others full copies, or two ranks recorded
            histograms (or statistics per channel / per sample) of one name configured
            differently.
    """
    if len(set(specs)) <= 1:
        return None
    kinds = [spec is None for spec in specs]
    if any(kinds) and not all(kinds):
        copies, stats = kinds.index(True), kinds.index(False)
        raise error(
            f"rank {copies} recorded full copies and rank {stats} statistics; records of "
            "both kinds cannot be merged into one tracker: record with the same stats= on "
            "every rank (or read each rank's recording on its own)"
        )
    items: list[Any] = []
    seen: dict[str, tuple[int, Any]] = {}
    for rank, spec in enumerate(specs):
        for item in spec or ():
            # Histograms and vectors per channel / per sample are kept as they are (their
            # counts and vectors are copied over); each other statistic, block-format
            # ones included, as its value (read with the rank's own layout), one name
            # each; the element count, which every row has, as the built-in.
            for name in _names(item):
                if isinstance(item, (Histogram, PerAxis, AttentionLogits)) or name == "numel":
                    kept = item
                else:
                    kept = CustomName(name)
                if name in seen:
                    first, before = seen[name]
                    if isinstance(item, (Histogram, PerAxis, AttentionLogits)) and before != item:
                        raise error(
                            f"ranks {first} and {rank} recorded statistics named {name!r} "
                            f"configured differently ({before} and {item}); they cannot "
                            "share a column: give each configuration its own name"
                        )
                    continue
                seen[name] = (rank, item)
                if not isinstance(item, AttentionLogits) or name == item.names[0]:
                    items.append(kept)  # an item of two vectors (attention_logits) once
    try:
        return stats_fn_of(tuple(items))
    except ArgumentValueError as clash:  # e.g. a custom statistic named like a histogram's count
        raise error(f"the ranks' statistics cannot be merged: {clash}") from None


def spec_names(spec: tuple[Any, ...] | None) -> tuple[str, ...]:
    """The statistics a layout spec records, by name (a histogram by its counts' name)."""
    return tuple(name for item in spec or () for name in _names(item))


def _names(item: Any) -> tuple[str, ...]:
    if isinstance(item, str):
        return (item,)
    return item.names if isinstance(item, (Blocks, AttentionLogits)) else (item.name,)


def _convert(source: Layout, into: Layout, raw: Tensor, numel: Tensor) -> Tensor:
    """Raw vectors `raw` of layout `source` as raw vectors of `into`, a layout built by
    `merged_stats`: its values (one slot each, in spec order) then its histograms' counts;
    NaN where `source` did not record a statistic."""
    customs = [item.name for item in into.spec if isinstance(item, CustomName)]
    out = torch.full((raw.shape[0], into.width), NAN, dtype=F64)
    values = source.derive(raw, numel, [name for name in customs if name in source])
    for slot, name in enumerate(customs):
        if name in values:
            out[:, slot] = values[name]
    # The histograms' slots are the last of a raw vector, in spec order, `bins + 5` each.
    source_hists = [item for item in source.spec if isinstance(item, Histogram)]
    at = source.width - sum(h.bins + 5 for h in source_hists)
    where: dict[str, int] = {}
    for h in source_hists:
        where[h.name], at = at, at + h.bins + 5
    slot = len(customs)
    for h in (item for item in into.spec if isinstance(item, Histogram)):
        if h.name in where:
            out[:, slot : slot + h.bins + 5] = raw[:, where[h.name] : where[h.name] + h.bins + 5]
        slot += h.bins + 5
    return out


def stats_fn_of(spec: tuple[Any, ...] | None) -> StatsFn | None:
    """The `StatsFn` reading raw vectors of `spec` (custom statistics are not computable)."""
    if spec is None:
        return None
    from .recording import spec_from_json, spec_to_json

    return spec_from_json(spec_to_json(spec))


def combined_frame(columns: Columns, ranks: Sequence[int], stats_names: Sequence[str]) -> Any:
    """The statistics of each logical tensor over the ranks (see `Tracker.combined`): one
    row per (step, name, kind, attr, grad, call), the raw vectors of its ranks' rows
    combined exactly (`tensor_tracker.stats.combine`); column `ranks` counts them."""
    pd = require("pandas", "pandas")
    np = require("numpy", "pandas")
    from .._data.frame import first_stats, meta_columns
    from ..stats._merging import combine_table

    store = columns.store
    if not isinstance(store, StatsStore):
        raise ArgumentValueError(
            "combined(): the records hold copies, not statistics; record with stats=... "
            "(copies of different ranks are combined by concatenating them yourself)"
        )
    n = len(columns)
    flags = np.frombuffer(columns.flags, dtype=np.uint8) if n else np.empty(0, np.uint8)
    refs = np.frombuffer(columns.ref, dtype=np.int32).astype(np.int64) if n else np.empty(0)
    in_store = (flags & (OBJECT | STASH)) == 0
    tuples = np.flatnonzero(flags & REFS)
    first = [next(r for r in columns.objects[refs[i]] if r is not None) for i in tuples]
    picked = np.concatenate([refs[in_store], np.array(first, np.int64)])
    raw, numel = store.table(torch.from_numpy(picked))
    # Statistics kept in objects (the first tensor of a dict or nested output), alike.
    spec = store.layout.spec
    extra_rows, extra_raw, extra_numel = [], [], []
    for i in np.flatnonzero(~in_store & ((flags & REFS) == 0)):
        found = first_stats(columns.value_at(int(i)))
        if found is not None and found.layout.spec == spec:
            extra_rows.append(int(i))
            extra_raw.append(found.raw.detach().to("cpu", torch.float64))
            extra_numel.append(float(found.numel))
    if extra_rows:
        raw = torch.cat([raw, torch.stack(extra_raw)])
        numel = torch.cat([numel, torch.tensor(extra_numel, dtype=torch.float64)])
    rows = np.concatenate([np.flatnonzero(in_store), tuples, np.array(extra_rows, np.int64)])
    order = torch.from_numpy(np.argsort(rows, kind="stable"))  # recording order
    rows, raw, numel = rows[order.numpy()], raw[order], numel[order]
    whole = {int(i): columns.objects[refs[i]] for i in extra_rows if flags[i] & STASH}
    meta = pd.DataFrame(meta_columns(columns, whole)).iloc[rows]
    meta["rank"] = np.asarray(ranks, dtype=np.int64)[rows]
    keys = ["step", "name", "kind", "attr", "grad", "call"]
    group = meta.groupby(keys, sort=False).ngroup().to_numpy()
    groups = int(group.max()) + 1 if len(group) else 0
    out, total = combine_table(
        store.layout, raw, numel, torch.from_numpy(group.astype(np.int64)), groups
    )
    firsts = np.unique(group, return_index=True)[1] if len(group) else np.empty(0, np.int64)
    frame = meta.iloc[firsts].drop(columns=["rank"]).reset_index(drop=True)
    frame["ranks"] = np.bincount(group, minlength=groups) if len(group) else []
    derived = store.layout.derive(out, total, stats_names or None)
    for name, column in derived.items():
        frame[name] = column.tolist() if column.dim() == 2 else column.numpy()
    return frame


_RANK_PART = re.compile(r"rank-(\d+)")


def rank_parts(path: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The `rank-N` recordings in the run directory `path` (what `track(...,
    stream_to=path)` writes under `torch.distributed`), by rank; empty when `path` is a
    recording itself or holds none. A run directory from someone else is untrusted input:
    each part must be a directory inside it (not a symbolic link, which could lead to any
    recording on the machine), one per rank. Ranks missing between them (`rank-0` and
    `rank-5` only) are read with a warning naming the missing ones.

    Raises:
        RecordingError: a `rank-N` entry is a symbolic link or not a directory, or two
            entries name one rank (`rank-0` and `rank-00`).
    """
    root = Path(path)
    if os.path.lexists(root / META) or not root.is_dir():
        return []
    found: dict[int, Path] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            match = _RANK_PART.fullmatch(entry.name)
            if match is None:
                continue
            part = root / entry.name
            if entry.is_symlink():
                raise RecordingError(
                    f"{part} is a symbolic link; a run directory holds its ranks' recordings "
                    "themselves: load the recording it points to by its own path, or put it "
                    "in its place"
                )
            if not entry.is_dir(follow_symlinks=False):
                raise RecordingError(f"{part} is not a directory, not a rank's recording")
            rank = int(match.group(1))
            if rank in found:
                raise RecordingError(
                    f"{root}: {found[rank].name} and {entry.name} both name rank {rank}; "
                    "remove the one that is not from this run"
                )
            found[rank] = part
    ranks = sorted(found)
    # The gaps between the ranks found, as ranges (a hostile rank-999999999 costs nothing).
    gaps = [(a + 1, b - 1) for a, b in zip([-1, *ranks], ranks, strict=False) if b > a + 1]
    if gaps:
        missing = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps)
        warnings.warn(
            f"{root}: no recording of rank(s) {missing}: read the {len(ranks)} rank(s) there "
            f"(world_size {ranks[-1] + 1}); a rank whose rank-N directory was removed or "
            "never written is missing from every frame",
            RuntimeWarning,
            stacklevel=3,
        )
    return [(rank, found[rank]) for rank in ranks]
