"""Tests of tensor_tracker.stats and tensor_tracker.stats.formats against numpy/float64 references."""

from __future__ import annotations

import gc
import math
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import tensor_tracker
from tensor_tracker import stats as S
from tensor_tracker.stats import _kernels as kernels
from tensor_tracker.stats.formats import FORMATS

ALL = list(S.NAMES)
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Reductions of float32 (and upcast 16-bit) tensors run in float32.
RTOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 2e-5, torch.bfloat16: 2e-5}


def reference(x: Tensor) -> dict[str, float]:
    """Every built-in statistic, straight from the definitions, in float64 numpy."""
    a = x.detach().to(torch.float64).reshape(-1).numpy()
    n = a.size
    mag = np.abs(a)
    nonzero = a != 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ref: dict[str, float] = {
            "mean": float(a.mean()) if n else math.nan,
            "std": float(a.std(ddof=1)) if n > 1 else math.nan,
            "rms": float(np.sqrt(np.mean(a * a))) if n else math.nan,
            "abs_mean": float(mag.mean()) if n else math.nan,
            "abs_max": float(mag.max()) if n else math.nan,
            "min": float(a.min()) if n else math.nan,
            "max": float(a.max()) if n else math.nan,
            "numel": float(n),
            "nonfinite": float(np.sum(~np.isfinite(a))),
            "zero_frac": float(np.sum(a == 0)) / n if n else math.nan,
            "sum": float(a.sum()),
            "kurtosis": float(np.mean((a - a.mean()) ** 4) / np.mean((a - a.mean()) ** 2) ** 2)
            if n
            else math.nan,
        }
        for key, f in FORMATS.items():
            ref[f"{key}_overflow"] = float(np.sum(mag > f.max)) / n if n else math.nan
            ref[f"{key}_underflow"] = (
                float(np.sum(nonzero & (mag < f.min_subnormal))) / n if n else math.nan
            )
            ref[f"{key}_subnormal"] = (
                float(np.sum(nonzero & (mag < f.min_normal))) / n if n else math.nan
            )
    return ref


def assert_close(got: dict[str, Any], want: dict[str, float], rtol: float) -> None:
    for name, expected in want.items():
        value = got[name]
        if math.isnan(expected):
            assert math.isnan(value), (name, value, expected)
        else:
            assert value == pytest.approx(expected, rel=rtol, abs=0.0), (name, value, expected)


def random_data(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 3 + 0.5
    x.view(-1)[::7] = 0.0  # exact zeros, for zero_frac and the format counts
    return x.to(dtype)


# --------------------------------------------------------------------------------------
# formats


def test_format_limits() -> None:
    expected = {
        "fp16": (65504.0, 2.0**-14, 2.0**-24),
        "bf16": ((2 - 2**-7) * 2.0**127, 2.0**-126, 2.0**-133),
        "fp8_e4m3": (448.0, 2.0**-6, 2.0**-9),
        "fp8_e5m2": (57344.0, 2.0**-14, 2.0**-16),
    }
    assert list(FORMATS) == list(expected)
    for key, (mx, normal, subnormal) in expected.items():
        f = FORMATS[key]
        assert (f.name, f.max, f.min_normal, f.min_subnormal) == (key, mx, normal, subnormal)


def test_format_labels() -> None:
    labels = {k: f.label for k, f in FORMATS.items()}
    assert labels == {
        "fp16": "float16",
        "bf16": "bfloat16",
        "fp8_e4m3": "float8 e4m3fn",
        "fp8_e5m2": "float8 e5m2",
    }


def test_names_cover_formats_and_default() -> None:
    for key in FORMATS:
        for kind in ("overflow", "underflow", "subnormal"):
            assert f"{key}_{kind}" in S.NAMES
    assert set(S.DEFAULT) <= set(S.NAMES)
    assert S.DEFAULT == ("mean", "std", "rms", "abs_max", "min", "max", "numel")


# --------------------------------------------------------------------------------------
# built-in statistics against references


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1000,), (7, 13, 5), (3, 1)], ids=str)
def test_builtins_match_reference(
    dtype: torch.dtype, shape: tuple[int, ...], device: torch.device
) -> None:
    x = random_data(shape, dtype)
    got = S.compute(x.to(device), ALL).to_dict()
    assert_close(got, reference(x), RTOL[dtype])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_default_matches_reference(dtype: torch.dtype) -> None:
    x = random_data((64, 33), dtype, seed=1)
    got = S.compute(x).to_dict()
    assert list(got) == list(S.DEFAULT)
    assert_close(got, {k: reference(x)[k] for k in S.DEFAULT}, RTOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_format_fractions_on_values_spanning_all_ranges(
    dtype: torch.dtype, device: torch.device
) -> None:
    gen = torch.Generator().manual_seed(2)
    exponents = torch.randint(-150, 128, (5000,), generator=gen).to(torch.float64)
    x = (torch.randn(5000, generator=gen, dtype=torch.float64) * torch.exp2(exponents)).to(dtype)
    biggest = torch.finfo(dtype).max  # above the bfloat16 max, which random data rarely hits
    x = torch.cat([x, torch.tensor([biggest, -biggest], dtype=dtype)])
    got = S.compute(x.to(device), ALL).to_dict()
    # Sums of values this large overflow, so only the range-independent statistics compare.
    names = [n for n in ALL if n.startswith(tuple(FORMATS))]
    names += ["min", "max", "abs_max", "numel", "nonfinite", "zero_frac"]
    want = {k: v for k, v in reference(x).items() if k in names}
    for name in names:
        if "_" in name and name.startswith(tuple(FORMATS)):
            assert want[name] > 0, name  # the data exercises every count
    assert_close(got, want, RTOL[dtype])


def test_large_mean_small_spread_keeps_std_accurate() -> None:
    # The two-pass/Welford spread must not cancel catastrophically like E[x^2] - E[x]^2.
    x = 1000.0 + torch.randn(10_000, generator=torch.Generator().manual_seed(3)) * 1e-3
    got = S.compute(x, ["std"]).to_dict()["std"]
    assert got == pytest.approx(x.double().std().item(), rel=1e-3)


@pytest.mark.parametrize("first", [None, math.inf, 1e6], ids=["sample", "inf", "outlier"])
def test_graph_moments_match_float64(first: float | None, device: torch.device) -> None:
    # What a compiled graph computes: float64 sums about the first element (not a float32
    # Welford loop, which costs more and is off by ~1e-5 here), exact to float64 rounding
    # whatever that element is (an outlier; not finite: a shift of 0).
    x = 1000.0 + torch.randn(100_000, generator=torch.Generator().manual_seed(4)) * 1e-3
    if first is not None:
        x[0] = first
    fn = S.parse(["mean", "std", "min", "max"])
    got = fn.layout.derive(
        fn.graph_raw(x.to(device)).cpu()[None],
        torch.tensor([float(x.numel())], dtype=torch.float64),
    )
    want = x.double()
    if first == math.inf:  # any NaN or inf: mean and std are NaN (the documented rule)
        assert math.isnan(got["mean"].item()) and math.isnan(got["std"].item())
    else:
        assert got["mean"].item() == pytest.approx(want.mean().item(), rel=1e-12)
        assert got["std"].item() == pytest.approx(want.std().item(), rel=1e-9)
    assert (got["min"].item(), got["max"].item()) == (want.min().item(), want.max().item())


def test_spread_of_huge_equal_values_is_zero_although_their_squares_overflow() -> None:
    # (Not exactly 0: the float32 mean is off by a rounding error, ~1e-7 of it.)
    got = S.compute(torch.full((1000,), 1e20), ["mean", "std", "rms"]).to_dict()
    assert got["mean"] == pytest.approx(1e20, rel=1e-6) and got["std"] < 1e-6 * 1e20
    assert got["rms"] == pytest.approx(1e20, rel=1e-6)


# --------------------------------------------------------------------------------------
# kurtosis (issue 39)


def float64_kurtosis(x: Tensor) -> float:
    d = x.double() - x.double().mean()
    return ((d**4).mean() / (d**2).mean() ** 2).item()


@pytest.mark.parametrize("n", [100_000, 3 * 65_536 + 5], ids=["one-piece", "pieces"])
def test_kurtosis_of_a_large_mean_and_a_tiny_spread_matches_float64(
    n: int, device: torch.device
) -> None:
    # Float32 values ~1e4 apart by ~1e-2: moments about zero cancel every digit (E[x**4] is
    # ~1e16, its central part ~1e-8); about the mean, in float64, nothing is lost.
    x = 1e4 + 1e-2 * torch.randn(n, generator=torch.Generator().manual_seed(7))
    want = float64_kurtosis(x)
    fn = S.parse(["kurtosis", "std", "mean"])
    got = fn(x.to(device)).to_dict()
    assert got["kurtosis"] == pytest.approx(want, rel=1e-10)
    assert got["std"] == pytest.approx(x.double().std().item(), rel=1e-10)
    assert got["mean"] == pytest.approx(x.double().mean().item(), rel=1e-14)
    # What a compiled graph computes (`graph_raw`: the device kernel, on every device).
    traced = fn.graph_raw(x.to(device)).cpu()[None]
    derived = fn.layout.derive(traced, torch.tensor([float(n)], dtype=torch.float64))
    assert derived["kurtosis"].item() == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([-1.0, 1.0] * 50, 1.0),  # two equal masses: m4 = m2**2
        ([0.0] * 98 + [-10.0, 10.0], 50.0),  # m2 = 2, m4 = 200 (per 100 values)
        ([3.0] * 10, math.nan),  # variance 0: 0 / 0
        ([2.5], math.nan),
        ([], math.nan),
        ([1.0, math.nan, 2.0], math.nan),
        ([1.0, math.inf, 2.0], math.nan),
    ],
    ids=["two-point", "outliers", "constant", "one-element", "empty", "nan", "inf"],
)
def test_kurtosis_edge_cases(values: list[float], want: float, device: torch.device) -> None:
    got = S.compute(torch.tensor(values, device=device), ["kurtosis"])["kurtosis"].item()
    assert got == pytest.approx(want, nan_ok=True, rel=1e-12)


def test_kurtosis_of_a_gaussian_is_about_3_in_every_dtype() -> None:
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(8))
    for dtype in FLOAT_DTYPES:
        got = S.compute(x.to(dtype), ["kurtosis"])["kurtosis"].item()
        assert got == pytest.approx(float64_kurtosis(x.to(dtype)), rel=1e-10), dtype
        assert abs(got - 3.0) < 0.05, dtype


def test_health_preset_records_scale_extremes_and_tails_of_outputs_and_gradients() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(9))
    outputs: dict[str, Tensor] = {}
    for name, module in model.named_children():
        module.register_forward_hook(lambda m, a, out, name=name: outputs.setdefault(name, out))
    with tensor_tracker.track(model, stats=S.health) as t:
        model(x).square().mean().backward()
    frame = t.to_frame()
    assert S.health == ("rms", "abs_max", "kurtosis")
    assert list(frame.columns[-3:]) == list(S.health)
    assert sorted(set(frame["grad"])) == [False, True]
    for name, out in outputs.items():
        row = frame[(frame["name"] == name) & ~frame["grad"]].iloc[0]
        ref = reference(out)
        for stat in S.health:
            assert row[stat] == pytest.approx(ref[stat], rel=1e-6), (name, stat)


@pytest.mark.parametrize("extra", [[], ["fp16_overflow"]], ids=["own-pass", "range-pass"])
def test_nan_and_inf_inputs(extra: list[str], device: torch.device) -> None:
    x = torch.tensor([1.0, -2.0, math.nan, math.inf, -math.inf, 0.0, 3.0], device=device)
    names = [*S.DEFAULT, "abs_mean", "nonfinite", "zero_frac", "sum", "kurtosis", *extra]
    got = S.compute(x, names).to_dict()
    assert got["nonfinite"] == 3
    assert got["zero_frac"] == pytest.approx(1 / 7)
    for name in ("mean", "std", "rms", "abs_mean", "min", "max", "abs_max", "sum", "kurtosis"):
        assert math.isnan(got[name]), name
    assert got["numel"] == 7


def test_inf_without_nan() -> None:
    x = torch.tensor([1.0, math.inf, -math.inf, 2.0])
    got = S.compute(x, [*S.DEFAULT, "nonfinite", "fp16_overflow"]).to_dict()
    assert (got["min"], got["max"], got["abs_max"]) == (-math.inf, math.inf, math.inf)
    assert got["nonfinite"] == 2
    assert got["fp16_overflow"] == 0.5  # ±inf overflow
    assert math.isnan(got["mean"]) and math.isnan(got["std"]) and math.isnan(got["rms"])


def test_mean_is_nan_with_any_nonfinite_value() -> None:
    # torch.mean would say inf here; the documented rule is NaN, whatever the device.
    got = S.compute(torch.tensor([1.0, math.inf]), ["mean", "rms", "max"]).to_dict()
    assert math.isnan(got["mean"]) and math.isnan(got["rms"])
    assert got["max"] == math.inf


def test_nan_is_not_overflow_or_underflow() -> None:
    x = torch.tensor([math.nan, 1.0])
    got = S.compute(x, ["fp16_overflow", "fp16_underflow", "fp16_subnormal"]).to_dict()
    assert got == {"fp16_overflow": 0.0, "fp16_underflow": 0.0, "fp16_subnormal": 0.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_empty_tensor(dtype: torch.dtype) -> None:
    got = S.compute(torch.zeros(0, 3, dtype=dtype), [*ALL, S.histogram(bins=3)]).to_dict()
    counts = {"numel", "nonfinite", "sum", "hist_below", "hist_above", "hist_zero"}
    counts |= {"hist_nonfinite", "hist_rejected"}
    for name, value in got.items():
        if name == "hist":
            assert value == [0.0, 0.0, 0.0]
        elif name in counts:
            assert value == 0, name
        else:
            assert math.isnan(value), name


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8], ids=str)
def test_integer_tensor(dtype: torch.dtype) -> None:
    low = 0 if dtype == torch.uint8 else -50
    x = torch.randint(low, 50, (200,), dtype=dtype, generator=torch.Generator().manual_seed(4))
    assert_close(S.compute(x, ALL).to_dict(), reference(x), 1e-12)


def test_bool_tensor() -> None:
    x = torch.tensor([True, False, True, True])
    got = S.compute(x, ALL).to_dict()
    assert got["mean"] == 0.75
    assert_close(got, reference(x), 1e-12)


def test_single_element() -> None:
    x = torch.tensor([-2.5])
    got = S.compute(x, ALL).to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about zero degrees of freedom
        assert math.isnan(x.std().item())
    assert math.isnan(got["std"])
    assert (got["mean"], got["rms"], got["abs_max"], got["numel"]) == (-2.5, 2.5, 2.5, 1)


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_abs_max_of_zeros_is_positive_zero(zero: float) -> None:
    # min = max = ±0.0, so max(-min, max) alone gives -0.0 for one of the two; |x| is +0.0.
    x = torch.full((3,), zero)
    got = S.compute(x, ALL)
    for value in (got.to_dict()["abs_max"], got["abs_max"].item()):
        assert value == 0.0 and math.copysign(1.0, value) == 1.0


def test_abs_max_of_a_zero_bias_in_the_frame_is_positive_zero() -> None:
    layer = torch.nn.LayerNorm(4)  # bias initialised to zeros
    with tensor_tracker.track(layer, stats=True, capture=("outputs", "params")) as t:
        layer(torch.randn(2, 4)).sum().backward()
    frame = t.to_frame()
    bias = frame[(frame["attr"] == "bias") & ~frame["grad"]]["abs_max"].tolist()
    assert bias == [0.0] and math.copysign(1.0, bias[0]) == 1.0


def _limit_values(key: str, dtype: torch.dtype) -> tuple[list[float], tuple[int, int, int]] | None:
    """Values at and one ulp (of `dtype`) around each limit, plus the expected counts."""
    f = FORMATS[key]
    limits = torch.tensor([f.max, f.min_normal, f.min_subnormal], dtype=dtype)
    if limits.double().tolist() != [f.max, f.min_normal, f.min_subnormal]:
        return None  # not representable in this dtype
    up = torch.nextafter(limits, torch.full_like(limits, math.inf)).double().tolist()
    down = torch.nextafter(limits, torch.zeros_like(limits)).double().tolist()
    if down[2] == 0.0:
        return None  # min_subnormal is the dtype's own smallest value: nothing underflows
    values = [
        f.max,  # representable
        up[0],  # overflow
        -up[0],  # overflow
        down[0],
        f.min_normal,  # representable normal
        -down[1],  # subnormal
        up[1],
        f.min_subnormal,  # subnormal, representable
        -down[2],  # underflow (and subnormal)
        up[2],  # subnormal
        0.0,
        math.nan,
    ]
    # overflow, underflow, subnormal counts
    return values, (2, 1, 4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("key", list(FORMATS))
def test_format_limits_are_exact(key: str, dtype: torch.dtype) -> None:
    case = _limit_values(key, dtype)
    if case is None:
        pytest.skip(f"{key} limits are not all testable in {dtype}")
    values, (overflow, underflow, subnormal) = case
    x = torch.tensor(values, dtype=dtype)
    names = [f"{key}_overflow", f"{key}_underflow", f"{key}_subnormal"]
    got = S.compute(x, names).to_dict()
    n = len(values)
    assert got == {names[0]: overflow / n, names[1]: underflow / n, names[2]: subnormal / n}
    want = reference(x)
    assert got == {k: want[k] for k in names}


def test_stats_of_16bit_tensor_reduce_in_float32() -> None:
    x = torch.full((1000,), 300.0, dtype=torch.float16)
    # 300**2 overflows float16, so a float16 reduction would give inf here.
    assert S.compute(x, ["rms"]).to_dict()["rms"] == 300.0


def test_non_contiguous_tensor() -> None:
    x = random_data((40, 30), torch.float32).t()[::2]
    assert not x.is_contiguous()
    got = S.compute(x, [*ALL, S.histogram(bins=4)]).to_dict()
    assert_close({k: got[k] for k in ALL}, reference(x), 2e-5)
    assert sum(got["hist"]) + got["hist_below"] + got["hist_above"] + got["hist_zero"] == x.numel()


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.permute(2, 0, 1),  # dense in another order: read in place
        lambda x: x.transpose(0, 1)[:, 1:],  # not dense: copied
        lambda x: x[:1].expand(4, 5, 6),  # overlapping: copied
        lambda x: x.unsqueeze(1).transpose(0, 2),  # size-1 dims with arbitrary strides
    ],
    ids=["permuted", "sliced", "expanded", "unsqueezed"],
)
def test_layouts_give_the_statistics_of_a_contiguous_copy(view: Callable[[Tensor], Tensor]) -> None:
    x = view(random_data((4, 5, 6), torch.float32, seed=5))
    spec = [*ALL, S.histogram(bins=6)]
    got, want = S.compute(x, spec).to_dict(), S.compute(x.contiguous(), spec).to_dict()
    assert got.keys() == want.keys()
    for name in got:
        assert got[name] == pytest.approx(want[name], rel=1e-6, nan_ok=True), name


def test_flat_views_large_dense_tensors_without_copying() -> None:
    x = torch.randn(64, 32, 32)  # kernels._SMALL elements
    permuted = x.permute(2, 0, 1)
    assert kernels.flat(permuted).data_ptr() == x.data_ptr()
    assert kernels.flat(x[:, 1:]).data_ptr() != x.data_ptr()
    assert torch.equal(kernels.flat(x[:, 1:]), x[:, 1:].reshape(-1))
    # A small one is copied: cheaper than telling whether it is dense.
    small = torch.randn(4, 5, 6)
    copied = kernels.flat(small.permute(2, 0, 1))
    assert copied.data_ptr() != small.data_ptr()
    assert torch.equal(copied, small.permute(2, 0, 1).reshape(-1))


@pytest.mark.parametrize("spec", [S.DEFAULT, ALL], ids=["default", "all"])
def test_cpu_host_path_matches_the_device_path(spec: Sequence[str]) -> None:
    # The CPU computes the moments as sum and dot and reads them back; accelerators (and
    # compile=True) use std_mean and keep everything on the device. Same numbers.
    fn = S.parse(spec)
    x = random_data((3000,), torch.float32, seed=6)
    assert fn._core is not None
    bounds = None if fn._range is None else fn._range.get(x)
    host = fn._core.host_raw(x, bounds)
    device = fn._core.device_raw(x, bounds)
    host_raw = kernels.host_tensor(host) if isinstance(host, list) else host
    torch.testing.assert_close(host_raw, device, rtol=1e-5, atol=0.0)


# --------------------------------------------------------------------------------------
# Stats object


def test_stats_getitem_is_float64_0d_on_device() -> None:
    s = S.compute(torch.tensor([3.0, -4.0]))
    value = s["rms"]
    assert value.dtype == torch.float64 and value.dim() == 0
    assert value.item() == pytest.approx(math.sqrt(12.5))


def test_stats_getitem_unknown_lists_available() -> None:
    s = S.compute(torch.ones(2), ["mean", "max"])
    with pytest.raises(KeyError, match="mean, max"):
        s["rms"]


def test_stats_names_keep_requested_order() -> None:
    names = ["max", "numel", "fp8_e4m3_overflow", "mean", "zero_frac"]
    s = S.compute(torch.ones(2), names)
    assert s.names == tuple(names)
    assert list(s.to_dict()) == names
    assert list(s) == names and len(s) == 5


def test_stats_contains() -> None:
    s = S.compute(torch.ones(2), ["mean"])
    assert "mean" in s
    assert "std" not in s


def test_stats_raw_and_nbytes() -> None:
    s = S.compute(torch.ones(5, dtype=torch.float16))
    assert s.raw.dtype == torch.float64 and s.raw.dim() == 1
    assert s.nbytes == s.raw.numel() * 8 == s.layout.width * 8
    assert s.numel == 5 and isinstance(s.numel, int)


def test_stats_repr() -> None:
    text = repr(S.compute(torch.tensor([1.0, 3.0]), ["mean", "numel", S.histogram(bins=2)]))
    assert text.startswith("Stats(mean=2, numel=2, hist=<2 bins>, hist_below=0")


def test_stats_do_not_track_gradients() -> None:
    x = torch.randn(10, requires_grad=True)
    fn = S.parse([*ALL, S.histogram(), ("l1", lambda t: t.abs().sum())])
    s = fn(x * 2)
    assert not s.raw.requires_grad and s.raw.grad_fn is None


def test_layout_is_shared_per_stats_fn() -> None:
    fn = S.parse(["mean", "fp16_overflow"])
    a, b = fn(torch.ones(3)), fn(torch.ones(4, dtype=torch.float64))
    assert a.layout is b.layout is fn.layout
    assert S.parse(["mean", "fp16_overflow"]).layout is not fn.layout


def test_numel_only_needs_no_device_values() -> None:
    s = S.compute(torch.ones(3, 2), "numel")
    assert s.raw.numel() == 0
    assert s.to_dict() == {"numel": 6.0}


# --------------------------------------------------------------------------------------
# custom statistics


def l1(t: Tensor) -> Tensor:
    return t.abs().sum()


@pytest.mark.parametrize(
    "spec",
    [
        [l1],
        [("l1", l1)],
        {"l1": l1},
        [S.Statistic("l1", l1)],
    ],
    ids=["function", "pair", "mapping", "Statistic"],
)
def test_custom_statistic_forms(spec: Any) -> None:
    s = S.parse(spec)(torch.tensor([1.0, -3.0]))
    assert s.names == ("l1",)
    assert s["l1"].item() == 4.0
    assert s["l1"].dtype == torch.float64


def test_custom_statistic_mixed_with_builtins_and_histogram() -> None:
    fn = S.parse(["rms", ("count_pos", lambda t: (t > 0).sum()), S.histogram(bins=3), "max"])
    got = fn(torch.tensor([1.0, -3.0, 2.0])).to_dict()
    assert got["count_pos"] == 2.0
    assert got["max"] == 2.0
    assert got["rms"] == pytest.approx(math.sqrt(14 / 3))


def test_custom_statistic_returning_python_number() -> None:
    s = S.compute(torch.tensor([1.0, 2.0]), [("size", lambda t: t.numel())])
    assert s["size"].item() == 2.0


def test_custom_statistic_gets_detached_tensor_in_own_dtype() -> None:
    seen: list[Tensor] = []

    def spy(t: Tensor) -> Tensor:
        seen.append(t)
        return t.sum()

    S.compute(torch.ones(3, dtype=torch.float16, requires_grad=True), [spy])
    assert not seen[0].requires_grad
    assert seen[0].dtype == torch.float16


def test_custom_statistic_is_nan_and_not_called_for_empty() -> None:
    counter = Counter()
    s = S.compute(torch.zeros(0), [counter])
    assert counter.calls == 0
    assert math.isnan(s.to_dict()["calls"])


def test_custom_statistic_must_return_one_number() -> None:
    with pytest.raises(ValueError, match=r"'bad'.*single number"):
        S.compute(torch.ones(3), [("bad", lambda t: t * 2)])


# --------------------------------------------------------------------------------------
# parse


def test_parse_true_is_default() -> None:
    assert S.parse(True).names == S.DEFAULT


def test_parse_single_name() -> None:
    assert S.parse("rms").names == ("rms",)


def test_parse_returns_stats_fn_unchanged() -> None:
    fn = S.parse(["mean"])
    assert S.parse(fn) is fn


def test_parse_unknown_name() -> None:
    with pytest.raises(ValueError, match="stats=") as info:
        S.parse(["mean", "variance"])
    message = str(info.value)
    assert "'variance'" in message and "abs_max" in message and "fp8_e5m2_subnormal" in message
    assert '("name", fn)' in message


def test_parse_unwrapped_pair_hints_at_list() -> None:
    with pytest.raises(ValueError, match=r"wrap the pair in a list: stats=\[\('l1', fn\)\]"):
        S.parse(("l1", l1))


def test_parse_duplicate_names() -> None:
    with pytest.raises(ValueError, match=r"stats=.*unique.*'mean'"):
        S.parse(["mean", "std", "mean"])


def test_parse_duplicate_histogram_name() -> None:
    with pytest.raises(ValueError, match=r"stats=.*hist_zero"):
        S.parse([S.histogram(), ("hist_zero", l1)])


def test_parse_empty() -> None:
    with pytest.raises(ValueError, match="stats="):
        S.parse([])


def test_parse_lambda_needs_a_name() -> None:
    with pytest.raises(ValueError, match=r'stats=.*\("name", fn\)'):
        S.parse([lambda t: t.sum()])


@pytest.mark.parametrize("spec", [False, None])
def test_parse_rejects_no_statistics(spec: Any) -> None:
    with pytest.raises(TypeError, match="stats="):
        S.parse(spec)


def test_parse_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="stats="):
        S.parse(3)  # type: ignore[arg-type]


def test_parse_rejects_bad_pair() -> None:
    with pytest.raises(ValueError, match="stats="):
        S.parse([("a", "b", l1)])  # type: ignore[list-item]


# --------------------------------------------------------------------------------------
# cache


class Counter:
    """A custom statistic counting how often the raw computation runs."""

    def __init__(self) -> None:
        self.calls = 0
        self.__name__ = "calls"

    def __call__(self, t: Tensor) -> Tensor:
        self.calls += 1
        return t.sum()


def test_cache_same_tensor_returns_same_stats() -> None:
    counter = Counter()
    fn = S.parse(["mean", counter])
    x = torch.randn(5)
    first = fn(x)
    assert fn(x) is first
    assert counter.calls == 1


def test_cache_in_place_change_recomputes() -> None:
    counter = Counter()
    fn = S.parse(["mean", counter])
    x = torch.zeros(5)
    first = fn(x)
    x.add_(1)
    second = fn(x)
    assert second is not first
    assert counter.calls == 2
    assert second.to_dict()["mean"] == 1.0


def test_cache_in_place_change_through_a_view_recomputes() -> None:
    counter = Counter()
    fn = S.parse([counter])
    x = torch.zeros(5)
    fn(x)
    x[1:3].fill_(2.0)
    assert fn(x).to_dict()["calls"] == 4.0
    assert counter.calls == 2


def test_cache_different_tensor_recomputes() -> None:
    counter = Counter()
    fn = S.parse([counter])
    x = torch.ones(5)
    first = fn(x)
    second = fn(x.clone())
    assert second is not first and counter.calls == 2


def test_cache_does_not_keep_tensor_alive() -> None:
    fn = S.parse(True)
    x = torch.randn(5)
    fn(x)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_cache_skips_inference_tensors() -> None:
    counter = Counter()
    fn = S.parse([counter])
    with torch.inference_mode():
        x = torch.ones(3)
        fn(x)
        x.add_(1)  # inference tensors have no version counter to notice this
        assert fn(x).to_dict()["calls"] == 6.0
    assert counter.calls == 2


# --------------------------------------------------------------------------------------
# stats_table


def assert_rows_equal(table: dict[str, list[Any]], rows: list[dict[str, Any]]) -> None:
    for name, column in table.items():
        for value, row in zip(column, rows, strict=True):
            expected = row.get(name, math.nan)
            if isinstance(expected, float) and math.isnan(expected):
                assert isinstance(value, float) and math.isnan(value), name
            else:
                assert value == expected, name


def test_stats_table_matches_to_dict() -> None:
    fn = S.parse([*ALL, S.histogram(bins=5)])
    stats = [fn(random_data((50,), torch.float32, seed=i)) for i in range(20)]
    stats.append(fn(torch.zeros(0)))
    table = S.stats_table(stats)
    assert list(table) == list(fn.names)
    assert all(len(column) == 21 for column in table.values())
    assert_rows_equal(table, [s.to_dict() for s in stats])


def test_stats_table_mixed_layouts_fill_nan_and_order_columns() -> None:
    a = S.parse(["max", "mean"])
    b = S.parse(["numel", "max", ("l1", l1), S.histogram(bins=2)])
    stats = [a(torch.ones(2)), b(torch.ones(3)), a(torch.zeros(1)), b(torch.full((2,), -1.0))]
    table = S.stats_table(stats)
    assert list(table) == ["max", "mean", "numel", "l1", *S.histogram(bins=2).names]
    assert table["mean"][1] != table["mean"][1]  # NaN
    assert table["hist"][0] != table["hist"][0]  # NaN where there is no histogram
    assert table["numel"][1] == 3.0 and table["max"] == [1.0, 1.0, 0.0, -1.0]
    assert_rows_equal(table, [s.to_dict() for s in stats])


def test_stats_table_same_spec_separate_fns() -> None:
    stats = [S.compute(torch.full((2,), float(i))) for i in range(5)]
    assert S.stats_table(stats)["mean"] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_stats_table_empty() -> None:
    assert S.stats_table([]) == {}


def test_stats_table_many_rows() -> None:
    fn = S.parse(True)
    data = torch.randn(300, 16, generator=torch.Generator().manual_seed(5))
    stats = [fn(row) for row in data]
    table = S.stats_table(stats)
    assert table["max"] == pytest.approx(data.amax(1).tolist())
    assert table["std"] == pytest.approx(data.double().std(1).tolist(), rel=1e-5)


# --------------------------------------------------------------------------------------
# histogram


def hist_reference(x: Tensor, edges: tuple[float, ...], log2: bool) -> dict[str, Any]:
    a = x.detach().to(torch.float64).reshape(-1).numpy()
    finite = a[np.isfinite(a)]
    if log2:
        finite = finite[finite != 0]
        with np.errstate(divide="ignore"):
            key = np.log2(np.abs(finite))
        zero = float(np.sum(a == 0))
    else:
        key, zero = finite, 0.0
    lo, hi = edges[0], edges[-1]
    inside = key[(key >= lo) & (key < hi)]  # numpy closes its last bin; ours is half-open
    return {
        "hist": np.histogram(inside, bins=np.array(edges))[0].astype(float).tolist(),
        "hist_below": float(np.sum(key < lo)),
        "hist_above": float(np.sum(key >= hi)),
        "hist_zero": zero,
        "hist_nonfinite": float(np.sum(~np.isfinite(a))),
        "hist_rejected": 0.0,
    }


def spread_data(dtype: torch.dtype) -> Tensor:
    gen = torch.Generator().manual_seed(6)
    exponents = torch.rand(20_000, generator=gen, dtype=torch.float64) * 60 - 40
    values = torch.randn(20_000, generator=gen, dtype=torch.float64).sign() * torch.exp2(exponents)
    powers = torch.exp2(torch.arange(-34, 19, dtype=torch.float64))  # exactly on edges
    special = torch.tensor([0.0, -0.0, 0.0, math.nan, math.inf, -math.inf], dtype=torch.float64)
    return torch.cat([values, powers, -powers, special]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_histogram_log2_matches_numpy(dtype: torch.dtype) -> None:
    x = spread_data(dtype)
    config = S.histogram()
    got = S.compute(x, [config]).to_dict()
    want = hist_reference(x, config.edges, log2=True)
    assert got == want
    assert want["hist_below"] > 0 and want["hist_above"] > 0 and want["hist_zero"] == 3


def test_histogram_linear_matches_numpy() -> None:
    gen = torch.Generator().manual_seed(9)
    edges = torch.linspace(-5.0, 5.0, 11)  # exactly on the bin edges, both range ends included
    x = torch.cat([torch.randn(20_000, generator=gen) * 3, edges, torch.zeros(4)])
    x[:3] = torch.tensor([math.nan, math.inf, -math.inf])
    config = S.histogram(bins=10, range=(-5.0, 5.0), log2=False)
    got = S.compute(x, [config]).to_dict()
    want = hist_reference(x, config.edges, log2=False)
    assert got == want
    assert got["hist_nonfinite"] == 3 and got["hist_zero"] == 0


def test_histogram_counts_add_up() -> None:
    x = spread_data(torch.float32)
    got = S.compute(x, [S.histogram(bins=7, range=(-10.0, 3.0))]).to_dict()
    extras = ("hist_below", "hist_above", "hist_zero", "hist_nonfinite", "hist_rejected")
    assert sum(got["hist"]) + sum(got[e] for e in extras) == x.numel()


def test_histogram_of_integers() -> None:
    x = torch.tensor([0, 1, 2, 3, 4, -4])
    got = S.compute(x, [S.histogram(bins=3, range=(0.0, 3.0))]).to_dict()
    assert got["hist"] == [1.0, 2.0, 2.0]  # [1,2) [2,4) [4,8)
    assert got["hist_zero"] == 1


def test_histogram_edges_and_log2() -> None:
    s = S.compute(torch.ones(2), ["mean", S.histogram(bins=4, range=(-2.0, 6.0), name="h")])
    assert s.edges("h") == (-2.0, 0.0, 2.0, 4.0, 6.0)
    assert s.is_log2("h") is True
    assert s.layout.histograms["h"].bins == 4
    with pytest.raises(KeyError, match="'mean' is not a histogram"):
        s.edges("mean")


def test_histogram_default_edges() -> None:
    edges = S.histogram().edges
    assert edges == tuple(np.linspace(-32.0, 16.0, 49).tolist())  # one bin per binade


def test_histogram_counts_readable_as_tensor() -> None:
    s = S.compute(torch.tensor([1.0, 1.5, 0.0]), [S.histogram(bins=2, range=(0.0, 2.0))])
    counts = s["hist"]
    assert counts.shape == (2,) and counts.dtype == torch.float64
    assert counts.tolist() == [2.0, 0.0]
    assert s["hist_zero"].dim() == 0


def test_histogram_sample_reproducible() -> None:
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(7))
    config = S.histogram(bins=16, range=(-8.0, 4.0), sample_n=1000, seed=3)
    first = S.parse([config])(x).to_dict()
    again = S.parse([config])(x).to_dict()
    other = S.parse([S.histogram(bins=16, range=(-8.0, 4.0), sample_n=1000, seed=4)])(x)
    assert first == again
    assert first["hist"] != other.to_dict()["hist"]
    total = sum(first["hist"]) + first["hist_below"] + first["hist_above"] + first["hist_zero"]
    assert total == 1000


def test_histogram_sample_larger_than_tensor_counts_everything() -> None:
    x = torch.randn(100)
    got = S.compute(x, [S.histogram(sample_n=1000)]).to_dict()
    assert got == S.compute(x, [S.histogram()]).to_dict()


def test_histogram_reject_sigma_excludes_outlier() -> None:
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(8)).clamp(-4, 4)
    x[17] = 1e6
    config = dict(bins=32, range=(-16.0, 8.0))
    plain = S.compute(x, [S.histogram(**config)]).to_dict()  # type: ignore[arg-type]
    kept = S.compute(x, [S.histogram(reject_sigma=6.0, **config)]).to_dict()  # type: ignore[arg-type]
    assert plain["hist_above"] == 1 and plain["hist_rejected"] == 0
    assert kept["hist_rejected"] == 1 and kept["hist_above"] == 0
    assert kept["hist"] == plain["hist"]


def test_histogram_reject_sigma_ignores_nonfinite() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, math.nan, math.inf])
    got = S.compute(x, [S.histogram(reject_sigma=1.0, bins=4, range=(-1.0, 3.0))]).to_dict()
    assert got["hist_nonfinite"] == 2
    assert got["hist_rejected"] == 2  # 1 and 3 are 1.22 population stds from the mean


@pytest.mark.parametrize(
    ("kwargs", "argument", "error"),
    [
        ({"bins": 0}, "bins", ValueError),
        ({"bins": 2.5}, "bins", TypeError),  # a wrong type is a TypeError (issue #26)
        ({"range": (1.0, 1.0)}, "range", ValueError),
        ({"range": (0.0, math.inf)}, "range", ValueError),
        ({"range": (0.0,)}, "range", ValueError),
        ({"sample_n": 0}, "sample_n", ValueError),
        ({"sample_n": 1.5}, "sample_n", TypeError),
        ({"reject_sigma": 0.0}, "reject_sigma", ValueError),
        ({"reject_sigma": -1.0}, "reject_sigma", ValueError),
        ({"name": ""}, "name", ValueError),
    ],
)
def test_histogram_validates_arguments(
    kwargs: dict[str, Any], argument: str, error: type[Exception]
) -> None:
    with pytest.raises(error, match=f"{argument}="):
        S.histogram(**kwargs)


def test_two_histograms_with_different_names() -> None:
    x = torch.tensor([0.5, 4.0])
    s = S.compute(x, [S.histogram(bins=2, range=(-2.0, 2.0), name="a"), S.histogram(name="b")])
    assert s["a"].tolist() == [1.0, 0.0] and s["a_above"].item() == 1.0
    assert s["b"].sum().item() == 2.0


# --------------------------------------------------------------------------------------
# compile


def test_compile_failure_falls_back_to_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fn: Any, **kwargs: Any) -> Any:
        def run(*args: Any) -> Tensor:
            raise RuntimeError("no compiler")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    fn = S.parse(True, compile=True)
    x = torch.randn(20)
    with pytest.warns(RuntimeWarning, match="no compiler"):
        got = fn(x).to_dict()
    assert got == S.compute(x).to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(torch.randn(3))  # warned once only


# --------------------------------------------------------------------------------------
# no host synchronisation on the hot path


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_host_sync_on_cuda() -> None:
    fn = S.parse(
        [
            *ALL,
            S.histogram(),
            S.histogram(name="sampled", sample_n=100, reject_sigma=3.0),
            S.histogram(name="linear", log2=False, range=(-4.0, 4.0)),
        ]
    )
    x = torch.randn(64, 257, device="cuda")
    x[0, 0] = math.nan
    inputs = [x, x.half(), x.to(torch.bfloat16), x.double(), x[:, 1:].t(), x.int(), x[:0]]
    for t in inputs:  # warm-up: per-device thresholds and generators are created once
        fn(t.clone())
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        results = [fn(t.clone()) for t in inputs]
        results.append(S.parse(True)(x.clone()))
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    got = results[0].to_dict()
    want = S.compute(x.cpu(), [*ALL, S.histogram()]).to_dict()
    assert got["nonfinite"] == 1 and got["hist"] == want["hist"]


def test_binade_fast_path_matches_the_general_path() -> None:
    # float32 takes the exponent-field path; the same values in float64 take the search path.
    torch.manual_seed(0)
    x = torch.cat(
        [
            torch.randn(5000) * torch.exp2(torch.randint(-40, 20, (5000,)).float()),
            torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 2.0**-32, 2.0**16]),
            torch.tensor([2.0**-130, -(2.0**-149), 2.0**-33, 2.0**16 * 1.5, 3e38]),
        ]
    )
    fn = S.parse([S.histogram()])
    fast, general = fn(x), fn(x.double())
    for name in fn.names:
        assert torch.equal(fast[name], general[name]), name
    assert fast["hist_zero"].item() == 2 and fast["hist_nonfinite"].item() == 3
    assert sum(fast[n].sum().item() for n in fn.names) == x.numel()
    # On the CPU the exponent counts are summed up on the host; accelerators use tensor ops.
    hist = fn._hists[0]
    assert hist.binade_offset is not None
    host = hist._binades_host(x, hist.binade_offset)
    assert torch.equal(kernels.host_tensor(host), hist._binades(x, hist.binade_offset))


def test_stats_survive_pickling_and_still_batch() -> None:
    import pickle

    fn = S.parse(["mean", "rms", ("l1", lambda t: t.abs().sum()), S.histogram(bins=4)])
    values = [fn(torch.randn(50)), fn(torch.randn(60) * 3)]
    restored = pickle.loads(pickle.dumps(values))
    assert restored[0].layout is restored[1].layout  # one layout: stats_table stacks them
    assert S.stats_table(restored) == S.stats_table(values)
    assert restored[1].edges("hist") == values[1].edges("hist")


def test_cpu_stats_pickle() -> None:
    import pickle

    stats = S.compute(torch.randn(100))
    restored = pickle.loads(pickle.dumps(stats))
    assert restored.to_dict() == stats.to_dict()
    assert restored.nbytes == stats.nbytes == 4 * 8


@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.0, 1.7, 1.8, 3.0, 30.0, 1e4])
def test_spread_accurate_at_any_mean_to_std_ratio(ratio: float) -> None:
    # Large float32 tensors, |mean| / std on both sides of where the one-pass CPU moments
    # hand over to the two-pass computation (sqrt(3)); std and rms against float64.
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(300_000, generator=gen) + ratio) * 0.37
    x64 = x.double()
    got = S.compute(x.view(600, 500).t(), ["mean", "std", "rms"]).to_dict()
    assert got["std"] == pytest.approx(x64.std().item(), rel=2e-5)
    assert got["rms"] == pytest.approx(x64.square().mean().sqrt().item(), rel=2e-5)
    assert got["mean"] == pytest.approx(x64.mean().item(), rel=1e-5, abs=1e-6)


def test_complex_tensors_are_summarised_by_their_magnitudes() -> None:
    z = torch.tensor([3j, -4j, 0j])
    got = S.compute(z, ["mean", "rms", "abs_max", "min", "max", "zero_frac", "numel"]).to_dict()
    assert got == pytest.approx(
        {
            "mean": 7 / 3,
            "rms": math.sqrt(25 / 3),
            "abs_max": 4.0,
            "min": 0.0,
            "max": 4.0,
            "zero_frac": 1 / 3,
            "numel": 3.0,
        }
    )
    seen = []
    S.compute(z, [("kind", lambda t: seen.append(t.dtype) or t.abs().sum())])
    assert seen == [torch.complex64]  # custom statistics get the complex tensor itself


@pytest.mark.parametrize("spec", [S.DEFAULT, ["mean", "max"], ["sum"], ALL], ids=str)
def test_the_store_keeps_what_raw_computes(spec: Sequence[str]) -> None:
    # What a tracker records through `StatsStore.put` is `StatsFn.raw`'s vector, bit for
    # bit, for every layout (small transposed tensors are copied by `flat`, large ones
    # viewed) and dtype.
    fn = S.parse(spec)
    store = fn.store()
    x = random_data((64, 32, 40), torch.float32, seed=7)
    tensors = [
        x,
        x.double(),
        x.permute(2, 0, 1),  # large, dense: viewed
        x[:4].transpose(0, 1),  # small: copied
        x[:, 1:],  # not dense
        x.requires_grad_(True),
        torch.tensor(2.5),
        torch.empty(0, 3),
        x[:4].bfloat16(),
        x[:4].to(torch.int32),
        x[:8, :8, 0].to_sparse(),
    ]
    for t in tensors:
        raw, numel = fn.raw(t)
        kept = store.get(store.put(t))
        assert kept.numel == numel
        want = list(
            fn.layout._empty_values
            if raw is None
            else raw.tolist()
            if isinstance(raw, Tensor)
            else raw
        )
        got = kept.raw.tolist()
        same = [a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, want, strict=True)]
        assert all(same), t.dtype
