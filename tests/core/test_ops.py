"""`track(..., ops=...)` and `tensor_tracker.tap`: calls of functional operations and tapped
values inside a tracked module's `forward`, recorded like outputs; values and gradients
checked against the same tensors kept by hand and `torch.autograd.grad`."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

import tensor_tracker
from tensor_tracker import tap, track
from tensor_tracker.errors import TensorTrackerError
from tests.helpers import hook_count

Keep = Callable[[str, Tensor], Tensor]


def _nothing(name: str, value: Tensor) -> Tensor:
    return value


class Attention(nn.Module):
    """Causal self-attention written out op by op, as nanoGPT does; `keep` sees each
    intermediate (the reference run keeps them)."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.keep: Keep = _nothing

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = self.keep("matmul#0", q @ k.transpose(-2, -1))
        scores = self.keep("mul#0", scores * (1.0 / math.sqrt(k.size(-1))))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.keep("softmax#0", F.softmax(scores, dim=-1))
        y = self.keep("matmul#1", weights @ v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.keep: Keep = _nothing

    def forward(self, x: Tensor) -> Tensor:
        x = self.keep("add#0", x + self.attn(self.ln(x)))
        return self.keep("add#1", torch.add(x, x.relu()))


def _gpt() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.Linear(8, 1))


def _input() -> Tensor:
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


def _reference(model: nn.Sequential, x: Tensor) -> dict[tuple[str, str], tuple[Tensor, Tensor]]:
    """Each kept intermediate of the blocks' and attentions' `forward` by (module, attr):
    its value and d loss / d value by `torch.autograd.grad`."""
    kept: dict[tuple[str, str], Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, (Block, Attention)):
            module.keep = lambda attr, value, name=name: kept.setdefault((name, attr), value)
    try:
        loss = model(x).sum()
    finally:
        for module in model.modules():
            if isinstance(module, (Block, Attention)):
                module.keep = _nothing
    grads = torch.autograd.grad(loss, list(kept.values()))
    return {key: (value.detach(), g) for (key, value), g in zip(kept.items(), grads, strict=True)}


def test_op_values_and_gradients_match_the_ops_called_by_hand() -> None:
    x = _input()
    reference = _reference(_gpt(), x)
    model = _gpt()
    with track(model, ops=["softmax", "matmul", "add", "mul"]) as t:
        model(x).sum().backward()
    ops = [s for s in t if s.kind == "op"]
    forward = {(s.name, s.attr): s.value for s in ops if not s.grad}
    backward = {(s.name, s.attr): s.value[0] for s in ops if s.grad}
    assert set(forward) == set(backward) == set(reference)
    for key, (value, grad) in reference.items():
        assert torch.equal(forward[key], value), key
        assert torch.equal(backward[key], grad), key
    assert {s.call for s in ops} == {0}


def test_ops_belong_to_the_innermost_tracked_module_and_not_to_untracked_children() -> None:
    model = _gpt()
    with track(model, ops=["linear", "layer_norm", "softmax"], grad=False) as t:
        model(_input())
    ops = {(s.name, s.attr) for s in t if s.kind == "op"}
    # nn.Linear and nn.LayerNorm call F.linear and F.layer_norm in their own forward.
    assert ops == {
        *((f"{b}.attn.qkv", "linear#0") for b in "01"),
        *((f"{b}.attn.proj", "linear#0") for b in "01"),
        *((f"{b}.ln", "layer_norm#0") for b in "01"),
        *((f"{b}.attn", "softmax#0") for b in "01"),
        ("2", "linear#0"),
    }
    with track(model, ops=["linear", "softmax"], include=r"attn$", grad=False) as t:
        model(_input())
    # The untracked qkv and proj's own F.linear are theirs, not their tracked parent's.
    assert {(s.name, s.attr) for s in t if s.kind == "op"} == {
        ("0.attn", "softmax#0"),
        ("1.attn", "softmax#0"),
    }
    with track(model, ops="softmax", exclude=r"^1", grad=False) as t:
        model(_input())
    assert [s.name for s in t if s.kind == "op"] == ["0.attn"]


def test_every_spelling_of_an_op_is_that_op_and_calls_are_numbered_per_module_call() -> None:
    class Spellings(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            a = torch.softmax(x, -1) + F.softmax(x, -1)
            b = x.softmax(-1) @ torch.special.softmax(x, -1).T
            c = 1 + b
            c += a.sum()
            return c

    module = Spellings()
    with track(module, ops=["softmax", torch.add], grad=False, every=2) as t:
        for _ in range(3):
            module(torch.randn(3, 3))
            module(torch.randn(3, 3))
            t.step()
    rows = [(s.step, s.call, s.attr) for s in t if s.kind == "op"]
    per_call = [f"softmax#{k}" for k in range(2)] + ["add#0"]
    per_call += [f"softmax#{k}" for k in range(2, 4)] + ["add#1", "add#2"]
    assert rows == [(step, call, a) for step in (0, 2) for call in (0, 1) for a in per_call]


def test_outputs_and_gradients_are_bitwise_identical_and_nothing_is_left() -> None:
    x = _input()
    plain, model = _gpt(), _gpt()
    expected = plain(x)
    expected.sum().backward()
    with track(model, ops=list(tensor_tracker._core.ops.OP_FUNCTIONS), stats=True) as t:
        out = model(x)
        out.sum().backward()
    assert torch.equal(out, expected)
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)
    assert len(t) > 0 and hook_count(model) == 0
    assert torch._C._len_torch_function_stack() == 0


class Failing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        self.inner(x).softmax(-1)
        raise RuntimeError("model error")


def test_an_exception_in_forward_leaves_no_mode_and_no_hook_and_keeps_the_records() -> None:
    model = nn.Sequential(Failing())
    with pytest.raises(RuntimeError, match="model error"), track(model, ops="softmax") as t:
        assert torch._C._len_torch_function_stack() == 0  # pushed only while a call runs
        model(torch.ones(1, 2))
    assert torch._C._len_torch_function_stack() == 0
    assert hook_count(model) == 0
    assert [(s.name, s.attr) for s in t if s.kind == "op"] == [("0", "softmax#0")]
    assert torch.ones(2).add(1).sum().item() == 4  # torch works as before


def test_ops_the_hooks_compute_are_not_recorded() -> None:
    # What is kept of each value is computed with the very ops named here, inside the
    # parent's call (the mode is on), in the tracker's hooks and in `tap`.
    class Tapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            return tap("h", self.fc(x)).tanh()

    model = nn.Sequential(Tapped())
    everything = list(tensor_tracker._core.ops.OP_FUNCTIONS)
    keep = lambda t: torch.mul(t.detach(), 1).tanh()  # noqa: E731
    with track(model, ops=everything, stash_value=keep, capture=["inputs", "outputs"]) as t:
        model(torch.randn(2, 3)).sum().backward()
    ops = sorted({(s.name, s.attr) for s in t if s.kind == "op"})
    assert ops == [("0", "tanh#0"), ("0.fc", "linear#0")]


class _Seen(TorchFunctionMode):
    """Counts the torch calls it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[Any] = Counter()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.calls[func] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("options", [{"stats": True}, {"capture": ["inputs", "outputs"]}])
def test_the_interception_sees_the_model_s_calls_and_none_of_the_tracker_s(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    # What an op not asked for costs: the mode is on while the tracked call runs, and the
    # hooks of its children and taps compute statistics and copies inside it.
    model, x = _gpt(), _input()
    for module in model.modules():
        if isinstance(module, (Block, Attention)):
            module.keep = tap
    with _Seen() as untracked:
        model(x)
    tracked = _Seen()
    original = tensor_tracker._core.ops._OpsMode.__torch_function__

    def counted(mode: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        tracked.calls[func] += 1
        return original(mode, func, types, args, kwargs)

    monkeypatch.setattr(tensor_tracker._core.ops._OpsMode, "__torch_function__", counted)
    with track(model, ops="scaled_dot_product_attention", **options) as t:
        model(x).sum().backward()
    assert {"output", "tap"} <= {s.kind for s in t}
    assert tracked.calls == untracked.calls


def test_under_a_mode_the_model_pushes_the_hooks_ops_are_still_not_recorded() -> None:
    # The model's own mode sits above the ops mode: the hooks run under both, and the
    # frame walk keeps their ops out; the stack is as it was after the call.
    class Modal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

        def forward(self, x: Tensor) -> Tensor:
            with _Seen() as seen:
                y = self.inner(x)
            return y + len(seen.calls)

    model = nn.Sequential(Modal())
    keep = lambda t: torch.mul(t.detach(), 1).tanh()  # noqa: E731
    with track(model, ops=["linear", "tanh", "add", "mul"], stash_value=keep) as t:
        model(torch.randn(2, 3)).sum().backward()
    assert torch._C._len_torch_function_stack() == 0
    ops = sorted({(s.name, s.attr) for s in t if s.kind == "op"})
    assert ops == [("0", "add#0"), ("0.inner.0", "linear#0"), ("0.inner.1", "tanh#0")]


def test_a_hook_that_raises_inside_forward_leaves_the_mode_stack_as_it_was() -> None:
    model = _gpt()

    def failing(value: Tensor) -> Tensor:
        raise RuntimeError("stash_value error")

    with _Seen() as outer:  # a mode of the user's, below the tracker's
        with (
            pytest.raises(RuntimeError, match="stash_value error"),
            track(model, ops="softmax", stash_value=failing, grad=False),
        ):
            model(_input())
        assert torch._C._len_torch_function_stack() == 1
        assert torch._C._get_function_stack_at(0) is outer
    assert hook_count(model) == 0
    assert torch.ones(2).add(1).sum().item() == 4


def test_op_records_take_stats_histograms_streaming_and_load(tmp_path: Any) -> None:
    model = _gpt()
    stats = ["rms", tensor_tracker.stats.per_channel("abs_max", dim=-1)]
    with track(model, ops="softmax", stats=stats, stream_to=tmp_path / "run") as t:
        for _ in range(2):
            model(_input()).sum().backward()
            t.step()
    frame = tensor_tracker.load(tmp_path / "run").to_frame()
    ops = frame[frame["kind"] == "op"]
    assert set(ops["attr"]) == {"softmax#0"} and len(ops) == 8  # 2 blocks, 2 steps, grad
    assert (ops["rms"] > 0).all()
    assert all(len(v) == 5 for v in ops["abs_max_per_channel"])  # over the 5 keys


def test_a_custom_stash_sees_the_op_inputs() -> None:
    # What a statistic of an op's inputs (attention logits from q and k) is handed.
    class Sdpa(nn.Module):
        def forward(self, q: Tensor) -> Tensor:
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    seen: list[Any] = []

    def keep(event: tensor_tracker.Event) -> tensor_tracker.Stash:
        if event.kind == "op":
            seen.append((event.attr, event.args, event.kwargs))
        return tensor_tracker.default_stash(event, lambda v: v.shape)

    q = torch.randn(1, 2, 4, 3)
    module = Sdpa()
    with track(module, ops="scaled_dot_product_attention", stash=keep, grad=False):
        module(q)
    ((attr, args, kwargs),) = seen
    assert attr == "scaled_dot_product_attention#0"
    assert all(a is q for a in args) and kwargs == {"is_causal": True}


def test_tap_records_values_and_gradients_numbered_per_call() -> None:
    class Tapping(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            h = tap("h", self.fc(x))
            return tap("h", h.tanh()) * 2

    torch.manual_seed(0)
    module = Tapping()
    x = torch.randn(2, 3)
    with track(module) as t:
        module(x).sum().backward()
        module(x)
    taps = [(s.call, s.attr, s.grad) for s in t if s.kind == "tap"]
    assert taps == [
        (0, "h", False),
        (0, "h#1", False),
        (0, "h#1", True),
        (0, "h", True),
        (1, "h", False),
        (1, "h#1", False),
    ]
    h = module.fc(x)
    h1 = h.tanh()
    g, g1 = torch.autograd.grad((h1 * 2).sum(), [h, h1])
    by = {(s.attr, s.grad, s.call): s for s in t if s.kind == "tap"}
    assert torch.equal(by["h", False, 0].value, h.detach())
    assert torch.equal(by["h", True, 0].value[0], g)
    assert torch.equal(by["h#1", False, 0].value, h1.detach())
    assert torch.equal(by["h#1", True, 0].value[0], g1)


@pytest.mark.slow  # Dynamo's first compilation
def test_tap_without_a_tracker_returns_its_value_and_traces_without_a_graph_break() -> None:
    value = torch.ones(2)
    assert tap("x", value) is value

    def f(x: Tensor) -> Tensor:
        return tap("y", x * 2) + 1

    explained = torch._dynamo.explain(f)(torch.ones(3))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.parametrize(
    ("ops", "error"),
    [("sofmax", "unknown operation 'sofmax'; known: add"), ([3], "holds 3"), ([], "is empty")],
)
def test_a_wrong_ops_raises_before_touching_the_model(ops: Any, error: str) -> None:
    model = _gpt()
    with pytest.raises(TensorTrackerError, match=error):
        track(model, ops=ops)
    assert hook_count(model) == 0


def _op_means(t: tensor_tracker.Tracker) -> dict[tuple[str, str, int, bool], float]:
    frame = t.to_frame()
    ops = frame[frame["kind"].isin(["op", "tap"])]
    return {(r.name, r.attr, r.step, r.grad): r.mean for r in ops.itertuples()}


def _run_steps(
    model: nn.Module, x: Tensor, steps: int, **options: Any
) -> tuple[tensor_tracker.Tracker, list[int]]:
    """`steps` training steps of `model` tracked with `options`; the number of graphs
    Dynamo compiled so far after each."""
    from torch._dynamo.utils import counters

    graphs = []
    with track(model, stats=True, **options) as t:
        for _ in range(steps):
            model(x).sum().backward()
            t.step()
            graphs.append(counters["stats"]["unique_graphs"])
    return t, graphs


@pytest.mark.slow  # compiles
def test_compiled_ops_match_eager_with_no_graph_break_and_no_recompile() -> None:
    from torch._dynamo.utils import counters

    x = _input()
    ops = ["softmax", "matmul", "add"]
    expected = _op_means(_run_steps(_gpt(), x, 4, ops=ops, every=2)[0])
    assert len(expected) == 2 * 20  # steps 0 and 2
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_gpt(), backend="aot_eager")
    # A first tracker whose ops never run leaves nothing behind for the next one.
    with track(compiled, stats=True, ops="scaled_dot_product_attention") as t:
        compiled(x).sum().backward()
    assert not _op_means(t) and torch._C._len_torch_function_stack() == 0
    t, graphs = _run_steps(compiled, x, 4, ops=ops, every=2)
    got = _op_means(t)
    assert set(got) == set(expected)
    for key, mean in expected.items():
        assert got[key] == pytest.approx(mean, rel=1e-5, abs=1e-6), key
    assert torch._C._len_torch_function_stack() == 0 and hook_count(compiled) == 0
    # The ops are recorded in the graphs: no graph break, and after the first recorded
    # and the first unrecorded step, no recompile.
    assert not counters["graph_break"]
    assert graphs[1] == graphs[-1]
    torch._dynamo.reset()


@pytest.mark.slow  # compiles
# With `ops=` naming an op that the statistics of a tap compute (but the model does not
# call): the tap's own work is not recorded as the model's op.
@pytest.mark.parametrize("ops", [None, ["add", "mul"]], ids=["taps", "taps-and-ops"])
def test_compiled_taps_match_eager_with_no_graph_break(ops: list[str] | None) -> None:
    from torch._dynamo.utils import counters

    class Tapping(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            h = tap("h", self.fc(x))
            return tap("h", h.tanh()) * 2

    torch.manual_seed(0)
    module, x = Tapping(), torch.randn(2, 3)
    expected = _op_means(_run_steps(module, x, 3, every=2, ops=ops)[0])
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(module, backend="aot_eager")
    got = _op_means(_run_steps(compiled, x, 3, every=2, ops=ops)[0])
    taps = {(n, a, s, g) for n in [""] for a in ("h", "h#1") for s in (0, 2) for g in (0, 1)}
    if ops:  # `* 2`, the model's one op of these
        taps |= {("", "mul#0", s, g) for s in (0, 2) for g in (0, 1)}
    assert set(got) == set(expected) == taps
    for key, mean in expected.items():
        assert got[key] == pytest.approx(mean, rel=1e-5, abs=1e-6), key
    assert not counters["graph_break"]
    torch._dynamo.reset()


@pytest.mark.slow  # compiles
def test_a_tap_in_a_model_another_tracker_does_not_track_adds_no_graph_break() -> None:
    """Two compiled models, each tracked by its own tracker (a benchmark's floor beside
    the tracked model): the taps of one are not the other's, and add no graph break."""
    from torch._dynamo.utils import counters

    class Tapping(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            return tap("h", self.fc(x)).tanh()

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    tapping = torch.compile(Tapping(), backend="aot_eager")
    other = torch.compile(nn.Sequential(nn.Linear(3, 3)), backend="aot_eager")
    x = torch.randn(2, 3)
    with track(tapping, stats=True) as mine, track(other, stats=True, ops="add") as theirs:
        tapping(x).sum().backward()
        other(x).sum().backward()
    assert not counters["graph_break"]
    assert ("", "h", 0, False) in _op_means(mine) and not _op_means(theirs)
    torch._dynamo.reset()


@pytest.mark.slow  # compiles
def test_compiled_ops_stopped_inside_forward_leave_no_mode_and_no_hook() -> None:
    # max_bytes= stops the tracker at a record the graph hands out in the middle of the
    # forward pass (6 records in): the ops' mode and the owner stack are gone with it.
    torch._dynamo.reset()
    compiled = torch.compile(_gpt(), backend="aot_eager")
    t = track(compiled, stats=True, ops="softmax", max_bytes=200)
    with pytest.raises(tensor_tracker.MemoryBudgetError), t:
        compiled(_input()).sum().backward()
    assert len(t) > 0 and torch._C._len_torch_function_stack() == 0
    assert hook_count(compiled) == 0
    torch._dynamo.reset()


@pytest.mark.slow  # compiles
def test_compiled_ops_recorded_eagerly_keep_to_the_steps_every_records() -> None:
    # Full copies are not computed in the graph: the ops mode runs eagerly, behind graph
    # breaks, and its hooks stay attached through the steps `every=` skips.
    torch._dynamo.reset()
    compiled = torch.compile(_gpt(), backend="aot_eager")
    with track(compiled, ops="softmax", every=2) as t:
        for _ in range(3):
            compiled(_input()).sum().backward()
            t.step()
    assert sorted({s.step for s in t if s.kind == "op"}) == [0, 2]
    torch._dynamo.reset()


class _PairAttention(nn.Module):
    """Returns `(output, weights)` as Hugging Face's eager attention does: two tensors, so
    its hooks run eagerly, behind a graph break, and Dynamo compiles its `forward` as a
    frame of its own."""

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        weights = x.softmax(-1)
        again = weights.softmax(-1)
        return weights + again, weights


class _PairLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _PairAttention()

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x)[0] * 2


@pytest.mark.slow  # compiles
def test_compiled_ops_of_a_module_called_eagerly_are_its_own_in_every_layer() -> None:
    # The owner hooks of each layer's attention were compiled as one frame for all layers
    # (their code is shared): every layer's softmax was named after the first layer's
    # ("0.attn", call 1, 2, ...). Ten layers: past Dynamo's recompile limit (8), the
    # attention's forward runs eagerly, and still numbers its ops from 0 at each call.
    torch.manual_seed(0)
    model = nn.Sequential(*[_PairLayer() for _ in range(10)])
    x = torch.randn(2, 5, requires_grad=True)
    expected = _op_means(_run_steps(model, x, 2, ops="softmax")[0])
    assert {(n, a) for n, a, _, _ in expected} == {
        (f"{i}.attn", f"softmax#{k}") for i in range(10) for k in (0, 1)
    }
    torch._dynamo.reset()
    got = _op_means(_run_steps(torch.compile(model, backend="aot_eager"), x, 2, ops="softmax")[0])
    assert set(got) == set(expected)
    for key, mean in expected.items():
        assert got[key] == pytest.approx(mean, rel=1e-5, abs=1e-6), key


class _TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.a(x) + self.b(x)


@pytest.mark.slow  # compiles
def test_a_compiled_model_tracked_again_records_its_ops_in_the_same_modules() -> None:
    # Dynamo keeps the frame that runs the model's own hooks from the first tracker (its
    # guards see the same hook code): the owner it replays must still be the model.
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(_TwoLayers(), backend="aot_eager")
    found = []
    for _ in range(2):
        with track(compiled, ops="add", stats=True) as t:
            compiled(torch.randn(2, 4)).sum().backward()
        found.append(sorted((s.name, s.attr, s.call, s.grad) for s in t if s.kind == "op"))
    assert found[0] == found[1] == [("", "add#0", 0, False), ("", "add#0", 0, True)]
    torch._dynamo.reset()


def test_frames_selections_and_comparisons_read_op_records() -> None:
    from tensor_tracker._data.select import select

    model, x = _gpt(), _input()
    runs = []
    for scale in (1.0, 1.01):
        with track(model, ops=["softmax", "add"]) as t:
            model(x * scale).sum().backward()
        runs.append(t)
    frame = runs[0].to_frame()
    ops = frame[frame["kind"] == "op"]
    assert sorted(set(zip(ops["name"], ops["attr"], strict=True))) == [
        ("0", "add#0"), ("0", "add#1"), ("0.attn", "softmax#0"),
        ("1", "add#0"), ("1", "add#1"), ("1.attn", "softmax#0"),
    ]  # fmt: skip
    assert len(select(runs[0].stashes, kind="op")) == 12
    # LayerNorm undoes the scale: the first record that differs is the residual add.
    assert "First forward divergence: 'add#0 of 0' at" in str(tensor_tracker.compare(*runs))
