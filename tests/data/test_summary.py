"""`summary`: per-call facts of one pass, parameter totals with shared weights, nested
times, NaN flags, errors from the model, odd outputs, and the renderings."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import summary, track
from tests.helpers import hook_count


class Tied(nn.Module):
    """An embedding and an output head sharing one weight, and a block called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.block = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens: Tensor) -> Tensor:
        h = self.embed(tokens)
        h = self.block(self.block(h))
        return self.head(h)


def test_parameter_totals_count_shared_weights_once() -> None:
    torch.manual_seed(0)
    model = Tied()
    s = summary(model, torch.tensor([[1, 2, 3]]))
    embedding, linear = 10 * 6, 6 * 6 + 6
    assert s.total_params == embedding + linear  # the head adds no parameter
    root = s.calls[0]
    assert (root.name, root.params_total, root.params) == ("", embedding + linear, 0)
    by_name = {(c.name, c.call): c for c in s}
    assert by_name[("head", 0)].params == embedding  # its own (shared) weight
    assert by_name[("block", 0)].params_total == linear == by_name[("block", 1)].params_total
    assert by_name[("block.0", 1)].depth == 2 and by_name[("block.0", 1)].parent != -1
    children = s.to_dict()["model"]["children"]
    assert list(children) == ["embed", "block", "block#1", "head"]
    assert list(children["block#1"]["children"]) == ["0", "1"]
    # Parameter and gradient bytes (float32), once the backward pass wrote the gradients.
    assert root.param_bytes == 4 * (embedding + linear) and root.grad_bytes == root.param_bytes
    assert by_name[("embed", 0)].input_dtypes == ["int64"]


def test_times_nest_and_self_times_add_up() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU()), nn.Sequential(nn.Linear(64, 8), nn.Tanh())
    )
    s = summary(model, torch.randn(16, 32))
    calls = s.calls
    for i, c in enumerate(calls):
        kids = [k for k in calls if k.parent == i]
        assert c.forward_ms >= sum(k.forward_ms for k in kids) - 1e-9
        assert c.backward_ms >= sum(k.backward_ms for k in kids)
        assert c.self_forward_ms >= -1e-9 and c.self_backward_ms >= 0
    assert sum(c.self_forward_ms for c in calls) == pytest.approx(calls[0].forward_ms)
    assert calls[0].forward_ms <= s.forward_ms + 1e-9
    assert 0 < calls[0].backward_ms <= s.backward_ms + 0.05
    assert all(c.backward_ms == c.backward_ms for c in calls)  # every call has one


def test_shapes_bytes_and_nonfinite_flags() -> None:
    class Bad(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x / torch.zeros_like(x)  # inf and NaN

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), Bad())
    s = summary(model, torch.randn(2, 4))
    linear, bad = s.calls[1], s.calls[2]
    assert linear.input_shapes == [(2, 4)] and linear.output_shapes == [(2, 3)]
    assert linear.output_bytes == 2 * 3 * 4 and linear.grad_output_shapes == [(2, 3)]
    assert not linear.output_nonfinite and bad.output_nonfinite
    assert linear.grad_output_nonfinite  # the gradient through x / 0 is not finite
    assert "NaN/inf" in str(s)


def test_an_error_in_forward_is_the_users_with_the_calls_so_far() -> None:
    class Boom(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise ValueError("boom")

    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with pytest.raises(ValueError, match="boom") as info:
        summary(model, torch.randn(1, 4))
    assert [c.name for c in info.value.summary_calls] == ["", "0", "1"]  # type: ignore[attr-defined]
    assert hook_count(model) == 0


def test_odd_outputs_and_no_backward() -> None:
    class Odd(nn.Module):
        def forward(self, x: Tensor) -> dict[str, object]:
            return {"empty": x[:0], "none": None, "n": 3}

    model = nn.Sequential(Odd())
    s = summary(model, torch.randn(2, 3), backward=False)
    odd = s.calls[1]
    assert odd.output_shapes == [(0, 3)] and odd.output_bytes == 0
    assert not odd.output_nonfinite and math.isnan(odd.backward_ms)
    assert math.isnan(s.backward_ms)
    with pytest.raises(TypeError, match="model"):
        summary("not a model")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="loss_fn="):
        summary(nn.Linear(2, 2), torch.ones(2), loss_fn=lambda out: 3.0)  # type: ignore[arg-type,return-value]


def test_renderings() -> None:
    torch.manual_seed(0)
    model = Tied()
    s = summary(model, torch.tensor([[1, 2]]), loss_fn=lambda out: out.square().mean())
    text = s.table(depth=1)
    assert "block #1" in text and "0 (Linear)" not in text  # depth 2 rows left out
    assert "Total params: 102" in text and str(s).count("(Linear)") == 3
    assert len(s.to_frame()) == len(s) == 9  # the block and its two children twice
    assert json.loads(s.to_json())["model"]["info"]["params_total"] == 102
    page = s._repr_html_()
    assert page.count("<tr>") == len(s) + 1 and "Total params: 102" in page
    with pytest.raises(ValueError, match="depth"):
        s.table(depth=-1)


# -- Tracker.summary(): the same facts from a recording, without a second pass ------------

_SAME = [
    "name",
    "type",
    "depth",
    "call",
    "parent",
    "input_shapes",
    "input_dtypes",
    "output_shapes",
    "output_dtypes",
    "grad_output_shapes",
    "grad_input_shapes",
    "params",
    "params_total",
    "trainable",
    "param_bytes",
    "grad_bytes",
    "input_bytes",
    "output_bytes",
    "output_nonfinite",
    "grad_output_nonfinite",
]


def test_a_tracker_summary_matches_a_summary_pass() -> None:
    torch.manual_seed(0)
    model = Tied()
    tokens = torch.tensor([[1, 2, 3]])
    with track(model, capture=("inputs", "outputs")) as t:
        model(tokens).sum().backward()
    recorded = t.summary()
    model.zero_grad()
    ran = summary(model, tokens, loss_fn=lambda out: out.sum())
    assert len(recorded) == len(ran) == 9  # the block and its children twice
    for mine, theirs in zip(recorded, ran, strict=True):
        for field in _SAME:
            assert getattr(mine, field) == getattr(theirs, field), (mine.name, field)
        assert math.isnan(mine.forward_ms) and math.isnan(mine.backward_ms)
    assert recorded.total_params == ran.total_params == 10 * 6 + 6 * 6 + 6
    assert "Times: not measured" in str(recorded)


def test_a_tracker_summary_of_statistics_picks_a_step_and_flags_nan() -> None:
    class Log(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return torch.log(x)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), Log())
    with torch.no_grad():
        model[0].bias.fill_(100.0)
    with track(model, stats=True, on_nonfinite="warn") as t, pytest.warns(RuntimeWarning):
        model(torch.ones(2, 4)).sum().backward()
        t.step()
        with torch.no_grad():
            model[0].bias.fill_(-100.0)  # log of negative numbers from step 1 on
        model(torch.ones(2, 4)).sum().backward()
    first, second = t.summary(step=0), t.summary()
    assert [c.name for c in second] == ["", "0", "1"]
    assert [c.output_nonfinite for c in second] == [True, False, True]
    assert not any(c.output_nonfinite for c in first)
    assert second.calls[1].output_shapes == [] and second.calls[1].params == 15  # statistics
    t.unregister()
    assert t.summary().total_params == 15  # the modules are still known
    with pytest.raises(ValueError, match="step=5 was not recorded"):
        t.summary(step=5)
