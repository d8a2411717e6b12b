"""`compare`: where two recordings of the same model differ, record by record, forward and
backward (the arithmetic is in `differences`)."""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.records import Stash
from .._core.structure import iter_leaves
from .._optional import require
from .._validate import check_type
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import NAMES
from .differences import Differences, coarser_dtype, differences
from .frame import holds_copies, recording_frame, to_frame, type_name
from .select import CHILD_KINDS, member_label

if TYPE_CHECKING:
    import pandas

__all__ = [
    "ALIGNMENT",
    "TOLERANCE_EPS",
    "Comparison",
    "Divergence",
    "Names",
    "Unmatched",
    "check_options",
    "compare",
]

ALIGNMENT = ("name", "kind", "attr", "grad", "call", "step")
"""The columns two records are aligned by (the first columns of `Comparison.to_frame`)."""

Names = Mapping[str, str] | Callable[[str], str] | None

TOLERANCE_EPS = 16
"""The default `rtol` of `compare` and `compare_models`, in epsilons (`torch.finfo(dtype)
.eps`) of the coarsest floating dtype compared: 1.9e-6 for float32, 0.016 for float16,
0.125 for bfloat16 (float32 with statistics, whose dtype is not recorded).

A record is within the tolerance when its relative rms error (||a - b|| / ||a||) is at
most `rtol` (plus `atol` over its rms), so what counts is the error against the tensor's
scale, not at single elements near 0. Why 16: the same computation rounded differently
(another summation order, fused kernels, `torch.compile`, autocast) differs by about 1 to
3 epsilons of its coarsest dtype, growing slowly with depth and the size of the
reductions. Measured on small transformers and MLPs, forward and backward: TorchInductor
(CPU) against eager 0.4 to 3 float32 epsilons; a bf16 copy, or bf16 autocast, against
fp32 0.4 to 1.6 bfloat16 epsilons. A changed weight, a wrong kernel or a bug is usually far
beyond: a module output off by 1e-3 is 500 float32 tolerances away."""

_ERRORS = ("equal", "max_abs_error", "rel_rms_error", "cosine", "max_ulp")
_WORST = 5  # records listed by `print(comparison)` and its HTML view


@dataclasses.dataclass(frozen=True)
class Unmatched:
    """A record found in one run only.

    Attributes:
        run: `"a"` or `"b"`, the run that has it.
        name, kind, attr, grad, call, step: the record's position (in `a`, `name` is the
            name before the `names=` mapping).
        row: its index in that run's recording.
    """

    run: str
    name: str
    kind: str
    attr: str
    grad: bool
    call: int
    step: int
    row: int


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first record of a comparison beyond the tolerance (`Comparison.first_divergence`).

    Attributes:
        name, kind, attr, grad, call, step: the record's position, as named in run `a`.
        name_b: the module's name in run `b`.
        row: the record's row in `Comparison.to_frame()`.
        equal, max_abs_error, rel_rms_error, cosine, max_ulp: its errors (see
            `tensor_tracker._data.differences.Differences`; NaN with statistics).
        stats: with statistics, the relative difference of each statistic.
        reason: why it counts as diverged: `"values"`, `"shape"` (shapes differ) or
            `"structure"` (the values hold different numbers of tensors).
        label: what diverged as a reader names it: the module, or an operation or tap
            recorded inside it (`track(..., ops=...)`, `tap`), aligned by (module, attr):
            `"softmax#0 of encoder.layer.3.attention.self"`.

    Example:
        >>> import copy
        >>> bf16 = copy.deepcopy(model).bfloat16()
        >>> cmp = tensor_tracker.compare_models(model, bf16, x, loss_fn=loss_fn)
        >>> d = cmp.first_divergence(rtol=0, atol=0)   # the first record that differs
        >>> d.name, d.grad, d.reason, d.row
        ('0', False, 'values', 0)
        >>> 0 < d.rel_rms_error < 0.01   # bf16 rounding of the first Linear's output
        True
    """

    name: str
    kind: str
    attr: str
    grad: bool
    call: int
    step: int
    name_b: str
    row: int
    equal: bool
    max_abs_error: float
    rel_rms_error: float
    cosine: float
    max_ulp: float
    stats: dict[str, float]
    reason: str

    @property
    def label(self) -> str:
        """What diverged, named as a reader looks for it: the module (`"0.attn"`), or an
        operation or tap inside it (`"softmax#0 of encoder.layer.3.attention.self"`)."""
        return member_label(self.name, self.kind, self.attr)

    def __str__(self) -> str:
        if self.kind in CHILD_KINDS:
            where = f"{self.label!r}" + (" gradient" if self.grad else "")
        else:
            where = f"{self.name or '<model>'!r} {'gradient' if self.grad else self.kind}"
            if self.attr:
                where += f" {self.attr!r}"
        numbers = (
            f"rel_rms_error {self.rel_rms_error:.3g}, max_abs_error {self.max_abs_error:.3g}"
            if not self.stats
            else ", ".join(f"{k} {v:.3g}" for k, v in self.stats.items())
        )
        if self.reason != "values":
            numbers = f"{self.reason} differs"
        return f"{where} at step {self.step}, call {self.call}: {numbers}"


@dataclasses.dataclass
class _Row:
    """One aligned pair of records and how far apart they are."""

    key: tuple[str, str, str, bool, int, int]
    name_b: str
    type: str
    row_a: int
    row_b: int
    reason: str  # "values", "shape", "structure"
    shape_a: str
    shape_b: str
    dtype_a: str
    dtype_b: str
    diff: Differences | None = None  # full copies
    stats_a: dict[str, float] = dataclasses.field(default_factory=dict)  # statistics
    stats_b: dict[str, float] = dataclasses.field(default_factory=dict)
    tensors: tuple[list[Tensor], list[Tensor]] | None = None


def _mapping(names: Names, caller: str) -> Callable[[str], str]:
    if names is None:
        return lambda n: n
    if isinstance(names, Mapping):
        for k, v in names.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ArgumentTypeError(
                    f"{caller}(names=...): a dict maps module names in a to names in b "
                    f"(str to str), got {k!r}: {v!r}"
                )
        table = dict(names)
        return lambda n: table.get(n, n)
    if callable(names):

        def call(n: str) -> str:
            out = names(n)
            if not isinstance(out, str):
                raise ArgumentTypeError(
                    f"{caller}(names=...): the function must return the module's name in b "
                    f"(a str), got {out!r} for {n!r}"
                )
            return out

        return call
    raise ArgumentTypeError(
        f"{caller}(names=...) must be a dict (name in a -> name in b), a function or None, "
        f"got {type(names).__name__}"
    )


def _keys(stashes: Sequence[Stash], rename: Callable[[str], str]) -> Iterator[tuple[Any, ...]]:
    """Each record's alignment key; a key seen before (two backward passes in one step)
    gets its occurrence number."""
    seen: dict[tuple[Any, ...], int] = {}
    for s in stashes:
        key = (rename(s.name), s.kind, s.attr, bool(s.grad), int(s.call), int(s.step))
        n = seen.get(key, 0)
        seen[key] = n + 1
        yield (*key, n)


def _leaves(value: Any) -> list[Any]:
    """The tensors of a value, and `None` where a gradient did not reach an output."""
    return [v for v in iter_leaves(value) if isinstance(v, Tensor) or v is None]


def _describe(leaves: list[Any], what: str) -> str:
    parts = [
        "None"
        if t is None
        else (
            str(t.dtype).removeprefix("torch.")
            if what == "dtype"
            else "x".join(map(str, t.shape)) or "scalar"
        )
        for t in leaves
    ]
    return ", ".join(parts)


def _stat_columns(frame: pandas.DataFrame) -> list[str]:
    return [c for c in frame.columns if c in NAMES and c != "numel"]


def _frame_with(
    stashes: list[Stash], frame: pandas.DataFrame, stats: list[str]
) -> pandas.DataFrame:
    """`frame` with the statistics `stats` computed from the copies in `stashes`."""
    frame = frame.copy()
    for stat in stats:
        frame[stat] = to_frame(stashes, stat=stat, stat_name=stat)[stat]
    return frame


def _rel(x: float, y: float) -> float:
    """|x - y| / |x|: 0 when equal (NaNs included), infinite when x is 0 and y is not."""
    if x == y or (math.isnan(x) and math.isnan(y)):
        return 0.0
    if x == 0:
        return math.inf
    return abs(x - y) / abs(x)


def _stats_close(sa: dict[str, float], sb: dict[str, float], rtol: float, atol: float) -> bool:
    for k, x in sa.items():
        y = sb[k]
        if x == y or (math.isnan(x) and math.isnan(y)):
            continue
        if not abs(x - y) <= atol + rtol * abs(y):
            return False
    return True


class Comparison:
    """Two recordings of the same model, aligned record by record, and how far apart each
    pair is. Made by `tensor_tracker.compare` or `tensor_tracker.compare_models`.

    Attributes:
        a, b: the two recordings (trackers).
        unmatched: the records found in one run only (`Unmatched`, run `a`'s first).
        copies: `True` when both runs kept full copies (errors per element), `False` when
            the statistics were compared.
        rtol, atol: the tolerance that `print()`, the HTML view and `first_divergence` use
            unless given others (see `compare`).
        eps: the epsilon of the coarsest floating dtype compared (float32's with
            statistics): the unit of the default `rtol` and of the `error / eps` column
            that `print()` shows.

    Example:
        >>> import copy
        >>> bf16 = copy.deepcopy(model).bfloat16()
        >>> cmp = tensor_tracker.compare_models(model, bf16, x, loss_fn=loss_fn)
        >>> cmp.rtol == 16 * torch.finfo(torch.bfloat16).eps   # the default: 16 bf16 eps
        True
        >>> cmp.first_divergence(rtol=0, atol=0).name   # the first record that differs
        '0'
    """

    def __init__(
        self,
        a: Any,
        b: Any,
        rows: list[_Row],
        unmatched: list[Unmatched],
        copies: bool,
        stats: list[str],
        rtol: float,
        atol: float,
        eps: float,
    ) -> None:
        self.a, self.b = a, b
        self._rows = rows
        self.unmatched = unmatched
        self.copies = copies
        self._stats = stats
        self.rtol, self.atol, self.eps = rtol, atol, eps
        self._status = [self._classify(r, rtol, atol) for r in rows]

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def error_column(self) -> str:
        """The column of `to_frame()` that figures and pages show as the error of a
        record: `"rel_rms_error"` with copies, `"max_stat_rel_error"` with statistics."""
        return "rel_rms_error" if self.copies else "max_stat_rel_error"

    def _classify(self, row: _Row, rtol: float, atol: float) -> str:
        """`"equal"`, `"within"` the tolerance, or `"beyond"` it."""
        if row.reason != "values":
            return "beyond"
        if self.copies:
            d = row.diff
            assert d is not None
            if d.equal:
                return "equal"
            return "within" if d.rms_error <= atol + rtol * d.rms_a else "beyond"
        if all(
            row.stats_a[k] == row.stats_b[k]
            or (math.isnan(row.stats_a[k]) and math.isnan(row.stats_b[k]))
            for k in row.stats_a
        ):
            return "equal"
        return "within" if _stats_close(row.stats_a, row.stats_b, rtol, atol) else "beyond"

    def status(self, rtol: float | None = None, atol: float | None = None) -> list[str]:
        """Per row of `to_frame()`: `"equal"` (bitwise, or every statistic equal),
        `"within"` the tolerance (rms(a - b) <= atol + rtol * rms(a), or every statistic
        |a - b| <= atol + rtol * |b|) or `"beyond"` it (also when shapes or structures
        differ)."""
        rtol, atol = self._tolerance(rtol, atol)
        if (rtol, atol) == (self.rtol, self.atol):
            return list(self._status)
        return [self._classify(r, rtol, atol) for r in self._rows]

    def _tolerance(self, rtol: float | None, atol: float | None) -> tuple[float, float]:
        rtol = self.rtol if rtol is None else _check_tolerance(rtol, "rtol=")
        atol = self.atol if atol is None else _check_tolerance(atol, "atol=")
        return rtol, atol

    def to_frame(self) -> pandas.DataFrame:
        """One row per aligned pair of records, in the order run `a` recorded them.

        Columns: the alignment `name` (as in `a`), `kind`, `attr`, `grad`, `call`, `step`;
        then `name_b`, `type` (the module class in `a`), `status` (see `status()`),
        `shape_a`, `shape_b`, `dtype_a`, `dtype_b`; with full copies `equal`,
        `max_abs_error`, `rel_rms_error`, `cosine`, `max_ulp`, `rms_a`, `rms_b`; with
        statistics, for each statistic recorded on both sides `<stat>_a`, `<stat>_b` and
        `<stat>_rel_error` (|a - b| / |a|), and `max_stat_rel_error`.

        Example:
            >>> cmp = tensor_tracker.compare(tracker, tracker)   # a recording against itself
            >>> cmp.to_frame()[["name", "grad", "equal", "max_ulp"]].values.tolist()[:2]
            [['0', False, True, 0.0], ['1', False, True, 0.0]]
        """
        pd = require("pandas", "pandas")
        columns: dict[str, list[Any]] = {c: [] for c in ALIGNMENT}
        for extra in ("name_b", "type", "status", "shape_a", "shape_b", "dtype_a", "dtype_b"):
            columns[extra] = []
        if self.copies:
            for c in (*_ERRORS, "rms_a", "rms_b"):
                columns[c] = []
        else:
            for stat in self._stats:
                columns[f"{stat}_a"], columns[f"{stat}_b"] = [], []
                columns[f"{stat}_rel_error"] = []
            columns["max_stat_rel_error"] = []
        for row, status in zip(self._rows, self._status, strict=True):
            for c, v in zip(ALIGNMENT, row.key, strict=True):
                columns[c].append(v)
            columns["name_b"].append(row.name_b)
            columns["type"].append(row.type)
            columns["status"].append(status)
            columns["shape_a"].append(row.shape_a)
            columns["shape_b"].append(row.shape_b)
            columns["dtype_a"].append(row.dtype_a)
            columns["dtype_b"].append(row.dtype_b)
            if self.copies:
                d = row.diff
                for c in (*_ERRORS, "rms_a", "rms_b"):
                    if d is None:
                        columns[c].append(False if c == "equal" else math.nan)
                    else:
                        columns[c].append(getattr(d, c))
            else:
                rels = []
                for stat in self._stats:
                    x, y = row.stats_a.get(stat, math.nan), row.stats_b.get(stat, math.nan)
                    columns[f"{stat}_a"].append(x)
                    columns[f"{stat}_b"].append(y)
                    rel = _rel(x, y) if row.reason == "values" else math.nan
                    columns[f"{stat}_rel_error"].append(rel)
                    rels.append(rel)
                columns["max_stat_rel_error"].append(max(rels, default=math.nan))
        frame: pandas.DataFrame = pd.DataFrame(columns)
        return frame

    def _divergence(self, i: int) -> Divergence:
        row = self._rows[i]
        d = row.diff
        name, kind, attr, grad, call, step = row.key
        stats = (
            {}
            if self.copies
            else {
                s: _rel(row.stats_a[s], row.stats_b[s]) if row.reason == "values" else math.nan
                for s in self._stats
            }
        )
        return Divergence(
            name=name,
            kind=kind,
            attr=attr,
            grad=grad,
            call=call,
            step=step,
            name_b=row.name_b,
            row=i,
            equal=bool(d.equal) if d is not None else False,
            max_abs_error=d.max_abs_error if d is not None else math.nan,
            rel_rms_error=d.rel_rms_error if d is not None else math.nan,
            cosine=d.cosine if d is not None else math.nan,
            max_ulp=d.max_ulp if d is not None else math.nan,
            stats=stats,
            reason=row.reason,
        )

    def first_divergence(
        self, rtol: float | None = None, atol: float | None = None, grad: bool = False
    ) -> Divergence | None:
        """The first record beyond the tolerance, in the order it was computed: forward
        values in execution order (run `a`'s), or with `grad=True` gradients in the order
        the backward pass produced them; steps in order. `None` when every record of that
        direction is within the tolerance.

        A record is within the tolerance when rms(a - b) <= atol + rtol * rms(a): its
        `rel_rms_error` is at most `rtol` (plus `atol` over its rms); a NaN or infinity at
        the same place in both counts as no error, anywhere else it is beyond any
        tolerance. With statistics, when every statistic satisfies
        |a - b| <= atol + rtol * |b|. Records whose shapes differ are beyond it.

        Args:
            rtol, atol: the tolerance (default: the comparison's, see `compare`);
                `rtol=0, atol=0`: the first record whose values differ (-0.0 and 0.0 count
                as equal, as do NaNs at the same places).
            grad: look at gradients instead of forward values.

        Example:
            >>> import copy
            >>> other = copy.deepcopy(model)
            >>> with torch.no_grad():
            ...     _ = other[2].bias.add_(1e-3)
            >>> cmp = tensor_tracker.compare_models(model, other, x, loss_fn=loss_fn)
            >>> d = cmp.first_divergence()
            >>> d.name, d.grad, d.step
            ('2', False, 0)
            >>> cmp.first_divergence(grad=True).name    # backward starts at the model's output
            ''
        """
        rtol, atol = self._tolerance(rtol, atol)
        check_type(grad, bool, "first_divergence(grad=...)", "True or False")
        same = (rtol, atol) == (self.rtol, self.atol)
        for i, row in enumerate(self._rows):
            if row.key[3] != grad:
                continue
            status = self._status[i] if same else self._classify(row, rtol, atol)
            if status == "beyond":
                return self._divergence(i)
        return None

    def counts(self, rtol: float | None = None, atol: float | None = None) -> dict[str, int]:
        """How many aligned records are `equal`, `within` the tolerance and `beyond` it,
        and how many are `unmatched` (in one run only)."""
        out = {"equal": 0, "within": 0, "beyond": 0}
        for s in self.status(rtol, atol):
            out[s] += 1
        out["unmatched"] = len(self.unmatched)
        return out

    def worst(self, n: int = _WORST) -> pandas.DataFrame:
        """The `n` rows of `to_frame()` with the largest error (`error_column`; records
        whose shapes differ first)."""
        frame = self.to_frame()
        key = frame[self.error_column].fillna(math.inf)
        order = key.sort_values(ascending=False, kind="stable").index[:n]
        worst: pandas.DataFrame = frame.loc[order]
        return worst

    def _lines(self) -> list[str]:
        c = self.counts()
        what = "full copies" if self.copies else "statistics " + ", ".join(self._stats)
        lines = [
            f"Comparison of {len(self)} aligned records ({what}): {c['equal']} {'bitwise equal' if self.copies else 'with equal statistics'}, "
            f"{c['within']} within tolerance (rtol={self.rtol:g}, atol={self.atol:g}), "
            f"{c['beyond']} beyond; {c['unmatched']} in one run only."
        ]
        for grad in (False, True):
            d = self.first_divergence(grad=grad)
            label = "gradient" if grad else "forward"
            lines.append(f"First {label} divergence: {d if d is not None else 'none'}")
        return lines

    def _worst_rows(self) -> list[tuple[str, ...]]:
        frame = self.worst()
        column = self.error_column
        rows: list[tuple[str, ...]] = []
        for _, r in frame.iterrows():
            if r["status"] == "equal":
                continue
            what = "gradient" if r["grad"] else str(r["kind"])
            # An op's or tap's gradient is told apart from its module's by its attr.
            if r["attr"] and (not r["grad"] or r["kind"] in CHILD_KINDS):
                what += f" {r['attr']}"
            rows.append(
                (
                    r["name"] or "<model>",
                    what,
                    str(r["step"]),
                    str(r["call"]),
                    f"{r[column]:.3g}",
                    f"{r[column] / self.eps:.3g}" if self.copies else "",
                )
            )
        return rows

    # The error in epsilons, not max_ulp: near 0 a ULP is tiny, so max_ulp is in the tens
    # of thousands for an error of one epsilon against the tensor's scale.
    _HEAD = ("name", "what", "step", "call", "error", "error / eps")

    def __str__(self) -> str:
        lines = self._lines()
        rows = self._worst_rows()
        if rows:
            head = (*self._HEAD[:4], self.error_column, self._HEAD[5] if self.copies else "")
            widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
            lines.append("Worst:")
            for r in (head, *rows):
                lines.append(
                    "  " + "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()
                )
        return "\n".join(lines)

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"Comparison(records={len(self)}, equal={c['equal']}, within={c['within']}, "
            f"beyond={c['beyond']}, unmatched={c['unmatched']})"
        )

    def _repr_html_(self) -> str:
        lines = self._lines()
        out = [f"<p>{html.escape(lines[0])}</p><ul>"]
        out += [f"<li>{html.escape(line)}</li>" for line in lines[1:]]
        out.append("</ul>")
        rows = self._worst_rows()
        if rows:
            head = (*self._HEAD[:4], self.error_column, self._HEAD[5] if self.copies else "")
            out.append(
                "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            )
            for r in rows:
                out.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>")
            out.append("</table>")
        return "".join(out)


def _check_tolerance(value: Any, argument: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{argument} must be a number >= 0, got {value!r}")
    if not value >= 0:
        raise ArgumentValueError(f"{argument} must be a number >= 0, got {value!r}")
    return float(value)


def _stashes(recording: Any) -> list[Stash]:
    """The records of a tracker (live or loaded) or a list of `Stash`."""
    if isinstance(recording, Sequence) and all(isinstance(s, Stash) for s in recording):
        return list(recording)
    if callable(getattr(recording, "to_frame", None)) and hasattr(recording, "stashes"):
        return list(recording)
    raise ArgumentTypeError(
        f"compare(a, b): pass two Trackers (live or loaded with tensor_tracker.load) or "
        f"lists of Stash, got {type(recording).__name__}"
    )


_COPY_STATS = ("mean", "std", "rms", "abs_max", "min", "max")


def _statistics(
    a: Any, b: Any, list_a: list[Stash], list_b: list[Stash]
) -> tuple[list[str], Any, Any]:
    """The statistics recorded on both sides (those of a side holding copies computed from
    them), and each side's values of them (numpy, a row per record)."""
    frame_a, _ = recording_frame(a if hasattr(a, "to_frame") else list_a, "compare(a, b)")
    frame_b, _ = recording_frame(b if hasattr(b, "to_frame") else list_b, "compare(a, b)")
    sa, sb = _stat_columns(frame_a), _stat_columns(frame_b)
    if holds_copies(list_a):
        sa = [s for s in sb if s in _COPY_STATS]
        frame_a = _frame_with(list_a, frame_a, sa)
    if holds_copies(list_b):
        sb = [s for s in sa if s in _COPY_STATS]
        frame_b = _frame_with(list_b, frame_b, sb)
    stats = [s for s in sa if s in sb]
    if not stats:
        raise ArgumentValueError(
            "compare(a, b): the two recordings have no statistic in common; record both "
            "with the same stats= (or both with full copies)"
        )
    return stats, frame_a[stats].to_numpy(dtype=float), frame_b[stats].to_numpy(dtype=float)


def check_options(names: Names, rtol: Any, atol: Any, caller: str) -> Callable[[str], str]:
    """Check `names=`, `rtol=` and `atol=` (`None`: the default) of `caller`; the renaming
    function."""
    if rtol is not None:
        _check_tolerance(rtol, f"{caller}(rtol=...)")
    if atol is not None:
        _check_tolerance(atol, f"{caller}(atol=...)")
    return _mapping(names, caller)


def _eps(rows: list[_Row]) -> float:
    """The epsilon of the coarsest floating dtype among the compared tensors (float32's
    without any, as with statistics)."""
    dtype = torch.float32
    for row in rows:
        for t in (*row.tensors[0], *row.tensors[1]) if row.tensors else ():
            if t.is_floating_point():
                dtype = coarser_dtype(dtype, t.dtype)
    return float(torch.finfo(dtype).eps)


def compare(
    a: Any,
    b: Any,
    *,
    names: Names = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Comparison:
    """Align two recordings of the same model (trackers, live or `load`ed, or lists of
    `Stash`) record by record and measure how far apart each pair is.

    Records are aligned by module `name`, `kind`, `attr`, `grad`, `call` and `step` (a
    record repeated within a step, such as two backward passes, by its occurrence). A
    record found in one run only is listed in `Comparison.unmatched`, never dropped
    silently.

    With full copies on both sides (`track(model)`), each pair gets `equal` (bitwise),
    `max_abs_error`, `rel_rms_error` (||a - b|| / ||a||), `cosine` and `max_ulp` (the
    largest distance in units in the last place of the coarser of the two dtypes, computed
    exactly from the bits): see `tensor_tracker._data.differences`. Different dtypes are
    compared in float64; values whose shapes differ are reported (`shape_a`, `shape_b`),
    not compared. With statistics on either side (`stats=`), the statistics recorded on
    both sides are compared (those of a side holding copies are computed from them): their
    relative differences.

    Args:
        a, b: the two recordings; `a` is the reference (its order, its names).
        names: for renamed or re-wrapped modules, the name in `b` of a module of `a`: a
            dict (names not in it stay as they are) or a function, e.g.
            `lambda n: "model." + n`.
        rtol, atol: the default tolerance of `first_divergence`, `print()` and the HTML
            view: a record is within it when rms(a - b) <= atol + rtol * rms(a), i.e. its
            `rel_rms_error` is at most `rtol` (plus `atol` over its rms); with
            statistics, when each statistic is within atol + rtol * |b|. Default `rtol`:
            `TOLERANCE_EPS` (16) epsilons of the coarsest floating dtype compared (1.9e-6
            for float32 alone, 0.125 with bfloat16), what rounding differences (another
            summation order, `torch.compile`, autocast) stay under while a real change
            goes beyond; default `atol`: 0.

    Returns:
        A `Comparison`: `print()` it, `to_frame()`, `first_divergence(...)`,
        `tensor_tracker.plot.compare(cmp)`, `tensor_tracker.report(cmp, path)`.

    Raises:
        TypeError: `a` or `b` is not a recording, or `names` is not a dict or function.

    Example:
        >>> import copy
        >>> model_bf16 = copy.deepcopy(model).bfloat16()
        >>> with tensor_tracker.track(model_bf16) as b:
        ...     model_bf16(x.bfloat16()).sum().backward()
        >>> cmp = tensor_tracker.compare(tracker, b)   # `tracker` recorded the fp32 model
        >>> cmp.first_divergence() is None   # within 16 bf16 eps: bf16 rounding
        True
        >>> d = cmp.first_divergence(rtol=0, atol=0)   # the first record that differs
        >>> d.name, d.grad, d.step
        ('0', False, 0)
    """
    rename = check_options(names, rtol, atol, "compare")
    list_a, list_b = _stashes(a), _stashes(b)
    copies = holds_copies(list_a) and holds_copies(list_b)
    stats: list[str] = []
    values_a = values_b = None
    if not copies:
        stats, values_a, values_b = _statistics(a, b, list_a, list_b)
    index_b = {k: i for i, k in enumerate(_keys(list_b, lambda n: n))}
    matched_b: set[int] = set()
    rows: list[_Row] = []
    unmatched: list[Unmatched] = []
    for i, key in enumerate(_keys(list_a, rename)):
        s = list_a[i]
        j = index_b.get(key)
        if j is None:
            unmatched.append(
                Unmatched("a", s.name, s.kind, s.attr, bool(s.grad), s.call, s.step, i)
            )
            continue
        matched_b.add(j)
        leaves_a, leaves_b = _leaves(s.value), _leaves(list_b[j].value)
        row = _Row(
            key=(s.name, s.kind, s.attr, bool(s.grad), int(s.call), int(s.step)),
            name_b=key[0],
            type=type_name(s.type),
            row_a=i,
            row_b=j,
            reason="values",
            shape_a=_describe(leaves_a, "shape") if copies else "",
            shape_b=_describe(leaves_b, "shape") if copies else "",
            dtype_a=_describe(leaves_a, "dtype") if copies else "",
            dtype_b=_describe(leaves_b, "dtype") if copies else "",
        )
        if copies:
            if len(leaves_a) != len(leaves_b) or [x is None for x in leaves_a] != [
                y is None for y in leaves_b
            ]:
                row.reason = "structure"
            elif any(
                x.shape != y.shape for x, y in zip(leaves_a, leaves_b, strict=True) if x is not None
            ):
                row.reason = "shape"
            else:
                ta = [x for x in leaves_a if x is not None]
                tb = [y for y in leaves_b if y is not None]
                row.tensors = (ta, tb)
                row.diff = differences(ta, tb)
        else:
            assert values_a is not None and values_b is not None
            row.stats_a = dict(zip(stats, values_a[i].tolist(), strict=True))
            row.stats_b = dict(zip(stats, values_b[j].tolist(), strict=True))
        rows.append(row)
    for j, s in enumerate(list_b):
        if j not in matched_b:
            unmatched.append(
                Unmatched("b", s.name, s.kind, s.attr, bool(s.grad), s.call, s.step, j)
            )
    eps = _eps(rows)
    rtol = TOLERANCE_EPS * eps if rtol is None else rtol
    return Comparison(a, b, rows, unmatched, copies, stats, float(rtol), float(atol or 0.0), eps)
