"""plot.module_graph and plot.autograd_graph: the layered layout as a matplotlib figure that
saves as PNG and PDF; on the models issue #13 names, and bounded in size."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

import tensor_tracker
from tensor_tracker import plot
from tests import graph_models

pytestmark = pytest.mark.filterwarnings("error")  # no matplotlib warning either


def _parts(fig: Figure, prefix: str) -> list[str]:
    ax = fig.axes[0]
    artists = [*ax.patches, *ax.texts]
    return [a.get_gid()[len(prefix) :] for a in artists if (a.get_gid() or "").startswith(prefix)]


def _check_inside(fig: Figure) -> None:
    """Every label lies within the figure."""
    canvas = FigureCanvasAgg(fig)  # as PNG output measures text
    canvas.draw()
    renderer = canvas.get_renderer()
    frame = fig.bbox
    for text in fig.axes[0].texts:
        box = text.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1, text.get_text()


def _png(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def test_a_resnet_style_cnn_as_png() -> None:
    model, args, _ = graph_models.resnet()
    graph = tensor_tracker.module_graph(model, *args)
    fig = plot.module_graph(graph)
    ids = [n.id for n in graph.level()["nodes"]]
    assert _parts(fig, "node:") == ids and _parts(fig, "label:") == ids
    assert len(fig.axes[0].texts) == 8
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts[0] == "input" and texts[1] == "0 (Conv2d)" and texts[-1] == "output"
    assert len(_parts(fig, "edge:")) == len(graph.level()["edges"]) == 7
    _check_inside(fig)
    assert _png(fig).startswith(b"\x89PNG")
    # Inside a block: the skip connection bends (a curve), the chain is straight.
    fig = plot.module_graph(graph, "1#0")
    arrows = {p.get_gid(): p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)}
    curves = {gid for gid, p in arrows.items() if Path.CURVE4 in p.get_path().codes}
    assert curves == {"edge:1#0/input->1.relu#1"}
    boxes = [p for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == 8 and boxes[0].get_facecolor() != boxes[1].get_facecolor()  # grey
    _check_inside(fig)


def test_a_transformer_as_png_and_pdf() -> None:
    model, args, kwargs = graph_models.transformer()
    graph = tensor_tracker.module_graph(model, *args, **kwargs)
    fig = plot.module_graph(graph, "layers.0#0")
    level = graph.level("layers.0#0")
    assert len(_parts(fig, "node:")) == len(level["nodes"]) == 10
    texts = [t.get_text() for t in fig.axes[0].texts]
    # Each box as wide as its label on one line, as the page draws it.
    assert "self_attn (MultiheadAttention)" in texts and "norm1 (LayerNorm)" in texts
    _check_inside(fig)
    out = io.BytesIO()
    fig.savefig(out, format="pdf")
    assert out.getvalue().startswith(b"%PDF")
    ops = tensor_tracker.autograd_graph(model, *args, **kwargs)
    fig = plot.autograd_graph(ops, "layers.0.self_attn#0")
    drawn = ops.drawn("layers.0.self_attn#0")[0]
    assert len(_parts(fig, "node:")) == len(drawn) > 10
    _check_inside(fig)


@pytest.mark.parametrize("name", list(graph_models.MODELS))
def test_every_level_of_the_issue_models_as_png(name: str) -> None:
    model, args, kwargs = graph_models.MODELS[name]()
    graph = tensor_tracker.module_graph(model, *args, **kwargs)
    for parent in graph.to_dict()["levels"]:
        fig = plot.module_graph(graph, parent)
        assert len(_parts(fig, "label:")) == len(graph.children(parent))
        _check_inside(fig)
        assert _png(fig).startswith(b"\x89PNG")
    fig = plot.autograd_graph(tensor_tracker.autograd_graph(model, *args, **kwargs))
    assert _png(fig).startswith(b"\x89PNG")


def test_large_levels_stay_within_the_figure_size_limits() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(500)])
    graph = tensor_tracker.module_graph(model, torch.randn(1, 2))
    fig = plot.module_graph(graph)
    assert _parts(fig, "node:") == [n.id for n in graph.level()["nodes"]]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts[1] == "0 … 99 (Linear \u00d7100)"
    boxes = [p for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch)]
    assert boxes[1].get_linestyle() == "--"  # groups are dashed
    # A group of 100 calls in a chain: shrunk to the tallest figure, text and all.
    fig = plot.module_graph(graph, "<model>#0/group4")
    width, height = fig.get_size_inches()
    assert height == pytest.approx(plot.MAX_HEIGHT) and width < 14
    assert len(fig.axes[0].texts) == 102 and fig.axes[0].texts[0].get_fontsize() < 7.5
    _check_inside(fig)
    with pytest.raises(ValueError, match="too many"):
        plot.autograd_graph(tensor_tracker.autograd_graph(model, torch.randn(1, 2)))


def test_into_an_axes_of_ones_own_and_errors() -> None:
    model, args, _ = graph_models.residual_mlp()
    graph = tensor_tracker.module_graph(model, *args)
    fig = Figure(figsize=(8, 4))
    left, right = fig.subplots(1, 2)
    assert plot.module_graph(graph, ax=right) is fig
    assert len(right.texts) == 6 and not left.texts
    with pytest.raises(TypeError, match="module_graph returns"):
        plot.module_graph(tensor_tracker.autograd_graph(model, *args))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="autograd_graph returns"):
        plot.autograd_graph(graph)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no call"):
        plot.module_graph(graph, "nope#0")


def test_the_figure_and_the_svg_draw_one_layout() -> None:
    """Boxes and edge routes come from `level()["layout"]`, computed once: the figure's
    patches and the SVG's rects and paths sit exactly where it says (a residual's curve
    included)."""
    model, args, _ = graph_models.resnet()
    graph = tensor_tracker.module_graph(model, *args)
    level = graph.level("1#0")
    drawn = level["layout"]
    assert level["positions"] == drawn.positions
    fig = plot.module_graph(graph, "1#0")
    patches = {p.get_gid(): p for p in fig.axes[0].patches}
    svg = graph.to_svg("1#0")
    for e, route in zip(level["edges"], drawn.routes, strict=True):
        # The arrow's path: the route (its end a little short, where the head starts), then the head.
        shaft = patches[f"edge:{e.source}->{e.target}"].get_path().vertices[: len(route)]
        assert shaft[:-1].ravel().tolist() == pytest.approx(
            [v for p in route[:-1] for v in p], abs=0.1
        )
        assert shaft[-1].tolist() == pytest.approx(list(route[-1]), abs=1.0)
        (x, y), *rest = route
        d = f"M{x},{y} " + ("L" if len(rest) == 1 else "C") + " ".join(f"{a},{b}" for a, b in rest)
        assert f'd="{d}"' in svg
    assert any(len(route) > 2 for route in drawn.routes)  # the skip connection bends
    for n in level["nodes"]:
        box = patches[f"node:{n.id}"]
        x, y, width, height = drawn.boxes[n.id]
        assert (box.get_x(), box.get_y(), box.get_width(), box.get_height()) == (
            x,
            y,
            width,
            height,
        )
        assert f'<rect x="{x}" y="{y}" width="{width}" height="{height}"' in svg
    width_in, height_in = fig.get_size_inches()
    assert (width_in * 96, height_in * 96) == pytest.approx((drawn.width, drawn.height))
    assert f'width="{drawn.width}" height="{drawn.height}"' in svg
