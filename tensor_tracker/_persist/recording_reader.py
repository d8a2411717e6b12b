"""The checked reading of a recording's commits (`tensor_tracker._persist.recording` reads the
metadata and journal, then hands each commit here): a commit's blocks are checked against
their file, checksum, run id and schema, its rows against the sites and statistics known,
and it is appended whole or not at all. What each block will take in memory is charged to
the load's `Budget` before it is allocated.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
from array import array
from pathlib import Path
from typing import Any, get_args

from torch import Tensor

from .._core.columns import GRAD, TRAINING, TUPLE, Columns, Site
from .._core.records import Kind, LogEntry
from .._optional import require
from ..errors import RecordingError
from ..stats import StatsFn
from .integrity import Budget, checksum, load_json, read_inside, unpack
from .recording_codec import LOG, RECORDS, RUN_KEY, SITES, TENSORS, decode, module_class, schemas

__all__ = ["Block", "CommitReader", "commit_blocks"]

# What a load holds beyond the decompressed bytes it charges (see `CommitReader.charge`),
# measured with some margin: per row of each file (a site's stand-in class, a log entry's
# objects, a record's columns and step), per statistic kept per channel or sample (its
# start and length), and per byte of text (JSON values and names become Python objects:
# `[[],[],...]` takes 64 bytes per 3 of text, and twice that while it is decoded).
_ROW_COST = {"sites.blocks": 8192, "records.blocks": 128, "log.blocks": 512}
_VECTOR_COST = 64
_TEXT_COST = 48
_FLUSH = 32 << 20  # bytes of statistics-only tables gathered before they are appended


@dataclasses.dataclass
class Block:
    """One block of a journal line (see the format)."""

    file: str
    at: int
    size: int
    raw: int
    zstd: bool
    crc: int


def commit_blocks(
    commit: dict[str, Any], run: str, ends: dict[str, int], where: Path
) -> tuple[list[Block], dict[str, Any] | None]:
    """The blocks and tensors file of one journal line, checked (types, run, no gap)."""
    if commit.get("run") != run:
        raise RecordingError(f"{where}: a commit of another run ({commit.get('run')!r})"[:200])
    blocks, tensors = commit.get("blocks"), commit.get("tensors")
    if not isinstance(blocks, list):
        raise RecordingError(f"{where}: a commit without its list of blocks")
    out = []
    for item in blocks:
        if not isinstance(item, dict) or item.get("file") not in (SITES, RECORDS, LOG):
            raise RecordingError(f"{where}: a malformed block {item!r}"[:200])
        keys = ("file", "at", "size", "raw", "zstd", "crc")  # each checked below
        block = Block(*(item.get(key) for key in keys))  # type: ignore[arg-type]
        numbers = (block.at, block.size, block.raw, block.crc)
        if not all(type(x) is int and x >= 0 for x in numbers) or type(block.zstd) is not bool:
            raise RecordingError(f"{where}: a malformed block {item!r}"[:200])
        if block.at != ends.get(block.file, 0):
            raise RecordingError(f"{where}: a block of {block.file} at {block.at} leaves a gap")
        ends[block.file] = block.at + block.size
        out.append(block)
    if not out or not all(block.size for block in out):
        # The writer never commits nothing, nor an empty block: every commit costs bytes of
        # the blocks files, which bounds the commits (and the work) per byte.
        raise RecordingError(f"{where}: a commit without blocks, or with an empty one")
    if tensors is not None:
        ok = isinstance(tensors, dict) and isinstance(tensors.get("name"), str)
        if not ok or not re.fullmatch(r"\d{6,}\.safetensors", tensors["name"]):
            raise RecordingError(f"{where}: a malformed tensors entry {tensors!r}"[:200])
        if not all(type(tensors.get(k)) is int and tensors[k] >= 0 for k in ("size", "crc")):
            raise RecordingError(f"{where}: a malformed tensors entry {tensors!r}"[:200])
    return out, tensors


class CommitReader:
    """Reads and checks the commits of one recording, appending them to `columns`."""

    def __init__(self, root: Path, run: str, stats: StatsFn | None, budget: Budget) -> None:
        pa = require("pyarrow", "save")
        self.root = root
        self.budget = budget
        self.run = run
        self.stats = stats
        self.store = None if stats is None else stats.store()
        self.columns = Columns(self.store)
        self.log: list[LogEntry] = []
        self.width = 0 if stats is None else stats.layout.width
        self.vectors = 0 if stats is None else len(stats.layout.vectors)
        self.schemas = schemas(pa, self.width, run, self.vectors)
        self.files: dict[str, bytes] = {}
        self.sites = 0
        self.steps: set[int] = set()
        self.pending: list[Any] = []  # see `append`
        self.pending_bytes = 0

    def _file(self, name: str) -> bytes:
        data = self.files.get(name)
        if data is None:
            found = read_inside(self.root, name)
            if found is None:
                raise RecordingError(f"{self.root / name} is missing (the journal names it)")
            self.budget.charge(len(found), self.root / name)
            data = self.files[name] = found
        return data

    def trailing(self, ends: dict[str, int]) -> list[str]:
        """The files holding bytes after their last commit (a write cut short)."""
        out = []
        for name in (SITES, RECORDS, LOG):
            try:
                size = os.lstat(self.root / name).st_size
            except OSError:
                continue
            if size > ends.get(name, 0):
                out.append(f"{name} ({size - ends.get(name, 0)} bytes)")
        return out

    def table(self, block: Block) -> Any:
        """One block as a checked Arrow table."""
        pa = require("pyarrow", "save")
        where = f"{self.root / block.file} at byte {block.at}"
        data = self._file(block.file)
        if block.at + block.size > len(data):
            raise RecordingError(
                f"{self.root / block.file} is truncated: {len(data)} bytes, the journal "
                f"commits {block.at + block.size}"
            )
        stored = memoryview(data)[block.at : block.at + block.size]
        if checksum(stored) != block.crc:
            raise RecordingError(f"{where}: fails its checksum (corrupted)")
        self.budget.charge(block.raw, where)  # before decompressing: then its copy
        raw = pa.py_buffer(unpack(stored, block.zstd, block.raw, where))
        try:
            kinds = [_kind(message) for message in pa.ipc.MessageReader.open_stream(raw)]
        except (pa.ArrowException, OSError, ValueError, struct.error) as error:
            raise RecordingError(f"{where}: not a readable Arrow block ({error})") from error
        # Buffers compressed inside the stream would decompress past every bound above;
        # the writer never compresses them.
        odd = sorted(set(kinds) - {"schema", "record batch"})
        if odd:
            raise RecordingError(
                f"{where}: an Arrow block with a {odd[0]} message (a recording's blocks hold "
                "a schema and uncompressed record batches)"
            )
        try:
            table = pa.ipc.open_stream(raw).read_all()
            table.validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise RecordingError(f"{where}: not a readable Arrow block ({error})") from error
        expected = self.schemas[block.file]
        if (table.schema.metadata or {}).get(RUN_KEY) != self.run.encode():
            raise RecordingError(f"{where}: a block of another run")
        if not table.schema.equals(expected):
            raise RecordingError(f"{where}: columns {table.schema.names} of unexpected types")
        self.charge(block.file, table, where)
        return table

    def charge(self, file: str, table: Any, where: str) -> None:
        """Charge the Python objects and copies a checked block's rows will take."""
        pa = require("pyarrow", "save")
        text = sum(  # the characters of the strings (a buffer may reach past a slice: more)
            chunk.buffers()[2].size
            for field in table.schema
            if pa.types.is_string(field.type)
            for chunk in table.column(field.name).chunks
            if chunk.buffers()[2] is not None
        )
        cost = _ROW_COST[file] + (_VECTOR_COST * self.vectors if file == RECORDS else 0)
        self.budget.charge(len(table) * cost + _TEXT_COST * text, where)

    def commit(self, blocks: list[Block], tensors_entry: dict[str, Any] | None) -> None:
        """Read one commit whole (nothing is appended when it fails)."""
        tables = [(block.file, self.table(block)) for block in blocks]
        tensors = self.tensors(tensors_entry)
        sites: list[Site] = []
        records = []
        log: list[LogEntry] = []
        for name, table in tables:
            if name == SITES:
                sites.extend(self.new_sites(table, self.sites + len(sites)))
            elif name == RECORDS:
                records.append(table)
            else:
                log.extend(self.log_entries(table))
        known = self.sites + len(sites)
        checked = [self.check_records(t, known, tensors_entry) for t in records]
        objects = [self.objects(t, tensors) for t in records]
        for site in sites:
            self.columns.site_id(*site)
        self.sites = known
        for table, rows, values in zip(records, checked, objects, strict=True):
            self.append(table, rows, values)
        self.log.extend(log)

    def tensors(self, entry: dict[str, Any] | None) -> dict[str, Tensor]:
        if entry is None:
            return {}
        from safetensors import SafetensorError
        from safetensors.torch import load

        name = f"{TENSORS}/{entry['name']}"
        path = self.root / name
        # The bytes, then the tensors copied out of them.
        self.budget.charge(2 * entry["size"], path)
        data = read_inside(self.root, name, entry["size"])
        if data is None:
            raise RecordingError(f"{path} is missing (the journal names it)")
        if len(data) != entry["size"] or checksum(data) != entry["crc"]:
            raise RecordingError(f"{path} fails its checksum or size (corrupted)")
        header_size = int.from_bytes(data[:8], "little")
        header = load_json(data[8 : 8 + header_size], path) if header_size < len(data) else None
        run = header.get("__metadata__", {}).get("run") if isinstance(header, dict) else None
        if run != self.run:
            raise RecordingError(f"{path}: tensors of another run")
        try:
            return load(data)
        except (SafetensorError, ValueError, RuntimeError, TypeError) as error:
            raise RecordingError(f"{path}: cannot be read ({error})") from error

    def new_sites(self, table: Any, first: int) -> list[Site]:
        data = table.to_pydict()
        ids = data["site"]
        if ids != list(range(first, first + len(ids))):
            raise RecordingError(f"{self.root / SITES}: site ids out of order")
        out = []
        for name, type_, kind, attr in zip(
            data["name"], data["type"], data["kind"], data["attr"], strict=True
        ):
            if None in (name, type_, kind, attr) or kind not in get_args(Kind):
                raise RecordingError(f"{self.root / SITES}: a site with a missing or unknown field")
            out.append(Site(name, module_class(type_), kind, attr))
        return out

    def log_entries(self, table: Any) -> list[LogEntry]:
        data = table.to_pydict()
        return [
            LogEntry(step, name, math.nan if value is None else value, text)
            for step, name, value, text in zip(
                data["step"], data["name"], data["value"], data["text"], strict=True
            )
            if step is not None or _bad(self.root / LOG, "a log entry without a step")
        ]

    def check_records(self, table: Any, sites: int, entry: dict[str, Any] | None) -> Any:
        """The indices of the statistics rows of `table`, after checking every row."""
        np = require("numpy", "save")
        where = self.root / RECORDS
        for name in ("step", "call", "site", "flags"):
            if table.column(name).null_count:
                raise RecordingError(f"{where}: records without a {name}")
        site = table.column("site").to_numpy()
        if len(site) and (site.min() < 0 or site.max() >= sites):
            raise RecordingError(f"{where}: a record names a site outside 0..{sites - 1}")
        if len(site) and table.column("call").to_numpy().min() < 0:
            raise RecordingError(f"{where}: a record with a negative call")
        if (table.column("flags").to_numpy() & (0xFF ^ (GRAD | TRAINING | TUPLE))).any():
            raise RecordingError(f"{where}: a record with unknown flags")
        stats_rows = np.flatnonzero(table.column("value").is_null().to_numpy(zero_copy_only=False))
        if len(stats_rows):
            numel = table.column("numel").to_numpy(zero_copy_only=False)[stats_rows]
            raw_null = table.column("raw").is_null().to_numpy(zero_copy_only=False)[stats_rows]
            if self.store is None or raw_null.any() or np.isnan(numel).any() or (numel < 0).any():
                raise RecordingError(f"{where}: statistics rows without their numbers")
        if self.vectors:
            self.check_vectors(table, stats_rows)
        names = set(table.column("tensors").drop_null().to_pylist())
        if names - {None if entry is None else entry["name"]}:
            raise RecordingError(f"{where}: records name a tensors file their commit has not")
        return stats_rows

    def check_vectors(self, table: Any, stats_rows: Any) -> None:
        """The `vectors` column: one list of `self.vectors` vectors on each statistics
        row (none elsewhere), each vector at most its row's `numel` long, nothing null."""
        pa = require("pyarrow", "save")
        np = require("numpy", "save")
        where = self.root / RECORDS
        column = table.column("vectors").combine_chunks()
        null = column.is_null().to_numpy(zero_copy_only=False)
        is_stats = np.zeros(len(table), dtype=bool)
        is_stats[stats_rows] = True
        if (null == is_stats).any():
            raise RecordingError(f"{where}: statistics rows without their vectors, or others with")
        held = column.filter(pa.array(is_stats))
        counts = pa.compute.list_value_length(held).to_numpy(zero_copy_only=False)
        if (counts != self.vectors).any():
            raise RecordingError(f"{where}: a statistics row without {self.vectors} vectors")
        inner = held.flatten()
        if inner.null_count or inner.flatten().null_count:
            raise RecordingError(f"{where}: a null vector or value")
        lengths = pa.compute.list_value_length(inner).to_numpy(zero_copy_only=False)
        numel = table.column("numel").to_numpy(zero_copy_only=False)[stats_rows]
        if (lengths > np.repeat(numel, self.vectors)).any():
            raise RecordingError(f"{where}: a vector longer than its tensor has values")

    def vector_rows(self, column: Any, rows: Any) -> list[tuple[list[int], bytes]] | None:
        """The vectors of the statistics rows `rows` of a checked `vectors` column, per
        statistic: lengths and float64 bytes (what `StatsStore.add_host_rows` takes)."""
        if not self.vectors:
            return None
        pa = require("pyarrow", "save")
        np = require("numpy", "save")
        inner = column.combine_chunks().take(pa.array(rows, pa.int64())).flatten()
        out = []
        for k in range(self.vectors):
            picked = inner.take(pa.array(np.arange(k, len(inner), self.vectors), pa.int64()))
            lengths = pa.compute.list_value_length(picked).to_numpy(zero_copy_only=False)
            values = picked.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
            out.append((lengths.astype(np.int64).tolist(), values.tobytes()))
        return out

    def objects(self, table: Any, tensors: dict[str, Tensor]) -> dict[int, Any]:
        """The decoded values of the rows that hold one, by row."""
        out = {}
        for row, value in enumerate(table.column("value").to_pylist()):
            if value is None:
                continue
            try:
                out[row] = decode(json.loads(value), tensors, self.stats)
            except (KeyError, TypeError, ValueError, RuntimeError, RecursionError) as error:
                raise RecordingError(
                    f"{self.root / RECORDS}: record {row} of a commit holds a malformed value "
                    f"({type(error).__name__}: {error})"[:300]
                ) from None
        return out

    def append(self, table: Any, stats_rows: Any, objects: dict[int, Any]) -> None:
        """Append a checked table's rows (statistics-only tables are gathered and appended
        together by `finish`, or before the next table holding objects)."""
        np = require("numpy", "save")
        step = table.column("step").to_numpy()
        self.steps.update(np.unique(step).tolist())
        if not objects:
            self.pending.append(table)
            self.pending_bytes += table.nbytes
            if self.pending_bytes > _FLUSH:  # their copies in the store then replace them
                self.finish()
            return
        self.finish()
        self._append_rows(table, objects)

    def finish(self) -> None:
        """Append the gathered statistics-only tables, in one go."""
        if self.pending:
            pa = require("pyarrow", "save")
            table = pa.concat_tables(self.pending)
            self.pending, self.pending_bytes = [], 0
            self._append_rows(table, {})

    def _append_rows(self, table: Any, objects: dict[int, Any]) -> None:
        np = require("numpy", "save")
        site = table.column("site").to_numpy()
        call = table.column("call").to_numpy()
        step = table.column("step").to_numpy()
        flags = table.column("flags").to_numpy()
        if not objects:  # statistics only (the common case): whole columns at once
            assert self.store is not None
            raw = table.column("raw").combine_chunks().flatten().to_numpy()
            numel = table.column("numel").to_numpy().astype(np.int64)
            vectors = (
                self.vector_rows(table.column("vectors"), np.arange(len(site)))
                if self.vectors
                else None
            )
            first, stride = self.store.add_host_rows(
                raw.astype(np.float64).tobytes(), numel.tobytes(), vectors
            )
            refs = first + stride * np.arange(len(site), dtype=np.int64)
            self.columns.add_rows(site, call, step, flags, refs)
            return
        raws = table.column("raw")
        numels = table.column("numel")
        for row in range(len(site)):
            s, c, t, f = int(site[row]), int(call[row]), int(step[row]), int(flags[row])
            if row in objects:
                self.columns.add_object(s, c, t, f, objects[row])
                continue
            assert self.store is not None
            raw = array("d", raws[row].as_py()).tobytes()
            numel = array("q", [numels[row].as_py()]).tobytes()
            vectors = self.vector_rows(table.column("vectors"), [row]) if self.vectors else None
            ref, _ = self.store.add_host_rows(raw, numel, vectors)
            self.columns.add(s, c, t, f, ref)


def _kind(message: Any) -> str:
    """An Arrow IPC message's type, `"compressed record batch"` for a record batch that
    declares compressed buffers: the `compression` field (3) of its `RecordBatch`
    flatbuffer (the message's `header`, field 2)."""
    if message.type != "record batch":
        return str(message.type)
    data = message.metadata.to_pybytes()
    header = _field(data, _table(data, 0), 2)
    if header is not None and _field(data, _table(data, header), 3) is not None:
        return "compressed record batch"
    return "record batch"


def _table(data: bytes, at: int) -> int:
    """Where the flatbuffer table that the offset at `at` points to starts."""
    return at + int(struct.unpack_from("<I", data, at)[0])


def _field(data: bytes, table: int, index: int) -> int | None:
    """Where field `index` of the flatbuffer table at `table` is (`None`: absent)."""
    vtable = table - int(struct.unpack_from("<i", data, table)[0])
    if vtable < 0 or 6 + 2 * index > struct.unpack_from("<H", data, vtable)[0]:
        return None
    offset = int(struct.unpack_from("<H", data, vtable + 4 + 2 * index)[0])
    return table + offset if offset else None


def _bad(where: Path, what: str) -> bool:
    raise RecordingError(f"{where}: {what}")
