"""What every `>>>` example in the package's docstrings can use (`pytest --doctest-modules`).

The examples are written for a notebook user who has a model and a batch: here `model` is a
small `nn.Sequential`, `x` a batch for it, `tracker` a tracker that recorded one forward and
backward pass of it, `event` one hook `Event`, and `loader`, `opt`, `loss_fn` a tiny
training set-up; `lm` is a small transformer (blocks `blocks.0`, `blocks.1`) and `tokens`
a batch of token ids for it.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
import tensor_tracker._core.tracker
from examples.tiny_transformer import TinyTransformer


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace: dict[str, Any]) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(8, 16)
    with tensor_tracker.track(model) as tracker:
        model(x).sum().backward()
    model.zero_grad()
    event = tensor_tracker.Event("0", nn.Linear, False, torch.ones(2), (), {})
    loader = [torch.randn(8, 16) for _ in range(3)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lm = TinyTransformer(vocab=16, d_model=16, n_layers=2)
    tokens = torch.randint(0, 16, (2, 16))
    doctest_namespace.update(
        plot=tensor_tracker.plot,
        widgets=tensor_tracker.widgets,
        stats=tensor_tracker.stats,
        lm=lm,
        tokens=tokens,
        torch=torch,
        nn=nn,
        tensor_tracker=tensor_tracker,
        track=tensor_tracker.track,
        Tracker=tensor_tracker.Tracker,
        model=model,
        x=x,
        tracker=tracker,
        t=tracker,
        event=event,
        loader=loader,
        opt=opt,
        loss_fn=lambda out: out.pow(2).mean(),
        Recorder=tensor_tracker._core.tracker.Recorder,
        first_nonfinite=tensor_tracker.first_nonfinite,
        summary=tensor_tracker.summary,
        **{name: getattr(tensor_tracker.stats, name) for name in tensor_tracker.stats.__all__},
    )
