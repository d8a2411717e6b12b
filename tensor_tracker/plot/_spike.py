"""`spike_plot`: the loss around a spike, and the quantities that moved first, aligned on it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._data.spike import DEPARTURE, Explanation, Trace
from .._validate import check_count, check_type
from ._figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["spike_plot"]


def spike_plot(explanation: Explanation, *, top: int = 3) -> Figure:
    """The loss and the `top` causes of an `explain_spike` explanation, one panel each on
    a shared step axis: each cause's series with its baseline (the median of its history,
    give or take 6 robust standard deviations, shaded) and a dashed line where it moved;
    the spike is a red line through every panel. Steps after the spike are not drawn.

    Args:
        explanation: what `tensor_tracker.explain_spike` returned.
        top: how many causes to draw, most likely first.

    Returns:
        The matplotlib `Figure`: the loss panel first, then one per cause, titled with
        the module, the quantity and the lead; lines with gid `"spike"` (the spike's
        step) and `"departure:<module>:<quantity>"` (where a cause moved). Without a spike
        (`explanation.step is None`), the loss alone under the explanation's message.

    Raises:
        TypeError: `explanation` is not an `Explanation`.

    Example:
        >>> losses = []
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for step in range(20):  # the batch is 100x too large at step 15
        ...         loss = model(x * (100 if step == 15 else 1)).square().mean()
        ...         loss.backward(); losses.append(loss.item()); t.step()
        >>> explanation = tensor_tracker.explain_spike(t, losses)
        >>> fig = plot.spike_plot(explanation)
        >>> [ax.get_title() for ax in fig.axes][1]
        '0 output_rms: moved at step 15, 0 step(s) before the spike'
    """
    check_type(explanation, Explanation, "spike_plot(explanation)", "what explain_spike returned")
    check_count(top, "spike_plot(top=...)", "causes to draw", minimum=0)
    causes = explanation.causes[:top]
    fig = new_figure((9.0, 1.9 * (1 + len(causes)) + 0.6))
    axes: Sequence[Axes] = list(fig.subplots(1 + len(causes), 1, sharex=True, squeeze=False)[:, 0])
    end = math.inf if explanation.step is None else explanation.step
    steps = [s for s in explanation.loss if s <= end]
    _draw_series(axes[0], steps, [explanation.loss[s] for s in steps], "C0")
    axes[0].set_ylabel("loss")
    if explanation.step is None:
        axes[0].set_title(explanation.message, fontsize="small", wrap=True)
    else:
        axes[0].set_title(f"loss spike at step {explanation.step}")
    for ax, cause in zip(axes[1:], causes, strict=True):
        trace: Trace = explanation.traces[(cause.module, cause.quantity)]
        _draw_series(ax, list(trace.steps), list(trace.values), "C1")
        band = DEPARTURE * trace.spread
        ax.axhspan(trace.centre - band, trace.centre + band, color="0.85", zorder=0)
        ax.axhline(trace.centre, color="0.5", linewidth=0.8, zorder=1)
        ax.axvline(
            cause.step, color="C2", linestyle="--", gid=f"departure:{cause.module}:{cause.quantity}"
        )
        ax.set_ylabel(cause.quantity, fontsize="small")
        ax.set_title(
            f"{cause.module or '<root>'} {cause.quantity}: moved at step {cause.step}, "
            f"{cause.lead} step(s) before the spike",
            fontsize="medium",
        )
    if explanation.step is not None:
        for ax in axes:
            ax.axvline(explanation.step, color="red", linewidth=1.2, gid="spike")
    axes[-1].set_xlabel("step")
    return fig


def _draw_series(ax: Axes, steps: list[int], values: list[float], colour: str) -> None:
    """A series on a log scale when its finite values are positive and span over 20x; its
    NaN and infinite values as red crosses along the top."""
    finite = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    ax.plot([s for s, _ in finite], [v for _, v in finite], color=colour, marker=".")
    shown = [v for _, v in finite]
    if shown and min(shown) > 0 and max(shown) > 20 * min(shown):
        ax.set_yscale("log")
    bad = [s for s, v in zip(steps, values, strict=True) if not math.isfinite(v)]
    if bad:
        ax.plot(
            bad,
            [1.0] * len(bad),
            "x",
            color="red",
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            label="NaN / inf",
        )
        ax.legend(loc="upper left", fontsize="small")
