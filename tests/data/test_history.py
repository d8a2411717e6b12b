"""History curves: the mean over calls of each step, log2, and buckets of steps that keep
each bucket's extremes, checked against a plain reference."""

from __future__ import annotations

import math
import random

import pytest

from tensor_tracker._data.history import curves


def reference(
    names: list[str], steps: list[int], values: list[float], max_points: int
) -> dict[str, tuple[list[float], list[float], list[float], list[float]]]:
    cells: dict[tuple[str, int], list[float]] = {}
    for name, step, value in zip(names, steps, values, strict=True):
        cells.setdefault((name, step), []).append(value)
    all_steps = sorted(set(steps))
    size = max(1, math.ceil(len(all_steps) / max_points))
    out = {}
    for module in dict.fromkeys(names):
        buckets: dict[int, list[tuple[int, float]]] = {}
        for i, step in enumerate(all_steps):
            if (module, step) in cells:
                kept = [v for v in cells[module, step] if not math.isnan(v)]
                mean = abs(sum(kept) / len(kept)) if kept else math.nan
                y = math.log2(mean) if 0 < mean < math.inf else math.nan
                buckets.setdefault(i // size, []).append((step, y))
        x, y, lo, hi = [], [], [], []
        for points in buckets.values():
            finite = [v for _, v in points if not math.isnan(v)]
            x.append(sum(s for s, _ in points) / len(points))
            y.append(sum(finite) / len(finite) if finite else math.nan)
            lo.append(min(finite) if finite else math.nan)
            hi.append(max(finite) if finite else math.nan)
        out[module] = (x, y, lo, hi)
    return out


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(p) and math.isnan(q)) or math.isclose(p, q, rel_tol=1e-12, abs_tol=1e-12)
        for p, q in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(("n_steps", "max_points"), [(5, 400), (50, 7), (1000, 400), (37, 2)])
def test_curves_match_a_plain_reference(n_steps: int, max_points: int) -> None:
    rng = random.Random(n_steps)
    names, steps, values = [], [], []
    for step in sorted(rng.sample(range(10 * n_steps), n_steps)):
        for module in ("a", "b", "c"):
            if rng.random() < 0.8:  # some modules miss some steps
                for _ in range(rng.randint(1, 3)):  # several calls in a step
                    names.append(module)
                    steps.append(step)
                    r = rng.random()
                    special = [math.nan, 0.0, math.inf, -2.0]
                    values.append(special[int(r * 40)] if r < 0.1 else rng.uniform(-5, 5))
    got = curves(names, steps, values, max_points)
    expected = reference(names, steps, values, max_points)
    assert list(got) == list(expected)
    for module, (x, y, lo, hi) in expected.items():
        curve = got[module]
        assert same(curve.x, x) and same(curve.y, y), module
        assert same(curve.lo, lo) and same(curve.hi, hi), module
        assert (curve.lo is curve.y) == (math.ceil(len(set(steps)) / max_points) == 1)
