"""What the report page of a `Comparison` adds to that of its first run: the error of
every record over the steps, its status, the counts and the first divergences."""

from __future__ import annotations

import math
from typing import Any

from .._data.compare import Comparison
from .._optional import require

__all__ = ["comparison_payload"]

# The page's status codes: nothing aligned at that step, bitwise equal, within, beyond.
_CODES = {"equal": 0, "within": 1, "beyond": 2}


def _floats(values: Any) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in values]


def comparison_payload(cmp: Comparison, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload["compare"]` for the report of run `a` in `payload`: per series of the
    payload (module, kind, attr, grad) and step, the largest error over the calls and the
    worst status (`null`/-1 where nothing was aligned); the error column's name, the
    tolerance, the counts and the first divergences."""
    np = require("numpy", "pandas")
    frame = cmp.to_frame()
    column = cmp.error_column
    frame["_code"] = [_CODES[s] for s in cmp.status()]
    steps = payload["steps"]
    step_index = {s: i for i, s in enumerate(steps)}
    names = [m["name"] for m in payload["modules"]]
    grouped = {
        (str(name), str(kind), str(attr), bool(grad)): rows
        for (name, kind, attr, grad), rows in frame.groupby(
            ["name", "kind", "attr", "grad"], sort=False
        )
    }
    series = []
    for entry in payload["series"]:
        key = (names[entry["module"]], entry["kind"], entry["attr"], entry["grad"])
        rows = grouped.get(key)
        errors = np.full(len(steps), np.nan)
        codes = np.full(len(steps), -1)
        if rows is not None:
            # Shapes that differ have no error but are beyond: drawn at the top.
            values = rows[column].to_numpy(dtype=float)
            values = np.where(np.isnan(values) & (rows["_code"].to_numpy() == 2), np.inf, values)
            for step, value, code in zip(rows["step"], values, rows["_code"], strict=True):
                i = step_index.get(int(step))
                if i is None:
                    continue
                errors[i] = value if np.isnan(errors[i]) else max(errors[i], value)
                codes[i] = max(codes[i], int(code))
        series.append({"error": _floats(errors), "status": [int(c) for c in codes]})
    first = {}
    for grad, label in ((False, "forward"), (True, "gradient")):
        d = cmp.first_divergence(grad=grad)
        first[label] = None if d is None else {"name": d.name, "step": d.step, "text": str(d)}
    return {
        "column": column,
        "tolerance": f"rtol={cmp.rtol:g}, atol={cmp.atol:g}",
        "counts": cmp.counts(),
        "first": first,
        "series": series,
    }
