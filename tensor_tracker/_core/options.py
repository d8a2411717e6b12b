"""`Options`: every option of `track` and `Tracker`, each declared once here with its type,
default, documentation and check.

`track(module, **options)` and `Tracker(stash, **options)` take these options by the same
names and defaults, and the Args of their docstrings are generated from these declarations
(`document`); a test holds their signatures to them. An option is checked when `Options` is
made, before anything touches a model."""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch

from .._validate import (
    check_bool,
    check_callable,
    check_choice,
    check_choices,
    check_count,
    check_int,
    check_path,
    check_type,
)
from ..errors import ArgumentValueError
from .ops import check_ops
from .records import StashFn, StashValueFn
from .stash_fns import (
    BoundDefaultStash,
    CopyValue,
    check_copy_device,
    check_copy_dtype,
    get_stash_fn,
)

__all__ = [
    "CAPTURE",
    "Options",
    "Pattern",
    "check_filters",
    "compile_pattern",
    "document",
    "option_fields",
    "use_stats_parser",
]

Pattern = str | re.Pattern[str] | None
"""A module-name filter: `None`, a regular expression string, or a compiled pattern."""

CAPTURE = ("outputs", "inputs", "params", "updates")
"""What `capture=` can name: module outputs, module inputs, each module's own parameters,
and what `optimizer.step()` changes in them."""

Check = Callable[[Any, str], Any]
"""An option's check: given the value and the argument as messages name it (`"every="`),
raise a `TensorTrackerError` naming it, or return the value normalised."""

Scope = Literal["tracker", "registration"]
"""Where an option acts: on the tracker (`track` and `Tracker(...)` take it), or on which
modules are registered (`track` takes it; a manual tracker passes it to `register_all`)."""


def compile_pattern(pattern: Pattern, argument: str) -> re.Pattern[str] | None:
    """Compile a module-name filter, naming `argument` (e.g. `"include="`) in the error when
    it is not valid."""
    if pattern is None or isinstance(pattern, re.Pattern):
        return pattern
    check_type(pattern, str, argument, "a regex string, a compiled pattern or None")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ArgumentValueError(
            f"{argument}{pattern!r} is not a valid regular expression: {error}"
        ) from None


def check_filters(
    grad: bool, include: Pattern, exclude: Pattern
) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    """Check `register_all`'s `grad`, `include` and `exclude`; the patterns compiled."""
    check_bool(grad, "grad=")
    return compile_pattern(include, "include="), compile_pattern(exclude, "exclude=")


_stats_parser: list[Callable[[Any], StashValueFn]] = []


def use_stats_parser(parse: Callable[[Any], StashValueFn]) -> None:
    """Let `Options(stats=...)` turn a statistics spec into its `StashValueFn` with `parse`.
    `tensor_tracker.stats` calls it with its `parse` when imported (always, by the package's
    `__init__`): the statistics are a layer above this one, so this one cannot import them."""
    _stats_parser[:] = [parse]


def _stats(spec: Any, argument: str) -> StashValueFn | None:
    if spec is None or spec is False:
        return None
    assert _stats_parser, "tensor_tracker.stats registers its parser when imported"
    return _stats_parser[0](spec)


def _capture(capture: Any, argument: str) -> frozenset[str]:
    if isinstance(capture, str):
        capture = {capture}
    check_type(capture, Iterable, argument, f"one or several of {CAPTURE}")
    chosen = frozenset(capture)
    check_choices(chosen, argument, CAPTURE)
    return chosen


def _every(every: Any, argument: str) -> int | Mapping[str, int]:
    if not isinstance(every, Mapping):
        check_count(every, argument, "record every N-th step")
        return every  # type: ignore[no-any-return]
    for key, value in every.items():
        check_type(key, str, f"{argument} keys", "step kinds (str)")
        check_count(value, f"every[{key!r}]", "record every N-th step of that kind")
    if "default" not in every:
        # Without it the steps of no declared kind would be recorded every step, which
        # `every={"eval": 10}` does not say.
        example = {"default": 1, **every}
        raise ArgumentValueError(
            f"{argument}{dict(every)!r} has no 'default' entry (the pace of the steps of no "
            f"declared kind): add one, e.g. {argument}{example!r}"
        )
    return types.MappingProxyType(dict(every))


def _optimizer(optimizer: Any, argument: str) -> torch.optim.Optimizer | None:
    if optimizer is not None:
        check_type(optimizer, torch.optim.Optimizer, argument, "a torch.optim.Optimizer")
    return optimizer  # type: ignore[no-any-return]


def _one_of(*choices: str) -> Check:
    def check(value: Any, argument: str) -> str:
        check_type(value, str, argument, " or ".join(f'"{c}"' for c in choices))
        check_choice(value, argument, choices)
        return value  # type: ignore[no-any-return]

    return check


def _on_nonfinite(value: Any, argument: str) -> Any:
    if value is None or callable(value):
        return value
    check_type(value, str, argument, '"raise", "warn", a function or None')
    check_choice(value, argument, ("raise", "warn"))
    return value


def _about(doc: str, check: Check, on: Scope = "tracker") -> dict[str, Any]:
    """An `Options` field's metadata: its documentation (one paragraph, as the Args of
    `track` and `Tracker` show it), its check, and where it acts."""
    return {"doc": doc, "check": check, "on": on}


def _optional(check: Callable[[Any, str, str], Any], what: str) -> Check:
    """The check of an option that is `None` or passes `check` (`what`: what it holds)."""

    def optional(value: Any, argument: str) -> Any:
        return None if value is None else check(value, argument, what)

    return optional


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How a tracker records: every option of `track` and `Tracker(...)`, checked and
    normalised when made (a wrong option raises here, before anything touches the model;
    patterns come out compiled, `capture` a frozenset, `every` a read-only mapping, `stats`
    the `StatsFn`, `device` a `torch.device`). `stash_fn` is the `StashFn` the tracker
    records with, made from `stash`, `stash_value`, `stats` and the copy options.

    `track` and `Tracker(...)` make one from their arguments (`Options.of`); `grad`,
    `include` and `exclude` choose which modules `track` registers, so a manual `Tracker`
    passes them to `register_all` instead.

    Attributes:

    Example:
        >>> options = Options(capture=["outputs", "params"], every={"default": 10, "eval": 2})
        >>> sorted(options.capture), options.every_of("eval"), options.every_of("long")
        (['outputs', 'params'], 2, 10)
        >>> Options(every=0)
        Traceback (most recent call last):
        ...
        tensor_tracker.errors.ArgumentValueError: every= must be a positive int (record every N-th step), got 0
    """

    grad: bool = dataclasses.field(
        default=True,
        metadata=_about(
            "also record gradients: of module outputs, and of inputs and parameters per "
            "`capture` (`False`: forward values only).",
            check_bool,
            "registration",
        ),
    )
    include: Pattern = dataclasses.field(
        default=None,
        metadata=_about(
            "record only modules whose name matches this regex (searched with `re.search`; a "
            'string or a compiled pattern), e.g. `include="layers\\.\\d+$"`.',
            compile_pattern,
            "registration",
        ),
    )
    exclude: Pattern = dataclasses.field(
        default=None,
        metadata=_about(
            'skip modules whose name matches this regex, e.g. `exclude="dropout"`.',
            compile_pattern,
            "registration",
        ),
    )
    stash_value: StashValueFn | None = dataclasses.field(
        default=None,
        metadata=_about(
            "a function applied to each recorded tensor, whose result is kept instead of a copy, "
            "e.g. `lambda t: t.detach().abs().max()` (it receives the live tensor: detach it, or "
            "the stash keeps the autograd graph alive). Not with `stash`.",
            _optional(check_callable, "Tensor -> value"),
        ),
    )
    stash: StashFn | None = dataclasses.field(
        default=None,
        metadata=_about(
            "a function that builds each `Stash` from its `Event` yourself (it gets the live "
            "objects). Not with `stash_value`.",
            _optional(check_callable, "Event -> Stash"),
        ),
    )
    stats: Any = dataclasses.field(
        default=None,
        metadata=_about(
            "keep a few statistics per tensor, computed on its device, instead of a copy: `True` "
            '(mean, std, rms, abs_max, min, max, numel), a list of names (`["rms", '
            '"fp16_overflow"]`, block-scaled formats simulated such as `"nvfp4_underflow"`), '
            'custom `("name", fn)` pairs, `tensor_tracker.stats.histogram()` or '
            "`tensor_tracker.stats.blocks()`; see `tensor_tracker.stats`. Not with `stash`, "
            "`stash_value` or the copy options.",
            _stats,
        ),
    )
    ops: Any = dataclasses.field(
        default=None,
        metadata=_about(
            "also record calls of these functional operations made in a tracked module's own "
            '`forward` (not in a tracked child\'s): an operation name (`"softmax"`, '
            '`"matmul"`, `"add"`, `"mul"`, `"linear"`, `"layer_norm"`, `"gelu"`, '
            '`"scaled_dot_product_attention"`, ...; `a + b` is `"add"`, `a @ b` is '
            '`"matmul"`, `x += y` too is `"add"`), a torch function (`torch.cumsum`), or a '
            'list of them. Each call is a record of the module with `kind="op"` and '
            '`attr="<op>#<k>"` (`k` counts that op\'s calls within one call of the module), '
            "and its gradient like an output's.",
            check_ops,
        ),
    )
    capture: str | Iterable[str] = dataclasses.field(
        default="outputs",
        metadata=_about(
            'what to record for each registered module, one or more of `"outputs"` (the '
            'default), `"inputs"` (each positional/keyword argument holding tensors) and '
            "`\"params\"` (the module's own parameters, not its children's). With `grad` the "
            "gradients of each are recorded too (parameter gradients once accumulated). "
            '`"updates"` (needs `optimizer=`): at each `optimizer.step()`, each parameter\'s '
            'update (after minus before) as a record of `kind="update"`, `attr` the '
            'parameter\'s name, and `rms(update) / rms(parameter)` as one of `kind="update_ratio"`; '
            "for Adam and AdamW rebuilt from the optimizer's state without copying the "
            "parameters (see `tensor_tracker._core.updates`).",
            _capture,
        ),
    )
    optimizer: torch.optim.Optimizer | None = dataclasses.field(
        default=None,
        metadata=_about(
            "also record this optimizer's per-parameter state (e.g. Adam's `exp_avg` and "
            "`exp_avg_sq`) for the registered modules' parameters after each `optimizer.step()`.",
            _optimizer,
        ),
    )
    every: int | Mapping[str, int] = dataclasses.field(
        default=1,
        metadata=_about(
            "record only every N-th step (see `Tracker.step`); between recorded steps no hook is "
            "attached at all. A dict `{kind: N}` sets it per kind of step (see `step(kind=...)`; "
            'the `"default"` entry, which it must have, for the steps of no declared kind), so '
            "that each kind is recorded at least every N of its steps.",
            _every,
        ),
    )
    train_only: bool = dataclasses.field(
        default=False,
        metadata=_about("record only while modules are in training mode.", check_bool),
    )
    max_bytes: int | None = dataclasses.field(
        default=None,
        metadata=_about(
            "raise `MemoryBudgetError` (after removing the hooks, keeping what was stashed) "
            "instead of letting the stashes grow past this many bytes.",
            _optional(check_count, "bytes"),
        ),
    )
    keep_steps: int | None = dataclasses.field(
        default=None,
        metadata=_about(
            "keep only the records of the last `keep_steps` steps that recorded anything (the "
            "oldest is dropped when the first record of a new step comes, so no more than "
            "`keep_steps` steps are ever held, and after a loop ending in `step()` the last "
            "`keep_steps` steps of the loop are there): a flight recorder of full copies, "
            'bounded in memory, e.g. beside a `stats=` tracker with `on_nonfinite="raise"`. '
            "Not with `stats` (statistics are cheap to keep).",
            _optional(check_count, "steps to keep"),
        ),
    )
    device: str | torch.device | None = dataclasses.field(
        default="cpu",
        metadata=_about(
            "where copies go (`None`: each stays on its tensor's device, fastest on a GPU).",
            check_copy_device,
        ),
    )
    dtype: torch.dtype | None = dataclasses.field(
        default=None,
        metadata=_about(
            "store copies in this floating-point dtype (`torch.bfloat16` halves the memory of "
            "float32).",
            check_copy_dtype,
        ),
    )
    sample: int | None = dataclasses.field(
        default=None,
        metadata=_about(
            "keep this many random elements of each tensor (flattened; drawn with `seed`).",
            _optional(check_count, "elements to keep"),
        ),
    )
    seed: int = dataclasses.field(
        default=0, metadata=_about("the seed of `sample`'s random draws.", check_int)
    )
    non_blocking: bool = dataclasses.field(
        default=False,
        metadata=_about(
            "copy from a GPU to pinned CPU memory asynchronously (the tracker synchronises "
            "before the stashes are read).",
            check_bool,
        ),
    )
    on_nonfinite: str | Callable[[Any], Any] | None = dataclasses.field(
        default=None,
        metadata=_about(
            "a tripwire for NaN and infinities (needs `stats=` with `min`/`max` or `nonfinite`, "
            'as `stats=True` has, or at least `sum`: `stats=["sum"]` is the cheapest, one pass '
            'per tensor, and also trips when finite values sum beyond ~3.4e38): `"raise"` '
            "stops at the end of the first backward pass (or at `step()`) that recorded one, "
            "before `optimizer.step()` can write it into the weights, with a `NonFiniteError` "
            "naming where it appeared (see `first_nonfinite`; the hooks are removed, the stashes "
            'kept); `"warn"` warns once and goes on; a function is called once with the '
            "`NonFinite`. Every tensor of an output is watched (tuples, dicts, a Hugging Face "
            "`ModelOutput`). The check adds no host synchronisation to the hooks: one per "
            "backward pass.",
            _on_nonfinite,
        ),
    )
    stream_to: str | os.PathLike[str] | None = dataclasses.field(
        default=None,
        metadata=_about(
            "a directory to write the recording to as the run goes (see `Tracker.save` for the "
            "format; needs the `[save]` extra): at each `step()` and at the end of each `with` "
            "block, the records so far are appended to disk and dropped from memory, so memory "
            "stays flat over any number of steps, and `tensor_tracker.load(path)` reads the run, "
            "also from another process while it goes on. The tracker itself then holds only the "
            "current step. Under `torch.distributed` (initialised before the tracker is made), "
            "each rank writes its own recording, `stream_to/rank-N`, and `load(stream_to)` reads "
            "them all. Each step is written whole or not at all: a process killed (or a Ctrl-C) "
            "mid-write loses only the step being written, and `load` says so; a step an "
            "exception cut short (the block ended before `step()`) is written as far as it went "
            "and listed in `partial_steps`. The end of each `with` block closes the recording's "
            "files and releases it (`with t:` again appends).",
            _optional(check_path, "a directory path"),
        ),
    )
    on_disk_full: str = dataclasses.field(
        default="raise",
        metadata=_about(
            'what a write error of `stream_to=` (a full disk) does. `"raise"` (the default): '
            "`step()` raises one `RecordingError` naming the directory and its free space, after "
            'closing the recording with every step written before (it loads). `"warn"`: the '
            "same closing, then a warning, the hooks removed and training goes on unrecorded. "
            "Only with `stream_to=`.",
            _one_of("raise", "warn"),
        ),
    )
    stash_fn: StashFn = dataclasses.field(init=False, compare=False)
    """The `StashFn` the tracker records with: `stash`, else `default_stash` bound to
    `stash_value`, to the `stats`' function, or to a `CopyValue` of the copy options."""

    def __post_init__(self) -> None:
        set_field = object.__setattr__  # frozen: the checked values replace what was passed
        for field in dataclasses.fields(self):
            if field.init:
                check: Check = field.metadata["check"]
                set_field(self, field.name, check(getattr(self, field.name), f"{field.name}="))
        custom = [n for n in ("stash", "stash_value") if getattr(self, n) is not None]
        copy = "/".join(f"{n}=" for n in _COPY if getattr(self, n) != _DEFAULTS[n])
        if custom and self.stats is not None:
            raise ArgumentValueError(
                f"stats= replaces the stashed tensors by statistics; it cannot be combined "
                f"with {custom[0]}= (compute statistics inside your own function instead)"
            )
        if copy and custom:
            raise ArgumentValueError(
                f"{copy} configure the default copy; they cannot be combined with {custom[0]}="
            )
        if copy and self.stats is not None:
            raise ArgumentValueError(f"stats= keeps statistics, not copies; drop {copy}")
        if "updates" in self.capture and self.optimizer is None:
            raise ArgumentValueError(
                'capture="updates" records what optimizer.step() changes in the parameters: '
                "pass optimizer=<your optimizer> too"
            )
        if self.on_disk_full != "raise" and self.stream_to is None:
            raise ArgumentValueError(
                f"on_disk_full={self.on_disk_full!r} says what a write error of stream_to= "
                "does, and nothing is streamed: pass stream_to=<a directory> too, or leave "
                "on_disk_full out"
            )
        stash_value = self.stash_value if self.stash_value is not None else self.stats
        if stash_value is None and self.stash is None:
            stash_value = CopyValue(
                self.device, self.dtype, self.sample, self.seed, self.non_blocking
            )
        set_field(self, "stash_fn", get_stash_fn(stash_value, self.stash))
        if self.keep_steps is not None and self.keeps_statistics:
            raise ArgumentValueError(
                "keep_steps= keeps the full copies of the last steps (a flight recorder); "
                "with stats= every step's statistics are kept anyway: drop one of them"
            )
        if self.on_nonfinite is not None and not self.keeps_statistics:
            raise ArgumentValueError(
                "on_nonfinite= reads the statistics of each tensor: pass stats=True (or "
                'stats=["sum"], the cheapest)'
            )

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> Options:
        """The options named in `arguments`, e.g. a function's `locals()`: how `track` and
        `Tracker` hand on every option they take, by name, so that none is left behind."""
        return cls(**{f.name: arguments[f.name] for f in option_fields() if f.name in arguments})

    @property
    def keeps_statistics(self) -> bool:
        """Whether records keep statistics in a store (`stats=`, or a `stash_value` that
        brings its own store), not a Python object each."""
        fn = self.stash_fn
        store = (
            getattr(fn.stash_value, "store", None) if isinstance(fn, BoundDefaultStash) else None
        )
        return callable(store)

    def every_of(self, kind: str) -> int:
        """Every how many steps of `kind` one is recorded (a kind `every` does not name
        goes at the `"default"` pace)."""
        every = self.every
        if isinstance(every, int):
            return every
        return every.get(kind, every["default"])


def option_fields(on: Scope | None = None) -> list[dataclasses.Field[Any]]:
    """The declarations of the options (those acting `on` it, or all), in order."""
    return [
        f for f in dataclasses.fields(Options) if f.init and (on is None or f.metadata["on"] == on)
    ]


_COPY = ("device", "dtype", "sample", "seed", "non_blocking")
"""The options of the default copy (`CopyValue`)."""
_DEFAULTS = {f.name: f.metadata["check"](f.default, f"{f.name}=") for f in option_fields()}
"""Each option's default, normalised as its check does."""


def document(doc: str, names: Iterable[str], width: int = 92) -> str:
    """`doc` (a docstring) with an entry `name: <its documentation>` for each option of
    `names` added at the end of its `Args:` (or `Attributes:`) section, wrapped to
    `width` columns: how `track`, `Tracker` and `Options` document each option from its
    one declaration."""
    docs = {f.name: f.metadata["doc"] for f in option_fields()}
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() in ("Args:", "Attributes:"))
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())] + "    "
    end = start + 1
    while end < len(lines) and lines[end].startswith(indent):
        end += 1
    entries = [
        textwrap.fill(
            f"{name}: {docs[name]}",
            width,
            initial_indent=indent,
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
        )
        for name in names
    ]
    return "\n".join([*lines[:end], *entries, *lines[end:]])


Options.__doc__ = document(Options.__doc__ or "", [f.name for f in option_fields()])
