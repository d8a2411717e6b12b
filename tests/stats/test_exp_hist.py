"""The built-in exponent histogram `exp_hist`, against a float64 reference."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from tensor_tracker import stats as S
from tensor_tracker.errors import ArgumentValueError

_EXTRAS = ("zero", "below", "above", "nonfinite", "rejected")


def reference(x: Tensor) -> dict[str, Tensor | float]:
    """The exponent histogram computed in float64 from each value's binade."""
    v = x.detach().to(torch.float64).flatten()
    counts = torch.zeros(254, dtype=torch.float64)
    finite = v[torch.isfinite(v)]
    nonzero = finite[finite != 0]
    e = torch.floor(torch.log2(nonzero.abs())).long()
    inside = (e >= -126) & (e < 128)
    counts.index_add_(0, e[inside] + 126, torch.ones(int(inside.sum()), dtype=torch.float64))
    return {
        "exp_hist": counts,
        "zero": float((finite == 0).sum()),
        "below": float((e < -126).sum()),
        "above": float((e >= 128).sum()),
        "nonfinite": float((~torch.isfinite(v)).sum()),
        "rejected": 0.0,
    }


def check(x: Tensor) -> None:
    s = S.parse(["exp_hist"])(x)
    ref = reference(x)
    torch.testing.assert_close(s["exp_hist"].cpu(), ref["exp_hist"], rtol=0, atol=0)
    for extra in _EXTRAS:
        assert float(s[f"exp_hist_{extra}"]) == ref[extra], extra
    total = float(s["exp_hist"].sum()) + sum(float(s[f"exp_hist_{e}"]) for e in _EXTRAS)
    assert total == x.numel()


def _mixed() -> Tensor:
    torch.manual_seed(0)
    magnitudes = torch.exp2(torch.empty(4000).uniform_(-140, 128))
    signs = torch.where(torch.rand(4000) < 0.5, -1.0, 1.0)
    return (magnitudes * signs).float()


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(1000),
        lambda: torch.randn(64, 33)[:, ::2],  # not contiguous
        lambda: torch.zeros(17),
        _mixed,
        # float32 subnormals, the smallest normal and the largest finite value.
        lambda: torch.tensor([2.0**-149, 2.0**-127, 2.0**-126, -(2.0**-126), 3.4028235e38, 1.0]),
        lambda: torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, 0.75, 2.0]),
        lambda: torch.tensor([], dtype=torch.float32),
        lambda: torch.tensor(3.0),
    ],
    ids=["randn", "strided", "zeros", "all-binades", "limits", "nonfinite", "empty", "0-d"],
)
def test_exp_hist_matches_float64_reference(make: object) -> None:
    check(make())  # type: ignore[operator]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_exp_hist_other_float_dtypes(dtype: torch.dtype) -> None:
    x = torch.cat((_mixed(), torch.tensor([math.nan, math.inf, 0.0]))).to(dtype)
    check(x)


def test_exp_hist_float64_beyond_float32() -> None:
    x = torch.tensor([1e300, 1e-300, 2.0**127, 1.0], dtype=torch.float64)
    check(x)
    s = S.parse(["exp_hist"])(x)
    assert float(s["exp_hist_above"]) == 1 and float(s["exp_hist_below"]) == 1


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_exp_hist_integer_dtypes(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, 2, 3, 100, 1, 0]).to(dtype)
    check(x)


def test_exp_hist_is_a_name_in_a_spec_and_edges_are_binades() -> None:
    fn = S.parse([*S.DEFAULT, "exp_hist"])
    assert "exp_hist" in fn.names and "exp_hist_zero" in fn.names
    s = fn(torch.tensor([1.0, 3.0]))
    edges = s.edges("exp_hist")
    assert edges[0] == -126 and edges[-1] == 128 and len(edges) == 255
    assert S.EXP_HIST.bins == 254


def test_exp_hist_unknown_name_message_mentions_it() -> None:
    with pytest.raises(ArgumentValueError, match="exp_hist"):
        S.parse(["exp_histo"])
