"""`to_tensorboard`: a recording's statistics, histograms, scalars and notes as TensorBoard
event files."""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .._optional import require
from .._validate import check_bool, check_choices, check_count, check_path, check_type
from ..stats import BLOCK_NAMES
from ..stats._builtin import FORMAT_NAMES
from ._columns import columns_of

__all__ = ["tensorboard_tag", "to_tensorboard"]

# Bins of the histogram of a full copy's values.
_COPY_BINS = 64

_KEY_STATS: tuple[str, ...] = (
    "rms",
    "abs_max",
    *FORMAT_NAMES,
    *(name for name in BLOCK_NAMES if name.endswith("_underflow")),
)
# The statistics `to_tensorboard` writes unless asked for others.

_FRACTIONS = frozenset(_KEY_STATS[2:])

# Characters a directory name may not hold on some file system (and `%`, the escape itself):
# a module's name becomes a directory, and a loaded recording's names are untrusted.
_UNSAFE = set('%/\\:*?"<>|')


def tensorboard_tag(name: str, kind: str, attr: str, grad: bool, stat: str, call: int = 0) -> str:
    """The name `to_tensorboard` writes a statistic under: `<module>/<kind>[.<attr>][#call]/
    <value|grad>/<stat>` (`<root>` for the model itself). TensorBoard shows it as its run,
    the first two parts (one directory per module and kind), and its tag, the last two, so
    that each chart holds one statistic with a line per module; `to_wandb` logs it as one
    key.

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


def to_tensorboard(
    recording: Any,
    logdir: str | os.PathLike[str],
    stats: Sequence[str] | str | None = None,
    histogram_every: int = 3,
) -> None:
    """Write a recording into TensorBoard event files under `logdir`, one run (directory)
    per module and kind (`<module>/<kind>`, e.g. `encoder.layer.0.output/output` or
    `encoder.layer.0.output.dense/param.weight`; `%3Croot%3E`, `<root>` with the
    characters some file systems refuse escaped, for the model itself) holding
    its tags `value/<stat>` and `grad/<stat>`: TensorBoard then draws one chart per
    statistic with a line per module (pick modules with the runs filter, e.g. `layer\\.3`),
    and run and tag together read as `tensorboard_tag`. Each histogram statistic becomes a
    histogram (on its own axis: log2|x| for `histogram(log2=True)`) over the bins it
    filled; the full copies of a recording without statistics become histograms of their
    values (64 bins over each copy's range, tag `<value|grad>/values`); `log()` scalars go
    to `log/<name>` and `note()`s to the text `notes`, in `logdir` itself. Steps are the
    recording's steps.

    By default only the key statistics are written (`rms`, `abs_max` and the format
    fractions recorded, such as `fp16_underflow` or `mxfp8_e4m3_underflow`; a fraction
    that stays 0 at every step of a record is left out), and the histograms of every third
    recorded step: each number TensorBoard reads
    carries its own tag and each histogram bin takes 12 bytes, against a few bytes in the
    compressed recording, and so the files stay within 3 times the saved recording (a
    2-layer BERT's 30 steps with 13 statistics and a 48-bin histogram: 0.63 MB for a 0.26
    MB recording; with `DEFAULT` and `exp_hist`: 0.59 MB for 0.24 MB). `stats="all"` and
    `histogram_every=1` write everything (2.0 MB, 7.6 times, for the first).
    Needs the `tensorboard` package.

    Args:
        recording: a `Tracker` (live or `load`ed).
        logdir: the directory to write to (`tensorboard --logdir` it).
        stats: the scalar statistics to write: `None` for the key ones above, `"all"` for
            every one recorded, or a list of recorded names.
        histogram_every: write the histograms of every this many recorded steps (the
            first among them); 1 for every step.

    Raises:
        TypeError: `recording` is not a tracker, or `stats` is neither a name list nor
            `"all"`.
        ValueError: `stats` names a statistic the recording does not hold, or
            `histogram_every` is below 1.

    Example:
        >>> import tempfile, pathlib
        >>> logdir = pathlib.Path(tempfile.mkdtemp()) / "tb"   # `tensorboard --logdir` it
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        >>> tensor_tracker.export.to_tensorboard(t, logdir)
        >>> sorted(path.name for path in (logdir / "0" / "output").iterdir())[0][:19]
        'events.out.tfevents'
        >>> tensor_tracker.export.to_tensorboard(
        ...     t, logdir / "all", stats="all", histogram_every=1)   # everything
    """
    columns = columns_of(recording, "to_tensorboard(recording, logdir)")
    check_path(logdir, "to_tensorboard(recording, logdir): logdir", "a directory path")
    chosen = _chosen(stats, columns.scalars)
    check_count(histogram_every, "to_tensorboard(histogram_every=...)", "recorded steps")
    require("tensorboard", "tensorboard")
    # torch's summary functions and writer, untyped (the proto classes have no stubs).
    summary: Any = importlib.import_module("torch.utils.tensorboard.summary")
    writer_module: Any = importlib.import_module("torch.utils.tensorboard.writer")

    frame, histograms = columns.frame, columns.histograms
    # Per run, the values of one step go into one event: the event's own framing (its step,
    # time and checksums) is then written once per step and run rather than once per number.
    runs: dict[str, dict[int, list[Any]]] = {}
    keys = zip(
        frame["name"], frame["kind"], frame["attr"], frame["grad"], frame["call"], strict=True
    )
    steps = frame["step"].to_numpy()
    histogram_steps = set(sorted(set(steps.tolist()))[::histogram_every])
    values = {stat: frame[stat].to_numpy(dtype=float) for stat in chosen}
    # A format fraction that stays 0 at every step of a record is left out: a flat line at 0
    # in every module's chart is most of the file and tells nothing.
    record = [frame[key] for key in ("name", "kind", "attr", "grad", "call")]
    written = {
        stat: (frame[stat] != 0).groupby(record).transform("any").to_numpy(dtype=bool)
        for stat in chosen
        if stat in _FRACTIONS
    }
    described: set[tuple[str, str]] = set()  # (run, tag) pairs whose histogram metadata is out
    for row, (name, kind, attr, grad, call) in enumerate(keys):
        tag = tensorboard_tag(name, kind, attr, bool(grad), "", int(call))
        # From the right: a (loaded) module's name may hold a "/" itself.
        module, part, side, _ = tag.rsplit("/", 3)
        run = f"{_safe(module)}/{_safe(part)}"
        out = runs.setdefault(run, {}).setdefault(int(steps[row]), [])
        for stat in chosen:
            if stat in written and not written[stat][row]:
                continue
            out.append(summary.Summary.Value(tag=f"{side}/{stat}", simple_value=values[stat][row]))
        parts: list[tuple[str, torch.Tensor, Any]] = []
        for hist_name, spec in histograms.items():
            counts = torch.as_tensor(frame[hist_name].iat[row], dtype=torch.float64)
            parts.append((hist_name, counts, spec.edges))
        if columns.copies:  # histograms of the copies' values
            value = recording[row].first_value
            if isinstance(value, torch.Tensor) and value.numel() and value.is_floating_point():
                parts.append(("values", *_value_counts(value)))
        for hist_name, counts, edges in parts:
            if counts.sum() > 0 and steps[row] in histogram_steps:
                first = (run, f"{side}/{hist_name}") not in described
                described.add((run, f"{side}/{hist_name}"))
                out.append(_histogram(summary, counts, edges, f"{side}/{hist_name}", first))
    for run, by_step in runs.items():
        _write(writer_module, Path(logdir, run), summary, by_step.items())
    logged = getattr(recording, "logged", [])
    _write(
        writer_module,
        Path(logdir),
        summary,
        [
            (entry.step, summary.scalar(f"log/{entry.name}", float(entry.value)).value)
            if entry.text is None
            else (entry.step, summary.text("notes", entry.text).value)
            for entry in logged
        ],
    )


def _chosen(stats: Sequence[str] | str | None, recorded: list[str]) -> list[str]:
    """The scalar statistics `to_tensorboard(stats=...)` asks for, in the recording's order."""
    argument = "to_tensorboard(stats=...)"
    if stats is None:
        return [name for name in recorded if name in _KEY_STATS]
    if stats == "all":
        return recorded
    if isinstance(stats, str) or not isinstance(stats, Sequence):
        check_type(stats, list, argument, '"all", None or a list of statistic names')
    check_choices(list(stats), argument, recorded)
    return [name for name in recorded if name in stats]


def _safe(part: str) -> str:
    """`part` of a run's path as a directory name: the characters some file system refuses
    percent-escaped, and a name of dots only (`..`) escaped too, so that no recorded name
    leads outside `logdir`."""
    part = "".join(f"%{ord(c):02X}" if c in _UNSAFE or ord(c) < 32 else c for c in part)
    return part.replace(".", "%2E") if set(part) <= {"."} else part


def _write(writer_module: Any, logdir: Path, summary: Any, events: Any) -> None:
    """Write `(step, summary values)` pairs as events of one run's event file in `logdir`."""
    writer = writer_module.FileWriter(os.fspath(logdir))
    try:
        for step, parts in events:
            writer.add_summary(summary.Summary(value=parts), step)
    finally:
        writer.close()


def _value_counts(value: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Counts and edges of a full copy's finite values: `_COPY_BINS` bins evenly over the
    copy's own range (not a fixed one for every tensor); no counts when none is finite."""
    finite = value.detach().double().flatten()
    finite = finite[finite.isfinite()]
    if not finite.numel():
        return torch.zeros(1, dtype=torch.float64), [0.0, 0.0]
    low, high = float(finite.min()), float(finite.max())
    if low == high:
        return torch.tensor([float(finite.numel())], dtype=torch.float64), [low, high]
    counts = torch.histc(finite, _COPY_BINS, low, high)
    return counts, torch.linspace(low, high, _COPY_BINS + 1, dtype=torch.float64).tolist()


def _histogram(summary: Any, counts: torch.Tensor, edges: Any, tag: str, first: bool) -> Any:
    """A histogram's summary value over the bins it filled, first to last, as TensorBoard's
    `[k, 3]` tensor of (left edge, right edge, count) rows: TensorBoard draws a histogram
    over all of its buckets, so the empty ones around the recorded range (most of
    `exp_hist`'s -126...128) would squeeze it into a spike, and fill the event file. In
    float32 (12 bytes a bin, against 16 for the older `HistogramProto`): exact for counts
    up to 2**24 and for the integer edges of a log2 histogram. The plugin's metadata goes
    with the tag's first value only, the one TensorBoard reads it from."""
    occupied = counts.nonzero().flatten()
    first_bin, last_bin = int(occupied[0]), int(occupied[-1])
    edges = torch.tensor(edges[first_bin : last_bin + 2], dtype=torch.float32)
    rows = torch.stack([edges[:-1], edges[1:], counts[first_bin : last_bin + 1].float()], 1)
    tensor = summary.TensorProto(
        dtype="DT_FLOAT",
        tensor_shape=summary.TensorShapeProto(
            dim=[summary.TensorShapeProto.Dim(size=size) for size in rows.shape]
        ),
        tensor_content=rows.numpy().tobytes(),
    )
    if not first:
        return summary.Summary.Value(tag=tag, tensor=tensor)
    metadata = importlib.import_module("tensorboard.plugins.histogram.metadata")
    description = metadata.create_summary_metadata(display_name=tag, description="")
    return summary.Summary.Value(tag=tag, tensor=tensor, metadata=description)
