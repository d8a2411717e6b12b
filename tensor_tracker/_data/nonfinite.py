"""`first_nonfinite`: where the first NaN or infinity of a recording appeared."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .._core.records import Stash, Unrecorded
from .._core.structure import iter_tensors
from .._optional import require
from ..errors import NotRecordedError
from .frame import first_stats, holds_copies, later_tensor_stats, recording_frame, to_frame
from .select import CHILD_KINDS, member_label

if TYPE_CHECKING:
    import pandas

__all__ = ["NonFinite", "first_nonfinite", "nonfinite_flags"]

# Statistics that are NaN or infinite exactly when the tensor holds a NaN or an infinity
# (`std` is NaN for one element, and a mean can overflow on finite values: not these).
_EXACT = ("nonfinite", "min", "max", "abs_max")
# Without those: statistics that are NaN or infinite whenever the tensor is, and also when
# its finite values overflow them (beyond ~3.4e38 in float32).
_PROPAGATING = ("sum", "mean", "rms", "abs_mean")


@dataclasses.dataclass(frozen=True)
class NonFinite:
    """Where the first non-finite value (NaN or ±inf) of a recording appeared.

    Attributes:
        name: the module held responsible (`""` for the root): the one whose forward turned
            finite inputs into a non-finite output, or whose backward turned a finite
            gradient into a non-finite one.
        grad: `True` when it appeared in the backward pass.
        step: the step it appeared in.
        explanation: one line saying what happened there.
        seen_in: the record where it was first seen, as `(name, kind, attr, grad)`; for a
            gradient that is often the module *before* `name` in the forward order (the
            backward of `name` computed the gradient of its input, which is that module's
            output).
        row: the index of that record in the recording (`tracker[row]`, `to_frame().iloc`).
        evidence: the frame rows of `name` and of `seen_in` in that step (their statistics).
        op: when an operation (`track(..., ops=...)`) or a `tap` inside `name`'s forward
            made it, that record's attr (`"softmax#0"`), else `""`.

    Example:
        >>> found = first_nonfinite(tracker)   # None when every value was finite
    """

    name: str
    grad: bool
    step: int
    explanation: str
    seen_in: tuple[str, str, str, bool]
    row: int
    evidence: pandas.DataFrame = dataclasses.field(repr=False, compare=False)
    op: str = ""


def _flags_from_values(stashes: Sequence[Stash]) -> list[bool]:
    def bad(value: Any) -> bool:
        return any(
            (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())
            for t in iter_tensors(value)
        )

    return [bad(s.value) for s in stashes]


def _nonfinite_column(frame: pandas.DataFrame, stashes: Sequence[Stash]) -> Any:
    """Per row, whether the recorded value held a NaN or an infinity."""
    np = require("numpy", "pandas")
    if holds_copies(stashes):
        if len(stashes) and not any(next(iter_tensors(s.value), None) is not None for s in stashes):
            # Nothing to look at (e.g. every copy failed: an Unrecorded each): "no NaN"
            # would be an answer the recording cannot give.
            reasons = {s.value.reason for s in stashes if isinstance(s.value, Unrecorded)}
            raise NotRecordedError(
                f"first_nonfinite(recording): none of its {len(stashes)} records holds a "
                "tensor to check"
                + (f" (not recorded: {'; '.join(sorted(reasons)[:3])})" if reasons else "")
                + ": record full copies or stats=True"
            )
        return np.array(_flags_from_values(stashes), dtype=bool)  # full copies
    exact = [c for c in _EXACT if c in frame.columns]
    if "nonfinite" in exact:
        return (frame["nonfinite"] > 0).to_numpy()
    if not exact:
        exact = [c for c in _PROPAGATING if c in frame.columns]
    if not exact:
        raise NotRecordedError(
            "first_nonfinite needs the statistics min and max, nonfinite, or at least sum "
            "or mean: record with stats=True or e.g. stats=['sum']"
        )
    values = frame[exact].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values).all(axis=1)
    # Empty tensors and values without statistics have NaN there too.
    if "numel" in frame.columns:
        numel = frame["numel"].to_numpy(dtype=np.float64)
    else:
        found = (first_stats(s.value) for s in stashes)
        numel = np.array([0 if f is None else f.numel for f in found], dtype=np.float64)
    bad &= numel > 0
    # The frame shows a value's first tensor; a NaN in another (the second output of a
    # tuple) must count for its record too.
    for rows, table in later_tensor_stats(stashes):
        if len(rows) and all(c in table for c in exact):
            others = np.column_stack([np.asarray(table[c], dtype=np.float64) for c in exact])
            counted = np.asarray(table["numel"], dtype=np.float64) > 0 if "numel" in table else True
            np.logical_or.at(bad, rows, ~np.isfinite(others).all(axis=1) & counted)
    return bad


def nonfinite_flags(stashes: Sequence[Stash]) -> Any:
    """Per record, whether its value held a NaN or an infinity (a numpy bool array), as
    `first_nonfinite` reads it (every tensor of a value, not only the first that `to_frame`
    shows); all False when the statistics recorded cannot tell."""
    np = require("numpy", "pandas")
    try:
        return _nonfinite_column(to_frame(stashes), stashes)
    except NotRecordedError:
        return np.zeros(len(stashes), dtype=bool)


def _enclosing(name: str, names: set[str]) -> str:
    """The closest registered module containing `name` (its parent), else `name`."""
    parts = name.split(".") if name else []
    for i in range(len(parts) - 1, -1, -1):
        candidate = ".".join(parts[:i])
        if candidate in names:
            return candidate
    return name


def first_nonfinite(recording: Any) -> NonFinite | None:
    """Where the first NaN or infinity of a recording appeared, or `None` if there is none.

    Looks through the records in the order they were made (each step's forward pass, then
    its backward pass, step after step) for the first non-finite value, and works out which
    module made it:

    - a module's **output** is the first non-finite value: that module's forward made it
      (with `capture=("inputs", "outputs")` its inputs are checked to have been finite);
    - an **operation**'s result (`track(..., ops=...)`) or a **tapped** value is: that
      operation (or the code before the `tap`) in its module's forward made it, and
      `NonFinite.op` names it (a softmax over an all-masked row names `"softmax#0"`, not
      the attention module);
    - a module's **input** is: it arrived from outside every module recorded so far, so
      from the batch when nothing was computed yet in that step, otherwise from the code of
      the enclosing module that runs between its children;
    - a **gradient** of a module's input (with `capture=("inputs", ...)`) or parameter:
      that module's backward made it;
    - a gradient of a module's **output**: the backward of the module that used that output
      made it, which is the module whose gradient was recorded just before (or the loss,
      computed outside the model, when none was);
    - a **parameter** or **optimizer state**: it was already there (an earlier update).

    With `stats=` the check reads the recorded `min`/`max` (or `nonfinite`) of every tensor
    of each value, the second of a tuple output too (without those, `sum`, `mean`, `rms` or
    `abs_mean`, which are also non-finite when finite values overflow them); with full
    copies, every tensor of each value is checked. `track(..., on_nonfinite="raise")`
    stops a run at the first one.

    Args:
        recording: a `Tracker` (or a list of `Stash`).

    Returns:
        A `NonFinite` with the module, step, an explanation and the evidence rows, or `None`.

    Raises:
        TypeError: `recording` is not a tracker or a list of stashes.
        KeyError (`NotRecordedError`): a statistics recording with none of the statistics
            above, or records that hold no tensor at all (every copy `Unrecorded`).

    Example:
        >>> with track(model, stats=True, capture=("inputs", "outputs")) as t:
        ...     model(x).sum().backward()
        >>> first_nonfinite(t) is None
        True
    """
    frame, stashes = recording_frame(recording, "first_nonfinite(recording)")
    np = require("numpy", "pandas")
    bad = _nonfinite_column(frame, stashes)
    hits = np.flatnonzero(bad)
    if not len(hits):
        return None
    row = int(hits[0])
    first = frame.iloc[row]
    name, kind, attr, grad = (
        str(first["name"]),
        str(first["kind"]),
        str(first["attr"]),
        bool(first["grad"]),
    )
    step = int(first["step"])
    same_step = frame.index[frame["step"] == step]
    earlier = frame.loc[same_step[same_step < row]]
    origin, op = name, ""
    where = f"the {kind} {attr + ' ' if attr else ''}of {name or '<root>'!r}"
    # Values computed in the forward, whose gradients the backward passes on.
    computed_kinds = ("output", *CHILD_KINDS)
    if not grad and kind in CHILD_KINDS:
        # Recorded inside the module's forward, before its output: the operation (or the
        # code before the tap) made it, not the module as a whole.
        op = attr
        made = "returned" if kind == "op" else "was given"
        explanation = (
            f"{member_label(name, kind, attr)!r} {made} a non-finite value, every value "
            "recorded before it being finite"
        )
    elif not grad and kind == "output":
        explanation = f"the forward of {name or '<root>'!r} returned a non-finite output"
        inputs = earlier[(earlier["name"] == name) & (earlier["kind"] == "input")]
        if not len(inputs):
            explanation += (
                " (its inputs were not recorded: capture=('inputs', 'outputs') checks them)"
            )
        else:
            explanation += " from finite inputs"
    elif not grad and kind == "input":
        computed = earlier[(~earlier["grad"]) & (earlier["kind"].isin(computed_kinds))]
        if not len(computed):
            explanation = f"{where} was non-finite on arrival: it came in with the batch"
        else:
            origin = _enclosing(name, set(frame["name"]))
            explanation = (
                f"{where} was non-finite although every module output before it was finite: "
                f"it was computed in the forward of {origin or '<root>'!r}, between its "
                "submodules"
            )
    elif kind in ("param", "optimizer") and not grad:
        explanation = f"{where} was already non-finite (an earlier update wrote it)"
    elif kind in ("input", "param"):
        explanation = (
            f"the backward of {name or '<root>'!r} produced a non-finite gradient of its "
            f"{kind} {attr}".rstrip()
        )
    else:  # the gradient of an output: made by the backward of whoever used the output
        grads_before = earlier[earlier["grad"] & (earlier["kind"].isin(computed_kinds))]
        of = (
            f"the {attr} of {name or '<root>'!r}"
            if kind in CHILD_KINDS
            else (f"the output of {name or '<root>'!r}")
        )
        if len(grads_before):
            last = grads_before.iloc[-1]
            origin = str(last["name"])
            op = str(last["attr"]) if last["kind"] in CHILD_KINDS else ""
            by = member_label(origin, str(last["kind"]), op)
            explanation = (
                f"the backward of {by or '<root>'!r} turned a finite gradient into a "
                f"non-finite gradient of {of}"
            )
        else:
            explanation = (
                f"the gradient of {of} was non-finite as it "
                "came back from the loss (computed outside the tracked modules)"
            )
    rows = frame.loc[same_step]
    evidence = rows[rows["name"].isin({origin, name})]
    return NonFinite(origin, grad, step, explanation, (name, kind, attr, grad), row, evidence, op)
