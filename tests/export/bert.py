"""A 12-layer BERT-size run for the page tests: the model the issue-28 review opened the pages
on (12 layers, 218 recorded modules, 30 steps, a logged loss and a note), with the hidden
size reduced so that it trains in seconds on a CPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import tensor_tracker
from tensor_tracker import stats, track

STEPS = 30
# Every built-in statistic a user may add to the defaults, fractions and counts among them,
# and a histogram: the page must offer each one.
SPEC = [
    *stats.DEFAULT,
    "abs_mean",
    "nonfinite",
    "zero_frac",
    "fp16_overflow",
    "fp16_underflow",
    "bf16_underflow",
    stats.histogram(bins=48),
]


def bert_model(layers: int = 12) -> tuple[torch.nn.Module, Any]:
    """A `BertModel` of `layers` layers (hidden size 32), and a batch of token ids."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = transformers.BertModel(config)
    return model, torch.randint(0, 512, (4, 16))


def bert_run(
    spec: Any = SPEC, layers: int = 12
) -> tuple[tensor_tracker.Tracker, tensor_tracker.ModuleGraph]:
    """30 Adam steps of the BERT with `spec` recorded (outputs and parameters), its loss
    logged every step and a note at step 12; and its module graph."""
    model, ids = bert_model(layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with track(model, stats=spec, capture=("outputs", "params")) as t:
        for step in range(STEPS):
            hidden = model(ids).last_hidden_state
            loss = (hidden[:, 0] - 1.0).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            t.log("loss", loss)
            if step == 12:
                t.note("learning rate lowered")
            t.step()
    return t, tensor_tracker.module_graph(model, ids)
