"""The report's sample panel: for a recording of full copies, each sample's values per
channel at every module and every sample's rms across the batch, per step, within a size
budget (the page must open quickly)."""

from __future__ import annotations

import base64
from typing import Any

import torch

from .._data.samples import OUTLIER_RATIO, sample_rows
from ..errors import TensorTrackerError

__all__ = ["SAMPLE_FLOATS", "samples_payload"]

SAMPLE_FLOATS = 1 << 20
"""The most numbers (float32) the report embeds for its sample panel: 4 MiB, about 5.6 MB
of the page. The last steps come first; a step whose values at every position do not fit
keeps each channel's value of largest magnitude over the positions; from the first step
that does not fit even so, the steps are left out (the panel says so)."""


def _floats(values: torch.Tensor) -> str:
    """float32 little-endian bytes, base64 (the page's `floats()` reads them)."""
    data = values.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
    return base64.b64encode(data).decode()


def _finite(values: torch.Tensor) -> list[float | None]:
    """JSON numbers: NaN and infinities as `null` (strict JSON has neither)."""
    return [v if v == v and abs(v) != float("inf") else None for v in values.tolist()]


def samples_payload(
    recording: Any, steps: list[int], modules: list[str], index: dict[str, int]
) -> dict[str, Any] | None:
    """The sample panel's data for `recording` (full copies), whose page shows `steps` and
    the rows `modules` (`index`: each row's index by the name `sample_rows` gives it, an op
    or tap's `"softmax#0 of 0.attn"`); `None` when no step's outputs split into samples.

    Per step shown (by index into `steps`): per module, its channel and position counts,
    the values `[batch, positions, channels]` (or `[batch, channels]`, each channel's
    value of largest magnitude over the positions, when the budget is spent), each
    sample's rms and largest |value|, and the sample that stands out most from its batch
    (`SampleStats.outlier`, by rms).
    """
    out: dict[str, Any] = {}
    left = SAMPLE_FLOATS
    omitted: list[int] = []
    for k in range(len(steps) - 1, -1, -1):
        try:
            rows = sample_rows(recording, "report", steps[k], 0, False, None, 0, None)
        except TensorTrackerError:  # this step's outputs do not split into samples
            continue
        full = sum(r.numel() for r in rows.positions)
        peak = sum(r.shape[0] * r.shape[2] for r in rows.positions)
        if full > left and peak > left:  # and the steps before it: not even read
            omitted.extend(steps[: k + 1])
            break
        positions = full <= left
        left -= full if positions else peak
        stats = rows.stats
        entries = []
        for m, (name, x) in enumerate(zip(stats.names, rows.positions, strict=True)):
            if name not in index:
                continue
            if not positions:  # each channel's value of largest magnitude, its sign kept
                at = x.abs().nan_to_num(float("inf")).argmax(dim=1, keepdim=True)
                x = x.gather(1, at)
            entries.append(
                {
                    "module": index[name],
                    "channels": x.shape[2],
                    "positions": rows.positions[m].shape[1],
                    "values": _floats(x),
                    "stored": x.shape[1],  # positions stored: all, or 1 (the largest)
                    "rms": _finite(stats.rms[m]),
                    "absMax": _finite(stats.abs_max[m]),
                    "ratio": _finite(stats.ratio("rms")[m].clamp(max=1e30)),
                }
            )
        score = stats.score("rms")
        outlier = int(score.argmax())
        out[str(k)] = {
            "batch": stats.batch_size,
            "modules": entries,
            "outlier": outlier,
            "score": min(float(score[outlier]), 1e30),
            # Whether it stands out enough to be marked (SampleStats.outliers' rule).
            "flagged": outlier in stats.outliers("rms"),
            "threshold": OUTLIER_RATIO,
            "skipped": {modules[index[n]]: why for n, why in stats.skipped.items() if n in index},
        }
    if not out:
        return None
    return {"steps": out, "omitted": sorted(omitted), "budget": SAMPLE_FLOATS}
