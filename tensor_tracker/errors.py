"""The exceptions tensor_tracker raises, one vocabulary for the whole library.

Every error the library raises on purpose derives from `TensorTrackerError`, so
`except tensor_tracker.errors.TensorTrackerError` catches exactly those. Each also derives
from the built-in exception that names the condition, so code written against the
built-ins keeps working:

- an argument of the wrong type: `ArgumentTypeError` (a `TypeError`);
- an argument with a bad value (out of range, unknown name, invalid regex, ...):
  `ArgumentValueError` (a `ValueError`);
- stashes about to exceed `max_bytes`: `MemoryBudgetError` (a `RuntimeError`);
- a statistic or column that was not recorded: `NotRecordedError` (a `KeyError`);
- a tracker used in a state where the call cannot work (entering a tracker whose modules
  were unregistered, ...): `TrackerStateError` (a `RuntimeError`);
- an optional extra (pandas, matplotlib, ...) that is not installed: `MissingExtraError`
  (an `ImportError`);
- a NaN or infinity recorded under `track(..., on_nonfinite="raise")`: `NonFiniteError`
  (a `FloatingPointError`);
- a recording on disk that cannot be read (not a recording, a newer format, a truncated
  file): `RecordingError` (a `ValueError`);
- a file the library writes that cannot be created or written (a symbolic link or FIFO
  in its place, a read-only or full disk, a file-size limit): `FileWriteError` (an
  `OSError`, with its `errno`).

Example:
    >>> from tensor_tracker.errors import ArgumentValueError
    >>> try:
    ...     tensor_tracker.track(model, every=0)
    ... except ArgumentValueError as error:
    ...     print(error)
    every= must be a positive int (record every N-th step), got 0
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "ArgumentValueError",
    "FileWriteError",
    "MemoryBudgetError",
    "MissingExtraError",
    "NonFiniteError",
    "NotRecordedError",
    "RecordingError",
    "TensorTrackerError",
    "TrackerStateError",
]


class TensorTrackerError(Exception):
    """The base of every exception tensor_tracker raises on purpose."""


class ArgumentTypeError(TensorTrackerError, TypeError):
    """An argument has the wrong type; the message names the argument and what it takes."""


class ArgumentValueError(TensorTrackerError, ValueError):
    """An argument has a value the function cannot use; the message names the argument."""


class MemoryBudgetError(TensorTrackerError, RuntimeError):
    """The stashes would exceed `max_bytes`; the hooks are removed first and everything
    stashed so far is kept."""


class NotRecordedError(TensorTrackerError, KeyError):
    """A statistic, column or value was asked for that the recording does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; show it as written
        return str(self.args[0]) if self.args else ""


class MissingExtraError(TensorTrackerError, ImportError):
    """An optional dependency is not installed; the message says what to install."""


class TrackerStateError(TensorTrackerError, RuntimeError):
    """The call cannot work in the object's current state; the message says what to do."""


class NonFiniteError(TensorTrackerError, FloatingPointError):
    """A NaN or infinity was recorded while `track(..., on_nonfinite="raise")` watched; the
    message says where it appeared, the hooks are removed and the stashes kept.

    Attributes:
        found: the `tensor_tracker.NonFinite` describing where it appeared.
    """

    def __init__(self, message: str, found: object) -> None:
        super().__init__(message)
        self.found = found


class RecordingError(TensorTrackerError, ValueError):
    """A recording on disk cannot be read as asked: not a recording, written by a newer
    version, or a truncated or corrupted file (the message names the file and what could be
    read)."""


class FileWriteError(TensorTrackerError, OSError):
    """A file tensor_tracker writes (a report, a recording's files) cannot be created or
    written: something other than a regular file stands at its path (a symbolic link is
    never written through, a FIFO never opened in a way that could block), or the file
    system refused (read-only, full, a file-size limit). The message names the file, what
    happened and what to do; `errno` is the operating system's code when there is one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code
