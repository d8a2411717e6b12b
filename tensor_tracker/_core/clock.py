"""`Clock`: which step a tracker is in, of which kind, and whether that step is recorded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Clock"]


class Clock:
    """The step records carry (`step`), how many steps have begun (`count`), the kind of
    the current step, and `every=`'s decision whether it is recorded.

    Args:
        every_of: every how many steps of a kind one is recorded (`Options.every_of`).

    Example:
        >>> clock = Clock(lambda kind: 2)
        >>> clock.recording, clock.advance(None, "default"), clock.recording
        (True, None, False)
        >>> clock.advance(10, "eval"); clock.step, clock.count, clock.kinds
        (10, 2, {10: 'eval'})
    """

    __slots__ = ("_every_of", "_index", "_seen", "count", "kind", "kinds", "step")

    def __init__(self, every_of: Callable[[str], int]) -> None:
        self._every_of = every_of
        self.step = 0
        """The current step's number, as records carry it."""
        self.count = 0
        """How many steps began before this one, whatever their numbers."""
        self.kind = "default"
        """The current step's kind (`step(kind=...)`)."""
        self.kinds: dict[int, str] = {}
        """The kind of each step declared with a kind other than "default"."""
        self._index = 0  # which step of its kind this one is
        self._seen: dict[str, int] = {"default": 1}  # steps begun, per kind

    @property
    def recording(self) -> bool:
        """Whether the current step is recorded (every N-th step of its kind)."""
        return self._index % self._every_of(self.kind) == 0

    def gate(self, hook: Callable[..., Any]) -> Callable[..., None]:
        """`hook`, called only while the current step is recorded: for the hooks that stay
        attached through the steps `every=` skips (a compiled model's: detaching them
        would recompile it).

        Example:
            >>> clock, seen = Clock(lambda kind: 2), []
            >>> hook = clock.gate(seen.append)
            >>> hook(0); clock.advance(None, "default"); hook(1); seen
            [0]
        """

        def gated(*args: Any) -> None:
            if self.recording:
                hook(*args)

        return gated

    def advance(self, n: int | None, kind: str) -> None:
        """Begin the next step: number `n` (default: this one's plus 1), of `kind`."""
        self.step = self.step + 1 if n is None else n
        self.count += 1
        self.kind = kind
        self._index = self._seen.get(kind, 0)
        self._seen[kind] = self._index + 1
        if kind != "default":
            self.kinds[self.step] = kind
