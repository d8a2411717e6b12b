"""What the report page of a `Comparison` adds to that of its first run: the error of
every record over the steps, its status, the counts and the first divergences."""

from __future__ import annotations

import base64
import math
from typing import Any

from .._data.compare import Comparison
from .._optional import require

__all__ = ["comparison_payload"]

# The page's status codes: nothing aligned at that step, bitwise equal, within, beyond.
_CODES = {"equal": 0, "within": 1, "beyond": 2}


def _floats(values: Any) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in values]


def _recorded_names(payload: dict[str, Any]) -> list[str]:
    """Per row of the page's module list, the module its records were recorded in: an op
    or tap row's (`"of"`) is its module's."""
    modules = payload["modules"]
    return [modules[m["of"]]["name"] if "of" in m else m["name"] for m in modules]


def _run_b(cmp: Comparison, payload: dict[str, Any], b: dict[str, Any]) -> list[Any]:
    """Per series of run a's `payload`: run b's statistics at run a's steps (float32
    base64, as run a's; NaN where b has no value), or `None` when run b did not record
    that series. `b` is the payload of run b; a's names are mapped to b's as `compare`
    aligned them."""
    np = require("numpy", "pandas")
    frame = cmp.to_frame()
    to_b = dict(zip(frame["name"], frame["name_b"], strict=True))
    names = _recorded_names(payload)
    names_b = _recorded_names(b)
    at = {s: i for i, s in enumerate(b["steps"])}
    where = [at.get(s, -1) for s in payload["steps"]]
    index = {(names_b[e["module"]], e["kind"], e["attr"], e["grad"]): e for e in b["series"]}
    out: list[Any] = []
    for entry in payload["series"]:
        name = names[entry["module"]]
        other = index.get((to_b.get(name, name), entry["kind"], entry["attr"], entry["grad"]))
        if other is None:
            out.append(None)
            continue
        stats = {}
        for stat, text in other["stats"].items():
            if stat not in entry["stats"]:
                continue
            values = np.frombuffer(base64.b64decode(text), dtype="<f4")
            aligned = np.array([values[i] if i >= 0 else np.nan for i in where], dtype="<f4")
            stats[stat] = base64.b64encode(aligned.tobytes()).decode()
        out.append(stats)
    return out


def comparison_payload(
    cmp: Comparison, payload: dict[str, Any], b: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`payload["compare"]` for the report of run `a` in `payload`: per series of the
    payload (module, kind, attr, grad) and step, the largest error over the calls and the
    worst status (`null`/-1 where nothing was aligned); the error column's name, the
    tolerance (as text, and rtol, atol and the epsilon that is its unit, for the page's
    control), the counts and the first divergences; with `b`, the payload of run b, each
    series' values in run b (`b`: None where run b did not record it) and run b's logged
    scalars, so that the page overlays both runs."""
    np = require("numpy", "pandas")
    frame = cmp.to_frame()
    column = cmp.error_column
    frame["_code"] = [_CODES[s] for s in cmp.status()]
    steps = payload["steps"]
    step_index = {s: i for i, s in enumerate(steps)}
    names = _recorded_names(payload)
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
    if b is not None:
        for entry, values in zip(series, _run_b(cmp, payload, b), strict=True):
            entry["b"] = values
    first = {}
    for grad, label in ((False, "forward"), (True, "gradient")):
        d = cmp.first_divergence(grad=grad)
        first[label] = None if d is None else {"name": d.name, "step": d.step, "text": str(d)}
    return {
        "column": column,
        "tolerance": f"rtol={cmp.rtol:g}, atol={cmp.atol:g}",
        "rtol": cmp.rtol,
        "atol": cmp.atol,
        "eps": cmp.eps,
        "logB": None if b is None else b["log"]["scalars"],
        "counts": cmp.counts(),
        "first": first,
        "series": series,
    }
