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
from .._data.copy_histograms import copies_histogram
from .._data.depth import depth_layout
from .._data.diagnose import diagnose
from .._data.select import CHILD_KINDS, ROOT_LABEL, member_label
from .._data.series import tensor_label
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
_VENDOR = ("uplot-1.6.32.iife.min.js",)
_VENDOR_CSS = ("uplot-1.6.32.min.css",)
# Histograms kept per series: at most this many steps, spread evenly over the run.
_HIST_STEPS = 200
# Points per logged scalar drawn in the KPI chart.
_LOG_POINTS = 2000


def _floats(values: Any) -> str:
    """float32 little-endian bytes, base64: 5.3 characters per number (NaN kept)."""
    np = require("numpy", "pandas")
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def _parts(name: str) -> tuple[str, ...]:
    return tuple(name.split(".")) if name else ()


def _depth(path: tuple[str, ...], recorded: set[tuple[str, ...]]) -> int:
    """How many recorded modules contain `path` (the indentation of the module list)."""
    return sum(path[:k] in recorded for k in range(len(path)))


def _tree_order(paths: list[tuple[str, ...]]) -> list[int]:
    """The indices of module paths (names split at their dots; an op or tap record's is its module's and
    its `attr`) depth first, parents before their children, siblings in the order they first
    ran (that of `paths`), the model itself first."""
    earliest: dict[tuple[str, ...], int] = {}  # per path: the first position in its subtree
    for i, path in enumerate(paths):
        for k in range(len(path) + 1):
            earliest[path[:k]] = min(earliest.get(path[:k], i), i)
    return sorted(
        range(len(paths)), key=lambda i: [earliest[paths[i][: k + 1]] for k in range(len(paths[i]))]
    )


def _rows(frame: Any) -> list[tuple[str, str, str]]:
    """The page's module list: per row (module name, kind, attr), kind and attr empty for a
    module, an op or tap record's (`track(..., ops=...)`, `tap`) for a child row of its
    module (which gets a row too, even when it recorded nothing itself); in tree order, each
    op or tap where it ran among its module's children."""
    rows: dict[tuple[str, str, str], tuple[str, ...]] = {}
    distinct = frame[["name", "kind", "attr"]].drop_duplicates()  # in the order they ran
    for name, kind, attr in zip(distinct["name"], distinct["kind"], distinct["attr"], strict=True):
        if kind in CHILD_KINDS:
            rows.setdefault((str(name), "", ""), _parts(str(name)))
            rows.setdefault((str(name), str(kind), str(attr)), (*_parts(str(name)), str(attr)))
        else:
            rows.setdefault((str(name), "", ""), _parts(str(name)))
    keys = list(rows)
    return [keys[i] for i in _tree_order(list(rows.values()))]


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
        "verdict": None,
        "depth": None,
        "channels": None,
    }


def _owner(subject: str, modules: list[str]) -> int:
    """The page's row a finding's subject belongs to (`"0"`, `"0.bias"`, `"0 input x"`,
    `"<root> named s"`, an op's `"softmax#0 of 0.attn"`): the op or tap's own row, else the
    longest recorded module name that starts it; -1 for none."""
    attr, of, module = subject.rpartition(" of ")
    if of and tensor_label(_module_name(module), attr) in modules:
        return modules.index(tensor_label(_module_name(module), attr))
    name = _module_name(module if of else subject.split(" ", 1)[0])
    while True:
        if name in modules:
            return modules.index(name)
        if not name:
            return -1
        name = name.rsplit(".", 1)[0] if "." in name else ""


def _module_name(shown: str) -> str:
    """A module's name as findings show it (the root as `"<root>"` or `"<model>"`)."""
    return "" if shown in ("<root>", ROOT_LABEL) else shown


def _depth_payload(modules: list[str]) -> dict[str, Any]:
    """Per slot of `depth_layout` its label and whether it is a repeated block; per module
    its slot and role (`None` outside the blocks)."""
    depth = depth_layout(modules)
    return {
        "slots": list(depth.slots),
        "block": list(depth.is_block),
        "place": [list(depth.place[m]) for m in modules],
    }


def _verdict(recording: Any, steps: list[int], modules: list[str]) -> dict[str, Any]:
    """What `diagnose` finds in the recording, ranked, for the top of the page: per finding
    its sentence, the module to open (an index into `modules`, -1 for none: a loss spike)
    and the step (an index into `steps`: the first recorded step at or after it). A scalar
    logged as `"loss"` is given to the loss spike check."""
    losses = {
        int(r.step): float(r.value)
        for r in getattr(recording, "logged", [])
        if r.text is None and r.name == "loss"
    }
    diagnosis = diagnose(recording, loss=losses or None)
    findings = []
    for f in diagnosis.ranked():
        at = next((i for i, s in enumerate(steps) if s >= f.steps[0]), len(steps) - 1)
        findings.append(
            {
                "check": f.check,
                "text": f.sentence(),
                "module": _owner(f.modules[0], modules) if f.modules else -1,
                "step": at,
            }
        )
    return {"findings": findings, "none": diagnosis.verdict()[0] if not findings else None}


def _payload(recording: Any, title: str, view: str, verdict: bool = True) -> dict[str, Any]:
    np = require("numpy", "pandas")
    columns = columns_of(recording, "report(recording, path)")
    frame, histograms = columns.frame, columns.histograms
    recorded_stats = columns.scalars
    if columns.copies:  # compute the statistics the report shows
        recorded_stats = ["rms", "abs_max", "mean", "min", "max"]
        for stat in recorded_stats:
            frame[stat] = recording.to_frame(stat=stat, stat_name=stat)[stat]
        fitted = None if histograms else copies_histogram(recording)
        if fitted is not None:  # histogram strips from the tensors themselves
            spec, counts = fitted
            for name in spec.names:
                frame[name] = [None if c is None else c[name] for c in counts]
            histograms = {spec.name: spec}
    # Every statistic recorded, in the order of the spec (the first shown first).
    stats = [s for s in _FIRST if s in recorded_stats]
    stats += [s for s in recorded_stats if s not in stats]
    steps = sorted(int(s) for s in frame["step"].unique())
    step_index = {s: i for i, s in enumerate(steps)}
    listed = _rows(frame)
    # A row's name: its module's, or an op or tap's as its module's child ("0.attn.softmax#0").
    modules = [tensor_label(name, attr) if kind else name for name, kind, attr in listed]
    row_of = {row: i for i, row in enumerate(listed)}
    # Each row by the name the channel and sample tables give it ("softmax#0 of 0.attn").
    labelled = {member_label(name, kind, attr): i for i, (name, kind, attr) in enumerate(listed)}
    recorded = {_parts(name) for name, kind, _ in listed if not kind}
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
            "module": row_of[(name, kind, attr) if kind in CHILD_KINDS else (name, "", "")],
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
            # Counts only (a copy that is not a floating-point tensor has none).
            kept = kept[[np.ndim(c) == 1 for c in kept[hist_name]]]
        if hist is not None and hist_name is not None and hist_name in rows.columns and len(kept):
            counts = np.stack([np.asarray(c, dtype=float) for c in kept[hist_name]])
            # Every value counted: the bins and the extra counts (zeros, out of range...).
            totals = counts.sum(axis=1)
            for extra in hist.names[1:]:
                if extra in kept.columns:
                    totals = totals + np.nan_to_num(kept[extra].to_numpy(dtype=float))
            peak = counts.max(axis=1, keepdims=True)
            # 8 bits per bin, relative to the step's largest bin: enough to draw.
            scaled = np.where(peak > 0, np.round(255 * counts / np.maximum(peak, 1)), 0)
            # Only the bins from the first filled to the last (a third of BERT's 48, on
            # average): the page's weight is mostly these and the statistics.
            filled = np.flatnonzero(scaled.any(axis=0))
            first, last = (int(filled[0]), int(filled[-1])) if filled.size else (0, -1)
            entry["hist"] = {
                "steps": [int(s) for s in kept["step"]],
                "first": first,
                "counts": base64.b64encode(
                    scaled[:, first : last + 1].astype(np.uint8).tobytes()
                ).decode(),
                "totals": [round(float(t)) for t in totals],
            }
            # The values outside the bins' range, counted apart: said on the page.
            for side in ("below", "above"):
                column = f"{hist_name}_{side}"
                if column in kept.columns:
                    outside = np.nan_to_num(kept[column].to_numpy(dtype=float))
                    if outside.any():
                        entry["hist"][side] = [round(float(c)) for c in outside]
        series.append(entry)
    scalars: dict[str, list[list[Any]]] = {}
    notes: list[list[Any]] = []
    for logged in getattr(recording, "logged", []):
        if view == "graph" and logged.text is None:  # the graph view draws no scalars
            continue
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
        # An op or tap row says whose child it is ("of": its module's row) and its attr.
        "modules": [
            {
                "name": label,
                "type": str(types[name]).rsplit(".", 1)[-1],
                "depth": _depth(_parts(name), recorded),
            }
            if not kind
            else {
                "name": label,
                "type": kind,
                "depth": _depth(_parts(name), recorded) + 1,
                "of": row_of[(name, "", "")],
                "attr": attr,
            }
            for label, (name, kind, attr) in zip(modules, listed, strict=True)
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
        # The scale chart's x axis: each module's block (a slot) and its role in it, as
        # scale_plot groups them; a module outside the repeated blocks is a slot alone.
        "depth": _depth_payload(modules),
        # The verdict at the top: what `diagnose` finds, most severe first.
        "verdict": _verdict(recording, steps, modules) if verdict else None,
        # Full copies: each sample's values per channel and rms (the sample panel).
        # Not in the graph view, which has no sample panel (up to 5.6 MB saved).
        "samples": samples_payload(recording, steps, modules, labelled)
        if columns.copies and view != "graph"
        else None,
        # Statistics per channel (or full copies): the channels x modules panel (not in the
        # graph view, which has none).
        "channels": channels_payload(frame, recording, labelled) if view != "graph" else None,
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
    payload = _nothing_recorded(title) if recording is None else _payload(recording, title, view)
    if compared is not None:
        # Run b's values too (its verdict aside): every chart overlays both runs.
        other = _payload(compared.b, title, view, verdict=False)
        payload["compare"] = comparison_payload(compared, payload, other)
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

    At the top, the verdict: what `diagnose` finds (with a scalar logged as `"loss"` as its
    loss), most severe first, one sentence each naming the module and the step, a link that
    opens them; or how many checks found nothing. The page then shows the modules
    (filterable; a menu on a phone), the picked module's values
    at the chosen step (one number format per table) and its statistics over the steps
    (outputs, gradients, parameters and their gradients, whatever was recorded) with their
    histograms over the steps when histograms were recorded, or counted from the tensors of a
    run that kept full copies, over the powers of 2 they span (a line says how to record them
    otherwise). "pin" keeps a module on the page, so that several sit side by side. The scale
    chart shows every module's output (circles) and gradient (squares) at the chosen step
    against the fp16/bf16/fp8 limits, along x grouped by repeated block as `scale_plot`
    groups them (the readout names the block and the module's role in it), the points
    beyond fp16's range ringed; hover or tap a point for its module and value, click it to
    open the module. Every statistic recorded is offered; counts and fractions are drawn on a
    linear axis, magnitudes as log2. The scalars of `log()` are charts over the steps, the
    notes marked on every step axis. A slider picks the step. A recording of full copies
    also gets a sample panel: pick a batch index (and a position, e.g. a token) to see that
    sample's values per channel at the picked module, beside every sample's rms across the
    batch with the sample that stands out most in red (see `tensor_tracker.sample_values`;
    the page keeps at most 2**20 numbers for it, about 5.6 MB, the last steps first; over
    that, each channel's largest value over the positions; a sample is marked only when
    it reaches 4x the batch median somewhere, see `SampleStats.outliers`). With statistics
    per channel (`stats.per_channel("abs_max")`, or full copies) a channels x modules panel
    shows each module's channels against its median channel, one row per module as wide as
    the panel, and names and frames the outlier channels `diagnose` reports (over 10 times
    their module's median channel); without them it says how to record them. Charts zoom
    by dragging (double-click resets). The numbers are all there (float32). Pinned charts
    can share one y range; a histogram strip has its colour key and counts the values
    outside its range.

    Op and tap records (`track(..., ops=...)`, `tap`) are rows of their own under their
    module in the list (`"blocks.0.attn.softmax#0"`, type `op` or `tap`), placed where they
    ran among its children, with their own charts, histogram strips and pin ("softmax#0
    value", "softmax#0 gradient" dashed); the module's panel links to them, and the scale
    and comparison charts draw them beside the module outputs.

    Everything works from the keyboard: the module list and the graph are one tab stop
    each (arrow keys move, Enter opens, P pins; in the graph + opens a module, Backspace
    goes back up), and a chart, once focused, reads its points out under the arrow keys.
    The colours (Okabe and Ito's palette) stay apart for colour-blind readers, and
    gradients are drawn dashed, so that the dash says it too.

    Charts are drawn by uPlot, inlined (see `tensor_tracker/export/vendor`); the graph is
    drawn where `module_graph` laid it out, as its SVG and `plot.module_graph` draw it.

    A `Comparison` (`tensor_tracker.compare`, `compare_models`) gets the page of its run
    `a` with the errors against run `b`: the counts and first divergences in the header,
    a chart of every module's error at the chosen step (forward circles, gradient squares;
    blue hollow bitwise equal, light blue within the tolerance, orange outlined beyond (a
    palette that colour-blind readers tell apart); hover or tap a point for its
    module, error and status, click it to open the module), the module list and the
    graph's nodes coloured the same way (darker for larger errors), and each series' error
    in the module's panel ("not recorded in run b" where run b has none). The tolerance is
    shown in epsilons of the coarsest dtype compared and can be changed on the page (the
    statuses are then recomputed from the error, atol left out). Every chart over the
    steps overlays run b's line (dashed) on run a's, the logged scalars (the loss) too.

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
