"""`diagnose`: a table of what looks wrong in a recording (training pathologies)."""

from __future__ import annotations

import dataclasses
import html
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._optional import require
from .._validate import check_number, check_type
from ..errors import ArgumentValueError
from ..stats import DEFAULT, PerAxis, Statistic, per_channel
from ..stats.formats import BLOCK_FORMATS, FORMATS
from .channels import DEFAULT_OUTLIER_RATIO, outlier_channels, table_of_frame
from .frame import holds_copies, recording_frame, to_frame
from .nonfinite import first_nonfinite
from .select import CHILD_KINDS, member_label
from .spike import explain_frame, loss_series, loss_spikes, param_updates, worst_spike

if TYPE_CHECKING:
    import pandas

__all__ = ["Diagnosis", "Finding", "dead_fraction", "diagnose", "diagnosis_stats", "verdict_html"]


def dead_fraction(x: Tensor) -> Tensor:
    """The fraction of units of `x` that are exactly zero for every example of the batch.

    Units are the last dimension (features of `[batch, features]` or `[batch, tokens,
    features]`), or dimension 1 for 4-D and 5-D tensors (channels of images and volumes).
    Computed on `x`'s device, as a custom statistic (see `diagnosis_stats`).

    Example:
        >>> dead_fraction(torch.tensor([[0.0, 1.0], [0.0, 2.0]]))
        tensor(0.5000)
    """
    if x.dim() < 2:
        return (x == 0).all().to(torch.float32)
    units = x.movedim(1, -1) if x.dim() >= 4 else x
    alive = (units != 0).reshape(-1, units.shape[-1]).any(0)
    return 1 - alive.to(torch.float32).mean()


diagnosis_stats: tuple[str | Statistic | PerAxis, ...] = (
    *DEFAULT,
    "zero_frac",
    "fp16_overflow",
    "fp16_underflow",
    "bf16_overflow",
    "bf16_underflow",
    Statistic("dead_frac", dead_fraction),
    per_channel("abs_max"),
)
"""A `stats=` spec that gives `diagnose` everything it reads from activations and gradients:
the default statistics, the fp16/bf16 overflow and underflow fractions, `dead_frac`
(`dead_fraction`) and the largest magnitude per channel (`per_channel("abs_max")`, for
the outlier channels check). Add `"fp8_e4m3_overflow"` etc. to check fp8 too.

Example:
    >>> with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
    ...     model(x).square().mean().backward()
    >>> sorted(t.to_frame().columns)[:4]
    ['abs_max', 'abs_max_per_channel', 'attr', 'bf16_overflow']
"""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing `diagnose` found.

    Attributes:
        check: which check found it (`"vanishing_gradients"`, `"exploding_gradients"`,
            `"dead_units"`, `"saturation"`, `"fp16_overflow"`, `"fp16_underflow"`, ...,
            `"update_size"`, `"outlier_channels"`, `"attention_logit_growth"`,
            `"loss_spike"`, `"nonfinite"`).
        modules: what it is about, most affected first: modules (by name, `"0"`: their
            outputs), parameters (`"0.bias"`), a module's inputs (`"0 input x"`) or an
            operation or tap inside a module (`"softmax#0 of 0.attn"`); the explanation
            says which.
        steps: the first and last step where it was seen.
        evidence: the numbers behind it.
        explanation: one line saying what is wrong.
        suggestion: one line saying what usually helps.

    Example:
        >>> with torch.no_grad():
        ...     _ = model[0].bias.fill_(-100.0)   # every unit of the ReLU after it dies
        >>> with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
        ...     model(x).square().mean().backward()
        >>> finding = tensor_tracker.diagnose(t)[0]
        >>> finding.check, finding.modules, finding.steps
        ('dead_units', ('1',), (0, 0))
        >>> finding.suggestion
        'lower the learning rate, initialise biases slightly positive, or use LeakyReLU/GELU'
    """

    check: str
    modules: tuple[str, ...]
    steps: tuple[int, int]
    evidence: dict[str, float | str]
    explanation: str
    suggestion: str

    def sentence(self) -> str:
        """The finding in one sentence naming what it is about and the step: the line of
        the verdicts (`Diagnosis.ranked`, the top of `print(diagnosis)`, the report).

        Example:
            >>> finding = tensor_tracker.Finding("dead_units", ("1",), (0, 2), {}, "half dead", "")
            >>> finding.sentence()
            '1, steps 0-2: half dead'
        """
        where = self.modules[0] or "<root>" if self.modules else "the loss"
        if len(self.modules) > 1:
            where += f" (+{len(self.modules) - 1} more)"
        first, last = self.steps
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        return f"{where}, {steps}: {self.explanation}"


@dataclasses.dataclass(frozen=True, repr=False)
class Diagnosis:
    """What `diagnose` found: a sequence of `Finding` (empty when nothing looks wrong),
    and for each check what it looked at, or why it could not run.

    Attributes:
        findings: the findings, in the order of the checks.
        checked: check name -> what it read, or why it was skipped.

    Display it in a notebook (an HTML table), `print` it, or use `to_frame()`.

    Example:
        >>> with torch.no_grad():
        ...     _ = model[0].bias.fill_(-100.0)   # every unit of the ReLU after it dies
        >>> with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
        ...     model(x).square().mean().backward()
        >>> diagnosis = tensor_tracker.diagnose(t)
        >>> [finding.check for finding in diagnosis]
        ['dead_units']
        >>> diagnosis.checked["saturation"]
        'no Tanh or Sigmoid module outputs recorded'
    """

    findings: tuple[Finding, ...]
    checked: dict[str, str]

    def __len__(self) -> int:
        return len(self.findings)

    def __repr__(self) -> str:
        checks = ", ".join(f.check for f in self.findings)
        return f"Diagnosis({len(self.findings)} finding(s){': ' + checks if checks else ''})"

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __getitem__(self, index: int) -> Finding:
        return self.findings[index]

    def ranked(self) -> list[Finding]:
        """The findings, most severe first: what breaks training (NaN/inf, loss spikes,
        exploding gradients, overflow) before what slows or degrades it (vanishing
        gradients, dead units, outlier channels, saturation, underflow, update sizes); a
        check not listed here (a newer one) after those; of one rank, the finding about
        more modules first, then in the order found.

        Example:
            >>> [f.check for f in tensor_tracker.diagnose(t).ranked()]   # a healthy run
            []
        """
        # Of two findings of one rank, the one about more modules first: 195 module
        # gradients flushing to zero before 24 parameters doing so.
        return sorted(self.findings, key=lambda f: (_severity(f.check), -len(f.modules)))

    @property
    def checks_run(self) -> int:
        """How many checks ran (those not skipped for want of a statistic)."""
        return sum(not v.startswith("skipped") for v in self.checked.values())

    def verdict(self) -> list[str]:
        """The ranked findings as numbered sentences (`Finding.sentence`), or one line
        saying that nothing was found and by how many checks: the summary at the top of
        `print(diagnosis)`, the report and the viewers.

        Example:
            >>> tensor_tracker.diagnose(t).verdict()   # doctest: +ELLIPSIS
            ['No problems found by 5 checks (3 skipped: see checked).']
        """
        if not self.findings:
            skipped = len(self.checked) - self.checks_run
            return [
                f"No problems found by {self.checks_run} checks"
                + (f" ({skipped} skipped: see checked)." if skipped else ".")
            ]
        return [f"{k}. {f.sentence()}" for k, f in enumerate(self.ranked(), 1)]

    def to_frame(self) -> pandas.DataFrame:
        """The findings as a DataFrame, one row each (columns as `Finding`'s fields)."""
        pd = require("pandas", "pandas")
        fields = [f.name for f in dataclasses.fields(Finding)]
        frame: pandas.DataFrame = pd.DataFrame(
            [[getattr(f, name) for name in fields] for f in self.findings], columns=fields
        )
        return frame

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        rows = []
        for f in self.findings:
            modules = ", ".join(m or "<root>" for m in f.modules[:3])
            if len(f.modules) > 3:
                modules += f" (+{len(f.modules) - 3})"
            steps = str(f.steps[0]) if f.steps[0] == f.steps[1] else f"{f.steps[0]}-{f.steps[1]}"
            evidence = ", ".join(f"{k}={_fmt(v)}" for k, v in f.evidence.items())
            rows.append((f.check, modules, steps, evidence, f"{f.explanation} {f.suggestion}"))
        return rows

    def __str__(self) -> str:
        if not self.findings:
            lines = ["No findings.", *self.verdict()]
        else:
            lines = [f"{len(self.findings)} finding(s), most severe first:", *self.verdict()]
            lines.append("Details:")
            for check, modules, steps, evidence, text in self._rows():
                lines.append(f"- {check} [{modules}] steps {steps}: {text}")
                lines.append(f"    {evidence}")
        lines.append("Checked: " + "; ".join(f"{k}: {v}" for k, v in self.checked.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(
            f"<th style='text-align:left'>{h}</th>"
            for h in ("check", "modules", "steps", "evidence", "what and what to do")
        )
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{esc(c)}</td>" for c in row) + "</tr>"
            for row in self._rows()
        )
        summary = verdict_html(self)
        table = f"<table><tr>{head}</tr>{body}</table>" if self.findings else ""
        checked = "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in self.checked.items())
        return f"{summary}{table}<details><summary>checked</summary><ul>{checked}</ul></details>"


# The order of `Diagnosis.ranked`: what breaks a run first. Format checks are ranked by
# their suffix; a check missing here comes after these.
_SEVERITY = (
    "nonfinite",
    "loss_spike",
    "exploding_gradients",
    "_overflow",
    "vanishing_gradients",
    "dead_units",
    "outlier_channels",
    "saturation",
    "_error",
    "_underflow",
    "update_size",
)


def _severity(check: str) -> int:
    for rank, name in enumerate(_SEVERITY):
        if check == name or (name.startswith("_") and check.endswith(name)):
            return rank
    return len(_SEVERITY)


def verdict_html(diagnosis: Diagnosis, limit: int = 5) -> str:
    """The verdict as a short HTML block (the first output of a viewer, the top of a
    diagnosis' table): the `limit` most severe findings, one sentence each, and how many
    more; or the line that nothing was found."""
    lines = diagnosis.verdict()
    if not diagnosis.findings:
        return f"<p class='tt-verdict' style='color:#1b5e20'>{html.escape(lines[0])}</p>"
    more = len(lines) - limit
    items = "".join(f"<li>{html.escape(line.split('. ', 1)[1])}</li>" for line in lines[:limit])
    tail = f"<li>... and {more} more (print(diagnose(t)))</li>" if more > 0 else ""
    head = f"<b>{len(lines)} problem(s) found</b>, most severe first:"
    return (
        f"<div class='tt-verdict' style='border-left:4px solid #b00020;padding:2px 8px;"
        f"margin:4px 0'>{head}<ol style='margin:2px 0'>{items}{tail}</ol></div>"
    )


def _fmt(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


class _Recording:
    """The frame `diagnose` reads, with statistic columns computed from full copies when
    the recording holds copies rather than statistics."""

    def __init__(self, recording: Any) -> None:
        self.frame, self.stashes = recording_frame(recording, "diagnose(recording)")
        self.copies = holds_copies(self.stashes)

    def column(self, name: str) -> Any:
        """The statistic `name` per row (numpy float64), or None when it cannot be had."""
        np = require("numpy", "pandas")
        if name in self.frame.columns:
            return self.frame[name].to_numpy(dtype=np.float64)
        if not self.copies:
            return None
        stat: Any = dead_fraction if name == "dead_frac" else name
        values = to_frame(self.stashes, stat=stat, stat_name=name)[name]
        self.frame[name] = values.to_numpy(dtype=np.float64)
        return self.frame[name].to_numpy(dtype=np.float64)


def _step_range(steps: Any) -> tuple[int, int]:
    return int(steps.min()), int(steps.max())


def _leaf_names(names: Sequence[str]) -> list[str]:
    """Names that no other name contains as a dotted prefix (leaf modules)."""
    prefixes = {n.rsplit(".", 1)[0] for n in names if "." in n}
    has_children = prefixes | ({""} if any(n for n in names) else set())
    return [n for n in names if n not in has_children]


def _check_gradients(
    rec: _Recording, vanishing: float, exploding: float, found: list[Finding]
) -> str:
    np = require("numpy", "pandas")
    frame = rec.frame
    rms = rec.column("rms")
    if rms is None:
        return "skipped: needs the rms statistic (stats=True)"
    forward = frame[(~frame["grad"]) & (frame["kind"] == "output")]
    order = list(dict.fromkeys(forward["name"]))  # forward order of first calls
    is_grad = (frame["grad"] & (frame["kind"] == "output")).to_numpy()
    grads = frame[is_grad].assign(rms=rms[is_grad])
    leaves = [n for n in _leaf_names(order) if n in set(grads["name"])]
    if len(leaves) < 4:
        return "skipped: fewer than 4 leaf modules with output gradients"
    quarter = max(len(leaves) // 4, 1)
    first, last = leaves[:quarter], leaves[-quarter:]
    per_step = grads[grads["name"].isin(leaves)].groupby(["step", "name"])["rms"].median()
    ratios: list[tuple[int, float, float, float]] = []
    for step, by_name in per_step.groupby(level=0):
        values = by_name.droplevel(0)
        near_input = values.reindex(first).dropna()
        near_output = values.reindex(last).dropna()
        if len(near_input) and len(near_output):
            lo, hi = float(near_input.median()), float(near_output.median())
            if hi > 0 and math.isfinite(lo) and math.isfinite(hi):
                ratios.append((int(step), lo / hi, lo, hi))
    if not ratios:
        return "skipped: no step with finite gradients at both ends"
    data = np.array(ratios)
    steps, ratio = data[:, 0], data[:, 1]
    depth = len(leaves) - quarter
    for check, bad, word in (
        ("vanishing_gradients", ratio < vanishing, "shrink"),
        ("exploding_gradients", ratio > exploding, "grow"),
    ):
        if not bad.any():
            continue
        median = float(np.median(ratio[bad]))
        # A median of 0: every gradient at the input end is exactly 0 (dead units).
        change = f"{1 / median if median < 1 else median:.3g}x" if median else "to exactly 0"
        found.append(
            Finding(
                check,
                (first[0], last[-1]),
                _step_range(steps[bad]),
                {
                    "rms near input": float(np.median(data[bad, 2])),
                    "rms near output": float(np.median(data[bad, 3])),
                    "ratio": median,
                    "per module": median ** (1 / depth),
                    "steps": float(bad.sum()),
                },
                f"the gradients of module outputs {word} {change} from the output end to "
                f"the input end of {len(leaves)} leaf modules",
                "check the initialisation scale and activations; residual connections and "
                "normalisation layers keep gradients at one scale"
                + ("; clip gradients" if word == "grow" else ""),
            )
        )
    return (
        f"output-gradient rms of {quarter} leaf module(s) at each end of {len(leaves)}, "
        f"{len(ratios)} step(s)"
    )


_SATURATING = {"Tanh": 1.0, "Sigmoid": 0.25}  # largest slope of each activation


def _check_saturation(rec: _Recording, threshold: float, found: list[Finding]) -> str:
    np = require("numpy", "pandas")
    frame = rec.frame
    kinds = frame["type"].str.rsplit(".", n=1).str[-1]
    rows = (~frame["grad"]) & (frame["kind"] == "output") & kinds.isin(list(_SATURATING))
    if not rows.any():
        return "no Tanh or Sigmoid module outputs recorded"
    mean, rms = rec.column("mean"), rec.column("rms")
    if mean is None or rms is None:
        return "skipped: needs the mean and rms statistics (stats=True)"
    sel = rows.to_numpy()
    kind = kinds[rows].to_numpy()
    # Mean slope of the activation at its outputs y: tanh' = 1 - y², sigmoid' = y(1 - y);
    # from mean(y) and mean(y²) = rms², relative to the slope at 0.
    square = rms[sel] ** 2
    slope = np.where(kind == "Tanh", 1 - square, (mean[sel] - square) / 0.25)
    sub = frame[rows].assign(slope=slope)
    modules = []
    for name, group in sub.groupby("name", sort=False):
        bad = group[group["slope"] < threshold]
        if len(bad):
            modules.append((float(bad["slope"].min()), str(name), bad))
    if modules:
        modules.sort()
        steps = np.concatenate([b["step"].to_numpy() for _, _, b in modules])
        found.append(
            Finding(
                "saturation",
                tuple(name for _, name, _ in modules),
                _step_range(steps),
                {"mean slope (worst)": modules[0][0], "modules": float(len(modules))},
                f"{len(modules)} Tanh/Sigmoid module(s) work near their limits: their mean "
                f"slope is {modules[0][0]:.2g} of the slope at 0, so little gradient passes",
                "scale down their inputs (initialisation, normalisation before them) or use "
                "a non-saturating activation",
            )
        )
    return f"mean slope at the outputs of {sub['name'].nunique()} Tanh/Sigmoid module(s)"


def _check_dead_units(rec: _Recording, threshold: float, found: list[Finding]) -> str:
    np = require("numpy", "pandas")
    frame = rec.frame
    rows = ((~frame["grad"]) & (frame["kind"] == "output")).to_numpy()
    dead = rec.column("dead_frac")
    if dead is None:
        return "skipped: record with stats=tensor_tracker.diagnosis_stats (dead_frac)"
    sub = frame[rows].assign(dead=dead[rows])
    modules = []
    for name, group in sub.groupby("name", sort=False):
        bad = group[group["dead"] >= threshold]
        if len(bad):
            modules.append((-float(bad["dead"].max()), str(name), bad))
    if modules:
        modules.sort()
        steps = np.concatenate([b["step"].to_numpy() for _, _, b in modules])
        worst = -modules[0][0]
        found.append(
            Finding(
                "dead_units",
                tuple(name for _, name, _ in modules),
                _step_range(steps),
                {"dead fraction (worst)": worst, "modules": float(len(modules))},
                f"up to {worst:.0%} of the units of {len(modules)} module(s) output zero for "
                "every example of the batch (no gradient reaches their weights)",
                "lower the learning rate, initialise biases slightly positive, or use "
                "LeakyReLU/GELU",
            )
        )
    return (
        f"units that are zero for the whole batch in the outputs of {sub['name'].nunique()} "
        "module(s)"
    )


# How a format finding names what it is about, per kind of record: the noun of its explanation
# and the key of its count in the evidence. Outputs keep the module's name (the activations).
_FORMAT_KINDS = {
    "output": ("module(s)", "modules"),
    "op": ("operation result(s)", "operations"),
    "tap": ("tapped value(s)", "taps"),
    "input": ("module input(s)", "inputs"),
    "param": ("parameter(s)", "parameters"),
    "optimizer": ("optimizer state tensor(s)", "tensors"),
}


def _subject(name: str, kind: str, attr: str) -> str:
    """What a record is about, as a finding names it: an output by its module (`"0"`), a
    parameter or optimizer state by its path (`"0.bias"`, as in `named_parameters()`),
    an operation or tap inside its module (`"softmax#0 of 0.attn"`), anything else by
    module, kind and argument (`"0 input x"`, `"<root> named scores"`)."""
    if kind == "output":
        return name
    if kind in CHILD_KINDS:
        return member_label(name, kind, attr)
    if kind in ("param", "optimizer"):
        return f"{name}.{attr}" if name else attr
    return f"{name or '<root>'} {kind} {attr}".rstrip()


def _seen_in(name: str, kind: str, attr: str) -> str:
    """The record a non-finite value was first seen in: `"output of 0"`, `"softmax#0 of
    0.attn"`."""
    if kind in CHILD_KINDS:
        return member_label(name, kind, attr)
    return f"{kind} of {name or '<root>'}"


def _block_format_text(key: str, what: str, grad: bool, count: str) -> tuple[str, str]:
    """The explanation and suggestion of a block-format finding (`<format>_error` or
    `<format>_underflow`, see `_format_text`)."""
    f = BLOCK_FORMATS[key]
    tensors = "gradients" if grad else "values"
    smaller = "smaller blocks (stats.blocks(block_size=...) shows what they would give)"
    if what == "error":
        return (
            f"{f.label} would add far more rounding noise to the {tensors} of {count} than to "
            f"Gaussian data (relative RMS error {f.gaussian_error:.2g}): their largest values "
            "round badly, typically values crowding just below a power of two, which the "
            "power-of-two block scale pushes past the element format's maximum",
            "keep these in a wider format, or use a scale rounded up from the block maximum "
            "(torchao's RCEIL/CEIL modes) so that block maxima never saturate",
        )
    return (
        f"{f.label} would flush many nonzero {tensors} of {count} to zero: they lie too far "
        "below the largest value of their block",
        "use a format with more exponent bits (E5M2 for gradients), scale the tensor, "
        f"or use {smaller}",
    )


def _format_text(key: str, what: str, grad: bool, kind: str, count: str) -> tuple[str, str]:
    """The explanation and suggestion of a `<format>_<what>` finding about `count` (e.g.
    `"2 parameter(s)"`) of `kind` (their values, or their gradients with `grad`)."""
    if key in BLOCK_FORMATS:
        return _block_format_text(key, what, grad, count)
    label, largest = FORMATS[key].label, FORMATS[key].max
    tensors = "gradients" if grad else "values"
    if what == "overflow":
        explanation = f"{tensors} of {count} exceed the largest {label} ({largest:.4g})"
        suggestion = (
            "keep these in float32/bf16, or scale them down (normalisation, smaller initialisation)"
        )
    else:
        explanation = (
            f"{tensors} of {count} have values too small for {label}: in {label} "
            "(without scaling) they would flush to zero"
        )
        if grad:
            suggestion = "scale the loss (torch.amp.GradScaler)"
        elif kind in ("param", "optimizer"):
            # Mixed precision keeps float32 master weights: only a model cast to the format
            # (model.half()) stores them there; a tiny bias next to O(1) outputs rarely matters.
            suggestion = "keep parameters in float32 (torch.autocast does), or rescale them"
        else:
            suggestion = "keep these in float32/bf16, or rescale them"
    return explanation, suggestion


def _check_formats(
    rec: _Recording,
    formats: Sequence[str],
    overflow: float,
    underflow: float,
    block_error: float,
    found: list[Finding],
) -> str:
    np = require("numpy", "pandas")
    frame = rec.frame
    # Every recorded tensor could be stored in the format (activations, the batch, weights,
    # optimizer state, their gradients), so every kind is read; a finding holds one kind,
    # values or gradients, so that it says what it is about.
    kinds = [k for k in _FORMAT_KINDS if k in set(frame["kind"])]
    kinds += sorted(set(frame["kind"]) - set(kinds))
    subjects = np.array(
        [_subject(*row) for row in zip(frame["name"], frame["kind"], frame["attr"], strict=True)],
        dtype=object,
    )
    looked: dict[str, list[str]] = {}
    for key in formats:
        checks = (("overflow", overflow), ("underflow", underflow))
        if key in BLOCK_FORMATS:
            checks = (("error", block_error * BLOCK_FORMATS[key].gaussian_error), checks[1])
        for what, limit in checks:
            values = rec.column(f"{key}_{what}")
            source = f"{key}_{what}"
            if values is None and what == "overflow":
                abs_max = rec.column("abs_max")
                if abs_max is not None:
                    values = (abs_max > FORMATS[key].max).astype(np.float64)
                    source = "abs_max"
            if values is None:
                continue
            looked.setdefault(source, []).append(key)
            for grad, kind in itertools.product((False, True), kinds):
                rows = (
                    (frame["grad"] == grad).to_numpy()
                    & (frame["kind"] == kind).to_numpy()
                    & (values > limit)
                )
                if not rows.any():
                    continue
                sub = frame[rows].assign(v=values[rows], subject=subjects[rows])
                worst = sub.groupby("subject", sort=False)["v"].max()
                if what != "overflow":  # the worst first
                    worst = worst.sort_values(ascending=False, kind="stable")
                # An overflow in the order the modules ran (the frame's): the first is where
                # it began; those after it often only pass the values on (a Dropout, a
                # residual add), some of them with a larger fraction.
                noun, count_key = _FORMAT_KINDS.get(kind, (f"{kind} tensor(s)", "tensors"))
                explanation, suggestion = _format_text(
                    key, what, grad, kind, f"{len(worst)} {noun}"
                )
                evidence: dict[str, float | str] = {count_key: float(len(worst))}
                if source == "abs_max":
                    evidence["largest abs_max"] = float(np.nanmax(rec.column("abs_max")[rows]))
                elif what == "error":
                    evidence["error (worst)"] = float(worst.max())
                    evidence["threshold"] = limit
                else:
                    evidence[f"{what} fraction (worst)"] = float(worst.max())
                if key in BLOCK_FORMATS:
                    # Where to look: the worst module's worst steps.
                    top = sub[sub["subject"] == worst.idxmax()].sort_values("v", ascending=False)
                    evidence["worst steps"] = ", ".join(
                        str(s) for s in dict.fromkeys(int(s) for s in top["step"][:8])
                    )
                found.append(
                    Finding(
                        f"{key}_{what}",
                        tuple(str(n) for n in worst.index),
                        _step_range(sub["step"]),
                        evidence,
                        explanation,
                        suggestion,
                    )
                )
    if not looked:
        return "skipped: needs format statistics (stats=tensor_tracker.diagnosis_stats)"
    read = ", ".join(
        f"{source} (for {', '.join(keys)})" if source == "abs_max" else source
        for source, keys in looked.items()
    )
    return f"read {read} of the records of kind {', '.join(kinds)} and their gradients"


_RATIO_STATS = ("mean", "rms", "abs_max", "max", "min")
"""Statistics that give an `update_ratio` record's one number (non-negative) back."""


def _recorded_update_ratios(rec: _Recording) -> list[tuple[float, str, int]] | None:
    """The `update_ratio` records of `capture="updates"` as (ratio, parameter, step), or
    None when there are none (or no statistic gives their number back)."""
    np = require("numpy", "pandas")
    frame = rec.frame
    rows = np.flatnonzero((frame["kind"] == "update_ratio").to_numpy())
    if not len(rows):
        return None
    if rec.copies:
        values = [float(rec.stashes[int(row)].value) for row in rows]
    else:
        column = next((c for c in _RATIO_STATS if c in frame.columns), None)
        if column is None:
            return None
        values = frame[column].to_numpy(dtype=np.float64)[rows].tolist()
    names, attrs, steps = (frame[c].to_numpy()[rows] for c in ("name", "attr", "step"))
    return [
        (value, _subject(str(name), "param", str(attr)), int(step))
        for value, name, attr, step in zip(values, names, attrs, steps, strict=True)
        if math.isfinite(value)
    ]


def _copied_update_ratios(rec: _Recording) -> list[tuple[float, str, int]] | str:
    """The update ratios between the parameter copies of consecutive recorded steps, as
    (ratio, parameter, step), or why there are none."""
    frame = rec.frame
    rows = frame.index[(frame["kind"] == "param") & (~frame["grad"])]
    if not len(rows):
        return (
            "skipped: no updates or parameters recorded (track(..., optimizer=opt, "
            "capture=('outputs', 'updates')))"
        )
    if not rec.copies:
        return (
            "skipped: parameters recorded as statistics; updates need copies "
            "(capture='params' without stats=) or capture='updates'"
        )
    updates = param_updates(frame, rec.stashes)
    ratios = [
        (change / size, _subject(name, "param", attr), step)
        for (name, attr), history in updates.items()
        for step, change, size in history
        if size > 0
    ]
    return ratios or "skipped: parameters recorded in fewer than two steps"


def _check_updates(rec: _Recording, low: float, high: float, found: list[Finding]) -> str:
    np = require("numpy", "pandas")
    # The optimizer's own updates where recorded; else the changes between copies.
    ratios = _recorded_update_ratios(rec)
    if ratios is None:
        copied = _copied_update_ratios(rec)
        if isinstance(copied, str):
            return copied
        ratios = copied
    if not ratios:
        return "skipped: no finite update ratio recorded"
    data = np.array([r[0] for r in ratios])
    for too_small in (True, False):
        bad = [r for r in ratios if (r[0] < low if too_small else r[0] > high)]
        if not bad:
            continue
        params = list(dict.fromkeys(r[1] for r in sorted(bad, key=lambda r: r[0])))
        value = float(np.median([r[0] for r in bad]))
        found.append(
            Finding(
                "update_size",
                tuple(params),
                (min(r[2] for r in bad), max(r[2] for r in bad)),
                {"update/parameter rms (median)": value, "parameters": float(len(params))},
                f"{len(params)} parameter(s) change by {value:.2g} of their size per step, "
                f"{'far below' if too_small else 'far above'} the usual ~1e-3",
                "raise the learning rate (or check these parameters get gradients)"
                if too_small
                else "lower the learning rate or add warm-up",
            )
        )
    count = len({r[1] for r in ratios})
    return f"{len(ratios)} update(s) of {count} parameter(s), median {np.median(data):.2g}"


def _check_outlier_channels(rec: _Recording, k: float, found: list[Finding]) -> str:
    column = "abs_max_per_channel"
    if column not in rec.frame.columns and not rec.copies:
        return (
            "skipped: no abs_max per channel recorded (add "
            "tensor_tracker.stats.per_channel('abs_max') to stats=, or keep full copies)"
        )
    table = table_of_frame(rec.frame, rec.stashes, column, False, "output")
    if not table.modules:
        return "skipped: no module output has channels"
    for o in outlier_channels(table, k):
        channels = ", ".join(map(str, o.channels[:20]))
        if len(o.channels) > 20:
            channels += f" (+{len(o.channels) - 20})"
        steps = ", ".join(map(str, o.steps[:20])) + (" ..." if len(o.steps) > 20 else "")
        found.append(
            Finding(
                "outlier_channels",
                (o.module,),
                (o.steps[0], o.steps[-1]),
                {
                    "channels": channels,
                    "abs_max / median channel": o.ratio,
                    "median channel abs_max": o.median,
                    "steps": steps,
                },
                f"{len(o.channels)} channel(s) of {o.module or '<root>'}'s output reach "
                f"{o.ratio:.3g} times its median channel (over {k:g})",
                "a per-tensor scale fits these channels and crushes the others: keep them "
                "in higher precision or scale per channel (LLM.int8-style decomposition, "
                "SmoothQuant), or look at what writes them (a LayerNorm gain, a bias)",
            )
        )
    return (
        f"abs_max per channel of {len(table.modules)} module output(s), outliers above "
        f"{k:g}x the median channel"
    )


_LOGIT_FLOOR = 10.0
"""The largest attention logit below which `attention_logit_growth` reports no head: a key
scored 10 above another gets e^10 (about 22,000) times its softmax weight, so from there a
head attends to few keys; growth below it (1 to 3 in the first steps) is ordinary."""


def _check_logit_growth(rec: _Recording, growth: float, found: list[Finding]) -> str:
    column = "max_logit_per_head"
    if column not in rec.frame.columns:
        return (
            "skipped: no max_logit_per_head recorded (track(..., ops="
            "'scaled_dot_product_attention', stats=[*tensor_tracker.stats.DEFAULT, "
            "tensor_tracker.stats.attention_logits()]))"
        )
    np = require("numpy", "pandas")
    frame = rec.frame
    # Per call site, the largest logit of each head per step (the max over its calls).
    sites: dict[tuple[str, str, str], dict[int, Any]] = {}
    columns = (frame[c].tolist() for c in ("name", "kind", "attr", "grad", "step", column))
    for name, kind, attr, grad, step, value in zip(*columns, strict=True):
        if grad or not isinstance(value, np.ndarray) or not value.size:
            continue  # a gradient, another record, or an sdpa call recorded without it
        per_step = sites.setdefault((str(name), str(kind), str(attr)), {})
        per_step[step] = value if step not in per_step else np.fmax(per_step[step], value)
    compared = 0
    for (name, kind, attr), per_step in sites.items():
        first, last = min(per_step), max(per_step)
        start, end = per_step[first], per_step[last]
        if first == last or start.shape != end.shape:
            continue
        compared += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(start > 0, end / start, np.inf)
        heads = np.flatnonzero((end >= _LOGIT_FLOOR) & (factor >= growth))
        if not len(heads):
            continue
        evidence: dict[str, float | str] = {"heads": ", ".join(map(str, heads.tolist()))}
        for h in heads.tolist():
            evidence[f"head {h}"] = (
                f"max logit {start[h]:.3g} at step {first} -> {end[h]:.3g} at step {last} "
                f"({factor[h]:.3g}x)"
            )
        evidence["growth (largest)"] = float(factor[heads].max())
        subject = _subject(name, kind, attr)
        found.append(
            Finding(
                "attention_logit_growth",
                (subject,),
                (first, last),
                evidence,
                f"the largest attention logit of head(s) {evidence['heads']} of {subject} "
                f"grew {float(factor[heads].max()):.3g}x from step {first} to step {last}, "
                f"to {float(end[heads].max()):.3g}: the softmax is collapsing onto few keys",
                "normalise q and k per head (QK layer norm) or clip them (QK-clip), lower "
                "the learning rate of the q/k projections, or add warm-up",
            )
        )
    if not compared:
        return "skipped: max_logit_per_head recorded at fewer than two steps"
    return (
        f"max_logit_per_head of {compared} attention call site(s), growth above {growth:g}x "
        f"to at least {_LOGIT_FLOOR:g}"
    )


def _check_loss(
    rec: _Recording, steps: Any, values: Any, spike: float, found: list[Finding]
) -> str:
    spikes = loss_spikes(steps, values, spike)
    if spikes:
        worst = worst_spike(spikes)
        # What moved first before the worst spike (explain_spike), when the recording has it.
        causes = explain_frame(rec.frame, rec.stashes, steps, values, worst[0]).causes[:3]
        evidence: dict[str, float | str] = {
            "spikes": float(len(spikes)),
            "worst step": float(worst[0]),
            "loss there": worst[1],
            "median before": worst[2],
        }
        first = ""
        if causes:
            evidence["causes"] = "; ".join(
                f"{c.module or '<root>'} {c.quantity} from step {c.step} (lead {c.lead})"
                for c in causes
            )
            c = causes[0]
            first = (
                f"; first to move before the worst one: {c.module or '<root>'} {c.quantity} "
                f"at step {c.step}, {c.lead} step(s) before (explain_spike has the ranking)"
            )
        found.append(
            Finding(
                "loss_spike",
                tuple(dict.fromkeys(c.module for c in causes)),
                (spikes[0][0], spikes[-1][0]),
                evidence,
                f"the loss jumped above its recent level at {len(spikes)} step(s){first}",
                "look at the gradients of the step before (first_nonfinite, the scale "
                "plot); lower the learning rate, clip gradients, or add warm-up",
            )
        )
    return f"{len(values)} loss value(s), spikes over {spike:g} robust std above the median"


def diagnose(
    recording: Any,
    *,
    loss: Sequence[float] | Mapping[int, float] | None = None,
    vanishing: float = 1e-3,
    exploding: float = 1e3,
    dead: float = 0.25,
    saturation: float = 0.1,
    formats: Sequence[str] = ("fp16", "bf16"),
    overflow: float = 0.0,
    underflow: float = 0.1,
    block_error: float = 2.0,
    update_size: tuple[float, float] = (1e-5, 1e-1),
    spike: float = 6.0,
    outlier_ratio: float = DEFAULT_OUTLIER_RATIO,
    logit_growth: float = 2.0,
) -> Diagnosis:
    """Look for the usual training pathologies in a recording; return a table of findings.

    Each `Finding` names what it is about (modules, parameters such as `"0.bias"`, or
    inputs such as `"0 input x"`), the steps, the numbers behind it, what is wrong and what
    usually helps. Checks (each uses what the recording has; `Diagnosis.checked` says what
    each one read, or why it was skipped):

    - `nonfinite`: the first NaN/inf and where it appeared (`first_nonfinite`), in any
      record; made by an operation or tap (`ops=`, `tap`), it names that
      (`"softmax#0 of 0.attn"`) rather than its module.
    - `vanishing_gradients` / `exploding_gradients`: the rms of the gradients of the outputs
      of the leaf modules nearest the input against those nearest the output (a quarter of
      them each, in forward order), per step: a ratio below `vanishing` or above
      `exploding`. Output gradients only: they are what the backward passes from layer to
      layer (an input's gradient is the previous module's output gradient, and a
      parameter's also scales with its layer's inputs).
    - `dead_units`: modules where at least a fraction `dead` of the units of their output
      are zero for the whole batch (statistic `dead_frac` of `diagnosis_stats`, or full
      copies). Outputs only: a zero in a parameter or in the batch is no dead unit.
    - `saturation`: `nn.Tanh`/`nn.Sigmoid` outputs whose mean slope (from `mean` and `rms`)
      is below `saturation` of the slope at 0.
    - `<format>_overflow` / `<format>_underflow` for each of `formats`: values or gradients
      above the format's largest value (fraction above `overflow`, or `abs_max` when the
      fractions were not recorded) or flushing to zero (fraction above `underflow`). Every
      record is read (outputs, inputs, parameters, their gradients): one finding per kind,
      values or gradients, naming the module (its outputs), the parameter or the input.
      For a block-scaled format (a key of `tensor_tracker.formats.BLOCK_FORMATS`, e.g.
      `"mxfp8_e4m3"`, `"nvfp4"`; record its `<format>_error` and `<format>_underflow`
      statistics, or full copies): `<format>_error` when the relative RMS quantization
      error passes `block_error` times the format's error on Gaussian data
      (`BlockFormat.gaussian_error`: the rounding floor every tensor pays; heavy tails and
      outliers stay within 1.5x of it, as the largest values dominate the error, while
      values saturating under the power-of-two scale, e.g. tanh outputs near ±0.99, reach
      3x in MXFP8 E4M3, hence the default 2), and `<format>_underflow` when the
      fraction of nonzero values flushed to zero passes `underflow` (10% by default:
      MXFP4 flushes 9% of Gaussian data, the 8-bit formats none). Their evidence names
      the worst steps of the worst module.
    - `update_size`: `rms(update) / rms(parameter)` outside `update_size` (the usual value
      is ~1e-3), naming the parameters: from the `update_ratio` records of
      `capture="updates"` (with `optimizer=`; any `stats=`), else from parameters recorded
      as copies (`capture=("outputs", "params")`, no `stats=`), changed between recorded
      steps.
    - `outlier_channels`: module outputs with a channel whose `abs_max` passes
      `outlier_ratio` times the median channel of the same module at the same step (record
      `tensor_tracker.stats.per_channel("abs_max")`, as `diagnosis_stats` does, or full
      copies; channels are `tensor_tracker.stats.channel_dim`'s: dimension 1 of a CNN's
      4-D outputs, else the last), one finding per module naming the channels and the
      steps, in forward order: a channel carried by a residual stream shows in every
      module after the one that writes it, so the first finding is where it appears (see
      `tensor_tracker._data.channels.DEFAULT_OUTLIER_RATIO` for why 10: Gaussian channels
      stay under 7, the outlier features of LLM.int8 and massive activations are 20 to
      10,000 times).
    - `attention_logit_growth`: per attention head, the largest attention logit at the
      first and the last recorded step (`max_logit_per_head`: record
      `ops="scaled_dot_product_attention"` with `stats.attention_logits()`; the max over
      the step's calls): a head whose logit grew at least `logit_growth` times and reached
      10 (`_LOGIT_FLOOR`: from there a head attends to few keys) is reported, one finding
      per attention call site (`"scaled_dot_product_attention#0 of 0.attn"`) naming the
      heads, both values and the growth factor. Growing logits precede attention entropy
      collapse and loss divergence (what QK layer norm and QK-clip prevent).
    - `loss_spike`, given `loss=` (a value per step, a list or `{step: value}`): a value
      more than `spike` robust standard deviations above the median of the 20 before it
      (or not finite).

    Args:
        recording: a `Tracker` or a list of `Stash`, with statistics (best:
            `stats=tensor_tracker.diagnosis_stats`) or full copies.
        loss: the loss per step, for the spike check.
        vanishing, exploding: gradient ratio thresholds (input end / output end).
        dead: fraction of dead units from which a module is reported.
        saturation: mean slope (relative to the slope at 0) below which a module is
            reported.
        formats: keys of `tensor_tracker.formats.FORMATS` or `BLOCK_FORMATS` to check.
        overflow, underflow: fractions of values above which a module is reported.
        block_error: for block formats, the multiple of the format's error on Gaussian
            data above which a module is reported.
        update_size: `(low, high)` bounds of the update-to-parameter rms ratio.
        spike: robust standard deviations for a loss spike.
        outlier_ratio: `k` of the outlier channels check: a channel's `abs_max` over its
            module's median channel above which it is reported (above 1).
        logit_growth: the factor (above 1) by which a head's largest attention logit must
            grow from the first to the last recorded step to be reported.

    Returns:
        A `Diagnosis`: findings (empty when nothing looks wrong) and what was checked.

    Raises:
        TypeError: `recording` is not a tracker or a list of stashes, or an argument is
            not a number (`loss=` not numbers per step).
        ValueError: an unknown format, a fraction (`dead`, `saturation`, `overflow`,
            `underflow`) outside [0, 1], thresholds out of order.

    Example:
        >>> with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
        ...     for step in range(3):
        ...         model(x).square().mean().backward()
        ...         t.step()
        >>> diagnosis = tensor_tracker.diagnose(t)  # a table in a notebook
        >>> print(diagnosis)  # doctest: +ELLIPSIS
        No findings.
        No problems found by 5 checks (3 skipped: see checked).
        Checked: nonfinite: the min/max (or nonfinite, sum) of every recorded tensor; ...
    """
    if isinstance(formats, str) or not isinstance(formats, Sequence):
        check_type(formats, (list, tuple), "diagnose(formats=...)", "a list of format keys")
    for key in formats:
        if key not in FORMATS and key not in BLOCK_FORMATS:
            raise ArgumentValueError(
                f"diagnose: formats= holds {key!r}; use keys of FORMATS: {list(FORMATS)} "
                f"or of BLOCK_FORMATS: {list(BLOCK_FORMATS)}"
            )
    check_number(
        vanishing,
        "diagnose(vanishing=...)",
        "a gradient ratio",
        low=0,
        high=1,
        open_low=True,
        open_high=True,
    )
    check_number(exploding, "diagnose(exploding=...)", "a gradient ratio", low=1, open_low=True)
    fraction = "a fraction of values"
    check_number(dead, "diagnose(dead=...)", "a fraction of units", low=0, high=1)
    check_number(saturation, "diagnose(saturation=...)", "a relative slope", low=0, high=1)
    check_number(overflow, "diagnose(overflow=...)", fraction, low=0, high=1)
    check_number(underflow, "diagnose(underflow=...)", fraction, low=0, high=1)
    check_number(spike, "diagnose(spike=...)", "robust standard deviations", low=0, open_low=True)
    check_number(block_error, "diagnose(block_error=...)", "a relative error", low=0, open_low=True)
    check_number(
        outlier_ratio,
        "diagnose(outlier_ratio=...)",
        "a ratio to the median channel",
        low=1,
        open_low=True,
    )
    check_number(
        logit_growth, "diagnose(logit_growth=...)", "a growth factor", low=1, open_low=True
    )
    check_type(update_size, (tuple, list), "diagnose(update_size=...)", "(low, high)")
    if len(update_size) != 2:
        raise ArgumentValueError(
            f"diagnose(update_size=...) must be (low, high), got {update_size!r}"
        )
    low = check_number(update_size[0], "diagnose(update_size=...) low", "an rms ratio", low=0)
    high = check_number(update_size[1], "diagnose(update_size=...) high", "an rms ratio", low=0)
    if not low < high:
        raise ArgumentValueError(
            f"diagnose(update_size=...) must be (low, high) with 0 <= low < high, got {update_size!r}"
        )
    if loss is not None:
        loss_steps, loss_values = loss_series(loss, "diagnose(loss=...)")
    rec = _Recording(recording)
    found: list[Finding] = []
    checked: dict[str, str] = {}
    if len(rec.frame) == 0:
        return Diagnosis((), {"all": "skipped: nothing was recorded"})
    try:
        origin = first_nonfinite(recording)
    except KeyError as error:
        checked["nonfinite"] = f"skipped: {error.args[0]}"
    else:
        checked["nonfinite"] = "the min/max (or nonfinite, sum) of every recorded tensor"
        if origin is not None:
            found.append(
                Finding(
                    "nonfinite",
                    (member_label(origin.name, "op", origin.op) if origin.op else origin.name,),
                    (origin.step, origin.step),
                    {"seen in": _seen_in(*origin.seen_in[:3])},
                    origin.explanation,
                    "fix that operation (first_nonfinite(t).evidence has its statistics); "
                    "arm track(..., on_nonfinite='raise') to stop there",
                )
            )
    checked["gradients"] = _check_gradients(rec, vanishing, exploding, found)
    checked["dead_units"] = _check_dead_units(rec, dead, found)
    checked["saturation"] = _check_saturation(rec, saturation, found)
    checked["formats"] = _check_formats(rec, formats, overflow, underflow, block_error, found)
    checked["update_size"] = _check_updates(rec, update_size[0], update_size[1], found)
    checked["outlier_channels"] = _check_outlier_channels(rec, outlier_ratio, found)
    checked["attention_logit_growth"] = _check_logit_growth(rec, logit_growth, found)
    if loss is not None:
        checked["loss"] = _check_loss(rec, loss_steps, loss_values, spike, found)
    return Diagnosis(tuple(found), checked)
