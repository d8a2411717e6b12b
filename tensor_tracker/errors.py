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
    """The base of every exception tensor_tracker raises on purpose.

    Example:
        >>> try:
        ...     tensor_tracker.track(model, every=0)
        ... except TensorTrackerError as error:   # any error the library raises on purpose
        ...     print(type(error).__name__)
        ArgumentValueError
    """


class ArgumentTypeError(TensorTrackerError, TypeError):
    """An argument has the wrong type; the message names the argument and what it takes.

    Example:
        >>> try:
        ...     tensor_tracker.track("model")
        ... except ArgumentTypeError as error:   # also a TypeError
        ...     print(error)
        module must be a torch.nn.Module (the model to track), got 'model'
    """


class ArgumentValueError(TensorTrackerError, ValueError):
    """An argument has a value the function cannot use; the message names the argument.

    Example:
        >>> try:
        ...     tensor_tracker.track(model, include="(")
        ... except ArgumentValueError as error:   # also a ValueError
        ...     print(error)
        include='(' is not a valid regular expression: missing ), unterminated subpattern at position 0
    """


class MemoryBudgetError(TensorTrackerError, RuntimeError):
    """The stashes would exceed `max_bytes`; the hooks are removed first and everything
    stashed so far is kept.

    Example:
        >>> try:
        ...     with tensor_tracker.track(model, max_bytes=1000) as t:
        ...         model(x).sum().backward()
        ... except MemoryBudgetError:
        ...     print(f"{len(t)} stashes kept, {t.nbytes} bytes")
        6 stashes kept, 768 bytes
    """


class NotRecordedError(TensorTrackerError, KeyError):
    """A statistic, column or value was asked for that the recording does not hold.

    Example:
        >>> try:
        ...     tracker["00"]
        ... except NotRecordedError as error:   # also a KeyError
        ...     print(error)
        no stash of a module named '00'; close matches: ['0']
    """

    def __str__(self) -> str:  # KeyError quotes its message; show it as written
        return str(self.args[0]) if self.args else ""


class MissingExtraError(TensorTrackerError, ImportError):
    """An optional dependency is not installed; the message says what to install.

    Example:
        >>> try:
        ...     frame = tracker.to_frame()
        ... except MissingExtraError as error:   # pandas is missing: print(error) says how
        ...     frame = None                     # to install it; also an ImportError
        >>> issubclass(MissingExtraError, ImportError)
        True
    """


class TrackerStateError(TensorTrackerError, RuntimeError):
    """The call cannot work in the object's current state; the message says what to do.

    Example:
        >>> tracker.unregister()   # the hooks are gone for good
        >>> try:
        ...     with tracker:
        ...         model(x)
        ... except TrackerStateError as error:   # also a RuntimeError
        ...     print(error)  # doctest: +ELLIPSIS
        tensor_tracker: this tracker has no modules to track: unregister() ... removed them, ...
    """


class NonFiniteError(TensorTrackerError, FloatingPointError):
    """A NaN or infinity was recorded while `track(..., on_nonfinite="raise")` watched; the
    message says where it appeared, the hooks are removed and the stashes kept.

    Attributes:
        found: the `tensor_tracker.NonFinite` describing where it appeared.

    Example:
        >>> try:
        ...     with tensor_tracker.track(model, stats=True, on_nonfinite="raise") as t:
        ...         model(x * float("inf")).sum().backward()
        ... except NonFiniteError as error:   # also a FloatingPointError
        ...     print(error.found.name, error.found.grad, error.found.step, len(t))
        0 False 0 8
    """

    def __init__(self, message: str, found: object) -> None:
        super().__init__(message)
        self.found = found


class RecordingError(TensorTrackerError, ValueError):
    """A recording on disk cannot be read as asked: not a recording, written by a newer
    version, or a truncated or corrupted file (the message names the file and what could be
    read).

    Example:
        >>> import tempfile
        >>> try:
        ...     tensor_tracker.load(tempfile.mkdtemp())   # an empty directory
        ... except RecordingError as error:   # also a ValueError
        ...     print(error)  # doctest: +ELLIPSIS
        /... is not a tensor_tracker recording (no recording.json)
    """


class FileWriteError(TensorTrackerError, OSError):
    """A file tensor_tracker writes (a report, a recording's files) cannot be created or
    written: something other than a regular file stands at its path (a symbolic link is
    never written through, a FIFO never opened in a way that could block), or the file
    system refused (read-only, full, a file-size limit). The message names the file, what
    happened and what to do; `errno` is the operating system's code when there is one.

    Example:
        >>> import tempfile
        >>> view = tensor_tracker.graph_view(tensor_tracker.module_graph(model, x))
        >>> try:
        ...     view.save(tempfile.mkdtemp())   # a directory, not a file name
        ... except FileWriteError as error:   # also an OSError
        ...     print(error)  # doctest: +ELLIPSIS
        GraphView.save(path): /... is a directory; ... remove it or choose another path
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code
