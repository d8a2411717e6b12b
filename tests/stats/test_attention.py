"""Attention logits per head (`stats.attention_logits`): exact against materialised
`softmax(q k^T * scale + mask)` references (causal, bool and additive masks, `scale=`,
grouped-query attention, half precision, fully masked rows, sampled rows), computed in
bounded chunks, traced by Dynamo without graph breaks, and kept by the statistics store
beside the other vectors (empty on records that are not sdpa calls)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from tensor_tracker import stats, track
from tensor_tracker._persist.ranks import merged_stats
from tensor_tracker._persist.recording_codec import spec_from_json, spec_to_json
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, RecordingError
from tensor_tracker.stats._attention import CHUNK_BYTES, chunk_rows, logit_stats

NAMES = ("max_logit_per_head", "entropy_per_head")


def _scores(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """The logits sdpa takes the softmax of, materialised in float64: `[B, H, L, S]`."""
    q, k = q.double(), k.double()
    if k.shape[-3] != q.shape[-3]:  # grouped-query attention, as torch's math reference
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    length, keys = s.shape[-2:]
    if causal:  # top-left aligned, as torch defines is_causal
        s = s.masked_fill(~torch.ones(length, keys, dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.double()
    return s


def _sums(s: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per head, over the batch and the query rows of the logits `s` `[B, H, L, S]`: the
    largest logit, the sum of the rows' softmax entropies and the number of rows, fully
    masked rows left out."""
    top = s.amax(-1)
    kept = top != -math.inf
    p = torch.softmax(s, -1)
    entropy = -torch.where(p > 0, p * p.log(), 0.0).sum(-1)
    total = torch.where(kept, entropy, 0.0).sum((0, 2))
    return top.amax(2).amax(0), total, kept.sum((0, 2)).double()


def _reference(s: Tensor, rows: Any = None) -> tuple[Tensor, Tensor]:
    """Per head: the largest logit and the mean softmax entropy over the batch and the
    query rows (`rows` only, if given), fully masked rows left out; NaN for a head
    without any other row."""
    top, total, count = _sums(s if rows is None else s[..., rows, :])
    return top.masked_fill(count == 0, math.nan), total / count


def _check(got: tuple[Tensor, Tensor], want: tuple[Tensor, Tensor], rtol: float = 1e-6) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float64
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=rtol, atol=rtol)


def _qkv(b: int = 2, h: int = 4, length: int = 7, keys: int = 9, e: int = 8) -> list[Tensor]:
    torch.manual_seed(0)
    return [torch.randn(b, h, n, e) * 2 for n in (length, keys, keys)]


def test_the_reference_is_what_sdpa_attends_with() -> None:
    # The references' masking conventions (bool True attends, causal top-left aligned
    # when L != S, GQA heads) are torch's own: their softmax times v is sdpa's output.
    q, k, v = _qkv(length=5, keys=9)
    mask = torch.rand(2, 1, 5, 9) > 0.3
    mask[..., 0] = True
    kv = [t[:, :2] for t in (k, v)]
    for args, kwargs, s, value in [
        ((q, k, v), {"is_causal": True}, _scores(q, k, causal=True), v),
        ((q, k, v, mask), {"scale": 0.3}, _scores(q, k, mask, scale=0.3), v),
        ((q, *kv), {"enable_gqa": True}, _scores(q, kv[0]), kv[1].repeat_interleave(2, 1)),
    ]:
        out = F.scaled_dot_product_attention(*args, **kwargs)
        np.testing.assert_allclose(out, torch.softmax(s, -1) @ value.double(), atol=1e-5)


@pytest.mark.parametrize("budget", [1, CHUNK_BYTES])  # one query row at a time, and all
@pytest.mark.parametrize(("length", "keys"), [(7, 7), (5, 9), (9, 4)])
def test_exact_without_mask_and_with_causal_masks(
    length: int, keys: int, budget: int, device: torch.device
) -> None:
    q, k, _ = _qkv(length=length, keys=keys)
    for causal in (False, True):
        got = logit_stats(q.to(device), k.to(device), is_causal=causal, budget=budget)
        _check(got, _reference(_scores(q, k, causal=causal)))


@pytest.mark.parametrize("shape", [(7, 9), (2, 1, 7, 9), (2, 4, 7, 9), (1, 7, 9)])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_exact_with_broadcast_bool_and_additive_masks(
    shape: tuple[int, ...], kind: str, device: torch.device
) -> None:
    q, k, _ = _qkv()
    torch.manual_seed(1)
    mask = torch.rand(shape) > 0.4
    if kind == "additive":  # finite penalties and -inf alike, a learned bias's
        mask = torch.where(mask, torch.randn(shape), -math.inf).requires_grad_()
    for causal in (False, True):
        want = _reference(_scores(q, k, mask.detach(), causal))
        got = logit_stats(q.to(device), k.to(device), mask.to(device), causal, budget=1)
        _check(got, want)
        assert not any(g.requires_grad for g in got)  # nothing added to the user's graph


def test_scale_and_grouped_query_attention(device: torch.device) -> None:
    q, _, _ = _qkv(h=6)
    k = torch.randn(2, 2, 9, 8)  # 3 query heads per key head
    mask = torch.rand(2, 6, 7, 9) > 0.3
    want = _reference(_scores(q, k, mask, causal=True, scale=0.7))
    for budget in (1, CHUNK_BYTES):
        got = logit_stats(
            q.to(device), k.to(device), mask.to(device), True, 0.7, True, None, budget
        )
        _check(got, want)
        assert got[0].shape == (6,)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_scored_in_float32(
    dtype: torch.dtype, device: torch.device
) -> None:
    q, k, _ = (t.to(dtype) for t in _qkv())
    mask = (torch.rand(7, 9) > 0.5).to(dtype).log()  # an additive mask in the inputs' dtype
    got = logit_stats(q.to(device), k.to(device), mask.to(device), is_causal=False)
    _check(got, _reference(_scores(q, k, mask)), rtol=1e-5)


def test_fully_masked_rows_are_left_out_and_a_head_without_rows_is_nan() -> None:
    q, k, _ = _qkv(b=1, h=3, length=4, keys=5)
    mask = torch.ones(1, 3, 4, 5, dtype=torch.bool)
    mask[0, 0, 1] = False  # head 0: one row fully masked
    mask[0, 2] = False  # head 2: every row
    got = logit_stats(q, k, mask, budget=1)
    want = _reference(_scores(q, k, mask))
    _check(got, want)
    assert not math.isnan(want[1][0]) and math.isnan(got[0][2]) and math.isnan(got[1][2])
    # Head 0's masked row counts for nothing: the same as dropping it from the rows.
    np.testing.assert_allclose(got[1][0], _reference(_scores(q, k, mask), [0, 2, 3])[1][0])


def test_nan_inputs_propagate_into_their_head() -> None:
    q, k, _ = _qkv(b=1, h=2)
    q[0, 1, 3, 0] = math.nan
    top, entropy = logit_stats(q, k)
    assert math.isnan(top[1]) and math.isnan(entropy[1])
    assert not math.isnan(top[0]) and not math.isnan(entropy[0])


@pytest.mark.parametrize("causal", [False, True])
def test_rows_scores_evenly_spaced_rows_and_is_exact_from_the_sequence_length(
    causal: bool,
) -> None:
    q, k, _ = _qkv(length=10, keys=10)
    s = _scores(q, k, causal=causal)
    item = stats.attention_logits(rows=3)
    got = item(q, k, is_causal=causal)
    _check(got, _reference(s, torch.tensor([1, 5, 8])))  # (2i + 1) * 10 // 6
    _check(stats.attention_logits(rows=10)(q, k, is_causal=causal), _reference(s))
    _check(stats.attention_logits(rows=50)(q, k, is_causal=causal), _reference(s))


def test_chunk_rows_fit_the_byte_budget() -> None:
    for lanes, keys, itemsize in [(32, 4096, 4), (1, 7, 8), (64 * 32, 131072, 4)]:
        rows = chunk_rows(lanes, keys, itemsize)
        per_row = lanes * keys * (2 * itemsize + 1)
        assert rows >= 1
        assert rows == 1 or rows * per_row <= CHUNK_BYTES < (rows + 1) * per_row
    assert chunk_rows(64 * 32, 131072, 4) == 1  # the floor: one row per batch item and head


class _LargestTensor(TorchDispatchMode):
    """Notes the largest tensor any operation returns, in bytes."""

    largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


@pytest.mark.slow  # 2 x 16.8 M scores on the CPU
def test_a_long_sequence_is_scored_in_chunks_under_the_budget() -> None:
    # L = S = 4096: the scores of all rows would take 4096 * 4096 * 4 B = 64 MiB, twice.
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 4096, 8), torch.randn(1, 1, 4096, 8)
    with _LargestTensor() as mode:
        top, entropy = logit_stats(q, k, is_causal=True)
    assert 0 < mode.largest <= CHUNK_BYTES // 2
    assert torch.isfinite(top).all() and 0 < entropy < math.log(4096)
    # Sampled rows, down to the end of the sequence, against their materialised scores.
    picked = torch.tensor([(2 * i + 1) * 4096 // 16 for i in range(8)])
    causal = torch.arange(4096) <= picked[:, None]
    sampled = logit_stats(q, k, is_causal=True, rows=8)
    _check(sampled, _reference(_scores(q[..., picked, :], k, causal)))
    assert top >= sampled[0]


@pytest.mark.slow
def test_compiles_without_graph_breaks_under_aot_eager() -> None:
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    q, k, _ = _qkv(h=6, length=6, keys=8)
    k = k[:, :3]
    mask = torch.rand(2, 1, 6, 8) > 0.3
    item = stats.attention_logits(rows=4)

    def both(q: Tensor, k: Tensor, mask: Tensor) -> tuple[Tensor, ...]:
        exact = logit_stats(q, k, mask, True, 0.5, True, None, 1)
        return (*exact, *item(q, k, None, mask, is_causal=True, enable_gqa=True))

    compiled = torch.compile(both, backend="aot_eager", fullgraph=True)
    got = compiled(q, k, mask)
    assert sum(counters["graph_break"].values()) == 0
    for g, w in zip(got, both(q, k, mask), strict=True):
        torch.testing.assert_close(g, w, equal_nan=True)


def test_the_item_applies_to_an_sdpa_calls_arguments_and_ignores_other_records() -> None:
    q, k, v = _qkv()
    mask = torch.rand(7, 9) > 0.3
    args, kwargs = (q, k, v), {"attn_mask": mask, "scale": 0.5}
    out = F.scaled_dot_product_attention(*args, **kwargs)
    fn = stats.parse(["rms", stats.per_channel("abs_max"), stats.attention_logits()])
    assert fn.layout.vectors == ("abs_max_per_channel", *NAMES)
    assert fn.names == ("rms",)
    want = _reference(_scores(q, k, mask, scale=0.5))
    _check(fn.vectors(out, attention=(args, kwargs))[1:], want)
    _check(stats.attention_logits().of_call((q, k, v, mask, 0.0, False, 0.5), {}), want)
    assert [len(v) for v in fn(out).vectors] == [4, 0, 0]  # a tensor alone: ignored
    # Nor does it keep a compiled graph from computing the other statistics itself.
    assert stats.parse([*stats.DEFAULT, stats.attention_logits()]).traceable

    store = fn.store()
    # The sdpa record, then a module returning the same tensor: two rows, the module's
    # without the call's vectors.
    refs = [store.put(out, attention=(args, kwargs)), store.put(out), store.put(out)]
    assert refs[1] != refs[0] and refs[2] == refs[1]
    table = store.vector_table(torch.tensor(refs))
    _check((table[NAMES[0]][0], table[NAMES[1]][0]), want)
    assert [len(v) for v in table[NAMES[0]]] == [4, 0, 0]
    assert store.get(refs[0])["entropy_per_head"].shape == (4,)


class _Attention(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        q = x.unflatten(-1, (2, 4)).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).flatten(2)


def test_a_tracked_model_gets_the_columns_empty_on_module_records(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(8, 8), _Attention())
    spec = [*stats.DEFAULT, stats.attention_logits(rows=2)]
    with track(model, stats=spec) as t:
        model(torch.randn(2, 5, 8)).sum().backward()
    frame = t.to_frame()
    for name in NAMES:
        assert frame[name].map(len).tolist() == [0] * len(frame)
    t.save(tmp_path / "run")
    from tensor_tracker import load

    loaded = load(tmp_path / "run").to_frame()
    assert loaded[NAMES[1]].map(len).tolist() == [0] * len(frame)


class _MaskedAttention(nn.Module):
    """Attention with an additive mask and grouped-query heads, as a model calls it."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.kv = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        # `view`, not `unflatten`: Dynamo breaks the graph at `unflatten` under a mode.
        q = self.q(x).view(*x.shape[:2], 4, 2).transpose(1, 2)
        k = self.kv(x).view(*x.shape[:2], 2, 2).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2).flatten(2)


def test_op_records_of_attention_get_the_logits_per_head() -> None:
    """`track(ops="scaled_dot_product_attention")` with the item: the op's record holds
    each head's largest logit and mean entropy, as the materialised scores give them."""
    torch.manual_seed(0)
    model = _MaskedAttention()
    x, mask = torch.randn(2, 5, 8), torch.randn(5, 5)
    spec = [*stats.DEFAULT, stats.attention_logits()]
    with track(model, stats=spec, ops="scaled_dot_product_attention") as t:
        model(x, mask).sum().backward()
    frame = t.to_frame()
    op = frame[(frame["kind"] == "op") & ~frame["grad"]]
    assert op["attr"].tolist() == ["scaled_dot_product_attention#0"]
    with torch.no_grad():
        q = model.q(x).unflatten(-1, (4, 2)).transpose(1, 2)
        k = model.kv(x).unflatten(-1, (2, 2)).transpose(1, 2)
    want = _reference(_scores(q, k, mask))
    got = tuple(torch.tensor(op[name].iloc[0], dtype=torch.float64) for name in NAMES)
    _check(got, want)  # type: ignore[arg-type]
    others = frame.drop(op.index)  # module outputs and gradients: no attention call
    assert others[NAMES[0]].map(len).tolist() == [0] * len(others)


class _Block(nn.Module):
    """`_MaskedAttention` inside a residual block: the attention op is made in
    `attention`'s own forward, the block's output is a module output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attention = _MaskedAttention()

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        out: Tensor = x + self.attention(x, mask)
        return out


@pytest.mark.slow  # compiles
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_model_records_the_logits_per_head_and_per_channel_vectors(
    backend: str,
) -> None:
    """Issue 37: compiled, the attention op's record holds each head's largest logit and
    mean entropy, and every record its per-channel vector, as the materialised float64
    scores and autograd's gradients give them; no graph break, no recompile with every=."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _Block()
    x, mask = torch.randn(2, 5, 8), torch.randn(5, 5)
    compiled = torch.compile(model, backend=backend)
    spec = [*stats.DEFAULT, stats.attention_logits(), stats.per_channel("abs_max")]
    graphs = []
    with track(
        compiled, stats=spec, ops="scaled_dot_product_attention", every=2
    ) as t:  # steps 0 and 2 recorded
        for _ in range(4):
            compiled(x, mask).pow(2).sum().backward()
            t.step()
            graphs.append(counters["stats"]["unique_graphs"])
    assert sum(counters["graph_break"].values()) == 0
    assert graphs[1] == graphs[-1]
    torch._dynamo.reset()

    # The references, from the eager model (its weights are unchanged: no optimizer).
    attention = model.attention
    outputs: dict[str, Tensor] = {}
    attention.register_forward_hook(lambda m, a, out: outputs.setdefault("attention", out))
    with torch.no_grad():
        q = attention.q(x).unflatten(-1, (4, 2)).transpose(1, 2)
        k = attention.kv(x).unflatten(-1, (2, 2)).transpose(1, 2)
    top, entropy = _reference(_scores(q, k, mask))
    out = model(x, mask)
    (grad,) = torch.autograd.grad(out.pow(2).sum(), [outputs["attention"]])
    frame = t.to_frame()
    assert sorted(set(frame["step"])) == [0, 2]
    op = frame[(frame["kind"] == "op") & ~frame["grad"]]
    assert op["attr"].tolist() == ["scaled_dot_product_attention#0"] * 2
    tolerance = {"rtol": 1e-5, "atol": 1e-5}
    for row in op.itertuples():
        np.testing.assert_allclose(row.max_logit_per_head, top.numpy(), **tolerance)
        np.testing.assert_allclose(row.entropy_per_head, entropy.numpy(), **tolerance)
    channels = "abs_max_per_channel"
    for name, grad_record, value in [
        ("", False, out),
        ("attention", False, outputs["attention"]),
        ("attention", True, grad),
    ]:
        rows = frame[(frame["name"] == name) & (frame["kind"] == "output")]
        rows = rows[rows["grad"] == grad_record]
        want = value.detach().double().abs().amax((0, 1)).numpy()
        assert len(rows) == 2
        for got in rows[channels]:
            np.testing.assert_allclose(got, want, **tolerance)
    # The op's output, [batch, heads, rows, features]: its channels are the heads.
    with torch.no_grad():
        attended = F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=True)
    for got in op[channels]:
        np.testing.assert_allclose(got, attended.double().abs().amax((0, 2, 3)), **tolerance)
    others = frame.drop(op.index)  # module outputs and gradients: no attention call
    assert others[NAMES[0]].map(len).tolist() == [0] * len(others)


def test_the_spec_round_trips_through_json_and_merges_across_ranks() -> None:
    layout = stats.parse(["rms", stats.attention_logits(rows=16)]).layout
    back = spec_from_json(spec_to_json(layout.spec)).layout
    assert back.spec == layout.spec and back.vectors == NAMES
    with pytest.raises(RecordingError, match="rows"):
        spec_from_json([{"attention_logits": {"rows": -1}}])
    merged = merged_stats([layout.spec, ("rms",)], RecordingError)
    assert merged is not None and merged.layout.vectors == NAMES
    with pytest.raises(RecordingError, match="configured differently"):
        merged_stats(
            [layout.spec, stats.parse([stats.attention_logits()]).layout.spec], RecordingError
        )


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (lambda: stats.attention_logits(rows=0), ArgumentValueError, "attention_logits(rows="),
        (lambda: stats.attention_logits(rows=2.0), ArgumentTypeError, "attention_logits(rows="),  # type: ignore[arg-type]
        (lambda: stats.attention_logits().of_call((), {"q": 1}), ArgumentTypeError, "'q'"),
        (
            lambda: stats.attention_logits()(torch.ones(2, 3), torch.ones(2, 4)),
            ArgumentValueError,
            "last dimension",
        ),
        (
            lambda: stats.attention_logits()(torch.ones(3, 2, 4), torch.ones(2, 2, 4)),
            ArgumentValueError,
            "3 query heads",
        ),
        (
            lambda: stats.attention_logits()(
                torch.ones(2, 2, 4, dtype=torch.long), torch.ones(2, 2, 4)
            ),
            ArgumentTypeError,
            "query",
        ),
    ],
)
def test_argument_errors_name_the_argument(call: Any, error: type, argument: str) -> None:
    with pytest.raises(error) as raised:
        call()
    assert argument in str(raised.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_host_sync_on_cuda() -> None:
    q, k, v = (t.cuda().half() for t in _qkv(h=6))
    kv = (k[:, :2], v[:, :2])
    mask = torch.rand(2, 1, 7, 9, device="cuda") > 0.3
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((q, k, v), {"is_causal": True}),
        ((q, *kv, mask), {"scale": 0.5, "enable_gqa": True}),
    ]
    fn = stats.parse([*stats.DEFAULT, stats.attention_logits(rows=3), stats.per_channel("rms")])
    store = fn.store()
    outs = [F.scaled_dot_product_attention(*a, **kw) for a, kw in calls]
    for out, call in zip(outs, calls, strict=True):  # warm-up
        fn.vectors(out, attention=call)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        refs = [store.put(out, attention=call) for out, call in zip(outs, calls, strict=True)]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    table = store.vector_table(torch.tensor(refs))
    picked = [1, 3, 5]  # (2i + 1) * 7 // 6
    want = _reference(_scores(q.cpu(), k.cpu(), causal=True), picked)
    _check((table[NAMES[0]][0], table[NAMES[1]][0]), want, rtol=1e-5)
