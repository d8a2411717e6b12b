"""Choosing stashes for plots and viewers: what a user passed, which modules, steps and calls."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import Tensor

from .._core.records import Stash, first_value
from .._core.structure import iter_leaves
from .._core.tracker import Recorder
from ..errors import ArgumentTypeError
from ..stats import Stats

__all__ = [
    "CHILD_KINDS",
    "ROOT_LABEL",
    "Kinds",
    "as_stashes",
    "display_name",
    "first_leaf",
    "first_stashes",
    "match_names",
    "member_label",
    "module_order",
    "name_filter",
    "recorded_steps",
    "select",
    "select_from",
    "short_label",
    "short_labels",
    "shown_value",
    "stash_label",
    "stash_tensor",
]

Kinds = str | tuple[str, ...] | None
"""Which kinds of records a selection keeps: one, several, or any (None)."""

ROOT_LABEL = "<model>"
"""How the root module (name `""`) is shown in plots and viewers."""


CHILD_KINDS = ("op", "tap")
"""Kinds of records made inside a module's forward (an operation `ops=` names, a value given
to `tap`): readers show them as children of that module, beside its output."""


def member_label(name: str, kind: str, attr: str) -> str:
    """How answers name a record: an op or tap record as what it is inside its module
    (`"softmax#0 of encoder.layer.3.attention.self"`), any other by its module's name."""
    if kind in CHILD_KINDS:
        return f"{attr} of {display_name(name)}"
    return name


def display_name(name: str) -> str:
    """A module name for display: the root `""` becomes `"<model>"`."""
    return name if name else ROOT_LABEL


def short_label(text: str, width: int = 36) -> str:
    """`text` shortened to at most `width` characters by leaving out whole name components
    from the left, never block indices nor the last component
    (`"encoder.layer.11.attention.output.LayerNorm"` -> `"…layer.11.attention.output.LayerNorm"`),
    then by cutting the middle."""
    parts = text.split(".")
    dropped = [False] * len(parts)
    for i in range(len(parts) - 1):
        if len(_join(parts, dropped)) <= width:
            break
        if not parts[i].isdigit():
            dropped[i] = True
    out = _join(parts, dropped)
    if len(out) <= width:
        return out
    head = (width - 1) // 2
    return out[:head] + "\u2026" + out[len(out) - (width - 1 - head) :]


def _join(parts: list[str], dropped: list[bool]) -> str:
    """Dotted name with each run of dropped components shown as one "…"."""
    out: list[str] = []
    for part, gone in zip(parts, dropped, strict=True):
        if not gone:
            out.append(part)
        elif not out or out[-1] != "\u2026":
            out.append("\u2026")
    return ".".join(out).replace("\u2026.", "\u2026")


def short_labels(names: Sequence[str], width: int = 36) -> list[str]:
    """`short_label` of each name, except where different names would read the same (the
    components left out told them apart): those keep their whole name."""
    labels = [short_label(name, width) for name in names]
    owners: dict[str, set[str]] = {}
    for name, label in zip(names, labels, strict=True):
        owners.setdefault(label, set()).add(name)
    return [
        name if len(owners[label]) > 1 else label for name, label in zip(names, labels, strict=True)
    ]


def as_stashes(source: Any, argument: str) -> list[Stash]:
    """A list of stashes from a `Tracker`, a `Stash`, or an iterable of `Stash`.

    Raises:
        TypeError: `source` is something else (the error names `argument`).
    """
    if isinstance(source, Stash):
        return [source]
    if isinstance(source, Recorder):
        return list(source)
    if isinstance(source, (str, bytes, Tensor)) or not isinstance(source, Iterable):
        raise ArgumentTypeError(
            f"{argument} must be a Tracker (from `with track(model) as t:`), a Stash, or a "
            f"list of Stash; got {type(source).__name__}"
        )
    stashes = list(source)
    bad = next((s for s in stashes if not isinstance(s, Stash)), None)
    if bad is not None:
        raise ArgumentTypeError(
            f"{argument} must hold Stash objects (e.g. list(tracker)), found a {type(bad).__name__}"
        )
    return stashes


def select_from(
    source: Any,
    argument: str,
    *,
    names: str | re.Pattern[str] | Sequence[str] | None = None,
    grad: bool | None = None,
    kind: Kinds = "output",
    step: int | None = None,
) -> list[Stash]:
    """`select(as_stashes(source, argument), ...)`, building from a tracker only the
    stashes that match: a few modules or one step of a run of hundreds of thousands of
    records are found in milliseconds instead of seconds."""
    if not isinstance(source, Recorder):
        stashes = as_stashes(source, argument)
        return select(stashes, names=names, grad=grad, kind=kind, step=step)
    found = source._where(_site_filter(names, kind), grad, step)
    return select(found, names=names, grad=grad, kind=kind, step=step)


def recorded_steps(source: Any, argument: str, kind: Kinds = None) -> list[int]:
    """The steps, ascending, at which stashes of `kind` (any kind for None) were recorded."""
    if isinstance(source, Recorder):
        return source._steps_where(_site_filter(None, kind))
    return sorted({s.step for s in as_stashes(source, argument) if _of_kind(s.kind, kind)})


def _of_kind(kind: str, wanted: Kinds) -> bool:
    return wanted is None or kind == wanted or (isinstance(wanted, tuple) and kind in wanted)


def _site_filter(
    names: str | re.Pattern[str] | Sequence[str] | None, kind: Kinds
) -> Callable[[Any], bool]:
    keep = name_filter(names, "names")
    return lambda site: _of_kind(site.kind, kind) and (keep is None or keep(site.name))


def first_stashes(source: Any, argument: str) -> list[Stash]:
    """The first forward and first gradient stash of each module, kind and attribute, in
    recording order: what a tracker (or list of stashes) holds, for choosing options,
    without building every `Stash` of a long run."""
    if isinstance(source, Recorder):
        return source._first_of_sites()
    first: dict[tuple[str, str, str, bool], Stash] = {}
    for s in as_stashes(source, argument):
        first.setdefault((s.name, s.kind, s.attr, s.grad), s)
    return list(first.values())


def first_leaf(value: Any, kinds: type | tuple[type, ...]) -> Any:
    """The first object of type `kinds` in a stash's value, or None when it holds none:
    its `first_value` when that is one, else the first met walking the value (a dict's or
    a Hugging Face `ModelOutput`'s first tensor entry, a tuple's first tensor after a
    `None`, ...). The statistics columns of `to_frame` and the figures read a value so."""
    first = first_value(value)  # a tuple such as (Stats, None) needs no walk
    if isinstance(first, kinds):
        return first
    return next((leaf for leaf in iter_leaves(value) if isinstance(leaf, kinds)), None)


def shown_value(stash: Stash) -> Tensor | Stats | None:
    """What figures show of a stash: the first tensor, or the first recorded statistics
    (`stats=`), in its value (see `first_leaf`); None when it holds neither."""
    value: Tensor | Stats | None = first_leaf(stash.value, (Tensor, Stats))
    return value


def stash_tensor(stash: Stash) -> Tensor | None:
    """The first tensor of the stash's value (see `shown_value`), else `None`."""
    value = shown_value(stash)
    return value if isinstance(value, Tensor) else None


def stash_label(stash: Stash, *, call: bool = False, step: bool = False) -> str:
    """A short label such as `"blocks.0 (fwd)"`, `"<model> (grad)"`,
    `"0.linear input x (fwd, step 3, call 1)"` or `"softmax#0 of 0.attn (grad)"`."""
    what = display_name(stash.name)
    if stash.kind in CHILD_KINDS:
        what = member_label(stash.name, stash.kind, stash.attr)
    elif stash.kind != "output":
        what += f" {stash.kind}" + (f" {stash.attr}" if stash.attr else "")
    details = ["grad" if stash.grad else "fwd"]
    if step:
        details.append(f"step {stash.step}")
    if call:
        details.append(f"call {stash.call}")
    return f"{what} ({', '.join(details)})"


def match_names(names: Iterable[str], pattern: str) -> list[str]:
    """The names that contain `pattern` or match it as a regular expression (`re.search`).

    An invalid regular expression is used as a plain substring; `"<model>"` matches the root.
    An empty pattern matches every name.
    """
    names = list(names)
    if not pattern:
        return names
    try:
        regex: re.Pattern[str] | None = re.compile(pattern)
    except re.error:
        regex = None
    out = []
    for name in names:
        shown = display_name(name)
        found = pattern in name or pattern in shown
        if found or (regex is not None and (regex.search(name) or regex.search(shown))):
            out.append(name)
    return out


def module_order(
    stashes: Iterable[Stash], key: Callable[[Stash], str] = lambda s: s.name
) -> list[str]:
    """Module names (or another `key` of each stash) in the order of their first forward
    stash (execution order), then those seen only in gradients, in the order of their
    first gradient."""
    forward: dict[str, None] = {}
    backward: dict[str, None] = {}
    for s in stashes:
        (backward if s.grad else forward).setdefault(key(s), None)
    return list(forward) + [n for n in backward if n not in forward]


def name_filter(
    names: str | re.Pattern[str] | Sequence[str] | None, argument: str = "names"
) -> Callable[[str], bool] | None:
    """A predicate on module names (`None` when `names` is `None`): `names` is a substring or
    regular expression (see `match_names`), a compiled pattern, or a list of exact names
    (`"<model>"` for the root).

    Raises:
        TypeError: a list entry is not a str (the error names `argument`).
    """
    if names is None:
        return None
    if isinstance(names, re.Pattern):
        return lambda name: bool(names.search(name) or names.search(display_name(name)))
    if isinstance(names, str):
        return lambda name: name in match_names([name], names)
    wanted = list(names)
    bad = next((n for n in wanted if not isinstance(n, str)), None)
    if bad is not None:
        raise ArgumentTypeError(f"{argument} must be module names (str), found {bad!r}")
    exact = {"" if n == ROOT_LABEL else n for n in wanted}
    return lambda name: name in exact


def select(
    stashes: Iterable[Stash],
    *,
    names: str | re.Pattern[str] | Sequence[str] | None = None,
    grad: bool | None = None,
    kind: Kinds = "output",
    step: int | None = None,
    call: int | None = None,
    argument: str = "names",
) -> list[Stash]:
    """The stashes that match every given criterion (`None` means any).

    `names` is a substring or regular expression searched in module names, a compiled
    pattern, or a list of exact names (`"<model>"` for the root). `kind` is a kind, a tuple
    of kinds (`("output", *CHILD_KINDS)`: outputs with the ops and taps inside them), or
    None for any.
    """
    keep = name_filter(names, argument)
    return [
        s
        for s in stashes
        if (grad is None or s.grad == grad)
        and _of_kind(s.kind, kind)
        and (step is None or s.step == step)
        and (call is None or s.call == call)
        and (keep is None or keep(s.name))
    ]
