"""`compare`: the error of every module of a `Comparison`, forward and backward, in the
order they were computed, with both runs' scales."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._data.compare import Comparison
from .._data.select import display_name, short_labels
from .._optional import require
from .._validate import check_int, check_type
from ..errors import ArgumentValueError
from ._figure import MAX_WIDTH, category_ticks, new_figure, themed

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["compare"]

# Marker colour of each status: bitwise equal, within the tolerance, beyond it.
_STATUS_COLORS = {"equal": "tab:green", "within": "tab:blue", "beyond": "tab:red"}


def _default_step(frame: Any, status: list[str], kind: str) -> int:
    """The first step with a record beyond the tolerance, else the last one."""
    beyond = frame[(frame["kind"] == kind).to_numpy() & [s == "beyond" for s in status]]
    steps = frame.loc[frame["kind"] == kind, "step"]
    return int(beyond["step"].min()) if len(beyond) else int(steps.max())


@themed
def compare(
    cmp: Comparison,
    *,
    step: int | None = None,
    kind: str = "output",
    error: str | None = None,
) -> Figure:
    """The error of every module in the order it was computed: a forward panel (module
    outputs in execution order) and a gradient panel (in the order backward produced
    them), on a log axis; markers coloured by status (green: bitwise equal, drawn on the
    bottom edge; blue: within the comparison's tolerance; red: beyond), the first
    divergence of each panel marked with a vertical line. On a second axis, both runs'
    scales (rms, log2) overlaid: run `a` solid, run `b` dashed, so that an error can be read
    against the size of the values.

    Args:
        cmp: a `Comparison` (`tensor_tracker.compare`, `tensor_tracker.compare_models`).
        step: the step shown (default: the first step with a record beyond the tolerance,
            else the last).
        kind: which records: `"output"` (the default), `"input"`, `"param"`...
        error: the error column of `cmp.to_frame()` drawn (default `cmp.error_column`:
            `"rel_rms_error"` with copies, `"max_stat_rel_error"` with statistics; also
            `"max_abs_error"`, `"max_ulp"`, or `"<stat>_rel_error"`).

    Returns:
        The matplotlib `Figure`: one axes per direction recorded (titled `"forward"`,
        `"gradient"`), each with a twin axes of the scales; the first divergence's line
        has `gid` `"first-divergence"`.

    Raises:
        TypeError: `cmp` is not a `Comparison`.
        ValueError: no record of this `kind` and `step`, or an unknown `error` column.

    Example:
        >>> import copy
        >>> bf16 = copy.deepcopy(model).bfloat16()
        >>> cmp = tensor_tracker.compare_models(model, bf16, x, loss_fn=loss_fn)
        >>> fig = tensor_tracker.plot.compare(cmp)
        >>> [ax.get_gid() for ax in fig.axes][:2]
        ['forward', 'gradient']
        >>> fig.savefig("compare.png")                     # doctest: +SKIP
    """
    check_type(cmp, Comparison, "plot.compare(cmp)", "a tensor_tracker.Comparison")
    if step is not None:
        check_int(step, "plot.compare(step=...)", "a recorded step (int) or None")
    check_type(kind, str, "plot.compare(kind=...)", "a kind of record (str)")
    if error is not None:
        check_type(error, str, "plot.compare(error=...)", "a column name (str) or None")
    np = require("numpy", "pandas")
    frame = cmp.to_frame()
    status = cmp.status()
    column = error or cmp.error_column
    if column not in frame.columns:
        raise ArgumentValueError(
            f"plot.compare: error={column!r} is not a column of cmp.to_frame(); "
            f"columns: {list(frame.columns)}"
        )
    if not len(frame) or not (frame["kind"] == kind).any():
        raise ArgumentValueError(f"plot.compare: no aligned record of kind={kind!r}")
    if step is None:
        step = _default_step(frame, status, kind)
    chosen = (frame["kind"] == kind).to_numpy() & (frame["step"] == step).to_numpy()
    if not chosen.any():
        steps = sorted(set(frame.loc[frame["kind"] == kind, "step"]))
        raise ArgumentValueError(f"plot.compare: no record at step={step}; steps: {steps}")
    directions = [g for g in (False, True) if (chosen & (frame["grad"] == g).to_numpy()).any()]
    rows_of = {g: np.flatnonzero(chosen & (frame["grad"] == g).to_numpy()) for g in directions}
    n = max(len(r) for r in rows_of.values())
    width = min(MAX_WIDTH, max(8.0, 0.12 * n + 5.0))
    fig = new_figure((width, 3.4 * len(directions) + 1.2))
    axes = fig.subplots(len(directions), 1, squeeze=False)[:, 0]
    values = frame[column].to_numpy(dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    floor = float(positive.min()) / 10 if len(positive) else 1e-12
    scales = ("rms_a", "rms_b") if {"rms_a", "rms_b"} <= set(frame.columns) else None
    tolerance = f"rtol={cmp.rtol:g}, atol={cmp.atol:g}"
    for ax, grad in zip(axes, directions, strict=True):
        rows = rows_of[grad]
        _panel(ax, frame, rows, values, status, floor, scales, np)
        first = cmp.first_divergence(grad=grad)
        where = [i for i, r in enumerate(rows) if first is not None and r == first.row]
        title = "gradient (backward order)" if grad else "forward (execution order)"
        if where:
            ax.axvline(where[0], color="tab:red", linestyle=":", gid="first-divergence")
            assert first is not None
            title += f"; first divergence ({tolerance}): {display_name(first.name)}"
        elif first is not None:
            title += f"; first divergence at step {first.step}: {display_name(first.name)}"
        else:
            title += f"; no divergence beyond {tolerance}"
        ax.set_title(title, fontsize="medium", loc="left")
        ax.set_gid("gradient" if grad else "forward")
        ax.set_ylabel(column)
        labels = short_labels([display_name(frame["name"].iloc[r]) for r in rows])
        category_ticks(ax.xaxis, labels, fontsize="x-small")
        ax.set_xlim(-0.5, len(rows) - 0.5)
    what = "module" if kind == "output" else kind
    fig.suptitle(
        f"Where the runs differ: {column} per {what} at step {step} "
        f"(green: bitwise equal, blue: within {tolerance}, red: beyond)",
        fontsize="medium",
    )
    return fig


def _panel(
    ax: Axes,
    frame: Any,
    rows: Any,
    values: Any,
    status: list[str],
    floor: float,
    scales: tuple[str, str] | None,
    np: Any,
) -> None:
    x = np.arange(len(rows))
    y = values[rows]
    shown = np.where(np.isfinite(y) & (y > 0), y, floor)
    colors = [_STATUS_COLORS[status[r]] for r in rows]
    ax.plot(x, shown, color="0.75", linewidth=0.8, zorder=1)
    ax.scatter(x, shown, c=colors, s=14, zorder=3)
    ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    if scales is not None:
        twin = ax.twinx()
        for name, style in zip(scales, ("-", "--"), strict=True):
            s = frame[name].to_numpy(dtype=float)[rows]
            s = np.where(np.isfinite(s) & (s > 0), s, math.nan)
            twin.plot(
                x,
                s,
                linestyle=style,
                color="tab:gray",
                linewidth=1.0,
                alpha=0.8,
                label=f"scale of {name[-1]} (rms)",
            )
        twin.set_yscale("log", base=2)
        twin.set_ylabel("rms (a solid, b dashed)", color="tab:gray")
        twin.tick_params(axis="y", colors="tab:gray", labelsize="x-small")
