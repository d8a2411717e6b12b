"""Viewers show the controls that work for what was recorded (issue 28): histograms from
`exp_hist`, limit lines as a toggle, y axes that fit the data, informative defaults."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from tensor_tracker import Tracker, stats, track, widgets
from tests.helpers import tiny_model, train


@pytest.fixture(scope="module")
def exp_hist_steps() -> Tracker:
    """The default statistics and the exponent histogram over three training steps."""
    model = tiny_model()
    return train(model, track(model, stats=[*stats.DEFAULT, "exp_hist"]), steps=3)


def limit_lines(fig: Any) -> list[str]:
    return [
        str(line.get_gid())
        for ax in fig.axes
        for line in ax.get_lines()
        if str(line.get_gid()).startswith("limit:")
    ]


def data_span(ax: Any) -> tuple[float, float]:
    ys = [
        y
        for line in ax.get_lines()
        if not str(line.get_gid()).startswith("limit:")
        for y in line.get_ydata()
        if y == y
    ]
    return min(ys), max(ys)


def test_histogram_viewer_draws_the_exponent_histogram(exp_hist_steps: Tracker) -> None:
    v = widgets.histogram_viewer(exp_hist_steps)
    assert v.figure is not None, v.message.value
    ax = v.figure.axes[0]
    assert ax.get_xlabel() == "log2|value|"
    # 254 binades recorded; the axis shows the ones holding values, not -126..128.
    lo, hi = ax.get_xlim()
    assert -60 < lo < hi < 30
    assert v.controls["bins"].layout.display == "none"
    assert v.controls["log2"].layout.display == "none"
    v.controls["grad"].value = True
    assert v.figure is not None, v.message.value


def test_history_viewer_opens_on_one_role_across_blocks_gradients(
    with_stats_steps: Tracker,
) -> None:
    v = widgets.history_viewer(with_stats_steps)
    assert v.controls["role"].value == "attn.qkv"
    assert v.controls["modules"].value == ("blocks.0.attn.qkv", "blocks.1.attn.qkv")
    assert v.controls["grad"].value is True
    ax = v.figure.axes[0]
    lines = [line.get_ydata().tolist() for line in ax.get_lines() if line.get_gid() is None]
    assert len(lines) == 2 and lines[0] != lines[1]


def test_history_viewer_y_axis_fits_the_data_limits_a_toggle(with_stats_steps: Tracker) -> None:
    v = widgets.history_viewer(with_stats_steps)
    assert v.controls["limits"].value is False
    assert limit_lines(v.figure) == []
    ax = v.figure.axes[0]
    lo, hi = data_span(ax)
    bottom, top = ax.get_ylim()
    assert bottom <= lo and hi <= top
    assert top - bottom < 8  # the data span a few binades; the limits span -25..16
    v.controls["limits"].value = True
    assert any(g.startswith("limit:fp16") for g in limit_lines(v.figure))
    bottom, top = v.figure.axes[0].get_ylim()
    assert top - bottom > 30


def test_history_viewer_heatmap_of_the_exponent_histogram(exp_hist_steps: Tracker) -> None:
    v = widgets.history_viewer(exp_hist_steps)
    assert v.heatmap_figure is not None, v.heatmap_message.value
    assert v.controls["heatmap_module"].layout.display != "none"


def test_scale_viewer_limit_lines_are_a_toggle_on_by_default(with_stats_steps: Tracker) -> None:
    v = widgets.scale_viewer(with_stats_steps)
    assert v.controls["limits"].value is True
    assert any(g.startswith("limit:fp16") for g in limit_lines(v.figure))
    v.controls["limits"].value = False
    assert limit_lines(v.figure) == []
    for ax in v.figure.axes:
        if ax.get_lines():
            lo, hi = data_span(ax)
            bottom, top = ax.get_ylim()
            assert bottom <= lo and hi <= top and top - bottom < 30


def test_scale_viewer_keeps_every_label_inside_the_figure() -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=12,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=50,
    )
    model = transformers.BertForMaskedLM(config)
    with track(model, stats=True) as t:
        model(torch.randint(0, 50, (1, 6))).logits.sum().backward()
    v = widgets.scale_viewer(t)
    fig = v.figure
    assert fig is not None, v.message.value
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox
    cut = []
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text():
            b = text.get_window_extent(renderer)
            if b.x0 < box.x0 or b.y0 < box.y0 or b.x1 > box.x1 or b.y1 > box.y1:
                cut.append(text.get_text())
    assert cut == []


def test_heatmap_of_the_exponent_histogram_fits_the_held_bins(exp_hist_steps: Tracker) -> None:
    v = widgets.history_viewer(exp_hist_steps)
    bottom, top = v.heatmap_figure.axes[0].get_ylim()
    assert -60 < bottom < top < 30  # not the recorded -126..128
