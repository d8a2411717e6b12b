"""Issue 35, item 8: every file tensor_tracker writes is created without following a
symbolic link, without blocking on a FIFO, and refused with a clear `FileWriteError` when
something else stands at its path (`tensor_tracker._files`)."""

from __future__ import annotations

import errno
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensor_tracker._files import explain, make_dir, open_for_writing, utf8_safe, write_file
from tensor_tracker.errors import FileWriteError, TensorTrackerError


@pytest.fixture
def deadline() -> Iterator[None]:
    """A write that blocks (on a FIFO) fails the test after 20 s instead of hanging."""

    def timeout(signum: int, frame: object) -> None:
        raise TimeoutError("blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def plant(path: Path, kind: str, victim: Path) -> None:
    """Put a `kind` ("symlink", "dangling", "fifo", "hardlink", "dir") at `path`."""
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling":
        path.symlink_to(victim.parent / "nothing-here")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "hardlink":
        os.link(victim, path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["symlink", "dangling", "fifo", "hardlink", "dir"])
def test_a_planted_path_is_refused_and_its_target_kept(
    tmp_path: Path, kind: str, deadline: None
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "report.html"
    plant(target, kind, victim)
    with pytest.raises(FileWriteError, match=r"report\(path\): .*report.html is .*remove it"):
        write_file(target, b"<html>", "report(path)")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "nothing-here").exists()


def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.html"
    target.write_text("an older, longer report")
    write_file(target, b"new", "report(path)")
    assert target.read_bytes() == b"new"
    fd = open_for_writing(tmp_path / "fresh", "x", new=True)
    os.close(fd)
    with pytest.raises(FileWriteError, match="already there"):
        open_for_writing(tmp_path / "fresh", "x", new=True)


def test_make_dir_refuses_a_link_to_a_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "tensors").symlink_to(elsewhere)
    with pytest.raises(FileWriteError, match="tensors is a symbolic link"):
        make_dir(tmp_path / "tensors", "stream_to=")
    make_dir(tmp_path / "new", "stream_to=")
    make_dir(tmp_path / "new", "stream_to=")  # a directory already there is fine
    assert (tmp_path / "new").is_dir()


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (errno.ENOSPC, r"the disk is full \([\d,]+ bytes free\)"),
        (errno.EROFS, "the file system is read-only"),
        (errno.EFBIG, "largest size"),
    ],
)
def test_explain_says_what_refused_a_write(tmp_path: Path, code: int, said: str) -> None:
    assert re.search(said, explain(OSError(code, os.strerror(code)), tmp_path / "a" / "b"))


def test_a_read_only_file_system_is_a_clear_error(tmp_path: Path, monkeypatch: Any) -> None:
    def read_only(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(FileWriteError, match="read-only; choose a writable place") as info:
        write_file(tmp_path / "x", b"", "report(path)")
    assert isinstance(info.value, TensorTrackerError) and info.value.errno == errno.EROFS


@pytest.mark.parametrize(
    ("text", "safe"), [("ok", "ok"), ("été", "été"), ("a\udcff", "a\\udcff"), ("\ud800", "\\ud800")]
)
def test_utf8_safe_escapes_lone_surrogates_only(text: str, safe: str) -> None:
    assert utf8_safe(text) == safe
    safe.encode("utf-8")
