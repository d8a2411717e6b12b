"""Issue 26: recordings a user can trust. A hostile recording never reads outside its
directory, never exhausts memory or blocks, and every malformed file is a `RecordingError`
naming it; a kill, a Ctrl-C or a full disk leaves whole steps that load, and `load` says
when a run did not finish."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import load, track
from tensor_tracker._persist import integrity, recording
from tensor_tracker._persist.recording import RecordingWriter
from tensor_tracker.errors import ArgumentValueError, FileWriteError, RecordingError
from tests.helpers import hook_count
from tests.persist.recording_files import (
    craft,
    journal,
    replace_column,
    rewrite_meta,
    signature,
    tables,
    write_journal,
)

pa = pytest.importorskip("pyarrow")

FIXTURES = Path(__file__).parent / "fixtures"


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _record(path: Path, steps: int = 3, **options: Any) -> None:
    model = _model()
    with track(model, stream_to=path, **options) as t:
        for step in range(steps):
            model(torch.randn(3, 4)).sum().backward()
            t.log("loss", float(step))
            t.step()


def _quiet_load(path: Path, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete recording loads without any warning
        return load(path, **options)


# -- 1: nothing outside the recording ----------------------------------------------------


def _secret(tmp_path: Path) -> Path:
    from safetensors.torch import save_file

    secret = tmp_path / "private" / "secret.safetensors"
    secret.parent.mkdir()
    save_file({"0.0": torch.tensor([42.0])}, str(secret))
    return secret


@pytest.mark.parametrize("named", ["../../private/secret.safetensors", "/abs/secret.safetensors"])
def test_a_recording_naming_a_file_outside_it_is_refused(tmp_path: Path, named: str) -> None:
    path = tmp_path / "run"
    _record(path, steps=1)
    secret = _secret(tmp_path)
    named = named.replace("/abs", str(secret.parent))
    commits = journal(path)
    tensors = next(c["tensors"] for c in commits if c["tensors"])
    tensors["name"] = named
    write_journal(path, commits)
    craft(path, "records.blocks", lambda _, t: replace_column(t, "tensors", [named] * len(t)))
    with pytest.raises(RecordingError, match="tensors"):
        load(path)


def test_symbolic_links_leading_out_of_the_recording_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path, steps=1)
    secret = _secret(tmp_path)
    [tensors_file] = (path / "tensors").iterdir()
    tensors_file.unlink()
    tensors_file.symlink_to(secret)
    with pytest.raises(RecordingError, match=r"outside the recording|symbolic link"):
        load(path)
    # The whole tensors folder pointing elsewhere, and a blocks file that is a link.
    (path / "tensors").rename(tmp_path / "elsewhere")
    (path / "tensors").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RecordingError, match="outside the recording"):
        load(path)
    (path / "log.blocks").rename(tmp_path / "log.blocks")
    (path / "log.blocks").symlink_to(tmp_path / "log.blocks")
    with pytest.raises(RecordingError, match=r"log.blocks"):
        load(path)


# -- 3: a run that did not finish says so ------------------------------------------------

_CRASH = textwrap.dedent(
    """
    import os, sys, torch
    from torch import nn
    import tensor_tracker
    from tensor_tracker._persist import integrity, recording

    real = integrity.AppendFile.append
    commits = {"n": 0}

    def append(self, data):
        if self.path.name == "journal":
            commits["n"] += 1
            if commits["n"] == 6:  # step 5: its blocks are on disk, half its journal line
                real(self, bytes(data)[: len(data) // 2])
                os._exit(0)
        real(self, data)

    integrity.AppendFile.append = append
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with tensor_tracker.track(model, stats=True, stream_to=sys.argv[1]) as t:
        for step in range(10):
            model(torch.randn(2, 4)).sum().backward()
            t.log("loss", float(step))
            t.step()
    """
)


def test_a_killed_run_loads_its_whole_steps_says_it_is_incomplete_once(tmp_path: Path) -> None:
    path = tmp_path / "run"
    subprocess.run([sys.executable, "-c", _CRASH, str(path)], check=True, timeout=120)
    with pytest.warns(RuntimeWarning, match="incomplete recording.*5 step.*unfinished") as seen:
        run = load(path)
    assert len(seen) == 1
    assert run.complete is False
    steps = sorted(set(run.to_frame()["step"]))
    assert steps == [0, 1, 2, 3, 4]
    assert len(run.log_frame()) == len(steps)  # scalars commit with their step's records
    # A recycled pid in recording.json changes nothing: only the lock says "alive".
    rewrite_meta(path, writer={"pid": os.getpid(), "host": os.uname().nodename})
    with pytest.warns(RuntimeWarning, match="incomplete recording"):
        assert load(path).complete is False


def test_a_live_writer_is_told_apart_by_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "run"
    model = _model()
    with track(model, stats=True, stream_to=path) as t:
        for _ in range(2):
            model(torch.randn(3, 4)).sum().backward()
            t.step()
        live = _quiet_load(path)  # the writer holds its lock: no warning
        assert live.complete is False and len(live) > 0
    assert _quiet_load(path).complete is True  # paused between blocks: complete for now


# -- 4: one writer per directory ---------------------------------------------------------


def test_a_second_writer_on_a_claimed_directory_fails_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "run"
    lock = integrity.WriterLock(path)  # a writer that claimed it and has written nothing yet
    try:
        with pytest.raises(ArgumentValueError, match="another writer"):
            RecordingWriter(path, None)
        assert sorted(p.name for p in path.iterdir()) == ["writer.lock"]
    finally:
        lock.release()
    first = RecordingWriter(path, None)
    with pytest.raises(ArgumentValueError, match="another writer"):
        RecordingWriter(path, None)
    first.close()
    with pytest.raises(ArgumentValueError, match="already holds a recording"):
        RecordingWriter(path, None)


def _start_writer(path: str, start: Any, results: Any) -> None:
    start.wait(timeout=120)  # every writer has imported torch: they race from here
    try:
        _record(Path(path), steps=2, stats=True)
        results.put("ok")
    except ArgumentValueError:
        results.put("refused")


@pytest.mark.slow  # four spawned interpreters import torch: seconds of CPU each
def test_writers_racing_for_one_directory_leave_one_recording(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start = context.Barrier(4)
    workers = [
        context.Process(target=_start_writer, args=(str(tmp_path / "run"), start, results))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    outcomes = sorted(results.get(timeout=10) for _ in workers)
    assert outcomes == ["ok", "refused", "refused", "refused"]
    assert sorted(set(_quiet_load(tmp_path / "run").to_frame()["step"])) == [0, 1]


# -- 5: a step is written whole or not at all --------------------------------------------


def _appends_per_step(tmp_path: Path) -> int:
    calls = 0
    real = integrity.AppendFile.append

    def counting(self: integrity.AppendFile, data: Any) -> None:
        nonlocal calls
        calls += 1
        real(self, data)

    model = _model()
    with track(model, stream_to=tmp_path / "count") as t:
        model(torch.randn(3, 4)).sum().backward()
        t.step()
        model(torch.randn(3, 4)).sum().backward()
        t.log("loss", 0.0)
        integrity.AppendFile.append = counting  # type: ignore[method-assign]
        try:
            t.step()
        finally:
            integrity.AppendFile.append = real  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("after", [False, True])
def test_ctrl_c_inside_step_leaves_every_step_once(
    tmp_path: Path, monkeypatch: Any, after: bool
) -> None:
    appends = _appends_per_step(tmp_path)
    assert appends == 4  # records, log, tensors file, journal line
    real = integrity.AppendFile.append
    reference = None
    for at in range(appends):
        calls = 0

        def interrupted(self: integrity.AppendFile, data: Any, at: int = at) -> None:
            nonlocal calls
            calls += 1
            if calls == at + 1:
                if after:  # the bytes land, then Ctrl-C
                    real(self, data)
                raise KeyboardInterrupt
            real(self, data)

        path = tmp_path / f"run-{at}"
        model = _model()
        with pytest.raises(KeyboardInterrupt), track(model, stream_to=path) as t:
            for step in range(3):
                model(torch.randn(3, 4)).sum().backward()
                t.log("loss", float(step))
                if step == 1:
                    monkeypatch.setattr(integrity.AppendFile, "append", interrupted)
                    t.step()  # raises KeyboardInterrupt
                t.step()
        monkeypatch.setattr(integrity.AppendFile, "append", real)
        run = _quiet_load(path)  # the with block's end wrote what the interrupted step kept
        assert run.complete
        frame = run.to_frame()
        assert sorted(set(frame["step"])) == [0, 1]
        counts = frame.groupby("step").size().tolist()
        assert counts[0] == counts[1]  # step 1 once, whole
        assert run.log_frame()["step"].tolist() == [0, 1]
        if reference is None:
            reference = counts
        assert counts == reference


# -- 6: no silent partial or empty load --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "how"),
    [
        ("records.blocks", "empty"),
        ("records.blocks", "missing"),
        ("log.blocks", "missing"),
        ("sites.blocks", "missing"),
        ("journal", "missing"),
        ("tensors", "missing"),
    ],
)
def test_an_empty_or_missing_file_is_an_error(tmp_path: Path, name: str, how: str) -> None:
    path = tmp_path / "run"
    _record(path)
    target = path / name
    if name == "tensors":
        target = sorted(target.iterdir())[-1]
    if how == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    with pytest.raises(RecordingError, match=target.name):
        load(path)


def test_recover_says_what_it_dropped_also_for_a_cut_in_the_first_block(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path, stats=True)
    records = path / "records.blocks"
    first = journal(path)[0]["blocks"]
    at = next(b for b in first if b["file"] == "records.blocks")
    records.write_bytes(records.read_bytes()[: at["size"] // 2])  # inside the first block
    with pytest.raises(RecordingError, match=r"records.blocks is truncated"):
        load(path)
    with pytest.warns(RuntimeWarning, match=r"records.blocks is truncated.*first 0 commit"):
        recovered = load(path, recover=True)
    assert len(recovered) == 0 and recovered.complete is False


# -- 7: checksums and run ids ------------------------------------------------------------


@pytest.mark.parametrize("name", ["records.blocks", "log.blocks", "sites.blocks", "tensors"])
def test_a_flipped_byte_is_caught(tmp_path: Path, name: str) -> None:
    path = tmp_path / "run"
    _record(path)
    target = path / name
    if name == "tensors":
        target = sorted(target.iterdir())[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(RecordingError, match="checksum"):
        load(path)


@pytest.mark.parametrize("name", ["records.blocks", "recording.json", "journal", "tensors"])
def test_a_file_from_another_run_is_caught(tmp_path: Path, name: str) -> None:
    _record(tmp_path / "a")
    _record(tmp_path / "b")  # the same model and data: only the run ids differ
    if name == "tensors":
        name = f"tensors/{sorted((tmp_path / 'a' / 'tensors').iterdir())[0].name}"
    (tmp_path / "a" / name).write_bytes((tmp_path / "b" / name).read_bytes())
    with pytest.raises(RecordingError, match=r"another run|checksum|run id"):
        load(tmp_path / "a")


# -- 8: sizes and indices checked before anything is allocated ---------------------------


@pytest.mark.parametrize("site", [2**31 - 1, -1, 999])
def test_a_site_id_out_of_range_is_refused(tmp_path: Path, site: int) -> None:
    path = tmp_path / "run"
    _record(path, stats=True)
    craft(path, "records.blocks", lambda _, t: replace_column(t, "site", [site] * len(t)))
    with pytest.raises(RecordingError, match="names a site outside"):
        load(path)


def test_a_huge_histogram_in_the_metadata_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path, stats=[tensor_tracker.stats.histogram(bins=4)])
    meta = json.loads((path / "recording.json").read_text())
    meta["stats"][0]["histogram"]["bins"] = 10**12
    rewrite_meta(path, stats=meta["stats"])
    with pytest.raises(RecordingError, match="bins"):
        load(path)


def test_a_decompression_bomb_is_refused_before_decompressing(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path, stats=True)
    bomb = pa.compress(b"\0" * (64 << 20), codec="zstd", asbytes=True)  # 64 MiB in ~2 kB
    commits = journal(path)
    records = path / "records.blocks"
    block = next(b for b in commits[0]["blocks"] if b["file"] == "records.blocks")
    data = records.read_bytes()
    records.write_bytes(bomb + data[block["size"] :])
    shift = len(bomb) - block["size"]
    block.update(size=len(bomb), raw=64 << 20, zstd=True, crc=zlib.crc32(bomb))
    for commit in commits[1:]:
        for later in commit["blocks"]:
            if later["file"] == "records.blocks":
                later["at"] += shift
    write_journal(path, commits)
    with pytest.raises(RecordingError, match="refused before decompressing"):
        load(path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path)
    (path / "log.blocks").unlink()
    os.mkfifo(path / "log.blocks")
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            load(path)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "load() blocked on a FIFO"
    assert isinstance(outcome[0], RecordingError) and "not a regular file" in str(outcome[0])


# -- 9: every malformed recording is a RecordingError naming the file --------------------


@pytest.mark.parametrize(
    "content",
    [
        b'{"format": "tensor_tracker.recording", "version": 2, "writer": "x"}',
        b'{"format": "tensor_tracker.recording", "version": "2"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"format": "tensor_tracker.recording", "version": 2, "run": "\xff\xfe"}',
        b"[1, 2, 3]",
        b"",
    ],
)
def test_a_malformed_metadata_file_is_a_recording_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run"
    _record(path)
    (path / "recording.json").write_bytes(content)
    with pytest.raises(RecordingError, match=r"recording.json"):
        load(path)


@pytest.mark.parametrize(
    "value",
    ['{"$unrecorded": 5}', '{"$tensor": "nope"}', "[" * 50_000 + "]" * 50_000, '{"$dict": [[]]}'],
)
def test_a_malformed_value_is_a_recording_error(tmp_path: Path, value: str) -> None:
    path = tmp_path / "run"
    _record(path)
    craft(path, "records.blocks", lambda _, t: replace_column(t, "value", [value] * len(t)))
    with pytest.raises(RecordingError, match=r"records.blocks.*malformed value"):
        load(path)


def test_a_malformed_journal_line_is_a_recording_error(tmp_path: Path) -> None:
    path = tmp_path / "run"
    _record(path)
    commits = journal(path)
    commits[1]["blocks"][0]["at"] = "zero"
    write_journal(path, commits)
    with pytest.raises(RecordingError, match="journal: a malformed block"):
        load(path)


def test_a_version_1_recording_says_it_is_from_the_older_format() -> None:
    with pytest.raises(RecordingError, match="version 1 recording, from an older tensor_tracker"):
        load(FIXTURES / "recording-v1")


# -- 11: a full disk ---------------------------------------------------------------------


def _fill_disk(monkeypatch: Any) -> None:
    """From now on nothing more fits on the disk (every append fails with ENOSPC)."""

    def append(self: integrity.AppendFile, data: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(integrity.AppendFile, "append", append)


def test_a_full_disk_raises_one_recording_error_and_keeps_what_was_written(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "run"
    model = _model()
    full = rf"{re.escape(str(path))}: the disk is full \([\d,]+ bytes free\)"
    with pytest.raises(RecordingError, match=full), track(model, stats=True, stream_to=path) as t:
        for step in range(6):
            model(torch.randn(3, 4)).sum().backward()
            t.log("loss", float(step))
            if step == 2:
                _fill_disk(monkeypatch)
            t.step()
    monkeypatch.undo()
    run = _quiet_load(path)
    assert run.complete and sorted(set(run.to_frame()["step"])) == [0, 1]
    assert run.log_frame()["step"].tolist() == [0, 1]


def test_on_disk_full_warn_stops_recording_and_training_goes_on(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "run"
    model = _model()
    with track(model, stats=True, stream_to=path, on_disk_full="warn") as t:
        for step in range(6):
            model(torch.randn(3, 4)).sum().backward()
            t.log("loss", float(step))
            if step == 2:
                _fill_disk(monkeypatch)
                with pytest.warns(RuntimeWarning, match="disk is full.*training goes on"):
                    t.step()
                continue
            t.step()
        assert len(t) == 0  # nothing is kept in memory afterwards
    monkeypatch.undo()
    assert sorted(set(_quiet_load(path).to_frame()["step"])) == [0, 1]
    with pytest.raises(ArgumentValueError, match="on_disk_full"):
        track(model, on_disk_full="ignore")


class _Disk:
    """A disk with `free` bytes left: `os.write` takes from them (ENOSPC when a write does
    not fit), `os.ftruncate` gives back what it cuts off."""

    def __init__(self, monkeypatch: Any, free: int) -> None:
        self.free = free
        real_write, real_truncate = os.write, os.ftruncate

        def write(fd: int, data: Any) -> int:
            if len(data) > self.free:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.free -= len(data)
            return real_write(fd, data)

        def truncate(fd: int, length: int) -> None:
            self.free += max(os.fstat(fd).st_size - length, 0)
            real_truncate(fd, length)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "ftruncate", truncate)


def test_a_completely_full_disk_still_closes_the_recording(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # Issue 35, item 14: with no byte left, recording.json could not be rewritten and the
    # run looked killed; the writer's reserve makes room to close it.
    path = tmp_path / "run"
    model = _model()
    disk_full = pytest.raises(RecordingError, match="the disk is full")
    with disk_full, track(model, stats=True, stream_to=path) as t:
        for step in range(4):
            model(torch.randn(3, 4)).sum().backward()
            if step == 2:
                _Disk(monkeypatch, free=0)
            t.step()
    monkeypatch.undo()
    run = _quiet_load(path)  # no "killed or crashed" warning
    assert run.complete and sorted(set(run.to_frame()["step"])) == [0, 1]
    assert (path / "writer.lock").stat().st_size == 0  # the reserve is given back


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_a_file_size_limit_is_not_called_a_full_disk(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import resource, signal, torch
        from torch import nn
        import tensor_tracker
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        model = nn.Linear(256, 256)
        try:
            with tensor_tracker.track(model, stream_to={str(tmp_path / "run")!r}) as t:
                resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
                model(torch.randn(256, 256)).sum().backward()  # 256 KiB copies
                t.step()
        except tensor_tracker.errors.RecordingError as error:
            print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "file-size limit of this process (100,000 bytes, RLIMIT_FSIZE" in done.stdout
    assert "disk is full" not in done.stdout


def test_stream_to_on_a_read_only_file_system_is_a_clear_error(
    tmp_path: Path, monkeypatch: Any
) -> None:
    def read_only(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    model = _model()
    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(
        FileWriteError, match=r"stream_to=: cannot create .*: the file system is read-only"
    ):
        track(model, stream_to=tmp_path / "new" / "run")
    monkeypatch.undo()
    assert hook_count(model) == 0


def test_a_recording_round_trips_exactly(tmp_path: Path) -> None:
    model = _model()
    with track(model) as t:
        model(torch.randn(3, 4)).sum().backward()
        t.log("loss", 1.5)
        t.note("note")
    t.save(tmp_path / "run")
    assert signature(_quiet_load(tmp_path / "run")) == signature(t)


# -- issue 35: bounded work per byte of a hostile recording ------------------------------


def _ipc(table: Any, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as stream:
        stream.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_arrow_buffers_compressed_inside_a_block_are_refused(tmp_path: Path) -> None:
    # Declared uncompressed ("zstd": false), the block's own Arrow buffers are compressed:
    # they would decompress past the 64x bound. The writer never writes them.
    path = tmp_path / "run"
    _record(path, stats=True)
    craft(path, "records.blocks", lambda _, table: _ipc(table, "zstd"))
    with pytest.raises(RecordingError, match=r"records.blocks at byte 0: .*compressed record"):
        load(path)


def _near_64x(path: Path, blocks: int) -> int:
    """Add to a recording `blocks` records blocks that are valid and compress just under
    64x (rows of the same statistics, random ones among them); its records before."""
    _record(path, steps=1, stats=True)
    recorded = len(load(path))
    table = tables(path, "records.blocks")[0]
    rows = 20_000
    rng = np.random.default_rng(0)
    width = table.schema.field("raw").type.list_size
    raw = np.ones((rows, width))
    noisy = rng.random(rows) < 0.04
    raw[noisy] = rng.random((int(noisy.sum()), width))
    columns = {name: pa.array(np.zeros(rows, np.int64)) for name in ("step", "numel")}
    big = pa.Table.from_arrays(
        [
            columns["step"],
            pa.array(np.zeros(rows, np.int32)),
            pa.array(np.zeros(rows, np.int32)),
            pa.array(np.zeros(rows, np.uint8)),
            columns["numel"],
            pa.FixedSizeListArray.from_arrays(pa.array(raw.reshape(-1)), width),
            pa.nulls(rows, pa.string()),
            pa.nulls(rows, pa.string()),
        ],
        schema=table.schema,
    )
    data = _ipc(big)
    packed = pa.compress(data, codec="zstd", asbytes=True)
    assert 32 < len(data) / len(packed) < 64
    commits = journal(path)
    out = (path / "records.blocks").read_bytes()
    for _ in range(blocks):
        block = {"file": "records.blocks", "at": len(out), "size": len(packed)}
        block.update(raw=len(data), zstd=True, crc=zlib.crc32(packed))
        commits.append({"run": commits[0]["run"], "seq": len(commits), "blocks": [block]})
        commits[-1]["tensors"] = None
        out += packed
    (path / "records.blocks").write_bytes(out)
    write_journal(path, commits)
    rewrite_meta(path, commits=len(commits))
    return recorded


def test_a_load_holds_at_most_64_times_the_size_on_disk_unless_told(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "run"
    recorded = _near_64x(path, blocks=4)
    size = sum(f.stat().st_size for f in path.iterdir())
    # Without the fixed allowance a load adds (256 MiB), so that the bound shows at once.
    monkeypatch.setattr(integrity, "MEMORY_SLACK", 0)
    with pytest.raises(RecordingError) as refused:
        load(path)
    message = str(refused.value)
    assert "records.blocks at byte" in message and f"{64 * size:,} bytes" in message
    assert "max_memory=" in message
    # A recording one trusts loads with a larger limit, every row.
    assert len(load(path, max_memory=1 << 30)) == recorded + 4 * 20_000
    with pytest.raises(RecordingError, match="more than 1,000 bytes"):
        load(path, max_memory=1000)


def test_max_memory_is_checked() -> None:
    with pytest.raises(ArgumentValueError, match=r"load\(max_memory=...\)"):
        load(FIXTURES, max_memory=0)


def test_a_commit_without_blocks_stops_the_load_there(tmp_path: Path, monkeypatch: Any) -> None:
    # The journal of 1,000,000 empty commits (87 MB) took 35 s: a commit must hold
    # a block (the writer writes no other), and each line is read only when reached.
    path = tmp_path / "run"
    _record(path, steps=1)
    commits = journal(path)
    run = commits[0]["run"]
    empty = [{"run": run, "seq": i, "blocks": [], "tensors": None} for i in range(1, 10_001)]
    write_journal(path, commits + empty)
    rewrite_meta(path, commits=len(commits) + len(empty))
    read: list[int] = []
    original = recording.read_commit

    def counting(line: bytes, number: int, where: Path) -> dict[str, Any]:
        read.append(number)
        return original(line, number, where)

    monkeypatch.setattr(recording, "read_commit", counting)
    with pytest.raises(RecordingError, match="journal: a commit without blocks"):
        load(path)
    assert read == [0, 1]


def test_a_huge_spec_is_refused_in_linear_time(tmp_path: Path) -> None:
    # The case: 40,000 statistics, one of them twice (870 kB of recording.json):
    # 75 s when repeated names were counted with list.count, under a second now.
    path = tmp_path / "run"
    _record(path, steps=1, stats=True)
    spec = [{"custom": f"c{i}"} for i in range(40_000)] + [{"custom": "c0"}]
    rewrite_meta(path, stats=spec)
    with pytest.raises(RecordingError, match=r"recording.json: .*repeated: \['c0'\]"):
        load(path)


def test_histogram_bins_are_bounded_in_all(tmp_path: Path) -> None:
    # Each histogram within the bound, together 40,000 times over it: every record would
    # allocate them all.
    path = tmp_path / "run"
    _record(path, steps=1, stats=True)
    item = {"bins": 1 << 20, "range": [0, 1], "name": "h"}
    spec = [{"histogram": {**item, "name": f"h{i}"}} for i in range(2)]
    rewrite_meta(path, stats=spec)
    with pytest.raises(RecordingError, match=r"recording.json: .*1048576 in all"):
        load(path)
