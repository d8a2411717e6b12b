"""`to_tensorboard`: a recording's statistics, histograms, scalars and notes as TensorBoard
event files."""

from __future__ import annotations

import os
from typing import Any

import torch

from .._optional import require
from .._validate import check_bool, check_count, check_path, check_type
from ._columns import columns_of

__all__ = ["tensorboard_tag", "to_tensorboard"]


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
    histogram (on its own axis: log2|x| for `histogram(log2=True)`), the full copies of a
    recording without statistics as histograms of their values, `log()` scalars under
    `log/<name>` and `note()`s as text under `notes`. Steps are the recording's steps.
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
    from torch.utils.tensorboard import SummaryWriter

    frame, scalars, histograms = columns.frame, columns.scalars, columns.histograms
    with SummaryWriter(log_dir=os.fspath(logdir)) as writer:
        keys = zip(
            frame["name"], frame["kind"], frame["attr"], frame["grad"], frame["call"], strict=True
        )
        for row, (name, kind, attr, grad, call) in enumerate(keys):
            step = int(frame["step"].iat[row])
            for stat in scalars:
                tag = tensorboard_tag(name, kind, attr, bool(grad), stat, int(call))
                writer.add_scalar(tag, float(frame[stat].iat[row]), step)
            for hist_name, spec in histograms.items():
                counts = torch.as_tensor(frame[hist_name].iat[row], dtype=torch.float64)
                edges = torch.tensor(spec.edges, dtype=torch.float64)
                if counts.sum() > 0:
                    occupied = counts.nonzero().flatten()
                    writer.add_histogram_raw(
                        tensorboard_tag(name, kind, attr, bool(grad), hist_name, int(call)),
                        min=float(edges[occupied[0]]),
                        max=float(edges[occupied[-1] + 1]),
                        num=int(counts.sum()),
                        sum=float((counts * (edges[:-1] + edges[1:]) / 2).sum()),
                        sum_squares=float((counts * ((edges[:-1] + edges[1:]) / 2) ** 2).sum()),
                        bucket_limits=edges[1:].tolist(),
                        bucket_counts=counts.tolist(),
                        global_step=step,
                    )
            if columns.copies:  # histograms of the copies' values
                value = recording[row].first_value
                if isinstance(value, torch.Tensor) and value.numel() and value.is_floating_point():
                    finite = value.detach().float().flatten()
                    finite = finite[finite.isfinite()]
                    if finite.numel():
                        tag = tensorboard_tag(name, kind, attr, bool(grad), "values", int(call))
                        writer.add_histogram(tag, finite, step)
        for entry in getattr(recording, "logged", []):
            if entry.text is None:
                writer.add_scalar(f"log/{entry.name}", float(entry.value), entry.step)
            else:
                writer.add_text("notes", entry.text, entry.step)
