"""Every file tensor_tracker writes is created here, so that a path someone else prepared
cannot turn a write against the user.

A directory the user hands over (a recording from someone else, a shared run directory)
may hold, at the name the library is about to write, a symbolic link to a file of the
user's (`report.html` -> `~/.bashrc`), a FIFO (an `open` for writing would wait for a
reader for ever), or a second hard link to another file. `open_for_writing` opens without
following a link (`O_NOFOLLOW`), without blocking (`O_NONBLOCK`), then checks the opened
file itself (a regular file with one name) before it truncates anything, and refuses
everything else with a `FileWriteError` saying what stands there and what to do.
`make_dir` does the same for a directory. `explain` says in words why the operating
system refused a write (a full disk, a quota, a file-size limit, a read-only file
system), and `utf8_safe` makes text with lone surrogates (file names decoded with
`surrogateescape`, `"\\udcff"` in a module name) writable as UTF-8.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from .errors import FileWriteError

__all__ = ["explain", "make_dir", "open_for_writing", "utf8_safe", "write_file"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
_OPEN |= getattr(os, "O_CLOEXEC", 0)


def _refused(what: str, path: Path, stands: str) -> FileWriteError:
    return FileWriteError(
        f"{what}: {path} is {stands}; tensor_tracker writes only regular files it can "
        "replace safely (never through a link, never into a FIFO): remove it or choose "
        "another path",
        errno.EEXIST,
    )


def explain(error: OSError, path: Path) -> str:
    """Why the operating system refused a write at `path`, in words (the free space for a
    full disk, the limit for a file-size limit)."""
    code = error.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        where = path
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            free = f"{shutil.disk_usage(where).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        what = "the disk is full" if code == errno.ENOSPC else "the disk quota is exceeded"
        return f"{what} ({free})"
    if code == errno.EFBIG:
        import resource  # POSIX only, like the error

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            return (
                f"a file reached the file-size limit of this process ({limit:,} bytes, "
                "RLIMIT_FSIZE: `ulimit -f`), not a full disk"
            )
        return "a file reached the largest size this file system allows"
    if code == errno.EROFS:
        return "the file system is read-only"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return str(error.strerror or error)


def open_for_writing(path: Path, what: str, *, new: bool = False, truncate: bool = True) -> int:
    """A file descriptor of the regular file `path`, created if missing, opened for writing
    (emptied unless `truncate=False`; `new=True`: it must not exist yet). `what` names the
    argument or file in messages.

    Raises:
        FileWriteError: a symbolic link, a FIFO, a directory or another non-regular file, or
            a file with other names (hard links), stands at `path`; or the file cannot be
            created (read-only file system, permissions, a full disk).
    """
    try:
        fd = os.open(path, _OPEN | (os.O_EXCL if new else 0), 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refused(what, path, "a symbolic link") from error
        if error.errno == errno.ENXIO:  # a FIFO no one reads: O_NONBLOCK did not wait
            raise _refused(what, path, "a FIFO") from error
        if error.errno == errno.EISDIR:
            raise _refused(what, path, "a directory") from error
        if error.errno == errno.EEXIST:
            raise _refused(what, path, "already there (a file this writer did not make)") from error
        raise FileWriteError(
            f"{what}: cannot create {path}: {explain(error, path)}; choose a writable place",
            error.errno,
        ) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(what, path, "not a regular file (a FIFO or a device)")
        if info.st_nlink > 1:
            raise _refused(what, path, "a file with other names (hard links)")
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(path: Path, data: bytes, what: str) -> None:
    """Write `data` as the whole content of the regular file `path` (see
    `open_for_writing`).

    Raises:
        FileWriteError: the file cannot be created or written (the message says why).
    """
    fd = open_for_writing(path, what)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as error:
        raise FileWriteError(
            f"{what}: cannot write {path}: {explain(error, path)}", error.errno
        ) from error
    finally:
        os.close(fd)


def make_dir(path: Path, what: str) -> None:
    """Create the directory `path` (its parent must exist), or check that the one there is
    a directory itself, not a symbolic link to one.

    Raises:
        FileWriteError: something else stands at `path`, or it cannot be created.
    """
    try:
        os.mkdir(path)
    except FileExistsError:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            raise _refused(what, path, "a symbolic link") from None
        if not stat.S_ISDIR(info.st_mode):
            raise _refused(what, path, "not a directory") from None
    except OSError as error:
        raise FileWriteError(
            f"{what}: cannot create {path}: {explain(error, path)}; choose a writable place",
            error.errno,
        ) from error


def utf8_safe(text: str) -> str:
    """`text`, with each lone surrogate (which UTF-8 cannot hold: a file name decoded with
    `surrogateescape`, a module named `"\\udcff"`) written as its escape `\\udcff`.

    Example:
        >>> utf8_safe("layer\\udcff"), utf8_safe("ok")
        ('layer\\\\udcff', 'ok')
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
