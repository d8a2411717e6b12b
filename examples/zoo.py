"""Real-size models built in code (nothing to download), for figures and viewers at scale:
a 12-layer BERT from a config (random weights), a ResNet-18-like CNN and a 3-layer
`nn.TransformerEncoder`. The tests, the README figures and the benchmarks use them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from tensor_tracker import Tracker


def bert(layers: int = 12) -> nn.Module:
    """A BERT with BERT-base's module structure (12 layers, ~220 modules), but small widths."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model: nn.Module = BertModel(config)  # Any to mypy: pyproject.toml skips transformers
    return model


def bert_run(stats: Any, steps: int = 3) -> Tracker:
    """`bert()` trained on a fixed batch of 2 x 12 token ids for `steps` steps under
    `track(model, stats=stats)`, one `t.step()` per step; returns the tracker."""
    import tensor_tracker

    model = bert()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, stats=stats) as t:
        for _ in range(steps):
            model(ids).last_hidden_state.pow(2).mean().backward()
            t.step()
    return t


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut (1x1 when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        shortcut: torch.Tensor = x if self.downsample is None else self.downsample(x)
        out: torch.Tensor = self.relu(y + shortcut)
        return out


class ResNet18(nn.Module):
    """ResNet-18's layout (4 stages of 2 basic blocks, 68 modules) with `width` channels first."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for i in range(4):
            cout = width * 2**i
            stage = nn.Sequential(
                BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)
            )
            self.add_module(f"layer{i + 1}", stage)
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        logits: torch.Tensor = self.fc(self.avgpool(x).flatten(1))
        return logits


def encoder() -> nn.TransformerEncoder:
    """A 3-layer `nn.TransformerEncoder` (28 modules), batch first."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    return nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
