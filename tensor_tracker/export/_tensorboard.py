"""`to_tensorboard`: a recording's statistics, histograms, scalars and notes as TensorBoard
event files."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from .._optional import require
from .._validate import check_bool, check_count, check_path, check_type
from ._columns import columns_of

__all__ = ["tensorboard_tag", "to_tensorboard"]

# Bins of the histogram of a full copy's values.
_COPY_BINS = 64


def tensorboard_tag(name: str, kind: str, attr: str, grad: bool, stat: str, call: int = 0) -> str:
    """The tag `to_tensorboard` writes a statistic under: `<module>/<kind>[.<attr>][#call]/
    <value|grad>/<stat>` (`<root>` for the model itself), so TensorBoard groups the charts
    by module.

    Example:
        >>> tensorboard_tag("blocks.0.mlp", "output", "", True, "rms")
        'blocks.0.mlp/output/grad/rms'
        >>> tensorboard_tag("", "param", "weight", False, "abs_max")
        '<root>/param.weight/value/abs_max'
    """
    for value, argument in ((name, "name"), (kind, "kind"), (attr, "attr"), (stat, "stat")):
        check_type(value, str, f"tensorboard_tag({argument}=...)", "a str")
    check_bool(grad, "tensorboard_tag(grad=...)")
    check_count(call, "tensorboard_tag(call=...)", "the call's index", minimum=0)
    part = f"{kind}.{attr}" if attr else kind
    if call:
        part += f"#{call}"
    return f"{name or '<root>'}/{part}/{'grad' if grad else 'value'}/{stat}"


def to_tensorboard(recording: Any, logdir: str | os.PathLike[str]) -> None:
    """Write a recording into TensorBoard event files under `logdir`: each statistic of each
    record as a scalar (tags from `tensorboard_tag`), each histogram statistic as a
    histogram (on its own axis: log2|x| for `histogram(log2=True)`) over the bins it
    filled, the full copies of a recording without statistics as histograms of their
    values (64 bins over each copy's range), `log()` scalars under `log/<name>` and
    `note()`s as text under `notes`. Steps are the recording's steps. A step's numbers
    share one event; each number still carries its tag (about 100 bytes, against 4 in the
    recording), so the files are several times the recording's size (a 12-layer BERT's
    30 steps with 7 statistics and `exp_hist`: 19 MB for a 1.3 MB recording).
    Needs the `tensorboard` package.

    Args:
        recording: a `Tracker` (live or `load`ed).
        logdir: the directory to write to (`tensorboard --logdir` it).

    Raises:
        TypeError: `recording` is not a tracker.

    Example:
        >>> import tempfile, pathlib
        >>> logdir = pathlib.Path(tempfile.mkdtemp()) / "tb"   # `tensorboard --logdir` it
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        >>> tensor_tracker.export.to_tensorboard(t, logdir)
        >>> [path.name.startswith("events.out.tfevents") for path in logdir.iterdir()]
        [True]
    """
    columns = columns_of(recording, "to_tensorboard(recording, logdir)")
    check_path(logdir, "to_tensorboard(recording, logdir): logdir", "a directory path")
    require("tensorboard", "tensorboard")
    # torch's summary functions and writer, untyped (the proto classes have no stubs).
    summary: Any = importlib.import_module("torch.utils.tensorboard.summary")
    writer_module: Any = importlib.import_module("torch.utils.tensorboard.writer")

    frame, scalars, histograms = columns.frame, columns.scalars, columns.histograms
    # The values of one step go into one event: the event's own framing (its step, time
    # and checksums) is then written once per step rather than once per number.
    by_step: dict[int, list[Any]] = {}
    keys = zip(
        frame["name"], frame["kind"], frame["attr"], frame["grad"], frame["call"], strict=True
    )
    steps = frame["step"].to_numpy()
    values = {stat: frame[stat].to_numpy(dtype=float) for stat in scalars}
    for row, (name, kind, attr, grad, call) in enumerate(keys):
        out = by_step.setdefault(int(steps[row]), [])
        for stat in scalars:
            tag = tensorboard_tag(name, kind, attr, bool(grad), stat, int(call))
            out.extend(summary.scalar(tag, float(values[stat][row])).value)
        for hist_name, spec in histograms.items():
            counts = torch.as_tensor(frame[hist_name].iat[row], dtype=torch.float64)
            if counts.sum() > 0:
                tag = tensorboard_tag(name, kind, attr, bool(grad), hist_name, int(call))
                out.extend(_histogram(summary, counts, spec.edges, tag))
        if columns.copies:  # histograms of the copies' values
            value = recording[row].first_value
            if isinstance(value, torch.Tensor) and value.numel() and value.is_floating_point():
                finite = value.detach().float().flatten()
                finite = finite[finite.isfinite()]
                if finite.numel():
                    tag = tensorboard_tag(name, kind, attr, bool(grad), "values", int(call))
                    # Evenly over the copy's own range (not a fixed one for every tensor).
                    out.extend(summary.histogram(tag, finite.numpy(), _COPY_BINS).value)
    writer = writer_module.FileWriter(os.fspath(logdir))
    try:
        for step, parts in by_step.items():
            writer.add_summary(summary.Summary(value=parts), step)
        for entry in getattr(recording, "logged", []):
            if entry.text is None:
                writer.add_summary(
                    summary.scalar(f"log/{entry.name}", float(entry.value)), entry.step
                )
            else:
                writer.add_summary(summary.text("notes", entry.text), entry.step)
    finally:
        writer.close()


def _histogram(summary: Any, counts: torch.Tensor, edges: Any, tag: str) -> Any:
    """A histogram statistic's summary values over the bins it filled, first to last:
    TensorBoard draws a histogram over all of its buckets, so the empty ones around the
    recorded range (most of `exp_hist`'s -126...128) would squeeze it into a spike, and
    fill the event file."""
    occupied = counts.nonzero().flatten()
    first, last = int(occupied[0]), int(occupied[-1])
    edges = torch.tensor(edges[first : last + 2], dtype=torch.float64)
    counts = counts[first : last + 1]
    middles = (edges[:-1] + edges[1:]) / 2
    return summary.histogram_raw(
        tag,
        min=float(edges[0]),
        max=float(edges[-1]),
        num=int(counts.sum()),
        sum=float((counts * middles).sum()),
        sum_squares=float((counts * middles**2).sum()),
        bucket_limits=edges[1:].tolist(),
        bucket_counts=counts.tolist(),
    ).value
