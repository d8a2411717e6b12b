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
