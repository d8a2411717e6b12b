"""`summary`: per-call facts of one pass, parameter totals with shared weights, nested
times, NaN flags, errors from the model, odd outputs, and the renderings."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import summary, track
from tensor_tracker._probe.summary import _measure
from tensor_tracker._probe.timeline import CudaMemory, EventClock
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


class _Pooler(nn.Module):
    """Three outputs: `h`, `pooled` made from `h` (as BertModel's pooler_output, so its
    gradient arrives first in backward) and one the loss leaves out."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.side = nn.Linear(5, 2)

    def forward(self, x: Tensor, y: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h = self.lin(x)
        pooled = (h[:, :2] + self.side(y)).tanh()
        return h, pooled, w * 2.0


class _PooledHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _Pooler()
        self.head = nn.Linear(2, 1)

    def forward(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        _, pooled, _ = self.body(x, y, w)
        return self.head(pooled)


def test_gradient_shapes_line_up_with_the_outputs_and_inputs() -> None:
    torch.manual_seed(0)
    model = _PooledHead()
    inputs = [torch.randn(3, 4), torch.randn(3, 5), torch.randn(7)]
    inputs = [t.requires_grad_() for t in inputs]
    ran = summary(model, *inputs, loss_fn=lambda out: out.sum())
    model.zero_grad()
    with track(model, capture=("inputs", "outputs")) as t:
        model(*inputs).sum().backward()
    for s in (ran, t.summary()):
        body = next(c for c in s if c.name == "body")
        assert body.output_shapes == [(3, 6), (3, 2), (7,)]
        # One entry per output in output order, although pooled's gradient came first; none
        # reached w * 2.
        assert body.grad_output_shapes == [(3, 6), (3, 2), None]
        assert body.input_shapes == [(3, 4), (3, 5), (7,)]
        assert body.grad_input_shapes == [(3, 4), (3, 5), None]  # y's arrived before x's
        info = json.loads(s.to_json())["model"]["children"]["body"]["info"]
        assert info["grad_output_shapes"] == [[3, 6], [3, 2], None]
    no_backward = summary(model, *inputs, backward=False)
    assert all(c.grad_output_shapes == [] == c.grad_input_shapes for c in no_backward)


def _reject(constant: str) -> None:
    raise ValueError(f"not JSON: {constant}")


def test_to_json_writes_null_for_what_was_not_measured() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with track(model, stats=True) as t:
        model(torch.randn(2, 4)).sum().backward()
    recorded = json.loads(t.summary().to_json(), parse_constant=_reject)["model"]
    assert recorded["info"]["forward_ms"] is None and recorded["info"]["backward_ms"] is None
    assert recorded["children"]["0"]["info"]["self_forward_ms"] is None
    ran = summary(model, torch.randn(2, 4), backward=False)
    text = ran.to_json(indent=2)
    assert "NaN" not in text
    info = json.loads(text, parse_constant=_reject)["model"]["info"]
    assert info["backward_ms"] is None and info["forward_ms"] == ran.calls[0].forward_ms


# -- the GPU's way of measuring, driven by stand-ins on the CPU ----------------------------


class _FakeDevice:
    """A device timeline: module code advances it; each of the summary's `enter()` events
    is followed by 1 ms of its own work (what `EventClock` must leave out)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.records = 0
        self.allocated = 0
        self.peak = 0

    def event(self) -> _FakeEvent:
        return _FakeEvent(self)

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def read(self) -> tuple[int, int]:
        now, peak = self.allocated, self.peak
        self.peak = self.allocated  # what resetting the allocator's peak counter does
        return now, peak


class _FakeEvent:
    def __init__(self, device: _FakeDevice) -> None:
        self.device = device
        self.at = math.nan

    def record(self) -> None:
        device = self.device
        self.at = device.now
        device.records += 1
        if device.records % 2:  # an enter(): the summary's own work follows
            device.now += 1.0

    def elapsed_time(self, later: _FakeEvent) -> float:
        return later.at - self.at


class _Costly(torch.autograd.Function):
    """Identity whose forward and backward take `forward` and `backward` ms of device time."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, device: _FakeDevice, forward: float, backward: float
    ) -> Tensor:
        device.now += forward
        ctx.device, ctx.backward = device, backward
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        ctx.device.now += ctx.backward
        return grad, None, None, None


class _Work(nn.Module):
    """Takes `forward`/`backward` ms, allocates `keep` bytes for good and `temp` bytes that
    it frees before returning."""

    def __init__(self, device: _FakeDevice, forward: float, backward: float, keep: int, temp: int):
        super().__init__()
        self.device, self.cost, self.keep, self.temp = device, (forward, backward), keep, temp

    def forward(self, x: Tensor) -> Tensor:
        self.device.alloc(self.keep + self.temp)
        self.device.alloc(-self.temp)
        return _Costly.apply(x, self.device, *self.cost)  # type: ignore[no-any-return]


def test_device_times_and_memory_leave_the_summarys_own_work_out() -> None:
    device = _FakeDevice()
    model = nn.Sequential(
        _Work(device, 2.0, 5.0, keep=100, temp=50), _Work(device, 3.0, 7.0, keep=10, temp=400)
    )
    clock = EventClock(device.event, lambda: None)
    memory = CudaMemory(torch.device("cuda", 0), read=device.read)
    x = torch.ones(3, requires_grad=True)
    s = _measure(model, (x,), {}, True, None, clock, memory)
    root, first, second = s.calls
    # Exactly the module code's device time: the summary's 1 ms per hook is left out.
    assert (first.forward_ms, second.forward_ms, root.forward_ms) == (2.0, 3.0, 5.0)
    assert s.forward_ms == 5.0
    assert (first.backward_ms, second.backward_ms) == (5.0, 7.0)
    assert root.backward_ms == 12.0 and s.backward_ms == 12.0
    assert root.self_forward_ms == 0.0 and root.self_backward_ms == 0.0
    assert (first.forward_mem_bytes, first.forward_peak_bytes) == (100, 150)
    assert (second.forward_mem_bytes, second.forward_peak_bytes) == (10, 410)
    # The root: both children's kept bytes; its peak is the second child's temporary on
    # top of the first child's kept bytes.
    assert (root.forward_mem_bytes, root.forward_peak_bytes) == (110, 510)
    assert s.peak_bytes == 510 and s.timing == "CUDA events" and s.device == "cuda:0"
    assert "fwd peak MiB" in str(s) and "Peak memory of the pass on cuda:0" in str(s)
    frame = s.to_frame()
    assert frame["forward_peak_bytes"].tolist() == [510, 150, 410]


def test_cpu_summaries_have_no_memory_figures() -> None:
    s = summary(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 3))
    assert s.device is None and s.peak_bytes is None and s.timing == "wall clock"
    assert all(c.forward_mem_bytes is None and c.forward_peak_bytes is None for c in s)
    assert "fwd peak" not in str(s) and "(wall clock)" in str(s)


def test_an_error_keeps_the_flags_of_the_calls_that_finished() -> None:
    class Bad(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x.log()

    class Boom(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise RuntimeError("boom")

    model = nn.Sequential(Bad(), Boom())
    with pytest.raises(RuntimeError, match="boom") as info:
        summary(model, -torch.ones(2))
    calls = info.value.summary_calls  # type: ignore[attr-defined]
    assert [(c.name, c.output_nonfinite) for c in calls] == [("", False), ("0", True), ("1", False)]
    assert calls[1].forward_ms >= 0 and math.isnan(calls[0].forward_ms)  # unfinished: NaN
    assert hook_count(model) == 0


def test_backward_times_of_calls_that_share_a_tensor() -> None:
    """`m` goes to two calls: its gradient is complete only after both, which must not
    make the first of them look as slow as both (nor its parent slower than the pass)."""
    device = _FakeDevice()

    class Fan(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = _Work(device, 1.0, 2.0, keep=0, temp=0)
            self.b = _Work(device, 1.0, 3.0, keep=0, temp=0)
            self.c = _Work(device, 1.0, 5.0, keep=0, temp=0)

        def forward(self, x: Tensor) -> Tensor:
            m = self.a(x)
            return self.b(m) + self.c(m)

    clock = EventClock(device.event, lambda: None)
    s = _measure(Fan(), (torch.ones(2, requires_grad=True),), {}, True, None, clock, None)
    root, a, b, c = s.calls
    assert (a.backward_ms, b.backward_ms, c.backward_ms) == (2.0, 3.0, 5.0)
    assert root.backward_ms == 10.0 == s.backward_ms and root.self_backward_ms == 0.0


def test_tied_weights_and_a_tensor_passed_to_every_block_keep_times_nested() -> None:
    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 32)
            self.blocks = nn.ModuleList(nn.Linear(64, 32) for _ in range(3))
            self.head = nn.Linear(32, 50, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, tokens: Tensor) -> Tensor:
            h = context = self.embed(tokens)
            for block in self.blocks:  # every block also reads the first embedding
                h = torch.tanh(block(torch.cat([h, context], -1)))
            return self.head(h)

    torch.manual_seed(0)
    model = Blocks()
    s = summary(model, torch.randint(0, 50, (4, 64)))
    for i, c in enumerate(s.calls):
        kids = [k.backward_ms for k in s.calls if k.parent == i]
        assert c.backward_ms >= sum(kids) - 1e-9 and c.self_backward_ms >= 0
    assert s.calls[0].backward_ms <= s.backward_ms
    assert sum(c.self_backward_ms for c in s) == pytest.approx(s.calls[0].backward_ms)
