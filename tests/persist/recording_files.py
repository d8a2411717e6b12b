"""Helpers for the recording tests: read and rewrite a version 2 recording the way a hostile
author who knows the format would (checksums recomputed, so only the reader's other checks
stand between the file and the user), and compare what two loads hold."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from torch import Tensor

from tensor_tracker.stats import Stats


def journal(path: Path) -> list[dict[str, Any]]:
    """The commits of `path`'s journal."""
    lines = (path / "journal").read_bytes().splitlines()
    return [json.loads(line[9:]) for line in lines]


def write_journal(path: Path, commits: list[dict[str, Any]]) -> None:
    """Write `commits` as the journal, each line with its CRC32 (the documented rule)."""
    out = b""
    for commit in commits:
        body = json.dumps(commit, sort_keys=True, separators=(",", ":")).encode()
        out += b"%08x " % zlib.crc32(body) + body + b"\n"
    (path / "journal").write_bytes(out)


def rewrite_meta(path: Path, **changes: Any) -> None:
    """Change fields of recording.json and recompute its documented checksum."""
    meta = json.loads((path / "recording.json").read_text())
    meta.update(changes)
    rest = {k: v for k, v in meta.items() if k != "checksum"}
    meta["checksum"] = zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())
    (path / "recording.json").write_text(json.dumps(meta))


def tables(path: Path, name: str) -> list[pa.Table]:
    """Every block of the blocks file `name`, decoded, in order."""
    data = (path / name).read_bytes()
    out = []
    for commit in journal(path):
        for block in commit["blocks"]:
            if block["file"] == name:
                stored = data[block["at"] : block["at"] + block["size"]]
                raw = (
                    pa.decompress(stored, block["raw"], codec="zstd", asbytes=True)
                    if block["zstd"]
                    else stored
                )
                out.append(pa.ipc.open_stream(pa.py_buffer(raw)).read_all())
    return out


def craft(path: Path, name: str, change: Callable[[int, pa.Table], pa.Table | bytes]) -> None:
    """Rewrite every block of `name` as `change(index, table)` returns it (a table, or raw
    bytes to store as the block), uncompressed, fixing the journal's offsets and checksums."""
    blocks = tables(path, name)
    commits = journal(path)
    out = b""
    index = 0
    for commit in commits:
        for block in commit["blocks"]:
            if block["file"] != name:
                continue
            new = change(index, blocks[index])
            if isinstance(new, pa.Table):
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, new.schema) as stream:
                    stream.write_table(new)
                new = sink.getvalue().to_pybytes()
            block.update(at=len(out), size=len(new), raw=len(new), zstd=False, crc=zlib.crc32(new))
            out += new
            index += 1
    (path / name).write_bytes(out)
    write_journal(path, commits)


def replace_column(table: pa.Table, column: str, values: list[Any]) -> pa.Table:
    """`table` with `column` holding `values` (same type; the schema metadata kept)."""
    index = table.schema.get_field_index(column)
    array = pa.array(values, table.schema.field(column).type)
    return table.set_column(index, table.schema.field(column), array)


def _key(value: Any) -> Any:
    if isinstance(value, Tensor):
        flat = value.detach().reshape(-1)
        data = flat.view(torch.uint8) if flat.dtype.is_floating_point else flat
        return ("tensor", str(value.dtype), tuple(value.shape), bytes(data.numpy().tobytes()))
    if isinstance(value, Stats):
        raw = tuple("nan" if math.isnan(x) else x for x in value._host_values())
        vectors = tuple(
            tuple("nan" if math.isnan(x) else x for x in v.tolist()) for v in value.vectors
        )
        return ("stats", tuple(value.names), raw, value.numel, vectors)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((_key(k), _key(v)) for k, v in value.items()))
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return (type(value).__name__, repr(value))


def signature(tracker: Any) -> tuple[Any, ...]:
    """Everything a loaded tracker holds, comparable with `==` (tensors bitwise)."""
    stashes = tuple(
        (s.name, s.type.__qualname__, s.grad, s.call, s.step, s.kind, s.attr, _key(s.value))
        for s in tracker
    )
    log = tuple(
        (e.step, e.name, "nan" if math.isnan(float(e.value)) else float(e.value), e.text)
        for e in tracker.logged
    )
    return stashes, log
