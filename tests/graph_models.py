"""The models issue #13 names for the graphs, small and seeded: an MLP with in-place ReLUs
and `x += y` residuals, a ResNet-style CNN, `nn.TransformerEncoder` called with a keyword
padding mask, an LSTM; each with the arguments to call it with."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import torch
from torch import Tensor, nn


class Residual(nn.Module):
    """`relu_(linear(x)) += x`: an in-place ReLU module and an in-place residual."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.linear(x))
        h += x  # in place, in the block's own code
        return h


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions, an in-place skip, one ReLU called twice."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class LSTMTagger(nn.Module):
    """An LSTM (tuple output) over embedded token ids, a linear head on every step."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(ids))
        result: Tensor = self.head(out)
        return result


def residual_mlp() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), Residual(4), Residual(4), nn.Linear(4, 2))
    return model, (torch.randn(2, 3),), {}


def resnet() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 7, stride=2, padding=3),
        BasicBlock(8),
        BasicBlock(8),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    )
    return model, (torch.randn(2, 3, 32, 32),), {}


def transformer() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, -1] = True
    return model, (torch.randn(2, 5, 16),), {"src_key_padding_mask": mask}


def lstm() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    return LSTMTagger(), (torch.randint(0, 20, (2, 6)),), {}


MODELS = {"residual_mlp": residual_mlp, "resnet": resnet, "transformer": transformer, "lstm": lstm}
"""Builders by name, for `pytest.mark.parametrize`."""


def polyline(route: tuple[tuple[float, float], ...]) -> list[tuple[float, float]]:
    """A `Layout` route as points 1/8 of a cubic segment apart (a line as its two ends)."""
    if len(route) <= 2:
        return list(route)
    points = [route[0]]
    for k in range(1, len(route), 3):
        (ax, ay), (bx, by), (cx, cy), (dx, dy) = route[k - 1 : k + 3]
        for step in range(1, 9):
            t = step / 8
            u = 1 - t
            points.append(
                (
                    u**3 * ax + 3 * u * u * t * bx + 3 * u * t * t * cx + t**3 * dx,
                    u**3 * ay + 3 * u * u * t * by + 3 * u * t * t * cy + t**3 * dy,
                )
            )
    return points


def faults(drawn: Any, edges: list[Any], shown: Any = None) -> dict[str, int]:
    """Edge crossings (between edges with no end in common) and edges passing through a box
    other than their ends' (1 pixel in from its sides) in a `Layout` of `edges`, counting
    the edges whose indices are in `shown` (default: all)."""
    drawn_edges = [
        (e.source, e.target, polyline(drawn.routes[k]))
        for k, e in enumerate(edges)
        if drawn.routes[k] and (shown is None or k in shown)
    ]

    def side(p: Any, q: Any, r: Any) -> float:
        return float((q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0]))

    def cross(a: Any, b: Any, c: Any, d: Any) -> bool:
        return side(c, d, a) * side(c, d, b) < 0 and side(a, b, c) * side(a, b, d) < 0

    crossings = 0
    for i, (s1, t1, p1) in enumerate(drawn_edges):
        for s2, t2, p2 in drawn_edges[i + 1 :]:
            if not {s1, t1} & {s2, t2}:
                crossings += any(
                    cross(a, b, c, d) for a, b in pairwise(p1) for c, d in pairwise(p2)
                )
    over = 0
    for source, target, points in drawn_edges:
        # Each segment sampled, so that a line across a box counts even with no point in it.
        samples = [
            (a[0] + (b[0] - a[0]) * k / 8, a[1] + (b[1] - a[1]) * k / 8)
            for a, b in pairwise(points)
            for k in range(9)
        ]
        over += any(
            x + 1 < px < x + w - 1 and y + 1 < py < y + h - 1
            for node, (x, y, w, h) in drawn.boxes.items()
            if node not in (source, target)
            for px, py in samples
        )
    return {"edges": len(drawn_edges), "crossings": crossings, "over_boxes": over}


DRAWN = """
// A drawn level of the page's graph: its boxes (centre, size), its edges sampled every
// 4 pixels, and the drawing's size.
const svg = document.getElementById('graph-svg'), nodes = {};
for (const g of svg.querySelectorAll('g.node')) {
  const r = g.querySelector('rect'), [x, y, width, height] = ['x', 'y', 'width', 'height'].map((k) => +r.getAttribute(k));
  nodes[g.dataset.id] = {x: x + width / 2, y: y + height / 2, width, height};
}
const edges = [...svg.querySelectorAll('path.edge')].map((p) => {
  const n = Math.max(2, Math.ceil(p.getTotalLength() / 4)), pts = [];
  for (let k = 0; k <= n; k++) { const q = p.getPointAtLength(p.getTotalLength() * k / n); pts.push([q.x, q.y]); }
  return [p.dataset.source, p.dataset.target, pts];
});
return {nodes, edges, width: +svg.getAttribute('width'), height: +svg.getAttribute('height')};
"""


def _crosses(a: Any, b: Any, c: Any, d: Any) -> bool:
    """Whether segments ab and cd cross (touching ends do not count)."""

    def side(p: Any, q: Any, r: Any) -> float:
        return float((q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0]))

    d1, d2 = side(c, d, a), side(c, d, b)
    d3, d4 = side(a, b, c), side(a, b, d)
    return d1 * d2 < 0 and d3 * d4 < 0


def _over_box(p: Any, q: Any, box: Any) -> bool:
    """Whether segment pq passes through `box` (a node: centre, width, height)."""
    x0, x1 = box["x"] - box["width"] / 2 + 1, box["x"] + box["width"] / 2 - 1
    y0, y1 = box["y"] - box["height"] / 2 + 1, box["y"] + box["height"] / 2 - 1
    for k in range(21):
        x, y = p[0] + (q[0] - p[0]) * k / 20, p[1] + (q[1] - p[1]) * k / 20
        if x0 < x < x1 and y0 < y < y1:
            return True
    return False


def measure(drawn: dict[str, Any]) -> dict[str, float]:
    """Edge crossings, edges over node boxes and the size of a level drawn in the page
    (what `DRAWN` returns)."""
    edges = drawn["edges"]
    crossings = 0
    for i, (s1, t1, p1) in enumerate(edges):
        for s2, t2, p2 in edges[i + 1 :]:
            if {s1, t1} & {s2, t2}:
                continue
            crossings += any(_crosses(a, b, c, d) for a, b in pairwise(p1) for c, d in pairwise(p2))
    over = sum(
        any(
            _over_box(a, b, box)
            for a, b in pairwise(points)
            for node, box in drawn["nodes"].items()
            if node not in (source, target)
        )
        for source, target, points in edges
    )
    return {
        "edges": len(edges),
        "crossings": crossings,
        "over_boxes": over,
        "width": drawn["width"],
        "height": drawn["height"],
    }
