"""`to_wandb`: a recording's statistics, histograms and scalars logged to a wandb run,
incrementally (each step once)."""

from __future__ import annotations

import weakref
from typing import Any

from .._optional import require
from ..errors import ArgumentTypeError
from ._columns import columns_of
from ._tensorboard import tensorboard_tag

__all__ = ["to_wandb"]

# The last step logged to each run, so that calling `to_wandb` again (e.g. at every step of
# a training loop) logs only what is new.
_LOGGED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def to_wandb(recording: Any, run: Any) -> int:
    """Log a recording to a wandb run: per step, each statistic of each record under the
    tags of `tensorboard_tag` (`<module>/<kind>/<value|grad>/<stat>`), each histogram
    statistic as a `wandb.Histogram`, and the `log()` scalars under `log/<name>` (notes go
    to the run's `notes` text). Steps are the recording's steps.

    Incremental: only steps after the last one logged to this run by `to_wandb` are logged,
    so calling it after every `t.step()` of a training loop logs each step once, never the
    history again.

    Args:
        recording: a `Tracker` (live, streaming or `load`ed).
        run: a `wandb` run (`wandb.init(...)`; `mode="offline"` works without network).

    Returns:
        The last step logged (-1 if none).

    Raises:
        TypeError: `recording` is not a tracker.

    Example:
        >>> import wandb
        >>> run = wandb.init(project="demo")          # doctest: +SKIP
        >>> run = wandb.init(mode="disabled")   # here: a run that sends nothing
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        ...         last = tensor_tracker.export.to_wandb(t, run)   # each new step once
        >>> last
        2
        >>> run.finish()
    """
    columns = columns_of(recording, "to_wandb(recording, run)")
    if not callable(getattr(run, "log", None)):
        raise ArgumentTypeError(
            f"to_wandb(recording, run): run must be a wandb run (wandb.init(...)), got "
            f"{type(run).__name__}"
        )
    wandb = require("wandb", "wandb")
    last = _LOGGED.get(run, -1)
    frame, scalars, histograms = columns.frame, columns.scalars, columns.histograms
    rows: dict[int, dict[str, Any]] = {}
    new = frame[frame["step"] > last]
    for row in new.itertuples(index=False):
        step = int(row.step)
        values = rows.setdefault(step, {})
        for stat in scalars:
            tag = tensorboard_tag(row.name, row.kind, row.attr, bool(row.grad), stat, int(row.call))
            values[tag] = float(getattr(row, stat))
        for hist_name, spec in histograms.items():
            tag = tensorboard_tag(
                row.name, row.kind, row.attr, bool(row.grad), hist_name, int(row.call)
            )
            counts = list(getattr(row, hist_name))
            values[tag] = wandb.Histogram(np_histogram=(counts, list(spec.edges)))
    notes: list[str] = []
    for entry in getattr(recording, "logged", []):
        if entry.step <= last:
            continue
        if entry.text is None:
            rows.setdefault(entry.step, {})[f"log/{entry.name}"] = float(entry.value)
        else:
            notes.append(f"step {entry.step}: {entry.text}")
    for step in sorted(rows):
        run.log(rows[step], step=step)
    if notes:
        run.notes = "\n".join(filter(None, [run.notes or "", *notes]))
    if rows:
        _LOGGED[run] = max(rows)
    return _LOGGED.get(run, last)
