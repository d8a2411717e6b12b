"""What the exporters read from a recording: its frame, split into statistic columns."""

from __future__ import annotations

import dataclasses
from typing import Any

from .._data.frame import KEYS
from ..errors import ArgumentTypeError
from ..stats import Histogram, Stats

__all__ = ["FrameColumns", "columns_of"]


@dataclasses.dataclass
class FrameColumns:
    """A recording's frame and what its columns hold.

    Attributes:
        frame: `to_frame()`.
        scalars: the columns of scalar statistics (numeric, not a histogram's).
        histograms: the histogram statistics by name (empty for full copies).
        copies: the recording holds full copies, not statistics.
    """

    frame: Any
    scalars: list[str]
    histograms: dict[str, Histogram]
    copies: bool


def columns_of(recording: Any, caller: str) -> FrameColumns:
    """The `FrameColumns` of `recording` (a tracker); `caller` names the function in errors.

    Raises:
        TypeError: `recording` is not a tracker.
    """
    to_frame = getattr(recording, "to_frame", None)
    if not callable(to_frame):
        raise ArgumentTypeError(f"{caller}: pass a Tracker, got {type(recording).__name__}")
    frame = to_frame()
    first = next((s.first_value for s in recording if isinstance(s.first_value, Stats)), None)
    histograms = {} if first is None else dict(first.layout.histograms)
    hist_columns = {c for h in histograms.values() for c in h.names}
    scalars = [
        c
        for c in frame.columns
        if c not in KEYS and c not in hist_columns and frame[c].dtype.kind in "fiub"
    ]
    return FrameColumns(frame, scalars, histograms, first is None)
