"""`sample_plot`: one batch item's values per channel at every module, beside how far each
sample of the batch stands out."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from .._data.samples import SAMPLE_STATS, Names, SampleStat, sample_values
from .._data.select import display_name, short_labels
from .._optional import require
from .._validate import check_choice
from ._figure import MAX_WIDTH, category_ticks, foreground, new_figure, themed

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["sample_plot"]


@themed
def sample_plot(
    recording: Any,
    sample: int | None = None,
    *,
    position: int | None = None,
    step: int | None = None,
    call: int = 0,
    grad: bool = False,
    names: Names = None,
    batch_dim: int = 0,
    channel_dim: int | None = None,
    stat: SampleStat = "rms",
) -> Figure:
    """One batch item's values per channel at every module (a heat map, modules down,
    channels across, on a symmetric log colour scale: red positive, blue negative), and
    below it every sample's `stat` against the median of its batch (a bar per sample, the
    largest ratio over the modules, log scale): the bar far above 1 is the outlier sample,
    drawn red; the sample shown is outlined.

    Reads the full copies of one step (see `tensor_tracker.sample_values`, which returns
    the numbers behind this figure).

    Args:
        recording: a `Tracker` (live or `load`ed) or a list of `Stash` of full copies.
        sample: the batch index to show; default: the outlier sample (largest bar).
        position: the position (e.g. token) within the sample; default: each channel's
            value of largest magnitude over the positions.
        step, call, grad, names, batch_dim, channel_dim: as for `sample_values`.
        stat: the per-sample statistic of the bars, `"rms"` (default) or `"abs_max"`.

    Returns:
        The matplotlib `Figure`: the heat map's axes (y: modules in the order they ran, x:
        channel), its colour bar, and the bars' axes (x: sample, y: ratio to the median).

    Raises:
        NotRecordedError: the step holds statistics, not full copies.
        ArgumentValueError: `sample` or `position` out of range, an unknown `stat`.

    Example:
        >>> x = torch.randn(8, 16); x[3] *= 50  # one sample far out
        >>> with tensor_tracker.track(model) as t:
        ...     model(x).sum().backward()
        >>> fig = plot.sample_plot(t)  # the outlier sample of the last step
        >>> [a.get_xlabel() for a in fig.axes]  # heat map, bars, colour bar
        ['channel', 'sample (batch index)', '']
    """
    check_choice(stat, "sample_plot(stat=...)", SAMPLE_STATS)
    values = sample_values(
        recording,
        sample,
        position=position,
        step=step,
        call=call,
        grad=grad,
        names=names,
        batch_dim=batch_dim,
        channel_dim=channel_dim,
    )
    colors = require("matplotlib.colors", "plot")
    n = len(values.names)
    width = max(len(v) for v in values.values)
    grid = torch.full((n, width), math.nan, dtype=torch.float64)
    for i, v in enumerate(values.values):
        grid[i, : len(v)] = v
    finite = grid[torch.isfinite(grid)]
    peak = float(finite.abs().max()) if finite.numel() else 1.0
    nonzero = finite.abs()[finite != 0]
    # Linear below the 5th percentile of the magnitudes, logarithmic above: the
    # ordinary values and an outlier's orders of magnitude both stay readable.
    linthresh = max(float(nonzero.quantile(0.05)) if nonzero.numel() else 1.0, peak * 1e-6, 1e-30)
    peak = max(peak, linthresh * 10)
    norm = colors.SymLogNorm(linthresh=linthresh, vmin=-peak, vmax=peak, base=10)

    fig = new_figure((min(MAX_WIDTH, 10.0), min(14.0, max(4.8, 2.6 + 0.16 * n))))
    heat_ax, bar_ax = fig.subplots(2, 1, height_ratios=[max(2.0, 0.16 * n), 1.4])
    # Grey where a module has fewer channels than the widest one.
    cmap = require("matplotlib", "plot").colormaps["RdBu_r"].with_extremes(bad="#eeeeee")
    image = heat_ax.imshow(
        grid.numpy(),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=norm,
        extent=(-0.5, width - 0.5, n - 0.5, -0.5),
    )
    image.set_gid("sample-values")
    category_ticks(heat_ax.yaxis, short_labels([display_name(m) for m in values.names]))
    heat_ax.set_xlabel("channel")
    heat_ax.set_ylabel("module (in the order they ran)")
    where = (
        "largest |value| over positions"
        if values.position is None
        else f"position {values.position}"
    )
    what = "gradient" if grad else "output"
    heat_ax.set_title(
        f"sample {values.sample}: {what} values per channel ({where}), step {values.step}",
        fontsize="medium",
    )
    bar = fig.colorbar(image, ax=heat_ax, fraction=0.04, pad=0.02, ticks=_ticks(linthresh, peak))
    bar.set_label("value (symmetric log scale)")

    score = values.stats.score(stat)
    outlier = int(score.argmax())
    shown = score.clamp(max=1e300).numpy()
    colours = ["tab:red" if i == outlier else "tab:gray" for i in range(len(shown))]
    bars = bar_ax.bar(range(len(shown)), shown, color=colours, width=0.8)
    for i, patch in enumerate(bars):
        patch.set_gid(f"sample:{i}")
    bars[values.sample].set_edgecolor(foreground())
    bars[values.sample].set_linewidth(1.5)
    bar_ax.set_yscale("log")
    ticker = require("matplotlib.ticker", "plot")
    times = ticker.FuncFormatter(lambda v, _: f"{v:g}x")
    bar_ax.yaxis.set_major_formatter(times)
    bar_ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    bar_ax.axhline(1.0, color=foreground(), linewidth=0.8, linestyle=":")
    bar_ax.set_xlim(-0.6, len(shown) - 0.4)
    bar_ax.set_xlabel("sample (batch index)")
    bar_ax.set_ylabel(f"{stat} / batch median")
    bar_ax.set_title(
        f"each sample's largest {stat} over the batch median, across modules "
        f"(outlier: sample {outlier}, {float(score[outlier]):.3g}x)",
        fontsize="small",
    )
    if len(shown) <= 32:
        bar_ax.set_xticks(range(len(shown)))
    return fig


def _ticks(linthresh: float, peak: float) -> list[float]:
    """Colour bar ticks of a symmetric log scale: 0 and at most 3 powers of ten on each
    side, between the linear range and the largest magnitude, so their labels never meet."""
    low, high = math.ceil(math.log10(linthresh)), math.floor(math.log10(peak))
    if high < low:  # every value within the linear range: evenly spaced ticks
        unit = 10.0**high
        m = math.floor(peak / unit)
        half = math.floor(m / 2 + 0.5) * unit
        return [-m * unit, -half, 0.0, half, m * unit] if m >= 2 else [-unit, 0.0, unit]
    every = max(1, math.ceil((high - low + 1) / 3))
    powers = [10.0**k for k in range(high, low - 1, -every)]
    return sorted([*(-p for p in powers), 0.0, *powers])
