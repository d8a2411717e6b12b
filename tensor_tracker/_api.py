"""`track`: the one-line entry point."""

from __future__ import annotations

import os
import shutil
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ._core.columns import Columns
from ._core.dist import gather_objects
from ._core.options import Options, document, option_fields
from ._core.records import LogEntry, StashFn, StashValueFn
from ._core.stash_fns import CopyValue, get_stash_fn
from ._core.tracker import Pattern, Recorder, check_module
from ._data.compare import Comparison, Names, check_options, compare
from ._data.frame import to_frame
from ._data.histogram_range import out_of_range
from ._data.nonfinite import NonFinite, first_nonfinite
from ._files import utf8_safe
from ._optional import require
from ._persist.ranks import (
    Part,
    combined_frame,
    merge,
    merged_stats,
    part_of,
    rank_parts,
    spec_names,
)
from ._persist.recording import RecordingWriter, read_recording, spec_of
from ._probe.compare_models import DEFAULT_MAX_BYTES, record_pair
from ._probe.summary import Summary, recorded_summary
from ._validate import check_bool, check_count, check_int, check_path
from .errors import (
    ArgumentValueError,
    NonFiniteError,
    RecordingError,
    TensorTrackerError,
    TrackerStateError,
)
from .stats import StatsFn
from .stats._store import StatsStore

if TYPE_CHECKING:
    import pandas

__all__ = ["Tracker", "compare", "compare_models", "load", "rank_parts", "track"]


class Tracker(Recorder):
    """Records what modules compute, as a list of `Stash`; most users get one from `track`.

    A tracker is a sequence of stashes (`len`, indexing, iteration, in recording order) and a
    context manager that removes its hooks on exit. The recording itself (hooks, `step`,
    `capture=`, `every=`, memory budget) is `tensor_tracker._core.tracker.Recorder`'s; a
    `Tracker` adds the ways to read what was recorded.

    Made by hand, it takes the options of `track` (`Tracker(stats=True)`,
    `Tracker(stream_to=path)`, ...), each declared once in
    `tensor_tracker._core.options.Options`, except `grad`, `include` and `exclude`, which
    choose the modules: pass those to `register` or `register_all`. Nothing is attached to
    a model until then.

    Args:
        options: all the options at once, as an `Options` (as `track` passes them; then
            pass no other).

    Example:
        >>> tracker = Tracker(stats=["rms"])
        >>> tracker.register(model[0], "first")
        >>> model(x).sum().backward()
        >>> tracker.unregister()
        >>> tracker.to_frame()[["name", "grad", "rms"]].round(3).values.tolist()
        [['first', False, 0.589], ['first', True, 0.217]]
    """

    def __init__(
        self,
        stash: StashFn | None = None,
        *,
        stash_value: StashValueFn | None = None,
        stats: Any = None,
        ops: Any = None,
        capture: str | Iterable[str] = "outputs",
        optimizer: torch.optim.Optimizer | None = None,
        every: int | Mapping[str, int] = 1,
        train_only: bool = False,
        max_bytes: int | None = None,
        keep_steps: int | None = None,
        device: str | torch.device | None = "cpu",
        dtype: torch.dtype | None = None,
        sample: int | None = None,
        seed: int = 0,
        non_blocking: bool = False,
        on_nonfinite: str | Callable[[Any], Any] | None = None,
        stream_to: str | os.PathLike[str] | None = None,
        on_disk_full: str = "raise",
        options: Options | None = None,
    ) -> None:
        given = Options.of(locals())  # every option above, by name; checked here
        if options is None:
            options = given
        elif given != Options():
            raise ArgumentValueError(
                "options= holds every option: pass the others inside it, not beside it"
            )
        super().__init__(options)
        if options.on_nonfinite is not None:
            _arm_tripwire(self, options.on_nonfinite)
        if options.stream_to is not None:
            _stream(self, options.stream_to, options.on_disk_full)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # Leaving the outermost block: say once if a histogram's fixed range left many
        # values out (before a stream's last flush takes the records from memory).
        if exc_type is None and self._depth == 1:
            for sentence in out_of_range(self.stashes):
                warnings.warn(f"tensor_tracker: {sentence}", RuntimeWarning, 2)
        super().__exit__(exc_type, *exc)

    def to_frame(
        self,
        stat: Callable[[Tensor], Any] | str | None = None,
        stat_name: str | None = None,
    ) -> pandas.DataFrame:
        """A pandas DataFrame with one row per stash.

        Columns: `name`, `type` (`"<module>.<qualname>"` of the module class), `grad`, `call`,
        `step`, `kind`, `attr`, `training`, then the statistics. For stashes holding tensors,
        one column: `stat` applied to the stash's `first_value` (default `torch.std`), named
        `stat_name`, else `stat.__name__`, else `"value"`; NaN where that is not a number
        (non-tensor, empty or integer values that the statistic rejects). For stashes made
        with `stats=`, one column per statistic, read from the device in one batched
        transfer (`stat`, if given, picks one of them by name).

        Example:
            >>> df = tracker.to_frame()
            >>> df.groupby("grad")["std"].count().to_dict()   # 4 modules, forward and grad
            {False: 4, True: 4}
        """
        self._sync()
        stats_fn = getattr(self.options.stash_fn, "stash_value", None)
        names = (stats_fn.names + stats_fn.layout.vectors) if isinstance(stats_fn, StatsFn) else ()
        frame = to_frame(self.stashes, stat, stat_name, names)
        ranks = self._ranks()
        if ranks is not None:
            frame.insert(list(frame.columns).index("training") + 1, "rank", ranks)
        return frame

    row_ranks: Any = None
    """The rank of each record (an `array`) of a tracker holding several ranks' records
    (`gather`, `load` of a run directory); `None` otherwise."""

    _rank_stats: dict[int, tuple[str, ...]] | None = None
    """The statistics each rank recorded, when ranks recorded different ones."""

    @classmethod
    def _of_ranks(
        cls,
        stash_fn: StashFn | None,
        parts: Sequence[Part | tuple[int, Columns]],
        logged: list[LogEntry],
        error: type[TensorTrackerError] = TrackerStateError,
    ) -> Tracker:
        """A tracker (no hooks) holding several ranks' records: `parts` as `merge` takes
        them, in rank order, read with `stash_fn` when every rank recorded the same
        statistics, else with `merged_stats`'s layout (raising `error` when they cannot be
        merged)."""
        specs = [p.spec if isinstance(p, Part) else spec_of(p[1]) for p in parts]
        union = merged_stats(specs, error)
        merged = cls(stash_fn if union is None else get_stash_fn(union))
        merged.row_ranks = merge(parts, merged.stashes)
        merged.logged = logged
        if union is not None:
            merged._rank_stats = {
                (p.rank if isinstance(p, Part) else p[0]): spec_names(spec)
                for p, spec in zip(parts, specs, strict=True)
            }
        return merged

    def _ranks(self) -> Any:
        """The rank of each row, or `None` outside `torch.distributed`."""
        if self.row_ranks is not None and len(self.row_ranks) == len(self.stashes):
            return list(self.row_ranks)
        if self.rank is not None:
            return [self.rank] * len(self.stashes)
        return None

    def gather(self, dst: int = 0, group: Any = None) -> Tracker | None:
        """Collect every rank's records on rank `dst`, with one `gather_object` over the
        process group: call it on every rank at the same point (e.g. after the training
        loop, or every N steps), outside any hook. Ranks may have recorded different
        numbers of records. On `dst`, returns a new `Tracker` holding all of them in rank
        order (no hooks; `to_frame()` has a `rank` column, `combined()` merges the ranks'
        statistics); on the other ranks, `None`. This tracker is left as it is. Ranks that
        recorded different statistics keep their own values, NaN for a statistic a rank
        did not record (`combined()` then refuses; full copies and statistics do not mix).

        Statistics travel as their raw vectors (a few floats each); full copies are
        pickled. A tracker streaming to disk (`stream_to=`) holds only the current step:
        read its run directory with `tensor_tracker.load` instead. Under NCCL, set each rank's CUDA device first
        (`torch.cuda.set_device(local_rank)`), as `torch.distributed` requires.

        Args:
            dst: the rank that receives the records.
            group: the process group (default: the default group).

        Raises:
            TrackerStateError: `torch.distributed` is not initialised.
            ArgumentValueError: `dst` is not a rank of the group.

        Example:
            >>> everything = t.gather()        # doctest: +SKIP
            >>> if everything is not None:     # doctest: +SKIP
            ...     everything.to_frame().groupby("rank").size()
        """
        check_int(dst, "gather(dst=...)")
        self._read_rank()
        if self.rank is None or self.world_size is None:
            raise TrackerStateError(
                "gather(): torch.distributed is not initialised in this process; there is "
                "nothing to gather from (call torch.distributed.init_process_group first)"
            )
        ranks = (
            range(self.world_size)
            if group is None
            else torch.distributed.get_process_group_ranks(group)
        )
        if dst not in ranks:  # on every rank alike, before the collective
            raise ArgumentValueError(
                f"gather(dst={dst}): dst must be the rank of a process in the group "
                f"({_span(ranks)}), the one that receives the records"
            )
        self._sync()
        part = part_of(self.stashes, self.rank, self.world_size, self.logged)
        parts = gather_objects(part, dst, group)
        if parts is None:
            return None
        merged = Tracker._of_ranks(self.options.stash_fn, parts, [e for p in parts for e in p.log])
        merged.rank, merged.world_size = self.rank, self.world_size
        return merged

    def combined(self) -> pandas.DataFrame:
        """The statistics of each logical tensor over all ranks, as if one process had
        recorded the concatenation of the ranks' tensors: one row per step, module part,
        direction and call (columns `name`, `type`, `grad`, `call`, `step`, `kind`, `attr`,
        `training`, `ranks`: how many rows were combined, then the statistics). For a
        tracker from `gather` or from `load` of a multi-rank run; with one rank it is
        `to_frame()` with `ranks` 1.

        Counts, sums, means, spreads, extremes, non-finite counts, format fractions and
        histograms combine exactly; custom statistics cannot (NaN); statistics per
        channel or per sample are left out (each rank's own are in `to_frame()`); see
        `tensor_tracker.stats.combine`. It suits tensors split across ranks: a
        data-parallel batch's activations and their gradients, FSDP's parameter shards.
        Replicated tensors (DDP's parameters, a `DTensor` with a `Replicate` placement)
        are copies on each rank: read one rank's rows of `to_frame()` instead (their counts
        and sums would be multiplied here). Records with no statistics (non-tensor
        outputs) are left out.

        Raises:
            ValueError: the records hold copies, not statistics.

        Example:
            >>> with track(model, stats=True) as one:
            ...     _ = model(x)
            >>> one.combined()[["name", "ranks", "numel"]].values.tolist()[0]
            ['0', 1, 64.0]
        """
        self._sync()
        if self._rank_stats is not None:
            recorded = "; ".join(f"rank {r}: {list(n)}" for r, n in self._rank_stats.items())
            raise TrackerStateError(
                f"combined(): the ranks recorded different statistics ({recorded}); a "
                "statistic combines over ranks only when every rank recorded it: record "
                "the same stats= on every rank (to_frame() shows each rank's own)"
            )
        stats_fn = getattr(self.options.stash_fn, "stash_value", None)
        names = stats_fn.names if isinstance(stats_fn, StatsFn) else ()
        ranks = self._ranks() or [0] * len(self.stashes)
        frame: pandas.DataFrame = combined_frame(self.stashes, ranks, names)
        return frame

    def summary(self, step: int | None = None) -> Summary:
        """A per-module-call `Summary` of one recorded step, from what was recorded (no
        second pass): the call tree, output (and gradient, input) shapes, dtypes and bytes
        of recorded copies, NaN/inf flags, and parameter counts of the registered modules
        (each parameter once). Times are not measured here: `tensor_tracker.summary(model,
        x)` runs and times a pass. With `stats=`, shapes and bytes are not known (empty).

        Args:
            step: which step (default: the last one recorded).

        Raises:
            ValueError: `step` was not recorded.

        Example:
            >>> s = tracker.summary()   # print(s) for a table, s.to_frame() for pandas
            >>> s.total_params, [(c.name, c.params, c.output_shapes) for c in s][:2]
            (172, [('', 0, [(8, 4)]), ('0', 136, [(8, 8)])])
        """
        if step is not None:
            check_int(step, "summary(step=...)", "a recorded step (int) or None")
        self._sync()
        return recorded_summary(self.stashes, dict(self.modules), step)

    def log_frame(self) -> pandas.DataFrame:
        """The scalars of `log` and the notes of `note` as a DataFrame: columns `step`,
        `name`, `value` and `text`, in order (a note has no name and value, a scalar no
        text: missing values there).

        Example:
            >>> t.log("lr", 0.1); t.note("warm-up over")
            >>> t.log_frame()[["step", "name", "value"]].values.tolist()[0]
            [0, 'lr', 0.1]
            >>> t.log_frame()["text"].tolist()[1]
            'warm-up over'
        """
        pd = require("pandas", "pandas")
        rows = [
            (e.step, e.name and utf8_safe(e.name), float(e.value), e.text and utf8_safe(e.text))
            for e in self.logged
        ]
        frame: pandas.DataFrame = pd.DataFrame(rows, columns=["step", "name", "value", "text"])
        return frame

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write everything recorded (records, statistics, full copies, scalars and notes,
        module names and type names) to the directory `path`, in the documented format of
        `tensor_tracker._persist.recording` (Arrow record batches, safetensors, JSON, a journal
        of checksummed commits; no pickle).
        Read it back anywhere with `tensor_tracker.load(path)`. Needs the `[save]` extra
        (pyarrow, safetensors).

        Raises:
            ValueError: `path` already holds a recording or another writer is writing it,
                or a record holds a value that cannot be saved without pickle (the message
                names the record).
            RecordingError: the disk is full (the message names the directory and its
                free space; nothing is left half-written).

        Example:
            >>> import tempfile, pathlib
            >>> folder = pathlib.Path(tempfile.mkdtemp()) / "run"
            >>> tracker.save(folder)
            >>> len(tensor_tracker.load(folder)) == len(tracker)
            True
        """
        check_path(path, "save(path)", "a directory path")
        self._sync()
        existed = Path(path).exists()
        writer = RecordingWriter(path, spec_of(self.stashes), what="save(path)")
        try:
            writer.write(self.stashes, self.logged, self.partial_steps)
        except BaseException:
            writer.close()
            if not existed:  # leave nothing half-written behind
                shutil.rmtree(path, ignore_errors=True)
            raise
        writer.close()


def _span(ranks: Sequence[int]) -> str:
    """`ranks` in words: "ranks 0 to 3", or the list when they are not consecutive."""
    if list(ranks) == list(range(len(ranks))):
        return f"ranks 0 to {len(ranks) - 1}"
    return f"ranks {', '.join(map(str, ranks))}"


def load(
    path: str | os.PathLike[str], recover: bool = False, max_memory: int | None = None
) -> Tracker:
    """Read a recording written by `Tracker.save` or `track(..., stream_to=path)`, also
    while that run is still writing it; no pickle is involved, and a recording from someone
    else is read as untrusted input: every file it names must be a regular file inside
    `path` (no absolute paths, no `..`, no symbolic link leading out), every block must
    have its checksum and the recording's run id, and every size and index is checked
    against the file before anything is allocated.

    The result is a `Tracker` holding the records (no model attached): `to_frame()`,
    indexing, `log_frame()`, every plot and viewer work on it. Module classes come back as
    the real classes when their module is already imported (nothing is imported to find
    them), otherwise as stand-ins with the same name; containers other than tuples, lists
    and dicts come back as what they hold: dataclasses, `ModelOutput`s and Hugging Face
    caches as dicts, other pytree nodes as lists, namedtuples as tuples. Its `complete` is
    `False` while a writer is still appending, or when the writer stopped without closing
    the recording (killed, crashed): the whole steps it committed are read, with one
    warning. Its `partial_steps` lists the steps an exception (a Ctrl-C) cut short.

    A run directory that several ranks streamed to (`track(..., stream_to=path)` under
    `torch.distributed` writes one recording per rank, `path/rank-N`) is read whole: the
    records of every rank, in rank order, with a `rank` column in `to_frame()` and
    `combined()` for the statistics over all ranks. Ranks that recorded different
    statistics keep their own values, NaN for a statistic a rank did not record.

    Memory is bounded too: a load holds at most 64 times the recording's size on disk
    (plus 256 MiB), counted as it reads and refused before it is allocated.

    Args:
        path: the recording's directory (or a run directory of `rank-N` recordings).
        recover: when a file is truncated or corrupted, read the whole steps before the
            problem and warn (saying what was dropped), instead of raising.
        max_memory: the bytes a load may hold (of each rank's recording in a run
            directory), to raise the bound above for a big recording you trust (one that
            compresses extremely well); `None`: the bound above.

    Raises:
        RecordingError: not a recording, another format version, a missing, truncated,
            corrupted or malformed file, or one that would take more memory than allowed
            (its message names the file and what is wrong); a run directory whose `rank-N`
            is a symbolic link or not a directory, or with two entries for one rank
            (`rank-0`, `rank-00`). Ranks missing between those found are read with a
            warning naming them.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> with tensor_tracker.track(model, stats=True, stream_to=folder) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        >>> run = tensor_tracker.load(folder)   # also while the run is still writing it
        >>> len(run), sorted({s.step for s in run})
        (24, [0, 1, 2])
        >>> t = tensor_tracker.load("runs/huge", max_memory=64 * 2**30)  # doctest: +SKIP
    """
    check_path(path, "load(path)", "a recording's directory")
    check_bool(recover, "load(recover=...)")
    check_count(max_memory, "load(max_memory=...)", "bytes a load may hold", optional=True)
    root = Path(path)
    if not root.is_dir():
        what = "a file" if root.exists() else "no such directory"
        raise RecordingError(
            f"{root} is {what}, not a recording directory; load() reads the directory that "
            "Tracker.save or track(..., stream_to=...) wrote (an HTML report cannot be "
            "loaded back)"
        )
    parts = rank_parts(path)
    if parts:
        recordings = [(rank, read_recording(part, recover, max_memory)) for rank, part in parts]
        stats = recordings[0][1].stats
        tracker = Tracker._of_ranks(
            get_stash_fn(stats) if stats is not None else None,
            [(r, rec.columns) for r, rec in recordings],
            [e for _, rec in recordings for e in rec.log],
            RecordingError,
        )
        tracker.world_size = parts[-1][0] + 1
        tracker.complete = all(rec.complete for _, rec in recordings)
        tracker.partial_steps = sorted({s for _, rec in recordings for s in rec.partial})
        return tracker
    recording = read_recording(path, recover, max_memory)
    tracker = Tracker(get_stash_fn(recording.stats) if recording.stats is not None else None)
    tracker.stashes = recording.columns
    tracker.logged = recording.log
    tracker.complete = recording.complete
    tracker.partial_steps = recording.partial
    return tracker


def track(
    module: nn.Module,
    grad: bool = True,
    include: Pattern = None,
    exclude: Pattern = None,
    stash_value: StashValueFn | None = None,
    stash: StashFn | None = None,
    *,
    stats: Any = None,
    ops: Any = None,
    capture: str | Iterable[str] = "outputs",
    optimizer: torch.optim.Optimizer | None = None,
    every: int | Mapping[str, int] = 1,
    train_only: bool = False,
    max_bytes: int | None = None,
    keep_steps: int | None = None,
    device: str | torch.device | None = "cpu",
    dtype: torch.dtype | None = None,
    sample: int | None = None,
    seed: int = 0,
    non_blocking: bool = False,
    on_nonfinite: str | Callable[[Any], Any] | None = None,
    stream_to: str | os.PathLike[str] | None = None,
    on_disk_full: str = "raise",
) -> Tracker:
    """Track what the modules of `module` compute; use it as a context manager.

    Quick start (in a notebook cell)::

        with tensor_tracker.track(model) as t:
            model(batch).sum().backward()
        t.to_frame()          # one row per output / gradient: name, type, grad, ..., std
        list(t)               # the Stash objects themselves; t[0].value is a CPU copy

    Every module's forward output is stashed as it finishes (children before their parent,
    the root `""` last), then, during `backward()`, the gradient with respect to each
    module's output (a tuple, one entry per output tensor). Hooks are removed when the
    `with` block ends, also on an exception; `with t:` again attaches them again, to record
    more runs into the same tracker. Tracking never changes the model's results:
    outputs and gradients are bitwise identical to an untracked run, and in-place ops
    (`ReLU(inplace=True)`, `x += residual`) after a tracked module are fine. With activation
    checkpointing, the forward pass recomputed during `backward()` is not recorded twice.

    A gradient stash holds, for each output tensor, d loss / d tensor (what
    `torch.autograd.grad(loss, tensor)` gives) for the value the module returned, before any
    later in-place change; one stash per module call and backward pass, with `None` for an
    output no gradient reached. Gradients are read with tensor hooks, which add no autograd
    node; so if a module also uses a tensor it returns inside itself (`return h, 2 * h`),
    that use is part of the gradient too. An output that is a view of a larger tensor
    (`h[:, :2]`, `nn.Linear`'s output for 3-D input) gets its own gradient, not that of the
    larger tensor; only when such a view is modified in place later (`h += x`) is its
    gradient read from the larger tensor, which is exact unless that tensor is also used
    elsewhere. A value the tracker cannot handle never breaks your forward or backward
    pass: it is kept as an `Unrecorded` placeholder with the reason, and a warning says so
    once.

    What a stash holds:
        Copies, never an object the model may still change. Tensors are copied (see below)
        and the containers around them rebuilt: tuples, lists, dicts, `ModelOutput`,
        dataclasses, types registered with `torch.utils._pytree.register_pytree_node`, and
        Hugging Face caches (`DynamicCache` and the other `transformers` `Cache` classes).
        So with `use_cache=True` or `generate()`, each call's stash shows the cache as it
        was then, and `nbytes` counts it. Numbers, strings, `None`, dtypes, devices and
        enums are kept as they are; any other object is replaced by an `Unrecorded` note
        (its type and why). A custom `stash=` function gets the live objects in `Event`.

    Compiled models:
        Track the compiled model itself, `track(torch.compile(model))` (or a model after
        `model.compile()`); stashes have the uncompiled module names. TorchDynamo does not
        notice hooks added after it compiled a model, so tracking drops the code it
        compiled for this model: the next call recompiles with the hooks (and the first call
        after the block recompiles without them; with `every=N`, this happens around each
        recorded step). With `stats=` (the built-in statistics, without histograms, format
        fractions or custom ones), the statistics of module outputs (and parameters) are
        computed inside the compiled graph, and on torch >= 2.13 those of their gradients
        inside the backward graph: no graph break, no recompilation from call to call.
        Otherwise (inputs with `capture="inputs"`, gradients with it or on older torch)
        the hooks run outside the compiled graphs, one graph break per tracked module. The records
        are those of eager mode, gradient records in another order in places (see the
        README). A model called inside some other compiled function cannot be found this
        way; a `with` block that records nothing then warns: call `torch.compiler.reset()`
        before tracking.

    Distributed training:
        Under `torch.distributed` each rank records its own tensors (hooks never
        communicate), `t.rank`/`t.world_size` say where, and `to_frame()` has a `rank`
        column. Track the DDP-wrapped model (names are those of the model inside) or an
        FSDP2 model (`fully_shard`; track it after sharding, since `capture="params"`
        records the parameters the modules hold when they are registered): sharded
        parameters and their gradients are recorded as each rank's shard under the
        parameter's own name. `t.gather()` brings every rank's
        records to rank 0, where `combined()` gives each tensor's statistics over all ranks
        exactly (see `tensor_tracker.stats.combine`). A module output's gradient is the
        rank's own; DDP parameter gradients (`capture="params"`) are recorded when autograd
        accumulates them, before DDP's all-reduce, so each rank's shows its own batch;
        FSDP2 calls the hook after its reduce-scatter, with the averaged shard.

    Choosing what to record:
        - `include="layers\\.\\d+$"`, `exclude="dropout"`: regexes searched in module names.
        - `grad=False`: forward values only.
        - `capture=("outputs", "inputs", "params")`: also each module's inputs and its own
          parameters (and their gradients, captured once accumulated). An input's gradient
          is d loss / d input over all uses of that tensor (e.g. a residual stream feeds the
          attention and the skip connection): telling this module's share apart would need
          an extra autograd node, which tracking never adds.
        - `optimizer=opt`: also the optimizer state (e.g. Adam's moments) after `opt.step()`.
        - `train_only=True`: skip modules in eval mode.

    Choosing what to keep (memory):
        - `stats=True`: keep a few statistics per tensor (mean, std, rms, abs_max, min, max,
          numel) computed on the tensor's device, instead of a copy. Also a list of names
          (`stats=["rms", "fp16_overflow"]`, or block-scaled formats simulated:
          `"mxfp8_e4m3_error"`, `"nvfp4_underflow"`, ...), custom `("name", fn)` pairs,
          `tensor_tracker.stats.histogram()` or `tensor_tracker.stats.blocks()`; see
          `tensor_tracker.stats`.
        - `device=None` keeps copies on the tensor's device; `dtype=torch.bfloat16` stores
          them in a smaller dtype; `sample=1000` keeps 1000 random elements (seeded by
          `seed`); `non_blocking=True` copies from a GPU to pinned memory asynchronously.
        - `stash_value=fn` transforms each tensor yourself, e.g.
          `lambda t: t.detach().abs().max()` (it receives the live tensor: detach it, or the
          stash keeps the autograd graph alive);
          `stash=fn` builds each `Stash` from its `Event` yourself.
        - `max_bytes=2**30` stops tracking with `MemoryBudgetError` (keeping the stashes)
          rather than filling memory.

    Training runs:
        Keep one tracker around the loop and call `t.step()` after each step; every stash
        has a `step`, and `every=10` records only every 10th step (no hooks in between)::

            with tensor_tracker.track(model, stats=True, every=10) as t:
                for batch in loader:
                    loss_fn(model(batch)).backward(); opt.step(); opt.zero_grad()
                    t.step()
            df = t.to_frame()

    A flight recorder: a second tracker of full copies that keeps only the last few steps,
    beside a `stats=` tracker with a tripwire; when the tripwire fires, the copies of the
    steps that led to it are there to look at::

        with tensor_tracker.track(model, stats=True, on_nonfinite="raise") as t, \\
             tensor_tracker.track(model, keep_steps=3, dtype=torch.bfloat16) as flight:
            for batch in loader:
                ...; t.step(); flight.step()

    Args:
        module: the model (any `torch.nn.Module`).

    Returns:
        A `Tracker`: a sequence of `Stash` with `to_frame()`, `step()`, `nbytes`.

    Raises:
        TypeError: `module` is not an `nn.Module`, or an argument has the wrong type.
        ValueError: an invalid regex, `stash` together with `stash_value`, `stats=` or copy
            options combined with a custom `stash`/`stash_value`, an unknown statistic, or
            `on_nonfinite=` without the statistics it reads.
        Nothing is attached to the model when an argument is rejected.

    Example:
        >>> with tensor_tracker.track(model) as t:
        ...     model(x).sum().backward()
        >>> [(s.name, s.grad) for s in t][:4]   # forward, children first, then the gradients
        [('0', False), ('1', False), ('2', False), ('', False)]
        >>> with tensor_tracker.track(model, stats=True, include="^[02]$") as t:
        ...     for batch in loader:
        ...         loss_fn(model(batch)).backward(); opt.step(); opt.zero_grad()
        ...         t.step()
        >>> t.to_frame()[["name", "grad", "step"]].drop_duplicates("step").values.tolist()
        [['0', False, 0], ['0', False, 1], ['0', False, 2]]
    """
    check_module(module)
    options = Options.of(locals())  # every option above, by name; checked here
    tracker = Tracker(options=options)
    tracker.register_all(module, options.grad, options.include, options.exclude)
    return tracker


# Each option is documented once, in its declaration in `Options`.
track.__doc__ = document(track.__doc__ or "", [f.name for f in option_fields()])
Tracker.__doc__ = document(Tracker.__doc__ or "", [f.name for f in option_fields("tracker")])


def _stream(tracker: Tracker, path: str | os.PathLike[str], on_disk_full: str) -> None:
    """Set up `track(..., stream_to=path)` (before any hook is attached)."""
    check_path(path, "stream_to=", "a directory path")
    if tracker.rank is not None:  # each rank writes its own part of the run directory
        path = Path(path) / f"rank-{tracker.rank}"
    writer = RecordingWriter(path, spec_of(tracker.stashes))
    stopped = False
    # Weakly: the tracker holds `flush`, and a cycle would keep both (and the writer's
    # files) until a garbage collection.
    recorder = weakref.ref(tracker)

    def flush(block_ended: bool, step: int) -> None:
        nonlocal stopped
        tracker = recorder()
        if tracker is None or (writer.closed and not stopped):
            return  # a write error closed it and raised: the records stay in memory
        if stopped:  # after a full disk under on_disk_full="warn": nothing more is kept
            tracker.clear()
            tracker.logged.clear()
            return
        tracker._sync()
        before = writer.commits
        written = late = 0
        try:
            written = writer.write(tracker.stashes, tracker.logged, tracker.partial_steps)
        except RecordingError as error:
            if on_disk_full == "raise":
                raise
            stopped = True
            tracker.unregister()
            warnings.warn(f"{error}. Recording stopped; training goes on.", RuntimeWarning, 3)
            return
        finally:
            # Also when a KeyboardInterrupt came after the step's commit landed: what is on
            # disk is dropped from memory, so the step is never written twice.
            if writer.commits != before or stopped:
                late = len(tracker.stashes) - written  # recorded during the write
                tracker.clear()  # on disk now: memory stays flat however long the run
                tracker.logged.clear()
        if late > 0:
            warnings.warn(
                f"tensor_tracker: {late} record(s) made by another "
                f"thread while step {step} was written to {path} were dropped: call "
                "step() between the model's passes, not during them",
                RuntimeWarning,
                3,
            )
        if block_ended:
            writer.pause()  # the recording complete and closed until a `with` block writes

    tracker.on_flush(flush, Path(path))


def _arm_tripwire(tracker: Tracker, on_nonfinite: str | Callable[[NonFinite | None], Any]) -> None:
    """Set up `on_nonfinite=` (checked by `Options`) before any hook is attached."""
    require("pandas", "pandas")  # to say where it appeared
    store = tracker.stashes.store
    assert isinstance(store, StatsStore), "Options checks that on_nonfinite= has statistics"
    store.watch()

    def handler() -> None:
        found = first_nonfinite(tracker)
        if found is None:
            # The store watched every tensor put; first_nonfinite reads the same statistics,
            # so this is not expected: say so rather than name a wrong module.
            message = (
                "tensor_tracker: a NaN or infinity was recorded, but first_nonfinite could "
                "not place it in the recording."
            )
        else:
            where = f"{found.name or '<root>'!r} ({'backward' if found.grad else 'forward'})"
            message = (
                f"tensor_tracker: a NaN or infinity appeared at step {found.step} in {where}: "
                f"{found.explanation}."
            )
        if on_nonfinite == "raise":
            tracker.unregister()
            raise NonFiniteError(
                f"{message} Tracking stopped (hooks removed); the {len(tracker)} stashes so "
                "far are kept; the error's .found has the details.",
                found,
            )
        if on_nonfinite == "warn":
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        else:
            assert callable(on_nonfinite)
            on_nonfinite(found)

    tracker.watch_nonfinite(store.nonfinite, handler, store.notice)


def compare_models(
    model_a: nn.Module,
    model_b: nn.Module,
    *inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    loss_fn: Callable[[Any], Tensor] | None = None,
    names: Names = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    rtol: float | None = None,
    atol: float | None = None,
) -> Comparison:
    """Run two models on the same inputs and say where they first differ, forward and
    backward: `model_a` then `model_b`, each under `track` keeping a full copy of every
    module's output (and with `loss_fn`, of every module's output gradient), then
    `tensor_tracker.compare` of the two.

    For `torch.compile(model)` against `model`, a copy of the model in another dtype
    (`copy.deepcopy(model).bfloat16()`), a refactored model (`names=`), or the same model
    on another device. Both runs start from the caller's random state, so dropout draws
    the same masks in both (in eager mode; TorchInductor draws its own random numbers:
    compare compiled models in `eval()` mode, or set
    `torch._inductor.config.fallback_random = True`).

    Inputs are given to each model as it needs them: every floating-point tensor is cast
    to the dtype of that model's first floating-point parameter, and every tensor moved to
    its device (integer tensors such as token ids keep their dtype). A model that should
    see fp32 inputs under autocast: wrap it, `forward` under `torch.autocast`.

    Nothing is left changed: both models' parameters, buffers (e.g. BatchNorm's running
    statistics) and parameter gradients are put back as they were (the same tensors,
    bitwise), and the caller's random state (CPU and, when available, CUDA) too, also when
    an error stops it. The models keep their `training` mode as given. While it runs, a
    copy of every parameter and buffer is held, besides the recordings.

    Args:
        model_a: the reference model (its module names and order are the comparison's).
        model_b: the model to compare with it.
        *inputs: the positional inputs of both models.
        kwargs: keyword inputs of both models (e.g. `{"attention_mask": mask}`).
        loss_fn: called with each model's output, returns a scalar tensor; its
            `backward()` gives the gradients compared. Without it, forward values only.
        names: the name in `model_b` of a module of `model_a` (a dict, or a function), for
            renamed or re-wrapped modules; see `compare`.
        max_bytes: the memory budget of the copies of both runs together (default 2 GiB).
        rtol, atol: the comparison's default tolerance (see `compare`; by default 16
            epsilons of the coarsest dtype on the relative rms error, so that the rounding
            differences of `torch.compile` or autocast are within it).

    Returns:
        A `Comparison` (its `.a` and `.b` are the two `Tracker`s).

    Raises:
        TypeError: a model is not an `nn.Module`, `loss_fn` is not callable or does not
            return a scalar tensor.
        MemoryBudgetError: the copies would exceed `max_bytes`; nothing is left changed.

    Example:
        >>> cmp = tensor_tracker.compare_models(model, torch.compile(model), x,
        ...                                     loss_fn=lambda out: out.sum())
        >>> print(cmp)                                   # doctest: +SKIP
        >>> cmp.first_divergence(grad=True)               # doctest: +SKIP
    """
    check_options(names, rtol, atol, "compare_models")  # before anything runs
    copy = CopyValue()

    def new_tracker(budget: int) -> Tracker:
        return Tracker(get_stash_fn(copy), max_bytes=budget)

    a, b = record_pair(new_tracker, model_a, model_b, inputs, kwargs, loss_fn, max_bytes)
    return compare(a, b, names=names, rtol=rtol, atol=atol)
