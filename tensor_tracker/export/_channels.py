"""The report's channel panel: a statistic per channel of every module's output (channels x
modules), each channel against its module's median channel, with the outlier channels that
`diagnose` reports."""

from __future__ import annotations

import base64
import math
from typing import Any

from .._data.channels import DEFAULT_OUTLIER_RATIO, outlier_channels, table_of_frame
from .._data.frame import holds_copies
from .._optional import require

__all__ = ["channels_payload"]

# The statistic the panel shows, the first of these recorded (abs_max is `diagnose`'s).
_COLUMNS = ("abs_max_per_channel", "rms_per_channel", "abs_mean_per_channel")


def channels_payload(frame: Any, stashes: Any, place: dict[str, int]) -> dict[str, Any] | None:
    """The channel panel's data: per row of the page (`place`: its index by the name the
    channel table gives it, an op or tap's `"softmax#0 of 0.attn"`) whose output has
    channels, each channel's largest value over the steps (float32, base64) and the
    outlier channels of `outlier_channels` (same table, same rule as `diagnose`); `None`
    when no statistic per channel was recorded and there are no full copies."""
    np = require("numpy", "pandas")
    column = next((c for c in _COLUMNS if c in frame.columns), None)
    if column is None:
        if not len(frame) or not holds_copies(stashes):
            return None
        column = _COLUMNS[0]
    table = table_of_frame(frame, stashes, column, False, "output")
    # In forward order: the first is where an outlier channel appears, the others may
    # carry it on (a residual stream).
    found = {
        o.module: (rank, o) for rank, o in enumerate(outlier_channels(table, DEFAULT_OUTLIER_RATIO))
    }
    over_steps = table.over_steps()
    rows = []
    # In the module list's order.
    for m, name in sorted(enumerate(table.modules), key=lambda e: place.get(e[1], -1)):
        width = table.widths[m]
        if name not in place or width < 2:
            continue
        values = over_steps[m, :width]
        rank, outlier = found.get(name, (None, None))
        rows.append(
            {
                "module": place[name],
                "width": width,
                "values": base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode(),
                "rank": rank,
                "outliers": [] if outlier is None else list(outlier.channels),
                # JSON has no infinity: an infinite ratio (a median of 0 is left out) as null.
                "ratio": None
                if outlier is None or not math.isfinite(outlier.ratio)
                else outlier.ratio,
                "steps": [] if outlier is None else [outlier.steps[0], outlier.steps[-1]],
            }
        )
    return {
        "column": column,
        "k": DEFAULT_OUTLIER_RATIO,
        "steps": len(table.steps),
        "rows": rows,
    }
