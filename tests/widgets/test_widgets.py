"""tensor_tracker.widgets: viewers driven from Python, headless."""

from __future__ import annotations

import math
from typing import Any
from xml.etree import ElementTree

import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

import ipywidgets

from tensor_tracker import Tracker, plot, track, widgets
from tensor_tracker.stats import histogram as stats_histogram
from tensor_tracker.widgets._base import Panel
from tests.helpers import stash, tiny_model

SVG = "http://www.w3.org/2000/svg"


def title(viewer: Any, figure: str = "figure") -> str:
    fig = getattr(viewer, figure)
    assert fig is not None, viewer.message.value
    return str(fig.axes[0].get_title())


def shows_message(viewer: Any, text: str) -> bool:
    return viewer.figure is None and text in viewer.message.value


# -- every viewer --------------------------------------------------------------------------


def test_a_viewer_of_a_run_with_problems_says_so_first() -> None:
    class Amplifier(torch.nn.Module):  # outputs past float16's range
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1e6

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Amplifier(), torch.nn.LayerNorm(8))
    with track(model, stats=["rms", "abs_max", stats_histogram()]) as t:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            t.step()
    for make in (widgets.scale_viewer, widgets.histogram_viewer, widgets.history_viewer):
        viewer = make(t)
        assert viewer.children[0] is viewer.verdict, make.__name__
        assert "1, steps 0-1: values of 1 module(s) exceed the largest float16" in (
            viewer.verdict.value
        )


def test_a_viewer_of_a_run_without_problems_has_no_verdict(full: Tracker) -> None:
    viewer = widgets.scale_viewer(full)
    assert viewer.verdict is None and viewer.children[0] is not None


def test_rows_of_controls_wrap_in_a_narrow_output_area(full: Tracker) -> None:
    # At 390 px wide JupyterLab cut the histogram viewer's last controls off (`call`).
    for make in (widgets.histogram_viewer, widgets.scale_viewer, widgets.history_viewer):
        viewer = make(full)
        rows = [child for child in viewer.children if isinstance(child, ipywidgets.HBox)]
        assert rows, make.__name__
        assert all(row.layout.flex_flow == "row wrap" for row in rows), make.__name__


def test_viewers_stay_readable_on_a_phone_and_in_the_dark_theme(full: Tracker) -> None:
    # At 390 px JupyterLab showed scale_viewer's 960 px figure 270 px wide, its text 3 px
    # high: it now narrows to 70% at most and scrolls sideways in its own box beyond.
    v = widgets.scale_viewer(full)
    width = v.figure.get_size_inches()[0] * 100
    assert v.image.layout.min_width == f"{round(width * 0.7)}px"
    frame = next(b for b in v.children[-1].children if v.image in getattr(b, "children", ()))
    assert (frame.layout.width, frame.layout.overflow) == ("100%", "auto hidden")
    controls = [c for row in v.children[:-1] for c in row.children]
    assert controls and all(c.layout.max_width == "100%" for c in controls)
    # Colours come from JupyterLab's theme (a fixed dark red is unreadable on #111).
    panel = Panel(ipywidgets)
    panel.show(lambda: plot.histogram(torch.tensor([math.nan])))
    assert panel.message.value.startswith('<span style="color:var(--jp-error-color1, #b00020)">')


# -- histogram_viewer --------------------------------------------------------------------


def test_histogram_viewer_is_a_widget_showing_the_first_module(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    assert isinstance(v, ipywidgets.Widget)
    assert title(v) == "embed (fwd, step 0, call 0)"
    assert v.message.value == ""
    # The image is the figure as SVG, at the figure's size (72 pt and, shown, 100 px per
    # inch), its text kept as text: what the notebook user sees.
    svg = ElementTree.fromstring(bytes(v.image.value))
    width, height = v.figure.get_size_inches()
    assert v.image.format == "svg+xml" and svg.tag == f"{{{SVG}}}svg"
    assert (svg.get("width"), svg.get("height")) == (f"{width * 72:g}pt", f"{height * 72:g}pt")
    assert v.image.layout.max_width == f"{round(width * 100)}px"
    embed = next(s.first_value for s in full if s.name == "embed" and not s.grad)
    texts = {"".join(t.itertext()) for t in svg.iter(f"{{{SVG}}}text")}
    assert {"value", "count", f"embed (fwd, step 0, call 0): {embed.numel()} values"} <= texts
    # The bars count the embedding's values, bin by bin.
    counts, edges = v.figure.axes[0].patches[0].get_data()[:2]
    expected = torch.histogram(embed.double(), torch.as_tensor(edges, dtype=torch.float64))
    assert counts.tolist() == expected.hist.tolist() and counts.sum() == embed.numel()


def test_histogram_viewer_offers_a_module_returning_a_dict() -> None:
    class DictOut(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"hidden": x * 2}

    model = torch.nn.Sequential(DictOut())
    with track(model) as tracker:
        model(torch.ones(3))
    v = widgets.histogram_viewer(tracker)
    assert "0" in [value for _, value in v.controls["module"].options]
    v.controls["module"].value = "0"
    assert title(v) == "0 (fwd, step 0, call 0)"


def test_histogram_viewer_filter_narrows_modules_and_redraws(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["filter"].value = r"mlp\.down"
    assert [value for _, value in v.controls["module"].options] == [
        "blocks.0.mlp.down",
        "blocks.1.mlp.down",
    ]
    assert title(v) == "blocks.0.mlp.down (fwd, step 0, call 0)"


def test_histogram_viewer_filter_prefers_exact_name(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["filter"].value = "blocks.1"
    assert v.controls["module"].value == "blocks.1"
    assert title(v).startswith("blocks.1 (fwd")


def test_histogram_viewer_filter_matching_nothing_shows_message(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["filter"].value = "no-such-module"
    assert shows_message(v, "No module matches the filter")
    v.controls["filter"].value = ""
    assert title(v) == "embed (fwd, step 0, call 0)"


def test_histogram_viewer_module_dropdown_redraws(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["module"].value = ""
    assert title(v) == "<model> (fwd, step 0, call 0)"


def test_histogram_viewer_gradient_toggle(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["module"].value = "blocks.0"
    v.controls["grad"].value = True
    assert title(v) == "blocks.0 (grad, step 0, call 0)"


def test_histogram_viewer_log2_toggle_changes_axis(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    assert v.figure.axes[0].get_xlabel() == "value"
    v.controls["log2"].value = True
    assert v.figure.axes[0].get_xlabel() == "log2|value|"


def test_histogram_viewer_bins_choices(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    assert list(v.controls["bins"].options) == [8, 16, 32, 64, 128, 256]
    v.controls["bins"].value = 16
    assert len(v.figure.axes[0].patches[0].get_data().values) == 16


def test_histogram_viewer_keeps_the_chosen_module_across_filters(full: Tracker) -> None:
    v = widgets.histogram_viewer(full)
    v.controls["filter"].value = "blocks.1"
    v.controls["module"].value = "blocks.1.attn.out"
    v.controls["filter"].value = "no such module"
    assert v.controls["module"].value is None and v.figure is None
    v.controls["filter"].value = "mlp.up"  # hides the chosen module
    v.controls["filter"].value = ""
    assert v.controls["module"].value == "blocks.1.attn.out"
    assert title(v).startswith("blocks.1.attn.out")


def test_histogram_viewer_step_selector(full_steps: Tracker) -> None:
    v = widgets.histogram_viewer(full_steps)
    assert list(v.controls["step"].options) == [0, 1, 2]
    v.controls["step"].value = 2
    assert title(v) == "embed (fwd, step 2, call 0)"


def test_histogram_viewer_without_gradients_says_how_to_record_them() -> None:
    model = tiny_model()
    tracker = track(model, grad=False)
    with tracker:
        model(torch.zeros(1, 4, dtype=torch.long))
    v = widgets.histogram_viewer(tracker)
    v.controls["grad"].value = True
    assert shows_message(v, "grad=True")


def test_histogram_viewer_empty_tracker_shows_message() -> None:
    v = widgets.histogram_viewer(Tracker())
    assert v.figure is None
    assert "holds no stashes" in v.message.value
    assert v.controls == {}


def test_histogram_viewer_nan_only_tensor_shows_message() -> None:
    v = widgets.histogram_viewer([stash(torch.tensor([math.nan, math.inf]))])
    assert shows_message(v, "no finite values")


def test_histogram_viewer_integer_and_single_element_tensors() -> None:
    v = widgets.histogram_viewer(
        [stash(torch.arange(6), "ints"), stash(torch.tensor([2.5]), "one")]
    )
    assert sum(v.figure.axes[0].patches[0].get_data().values) == 6
    v.controls["module"].value = "one"
    counts = v.figure.axes[0].patches[0].get_data().values
    assert sum(counts) == 1 and sum(c > 0 for c in counts) == 1


def test_histogram_viewer_recorded_histograms_fix_bins(hist_steps: Tracker) -> None:
    v = widgets.histogram_viewer(hist_steps)
    v.controls["module"].value = "blocks.0"
    assert v.controls["bins"].layout.display == v.controls["log2"].layout.display == "none"
    assert v.figure.axes[0].get_xlabel() == "log2|value|"


def test_histogram_viewer_stats_without_histogram_shows_message(with_stats_steps: Tracker) -> None:
    v = widgets.histogram_viewer(with_stats_steps)
    assert shows_message(v, "exp_hist")
    assert "b00020" not in v.message.value  # said up front, not as an error
    assert v.controls == {}  # no control that could only lead to the message


# -- scale_viewer ------------------------------------------------------------------------


def test_scale_viewer_statistic_dropdown_redraws(with_stats_steps: Tracker) -> None:
    v = widgets.scale_viewer(with_stats_steps)
    assert list(v.controls["stat"].options) == [
        "mean",
        "std",
        "rms",
        "abs_max",
        "min",
        "max",
        "numel",
    ]
    assert v.figure.axes[0].get_ylabel() == "log2(rms)"
    v.controls["stat"].value = "abs_max"
    assert v.figure.axes[0].get_ylabel() == "log2(abs_max)"


def test_scale_viewer_step_dropdown_redraws(with_stats_steps: Tracker) -> None:
    v = widgets.scale_viewer(with_stats_steps)
    assert "step 1" in title(v)
    v.controls["step"].value = 0
    assert "step 0" in title(v)


def test_scale_viewer_offers_builtin_statistics_for_tensors(full: Tracker) -> None:
    v = widgets.scale_viewer(full)
    assert "fp16_overflow" in v.controls["stat"].options
    v.controls["stat"].value = "std"
    assert v.figure.axes[0].get_ylabel() == "log2(std)"


def test_scale_viewer_all_zero_statistic_shows_message(full: Tracker) -> None:
    v = widgets.scale_viewer(full)
    v.controls["stat"].value = "fp16_overflow"
    assert shows_message(v, "zero, NaN or infinite")


def test_scale_viewer_empty_tracker_shows_message() -> None:
    v = widgets.scale_viewer([])
    assert v.figure is None and "holds no stashes" in v.message.value


# -- umap_viewer -------------------------------------------------------------------------


def test_umap_viewer_defaults_to_pca_of_numbered_layers(full: Tracker) -> None:
    v = widgets.umap_viewer(full)
    assert v.controls["method"].value == "pca"
    assert v.controls["layers"].value == ("blocks.0", "blocks.1")
    assert title(v) == "PC of activations: 16 tokens x 2 layers (step 0)"


def test_umap_viewer_tokens_slider_redraws(full: Tracker) -> None:
    v = widgets.umap_viewer(full)
    v.controls["tokens"].value = (2, 6)
    assert title(v) == "PC of activations: 5 tokens x 2 layers (step 0)"


def test_umap_viewer_layers_and_grad(full: Tracker) -> None:
    v = widgets.umap_viewer(full)
    v.controls["layers"].value = ("embed", "blocks.0", "blocks.1")
    assert "3 layers" in title(v)
    v.controls["grad"].value = "both"
    assert len(v.figure.axes) == 3


def test_umap_viewer_one_layer_shows_message(full: Tracker) -> None:
    v = widgets.umap_viewer(full)
    v.controls["layers"].value = ("blocks.0",)
    assert shows_message(v, "at least 2 layers")


def test_umap_viewer_offers_only_layers_of_one_shape(full: Tracker) -> None:
    v = widgets.umap_viewer(full)
    offered = [name for _, name in v.controls["layers"].options]
    assert "blocks.0" in offered and "blocks.0.mlp.up" not in offered
    assert v.controls["layers"].rows == min(len(offered), 16)
    assert "2 selected: blocks.0, blocks.1" in v.selection.value
    shapes = [shape for _, shape in v.controls["shape"].options]
    assert v.controls["shape"].layout.display != "none" and len(shapes) >= 2
    wide = next(shape for shape in shapes if shape[1] == 64)  # the MLP's hidden size
    v.controls["shape"].value = wide
    offered = [name for _, name in v.controls["layers"].options]
    assert "blocks.0.mlp.up" in offered and "blocks.0" not in offered
    assert v.figure is not None, v.message.value
    assert f"{len(v.controls['layers'].value)} layers" in title(v)


def test_umap_viewer_needs_full_tensors(with_stats_steps: Tracker) -> None:
    v = widgets.umap_viewer(with_stats_steps)
    assert v.figure is None and "track without stats=" in v.message.value


# -- history_viewer ----------------------------------------------------------------------


def test_history_viewer_stat_and_modules_redraw(hist_steps: Tracker) -> None:
    v = widgets.history_viewer(hist_steps)
    ax = v.figure.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()][:2]
    assert legend == ["blocks.0.attn.qkv", "blocks.1.attn.qkv"]
    v.controls["stat"].value = "abs_max"
    assert v.figure.axes[0].get_ylabel() == "log2(abs_max)"
    v.controls["modules"].value = ("embed",)
    assert v.figure.axes[0].get_legend().get_texts()[0].get_text() == "embed"


def test_history_viewer_heatmap_module_redraws(hist_steps: Tracker) -> None:
    v = widgets.history_viewer(hist_steps)
    assert title(v, "heatmap_figure").startswith("blocks.0.attn.qkv (grad)")
    v.controls["grad"].value = False
    v.controls["heatmap_module"].value = "norm"
    assert title(v, "heatmap_figure").startswith("norm (fwd)")


def test_history_viewer_grad_toggle_redraws_both(full_steps: Tracker) -> None:
    v = widgets.history_viewer(full_steps)
    v.controls["grad"].value = False
    assert "gradients" not in title(v)
    assert title(v, "heatmap_figure").startswith("blocks.0.attn.qkv (fwd)")
    v.controls["grad"].value = True
    assert "gradients" in title(v)
    assert title(v, "heatmap_figure").startswith("blocks.0.attn.qkv (grad)")


def test_history_viewer_without_histograms_explains_heatmap(with_stats_steps: Tracker) -> None:
    v = widgets.history_viewer(with_stats_steps)
    assert v.figure is not None
    assert v.heatmap_figure is None
    note = v.heatmap_message.value
    assert "heatmap" in note and "exp_hist" in note
    assert "b00020" not in note  # said up front, not as an error
    assert v.controls["heatmap_module"].layout.display == "none"


def test_history_viewer_no_module_selected_shows_message(hist_steps: Tracker) -> None:
    v = widgets.history_viewer(hist_steps)
    v.controls["modules"].value = ()
    assert shows_message(v, "Select one or more modules")


def test_history_viewer_empty_tracker_shows_message() -> None:
    v = widgets.history_viewer(Tracker())
    assert v.figure is None and v.heatmap_figure is None
    assert "holds no stashes" in v.message.value


def test_histogram_viewer_offers_what_the_module_has_in_that_direction() -> None:
    # The root returns a dict: its forward value shows the dict's first tensor (as the
    # frame's statistics do), and its input is recorded too; the input has no gradient.
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> dict[str, object]:
            return {"y": self.linear(x), "note": "not a tensor"}

    from tensor_tracker.stats import histogram

    model = Model()
    with track(model, stats=["rms", histogram()], capture=("outputs", "inputs")) as t:
        model(torch.randn(2, 3))["y"].sum().backward()
    v = widgets.histogram_viewer(t)
    v.controls["module"].value = ""
    assert [value for _, value in v.controls["what"].options] == [("input", "x"), ("output", "")]
    assert v.figure is not None, v.message.value
    v.controls["grad"].value = True
    assert [value for _, value in v.controls["what"].options] == [("output", "")]
    assert v.figure is not None, v.message.value
