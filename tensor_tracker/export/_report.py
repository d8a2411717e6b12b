"""`report`: a recording as one self-contained HTML page (no server, no network)."""

from __future__ import annotations

import base64
import html
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from .._data.compare import Comparison
from .._files import write_file
from .._optional import require
from .._probe.graph import ModuleGraph
from .._validate import check_path, check_type
from ..errors import ArgumentTypeError
from ..stats._builtin import BUILTINS
from ..stats.formats import BLOCK_FORMATS, FORMATS
from ._channels import channels_payload
from ._columns import columns_of
from ._compare_report import comparison_payload
from ._html import fill, script_json
from ._samples import samples_payload

__all__ = ["page", "report"]

# The statistic a page opens on, the first of these recorded.
_FIRST = ("rms", "abs_max", "std", "abs_mean")
# Built-in statistics that are counts or fractions: drawn on a linear axis, not as log2|x|.
_COUNTS = ("numel", "nonfinite")
_FRACTION_SUFFIXES = ("_frac", "_overflow", "_underflow", "_subnormal")
# The JavaScript libraries inlined into the page (see vendor/README.md), in load order.
_VENDOR = ("uplot-1.6.32.iife.min.js", "dagre-3.1.3.min.js")
_VENDOR_CSS = ("uplot-1.6.32.min.css",)
# Histograms kept per series: at most this many steps, spread evenly over the run.
_HIST_STEPS = 200
# Points per logged scalar drawn in the KPI chart.
_LOG_POINTS = 2000


def _floats(values: Any) -> str:
    """float32 little-endian bytes, base64: 5.3 characters per number (NaN kept)."""
    np = require("numpy", "pandas")
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def _depth(name: str, recorded: set[str]) -> int:
    """How many recorded modules contain `name` (the indentation of the module list)."""
    parts = name.split(".") if name else []
    return sum(".".join(parts[:k]) in recorded for k in range(len(parts)))


def _tree_order(names: list[str]) -> list[str]:
    """Module names depth first, parents before their children, siblings in the order
    they first ran (that of `names`), the model itself first."""
    earliest: dict[str, int] = {}  # per module path: the first position in its subtree
    for i, name in enumerate(names):
        parts = name.split(".") if name else []
        for k in range(len(parts) + 1):
            path = ".".join(parts[:k])
            earliest[path] = min(earliest.get(path, i), i)

    def key(name: str) -> list[int]:
        parts = name.split(".") if name else []
        return [earliest[".".join(parts[: k + 1])] for k in range(len(parts))]

    return sorted(names, key=key)


def _axis(stat: str, values: Any) -> str:
    """How a statistic is drawn: `"linear"` for counts and fractions, `"log2"` (of |x|) for
    magnitudes. A statistic the package does not know is a count when every recorded value
    is a non-negative integer."""
    np = require("numpy", "pandas")
    if stat in _COUNTS or stat.endswith(_FRACTION_SUFFIXES):
        return "linear"
    finite = values[np.isfinite(values)]
    counts = finite.size > 0 and bool(np.all(finite >= 0) and np.all(finite == np.round(finite)))
    return "linear" if counts and stat not in BUILTINS else "log2"


def _vendor() -> tuple[str, str]:
    """The inlined scripts and styles: each library's minified file as published, less
    its source-map comment (a map the page could not load anyway)."""
    folder = resources.files(__package__).joinpath("vendor")
    scripts = [
        re.sub(r"//# sourceMappingURL=\S+\s*$", "", folder.joinpath(n).read_text()) for n in _VENDOR
    ]
    styles = [folder.joinpath(n).read_text() for n in _VENDOR_CSS]
    return "\n".join(f"<script>{s}</script>" for s in scripts), "\n".join(styles)


def _nothing_recorded(title: str) -> dict[str, Any]:
    """The payload of a page that shows a graph alone."""
    return {
        "title": title,
        "steps": [],
        "modules": [],
        "stats": [],
        "axes": {},
        "series": [],
        "hist": None,
        "formats": {},
        "blockFormats": {},
        "log": {"scalars": {}, "notes": []},
        "samples": None,
        "channels": None,
    }


def _payload(recording: Any, title: str) -> dict[str, Any]:
    np = require("numpy", "pandas")
    columns = columns_of(recording, "report(recording, path)")
    frame, histograms = columns.frame, columns.histograms
    recorded_stats = columns.scalars
    if columns.copies:  # compute the statistics the report shows
        recorded_stats = ["rms", "abs_max", "mean", "min", "max"]
        for stat in recorded_stats:
            frame[stat] = recording.to_frame(stat=stat, stat_name=stat)[stat]
    # Every statistic recorded, in the order of the spec (the first shown first).
    stats = [s for s in _FIRST if s in recorded_stats]
    stats += [s for s in recorded_stats if s not in stats]
    steps = sorted(int(s) for s in frame["step"].unique())
    step_index = {s: i for i, s in enumerate(steps)}
    modules = _tree_order(list(dict.fromkeys(frame["name"])))
    recorded = set(modules)
    types = dict(zip(frame["name"], frame["type"], strict=False))
    hist_name, hist = next(iter(histograms.items()), (None, None))
    hist_steps = (
        steps
        if len(steps) <= _HIST_STEPS
        else [steps[round(i * (len(steps) - 1) / (_HIST_STEPS - 1))] for i in range(_HIST_STEPS)]
    )
    series = []
    grouped = frame.groupby(["name", "kind", "attr", "grad"], sort=False)
    for (name, kind, attr, grad), rows in grouped:
        # One value per step: the mean over the module's calls in that step.
        by_step = rows.groupby("step")
        entry: dict[str, Any] = {
            "module": modules.index(name),
            "kind": str(kind),
            "attr": str(attr),
            "grad": bool(grad),
            "stats": {},
        }
        for stat in stats:
            values = np.full(len(steps), np.nan)
            means = by_step[stat].mean()
            values[[step_index[int(s)] for s in means.index]] = means.to_numpy(dtype=float)
            entry["stats"][stat] = _floats(values)
        if hist is not None and hist_name is not None and hist_name in rows.columns:
            wanted = set(hist_steps)
            kept = rows[rows["step"].isin(wanted)].drop_duplicates("step")
            counts = np.stack([np.asarray(c, dtype=float) for c in kept[hist_name]])
            # Every value counted: the bins and the extra counts (zeros, out of range...).
            totals = counts.sum(axis=1)
            for extra in hist.names[1:]:
                if extra in kept.columns:
                    totals = totals + np.nan_to_num(kept[extra].to_numpy(dtype=float))
            peak = counts.max(axis=1, keepdims=True)
            # 8 bits per bin, relative to the step's largest bin: enough to draw.
            scaled = np.where(peak > 0, np.round(255 * counts / np.maximum(peak, 1)), 0)
            entry["hist"] = {
                "steps": [int(s) for s in kept["step"]],
                "counts": base64.b64encode(scaled.astype(np.uint8).tobytes()).decode(),
                "totals": [round(float(t)) for t in totals],
            }
        series.append(entry)
    scalars: dict[str, list[list[Any]]] = {}
    notes: list[list[Any]] = []
    for logged in getattr(recording, "logged", []):
        if logged.text is not None:
            notes.append([logged.step, logged.text])
        else:
            value = float(logged.value)
            point: list[Any] = [logged.step, value if math.isfinite(value) else None]
            scalars.setdefault(str(logged.name), []).append(point)
    for name, points in scalars.items():
        if len(points) > _LOG_POINTS:  # drawn downsampled; the recording keeps them all
            stride = math.ceil(len(points) / _LOG_POINTS)
            scalars[name] = points[::stride]
    return {
        "title": title,
        "steps": steps,
        # Names are shortened on the page, to the room each place has.
        "modules": [
            {"name": m, "type": str(types[m]).rsplit(".", 1)[-1], "depth": _depth(m, recorded)}
            for m in modules
        ],
        "stats": stats,
        "axes": {stat: _axis(stat, frame[stat].to_numpy(dtype=float)) for stat in stats},
        "series": series,
        "hist": None
        if hist is None
        else {"edges": list(hist.edges), "log2": hist.log2, "bins": hist.bins},
        "formats": {
            key: {
                "label": f.label,
                "max": f.max,
                "normal": f.min_normal,
                "subnormal": f.min_subnormal,
            }
            for key, f in FORMATS.items()
        },
        # Under a block format's error the chart draws its floor (its error on Gaussian
        # data) instead of the range limits, which mean nothing there.
        "blockFormats": {
            key: {"label": f.label, "floor": f.gaussian_error} for key, f in BLOCK_FORMATS.items()
        },
        "log": {"scalars": scalars, "notes": notes},
        # Full copies: each sample's values per channel and rms (the sample panel).
        "samples": samples_payload(recording, steps, modules) if columns.copies else None,
        # Statistics per channel (or full copies): the channels x modules panel.
        "channels": channels_payload(frame, recording, modules),
    }


def page(recording: Any | None, graph: ModuleGraph | None, title: str, view: str = "report") -> str:
    """The HTML of the page `report` writes (`view="report"`), or of the graph view (`"graph"`:
    the module graph beside the picked node's facts and statistics, nothing else)."""
    if recording is None and graph is None:
        raise ArgumentTypeError(
            "report(recording, path): pass a Tracker (live or loaded), a graph= "
            "(tensor_tracker.module_graph) or both; got neither"
        )
    if graph is not None:
        check_type(graph, ModuleGraph, "graph=", "a tensor_tracker.module_graph(model, inputs)")
    compared = recording if isinstance(recording, Comparison) else None
    if compared is not None:  # the page of run a, with the errors against run b
        recording = compared.a
    payload = _nothing_recorded(title) if recording is None else _payload(recording, title)
    if compared is not None:
        payload["compare"] = comparison_payload(compared, payload)
    payload["graph"] = None if graph is None else graph.to_dict()
    payload["view"] = view
    if view == "graph":  # the graph view has no channel panel: not its weight either
        payload["channels"] = None
    text = resources.files(__package__).joinpath("report.html").read_text()
    scripts, styles = _vendor()
    values = {"TITLE": html.escape(title), "DATA": script_json(payload)}
    return fill(text, {**values, "VENDOR": scripts, "VENDORCSS": styles})


def report(
    recording: Any | None,
    path: str | os.PathLike[str],
    title: str | None = None,
    graph: ModuleGraph | None = None,
) -> Path:
    """Write a recording as one self-contained HTML page: it opens from disk with no server
    and loads nothing from the network (every script and style is inside; a Content
    Security Policy forbids any request).

    The page shows the modules (filterable; a menu on a phone), the picked module's values
    at the chosen step (one number format per table) and its statistics over the steps
    (outputs, gradients, parameters and their gradients, whatever was recorded) with their
    histograms over the steps when histograms were recorded (a line says how to record them
    otherwise). "pin" keeps a module on the page, so that several sit side by side. The scale
    chart shows every module's output and gradient at the chosen step against the
    fp16/bf16/fp8 limits; hover or tap a point for its module and value, click it to open
    the module. Every statistic recorded is offered; counts and fractions are drawn on a
    linear axis, magnitudes as log2. The scalars of `log()` are charts over the steps, the
    notes marked on every step axis. A slider picks the step. A recording of full copies
    also gets a sample panel: pick a batch index (and a position, e.g. a token) to see that
    sample's values per channel at the picked module, beside every sample's rms across the
    batch with the sample that stands out most in red (see `tensor_tracker.sample_values`;
    the page keeps at most 2**20 numbers for it, about 5.6 MB, the last steps first; over
    that, each channel's largest value over the positions). With statistics per channel
    (`stats.per_channel("abs_max")`, or full copies) a channels x modules panel shows each
    module's channels against its median channel, one row per module as wide as the panel,
    and names and frames the outlier channels `diagnose` reports (over 10 times their
    module's median channel); without them it says how to record them. Charts zoom by dragging
    (double-click resets). The numbers are all there (float32).

    Charts are drawn by uPlot and the graph laid out by dagre, both inlined (see
    `tensor_tracker/export/vendor`).

    A `Comparison` (`tensor_tracker.compare`, `compare_models`) gets the page of its run
    `a` with the errors against run `b`: the counts and first divergences in the header,
    a chart of every module's error at the chosen step (forward circles, gradient squares;
    green bitwise equal, blue within the tolerance, red beyond; hover or tap a point for its
    module, error and status, click it to open the module), the module list and the
    graph's nodes coloured the same way (darker for larger errors), and each series' error
    in the module's panel.

    Args:
        recording: a `Tracker`, live or `load`ed, or a `Comparison`; `None` for a page of
            the `graph` alone.
        path: the HTML file to write.
        title: the page title (default: the file name).
        graph: a `module_graph` of the model, drawn at the top of the page: click a node to
            pick its module (and highlight what it depends on and what depends on it),
            "+" to open a module's level, the breadcrumb to go back up; hover for shapes,
            parameters and `extra_repr` fields.

    Returns:
        The path written.

    Raises:
        TypeError: `recording` is not a tracker, or `graph` not a module graph (or both
            are missing).
        FileWriteError: `path` is a symbolic link, a FIFO or another non-regular file
            (never written through), or cannot be written (read-only, full disk).

    Example:
        >>> import tempfile, pathlib
        >>> path = tensor_tracker.report(tracker, pathlib.Path(tempfile.mkdtemp()) / "run.html")
        >>> path.name, path.read_text().startswith("<!doctype html>")   # open it in a browser
        ('run.html', True)
    """
    path = Path(check_path(path, "report(recording, path): path", "an HTML file path"))
    if title is not None:
        check_type(title, str, "report(title=...)", "a str or None (the file name)")
    text = page(recording, graph, title or path.stem)
    # A lone surrogate (a name decoded with surrogateescape) as its escape, which is also
    # what the page's JSON would say.
    write_file(path, text.encode("utf-8", "backslashreplace"), "report(recording, path)")
    return path
