"""Recordings on disk: `RecordingWriter` appends a tracker's records to a directory step by
step; `read_recording` reads one back. No pickle is involved either way, and a recording
from someone else is read as untrusted input (see "Reading" below).

Format (`FORMAT`, version `VERSION` = 2), a directory holding:

``recording.json``
    ``{"format": "tensor_tracker.recording", "version": 2, "run": <32 hex digits>,
    "stats": <spec or null>, "complete": <bool>, "commits": <int>, "writer": {"pid",
    "host"}, "torch": ..., "tensor_tracker": ..., "checksum": <int>}``. ``run`` is a random
    id of this recording, repeated in every other file. ``stats`` is the statistics spec
    (names, ``{"custom": name}``, ``{"histogram": {...}}``) the raw vectors follow.
    ``complete`` is true once the writer closed (or paused) the recording, with
    ``commits`` the number of journal lines then. ``checksum`` is the CRC32 of the other
    fields as ``json.dumps(fields, sort_keys=True, separators=(",", ":"))``. Replaced
    whole (written to a temporary name, then renamed).
``writer.lock``
    Empty. The writer holds an exclusive ``fcntl.flock`` on it from before it writes
    anything until it closes; the kernel releases it when the process ends however it ends
    (``kill -9`` too), so "is a writer still appending?" never depends on a pid. Claiming
    the lock is what makes a second writer on the same directory fail at once.
``journal``
    One line per commit: the CRC32 of the line's JSON as 8 hex digits, a space, the JSON,
    a newline. The JSON is ``{"run", "seq", "blocks": [...], "tensors": null or {"name",
    "size", "crc"}}``; each block is ``{"file", "at", "size", "raw", "zstd", "crc"}``: the
    bytes ``[at, at + size)`` of ``file`` (CRC32 ``crc``), zstd-compressed when ``zstd``
    (then ``raw`` bytes once decompressed, at most 64 times ``size`` plus 64 KiB: a block
    that compresses better is stored uncompressed), each one an Arrow IPC stream of one
    record batch whose schema metadata holds ``tensor_tracker.run``. Blocks of a file
    follow each other with no gap.
``sites.blocks``
    ``(site int32, name, type, kind, attr)`` rows: one per module part, in order of
    ``site`` (0, 1, ...), committed with the first record that uses it. ``type`` is the
    module class's ``"<module>.<qualname>"``, a name only: loading never imports it.
``records.blocks``
    ``step int64, call int32, site int32, flags uint8`` (`GRAD` 1, `TRAINING` 2, `TUPLE` 4
    as in `tensor_tracker.core.columns`), then the value: statistics as ``numel int64`` and
    ``raw`` (a fixed-size list of float64, the `Layout`'s raw vector), or ``value``, a JSON
    text for anything else, where ``{"$tensor": key}`` is a tensor stored under ``key`` in
    the commit's ``tensors`` file, ``{"$stats": [...], "numel": n}`` statistics,
    ``{"$tuple": [...]}`` a tuple, ``{"$dict": [[key, value], ...]}`` a dict,
    ``{"$unrecorded": [type, reason]}`` an `Unrecorded`, ``{"$torch": "torch.float32"}`` and
    ``{"$device": "cpu"}`` torch's dtypes, layouts and devices, ``{"$repr": text}`` another
    plain value (loaded as that text, never evaluated) (the other containers the tracker
    walks are stored as what they hold: mappings, dataclasses and Hugging Face caches as
    dicts, pytree nodes as lists).
``log.blocks``
    ``(step int64, name, value float64, text)``: scalars from `Tracker.log` (``text``
    null) and notes from `Tracker.note` (``name`` null).
``tensors/<n>.safetensors``
    The full tensors of one commit (safetensors: no code), its ``__metadata__`` holding
    ``run``; named, sized and checksummed by its journal line.

Writing: each `RecordingWriter.write` (one step of a streaming tracker: its records, new
sites and log entries) appends its blocks, then its tensors file, then its journal line,
the commit. Until that line is whole on disk the step does not exist for a reader. An
exception in between (`KeyboardInterrupt` too) cuts every file back to the last commit
before it propagates, so a step is written whole or not at all. A full disk
(``ENOSPC``) does the same, then closes the recording (which stays loadable) and raises
one `RecordingError` naming the directory and its free space.

Reading: a reader checks, before it allocates anything sized by the file, that every
file is a regular file inside the directory (``..``, absolute paths and symbolic links
are refused, FIFOs are never read), every block lies inside its file, has its checksum
and run id, decompresses to no more than it declares, and every site id, flag, size and
statistics width is in range. Any problem is a `RecordingError` naming the file and what
is wrong; with ``recover=True`` the commits before the first problem are read, with a
warning saying what was dropped. A recording whose writer stopped without closing it
(killed, crashed: its lock is free but ``complete`` is false) loads its whole commits and
warns once; `Recording.complete` says so.

Version 2 (checksums, journal, lock, ``.blocks`` files) replaced version 1 (plain Arrow
streams with compressed buffers, a pid for liveness), which cannot be read safely (its
sizes are unchecked until decompressed): reading one raises a `RecordingError` saying it
is from the older format.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.metadata
import json
import math
import os
import re
import shutil
import socket
import sys
import uuid
import warnings
import weakref
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import SUPPORTED_NODES

from .._optional import require
from ..core.columns import GRAD, OBJECT, REFS, STASH, TRAINING, TUPLE, Columns, Site
from ..core.records import LogEntry, Stash, Unrecorded
from ..core.stash_fns import _IMMUTABLE
from ..core.structure import _walks_attributes
from ..errors import ArgumentValueError, RecordingError, TensorTrackerError
from ..stats import Histogram, Stats, StatsFn
from ..stats.spec import CustomName, Statistic
from ..stats.store import StatsStore
from .frame import type_name
from .integrity import (
    AppendFile,
    WriterLock,
    checksum,
    commit_line,
    load_json,
    pack,
    read_commits,
    read_inside,
    unpack,
    writer_alive,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "Recording",
    "RecordingWriter",
    "read_recording",
]

FORMAT = "tensor_tracker.recording"
VERSION = 2
_META = "recording.json"
_JOURNAL = "journal"
_SITES = "sites.blocks"
_RECORDS = "records.blocks"
_LOG = "log.blocks"
_TENSORS = "tensors"
_RUN_KEY = b"tensor_tracker.run"
_MAX_BINS = 1 << 20  # histogram bins a recording may declare (8 MiB per raw vector)
_MAX_META = 1 << 20  # bytes of recording.json
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _require_arrow() -> Any:
    return require("pyarrow", "save")


# -- the statistics spec as JSON ---------------------------------------------------------


def _spec_to_json(spec: Sequence[str | Histogram | CustomName]) -> list[Any]:
    out: list[Any] = []
    for item in spec:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, CustomName):
            out.append({"custom": item.name})
        else:
            out.append({"histogram": dataclasses.asdict(item)})
    return out


def _spec_from_json(items: Any) -> StatsFn:
    """The `StatsFn` of a spec read from JSON (checked: a `RecordingError` says what is
    wrong, before anything is sized by it)."""
    if not isinstance(items, list) or not items:
        raise RecordingError(f"the statistics spec is not a list of statistics: {items!r}"[:200])
    spec: list[Any] = []
    try:
        for item in items:
            if isinstance(item, str):
                spec.append(item)
            elif isinstance(item, dict) and isinstance(item.get("custom"), str):
                spec.append(Statistic(item["custom"], _not_recomputable))
            elif isinstance(item, dict) and isinstance(item.get("histogram"), dict):
                fields = dict(item["histogram"])
                bins = fields.get("bins")
                if not isinstance(bins, int) or not 0 < bins <= _MAX_BINS:
                    raise RecordingError(f"a histogram of {bins!r} bins (at most {_MAX_BINS})")
                if not isinstance(fields.get("range"), (list, tuple)):
                    raise RecordingError(f"a histogram range of {fields.get('range')!r}")
                fields["range"] = tuple(fields["range"])
                spec.append(Histogram(**fields))
            else:
                raise RecordingError(f"an unknown statistic {item!r}"[:200])
        return StatsFn(spec)
    except RecordingError as error:
        raise RecordingError(f"the statistics spec holds {error}") from None
    except (TensorTrackerError, TypeError, ValueError) as error:
        raise RecordingError(f"the statistics spec cannot be used: {error}"[:300]) from None


def _not_recomputable(tensor: Tensor) -> Tensor:
    raise TensorTrackerError(
        "a custom statistic of a loaded recording has no function to compute it again"
    )


# -- values as JSON (tensors in a side table) --------------------------------------------


class _Encoder:
    """Turns one batch's object values into JSON text, collecting tensors by key."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tensors: dict[str, Tensor] = {}

    def encode(self, value: Any, where: str) -> str:
        return json.dumps(self._plain(value, where), allow_nan=True, separators=(",", ":"))

    def _plain(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value
        if isinstance(value, Tensor):
            key = f"{self.prefix}{len(self.tensors)}"
            # safetensors needs dense, contiguous CPU tensors that own their memory.
            self.tensors[key] = value.detach().to("cpu", copy=True).contiguous()
            return {"$tensor": key}
        if isinstance(value, Stats):
            return {"$stats": value._host_values(), "numel": value.numel}
        if isinstance(value, Unrecorded):
            return {"$unrecorded": [value.type, value.reason]}
        # The plain values a stash keeps (see `Unrecorded`): torch's own types by name,
        # the others as their repr (loaded as that text; nothing is evaluated).
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return {"$torch": str(value)}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        numpy = sys.modules.get("numpy")
        plain = _IMMUTABLE if numpy is None else (*_IMMUTABLE, numpy.generic, numpy.ndarray)
        if isinstance(value, plain) and not isinstance(value, (tuple, list)):
            return {"$repr": repr(value)}
        if isinstance(value, tuple):  # namedtuples too: first_value unwraps them alike
            return {"$tuple": [self._plain(v, where) for v in value]}
        if isinstance(value, list):
            return [self._plain(v, where) for v in value]
        # The other containers the tracker walks (see `rmap_tensor`), stored as the dict
        # or list they hold: mappings, dataclasses, Hugging Face caches, pytree nodes.
        items: Any = None
        if isinstance(value, Mapping):
            items = list(value.items())
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
        elif _walks_attributes(value):
            items = list(vars(value).items())
        elif type(value) in SUPPORTED_NODES:
            children = SUPPORTED_NODES[type(value)].flatten_fn(value)[0]
            return [self._plain(v, where) for v in children]
        if items is not None:
            return {"$dict": [[self._plain(k, where), self._plain(v, where)] for k, v in items]}
        raise ArgumentValueError(
            f"save: {where} holds a {type(value).__module__}.{type(value).__qualname__}, which "
            "cannot be saved without pickle; recordings hold tensors, statistics, numbers, "
            "strings, None, and tuples/lists/dicts of them (make stash_value= return those)"
        )


def _decode(plain: Any, tensors: dict[str, Tensor], layout_fn: StatsFn | None) -> Any:
    """A value from its JSON form; malformed input raises `KeyError`, `TypeError`,
    `ValueError` or `RuntimeError`, which the reader reports as a `RecordingError`."""
    if isinstance(plain, list):
        return [_decode(v, tensors, layout_fn) for v in plain]
    if not isinstance(plain, dict):
        return plain
    if len(plain) == 1 and "$tensor" in plain:
        return tensors[plain["$tensor"]]
    if len(plain) == 1 and isinstance(plain.get("$tuple"), list):
        return tuple(_decode(v, tensors, layout_fn) for v in plain["$tuple"])
    if len(plain) == 1 and isinstance(plain.get("$dict"), list):
        out = {}
        for key, value in plain["$dict"]:
            key = _decode(key, tensors, layout_fn)
            hash(key)  # TypeError for a list key
            out[key] = _decode(value, tensors, layout_fn)
        return out
    if len(plain) == 1 and "$unrecorded" in plain:
        kind, reason = plain["$unrecorded"]
        if not isinstance(kind, str) or not isinstance(reason, str):
            raise TypeError("an $unrecorded value is not two strings")
        return Unrecorded(kind, reason)
    if len(plain) == 1 and isinstance(plain.get("$torch"), str):
        found = getattr(torch, plain["$torch"].removeprefix("torch."), None)
        kinds = (torch.dtype, torch.layout, torch.memory_format)
        return found if isinstance(found, kinds) else plain["$torch"]
    if len(plain) == 1 and isinstance(plain.get("$device"), str):
        return torch.device(plain["$device"])
    if len(plain) == 1 and isinstance(plain.get("$repr"), str):
        return plain["$repr"]
    if len(plain) == 2 and isinstance(plain.get("$stats"), list):
        if layout_fn is None:
            raise ValueError("statistics in a recording whose metadata names none")
        values, numel = plain["$stats"], plain["numel"]
        layout = layout_fn.layout
        if len(values) != layout.width or not all(isinstance(v, (int, float)) for v in values):
            raise ValueError(f"statistics of {len(values)} numbers, not {layout.width}")
        if not isinstance(numel, int) or numel < 0:
            raise ValueError(f"statistics of numel {numel!r}")
        return Stats._of_floats(layout, [float(v) for v in values], numel)
    raise ValueError(f"unknown value {plain!r}"[:200])


# -- writing -----------------------------------------------------------------------------


def _spec_of(columns: Columns) -> tuple[Any, ...] | None:
    store = columns.store
    return store.layout._spec if isinstance(store, StatsStore) else None


def _schemas(pa: Any, width: int, run: str) -> dict[str, Any]:
    """The schema of each blocks file (its metadata holds the run id)."""
    raw_type = pa.list_(pa.float64(), width) if width else pa.list_(pa.float64())
    metadata = {_RUN_KEY: run.encode()}
    string = pa.string()
    return {
        _SITES: pa.schema(
            [
                ("site", pa.int32()),
                ("name", string),
                ("type", string),
                ("kind", string),
                ("attr", string),
            ],
            metadata=metadata,
        ),
        _RECORDS: pa.schema(
            [
                ("step", pa.int64()),
                ("call", pa.int32()),
                ("site", pa.int32()),
                ("flags", pa.uint8()),
                ("numel", pa.int64()),
                ("raw", raw_type),
                ("value", string),
                ("tensors", string),
            ],
            metadata=metadata,
        ),
        _LOG: pa.schema(
            [("step", pa.int64()), ("name", string), ("value", pa.float64()), ("text", string)],
            metadata=metadata,
        ),
    }


class RecordingWriter:
    """Appends a tracker's records to a recording directory (see the module docstring).

    Args:
        path: the directory; created if missing. It must not hold a recording already, nor
            be claimed by another writer (claimed atomically: of two writers starting on one
            directory, one fails).
        stats: the statistics `Layout` spec of the records (`None` without `stats=`).

    Call `write(columns, log)` with the records and log entries to append (one commit;
    they stay where they are), `pause()` at the end of a `with` block and `close()` at the
    end (marks the recording complete, releases the directory).

    Raises:
        ArgumentValueError: `path` holds a recording or another writer is writing it.
    """

    def __init__(self, path: str | os.PathLike[str], stats: tuple[Any, ...] | None) -> None:
        pa = _require_arrow()
        require("safetensors", "save")
        self.path = Path(path)
        self._lock = WriterLock(self.path)  # before anything is read or written
        self._open: dict[str, AppendFile] = {}
        try:
            if os.path.lexists(self.path / _META):
                raise ArgumentValueError(
                    f"{self.path} already holds a recording; choose a new directory (or load "
                    "it with tensor_tracker.load)"
                )
            self._stats = stats
            spec = None if stats is None else _spec_to_json(stats)
            self._width = 0 if spec is None else _spec_from_json(spec).layout.width
            self._run = uuid.uuid4().hex
            self._schemas = _schemas(pa, self._width, self._run)
            self._sites_written = 0
            self.commits = 0
            """How many commits are on disk (a caller compares it around `write` to know
            whether an interrupted write landed)."""
            self._open[_JOURNAL] = AppendFile(self.path / _JOURNAL)
            self._complete = False
            self._write_meta(complete=False)
        except BaseException:
            self._lock.release()
            raise
        self._closed = False
        # A streaming tracker keeps its writer open between `with` blocks (each block's end
        # only pauses it); the files are closed when the writer goes, if not before.
        self._release = weakref.finalize(self, _close_files, self._open, self._lock)

    def _write_meta(self, complete: bool) -> None:
        try:
            version = importlib.metadata.version("tensor-tracker")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "run": self._run,
            "stats": None if self._stats is None else _spec_to_json(self._stats),
            "complete": complete,
            "commits": self.commits,
            "writer": {"pid": os.getpid(), "host": socket.gethostname()},
            "torch": torch.__version__,
            "tensor_tracker": version,
        }
        meta["checksum"] = checksum(_canonical(meta))
        tmp = self.path / f".{_META}.tmp"
        try:
            tmp.write_text(json.dumps(meta, indent=1))
            tmp.replace(self.path / _META)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._complete = complete

    def _file(self, name: str) -> AppendFile:
        file = self._open.get(name)
        if file is None:
            file = self._open[name] = AppendFile(self.path / name)
        return file

    def write(self, columns: Columns, log: Sequence[LogEntry] = ()) -> None:
        """Append every record of `columns` and the entries of `log` as one commit.

        Raises:
            RecordingError: the disk is full or another write error (the message names the
                directory and its free space); the recording is closed first, with every
                earlier commit loadable.
            ArgumentValueError: a record holds a value that cannot be saved without pickle
                (nothing of this call is written).
        """
        pa = _require_arrow()
        if self._closed:
            raise RecordingError(f"{self.path}: this recording was closed; nothing is written")
        blocks: list[tuple[str, Any]] = []
        n = len(columns)
        sites_now = self._sites_written
        tensors: dict[str, Tensor] = {}
        tensors_file = f"{self.commits:06d}.safetensors"
        if n:
            site_of: dict[int, int] = {}
            # Stash objects added by hand (or made by stash=) become ordinary rows.
            for row in range(n):
                if columns.flags[row] & STASH:
                    stash: Stash = columns.objects[columns.ref[row]]
                    site = Site(stash.name, stash.type, stash.kind, stash.attr)
                    site_of[row] = columns.site_id(*site)
            if len(columns.sites) > sites_now:
                blocks.append((_SITES, self._sites_batch(pa, columns.sites[sites_now:])))
            encoder = _Encoder(f"{self.commits}.")
            blocks.append((_RECORDS, self._records_batch(pa, columns, site_of, encoder)))
            tensors = encoder.tensors
            sites_now = len(columns.sites)
        if log:
            blocks.append((_LOG, self._log_batch(pa, log)))
        if not blocks:
            return
        tensors_bytes = None
        if tensors:
            from safetensors.torch import save

            tensors_bytes = save(tensors, metadata={"run": self._run})
        self._commit(pa, blocks, tensors_file if tensors_bytes else None, tensors_bytes)
        self._sites_written = sites_now

    def _sites_batch(self, pa: Any, sites: Sequence[Site]) -> Any:
        return pa.record_batch(
            [
                pa.array(range(self._sites_written, self._sites_written + len(sites)), pa.int32()),
                pa.array([s.name for s in sites], pa.string()),
                pa.array([type_name(s.cls) for s in sites], pa.string()),
                pa.array([s.kind for s in sites], pa.string()),
                pa.array([s.attr for s in sites], pa.string()),
            ],
            schema=self._schemas[_SITES],
        )

    def _records_batch(
        self, pa: Any, columns: Columns, site_of: dict[int, int], encoder: _Encoder
    ) -> Any:
        n = len(columns)
        steps = array("q", bytes(8 * n))
        for k, start in enumerate(columns.step_rows):
            end = columns.step_rows[k + 1] if k + 1 < len(columns.step_rows) else n
            steps[start:end] = array("q", [columns.step_values[k]] * (end - start))
        sites = array("i", columns.site)
        calls = array("i", columns.call)
        flags = array("B", columns.flags)
        numel: list[int | None] = [None] * n
        raw: list[Any] = [None] * n
        values: list[str | None] = [None] * n
        store = columns.store
        for row in range(n):
            f = flags[row]
            where = f"record {row} (step {steps[row]})"
            if f & STASH:
                stash = columns.objects[columns.ref[row]]
                sites[row] = site_of[row]
                calls[row] = stash.call
                steps[row] = stash.step
                flags[row] = (GRAD if stash.grad else 0) | (TRAINING if stash.training else 0)
                values[row] = encoder.encode(stash.value, where)
            elif f & (OBJECT | REFS):
                flags[row] = f & (GRAD | TRAINING)
                values[row] = encoder.encode(columns.value_at(row), where)
            else:
                assert isinstance(store, StatsStore)
                stats = store.get(columns.ref[row])
                numel[row] = stats.numel
                raw[row] = stats._host_values()
                flags[row] = f & (GRAD | TRAINING | TUPLE)
        schema = self._schemas[_RECORDS]
        name = f"{self.commits:06d}.safetensors" if encoder.tensors else None
        return pa.record_batch(
            [
                pa.array(steps, pa.int64()),
                pa.array(calls, pa.int32()),
                pa.array(sites, pa.int32()),
                pa.array(flags, pa.uint8()),
                pa.array(numel, pa.int64()),
                pa.array(raw, schema.field("raw").type),
                pa.array(values, pa.string()),
                pa.array([None if v is None else name for v in values], pa.string()),
            ],
            schema=schema,
        )

    def _log_batch(self, pa: Any, entries: Sequence[LogEntry]) -> Any:
        return pa.record_batch(
            [
                pa.array([e.step for e in entries], pa.int64()),
                pa.array([e.name for e in entries], pa.string()),
                pa.array([float(e.value) for e in entries], pa.float64()),
                pa.array([e.text for e in entries], pa.string()),
            ],
            schema=self._schemas[_LOG],
        )

    def _commit(
        self, pa: Any, blocks: list[tuple[str, Any]], tensors_file: str | None, data: Any
    ) -> None:
        """Append the blocks, the tensors file and the journal line; on any exception cut
        every file back to the last commit (or keep this one, when its line landed)."""
        journal = self._open[_JOURNAL]
        line = b""
        created: Path | None = None
        try:
            entries = []
            for name, batch in blocks:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, batch.schema) as stream:
                    stream.write_batch(batch)
                raw = sink.getvalue()
                stored, zstd = pack(raw)
                file = self._file(name)
                entries.append(
                    {
                        "file": name,
                        "at": file.committed,
                        "size": len(stored),
                        "raw": raw.size,
                        "zstd": zstd,
                        "crc": checksum(stored),
                    }
                )
                file.append(stored)
            tensors = None
            if tensors_file is not None:
                folder = self.path / _TENSORS
                folder.mkdir(exist_ok=True)
                created = folder / tensors_file
                file = AppendFile(created)
                try:
                    file.append(data)
                finally:
                    file.close()
                tensors = {"name": tensors_file, "size": len(data), "crc": checksum(data)}
            record = {"run": self._run, "seq": self.commits, "blocks": entries}
            line = commit_line({**record, "tensors": tensors})
            if self._complete:
                self._write_meta(complete=False)  # appending again
            journal.append(line)
        except BaseException as error:
            landed = bool(line) and journal.size() == journal.committed + len(line)
            if landed:
                self._landed()
            else:
                for file in self._open.values():
                    file.rollback()
                if created is not None:
                    created.unlink(missing_ok=True)
            if isinstance(error, OSError):
                self._failed(error)
            raise
        self._landed()

    def _landed(self) -> None:
        for file in self._open.values():
            file.commit()
        self.commits += 1

    def _failed(self, error: OSError) -> None:
        """Close after a write error and raise one `RecordingError` saying why."""
        try:
            free = f"{shutil.disk_usage(self.path).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        try:
            self.close()
        except OSError:
            _close_files(self._open, self._lock)  # recording.json then stays "incomplete"
            self._closed = True
        what = "the disk is full" if error.errno in _DISK_FULL else f"a write failed ({error})"
        raise RecordingError(
            f"{self.path}: {what} ({free}); the recording was closed with the {self.commits} "
            "commit(s) written before, which load"
        ) from error

    def log(self, entries: Sequence[LogEntry]) -> None:
        """Append scalars and notes (one commit)."""
        self.write(Columns(None), entries)

    def pause(self) -> None:
        """Mark the recording complete for now (readers then check that every commit is
        there); a later `write` appends again."""
        if not self._closed:
            self._write_meta(complete=True)

    def close(self) -> None:
        """Mark the recording complete, close its files and release the directory."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write_meta(complete=True)
        finally:
            _close_files(self._open, self._lock)


def _canonical(meta: Mapping[str, Any]) -> bytes:
    """The bytes `recording.json`'s checksum is the CRC32 of: every field but it."""
    rest = {k: v for k, v in meta.items() if k != "checksum"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


def _close_files(files: dict[str, AppendFile], lock: WriterLock) -> None:
    for file in files.values():
        file.close()
    files.clear()
    lock.release()


# -- reading -----------------------------------------------------------------------------


@dataclasses.dataclass
class Recording:
    """What `read_recording` read: the records as `Columns`, the statistics function their
    raw vectors follow (None without statistics), the scalars/notes, and whether the writer
    closed the recording (`complete`; false while it writes, or after it was killed)."""

    columns: Columns
    stats: StatsFn | None
    log: list[LogEntry]
    complete: bool


_CLASSES: dict[str, type[nn.Module]] = {}


def module_class(name: str) -> type[nn.Module]:
    """The class a `type` name stands for: the real class when its module is already
    imported (nothing is imported or executed to find it), else a stand-in subclass of
    `nn.Module` with that module and qualified name, so `type_name` gives `name` back."""
    cls = _CLASSES.get(name)
    if cls is not None:
        return cls
    module_name, _, qualname = name.rpartition(".")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None) if found is not None else None
    if isinstance(found, type) and issubclass(found, nn.Module) and type_name(found) == name:
        cls = found
    else:
        cls = type(qualname.rsplit(".", 1)[-1], (nn.Module,), {"__module__": module_name})
        cls.__qualname__ = qualname
    _CLASSES[name] = cls
    return cls


def _read_meta(root: Path) -> dict[str, Any]:
    meta_file = root / _META
    data = read_inside(root, _META, _MAX_META)
    if data is None:
        raise RecordingError(f"{root} is not a tensor_tracker recording (no {_META})")
    meta = load_json(data, meta_file)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RecordingError(f"{meta_file}: not a tensor_tracker recording")
    version = meta.get("version")
    if not isinstance(version, int):
        raise RecordingError(f"{meta_file}: the format version is {version!r}, not a number")
    if version > VERSION:
        raise RecordingError(
            f"{root} is a version {version} recording; this tensor_tracker reads up to "
            f"version {VERSION}: upgrade tensor_tracker"
        )
    if version < VERSION:
        raise RecordingError(
            f"{root} is a version {version} recording, from an older tensor_tracker: this "
            f"one reads version {VERSION} (with checksums and size bounds; version 1 files "
            "cannot be checked before they are decompressed). Load it with the tensor_tracker "
            "that wrote it, or record it again"
        )
    if meta.get("checksum") != checksum(_canonical(meta)):
        raise RecordingError(f"{meta_file} fails its checksum (corrupted or edited)")
    run, complete, commits = meta.get("run"), meta.get("complete"), meta.get("commits")
    if not isinstance(run, str) or not re.fullmatch(r"[0-9a-f]{32}", run):
        raise RecordingError(f"{meta_file}: the run id is {run!r}"[:200])
    if not isinstance(complete, bool) or not isinstance(commits, int) or commits < 0:
        raise RecordingError(f"{meta_file}: complete={complete!r}, commits={commits!r}"[:200])
    return meta


@dataclasses.dataclass
class _Block:
    file: str
    at: int
    size: int
    raw: int
    zstd: bool
    crc: int


def _commit_blocks(
    commit: dict[str, Any], run: str, ends: dict[str, int], where: Path
) -> tuple[list[_Block], dict[str, Any] | None]:
    """The blocks and tensors file of one journal line, checked (types, run, no gap)."""
    if commit.get("run") != run:
        raise RecordingError(f"{where}: a commit of another run ({commit.get('run')!r})"[:200])
    blocks, tensors = commit.get("blocks"), commit.get("tensors")
    if not isinstance(blocks, list):
        raise RecordingError(f"{where}: a commit without its list of blocks")
    out = []
    for item in blocks:
        fields = (
            (
                item.get("file"),
                item.get("at"),
                item.get("size"),
                item.get("raw"),
                item.get("zstd"),
                item.get("crc"),
            )
            if isinstance(item, dict)
            else ()
        )
        if len(fields) != 6 or fields[0] not in (_SITES, _RECORDS, _LOG):
            raise RecordingError(f"{where}: a malformed block {item!r}"[:200])
        block = _Block(*fields)
        numbers = (block.at, block.size, block.raw, block.crc)
        if not all(type(x) is int and x >= 0 for x in numbers) or type(block.zstd) is not bool:
            raise RecordingError(f"{where}: a malformed block {item!r}"[:200])
        if block.at != ends.get(block.file, 0):
            raise RecordingError(f"{where}: a block of {block.file} at {block.at} leaves a gap")
        ends[block.file] = block.at + block.size
        out.append(block)
    if tensors is not None:
        ok = isinstance(tensors, dict) and isinstance(tensors.get("name"), str)
        if not ok or not re.fullmatch(r"\d{6,}\.safetensors", tensors["name"]):
            raise RecordingError(f"{where}: a malformed tensors entry {tensors!r}"[:200])
        if not all(type(tensors.get(k)) is int and tensors[k] >= 0 for k in ("size", "crc")):
            raise RecordingError(f"{where}: a malformed tensors entry {tensors!r}"[:200])
    return out, tensors


class _Reader:
    """Reads and checks the commits of one recording, appending them to `columns`."""

    def __init__(self, root: Path, run: str, stats: StatsFn | None) -> None:
        pa = _require_arrow()
        self.root = root
        self.run = run
        self.stats = stats
        self.store = None if stats is None else stats.store()
        self.columns = Columns(self.store)
        self.log: list[LogEntry] = []
        self.width = 0 if stats is None else stats.layout.width
        self.schemas = _schemas(pa, self.width, run)
        self.files: dict[str, bytes] = {}
        self.sites = 0
        self.steps: set[int] = set()

    def _file(self, name: str) -> bytes:
        data = self.files.get(name)
        if data is None:
            found = read_inside(self.root, name)
            if found is None:
                raise RecordingError(f"{self.root / name} is missing (the journal names it)")
            data = self.files[name] = found
        return data

    def trailing(self, ends: dict[str, int]) -> list[str]:
        """The files holding bytes after their last commit (a write cut short)."""
        out = []
        for name in (_SITES, _RECORDS, _LOG):
            try:
                size = os.lstat(self.root / name).st_size
            except OSError:
                continue
            if size > ends.get(name, 0):
                out.append(f"{name} ({size - ends.get(name, 0)} bytes)")
        return out

    def table(self, block: _Block) -> Any:
        """One block as a checked Arrow table."""
        pa = _require_arrow()
        where = f"{self.root / block.file} at byte {block.at}"
        data = self._file(block.file)
        if block.at + block.size > len(data):
            raise RecordingError(
                f"{self.root / block.file} is truncated: {len(data)} bytes, the journal "
                f"commits {block.at + block.size}"
            )
        stored = data[block.at : block.at + block.size]
        if checksum(stored) != block.crc:
            raise RecordingError(f"{where}: fails its checksum (corrupted)")
        raw = unpack(stored, block.zstd, block.raw, where)
        try:
            table = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
            table.validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise RecordingError(f"{where}: not a readable Arrow block ({error})") from error
        expected = self.schemas[block.file]
        if (table.schema.metadata or {}).get(_RUN_KEY) != self.run.encode():
            raise RecordingError(f"{where}: a block of another run")
        if not table.schema.equals(expected):
            raise RecordingError(f"{where}: columns {table.schema.names} of unexpected types")
        return table

    def commit(self, blocks: list[_Block], tensors_entry: dict[str, Any] | None) -> None:
        """Read one commit whole (nothing is appended when it fails)."""
        tables = [(block.file, self.table(block)) for block in blocks]
        tensors = self.tensors(tensors_entry)
        sites: list[Site] = []
        records = []
        log: list[LogEntry] = []
        for name, table in tables:
            if name == _SITES:
                sites.extend(self.new_sites(table, self.sites + len(sites)))
            elif name == _RECORDS:
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

        name = f"{_TENSORS}/{entry['name']}"
        path = self.root / name
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
            raise RecordingError(f"{self.root / _SITES}: site ids out of order")
        out = []
        for name, type_, kind, attr in zip(
            data["name"], data["type"], data["kind"], data["attr"], strict=True
        ):
            if None in (name, type_, kind, attr):
                raise RecordingError(f"{self.root / _SITES}: a site with a missing field")
            out.append(Site(name, module_class(type_), kind, attr))  # type: ignore[arg-type]
        return out

    def log_entries(self, table: Any) -> list[LogEntry]:
        data = table.to_pydict()
        return [
            LogEntry(step, name, math.nan if value is None else value, text)
            for step, name, value, text in zip(
                data["step"], data["name"], data["value"], data["text"], strict=True
            )
            if step is not None or _bad(self.root / _LOG, "a log entry without a step")
        ]

    def check_records(self, table: Any, sites: int, entry: dict[str, Any] | None) -> Any:
        """The indices of the statistics rows of `table`, after checking every row."""
        np = require("numpy", "save")
        where = self.root / _RECORDS
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
        names = set(table.column("tensors").drop_null().to_pylist())
        if names - {None if entry is None else entry["name"]}:
            raise RecordingError(f"{where}: records name a tensors file their commit has not")
        return stats_rows

    def objects(self, table: Any, tensors: dict[str, Tensor]) -> dict[int, Any]:
        """The decoded values of the rows that hold one, by row."""
        out = {}
        for row, value in enumerate(table.column("value").to_pylist()):
            if value is None:
                continue
            try:
                out[row] = _decode(json.loads(value), tensors, self.stats)
            except (KeyError, TypeError, ValueError, RuntimeError, RecursionError) as error:
                raise RecordingError(
                    f"{self.root / _RECORDS}: record {row} of a commit holds a malformed value "
                    f"({type(error).__name__}: {error})"[:300]
                ) from None
        return out

    def append(self, table: Any, stats_rows: Any, objects: dict[int, Any]) -> None:
        np = require("numpy", "save")
        site = table.column("site").to_numpy()
        call = table.column("call").to_numpy()
        step = table.column("step").to_numpy()
        flags = table.column("flags").to_numpy()
        self.steps.update(np.unique(step).tolist())
        if not objects:  # statistics only (the common case): whole columns at once
            assert self.store is not None
            raw = table.column("raw").combine_chunks().flatten().to_numpy()
            numel = table.column("numel").to_numpy().astype(np.int64)
            first, stride = self.store.add_host_rows(raw.astype(np.float64).tobytes(), numel)
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
            ref, _ = self.store.add_host_rows(raw, numel)
            self.columns.add(s, c, t, f, ref)


def _bad(where: Path, what: str) -> bool:
    raise RecordingError(f"{where}: {what}")


def read_recording(path: str | os.PathLike[str], recover: bool = False) -> Recording:
    """Read a recording directory (see the module docstring), checking all of it.

    Args:
        path: the directory `Tracker.save` or `track(..., stream_to=...)` wrote.
        recover: read the commits before the first problem (with a warning saying what was
            dropped) instead of raising.

    Raises:
        RecordingError: not a recording, another format version, a missing, truncated,
            corrupted or hostile file (the message names it and what is wrong).
    """
    root = Path(path)
    if not root.is_dir():
        raise RecordingError(f"{root} is not a recording: not a directory")
    meta = _read_meta(root)
    run = meta["run"]
    live = writer_alive(root)
    stats = None if meta.get("stats") is None else _spec_from_json(meta["stats"])
    reader = _Reader(root, run, stats)
    journal_data = read_inside(root, _JOURNAL)
    if journal_data is None:
        raise RecordingError(f"{root / _JOURNAL} is missing")
    commits, problem, torn = read_commits(journal_data, root / _JOURNAL)
    complete = meta["complete"] and not live
    if torn and not complete and problem is not None:
        problem = None  # a commit line cut short by a writer that stopped: not committed
    elif complete and problem is None and len(commits) != meta["commits"]:
        problem = (
            f"{root / _JOURNAL} holds {len(commits)} commits, {_META} says {meta['commits']} "
            "(truncated?)"
        )
    ends: dict[str, int] = {}
    read = 0
    for number, commit in enumerate(commits):
        try:
            blocks, tensors = _commit_blocks(commit, run, dict(ends), root / _JOURNAL)
            reader.commit(blocks, tensors)
        except RecordingError as error:
            problem = str(error)
            break
        for block in blocks:
            ends[block.file] = block.at + block.size
        read = number + 1
    if problem is None and complete:
        extra = reader.trailing(ends)
        if extra:
            problem = f"{root}: bytes after the last commit in {', '.join(extra)}"
    if problem is not None:
        if not recover:
            raise RecordingError(
                f"{problem}. tensor_tracker.load(path, recover=True) reads the {read} whole "
                "commit(s) before it."
            )
        warnings.warn(
            f"{problem}; read the first {read} commit(s) ({len(reader.steps)} step(s)), "
            f"dropped {'the rest' if read < len(commits) else 'what follows them'}",
            RuntimeWarning,
            stacklevel=3,
        )
    elif not complete and not live:
        extra = reader.trailing(ends)
        cut = f"; dropped an unfinished step ({', '.join(extra)})" if extra or torn else ""
        warnings.warn(
            f"{root}: incomplete recording: its writer stopped without closing it (killed or "
            f"crashed); read its {read} whole commit(s) ({len(reader.steps)} step(s)){cut}",
            RuntimeWarning,
            stacklevel=3,
        )
    return Recording(reader.columns, stats, reader.log, complete)
