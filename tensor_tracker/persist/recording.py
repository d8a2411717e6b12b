"""Recordings on disk: `RecordingWriter` appends a tracker's records to a directory step by
step; `read_recording` reads one back. No pickle is involved either way.

Format (`FORMAT`, version `VERSION`), a directory holding:

``recording.json``
    ``{"format": "tensor_tracker.recording", "version": 1, "stats": <spec or null>,
    "writer": {"pid", "host"}, "complete": <bool>, "torch": ..., "tensor_tracker": ...}``.
    ``stats`` is the statistics spec (names, ``{"custom": name}``, ``{"histogram": {...}}``)
    that the raw vectors follow. ``complete`` is false while a writer may still append.
``sites.arrows``
    An Arrow IPC stream of ``(site int32, name, type, kind, attr)`` rows: one per module
    part, appended before the first record that uses it. ``type`` is the module class's
    ``"<module>.<qualname>"``, a name only: loading never imports or unpickles it.
``records.arrows``
    An Arrow IPC stream (zstd-compressed buffers) with one batch per written step:
    ``step int64, call int32, site int32, flags uint8`` (`GRAD` 1, `TRAINING` 2, `TUPLE` 4
    as in `tensor_tracker.core.columns`), then the value: statistics as ``numel int64`` and
    ``raw`` (a fixed-size list of float64, the `Layout`'s raw vector), or ``value``, a JSON
    text for anything else, where ``{"$tensor": key}`` is a tensor stored under ``key`` in
    the batch's ``tensors`` file, ``{"$stats": [...], "numel": n}`` statistics,
    ``{"$tuple": [...]}`` a tuple, ``{"$dict": [[key, value], ...]}`` a dict,
    ``{"$unrecorded": [type, reason]}`` an `Unrecorded`, ``{"$torch": "torch.float32"}`` and
    ``{"$device": "cpu"}`` torch's dtypes, layouts and devices, ``{"$repr": text}`` another
    plain value (loaded as that text, never evaluated) (the other
    containers the tracker walks are stored as what they hold: mappings, dataclasses and
    Hugging Face caches as dicts, pytree nodes as lists).
``tensors/<step>-<n>.safetensors``
    The full tensors of one written batch (safetensors: no code, memory-mappable), written
    to a temporary name and renamed, so a file is either complete or absent.
``log.arrows``
    An Arrow IPC stream of ``(step int64, name, value float64, text)``: scalars from
    `Tracker.log` (``text`` null) and notes from `Tracker.note` (``name`` null).

Each step is appended as it completes and flushed; a process killed while writing leaves at
most a truncated last batch, which `read_recording` reports (naming the file and what it
recovered) instead of returning a silently partial result.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import os
import socket
import sys
import weakref
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import SUPPORTED_NODES

from .._optional import require
from ..core.columns import GRAD, OBJECT, REFS, STASH, TRAINING, TUPLE, Columns, Site
from ..core.records import LogEntry, Stash, Unrecorded
from ..core.stash_fns import IMMUTABLE
from ..core.structure import walks_attributes
from ..data.frame import type_name
from ..errors import ArgumentValueError, RecordingError, TensorTrackerError
from ..stats import Histogram, Stats, StatsFn
from ..stats.spec import CustomName, Statistic
from ..stats.store import StatsStore

__all__ = [
    "FORMAT",
    "VERSION",
    "Recording",
    "RecordingWriter",
    "read_recording",
]

FORMAT = "tensor_tracker.recording"
VERSION = 1
_META = "recording.json"
_SITES = "sites.arrows"
_RECORDS = "records.arrows"
_LOG = "log.arrows"
_TENSORS = "tensors"


def _require_arrow() -> Any:
    return require("pyarrow", "save")


# -- the statistics spec as JSON ---------------------------------------------------------


def spec_to_json(spec: Sequence[str | Histogram | CustomName]) -> list[Any]:
    """A statistics spec as JSON: names as they are, histograms as dicts, custom
    statistics by name (their functions are not saved)."""
    out: list[Any] = []
    for item in spec:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, CustomName):
            out.append({"custom": item.name})
        else:
            out.append({"histogram": dataclasses.asdict(item)})
    return out


def spec_from_json(items: list[Any]) -> StatsFn:
    """The `StatsFn` that reads statistics saved with the spec `spec_to_json` wrote."""
    spec: list[Any] = []
    for item in items:
        if isinstance(item, str):
            spec.append(item)
        elif "custom" in item:
            spec.append(Statistic(str(item["custom"]), _not_recomputable))
        else:
            fields = dict(item["histogram"])
            fields["range"] = tuple(fields["range"])
            spec.append(Histogram(**fields))
    return StatsFn(spec)


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
        plain = IMMUTABLE if numpy is None else (*IMMUTABLE, numpy.generic, numpy.ndarray)
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
        elif walks_attributes(value):
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
    if isinstance(plain, list):
        return [_decode(v, tensors, layout_fn) for v in plain]
    if not isinstance(plain, dict):
        return plain
    if "$tensor" in plain:
        return tensors[plain["$tensor"]]
    if "$tuple" in plain:
        return tuple(_decode(v, tensors, layout_fn) for v in plain["$tuple"])
    if "$dict" in plain:
        return {
            _decode(k, tensors, layout_fn): _decode(v, tensors, layout_fn)
            for k, v in plain["$dict"]
        }
    if "$unrecorded" in plain:
        return Unrecorded(*plain["$unrecorded"])
    if "$torch" in plain:
        found = getattr(torch, str(plain["$torch"]).removeprefix("torch."), None)
        kinds = (torch.dtype, torch.layout, torch.memory_format)
        return found if isinstance(found, kinds) else plain["$torch"]
    if "$device" in plain:
        return torch.device(plain["$device"])
    if "$repr" in plain:
        return plain["$repr"]
    if "$stats" in plain:
        if layout_fn is None:
            raise RecordingError("statistics in a recording whose metadata names none")
        return Stats._of_floats(layout_fn.layout, list(plain["$stats"]), int(plain["numel"]))
    raise RecordingError(f"unknown value in a recording: {plain!r}"[:200])


# -- writing -----------------------------------------------------------------------------


def spec_of(columns: Columns) -> tuple[Any, ...] | None:
    """The statistics spec of a tracker's columns, or None when it keeps no statistics."""
    store = columns.store
    return store.layout.spec if isinstance(store, StatsStore) else None


class RecordingWriter:
    """Appends a tracker's records to a recording directory (see the module docstring).

    Args:
        path: the directory; created if missing. It must not hold a recording already.
        stats: the statistics `Layout` spec of the records (`None` without `stats=`).

    Call `write(columns)` with the records to append (they stay where they are), `log` for
    scalars and notes, and `close()` at the end (marks the recording complete).
    """

    def __init__(self, path: str | os.PathLike[str], stats: tuple[Any, ...] | None) -> None:
        pa = _require_arrow()
        require("safetensors", "save")
        self.path = Path(path)
        if (self.path / _META).exists():
            raise ArgumentValueError(
                f"{self.path} already holds a recording; choose a new directory (or load it "
                "with tensor_tracker.load)"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        self._stats = stats
        self._width = 0 if stats is None else spec_from_json(spec_to_json(stats)).layout.width
        self._sites_written = 0
        self._batches = 0
        self._options = pa.ipc.IpcWriteOptions(compression="zstd")
        raw_type = pa.list_(pa.float64(), self._width) if self._width else pa.list_(pa.float64())
        self._schema = pa.schema(
            [
                ("step", pa.int64()),
                ("call", pa.int32()),
                ("site", pa.int32()),
                ("flags", pa.uint8()),
                ("numel", pa.int64()),
                ("raw", raw_type),
                ("value", pa.string()),
                ("tensors", pa.string()),
            ]
        )
        self._site_schema = pa.schema(
            [
                ("site", pa.int32()),
                ("name", pa.string()),
                ("type", pa.string()),
                ("kind", pa.string()),
                ("attr", pa.string()),
            ]
        )
        self._log_schema = pa.schema(
            [
                ("step", pa.int64()),
                ("name", pa.string()),
                ("value", pa.float64()),
                ("text", pa.string()),
            ]
        )
        self._files: dict[str, Any] = {}
        self._writers: dict[str, Any] = {}
        # A streaming tracker keeps its writer open between `with` blocks (each block's end
        # only pauses it); the files are closed when the writer goes, if not before.
        self._release = weakref.finalize(self, _close_streams, self._writers, self._files)
        self._complete = False
        self._write_meta(complete=False)

    def _write_meta(self, complete: bool) -> None:
        try:
            version = importlib.metadata.version("tensor-tracker")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "stats": None if self._stats is None else spec_to_json(self._stats),
            "complete": complete,
            "writer": {"pid": os.getpid(), "host": socket.gethostname()},
            "torch": torch.__version__,
            "tensor_tracker": version,
        }
        tmp = self.path / f".{_META}.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(self.path / _META)
        self._complete = complete

    def _append(self, name: str, schema: Any, batch: Any) -> None:
        pa = _require_arrow()
        if self._complete:
            self._write_meta(complete=False)  # appending again
        writer = self._writers.get(name)
        if writer is None:
            sink = self._files[name] = open(self.path / name, "wb")  # noqa: SIM115
            writer = self._writers[name] = pa.ipc.new_stream(sink, schema, options=self._options)
        writer.write_batch(batch)
        self._files[name].flush()

    def write(self, columns: Columns) -> None:
        """Append every record of `columns` (in one batch) to the recording."""
        pa = _require_arrow()
        n = len(columns)
        if not n:
            return
        columns_sites = columns.sites
        extra: list[Site] = []
        site_of: dict[int, int] = {}
        # Stash objects added by hand (or made by stash=) become ordinary rows.
        for row in range(n):
            if columns.flags[row] & STASH:
                stash: Stash = columns.objects[columns.ref[row]]
                site = Site(stash.name, stash.type, stash.kind, stash.attr)
                site_of[row] = columns.site_id(*site)
        if len(columns_sites) > self._sites_written:
            new = list(range(self._sites_written, len(columns_sites)))
            extra = [columns_sites[i] for i in new]
            self._append(
                _SITES,
                self._site_schema,
                pa.record_batch(
                    [
                        pa.array(new, pa.int32()),
                        pa.array([s.name for s in extra], pa.string()),
                        pa.array([type_name(s.cls) for s in extra], pa.string()),
                        pa.array([s.kind for s in extra], pa.string()),
                        pa.array([s.attr for s in extra], pa.string()),
                    ],
                    schema=self._site_schema,
                ),
            )
            self._sites_written = len(columns_sites)
        encoder = _Encoder(f"{self._batches}.")
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
        tensors_file = None
        if encoder.tensors:
            from safetensors.torch import save_file

            folder = self.path / _TENSORS
            folder.mkdir(exist_ok=True)
            tensors_file = f"{self._batches:06d}.safetensors"
            tmp = folder / f".{tensors_file}.tmp"
            save_file(encoder.tensors, str(tmp))
            tmp.replace(folder / tensors_file)
        batch = pa.record_batch(
            [
                pa.array(steps, pa.int64()),
                pa.array(calls, pa.int32()),
                pa.array(sites, pa.int32()),
                pa.array(flags, pa.uint8()),
                pa.array(numel, pa.int64()),
                pa.array(raw, self._schema.field("raw").type),
                pa.array(values, pa.string()),
                pa.array([None if v is None else tensors_file for v in values], pa.string()),
            ],
            schema=self._schema,
        )
        self._append(_RECORDS, self._schema, batch)
        self._batches += 1

    def log(self, entries: Sequence[LogEntry]) -> None:
        """Append scalars and notes."""
        if not entries:
            return
        pa = _require_arrow()
        batch = pa.record_batch(
            [
                pa.array([e.step for e in entries], pa.int64()),
                pa.array([e.name for e in entries], pa.string()),
                pa.array([float(e.value) for e in entries], pa.float64()),
                pa.array([e.text for e in entries], pa.string()),
            ],
            schema=self._log_schema,
        )
        self._append(_LOG, self._log_schema, batch)

    def pause(self) -> None:
        """Mark the recording complete for now (readers then report a truncated file as
        an error); a later `write` or `log` appends again."""
        self._write_meta(complete=True)

    def close(self) -> None:
        """Finish the streams and mark the recording complete."""
        _close_streams(self._writers, self._files)
        self._write_meta(complete=True)


def _close_streams(writers: dict[str, Any], files: dict[str, Any]) -> None:
    """Close the Arrow stream writers, then their files (a writer holds no reference back)."""
    for writer in writers.values():
        writer.close()
    for sink in files.values():
        sink.close()
    writers.clear()
    files.clear()


# -- reading -----------------------------------------------------------------------------


@dataclasses.dataclass
class Recording:
    """What `read_recording` read: the records as `Columns`, the statistics function their
    raw vectors follow (None without statistics), the scalars/notes, and warnings about
    what could not be read."""

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


def _batches(path: Path, name: str, live: bool, recover: bool) -> Iterator[Any]:
    """The record batches of one stream file; a truncated tail raises `RecordingError`
    unless the writer may still be writing it (`live`) or `recover` is set."""
    pa = _require_arrow()
    file = path / name
    if not file.exists():
        return
    read = 0
    with open(file, "rb") as source:
        try:
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowInvalid, OSError) as error:
            if live or recover or file.stat().st_size == 0:
                return
            raise RecordingError(f"{file}: not a readable Arrow stream ({error})") from error
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError) as error:
                if live:
                    return  # the writer is appending this batch right now
                if recover:
                    import warnings

                    warnings.warn(
                        f"{file}: truncated after {read} complete batch(es) ({error}); "
                        "reading those",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                    return
                raise RecordingError(
                    f"{file} is truncated or corrupted after {read} complete batch(es) "
                    f"({error}); the writer stopped mid-write (killed?). "
                    "tensor_tracker.load(path, recover=True) reads the complete ones."
                ) from error
            read += 1
            yield batch


def _writer_alive(meta: dict[str, Any]) -> bool:
    writer = meta.get("writer") or {}
    if meta.get("complete", True) or writer.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(writer.get("pid", -1)), 0)
    except (OSError, ValueError):
        return False
    return True


def read_recording(path: str | os.PathLike[str], recover: bool = False) -> Recording:
    """Read a recording directory (see the module docstring).

    Args:
        path: the directory `Tracker.save` or `track(..., stream_to=...)` wrote.
        recover: read what is complete when a file was truncated (warning), instead of
            raising.

    Raises:
        RecordingError: not a recording, written by a newer version, or truncated (without
            `recover`).
    """
    root = Path(path)
    meta_file = root / _META
    try:
        meta = json.loads(meta_file.read_text())
    except FileNotFoundError:
        raise RecordingError(f"{root} is not a tensor_tracker recording (no {_META})") from None
    except json.JSONDecodeError as error:
        raise RecordingError(f"{meta_file} is corrupted: {error}") from error
    if meta.get("format") != FORMAT:
        raise RecordingError(f"{meta_file}: not a tensor_tracker recording")
    if int(meta.get("version", 0)) > VERSION:
        raise RecordingError(
            f"{root} is a version {meta['version']} recording; this tensor_tracker reads up "
            f"to version {VERSION}: upgrade tensor_tracker"
        )
    live = _writer_alive(meta)
    stats = None if meta.get("stats") is None else spec_from_json(meta["stats"])
    store = None if stats is None else stats.store()
    columns = Columns(store)
    site_ids: dict[int, int] = {}
    for batch in _batches(root, _SITES, live, recover):
        table = batch.to_pydict()
        for site, name, type_, kind, attr in zip(
            table["site"], table["name"], table["type"], table["kind"], table["attr"], strict=True
        ):
            site_ids[site] = columns.site_id(name, module_class(type_), kind, attr)
    from safetensors.torch import load_file

    np = require("numpy", "save")
    site_lookup = np.full(max(site_ids, default=-1) + 1, -1, dtype=np.int32)
    for old, new in site_ids.items():
        site_lookup[old] = new
    for batch in _batches(root, _RECORDS, live, recover):
        if batch.column("value").null_count == batch.num_rows:
            # Statistics only (the common case): whole columns at once.
            assert store is not None
            sites = batch.column("site").to_numpy()
            if len(sites) and (sites.max() >= len(site_lookup) or (site_lookup[sites] < 0).any()):
                raise RecordingError(f"{root / _RECORDS}: a record names an unknown site")
            raw = batch.column("raw").flatten().to_numpy().astype(np.float64)
            numel = batch.column("numel").to_numpy().astype(np.int64)
            first, stride = store.add_host_rows(raw.tobytes(), numel.tobytes())
            columns.add_rows(
                site_lookup[sites],
                batch.column("call").to_numpy(),
                batch.column("step").to_numpy(),
                batch.column("flags").to_numpy(),
                first + stride * np.arange(len(sites), dtype=np.int64),
            )
            continue
        data = batch.to_pydict()
        loaded: dict[str, dict[str, Tensor]] = {}
        for step, call, site, flags, numel, raw, value, tensors_file in zip(
            data["step"],
            data["call"],
            data["site"],
            data["flags"],
            data["numel"],
            data["raw"],
            data["value"],
            data["tensors"],
            strict=True,
        ):
            if site not in site_ids:
                raise RecordingError(f"{root / _RECORDS}: a record names site {site}, unknown")
            sid = site_ids[site]
            if value is None:
                assert store is not None
                ref, _ = store.add_host_rows(
                    array("d", raw).tobytes(), array("q", [numel]).tobytes()
                )
                columns.add(sid, call, step, flags, ref)
                continue
            tensors: dict[str, Tensor] = {}
            if tensors_file is not None:
                tensors = loaded.get(tensors_file)  # type: ignore[assignment]
                if tensors is None:
                    file = root / _TENSORS / tensors_file
                    try:
                        tensors = loaded[tensors_file] = load_file(str(file))
                    except Exception as error:
                        raise RecordingError(f"{file}: cannot be read ({error})") from error
            columns.add_object(sid, call, step, flags, _decode(json.loads(value), tensors, stats))
    log: list[LogEntry] = []
    for batch in _batches(root, _LOG, live, recover):
        data = batch.to_pydict()
        for step, name, value, text in zip(
            data["step"], data["name"], data["value"], data["text"], strict=True
        ):
            log.append(LogEntry(step, name, math.nan if value is None else value, text))
    return Recording(columns, stats, log, bool(meta.get("complete", False)))
