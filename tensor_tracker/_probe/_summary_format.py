"""A `Summary` as text: the table `print(summary)` shows (torchinfo's), its HTML for
notebooks, and the calls nested by module tree for `to_dict` / `to_json`."""

from __future__ import annotations

import dataclasses
import html
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._summary_data import ModuleCall, Summary

__all__ = ["html_table", "json_text", "nested", "table_header", "text_table"]


def _finite(value: Any) -> Any:
    """`value` with every non-finite float inside its dicts, lists and tuples replaced by
    None: `json.dumps` writes them as bare `NaN` and `Infinity`, which are not JSON
    (JavaScript's `JSON.parse` and jq reject the whole text)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


def table_header(s: Summary) -> list[str]:
    """The table's column titles (a memory column when the pass ran on a GPU)."""
    memory = ["fwd peak MiB"] if s.device is not None else []
    return ["module (type)", "output shape", "params", "fwd ms", "bwd ms", *memory, ""]


def _rows(s: Summary, depth: int | None) -> list[list[str]]:
    rows = []
    for c in s.calls:
        if depth is not None and c.depth > depth:
            continue
        label = "  " * c.depth + (c.name.rsplit(".", 1)[-1] or "(model)")
        if c.call:
            label += f" #{c.call}"
        # A Hugging Face model returns its cache too: the first shapes say enough.
        shapes = ", ".join(str(list(s)) for s in c.output_shapes[:2])
        shapes = shapes or ("not recorded" if s.not_recorded else "-")
        if len(c.output_shapes) > 2:
            shapes += f" (+{len(c.output_shapes) - 2} more)"
        flag = "NaN/inf" if c.output_nonfinite or c.grad_input_nonfinite else ""
        memory = []
        if s.device is not None:
            peak = c.forward_peak_bytes
            memory.append("-" if peak is None else f"{peak / 2**20:.2f}")
        rows.append(
            [
                f"{label} ({c.type.rsplit('.', 1)[-1]})",
                shapes,
                f"{c.params:,}" if c.params else "-",
                _ms(c.forward_ms),
                _ms(c.backward_ms),
                *memory,
                flag,
            ]
        )
    return rows


def text_table(s: Summary, depth: int | None) -> str:
    """The text table of `s`, down to `depth` levels (`None`: all)."""
    titles = table_header(s)
    rows = [titles, *_rows(s, depth)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(titles))]
    line = "-" * (sum(widths) + 2 * (len(widths) - 1))
    out = [line]
    for i, row in enumerate(rows):
        out.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            out.append(line)
    return "\n".join([*out, line, *_totals(s), line])


def _totals(s: Summary) -> list[str]:
    if s.forward_ms != s.forward_ms:
        times = "Times: not measured (a tracker's recording; summary(model, x) times them)"
    else:
        times = f"Forward: {_ms(s.forward_ms)} ms, backward: {_ms(s.backward_ms)} ms ({s.timing})"
    lines = [
        f"Total params: {s.total_params:,} (trainable: {s.trainable_params:,}, "
        f"{s.param_bytes / 2**20:.2f} MiB)",
        times,
    ]
    if s.not_recorded is not None:
        lines.append(f"Shapes, dtypes and bytes: not recorded ({s.not_recorded})")
    if s.peak_bytes is not None:
        lines.append(f"Peak memory of the pass on {s.device}: {s.peak_bytes / 2**20:.2f} MiB")
    return lines


def html_table(s: Summary) -> str:
    """The table as HTML, for a notebook's display."""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in table_header(s))
    body = [f"<tr>{cells}</tr>"]
    for row in _rows(s, None):
        indent = len(row[0]) - len(row[0].lstrip(" "))
        name = "&nbsp;" * indent + html.escape(row[0].lstrip(" "))
        rest = "".join(f"<td>{html.escape(v)}</td>" for v in row[1:])
        body.append(f"<tr><td style='text-align:left'>{name}</td>{rest}</tr>")
    totals = "<br>".join(html.escape(line) for line in _totals(s))
    return f"<table>{''.join(body)}</table><p>{totals}</p>"


def nested(calls: Sequence[ModuleCall]) -> dict[str, Any]:
    """`calls` nested by module tree (see `Summary.to_dict`)."""
    nodes: list[dict[str, Any]] = []
    root: dict[str, Any] = {}
    for call in calls:
        node: dict[str, Any] = {"info": dataclasses.asdict(call), "children": {}}
        nodes.append(node)
        short = call.name.rsplit(".", 1)[-1] if call.parent >= 0 else "model"
        parent = nodes[call.parent]["children"] if call.parent >= 0 else root
        parent[short if short not in parent else f"{short}#{call.call}"] = node
    return root


def json_text(data: dict[str, Any], **kwargs: Any) -> str:
    """`data` as JSON text, non-finite numbers as `null`."""
    return json.dumps(_finite(data), **kwargs)
