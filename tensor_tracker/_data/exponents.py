"""Number-format fractions read after the fact from the recorded exponent histogram."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._optional import require
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats._spec import EXP_HIST
from ..stats.formats import FORMATS
from .frame import recording_frame

if TYPE_CHECKING:
    import pandas

__all__ = ["RECORD_HINT", "format_fractions"]

RECORD_HINT = 'record it with track(model, stats=[*tensor_tracker.stats.DEFAULT, "exp_hist"])'
"""The one line that says how to record the exponent histogram."""

_LO = int(EXP_HIST.range[0])
_EXTRAS = ("below", "above", "zero", "nonfinite", "rejected")


def format_fractions(recording: Any, formats: tuple[str, ...] | None = None) -> pandas.DataFrame:
    """Every number format's overflow, underflow and subnormal fractions, per record, read
    from the recorded exponent histogram (`"exp_hist"`) instead of recorded one by one.

    Fractions are over all the values of each tensor, with the definitions of the
    `F_overflow`, `F_underflow` and `F_subnormal` statistics, with these differences, all
    due to the histogram counting whole powers of two:

    - `F_underflow` (`0 < |x| < min_subnormal`) and `F_subnormal` (`0 < |x| <
      min_normal`): exact for `fp16`, `fp8_e4m3`, `fp8_e5m2` (their limits are powers of
      two) and for `bf16_subnormal`. `bf16_underflow` (below `2**-133`) is an upper bound:
      it counts every float32 subnormal (`exp_hist_below`, below `2**-126`).
    - `F_overflow`: no format's maximum is a power of two, so this is a lower bound, the
      finite values at or above the power of two above the maximum (`2**16` for fp16,
      `2**9` for fp8_e4m3 (max 448)...), and `F_overflow_upper` an upper bound, which adds
      the binade holding the maximum (`[2**15, 2**16)` for fp16). The exact fraction lies
      between. ±inf are not counted: the histogram counts them with NaN in
      `exp_hist_nonfinite` (the `nonfinite` column).

    Args:
        recording: a `Tracker` (or list of `Stash`) recorded with `"exp_hist"` in its
            stats spec, or its `to_frame()`.
        formats: keys of `tensor_tracker.formats.FORMATS` to compute; `None`: all of them.

    Returns:
        A DataFrame with the index of the recording's frame and, for each format `F`,
        columns `F_overflow`, `F_overflow_upper`, `F_underflow`, `F_subnormal`, plus
        `nonfinite` (count of NaN and ±inf); NaN in rows without a histogram.

    Raises:
        ArgumentValueError: nothing recorded an exponent histogram, or an unknown format.

    Example:
        >>> import torch, tensor_tracker
        >>> m = torch.nn.Identity()
        >>> with tensor_tracker.track(m, stats=["rms", "exp_hist"]) as t:
        ...     _ = m(torch.tensor([1e5, 1.0, 0.0, 1e-9]))
        >>> f = format_fractions(t)
        >>> f.loc[0, ["fp16_overflow", "fp16_underflow", "fp8_e4m3_underflow"]].tolist()
        [0.25, 0.25, 0.25]
    """
    pd = require("pandas", "pandas")
    np = require("numpy", "pandas")
    keys = tuple(FORMATS) if formats is None else tuple(formats)
    unknown = [k for k in keys if k not in FORMATS]
    if unknown:
        raise ArgumentValueError(
            f"format_fractions(formats=...): unknown formats {unknown}; known: {list(FORMATS)}"
        )
    if isinstance(recording, pd.DataFrame):
        frame = recording
    else:
        frame, _ = recording_frame(recording, "format_fractions")
    if not isinstance(frame, pd.DataFrame):
        raise ArgumentTypeError("format_fractions: pass a Tracker or its to_frame()")
    name = EXP_HIST.name
    if name not in frame.columns:
        raise ArgumentValueError(
            f"format_fractions: no exponent histogram was recorded; {RECORD_HINT}"
        )
    bins = EXP_HIST.bins
    n_rows = len(frame)
    held = np.array([hasattr(v, "__len__") and not isinstance(v, str) for v in frame[name]], bool)
    counts = np.full((n_rows, bins), math.nan)
    if held.any():
        counts[held] = np.array([list(v) for v, h in zip(frame[name], held, strict=True) if h])
    extra = {e: frame[f"{name}_{e}"].to_numpy(dtype=np.float64) for e in _EXTRAS}
    total = counts.sum(1) + sum(extra.values())
    # Counts below binade e: the subnormals of float32 plus the bins under e.
    below_binade = (
        np.concatenate((np.zeros((n_rows, 1)), np.cumsum(counts, 1)), axis=1)
        + extra["below"][:, None]
    )

    def under(limit: float) -> Any:
        e = math.log2(limit)
        if e <= _LO:
            return extra["below"]  # every float32 subnormal: an upper bound unless e == _LO
        return below_binade[:, int(e) - _LO]

    out: dict[str, Any] = {}
    with np.errstate(invalid="ignore", divide="ignore"):  # empty tensors: 0 / 0 is NaN
        for key in keys:
            _add_format(out, key, counts, extra["above"], total, under)
    out["nonfinite"] = extra["nonfinite"]
    result: pandas.DataFrame = pd.DataFrame(out, index=frame.index)
    return result


def _add_format(
    out: dict[str, Any], key: str, counts: Any, beyond: Any, total: Any, under: Any
) -> None:
    f = FORMATS[key]
    top = math.floor(math.log2(f.max))  # the binade holding the maximum
    above = counts[:, top + 1 - _LO :].sum(1) + beyond
    out[f"{key}_overflow"] = above / total
    out[f"{key}_overflow_upper"] = (above + counts[:, top - _LO]) / total
    out[f"{key}_underflow"] = under(f.min_subnormal) / total
    out[f"{key}_subnormal"] = under(f.min_normal) / total
