"""The one layout of a module graph level (`_probe/_graph_layout.py`) that the SVG, the
figure and the page draw, checked without a browser: boxes as wide as their labels, long
edges running between the boxes with no crossing, edges that skip over repeated blocks in
a column right of the drawing, and the page's data carrying the layout."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

import tensor_tracker
from tensor_tracker._probe._graph_layout import (
    MARGIN,
    MAX_BOX_WIDTH,
    box_label,
    fit_label,
    skip_edges,
    text_width,
)
from tensor_tracker._probe.graph import GraphEdge, GraphNode, module_layout
from tests import graph_models


def test_boxes_are_as_wide_as_their_labels() -> None:
    model, args, kwargs = graph_models.transformer()
    level = tensor_tracker.module_graph(model, *args, **kwargs).level("layers.0#0")
    boxes = level["layout"].boxes
    for n in level["nodes"]:
        assert boxes[n.id][2] >= text_width(box_label(n)) + 18
        assert boxes[n.id][2] <= text_width(box_label(n)) + 19
    wide, narrow = (boxes["layers.0.self_attn#0"], boxes["layers.0.dropout1#0"])
    assert wide[2] > narrow[2] + 50  # "self_attn (MultiheadAttention)", "dropout1 (Dropout)"
    # Wider than the widest box: the dotted prefix goes first, then the start.
    long = "transformer.h.11.mlp.c_proj (Conv1D)"
    assert fit_label(long, 300) == long
    assert fit_label(long, 150) == "\u2026mlp.c_proj (Conv1D)"
    assert fit_label(long, 120) == "\u2026c_proj (Conv1D)"
    assert text_width(fit_label(long, 40)) <= 40
    node = GraphNode("x#0", "a" * 60, 0, "Linear")
    assert text_width(box_label(node)) <= MAX_BOX_WIDTH - 18


@pytest.mark.parametrize(
    ("model", "level"),
    [("transformer", "layers.0#0"), ("resnet", "1#0"), ("residual_mlp", "1#0"), ("lstm", None)],
)
def test_long_edges_run_between_the_boxes_without_crossing(model: str, level: str | None) -> None:
    """A residual around a transformer layer's attention and feed-forward blocks passes
    their boxes instead of running through them (it did: 2 to 4 such edges)."""
    built, args, kwargs = graph_models.MODELS[model]()
    drawn = tensor_tracker.module_graph(built, *args, **kwargs).level(level)
    counts = graph_models.faults(drawn["layout"], drawn["edges"])
    assert counts["crossings"] == 0 and counts["over_boxes"] == 0, counts


def _blocks(count: int) -> tuple[list[GraphNode], list[GraphEdge]]:
    """A GPT-2 level with a KV cache: a chain of `count` blocks, each also read by every
    later block and the output; the input's mask given to every block."""
    blocks = [
        GraphNode(f"h.{i}#0", f"h.{i}", 0, "Block", "module", children=True) for i in range(count)
    ]
    nodes = [GraphNode("in", "", 0, "", "input"), *blocks, GraphNode("out", "", 0, "", "output")]
    edges = [GraphEdge(a.id, b.id) for a, b in pairwise(nodes)]
    edges += [GraphEdge("in", b.id) for b in blocks[1:]]
    edges += [
        GraphEdge(a.id, b.id) for i, a in enumerate(blocks) for b in [*blocks, nodes[-1]][i + 2 :]
    ]
    return nodes, edges


def test_edges_that_skip_over_repeated_blocks_go_down_a_column_to_the_right() -> None:
    nodes, edges = _blocks(6)
    skipped = skip_edges(nodes, edges)
    chain = len(nodes) - 1
    assert skipped == set(range(chain, len(edges)))  # the mask's and the cache's edges
    drawn = module_layout(nodes, edges)
    assert drawn.skipped == tuple(sorted(skipped))
    # Without them, the blocks in one column, nothing crossed; with them, wider.
    centres = {drawn.boxes[n.id][0] + drawn.boxes[n.id][2] / 2 for n in nodes}
    assert len(centres) == 1
    shown = set(range(chain))
    assert graph_models.faults(drawn, edges, shown) == {
        "edges": chain,
        "crossings": 0,
        "over_boxes": 0,
    }
    # The columns either side: the drawing without them is narrow_width wide from skip_left.
    left = min(x for x, _, _, _ in drawn.boxes.values())
    right = max(x + w for x, _, w, _ in drawn.boxes.values())
    assert (left, right) == (
        drawn.skip_left + MARGIN,
        drawn.skip_left + drawn.narrow_width - MARGIN,
    )
    assert drawn.narrow_width < drawn.width and drawn.skip_left > 0
    for k in skipped:
        route = drawn.routes[k]
        source, target = (drawn.boxes[edges[k].source], drawn.boxes[edges[k].target])
        # From a side of the source, down a lane beside every box, into that side of the target.
        side = 0.0 if route[2][0] < route[0][0] else 1.0
        assert route[0] == (source[0] + side * source[2], source[1] + source[3] / 2)
        assert route[-1] == (target[0] + side * target[2], target[1] + target[3] / 2)
        lane = max(x for x, _ in route) if side else min(x for x, _ in route)
        assert right < lane <= drawn.width - MARGIN if side else MARGIN <= lane < left
    # The edges of one source share a lane, and each side takes every other source.
    lanes = {edges[k].source: {x for x, _ in drawn.routes[k][4:-4]} for k in skipped}
    assert all(len(xs) == 1 for xs in lanes.values())
    sides = [xs.pop() > right for xs in lanes.values()]
    assert 0 < sum(sides) < len(sides)
    assert graph_models.faults(drawn, edges)["over_boxes"] == 0
    # A residual inside one block skips no repeated block.
    single = [nodes[0], nodes[1], nodes[-1]]
    assert (
        skip_edges(
            single, [GraphEdge("in", "h.0#0"), GraphEdge("h.0#0", "out"), GraphEdge("in", "out")]
        )
        == set()
    )


def test_the_page_data_carries_the_layout_the_svg_draws() -> None:
    model, args, _ = graph_models.resnet()
    graph = tensor_tracker.module_graph(model, *args)
    data = json.loads(graph.to_json())
    for parent in ("<model>#0", "1#0"):
        drawn = graph.level(parent)["layout"]
        sent = data["levels"][parent]["layout"]
        assert sent["boxes"] == {k: list(v) for k, v in drawn.boxes.items()}
        assert sent["routes"] == [[list(p) for p in r] for r in drawn.routes]
        assert (sent["width"], sent["height"]) == (drawn.width, drawn.height)
        svg = graph.to_svg(parent)
        for x, y, w, h in drawn.boxes.values():
            assert f'<rect x="{x}" y="{y}" width="{w}" height="{h}"' in svg
