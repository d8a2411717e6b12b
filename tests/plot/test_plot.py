"""tensor_tracker.plot: figures from full-tensor and stats= stashes, and their errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection, QuadMesh
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tensor_tracker import Stash, Tracker, plot, track
from tensor_tracker.stats.formats import FORMATS
from tests.helpers import batch, stash, tiny_model, train


def bar_counts(fig: Figure, i: int = 0) -> list[float]:
    return [float(v) for v in fig.axes[0].patches[i].get_data().values]


def legend_texts(ax: Axes) -> list[str]:
    """The axes' legend entries, then those of the figure's legends (the format limits)."""
    legends = [ax.get_legend(), *ax.get_figure(root=True).legends]
    texts = [t.get_text() for legend in legends if legend is not None for t in legend.get_texts()]
    assert texts
    return texts


def limit_lines(ax: Axes) -> dict[str, float]:
    return {
        line.get_gid(): float(line.get_ydata()[0])
        for line in ax.get_lines()
        if (line.get_gid() or "").startswith("limit:")
    }


def series(ax: Axes, label: str) -> Line2D:
    return next(line for line in ax.get_lines() if line.get_label() == label)


def find(tracker: Tracker, name: str, grad: bool = False, step: int | None = None) -> Stash:
    return next(
        s
        for s in tracker
        if s.name == name and s.grad == grad and s.kind == "output" and step in (None, s.step)
    )


# -- import ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_imports() -> list[str]:
    """Which of matplotlib, ipywidgets, umap and pandas a fresh interpreter holds after
    importing `plot` and `widgets`; then which of matplotlib and pyplot after drawing a
    histogram: one line each (one interpreter for both tests: importing torch takes seconds)."""
    code = (
        "import sys, torch, tensor_tracker.plot, tensor_tracker.widgets\n"
        "heavy = ('matplotlib', 'ipywidgets', 'umap', 'pandas')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "tensor_tracker.plot.histogram(torch.randn(10))\n"
        "print(sorted(m for m in ('matplotlib', 'matplotlib.pyplot') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_importing_plot_and_widgets_does_not_import_matplotlib_or_ipywidgets(
    fresh_imports: list[str],
) -> None:
    assert fresh_imports[0] == "[]"


# -- histogram ---------------------------------------------------------------------------


def test_histogram_of_one_stash_has_the_requested_bins(full: Tracker) -> None:
    s = find(full, "blocks.0")
    fig = plot.histogram(s, bins=16)
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].patches) == 1
    counts = bar_counts(fig)
    assert len(counts) == 16
    assert sum(counts) == s.first_value.numel()


def test_histogram_overlays_one_series_per_stash_with_legend(full: Tracker) -> None:
    a, b = find(full, "blocks.0"), find(full, "blocks.1", grad=True)
    fig = plot.histogram([a, b], bins=8)
    ax = fig.axes[0]
    assert len(ax.patches) == 2
    assert legend_texts(ax) == [
        f"blocks.0 (fwd): {a.first_value.numel():,} values",
        f"blocks.1 (grad): {b.first_value.numel():,} values",
    ]


def test_histogram_shares_bins_across_series() -> None:
    fig = plot.histogram([stash(torch.tensor([0.0, 1.0])), stash(torch.tensor([3.0, 4.0]))], bins=4)
    edges = [p.get_data().edges.tolist() for p in fig.axes[0].patches]
    assert edges[0] == edges[1] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_histogram_accepts_a_tensor() -> None:
    fig = plot.histogram(torch.arange(8.0), bins=4)
    assert bar_counts(fig) == [2.0, 2.0, 2.0, 2.0]


def test_histogram_log2_bins_log2_of_magnitudes() -> None:
    fig = plot.histogram(torch.tensor([0.25, 4.0, -4.0]), bins=4, log2=True)
    assert bar_counts(fig) == [1.0, 0.0, 0.0, 2.0]
    assert fig.axes[0].get_xlabel() == "log2|value|"
    assert fig.axes[0].patches[0].get_data().edges.tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]


def test_histogram_log2_legend_counts_zeros_and_nonfinite() -> None:
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, math.nan, math.inf])
    fig = plot.histogram(stash(x, "0.linear"), log2=True)
    assert legend_texts(fig.axes[0]) == ["0.linear (fwd): 2 values; not shown: 2 zeros, 2 NaN/Inf"]


def test_histogram_linear_shows_zeros_but_counts_nonfinite() -> None:
    x = torch.tensor([0.0, 0.0, 1.0, -math.inf])
    fig = plot.histogram(stash(x), bins=2)
    assert sum(bar_counts(fig)) == 3
    assert legend_texts(fig.axes[0]) == ["x (fwd): 3 values; not shown: 1 NaN/Inf"]


def test_histogram_range_counts_values_outside() -> None:
    fig = plot.histogram(torch.tensor([-5.0, 0.5, 1.5, 9.0]), bins=2, range=(0.0, 2.0))
    assert bar_counts(fig) == [1.0, 1.0]
    assert "2 outside range" in legend_texts(fig.axes[0])[0]


def test_histogram_of_integer_tensor_bins_as_float() -> None:
    fig = plot.histogram(stash(torch.arange(10)), bins=5)
    assert bar_counts(fig) == [2.0] * 5


def test_histogram_of_bool_tensor() -> None:
    fig = plot.histogram(torch.tensor([True, False, True]), bins=2)
    assert bar_counts(fig) == [1.0, 2.0]


def test_histogram_of_single_element_draws_one_bar() -> None:
    fig = plot.histogram(stash(torch.tensor([3.0])), bins=8)
    counts = bar_counts(fig)
    assert sum(counts) == 1
    assert sum(c > 0 for c in counts) == 1


def test_histogram_of_nan_only_tensor_raises() -> None:
    with pytest.raises(ValueError, match=r"no finite values.*2 NaN/Inf"):
        plot.histogram(stash(torch.tensor([math.nan, math.inf])))


def test_histogram_log2_of_zeros_only_raises_and_suggests_linear() -> None:
    with pytest.raises(ValueError, match="log2=False"):
        plot.histogram(torch.zeros(4), log2=True)


def test_histogram_of_empty_list_raises() -> None:
    with pytest.raises(ValueError, match="no stashes"):
        plot.histogram([])


def test_histogram_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="stashes must be"):
        plot.histogram("blocks.0")


def test_histogram_of_stash_without_tensor_raises() -> None:
    with pytest.raises(TypeError, match="holds a NoneType, not a tensor"):
        plot.histogram(stash((None,), grad=True))


def test_histogram_labels_must_match_stashes(full: Tracker) -> None:
    with pytest.raises(ValueError, match="labels has 1 entries for 2 stashes"):
        plot.histogram([full[0], full[1]], labels=["one"])


def test_histogram_custom_labels_are_used(full: Tracker) -> None:
    fig = plot.histogram(full[0], labels=["mine"])
    assert legend_texts(fig.axes[0])[0].startswith("mine: ")
    assert fig.axes[0].get_title() == "mine"


def test_histogram_rejects_bad_bins_and_range() -> None:
    with pytest.raises(ValueError, match="bins"):
        plot.histogram(torch.ones(3), bins=0)
    with pytest.raises(ValueError, match="range"):
        plot.histogram(torch.ones(3), range=(2.0, 1.0))


def test_histogram_draws_into_given_axes() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    assert plot.histogram(torch.randn(10), ax=ax) is fig
    assert len(ax.patches) == 1


def test_histogram_draws_recorded_histogram_statistic(hist_steps: Tracker) -> None:
    s = find(hist_steps, "blocks.0", step=1)
    fig = plot.histogram(s)
    recorded = s.first_value
    assert bar_counts(fig) == recorded["hist"].tolist()
    edges = fig.axes[0].patches[0].get_data().edges.tolist()
    assert edges == list(recorded.edges("hist"))
    assert fig.axes[0].get_xlabel() == "log2|value|"


def test_histogram_of_stats_without_histogram_says_how_to_record_one(with_stats: Tracker) -> None:
    with pytest.raises(ValueError, match=r"stats\.histogram\(\)"):
        plot.histogram(with_stats[0])


# -- colours: light and dark notebooks ----------------------------------------------------


def contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """WCAG contrast ratio of two sRGB colours (components 0..1)."""

    def luminance(c: tuple[float, ...]) -> float:
        lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c[:3]]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_figures_are_transparent_with_grey_text_for_light_and_dark_notebooks(
    full: Tracker,
) -> None:
    # In JupyterLab's dark theme every figure was a white slab with black text.
    import io

    import matplotlib
    from matplotlib.colors import to_rgba

    buffer = io.BytesIO()
    fig = plot.scale_plot(full)
    fig.savefig(buffer, format="png")
    rgba = matplotlib.image.imread(io.BytesIO(buffer.getvalue()))
    alpha = rgba[..., 3]
    assert alpha[0, 0] == 0 and (alpha == 0).mean() > 0.5  # the page shows through
    opaque = rgba[alpha == 1][:, :3]
    assert len(opaque) and not (opaque.max(axis=1) < 0.2).any()  # nothing black: lost on #111
    assert not (opaque.min(axis=1) > 0.95).any()  # nothing white: a slab on a dark page
    ax = fig.axes[0]
    for text in [ax.xaxis.label, ax.get_xticklabels()[0], ax.get_yticklabels()[0]]:
        color = to_rgba(text.get_color())
        assert contrast(color, (1, 1, 1)) > 4.2 and contrast(color, to_rgba("#111111")) > 4.2
    assert matplotlib.rcParams["text.color"] == "black"  # no global state changed


def test_figures_follow_a_matplotlib_style_or_axes_of_the_users() -> None:
    import matplotlib.style
    from matplotlib.colors import to_rgba

    with matplotlib.style.context("dark_background"):
        fig = plot.histogram(torch.randn(100))
    assert fig.get_facecolor() == to_rgba("black")
    assert to_rgba(fig.axes[0].xaxis.label.get_color()) == to_rgba("white")
    own = Figure()
    plot.histogram(torch.randn(100), ax=own.add_subplot())
    assert own.get_facecolor() == to_rgba("white")
    assert to_rgba(own.axes[0].xaxis.label.get_color()) == to_rgba("black")


# -- scale_plot --------------------------------------------------------------------------


def test_scale_plot_ticks_are_modules_in_execution_order(full: Tracker) -> None:
    ax = plot.scale_plot(full).axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[:3] == ["embed", "pos", "blocks.0.norm1"]
    assert ticks[-1] == "<model>"
    assert len(ticks) == len({s.name for s in full})


def test_scale_plot_plots_log2_rms_of_forward_and_gradient(full: Tracker) -> None:
    ax = plot.scale_plot(full).axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    i = ticks.index("blocks.1")
    fwd = find(full, "blocks.1").first_value
    grad = find(full, "blocks.1", grad=True).first_value
    assert series(ax, "forward").get_ydata()[i] == pytest.approx(
        math.log2(fwd.pow(2).mean().sqrt())
    )
    assert series(ax, "gradient").get_ydata()[i] == pytest.approx(
        math.log2(grad.pow(2).mean().sqrt())
    )


def test_scale_plot_draws_format_limits_at_log2(full: Tracker) -> None:
    lines = limit_lines(plot.scale_plot(full).axes[0])
    expected = {
        f"limit:{key}:{which}": math.log2(getattr(fmt, which))
        for key, fmt in FORMATS.items()
        for which in ("max", "min_normal", "min_subnormal")
    }
    assert lines == pytest.approx(expected)


def test_scale_plot_legend_names_series_and_formats(full: Tracker) -> None:
    texts = legend_texts(plot.scale_plot(full).axes[0])
    assert texts[:2] == ["forward", "gradient"]
    for fmt in FORMATS.values():
        assert any(t.startswith(fmt.label + " (") for t in texts)


def test_scale_plot_formats_choose_reference_lines(full: Tracker) -> None:
    ax = plot.scale_plot(full, formats=["fp16"]).axes[0]
    assert set(limit_lines(ax)) == {
        "limit:fp16:max",
        "limit:fp16:min_normal",
        "limit:fp16:min_subnormal",
    }
    assert limit_lines(plot.scale_plot(full, formats=()).axes[0]) == {}


def test_scale_plot_from_stats_matches_full_tensors(full: Tracker, with_stats: Tracker) -> None:
    a = plot.scale_plot(full).axes[0]
    b = plot.scale_plot(with_stats).axes[0]
    assert [t.get_text() for t in a.get_xticklabels()] == [
        t.get_text() for t in b.get_xticklabels()
    ]
    for label in ("forward", "gradient"):
        ya, yb = series(a, label).get_ydata(), series(b, label).get_ydata()
        # log2(rms) of a layer norm's output is about -4e-6: a relative tolerance there
        # asks for the rms to 1e-11, below float32 rounding (statistics sum in float64,
        # the full copies' rms in float32); abs=1e-6 is the rms to 7e-7.
        assert list(yb) == pytest.approx(list(ya), rel=1e-5, abs=1e-6)


def test_scale_plot_other_statistic(with_stats: Tracker) -> None:
    ax = plot.scale_plot(with_stats, stat="abs_max").axes[0]
    assert ax.get_ylabel() == "log2(abs_max)"
    i = [t.get_text() for t in ax.get_xticklabels()].index("blocks.0")
    expected = find(with_stats, "blocks.0").first_value["abs_max"].item()
    assert series(ax, "forward").get_ydata()[i] == pytest.approx(math.log2(expected))


def test_scale_plot_averages_calls_of_the_step() -> None:
    stashes = [
        stash(torch.full((4,), 2.0), "a", call=0),
        stash(torch.full((4,), 6.0), "a", call=1),
        stash(torch.full((4,), 1.0), "b"),
    ]
    ax = plot.scale_plot(stashes).axes[0]
    assert list(series(ax, "forward").get_ydata()) == pytest.approx([math.log2(4.0), 0.0])
    assert "mean over calls" in ax.get_title()


def test_scale_plot_shows_last_step_unless_told(full_steps: Tracker) -> None:
    assert "step 2" in plot.scale_plot(full_steps).axes[0].get_title()
    ax = plot.scale_plot(full_steps, step=0).axes[0]
    assert "step 0" in ax.get_title()
    i = [t.get_text() for t in ax.get_xticklabels()].index("blocks.0")
    x0 = find(full_steps, "blocks.0", step=0).first_value
    assert series(ax, "forward").get_ydata()[i] == pytest.approx(math.log2(x0.pow(2).mean().sqrt()))


def test_scale_plot_without_gradients_has_one_series() -> None:
    model = tiny_model()
    tracker = track(model, grad=False)
    with tracker:
        model(batch())
    texts = legend_texts(plot.scale_plot(tracker).axes[0])
    assert "forward" in texts
    assert "gradient" not in texts


def test_scale_plot_unknown_statistic_raises(full: Tracker) -> None:
    with pytest.raises(ValueError, match="stat='nope'"):
        plot.scale_plot(full, stat="nope")


def test_scale_plot_unrecorded_statistic_lists_recorded(with_stats: Tracker) -> None:
    with pytest.raises(ValueError, match=r"stat='zero_frac' was not recorded.*'rms'"):
        plot.scale_plot(with_stats, stat="zero_frac")


def test_scale_plot_empty_tracker_raises() -> None:
    with pytest.raises(ValueError, match="no stashes"):
        plot.scale_plot(Tracker())


def test_scale_plot_missing_kind_or_step_raises(full: Tracker) -> None:
    with pytest.raises(ValueError, match="kind='param'"):
        plot.scale_plot(full, kind="param")
    with pytest.raises(ValueError, match=r"step=7.*recorded steps: \[0\]"):
        plot.scale_plot(full, step=7)


def test_scale_plot_all_zero_values_raise() -> None:
    with pytest.raises(ValueError, match="zero, NaN or infinite"):
        plot.scale_plot([stash(torch.zeros(3))])


class _DictOut(nn.Module):
    """Returns a dict, as a Hugging Face model returns a `ModelOutput` (an `OrderedDict`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"hidden": self.lin(x)}


def _dict_run(steps: int = 1, **options: object) -> tuple[Tracker, list[torch.Tensor]]:
    """A tracker of a model whose submodule `0` returns a dict, and that dict's tensor at
    each step."""
    torch.manual_seed(0)
    model = nn.Sequential(_DictOut())
    hidden = []
    with track(model, **options) as tracker:  # type: ignore[arg-type]
        for _ in range(steps):
            out = model(torch.randn(2, 4))["hidden"]
            hidden.append(out.detach().clone())
            out.sum().backward()
            tracker.step()
    return tracker, hidden


def test_scale_plot_shows_the_first_tensor_of_a_dict_output() -> None:
    pytest.importorskip("pandas")
    for options in ({"stats": True}, {}):
        tracker, hidden = _dict_run(**options)
        ax = plot.scale_plot(tracker).axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == ["0.lin", "0", "<model>"]
        rms = math.log2(hidden[0].pow(2).mean().sqrt().item())
        # The dict of "0" and of the root holds the output of 0.lin: the same point thrice.
        assert list(series(ax, "forward").get_ydata()) == pytest.approx([rms] * 3, rel=1e-5)
    # What the statistics frame shows for the same rows.
    tracker, _ = _dict_run(stats=True)
    frame = tracker.to_frame()
    forward = frame[~frame.grad].set_index("name")["rms"]
    ax = plot.scale_plot(tracker).axes[0]
    assert list(series(ax, "forward").get_ydata()) == pytest.approx(
        [math.log2(forward[n]) for n in ("0.lin", "0", "")]
    )


def test_history_and_histograms_take_the_first_tensor_of_a_dict_output() -> None:
    tracker, hidden = _dict_run(steps=2)
    ax = plot.history(tracker, names=["0"], stat="abs_max").axes[0]
    expected = [math.log2(h.abs().max().item()) for h in hidden]
    assert list(series(ax, "0").get_ydata()) == pytest.approx(expected)
    dict_stash = next(s for s in tracker if s.name == "0" and not s.grad and s.step == 1)
    assert isinstance(dict_stash.value, dict)
    fig = plot.histogram(dict_stash, bins=4, range=(-4.0, 4.0))
    assert bar_counts(fig) == torch.histc(hidden[1], bins=4, min=-4.0, max=4.0).tolist()
    counts = mesh(plot.histogram_heatmap(tracker, "0", bins=4, log2=False).axes[0]).get_array()
    assert counts.sum() == 2 * hidden[0].numel()


def _two_tensor_run(**options: object) -> Tracker:
    """Parameters and inputs of known scale: a Linear (weight 2, bias 0.5) and a LayerNorm
    (weight 4, bias 0.25) over a batch of 4; a module with two inputs, `hidden_states`
    (all 3) and `scale` (all 0.5)."""

    class Scale(nn.Module):
        def forward(self, hidden_states: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return hidden_states * scale

    linear, norm = nn.Linear(2, 2), nn.LayerNorm(2)
    for p, value in (
        (linear.weight, 2.0),
        (linear.bias, 0.5),
        (norm.weight, 4.0),
        (norm.bias, 0.25),
    ):
        nn.init.constant_(p, value)
    model = nn.Sequential(linear, norm)
    scale = Scale()
    capture = ("outputs", "inputs", "params")
    with track(nn.ModuleList([model, scale]), capture=capture, **options) as tracker:  # type: ignore[arg-type]
        x = torch.tensor([[1.0, 2.0], [3.0, 1.0], [0.0, 1.0], [2.0, 2.0]])
        # The loss' gradient with respect to the LayerNorm's bias is 4 (the batch size) per element.
        model(x).sum().backward()
        scale(torch.full((3,), 3.0), torch.full((3,), 0.5))
    return tracker


def test_scale_plot_of_params_and_inputs_has_a_point_per_tensor() -> None:
    for options in ({"stats": True}, {}):
        tracker = _two_tensor_run(**options)
        ax = plot.scale_plot(tracker, kind="param").axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == ["0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias"]
        # log2 of the rms of each tensor: 2, 0.5, 4, 0.25 (not their means per module).
        assert list(series(ax, "forward").get_ydata()) == pytest.approx([1.0, -1.0, 2.0, -2.0])
        assert series(ax, "gradient").get_ydata()[3] == pytest.approx(2.0)  # log2(4)
        assert ax.get_title().startswith("rms per tensor (param")
        ax = plot.scale_plot(tracker, kind="input", names=["1"]).axes[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1.hidden_states", "1.scale"]
        assert list(series(ax, "forward").get_ydata()) == pytest.approx([math.log2(3.0), -1.0])


def test_history_of_params_and_inputs_has_a_line_per_tensor() -> None:
    pytest.importorskip("pandas")
    expected = {"0.0.weight": 1.0, "0.0.bias": -1.0, "0.1.weight": 2.0, "0.1.bias": -2.0}
    tracker = _two_tensor_run(stats=True)
    # From the tracker's frame, from its stashes, and from a frame passed in.
    for source in (tracker, list(tracker), tracker.to_frame()):
        ax = plot.history(source, kind="param").axes[0]
        got = {label: series(ax, label).get_ydata()[0] for label in expected}
        assert got == pytest.approx(expected)
        assert legend_texts(ax)[:4] == list(expected)
        ax = plot.history(source, kind="input", names=["1"]).axes[0]
        assert series(ax, "1.hidden_states").get_ydata()[0] == pytest.approx(math.log2(3.0))
        assert series(ax, "1.scale").get_ydata()[0] == pytest.approx(-1.0)


class _Block(nn.Module):
    """Five modules: itself and four leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(self.c(self.b(self.a(x))))


@pytest.mark.parametrize(
    ("blocks", "panels", "ticks"),
    [
        (7, 1, 36),  # 1 + 7 * 5 = 36 modules: every module, one panel
        (9, 2, 9),  # 46 modules (36 leaves): leaves only, grouped by block in two panels
    ],
)
def test_scale_plot_default_leaves_and_grouping_count_the_same_modules(
    blocks: int, panels: int, ticks: int
) -> None:
    model = nn.Sequential(*[_Block() for _ in range(blocks)])
    with track(model, stats=True) as tracker:
        model(torch.ones(1, 2)).sum().backward()
    fig = plot.scale_plot(tracker)
    assert len(fig.axes) == panels
    assert len(fig.axes[0].get_xticks()) == ticks


# -- umap_plot ---------------------------------------------------------------------------


def paths(ax: Axes) -> LineCollection:
    return next(c for c in ax.collections if isinstance(c, LineCollection))


def points(ax: Axes) -> PathCollection:
    return next(c for c in ax.collections if isinstance(c, PathCollection))


def test_umap_plot_pca_draws_token_paths_through_default_layers(full: Tracker) -> None:
    fig = plot.umap_plot(full, method="pca")
    ax, bar = fig.axes
    tokens = 2 * 8
    assert len(paths(ax).get_segments()) == tokens * 1
    assert len(points(ax).get_offsets()) == tokens * 2
    assert [t.get_text() for t in bar.get_yticklabels()] == ["blocks.0", "blocks.1"]
    assert ax.get_xlabel() == "PC 1"


def test_umap_plot_points_are_the_principal_components(full: Tracker) -> None:
    fig = plot.umap_plot(full, method="pca", tokens=range(5))
    x = torch.cat([find(full, n).first_value.reshape(-1, 16)[:5] for n in ("blocks.0", "blocks.1")])
    x = x.double() - x.double().mean(0)
    _, s, _ = torch.linalg.svd(x, full_matrices=False)
    got = torch.as_tensor(points(fig.axes[0]).get_offsets(), dtype=torch.float64)
    # The embedding keeps the variance along the first two principal axes.
    assert got.pow(2).sum(0).tolist() == pytest.approx(s[:2].pow(2).tolist(), rel=1e-6)


def test_umap_plot_draws_op_records_as_layers() -> None:
    """The residual stream after each add (`ops="add"`): layers named as children of their
    module, embedded from the values the op records hold."""
    from tests.core.test_ops import _gpt, _input

    model = _gpt()
    with track(model, ops="add") as t:
        model(_input()).sum().backward()
    adds = ["0.add#0", "0.add#1", "1.add#0", "1.add#1"]
    fig = plot.umap_plot(t, layers=r"add#", method="pca", grad=True)
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == adds
    kept = {f"{s.name}.{s.attr}": s.first_value for s in t if s.kind == "op" and s.grad}
    x = torch.cat([kept[n].reshape(-1, 8) for n in adds]).double()
    _, s, _ = torch.linalg.svd(x - x.mean(0), full_matrices=False)
    got = torch.as_tensor(points(fig.axes[0]).get_offsets(), dtype=torch.float64)
    assert got.pow(2).sum(0).tolist() == pytest.approx(s[:2].pow(2).tolist(), rel=1e-6)


def test_umap_plot_takes_at_most_max_tokens_by_default() -> None:
    model = tiny_model()
    tracker = track(model, include=r"blocks\.\d+$")
    train(model, tracker, tokens=batch(10, 8))
    ax = plot.umap_plot(tracker, method="pca").axes[0]
    assert len(points(ax).get_offsets()) == 2 * plot.MAX_TOKENS
    assert f"{plot.MAX_TOKENS} tokens" in ax.get_title()


def test_umap_plot_token_subset_and_labels(full: Tracker) -> None:
    ax = plot.umap_plot(full, method="pca", tokens=[3, 1], token_labels=["a", "b"]).axes[0]
    assert len(points(ax).get_offsets()) == 4
    assert sorted(t.get_text() for t in ax.texts) == ["a", "b"]


def test_umap_plot_token_labels_per_row_are_indexed(full: Tracker) -> None:
    labels = [f"t{i}" for i in range(16)]
    ax = plot.umap_plot(full, method="pca", tokens=range(2, 4), token_labels=labels).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["t2", "t3"]


def test_umap_plot_explicit_layers_in_given_order(full: Tracker) -> None:
    fig = plot.umap_plot(full, method="pca", layers=["blocks.1", "blocks.0", "norm"])
    labels = [t.get_text() for t in fig.axes[-1].get_yticklabels()]
    assert labels == ["blocks.1", "blocks.0", "norm"]
    assert len(paths(fig.axes[0]).get_segments()) == 16 * 2


def test_umap_plot_both_draws_activations_and_gradients(full: Tracker) -> None:
    fig = plot.umap_plot(full, method="pca", grad="both")
    assert len(fig.axes) == 3
    assert "activations" in fig.axes[0].get_title()
    assert "gradients" in fig.axes[1].get_title()


def test_umap_plot_pca_draws_the_principal_components_worked_by_hand() -> None:
    # Two layers x two tokens in 3-D. Centred (mean (0.5, -2, 0)) the four points are
    # (-0.5, 2, 0), (-0.5, -2, 0), (0.5, 2, 0), (0.5, -2, 0): variance 4 along y, 0.25
    # along x, none along z. So PC 1 is the y axis and PC 2 the x axis, each signed so that
    # its largest loading is positive (SVD alone may return either sign).
    stashes = [
        stash(torch.tensor([[0.0, 0.0, 0.0], [0.0, -4.0, 0.0]]), "a"),
        stash(torch.tensor([[1.0, 0.0, 0.0], [1.0, -4.0, 0.0]]), "b"),
    ]
    ax = plot.umap_plot(stashes, method="pca", layers=["a", "b"]).axes[0]
    expected = np.array([[2.0, -0.5], [-2.0, -0.5], [2.0, 0.5], [-2.0, 0.5]])  # a, then b
    assert np.asarray(points(ax).get_offsets()) == pytest.approx(expected, abs=1e-6)
    # Each token's path runs from its point in layer a to its point in layer b.
    segments = np.array(paths(ax).get_segments())
    assert segments == pytest.approx(expected[[[0, 2], [1, 3]]], abs=1e-6)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("PC 1", "PC 2")


@pytest.mark.slow
def test_umap_plot_with_umap_learn(full: Tracker) -> None:
    pytest.importorskip("umap")
    model = tiny_model()
    tracker = track(model, include=r"blocks\.\d+$", grad=False)
    with tracker:
        model(batch(3, 10))
    fig = plot.umap_plot(tracker, method="umap", seed=1)
    assert len(points(fig.axes[0]).get_offsets()) == 2 * 30
    assert fig.axes[0].get_xlabel() == "UMAP 1"


def test_umap_plot_layers_with_different_feature_sizes_raise(full: Tracker) -> None:
    with pytest.raises(ValueError, match=r"feature sizes differ.*'blocks.0.attn.qkv': 48"):
        plot.umap_plot(full, method="pca", layers=["blocks.0", "blocks.0.attn.qkv"])


def test_umap_plot_needs_two_layers(full: Tracker) -> None:
    with pytest.raises(ValueError, match="at least 2 layers"):
        plot.umap_plot(full, method="pca", layers=["blocks.0"])


def test_umap_plot_umap_needs_enough_points(full: Tracker) -> None:
    with pytest.raises(ValueError, match="at least 5 points"):
        plot.umap_plot(full, method="umap", tokens=[0, 1])


def test_umap_plot_rejects_out_of_range_tokens(full: Tracker) -> None:
    with pytest.raises(ValueError, match=r"index 99 is out of range.*16 tokens"):
        plot.umap_plot(full, method="pca", tokens=[0, 99])


def test_umap_plot_rejects_nonfinite_values() -> None:
    stashes = [stash(torch.randn(4, 3), "0"), stash(torch.full((4, 3), math.nan), "1")]
    with pytest.raises(ValueError, match=r"\['1'\] hold NaN or inf"):
        plot.umap_plot(stashes, method="pca")


def test_umap_plot_needs_full_tensors(with_stats: Tracker) -> None:
    with pytest.raises(ValueError, match=r"'blocks.0' holds statistics.*without stats="):
        plot.umap_plot(with_stats, method="pca", layers=["blocks.0", "blocks.1"])
    with pytest.raises(ValueError, match="could not find 2 or more layers"):
        plot.umap_plot(with_stats, method="pca")


def test_umap_plot_rejects_unknown_method(full: Tracker) -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        plot.umap_plot(full, method="tsne")


# -- history -----------------------------------------------------------------------------


def test_history_draws_one_line_per_module_over_steps(hist_steps: Tracker) -> None:
    ax = plot.history(hist_steps, names=r"blocks\.\d+$").axes[0]
    line = series(ax, "blocks.1")
    assert list(line.get_xdata()) == [0, 1, 2]
    expected = [
        math.log2(find(hist_steps, "blocks.1", step=k).first_value["rms"].item()) for k in range(3)
    ]
    assert list(line.get_ydata()) == pytest.approx(expected)
    assert legend_texts(ax)[:2] == ["blocks.0", "blocks.1"]


def test_history_from_frame_matches_tracker(hist_steps: Tracker) -> None:
    pytest.importorskip("pandas")
    a = plot.history(hist_steps, names=["blocks.0"], grad=True).axes[0]
    b = plot.history(hist_steps.to_frame(), names=["blocks.0"], grad=True).axes[0]
    assert list(series(b, "blocks.0").get_ydata()) == pytest.approx(
        list(series(a, "blocks.0").get_ydata())
    )


def test_history_from_full_tensors_computes_the_statistic(full_steps: Tracker) -> None:
    ax = plot.history(full_steps, stat="abs_max", names=["<model>"]).axes[0]
    expected = [
        math.log2(find(full_steps, "", step=k).first_value.abs().max().item()) for k in range(3)
    ]
    assert list(series(ax, "<model>").get_ydata()) == pytest.approx(expected)


def test_history_draws_format_limits(hist_steps: Tracker) -> None:
    lines = limit_lines(plot.history(hist_steps, names=["blocks.0"], formats=["bf16"]).axes[0])
    assert lines["limit:bf16:max"] == pytest.approx(math.log2(FORMATS["bf16"].max))
    assert len(lines) == 3


def test_history_names_matching_nothing_raise(hist_steps: Tracker) -> None:
    with pytest.raises(
        ValueError, match=r"no forward output stashes match names='nothing'.*blocks.0"
    ):
        plot.history(hist_steps, names="nothing")


def test_history_frame_without_stat_column_raises(hist_steps: Tracker) -> None:
    pytest.importorskip("pandas")
    with pytest.raises(ValueError, match=r"stat='std' is not a column.*'rms'"):
        plot.history(hist_steps.to_frame(), stat="std")


# -- histogram_heatmap -------------------------------------------------------------------


def mesh(ax: Axes) -> QuadMesh:
    return next(c for c in ax.collections if isinstance(c, QuadMesh))


def test_histogram_heatmap_from_recorded_histograms(hist_steps: Tracker) -> None:
    ax = plot.histogram_heatmap(hist_steps, "blocks.0", grad=True).axes[0]
    counts = mesh(ax).get_array()
    recorded = find(hist_steps, "blocks.0", grad=True, step=2).first_value
    edges = recorded.edges("hist")
    assert counts.shape == (len(edges) - 1, 3)
    assert counts.filled(0)[:, 2].tolist() == recorded["hist"].tolist()
    assert ax.get_ylabel() == "log2|value|"
    # The y axis spans the bins holding values at some step, one bin either side.
    held = [i for i, row in enumerate(counts.filled(0).tolist()) if any(row)]
    below, above = max(held[0] - 1, 0), min(held[-1] + 2, len(edges) - 1)
    assert ax.get_ylim() == (edges[below], edges[above])


def test_histogram_heatmap_bins_full_tensors_per_step(full_steps: Tracker) -> None:
    ax = plot.histogram_heatmap(full_steps, "blocks.1", bins=10).axes[0]
    counts = mesh(ax).get_array().filled(0)
    assert counts.shape == (10, 3)
    for k in range(3):
        x = find(full_steps, "blocks.1", step=k).first_value
        assert counts[:, k].sum() == (x != 0).sum().item()


def test_histogram_heatmap_without_histogram_statistic_raises(with_stats: Tracker) -> None:
    with pytest.raises(ValueError, match=r"stats\.histogram\(\)"):
        plot.histogram_heatmap(with_stats, "blocks.0")


def test_histogram_heatmap_unknown_module_raises(full_steps: Tracker) -> None:
    with pytest.raises(ValueError, match=r"no stash matches name='blocks.9'"):
        plot.histogram_heatmap(full_steps, "blocks.9")


# -- no global state ---------------------------------------------------------------------


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_plots_do_not_use_pyplot(fresh_imports: list[str]) -> None:
    assert fresh_imports[1] == "['matplotlib']"


@pytest.mark.slow
def test_returned_figure_displays_in_ipython_without_a_backend() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        fig = plot.histogram(torch.randn(100))
        data, _ = shell.display_formatter.format(fig)
        assert data["image/png"][:4] == b"\x89PNG"
    finally:
        InteractiveShell.clear_instance()


def test_scale_plot_of_a_block_format_error_draws_its_floor() -> None:
    # Issue #30: range limits mean nothing for a block-format error; its floor does.
    from tensor_tracker.stats.formats import BLOCK_FORMATS

    model = tiny_model()
    t = train(model, track(model, stats=["rms", "nvfp4_error", "mxfp8_e4m3_error"]))
    ax = plot.scale_plot(t, stat="nvfp4_error").axes[0]
    floor = BLOCK_FORMATS["nvfp4"].gaussian_error
    assert limit_lines(ax) == pytest.approx(
        {"limit:nvfp4:gaussian_error": math.log2(floor), "limit:nvfp4:twice": math.log2(2 * floor)}
    )
    assert any("NVFP4 error of Gaussian data" in text for text in legend_texts(ax))
    i = [x.get_text() for x in ax.get_xticklabels()].index("blocks.0")
    expected = find(t, "blocks.0").first_value["nvfp4_error"].item()
    assert series(ax, "forward").get_ydata()[i] == pytest.approx(math.log2(expected))
    # several block formats' floors, to compare; range formats are left out
    ax = plot.scale_plot(t, stat="mxfp8_e4m3_error", formats=["fp16", "mxfp8_e4m3", "nvfp4"])
    assert {g.rsplit(":", 1)[0] for g in limit_lines(ax.axes[0])} == {
        "limit:mxfp8_e4m3",
        "limit:nvfp4",
    }
    with pytest.raises(ValueError, match="no fixed range"):
        plot.scale_plot(t, formats=["nvfp4"])


def test_histogram_figures_read_the_exponent_histogram_by_default() -> None:
    model = tiny_model()
    t = train(model, track(model, stats=["rms", "exp_hist"]), steps=2)
    fig = plot.histogram(find(t, "blocks.0", grad=True, step=1))
    assert fig.axes[0].get_xlabel() == "log2|value|"
    heat = plot.histogram_heatmap(t, "blocks.0", grad=True)
    assert mesh(heat.axes[0]).get_array().shape == (254, 2)
