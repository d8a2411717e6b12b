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
    Empty once the writer closed. While it writes, it holds 64 KiB more than
    ``recording.json`` of random bytes there, given back when a write fails: the room to
    still close the recording on a disk that filled up. The writer holds an exclusive ``fcntl.flock`` on it from before it writes
    anything until it closes; the kernel releases it when the process ends however it ends
    (``kill -9`` too), so "is a writer still appending?" never depends on a pid. Claiming
    the lock is what makes a second writer on the same directory fail at once.
``journal``
    One line per commit: the CRC32 of the line's JSON as 8 hex digits, a space, the JSON,
    a newline. The JSON is ``{"run", "seq", "blocks": [...], "tensors": null or {"name",
    "size", "crc"}}``, and ``"partial": [step, ...]`` when the commit holds steps that an
    exception (a Ctrl-C) cut short: their records are those made before it (`load` gives
    them as `Tracker.partial_steps`; a reader that does not know the key ignores it, and
    a commit without such steps has no key); each block is ``{"file", "at", "size",
    "raw", "zstd", "crc"}``: the bytes ``[at, at + size)`` of ``file`` (CRC32 ``crc``),
    zstd-compressed when ``zstd`` (then ``raw`` bytes once decompressed, at most 64 times
    ``size`` plus 64 KiB: a block that compresses better is stored uncompressed), each
    one an Arrow IPC stream of one record batch whose schema metadata holds
    ``tensor_tracker.run``. Blocks of a file follow each other with no gap.
``sites.blocks``
    ``(site int32, name, type, kind, attr)`` rows: one per module part, in order of
    ``site`` (0, 1, ...), committed with the first record that uses it. ``type`` is the
    module class's ``"<module>.<qualname>"``, a name only: loading never imports it.
``records.blocks``
    ``step int64, call int32, site int32, flags uint8`` (`GRAD` 1, `TRAINING` 2, `TUPLE` 4
    as in `tensor_tracker._core.columns`), then the value: statistics as ``numel int64`` and
    ``raw`` (a fixed-size list of float64, the `Layout`'s raw vector), and, only when the
    spec holds statistics per channel or per sample (``{"per_axis": {"stat", "dim",
    "axis"}}``), a last column ``vectors`` (a list per record of one list of float64 per
    such statistic, in spec order, each at most ``numel`` long); or ``value``, a JSON
    text for anything else, where ``{"$tensor": key}`` is a tensor stored under ``key`` in
    the commit's ``tensors`` file, ``{"$stats": [...], "numel": n}`` statistics (and
    ``"vectors": [[...], ...]`` when the spec has vectors),
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
before it propagates, so a step is written whole or not at all. `RecordingWriter.pause`
(the end of a `with` block) marks the recording complete, closes its files and releases
the lock; the next `write` claims the lock again and appends after the last commit. A
writer's methods may be called from several threads: they take turns. A write error (a
full disk, a file-size limit, ...) cuts back the same way, then closes the recording
(which stays loadable and complete) and raises one `RecordingError` naming the directory
and what happened (the free space of a full disk, the limit of ``RLIMIT_FSIZE``). Every
file is created without following a symbolic link or blocking on a FIFO (see
`tensor_tracker._files`): a directory in which someone planted those is refused with a
`FileWriteError`.

Reading: a reader checks, before it allocates anything sized by the file, that every
file is a regular file inside the directory (``..``, absolute paths and symbolic links
are refused, FIFOs are never read), every block lies inside its file, has its checksum
and run id, decompresses to no more than it declares, and every site id, flag, size and
statistics width is in range, and that each Arrow block holds a schema and uncompressed
record batches. Work and memory are bounded per byte on disk: every commit holds at least
one non-empty block and each journal line is checked only when reached, and a load holds
at most 64 times the recording's size on disk plus 256 MiB (decompressed bytes and a cost
per record and byte of text, counted before they are allocated; ``load(path,
max_memory=...)`` raises the limit for a big recording one trusts). Any problem is a
`RecordingError` naming the file and what is wrong; with ``recover=True`` the commits before the first problem are read, with a
warning saying what was dropped. A recording whose writer stopped without closing it
(killed, crashed: its lock is free but ``complete`` is false) loads its whole commits and
warns once; `Recording.complete` says so.

Statistics per channel / per sample extend version 2 without a new version number: a
recording without them is byte for byte what it was, and one with them names a
``per_axis`` item in its spec, which a tensor_tracker from before them refuses with a
`RecordingError` ("an unknown statistic") before reading any block.

Version 2 (checksums, journal, lock, ``.blocks`` files) replaced version 1 (plain Arrow
streams with compressed buffers, a pid for liveness), which cannot be read safely (its
sizes are unchecked until decompressed): reading one raises a `RecordingError` saying it
is from the older format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import os
import re
import socket
import threading
import uuid
import warnings
import weakref
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._core.columns import GRAD, OBJECT, REFS, STASH, TRAINING, TUPLE, Columns, Site
from .._core.records import LogEntry, Stash
from .._data.frame import type_name
from .._files import explain, make_dir, utf8_safe, write_file
from .._optional import require
from ..errors import ArgumentValueError, FileWriteError, RecordingError
from ..stats import StatsFn
from ..stats._store import StatsStore
from .integrity import (
    AppendFile,
    Budget,
    WriterLock,
    checksum,
    commit_line,
    journal_lines,
    load_json,
    pack,
    read_commit,
    read_inside,
    writer_alive,
)
from .recording_codec import (
    JOURNAL,
    LOG,
    META,
    RECORDS,
    SITES,
    TENSORS,
    Encoder,
    canonical,
    module_class,
    schemas,
    spec_from_json,
    spec_to_json,
)
from .recording_reader import CommitReader, commit_blocks

__all__ = [
    "FORMAT",
    "VERSION",
    "Recording",
    "RecordingWriter",
    "module_class",
    "read_recording",
    "spec_from_json",
    "spec_of",
    "spec_to_json",
]

FORMAT = "tensor_tracker.recording"
VERSION = 2
_MAX_META = 1 << 20  # bytes of recording.json
_RESERVE = 1 << 16  # bytes kept besides recording.json's size (see writer.lock)


def _require_arrow() -> Any:
    return require("pyarrow", "save")


# -- writing -----------------------------------------------------------------------------


def spec_of(columns: Columns) -> tuple[Any, ...] | None:
    store = columns.store
    return store.layout.spec if isinstance(store, StatsStore) else None


class RecordingWriter:
    """Appends a tracker's records to a recording directory (see the module docstring).

    Args:
        path: the directory; created if missing. It must not hold a recording already, nor
            be claimed by another writer (claimed atomically: of two writers starting on one
            directory, one fails).
        stats: the statistics `Layout` spec of the records (`None` without `stats=`).
        what: the argument `path` came from, for messages.

    Call `write(columns, log)` with the records and log entries to append (one commit;
    they stay where they are), `pause()` at the end of a `with` block (marks the recording
    complete, closes its files and releases the directory until the next `write`) and
    `close()` at the end (the same, for good). Its methods may be called from several
    threads: they take turns.

    Raises:
        ArgumentValueError: `path` holds a recording or another writer is writing it.
        FileWriteError: `path` cannot be written (read-only, full) or holds a symbolic
            link, FIFO or other non-regular file where a file of the recording goes.
    """

    def __init__(
        self, path: str | os.PathLike[str], stats: tuple[Any, ...] | None, what: str = "stream_to="
    ) -> None:
        pa = _require_arrow()
        require("safetensors", "save")
        self.path = Path(path)
        self._what = what
        self._lock = WriterLock(self.path, what)  # before anything is read or written
        self._open: dict[str, AppendFile] = {}
        self._turns = threading.RLock()
        self._paused: dict[str, int] | None = None  # while paused: each file's length
        try:
            if os.path.lexists(self.path / META):
                raise ArgumentValueError(
                    f"{self.path} already holds a recording; choose a new directory (or load "
                    "it with tensor_tracker.load)"
                )
            self._stats = stats
            spec = None if stats is None else spec_to_json(stats)
            layout = None if spec is None else spec_from_json(spec).layout
            self._width = 0 if layout is None else layout.width
            self._vectors = 0 if layout is None else len(layout.vectors)
            self._run = uuid.uuid4().hex
            self.schemas = schemas(pa, self._width, self._run, self._vectors)
            self._sites_written = 0
            self.commits = 0
            """How many commits are on disk (a caller compares it around `write` to know
            whether an interrupted write landed)."""
            self._open[JOURNAL] = AppendFile(self.path / JOURNAL, what)
            self._complete = False
            self._lock.reserve(self._write_meta(complete=False) + _RESERVE)
        except BaseException:
            _close_files(self._open, self._lock)
            raise
        self.closed = False
        """Whether `close` was called (or a write error closed the recording)."""
        self._release = self._when_dropped()

    def _when_dropped(self) -> weakref.finalize[Any, Any]:
        # Only for a writer dropped while open (a tracker used without a `with` block):
        # `pause` and `close` release everything themselves, and detach it.
        return weakref.finalize(self, _close_files, self._open, self._lock)

    def _write_meta(self, complete: bool) -> int:
        """Replace recording.json; returns its size."""
        try:
            version = importlib.metadata.version("tensor-tracker")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "run": self._run,
            "stats": None if self._stats is None else spec_to_json(self._stats),
            "complete": complete,
            "commits": self.commits,
            "writer": {"pid": os.getpid(), "host": socket.gethostname()},
            "torch": torch.__version__,
            "tensor_tracker": version,
        }
        meta["checksum"] = checksum(canonical(meta))
        data = json.dumps(meta, indent=1).encode()
        tmp = self.path / f".{META}.tmp"
        write_file(tmp, data, self._what)
        try:
            tmp.replace(self.path / META)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._complete = complete
        return len(data)

    def _file(self, name: str) -> AppendFile:
        file = self._open.get(name)
        if file is None:
            file = self._open[name] = AppendFile(self.path / name, self._what)
        return file

    def write(
        self, columns: Columns, log: Sequence[LogEntry] = (), partial: Sequence[int] = ()
    ) -> int:
        """Append every record of `columns` and the entries of `log` as one commit, with
        those of the steps `partial` that it holds marked partial (cut short by an
        exception); return how many records it wrote (the rows `columns` had when it
        started).

        Raises:
            RecordingError: the disk is full or another write error (the message names the
                directory and its free space); the recording is closed first, with every
                earlier commit loadable.
            ArgumentValueError: a record holds a value that cannot be saved without pickle
                (nothing of this call is written).
        """
        with self._turns:
            return self._write(columns, list(log), partial)

    def _write(self, columns: Columns, log: list[LogEntry], partial: Sequence[int]) -> int:
        pa = _require_arrow()
        if self.closed:
            raise RecordingError(f"{self.path}: this recording was closed; nothing is written")
        blocks: list[tuple[str, Any]] = []
        # The rows there now: one another thread appends meanwhile waits for the next write.
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
            sites = list(columns.sites)  # those of the n rows, at least
            if len(sites) > sites_now:
                blocks.append((SITES, self._sites_batch(pa, sites[sites_now:])))
            encoder = Encoder(f"{self.commits}.")
            store = columns.store
            # The statistics of accelerator tensors read with one transfer per device, also
            # those of records holding several (tuple outputs), each of which read its own.
            with store.on_host() if isinstance(store, StatsStore) else contextlib.nullcontext():
                batch = self._records_batch(pa, columns, n, site_of, encoder)
            blocks.append((RECORDS, batch))
            tensors = encoder.tensors
            sites_now = len(sites)
        if log:
            blocks.append((LOG, self._log_batch(pa, log)))
        if not blocks:
            return n
        steps = {*columns.step_values, *(e.step for e in log)}
        cut = sorted(step for step in set(partial) if step in steps)
        tensors_bytes = None
        if tensors:
            from safetensors.torch import save

            tensors_bytes = save(tensors, metadata={"run": self._run})
        if self._paused is not None:
            self._resume()
        self._commit(pa, blocks, tensors_file if tensors_bytes else None, tensors_bytes, cut)
        self._sites_written = sites_now
        return n

    def _sites_batch(self, pa: Any, sites: Sequence[Site]) -> Any:
        return pa.record_batch(
            [
                pa.array(range(self._sites_written, self._sites_written + len(sites)), pa.int32()),
                pa.array([utf8_safe(s.name) for s in sites], pa.string()),
                pa.array([utf8_safe(type_name(s.cls)) for s in sites], pa.string()),
                pa.array([utf8_safe(s.kind) for s in sites], pa.string()),
                pa.array([utf8_safe(s.attr) for s in sites], pa.string()),
            ],
            schema=self.schemas[SITES],
        )

    def _records_batch(
        self, pa: Any, columns: Columns, n: int, site_of: dict[int, int], encoder: Encoder
    ) -> Any:
        """The first `n` records of `columns` as one record batch."""
        steps = array("q", bytes(8 * n))
        for k, start in enumerate(columns.step_rows):
            if start >= n:
                break
            end = columns.step_rows[k + 1] if k + 1 < len(columns.step_rows) else n
            end = min(end, n)
            steps[start:end] = array("q", [columns.step_values[k]] * (end - start))
        sites = columns.site[:n]
        calls = columns.call[:n]
        flags = columns.flags[:n]
        numel: list[int | None] = [None] * n
        raw: list[Any] = [None] * n
        values: list[str | None] = [None] * n
        store = columns.store
        stats_rows: list[int] = []
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
                flags[row] = f & (GRAD | TRAINING | TUPLE)
                stats_rows.append(row)
        schema = self.schemas[RECORDS]
        refs = torch.tensor([columns.ref[row] for row in stats_rows], dtype=torch.int64)
        if stats_rows:
            assert isinstance(store, StatsStore)
            # One read per device for all the rows: reading them one by one waited for the
            # GPU once per record (74 times per step on a 4-layer encoder).
            table_raw, table_numel = store.table(refs)
            for row, values_of, count in zip(
                stats_rows, table_raw.tolist(), table_numel.tolist(), strict=True
            ):
                raw[row] = values_of
                numel[row] = int(count)
        extra = []
        if self._vectors:
            assert isinstance(store, StatsStore)
            vectors: list[Any] = [None] * n
            table = list(store.vector_table(refs).values()) if stats_rows else []
            for k, row in enumerate(stats_rows):
                vectors[row] = [column[k].tolist() for column in table]
            extra.append(pa.array(vectors, schema.field("vectors").type))
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
                *extra,
            ],
            schema=schema,
        )

    def _log_batch(self, pa: Any, entries: Sequence[LogEntry]) -> Any:
        return pa.record_batch(
            [
                pa.array([e.step for e in entries], pa.int64()),
                pa.array([e.name and utf8_safe(e.name) for e in entries], pa.string()),
                pa.array([float(e.value) for e in entries], pa.float64()),
                pa.array([e.text and utf8_safe(e.text) for e in entries], pa.string()),
            ],
            schema=self.schemas[LOG],
        )

    def _commit(
        self,
        pa: Any,
        blocks: list[tuple[str, Any]],
        tensors_file: str | None,
        data: Any,
        partial: list[int],
    ) -> None:
        """Append the blocks, the tensors file and the journal line; on any exception cut
        every file back to the last commit (or keep this one, when its line landed)."""
        journal = self._open[JOURNAL]
        line = b""
        created: Path | None = None
        try:
            if self._complete:
                self._write_meta(complete=False)  # appending again: before any byte
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
                folder = self.path / TENSORS
                make_dir(folder, self._what)
                file = AppendFile(folder / tensors_file, self._what, new=True)
                created = file.path
                try:
                    file.append(data)
                finally:
                    file.close()
                tensors = {"name": tensors_file, "size": len(data), "crc": checksum(data)}
            record = {"run": self._run, "seq": self.commits, "blocks": entries}
            if partial:  # absent otherwise: a recording without any is what it was
                record["partial"] = partial
            line = commit_line({**record, "tensors": tensors})
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
        why = str(error) if isinstance(error, FileWriteError) else explain(error, self.path)
        self._lock.free()  # the room to rewrite recording.json on a full disk
        try:
            self.close()
        except OSError:
            _close_files(self._open, self._lock)  # recording.json then stays "incomplete"
            self.closed = True
        raise RecordingError(
            f"{self.path}: {why}; the recording was closed with the {self.commits} "
            "commit(s) written before, which load"
        ) from error

    def log(self, entries: Sequence[LogEntry]) -> None:
        """Append scalars and notes (one commit)."""
        self.write(Columns(None), entries)

    def pause(self) -> None:
        """Mark the recording complete for now (readers then check that every commit is
        there), close its files and release the directory: nothing is left open for a
        garbage collection to close. A later `write` claims the directory again and
        appends after the last commit."""
        with self._turns:
            if self.closed or self._paused is not None:
                return
            try:
                self._write_meta(complete=True)
            finally:
                self._paused = {name: file.committed for name, file in self._open.items()}
                self._release.detach()
                _close_files(self._open, self._lock)

    def _resume(self) -> None:
        """Claim the directory again after `pause`; reopen its files where they were."""
        assert self._paused is not None
        try:
            self._lock = WriterLock(self.path)
        except ArgumentValueError as error:
            raise RecordingError(
                f"{self.path}: another writer claimed this directory while the recording was "
                "paused (between two `with` blocks); nothing more is written to it"
            ) from error
        try:
            for name, committed in self._paused.items():
                self._open[name] = AppendFile.reopen(self.path / name, committed)
        except BaseException:
            _close_files(self._open, self._lock)
            raise
        self._paused = None
        self._release = self._when_dropped()

    def close(self) -> None:
        """Mark the recording complete, close its files and release the directory."""
        with self._turns:
            if self.closed:
                return
            self.closed = True
            if self._paused is not None:
                return  # complete, closed and released already
            self._release.detach()
            try:
                self._write_meta(complete=True)
            finally:
                _close_files(self._open, self._lock)


def _close_files(files: dict[str, AppendFile], lock: WriterLock) -> None:
    for file in files.values():
        file.close()
    files.clear()
    lock.release()


# -- reading -----------------------------------------------------------------------------


@dataclasses.dataclass
class Recording:
    """What `read_recording` read: the records as `Columns`, the statistics function their
    raw vectors follow (None without statistics), the scalars/notes, whether the writer
    closed the recording (`complete`; false while it writes, or after it was killed), and
    the steps an exception cut short (`partial`, ascending)."""

    columns: Columns
    stats: StatsFn | None
    log: list[LogEntry]
    complete: bool
    partial: list[int] = dataclasses.field(default_factory=list)


def _read_meta(root: Path) -> dict[str, Any]:
    meta_file = root / META
    data = read_inside(root, META, _MAX_META)
    if data is None:
        raise RecordingError(f"{root} is not a tensor_tracker recording (no {META})")
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
    if meta.get("checksum") != checksum(canonical(meta)):
        raise RecordingError(f"{meta_file} fails its checksum (corrupted or edited)")
    run, complete, commits = meta.get("run"), meta.get("complete"), meta.get("commits")
    if not isinstance(run, str) or not re.fullmatch(r"[0-9a-f]{32}", run):
        raise RecordingError(f"{meta_file}: the run id is {run!r}"[:200])
    if not isinstance(complete, bool) or not isinstance(commits, int) or commits < 0:
        raise RecordingError(f"{meta_file}: complete={complete!r}, commits={commits!r}"[:200])
    return meta


def read_recording(
    path: str | os.PathLike[str], recover: bool = False, max_memory: int | None = None
) -> Recording:
    """Read a recording directory (see the module docstring), checking all of it.

    Args:
        path: the directory `Tracker.save` or `track(..., stream_to=...)` wrote.
        recover: read the commits before the first problem (with a warning saying what was
            dropped) instead of raising.
        max_memory: the bytes the load may hold (`None`: `MEMORY_RATIO` times the
            recording's size on disk plus `MEMORY_SLACK`, see `Budget`).

    Raises:
        RecordingError: not a recording, another format version, a missing, truncated,
            corrupted or hostile file, or one that would take more than `max_memory` (the
            message names it and what is wrong).
    """
    root = Path(path)
    if not root.is_dir():
        raise RecordingError(f"{root} is not a recording: not a directory")
    live = writer_alive(root)  # before the metadata: a writer closing in between is seen live
    budget = Budget(root, max_memory)
    meta = _read_meta(root)
    run = meta["run"]
    try:
        stats = None if meta.get("stats") is None else spec_from_json(meta["stats"])
    except RecordingError as error:
        raise RecordingError(f"{root / META}: {error}") from None
    reader = CommitReader(root, run, stats, budget)
    journal = root / JOURNAL
    journal_data = read_inside(root, JOURNAL)
    if journal_data is None:
        raise RecordingError(f"{journal} is missing")
    # The bytes, and their lines as bytes objects (64 bytes each beyond their text).
    budget.charge(2 * len(journal_data) + 64 * journal_data.count(b"\n"), journal)
    lines, torn = journal_lines(journal_data)
    complete = meta["complete"]
    problem = None
    if complete and live and len(lines) >= meta["commits"]:
        # A paused writer (between `with` blocks) that resumed after recording.json was
        # read: read what the metadata counted.
        lines, torn = lines[: meta["commits"]], False
    if torn and complete:
        problem = f"{journal}: line {len(lines) + 1} is cut short"
    elif complete and len(lines) != meta["commits"]:
        problem = (
            f"{journal} holds {len(lines)} commits, {META} says {meta['commits']} (truncated?)"
        )
    # (A cut last line of a writer that stopped was not committed: not a problem.)
    ends: dict[str, int] = {}
    read = 0
    partial: set[int] = set()
    # Each line is checked when reached, so a bad one stops the load there.
    for number, line in enumerate(lines):
        try:
            commit = read_commit(line, number, journal)
            blocks, tensors = commit_blocks(commit, run, dict(ends), journal)
            marked = _partial_steps(commit, journal)
            reader.commit(blocks, tensors)
        except RecordingError as error:
            problem = str(error)
            break
        partial.update(marked)
        for block in blocks:
            ends[block.file] = block.at + block.size
        read = number + 1
    reader.finish()
    if problem is None and complete and not live:
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
            f"dropped {'the rest' if read < len(lines) else 'what follows them'}",
            RuntimeWarning,
            stacklevel=3,
        )
    elif not complete and not live:
        cut = [*reader.trailing(ends), *([f"a cut {JOURNAL} line"] if torn else [])]
        dropped = f"; dropped an unfinished step ({', '.join(cut)})" if cut else ""
        warnings.warn(
            f"{root}: incomplete recording: its writer stopped without closing it (killed or "
            f"crashed); read its {read} whole commit(s) ({len(reader.steps)} step(s)){dropped}",
            RuntimeWarning,
            stacklevel=3,
        )
    # What was dropped under recover=True makes the loaded run incomplete too.
    return Recording(
        reader.columns, stats, reader.log, complete and problem is None, sorted(partial)
    )


def _partial_steps(commit: dict[str, Any], where: Path) -> list[int]:
    """The steps a commit marks partial (see the module docstring), checked."""
    steps = commit.get("partial", [])
    if not isinstance(steps, list) or not all(type(s) is int and s >= 0 for s in steps):
        raise RecordingError(f"{where}: a malformed list of partial steps {steps!r}"[:200])
    return steps
