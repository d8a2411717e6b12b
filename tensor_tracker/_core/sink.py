"""`RecordSink`: where every record goes, from what a hook saw to the stored row.

One entry for the hooks, `record(site, call, step, flags, value)`, and one for the
statistics a compiled graph computed, `put_raw`. A record is kept in `Columns`:
statistics through the store (`StatsStore.put`, a few numbers on the device), anything
else through the standard `StashFn` (`keep`) or the user's own (which gets an `Event`).
Around that: the memory budget (`max_bytes=`), the flight recorder (`keep_steps=`) and
the non-finite watch (`on_nonfinite=`). The sink knows nothing of modules or hooks: a
site is an index into `Columns.sites`, and what stops tracking is the `stop` it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from .._torch_compat import graph_task_id, queue_at_end_of_backward
from ..errors import ArgumentTypeError, ArgumentValueError
from .budget import MemoryBudget, held_nbytes, value_nbytes
from .columns import GRAD, REFS, TRAINING, TUPLE, Columns
from .grad_hooks import unrecordable
from .options import Options
from .plan import Layout, graph_value, is_flat_tuple
from .records import Kind, Origin, Stash, StashFn, StashValueFn
from .stash_fns import BoundDefaultStash, default_stash_value, keep

__all__ = ["RecordSink"]


def _flat_tensors(value: Any) -> bool:
    """Whether `value` is a plain tuple of tensors and `None`s, with at least one tensor."""
    if type(value) is not tuple:
        return False
    found = False
    for item in value:
        if isinstance(item, Tensor):
            found = True
        elif item is not None:
            return False
    return found


class _Guarded:
    """One of the library's own `StashValueFn`s, made never to raise into the user's pass:
    a tensor it cannot handle is kept as an `Unrecorded` (with one warning)."""

    __slots__ = ("fn",)

    def __init__(self, fn: StashValueFn) -> None:
        self.fn = fn

    def __call__(self, tensor: Tensor) -> Any:
        try:
            return self.fn(tensor)
        except _REFUSED:
            raise  # an argument the tensor shows wrong (per_channel(dim=99)): see _refuse
        except Exception as error:
            return unrecordable(tensor, error)


# What the library's own value functions raise for an argument that a tensor shows to be
# wrong (`stats.check_dim`): not a tensor they cannot handle, but a setting to fix.
_REFUSED = (ArgumentTypeError, ArgumentValueError)


def _guard(fn: StashValueFn) -> StashValueFn:
    # A user's own stash_value raises as it likes: that error is theirs to see.
    builtin = fn is default_stash_value or getattr(fn, "builtin_stash_value", False)
    return _Guarded(fn) if builtin else fn


NonFiniteWatch = tuple[Callable[[], bool], Callable[[], None], Callable[[Any], None]]


class RecordSink:
    """Keeps records as rows of `stashes`, within the budget, watched for non-finite values.

    Args:
        options: the tracker's options (`stash`, `max_bytes`, `keep_steps` are read).
        stop: what a record that cannot be kept calls before raising (past `max_bytes=`,
            a setting the tensor shows wrong, a bad `stash=` result): the tracker's
            `unregister`, so the hooks go and the records stay.

    Example:
        >>> sink = RecordSink(Options(), stop=lambda: None)
        >>> site = sink.site_id("0", nn.Linear, "output", "")
        >>> sink.record(site, 0, 0, 0, torch.ones(2))
        >>> [(s.name, s.value) for s in sink.stashes]
        [('0', tensor([1., 1.]))]
    """

    def __init__(self, options: Options, stop: Callable[[], None]) -> None:
        stash_fn = options.stash_fn
        assert stash_fn is not None  # Options fills in the default
        self._stash_fn: StashFn = stash_fn
        self._stop = stop
        # With the standard StashFn the sink builds each Stash directly (no Event); only
        # stashes built by a user's own StashFn need the call/step/kind stamped.
        self._default_value: StashValueFn | None = (
            _guard(stash_fn.stash_value) if isinstance(stash_fn, BoundDefaultStash) else None
        )
        stash_value = getattr(stash_fn, "stash_value", None)
        # Values that a store keeps as columns (statistics) need no Python object each.
        make_store = getattr(stash_value, "store", None) if self._default_value else None
        self.stashes = Columns(make_store() if callable(make_store) else None)
        """The records, readable as a list of `Stash` (see `Columns`)."""
        self.graph_stats: Any = (
            stash_value
            if self.stashes.store is not None and getattr(stash_value, "traceable", False)
            else None
        )
        """The statistics function a compiled graph can compute itself (`graph_raw`), or
        None: what lets `CompiledHooks` record inside a compiled model's graphs."""
        self._non_blocking = bool(getattr(stash_value, "non_blocking", False))
        self._pending_copies = False
        self._budget = None if options.max_bytes is None else MemoryBudget(options.max_bytes, stop)
        self._keep_steps = options.keep_steps
        # keep_steps=: the step whose first record drops the oldest steps (`_make_room`).
        self._room_for: int | None = None
        self.recorded = False
        """Whether anything was recorded since it was last set to False (by a `with`)."""
        self._nonfinite: NonFiniteWatch | None = None  # see watch_nonfinite
        self._watched_task = -1

    def site_id(self, name: str, cls: type[nn.Module], kind: Kind, attr: str) -> int:
        """The site of (`name`, `cls`, `kind`, `attr`) in `stashes` (see `Columns.site_id`)."""
        return self.stashes.site_id(name, cls, kind, attr)

    # -- the record path (hot) ----------------------------------------------------------

    def record(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        attention: bool = False,
    ) -> None:
        """Keep `value` as record (`site`, `call`, `step`, `flags`); with `TUPLE` in `flags`,
        `value` is the one gradient of a 1-tuple. `args`/`kwargs` are the inputs a user's
        `stash=` sees in its `Event`; with `attention`, those of the
        `scaled_dot_product_attention` call that returned `value`, from which
        `stats.attention_logits` computes its statistics."""
        self.recorded = True
        if step == self._room_for:
            self._make_room()
        if self._nonfinite is not None and flags & GRAD:
            self.watch_pass()
        stash_value = self._default_value
        if stash_value is None:
            self._record_custom(site, call, step, flags, value, args, kwargs)
            return
        columns = self.stashes
        store = columns.store
        tensor = isinstance(value, Tensor)
        if store is not None and (tensor or _flat_tensors(value)):
            budget = self._budget
            before = store.nbytes if budget is not None else 0
            try:
                if tensor:
                    ref = store.put(value, (args, kwargs or {}) if attention else None)
                else:  # e.g. attention's (output, None)
                    refs = tuple(None if v is None else store.put(v) for v in value)
            except _REFUSED as error:
                self._refuse(site, flags, error)
            except Exception:  # the object path records it, or says why it could not
                pass
            else:
                if budget is not None:
                    budget.count(columns, site, flags, store.nbytes - before)
                if tensor:
                    columns.add(site, call, step, flags, ref)
                else:
                    columns.add_object(site, call, step, flags | REFS, refs)
                return
        # The standard StashFn's result, without building an Event or a Stash.
        try:
            kept = keep(value, stash_value)
        except _REFUSED as error:
            self._refuse(site, flags, error)
        if self._nonfinite is not None:
            self._nonfinite[2](kept)
        budget = self._budget
        if budget is not None:
            # Counted like `nbytes`: an object shared with an earlier stash (a parent
            # returning its child's output) is counted once.
            budget.count(columns, site, flags, value_nbytes(kept, budget.counted))
        self._pending_copies = self._non_blocking
        columns.add_object(site, call, step, flags, kept)

    def put_raw(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        raw: Tensor,
        numel: int,
        index: int = -1,
        length: int = 0,
        vectors: list[Tensor] | None = None,
        tensor: bool = False,
    ) -> None:
        """Keep statistics a compiled graph computed (`graph_stats.graph_raw` of a tensor of
        `numel` elements, and its `graph_vectors`) as record (`site`, `call`, `step`,
        `flags`); with a `length`, of the tensor at `index` of a tuple of `length` otherwise
        `None` (as `record` keeps attention's `(output, None)`). With `tensor`, `raw` is
        the tensor itself, whose statistics are computed here as eager tracking computes
        them."""
        self.recorded = True
        columns = self.stashes
        ref = self.store_raw(site, flags, raw, numel, vectors or [], tensor)
        if length:
            refs: list[int | None] = [None] * length
            refs[index] = ref
            columns.add_object(site, call, step, flags | REFS, tuple(refs))
        else:
            columns.add(site, call, step, flags, ref)

    def store_raw(
        self,
        site: int,
        flags: int,
        raw: Tensor,
        numel: int,
        vectors: list[Tensor],
        tensor: bool = False,
    ) -> int:
        """Keep statistics a compiled graph computed (as `put_raw` takes them) of one tensor
        (of a value of several, for `put_refs`), now: a compiled graph may reuse `raw`'s
        memory once it returns. Its reference in the store."""
        store = self.stashes.store
        assert store is not None
        budget = self._budget
        before = store.nbytes if budget is not None else 0
        ref: int
        if tensor:
            ref = store.put(raw, memo=False)
        else:
            ref = getattr(store, "put_raw")(raw, numel, vectors)  # noqa: B009 (a StatsStore's)
        if budget is not None:
            budget.count(self.stashes, site, flags, store.nbytes - before)
        return ref

    def put_refs(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        refs: Sequence[int | None],
        layout: Layout | None = None,
    ) -> None:
        """Keep the statistics of the tensors of one value of several (`store_raw`'s
        references; None where none came) as `record` keeps that value: with a `layout`
        (`plan.graph_layout`, an output), the structure it describes holding them, or a
        tuple of references when it is a plain tuple of tensors and `None`s; without, the
        gradients `Gather` collects (a 1-tuple of one)."""
        self.recorded = True
        columns = self.stashes
        store = columns.store
        assert store is not None
        if layout is None and len(refs) == 1 and refs[0] is not None:
            columns.add(site, call, step, flags | TUPLE, refs[0])
        elif layout is None or is_flat_tuple(layout):
            columns.add_object(site, call, step, flags | REFS, tuple(refs))
        else:
            values = [None if r is None else store.get(r) for r in refs]
            columns.add_object(site, call, step, flags, graph_value(layout, values))

    def _record_custom(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None:
        """Record through a user's own `StashFn`, which gets an `Event`."""
        name, cls, kind, attr = self.stashes.sites[site]
        origin = Origin(name, cls, call, step, kind, attr, bool(flags & TRAINING), site)
        if flags & TUPLE:
            value = (value,)
        stash = self._stash_fn(origin.event(bool(flags & GRAD), value, args, kwargs or {}))
        if not isinstance(stash, Stash):
            self._bad_stash(stash)
        origin.stamp(stash)
        budget = self._budget
        if budget is not None:
            budget.count(self.stashes, site, flags, value_nbytes(stash.value, budget.counted))
        self.stashes.append(stash)

    def _refuse(
        self, site: int, flags: int, error: ArgumentTypeError | ArgumentValueError
    ) -> NoReturn:
        """Stop tracking on a setting the tensor just recorded shows wrong, as `max_bytes=`
        does: the hooks removed, the stashes kept, the error raised through the pass."""
        self._stop()
        name, _, kind, _ = self.stashes.sites[site]
        grad = "gradient " if flags & GRAD else ""
        raise type(error)(
            f"tensor_tracker: recording the {kind} {grad}of {name or '<root>'!r}: {error}. "
            f"Tracking stopped (hooks removed); the {len(self.stashes)} stashes so far are kept."
        ) from None

    def _bad_stash(self, stash: object) -> NoReturn:
        self._stop()
        raise ArgumentTypeError(
            "stash= must return a tensor_tracker.Stash (e.g. "
            "Stash(event.name, event.type, event.grad, value)), but it returned "
            f"{type(stash).__name__}. Tracking stopped (hooks removed); the "
            f"{len(self.stashes)} stashes so far are kept."
        )

    # -- steps: keep_steps=, step(keep=False), clear() -----------------------------------

    def start_step(self, step: int) -> None:
        """A new step numbered `step` begins (`keep_steps=`: its first record makes room)."""
        self._room_for = step if self._keep_steps is not None else None

    def _make_room(self) -> None:
        """`keep_steps=`: drop the oldest steps when the first record of a new step comes,
        not at `step()`, so that the kept steps are the last ones that recorded anything (a
        loop ending in `step()` opens a step that records nothing) and never more than
        `keep_steps` of them are held. A late gradient of the step before does not count."""
        self._room_for = None
        assert self._keep_steps is not None
        self.stashes.keep_recent_steps(self._keep_steps - 1)
        self._recount()

    def drop_step(self, step: int) -> None:
        """Drop the records of `step` when it is the last step recorded (`step(keep=False)`)."""
        columns = self.stashes
        if columns.step_values and columns.step_values[-1] == step:
            self.sync()
            columns.drop_from(columns.step_rows[-1])
            self._recount()

    def last_step_is(self, step: int) -> bool:
        """Whether the last record made is of `step`."""
        values = self.stashes.step_values
        return bool(values) and values[-1] == step

    def _recount(self) -> None:
        """Count again the bytes `max_bytes` holds against, after records were dropped."""
        if self._budget is not None:
            self._budget.recount(self.stashes)

    def clear(self) -> None:
        """Drop every record."""
        self.stashes.clear()
        if self._budget is not None:
            self._budget.clear()

    # -- reading -----------------------------------------------------------------------

    def sync(self) -> None:
        """Wait for copies made with `non_blocking` to land, before they are read."""
        if self._pending_copies:
            torch.cuda.synchronize()
            self._pending_copies = False

    @property
    def nbytes(self) -> int:
        """Bytes held by the records (see `Recorder.nbytes`)."""
        self.sync()
        return held_nbytes(self.stashes, set())

    # -- the non-finite watch -----------------------------------------------------------

    def watch_nonfinite(
        self,
        seen: Callable[[], bool],
        handler: Callable[[], None],
        notice: Callable[[Any], None],
    ) -> None:
        """At the end of every backward pass that records gradients, and at `step()`, call
        `handler` if `seen()` (which may wait for the device: once per pass, never in a
        hook) says a non-finite value was recorded; `handler` may raise, which the
        `backward()` call then raises, before any optimizer step. `seen` watches what the
        store keeps; the values kept as objects (a dict or nested output's statistics) are
        shown to `notice` as they are recorded."""
        self._nonfinite = (seen, handler, notice)

    def watch_pass(self) -> None:
        """A gradient is being recorded: check at the end of this backward pass (once)."""
        task = graph_task_id()
        if self._nonfinite is not None and task != self._watched_task:
            self._watched_task = task
            queue_at_end_of_backward(self.check_nonfinite)

    def check_nonfinite(self) -> None:
        """Call the watch's handler if a non-finite value was recorded (once)."""
        if self._nonfinite is not None:
            seen, handler, _ = self._nonfinite
            if seen():
                self._nonfinite = None  # once: the handler decides what happens next
                handler()
