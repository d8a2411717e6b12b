"""Op and tap records (`track(..., ops=...)`, `tap`) in the readers: `first_nonfinite` and
`diagnose` name the operation that made a NaN, `compare` names a divergence inside a
module, and `diagnose` finds a head whose attention logits grow; the numbers checked
against the same quantities computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import compare, diagnose, first_nonfinite, stats, tap, track


class Attention(nn.Module):
    """Self-attention written op by op; `masked` query rows see no key (their softmax is
    NaN), `temperature` divides the scores."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads
        self.masked: list[int] = []
        self.temperature = 1.0

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, 2))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(d // self.heads) * self.temperature)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        mask[self.masked] = False
        weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return (weights @ v).transpose(1, 2).reshape(b, t, d)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Attention(), nn.Linear(8, 1))


def _x() -> Tensor:
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("recorded", ["stats", "copies"])
def test_a_softmax_over_an_all_masked_row_is_named_not_its_module(recorded: str) -> None:
    model = _model()
    model[0].masked = [2]
    kw: dict[str, object] = {"stats": True} if recorded == "stats" else {}
    with track(model, ops=["softmax", "matmul"], **kw) as t:  # type: ignore[arg-type]
        model(_x()).sum().backward()
    rows = [(s.name, s.kind, s.attr, s.grad) for s in t]
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.op, found.grad) == ("0", "softmax#0", False)
    assert found.seen_in == ("0", "op", "softmax#0", False)
    assert found.row == rows.index(("0", "op", "softmax#0", False))
    assert "'softmax#0 of 0' returned a non-finite value" in found.explanation
    finding = diagnose(t)[0]
    assert (finding.check, finding.modules) == ("nonfinite", ("softmax#0 of 0",))
    assert finding.evidence["seen in"] == "softmax#0 of 0"


class SqrtBlock(nn.Module):
    """sqrt of a shifted input: one element is sqrt(0), whose gradient is infinite."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.sqrt(x - x.detach().min())


def test_a_gradient_made_non_finite_by_an_operations_backward_names_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), SqrtBlock(), nn.Linear(4, 1))
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with track(model, ops=torch.sqrt, stats=True) as t:
        model(x).sum().backward()
    found = first_nonfinite(t)
    assert found is not None
    # The gradient of Linear "0"'s output is the first non-finite one; the last gradient
    # recorded before it is the sqrt's (finite): the sqrt's backward made it.
    assert found.seen_in == ("0", "output", "", True)
    assert (found.name, found.op, found.grad) == ("1", "sqrt#0", True)
    assert "the backward of 'sqrt#0 of 1' turned a finite gradient" in found.explanation


class Tapped(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return tap("logits", x.log()).exp()


def test_a_non_finite_tap_is_named() -> None:
    model = nn.Sequential(nn.Identity(), Tapped())
    with track(model, stats=True) as t:
        model(torch.tensor([1.0, -1.0]))
    found = first_nonfinite(t)
    assert found is not None and (found.name, found.op) == ("1", "logits")
    assert "'logits of 1' was given a non-finite value" in found.explanation


def test_compare_names_a_divergence_inside_a_module_by_operation() -> None:
    x = _x()
    runs, weights = [], []
    for temperature in (1.0, 1.5):
        model = _model()
        model[0].temperature = temperature
        with track(model, ops=["softmax", "matmul"]) as t:
            model(x).sum().backward()
        runs.append(t)
        weights.append(next(s.value for s in t if s.attr == "softmax#0" and not s.grad))
    comparison = compare(runs[0], runs[1])
    d = comparison.first_divergence()
    assert d is not None
    assert (d.name, d.kind, d.attr, d.grad) == ("0", "op", "softmax#0", False)
    assert d.label == "softmax#0 of 0"
    assert str(d).startswith("'softmax#0 of 0' at step 0, call 0: rel_rms_error")
    worst = [line.split() for line in str(comparison).splitlines()]
    assert ["0", "gradient", "matmul#0"] in [w[:3] for w in worst]  # not "gradient" alone
    # The same softmax computed by hand at both temperatures.
    model = _model()
    q, k, _ = (z.view(2, 5, 2, -1).transpose(1, 2) for z in model[0].qkv(x).detach().split(8, 2))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    by_hand = [
        F.softmax((q @ k.transpose(-2, -1) / (2.0 * tau)).masked_fill(~causal, -math.inf), -1)
        for tau in (1.0, 1.5)
    ]
    torch.testing.assert_close(weights[0], by_hand[0], rtol=0, atol=1e-6)
    want = (by_hand[0] - by_hand[1]).abs().max().item()
    assert d.max_abs_error == pytest.approx(want, rel=1e-5)


class SDPA(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads

    def qk(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, 2))
        return q, k, v

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qk(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(x.shape)


def _logit_run(grow: float, steps: int = 5) -> tuple[tensor_tracker.Tracker, Tensor]:
    """SGD steps of an SDPA model, head 1's q and k weights multiplied by `grow` after each;
    the tracker and the largest logit of each head at each step, from the scores
    materialised by hand (steps x heads)."""
    torch.manual_seed(0)
    model = nn.Sequential(SDPA(), nn.Linear(16, 1))
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    by_hand = []
    spec = [*stats.DEFAULT, stats.attention_logits()]
    with track(model, ops="scaled_dot_product_attention", stats=spec) as t:
        for _ in range(steps):
            with torch.no_grad():
                q, k, _ = model[0].qk(x)
                scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal, -math.inf)
                by_hand.append(scores.amax(dim=(0, 2, 3)))
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            t.step()
            with torch.no_grad():
                weight = model[0].qkv.weight
                weight[8:16].mul_(grow)  # head 1's query rows
                weight[24:32].mul_(grow)  # and key rows
    return t, torch.stack(by_hand).double()


def test_diagnose_names_the_head_whose_attention_logits_grow() -> None:
    t, by_hand = _logit_run(grow=1.6)
    start, end = by_hand[0], by_hand[-1]
    assert end[1] > 10 and end[0] < 10  # the planted head only
    findings = [f for f in diagnose(t) if f.check == "attention_logit_growth"]
    assert len(findings) == 1
    finding = findings[0]
    assert finding.modules == ("scaled_dot_product_attention#0 of 0",)
    assert finding.steps == (0, 4)
    assert finding.evidence["heads"] == "1"
    factor = (end[1] / start[1]).item()
    assert finding.evidence["growth (largest)"] == pytest.approx(factor, rel=1e-4)
    assert finding.evidence["head 1"] == (
        f"max logit {start[1]:.3g} at step 0 -> {end[1]:.3g} at step 4 ({factor:.3g}x)"
    )
    # A higher threshold than the growth: no finding.
    assert not [f for f in diagnose(t, logit_growth=factor * 1.01) if f.check.startswith("att")]


def test_diagnose_finds_no_logit_growth_in_a_healthy_run() -> None:
    t, _ = _logit_run(grow=1.0)
    diagnosis = diagnose(t)
    assert not [f for f in diagnosis if f.check == "attention_logit_growth"]
    assert diagnosis.checked["attention_logit_growth"].startswith(
        "max_logit_per_head of 1 attention call site(s)"
    )


def test_diagnose_says_why_it_skips_the_logit_check() -> None:
    model = _model()
    with track(model, stats=True) as t:
        model(_x()).sum().backward()
    assert "stats.attention_logits()" in diagnose(t).checked["attention_logit_growth"]
    with pytest.raises(tensor_tracker.errors.ArgumentValueError, match="logit_growth"):
        diagnose(t, logit_growth=1.0)


class Gram(nn.Module):
    """x @ x.T scaled down: the matmul overflows float16, the module's output does not."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x, x.transpose(0, 1)) * 1e-3


def test_diagnose_names_an_operation_whose_result_overflows_a_format() -> None:
    model = nn.Sequential(nn.Identity(), Gram())
    x = torch.full((4, 100), 30.0)
    assert (x @ x.T).max().item() == 90_000 > torch.finfo(torch.float16).max
    with track(model, ops="matmul", stats=tensor_tracker.diagnosis_stats) as t:
        model(x)
    (finding,) = diagnose(t)
    assert (finding.check, finding.modules) == ("fp16_overflow", ("matmul#0 of 1",))
    assert "1 operation result(s) exceed the largest float16" in finding.explanation


def test_channel_tables_and_sample_statistics_have_op_rows() -> None:
    """The per-channel table (report's channel panel, `plot.channel_map`, `diagnose`) and
    the per-sample statistics (the report's sample panel) read op records as outputs of
    their own, named as what they are inside their module."""
    model = _model()
    spec = [*stats.DEFAULT, stats.per_channel("abs_max")]
    with track(model, ops=["softmax", "matmul"], stats=spec) as t:
        model(_x()).sum().backward()
    with track(model, ops="softmax") as copies:
        model(_x()).sum().backward()
    table = tensor_tracker.channel_table(t)
    assert table.modules[:4] == ("0.qkv", "matmul#0 of 0", "softmax#0 of 0", "matmul#1 of 0")
    softmax = next(s.first_value for s in copies if s.attr == "softmax#0" and not s.grad)
    m = table.modules.index("softmax#0 of 0")
    # The softmax's [batch, heads, rows, keys] per channel (heads): its largest |value| each.
    expected = softmax.abs().amax(dim=(0, 2, 3))
    assert table.values[m, 0, : table.widths[m]] == pytest.approx(expected.tolist(), rel=1e-6)
    found = tensor_tracker.sample_stats(copies)
    assert found.names[:3] == ["0.qkv", "softmax#0 of 0", "0"]
    k = found.names.index("softmax#0 of 0")
    rms = softmax.double().flatten(1).square().mean(1).sqrt()
    assert found.rms[k].tolist() == pytest.approx(rms.tolist())
