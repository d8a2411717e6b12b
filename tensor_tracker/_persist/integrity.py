"""What keeps a recording on disk whole and a hostile one harmless (used by
`tensor_tracker._persist.recording`, whose docstring describes the format):

- `WriterLock`: the directory claimed by one writer with `fcntl.flock` on ``writer.lock``
  (atomic; the kernel releases it when the writer's process ends, however it ends;
  `msvcrt.locking` on Windows, untested there), and `writer_alive`, what a reader asks.
- `AppendFile`: a file the writer appends blocks to, remembering its committed length so
  an interrupted or failed step is cut off again (`rollback`).
- `commit_line` / `journal_lines` / `read_commit`: the journal, one line per committed
  step, each with its own CRC32 (a reader checks and parses each line when it reaches it).
- `pack` / `unpack`: a block compressed with zstd only when it does not expand more than
  `MAX_RATIO` times, so a reader bounds memory by the file's size before it decompresses.
- `Budget`: what a load may hold, `MEMORY_RATIO` times the recording's size on disk (plus
  `MEMORY_SLACK`) unless raised, charged before each allocation.
- `read_inside`: a file named by a recording read only when it is a regular file inside the
  recording's directory, of a size known before it is read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import zlib
from pathlib import Path
from typing import Any

from .._files import explain, open_for_writing
from .._optional import require
from ..errors import ArgumentValueError, FileWriteError, RecordingError

__all__ = [
    "LOCK",
    "MAX_RATIO",
    "MEMORY_RATIO",
    "MEMORY_SLACK",
    "SLACK",
    "AppendFile",
    "Budget",
    "WriterLock",
    "checksum",
    "commit_line",
    "journal_lines",
    "load_json",
    "pack",
    "read_commit",
    "read_inside",
    "unpack",
    "writer_alive",
]

LOCK = "writer.lock"
MAX_RATIO = 64
"""A zstd block holds at most `MAX_RATIO` times its stored size (plus `SLACK`); the writer
stores a block that would compress better uncompressed."""
SLACK = 1 << 16
MEMORY_RATIO = 64
"""A load holds at most `MEMORY_RATIO` times the recording's size on disk (plus
`MEMORY_SLACK`) unless `load(max_memory=...)` says otherwise: see `Budget`."""
MEMORY_SLACK = 256 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_OPEN_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW


def _try_lock(fd: int, exclusive: bool) -> bool:
    """Lock the open file `fd` without waiting; whether it was free. The kernel drops the
    lock when the process ends, however it ends."""
    if sys.platform == "win32":  # no flock: a lock on the first byte (msvcrt)
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def checksum(data: bytes | memoryview) -> int:
    """CRC32 of `data` (`zlib.crc32`), what every block, tensors file, journal line and
    the metadata carry."""
    return zlib.crc32(data)


class WriterLock:
    """Claims the directory `path` (created if missing) for one writer: an exclusive
    `fcntl.flock` on ``path/writer.lock``, held until `release` or the process ends.

    While held, the lock file keeps `reserve` bytes of the disk (`free` gives them back):
    on a disk that filled up, they are what lets the writer still close the recording
    (rewrite ``recording.json``) instead of leaving it looking killed.

    Raises:
        ArgumentValueError: another writer (this process or another) holds it.
        FileWriteError: the directory or the lock file cannot be created (read-only file
            system, ...) or something other than a regular file stands at ``writer.lock``
            (`what` names the argument in the message).
    """

    def __init__(self, path: Path, what: str = "stream_to=") -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise FileWriteError(
                f"{what}: cannot create the directory {path}: {explain(error, path)}; choose "
                "a writable place",
                error.errno,
            ) from error
        self._fd: int | None = open_for_writing(path / LOCK, what, truncate=False)
        if not _try_lock(self._fd, exclusive=True):
            os.close(self._fd)
            self._fd = None
            raise ArgumentValueError(
                f"{path} is being written by another writer right now ({LOCK} is locked); "
                "choose a new directory"
            )

    def reserve(self, size: int) -> None:
        """Hold `size` bytes of the disk in the lock file (incompressible, so that a
        compressing file system keeps them too)."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        view = memoryview(os.urandom(size))
        while view:
            view = view[os.write(self._fd, view) :]

    def free(self) -> None:
        """Give the reserved bytes back to the disk."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)

    def release(self) -> None:
        """Let the directory go, its reserve freed (idempotent)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            _unlock(self._fd)
            os.close(self._fd)
            self._fd = None


def writer_alive(path: Path) -> bool:
    """Whether a writer holds `path`'s lock now (no pid is trusted: only the lock)."""
    try:
        fd = os.open(path / LOCK, _OPEN_READ)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        if not _try_lock(fd, exclusive=False):
            return True
        _unlock(fd)
        return False
    finally:
        os.close(fd)


class AppendFile:
    """A file (created empty, see `open_for_writing`; `new`: it must not exist yet) the
    writer appends to; `committed` is its length at the last commit, `rollback` cuts it
    back there. `what` names the argument in messages."""

    def __init__(self, path: Path, what: str = "stream_to=", new: bool = False) -> None:
        self.path = path
        self._fd: int | None = open_for_writing(path, what, new=new)
        self.committed = 0

    @classmethod
    def reopen(cls, path: Path, committed: int) -> AppendFile:
        """The file `path` appended to before, open again after its first `committed`
        bytes (what follows them was never committed: it is cut off).

        Raises:
            RecordingError: `path` is gone, is no regular file, or is shorter than that.
        """
        file = cls.__new__(cls)
        file.path, file.committed = path, committed
        try:
            file._fd = os.open(path, os.O_WRONLY | _NOFOLLOW)
        except OSError as error:
            raise RecordingError(f"{path} cannot be opened again ({error})") from error
        try:
            info = os.fstat(file._fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size < committed:
                raise RecordingError(
                    f"{path} changed while its writer was paused (it holds {info.st_size} "
                    f"bytes of the {committed} committed); nothing more is written to it"
                )
            os.ftruncate(file._fd, committed)
            os.lseek(file._fd, committed, os.SEEK_SET)
        except BaseException:
            file.close()
            raise
        return file

    def append(self, data: bytes | memoryview) -> None:
        """Write all of `data` at the end."""
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def size(self) -> int:
        """The length on disk now."""
        assert self._fd is not None
        return os.fstat(self._fd).st_size

    def commit(self) -> None:
        """What is on disk now is committed."""
        self.committed = self.size()

    def rollback(self) -> None:
        """Cut off what was appended since the last commit."""
        if self._fd is not None and self.size() != self.committed:
            os.ftruncate(self._fd, self.committed)
            os.lseek(self._fd, self.committed, os.SEEK_SET)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def commit_line(record: dict[str, Any]) -> bytes:
    """One journal line: CRC32 of the JSON as 8 hex digits, a space, the JSON, a newline."""
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return b"%08x " % checksum(body) + body + b"\n"


def journal_lines(data: bytes) -> tuple[list[bytes], bool]:
    """The journal's whole lines (each ended by a newline, which is left out), and whether
    bytes follow the last of them (a line cut short). Nothing is parsed yet: `read_commit`
    checks a line when the reader reaches it, so a load stops at the first bad one."""
    lines = data.split(b"\n")
    torn = bool(lines.pop())  # split() gives at least one item: what follows the last newline
    return lines, torn


def read_commit(line: bytes, number: int, where: Path) -> dict[str, Any]:
    """The commit of journal line `number` (from 0), checked: its CRC32, then its JSON."""
    problem = _bad_line(line)
    if problem is None:
        record = load_json(line[9:], where)
        if isinstance(record, dict):
            return record
        problem = "is not a JSON object"
    raise RecordingError(f"{where}: line {number + 1} {problem}")


def _bad_line(line: bytes) -> str | None:
    if len(line) < 10 or line[8:9] != b" ":
        return "is not a journal line"
    try:
        expected = int(line[:8], 16)
    except ValueError:
        return "has no checksum"
    return None if checksum(line[9:]) == expected else "fails its checksum (corrupted)"


def load_json(data: bytes, where: Path) -> Any:
    """Parse JSON bytes, any failure (encoding, syntax, nesting) as `RecordingError`."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RecordingError(f"{where}: not valid JSON ({error})") from error


def pack(raw: bytes | memoryview) -> tuple[bytes | memoryview, bool]:
    """`raw` as stored: zstd-compressed (`True`) when that is smaller and within
    `MAX_RATIO`, else as it is (`False`)."""
    pa = require("pyarrow", "save")
    packed: bytes = pa.compress(raw, codec="zstd", asbytes=True)
    if len(packed) < len(raw) <= MAX_RATIO * len(packed) + SLACK:
        return packed, True
    return raw, False


def unpack(stored: bytes | memoryview, zstd: bool, size: int, where: str) -> bytes | memoryview:
    """A block's bytes from what was stored; `size` is its declared length, checked against
    `MAX_RATIO` before anything is allocated."""
    if not zstd:
        if size != len(stored):
            raise RecordingError(f"{where}: declared {size} bytes, holds {len(stored)}")
        return stored
    if size > MAX_RATIO * len(stored) + SLACK:
        raise RecordingError(
            f"{where}: declares {size} bytes from {len(stored)} compressed, more than a "
            "recording writes (refused before decompressing)"
        )
    pa = require("pyarrow", "save")
    try:
        data: bytes = pa.decompress(stored, decompressed_size=size, codec="zstd", asbytes=True)
    except (OSError, ValueError) as error:
        raise RecordingError(f"{where}: cannot be decompressed ({error})") from error
    return data


def read_inside(root: Path, name: str, limit: int | None = None) -> bytes | None:
    """The bytes of the file `name` (a relative path) of the recording `root`; `None` when
    it does not exist.

    Raises:
        RecordingError: `name` is absolute, has `..`, leads outside `root` through a
            symbolic link, is a link itself, is not a regular file (a FIFO, a device: never
            opened for reading in a way that could block), or is larger than `limit`.
    """
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or any(p in ("..", ".", "") for p in parts):
        raise RecordingError(f"{root}: the recording names the path {name!r}, outside it")
    path = root / name
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as error:
        raise RecordingError(f"{path}: cannot be resolved ({error})") from error
    if not inside:
        raise RecordingError(f"{path} leads outside the recording (a symbolic link?)")
    try:
        fd = os.open(path, _OPEN_READ)
    except FileNotFoundError:
        return None
    except OSError as error:
        what = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be opened ({error})"
        raise RecordingError(f"{path} {what}; a recording holds regular files only") from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordingError(f"{path} is not a regular file; a recording holds only those")
        if limit is not None and info.st_size > limit:
            raise RecordingError(f"{path} holds {info.st_size} bytes, more than {limit}")
        chunks = []
        left = info.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as error:
        raise RecordingError(f"{path} cannot be read ({error})") from error
    finally:
        os.close(fd)


class Budget:
    """The bytes a load may still allocate: `limit`, by default `MEMORY_RATIO` times the
    recording's size on disk plus `MEMORY_SLACK`. The reader charges what it is about to
    hold (decompressed bytes, and a cost per record and per byte of text) before it
    allocates it, so a hostile recording is refused before it exhausts memory.

    Args:
        root: the recording's directory (its size on disk: `recording.json`, the journal,
            the blocks files and the tensors files).
        limit: the bytes a load may hold; `None`: the default above.
    """

    def __init__(self, root: Path, limit: int | None) -> None:
        self.root = root
        self.size = _size_on_disk(root)
        self.default = limit is None
        self.limit = MEMORY_RATIO * self.size + MEMORY_SLACK if limit is None else limit
        self.used = 0

    def charge(self, nbytes: int, where: object) -> None:
        """Count `nbytes` more, or raise `RecordingError` naming `where` and the limit."""
        self.used += nbytes
        if self.used > self.limit:
            why = (
                f"{MEMORY_RATIO} times the recording's {self.size:,} bytes on disk plus "
                f"{MEMORY_SLACK >> 20} MiB"
                if self.default
                else "max_memory"
            )
            raise RecordingError(
                f"{where}: loading it would hold more than {self.limit:,} bytes ({why}); "
                "refused before allocating. For a big recording you trust, raise the limit: "
                "tensor_tracker.load(path, max_memory=<bytes>)"
            )


def _size_on_disk(root: Path) -> int:
    """The bytes of the regular files of the recording `root` (links are not followed)."""
    total = 0
    for folder in (root, root / "tensors"):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total
