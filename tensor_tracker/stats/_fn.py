"""`StatsFn`: a function from a tensor to its `Stats`; `parse` and `compute` build one."""

from __future__ import annotations

import collections
import copyreg
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import torch
from torch import Tensor

from .._core.memo import LastTensorMemo
from .._validate import check_bool, check_type
from ..errors import ArgumentValueError, TrackerStateError
from ._binning import HistogramFn, add_hist_derivers
from ._blocking import BlocksFn, add_block_derivers, block_empty, block_items
from ._builtin import plan
from ._kernels import (
    F64,
    FAR,
    NAN,
    REDUCED_AS_THEY_ARE,
    Core,
    compute_dtype,
    cpu_moments4_minmax,
    flat,
    host_moments_minmax,
    host_tensor,
)
from ._layout import Layout, column
from ._native import moments4_minmax
from ._spec import (
    BLOCK_NAMES,
    DEFAULT,
    AttentionLogits,
    Blocks,
    CustomName,
    Histogram,
    Item,
    PerAxis,
    Statistic,
    item_name,
    parse_items,
)
from ._store import StatsStore
from ._values import Stats
from ._vectors import VectorFn, vector_items

__all__ = ["Spec", "StatsFn", "compute", "parse"]


class _CustomFn:
    __slots__ = ("fn", "name")

    def __init__(self, stat: Statistic) -> None:
        self.fn = stat.fn
        self.name = stat.name

    def __call__(self, x: Tensor) -> Tensor:
        result = self.fn(x)
        if isinstance(result, Tensor):
            if result.numel() != 1:
                raise ArgumentValueError(
                    f"statistic {self.name!r} returned a tensor of shape {tuple(result.shape)}; "
                    "it must return a single number"
                )
            return result.detach().reshape(1).to(device=x.device, dtype=F64)
        # torch.full passes the number as a kernel argument: no host-to-device copy.
        return torch.full((1,), float(result), dtype=F64, device=x.device)


def _not_recomputable(tensor: Tensor) -> Tensor:
    raise TrackerStateError(
        "this StatsFn was rebuilt from pickled statistics to read them; its custom "
        "statistics' functions were not saved"
    )


LayoutSpec: TypeAlias = tuple[
    str | Histogram | Blocks | CustomName | PerAxis | AttentionLogits, ...
]
_UNPICKLED_LAYOUTS: dict[LayoutSpec, Layout] = {}


def layout_from_spec(spec: LayoutSpec) -> Layout:
    """The layout of a pickled `Stats`: one per spec, so unpickled stats batch together."""
    layout = _UNPICKLED_LAYOUTS.get(spec)
    if layout is None:
        items = [
            Statistic(i.name, _not_recomputable) if isinstance(i, CustomName) else i for i in spec
        ]
        layout = _UNPICKLED_LAYOUTS[spec] = StatsFn(items).layout
    return layout


def _reduce_layout(layout: Layout) -> tuple[Any, ...]:
    return (layout_from_spec, (layout.spec,))


# A layout's derivers are closures: it pickles as the spec that rebuilds it. Registered
# here rather than as `Layout.__reduce__`, since rebuilding needs `StatsFn` and `layout`
# sits below this module.
copyreg.pickle(Layout, _reduce_layout)


class StatsFn:
    """A function `Tensor -> Stats` computing a fixed set of statistics; see `parse`.

    Calling it costs a few passes over the tensor on its device and never waits for the
    device. It remembers the last tensor it saw (by a weak reference): called again with
    the same tensor object, unchanged since (same in-place version counter), it returns the
    same `Stats` object without computing anything. Hooks see the same tensor many times,
    e.g. `nn.Sequential` returns its last child's output, and every module producing a
    tensor sees the same gradient of it.

    Args:
        spec: what to compute; see `parse`.
        compile: compute the built-in statistics through `torch.compile(dynamic=True)`; if
            compiling fails, warn once and compute eagerly. Off by default: on CPU it was
            not faster in our measurements, and compiling costs seconds per dtype and rank.

    Attributes:
        layout: the `Layout` shared by every `Stats` this function returns.

    Example:
        >>> fn = StatsFn(["mean", "abs_max"])
        >>> x = torch.tensor([1.0, -3.0])
        >>> fn(x).to_dict()
        {'mean': -1.0, 'abs_max': 3.0}
        >>> fn(x) is fn(x)
        True
    """

    __slots__ = (
        "_attention",
        "_blocks",
        "_compiled",
        "_core",
        "_customs",
        "_hists",
        "_memo",
        "_native",
        "_range",
        "_simple",
        "_spec_repr",
        "_vectors",
        "layout",
        "watch_slots",
    )

    builtin_stash_value = True
    """Marks the library's own stash values: the tracker records what they cannot handle
    as `Unrecorded` instead of raising (a user's function raises as it likes)."""

    def __init__(self, spec: Spec = True, *, compile: bool = False) -> None:
        items = parse_items(spec)
        if not items:
            raise ArgumentValueError(
                "stats=: no statistics asked for; pass True for the default set "
                f"({', '.join(DEFAULT)}) or a list of names"
            )
        names: list[str] = []
        for item in items:
            if isinstance(item, (Histogram, Blocks, AttentionLogits)):
                names.extend(item.names)
            else:
                names.append(item.name if isinstance(item, PerAxis) else item_name(item))
        # Counted once each: a spec of n items is checked in O(n), not O(n**2).
        duplicates = sorted(n for n, k in collections.Counter(names).items() if k > 1)
        if duplicates:
            raise ArgumentValueError(
                f"stats=: statistic names must be unique; repeated: {duplicates}"
            )

        core, derivers, empty = plan(
            {i for i in items if isinstance(i, str) and i not in BLOCK_NAMES}
        )
        customs: list[_CustomFn] = []
        hists: list[HistogramFn] = []
        histograms: dict[str, Histogram] = {}
        for item in items:
            if isinstance(item, Statistic):
                derivers[item.name] = column(len(empty))
                empty.append(NAN)
                customs.append(_CustomFn(item))
        for item in items:
            if isinstance(item, Histogram):
                add_hist_derivers(derivers, item, offset=len(empty))
                empty.extend([0.0] * (item.bins + 5))
                hists.append(HistogramFn(item))
                histograms[item.name] = item
        blocks: list[BlocksFn] = []
        for config in block_items(items):
            add_block_derivers(derivers, config, offset=len(empty))
            blocks.append(BlocksFn(config))
            empty.extend(block_empty(config))

        vectors = vector_items(items)
        attention = tuple(i for i in items if isinstance(i, AttentionLogits))
        integral = {"numel", "nonfinite"}
        for h in histograms.values():
            integral.update(h.names[1:])
        layout_spec = tuple(CustomName(i.name) if isinstance(i, Statistic) else i for i in items)
        # Per channel / per sample first, then the attention vectors (see `vectors`).
        vector_names = tuple(v.name for v in vectors) + tuple(n for a in attention for n in a.names)
        kept_apart = set(vector_names)
        self.layout = Layout(
            tuple(n for n in names if n not in kept_apart),
            derivers,
            tuple(empty),
            histograms,
            frozenset(integral),
            layout_spec,
            vector_names,
        )
        self._vectors = tuple(VectorFn(v) for v in vectors)
        self._attention = attention
        self._core = core
        self._range = None if core is None else core.range
        self._customs = tuple(customs)
        self._hists = tuple(hists)
        self._compiled: Callable[[Tensor, Tensor | None], Tensor] | None = None
        if compile and core is not None:
            self._compiled = torch.compile(core.device_raw, dynamic=True)
        self._blocks = tuple(blocks)
        self._spec_repr = [
            i if isinstance(i, (str, Histogram, Blocks, PerAxis, AttentionLogits)) else i.name
            for i in items
        ]
        self._memo = LastTensorMemo(self._compute)
        # Only the core groups (the default set): one call, no parts to join. The attention
        # vectors do not count: a tensor alone (all a compiled graph's record has) has none.
        self._simple = (
            core is not None
            and core.range is None
            and not customs
            and not hists
            and not blocks
            and not vectors
        )
        # Where a NaN or infinity shows in the raw vector: the min/max slots (non-finite
        # exactly when the tensor is) or the non-finite count; without those, a slot that
        # a non-finite value propagates into (a sum, the moments, the absolute sum).
        offsets: dict[str, tuple[int, int]] = {}
        offset = 0
        for group in () if core is None else core.groups:
            offsets[group.slots[0]] = (offset, len(group.slots))
            offset += len(group.slots)
        finite: tuple[int, int] | None = None
        for first in ("min", "sum", "mean", "abs_sum"):
            if first in offsets:
                finite = offsets[first]
                break
        count = offsets.get("nonfinite", (-1, 0))[0]
        if count >= 0 and "min" not in offsets:
            finite = None  # the count alone is exact
        # The health preset's groups, or the default ones (moments and extremes: rms,
        # abs_max, stats=True): a float32/float64 CPU tensor goes straight to the C kernel
        # (one pass for all of them), which reads it as it is (no detach, no flat view, no
        # dtype or layout test in Python: a few microseconds less per record); anything
        # else takes `raw`'s path. 1: all six numbers; 2: mean, std, min, max.
        self._native = 0
        if self._simple and self._compiled is None and core is not None:
            natives: dict[Callable[[Tensor], list[float]], int] = {
                cpu_moments4_minmax: 1,
                host_moments_minmax: 2,
            }
            self._native = natives.get(core.host, 0)
        self.watch_slots: tuple[tuple[int, int] | None, int] = (finite, count)
        """What `StatsStore.watch` reads: `(start, length)` of raw-vector slots that are all
        finite exactly when (or, for sums, whenever) the tensor is, and the position of the
        non-finite count; `None`/-1 for what is not computed."""

    @property
    def names(self) -> tuple[str, ...]:
        """The statistic names computed, in order."""
        return self.layout.names

    def __call__(self, tensor: Tensor) -> Stats:
        """Compute the statistics of `tensor` (on its device, detached from autograd).

        Args:
            tensor: any tensor; gradients, integer, bool and empty tensors included.

        Returns:
            A `Stats`; the very same object as last time when `tensor` is the same object
            as in the previous call and has not been modified in place since.
        """
        return self._memo(tensor)

    def _compute(self, tensor: Tensor) -> Stats:
        raw, numel = self.raw(tensor)
        vectors = self.vectors(tensor)
        if raw is None:
            return Stats(self.layout, self.layout._empty_raw(tensor.device), 0, vectors)
        if isinstance(raw, Tensor):
            return Stats(self.layout, raw, numel, vectors)
        if raw:
            return Stats._of_floats(self.layout, raw, numel, vectors)
        # only "numel" (or vectors alone), which needs nothing more from the device
        empty = torch.empty(0, dtype=F64, device=tensor.device)
        return Stats(self.layout, empty, numel, vectors)

    def vectors(
        self,
        tensor: Tensor,
        attention: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
    ) -> tuple[Tensor, ...]:
        """The statistics per channel or per sample of `tensor` (see `per_channel`) and
        its attention logits per head (`attention_logits`), in `layout.vectors` order:
        1-D float64 tensors on its device, computed without waiting for it; `()` when none
        were asked for. Not memoised (see `__call__`).

        Args:
            tensor: the tensor recorded.
            attention: when `tensor` is the output of a `scaled_dot_product_attention`
                call, that call's `(args, kwargs)`, from which the attention vectors are
                computed; otherwise `None`, and they are empty.

        Example:
            >>> StatsFn([per_sample("mean")]).vectors(torch.tensor([[1.0, 3.0], [0.0, 0.0]]))
            (tensor([2., 0.], dtype=torch.float64),)
        """
        return tuple(v(tensor) for v in self._vectors) + self._attention_vectors(tensor, attention)

    def _attention_vectors(
        self, tensor: Tensor, attention: tuple[Sequence[Any], Mapping[str, Any]] | None
    ) -> tuple[Tensor, ...]:
        if not self._attention:
            return ()
        if attention is None:
            empty = torch.empty(0, dtype=F64, device=tensor.device)
            return (empty,) * (2 * len(self._attention))
        return tuple(v for a in self._attention for v in a.of_call(*attention))

    def raw(self, tensor: Tensor) -> tuple[list[float] | Tensor | None, int]:
        """The raw vector of `tensor`'s statistics (see `Layout`) and its element count,
        without waiting for the device: host floats for CPU tensors when no statistic
        needs a tensor, else a float64 tensor on `tensor`'s device; `None` for an empty
        tensor (whose raw vector is `layout`'s empty one). Not memoised (see `__call__`).

        Example:
            >>> StatsFn(["mean", "max"]).raw(torch.tensor([1.0, 3.0], dtype=torch.float64))
            ([2.0, 1.0, 1.0, 3.0], 2)
        """
        if self._native:
            values = moments4_minmax(tensor, FAR)
            if values is not None:
                if self._native == 2:
                    values = [values[0], values[1], values[4], values[5]]
                return values, tensor.numel()
        # Gradients seen in backward hooks need no detaching (one tensor object less).
        x = tensor.detach() if tensor.requires_grad else tensor
        if x.layout != torch.strided:
            # Sparse gradients (nn.Embedding(sparse=True)) and other layouts: the statistics
            # of the dense tensor they stand for, implicit zeros included.
            x = x.to_dense()
        numel = x.numel()
        if numel == 0:
            return None, 0
        xc = x
        if x.dtype not in REDUCED_AS_THEY_ARE:  # a set lookup: hooks run this cold
            # Complex tensors are summarised by their magnitudes (custom statistics get x).
            magnitude = x.abs() if x.is_complex() else x
            dtype = compute_dtype(magnitude.dtype)
            xc = magnitude if dtype is None else magnitude.to(dtype)
        core = self._core
        if self._simple:
            assert core is not None
            if self._compiled is None:
                # The default path, as few calls as can be: hooks run cold.
                xs = flat(xc) if core.flat else xc
                return (core.host(xs) if xs.is_cpu else core.device_raw(xs, None)), numel
            return self._core_raw(core, flat(xc), None), numel  # compiled for 1-D tensors
        shaped = xc
        xc = flat(xc)
        # Each part is a tensor, or host floats from the CPU's fast paths; when all of them
        # are floats, no tensor is built until the statistics are read.
        parts: list[Tensor | list[float]] = []
        if core is not None:
            bounds = None if self._range is None else self._range.get(xc)
            parts.append(self._core_raw(core, xc, bounds))
        for custom in self._customs:
            parts.append(custom(x))
        for hist in self._hists:
            parts.append(hist(xc, numel))
        for block in self._blocks:
            parts.append(block(shaped))
        floats: list[float] = []
        for part in parts:
            if not isinstance(part, list):
                break
            floats += part
        else:
            return floats, numel
        tensors = [host_tensor(p) if isinstance(p, list) else p for p in parts]
        return (tensors[0] if len(tensors) == 1 else torch.cat(tensors)), numel

    @property
    def traceable(self) -> bool:
        """Whether `graph_raw` and `graph_vectors` can compute these statistics (the
        built-in ones without range counts, per channel / per sample and attention logits
        included: no custom statistic, histogram or format fraction)."""
        core = self._core
        return (
            core is not None
            and core.range is None
            and not self._customs
            and not self._hists
            and not self._blocks
        )

    def graph_vectors(
        self,
        tensor: Tensor,
        attention: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
    ) -> list[Tensor]:
        """`vectors` as a compiled graph computes them (`traceable`): tensor operations
        alone, as a list (what `tensor_tracker::emit` takes); `[]` when none are asked for.

        Example:
            >>> StatsFn(["mean", per_channel("abs_max")]).graph_vectors(torch.ones(2, 3))
            [tensor([1., 1., 1.], dtype=torch.float64)]
        """
        if not self.layout.vectors:
            return []
        x = tensor.detach()  # a compiled graph's tensors are strided
        return [v.strided(x) for v in self._vectors] + list(self._attention_vectors(x, attention))

    def graph_raw(self, tensor: Tensor) -> Tensor:
        """The raw vector of a non-empty `tensor` as tensor operations alone (no host
        floats, no data-dependent shapes), so that TorchDynamo can trace it into a compiled
        graph; only when `traceable`. It may differ from `raw` in the last bits (the
        moments are float64 sums: `Core.graph_raw`)."""
        assert self._core is not None and self.traceable
        x = tensor.detach()
        magnitude = x.abs() if x.is_complex() else x
        dtype = compute_dtype(magnitude.dtype)
        xc = (magnitude if dtype is None else magnitude.to(dtype)).reshape(-1)
        return self._core.graph_raw(xc)

    def store(self) -> StatsStore:
        """A new `StatsStore` for this function's statistics: what a tracker records them
        into (a few numbers per tensor in one buffer per device, no object per tensor)."""
        return StatsStore(self)

    def _core_raw(self, core: Core, x: Tensor, bounds: Tensor | None) -> list[float] | Tensor:
        if self._compiled is not None:
            try:
                return self._compiled(x, bounds)
            except Exception as error:
                warnings.warn(
                    f"torch.compile failed for statistics {list(self.layout.names)} "
                    f"({type(error).__name__}: {error}); computing them eagerly instead",
                    RuntimeWarning,
                    stacklevel=5,
                )
                self._compiled = None
        return core.host_raw(x, bounds) if x.is_cpu else core.device_raw(x, bounds)

    def __repr__(self) -> str:
        return f"StatsFn({self._spec_repr!r})"


Spec: TypeAlias = bool | str | Sequence[Item] | Mapping[str, Callable[[Tensor], Any]] | StatsFn
"""What `parse` accepts: `True` (the `DEFAULT` names), one name, a sequence of items (names,
named functions, `("name", fn)` pairs, `Statistic`, `histogram(...)`), a mapping
`{"name": fn}`, or a ready `StatsFn`."""


def parse(spec: Spec, *, compile: bool = False) -> StatsFn:
    """Build the `StatsFn` for a stats spec (what a `stats=` argument accepts).

    Args:
        spec: one of
            - `True`: the `DEFAULT` set (mean, std, rms, abs_max, min, max, numel);
            - a name from `NAMES`, e.g. `"rms"`;
            - a sequence mixing names, named functions (`torch.median`, a `def`), `("name", fn)`
              pairs, `Statistic` objects and `histogram(...)`;
            - a mapping `{"name": fn}`;
            - a `StatsFn`, returned as is.
        compile: see `StatsFn`.

    Returns:
        A `StatsFn`; call it on tensors.

    Raises:
        ValueError: unknown or repeated names, an empty spec, or an unnamed function
            (e.g. a lambda: pass `("name", fn)`).
        TypeError: `False`/`None` (which mean "no statistics" to callers) or another type.

    Example:
        >>> fn = parse(["rms", ("l1", lambda t: t.abs().sum()), histogram(bins=8)])
        >>> fn.names[:3]
        ('rms', 'l1', 'hist')
    """
    check_bool(compile, "parse(compile=...)")
    if isinstance(spec, StatsFn):
        return spec
    return StatsFn(spec, compile=compile)


def compute(tensor: Tensor, names: Spec = DEFAULT) -> Stats:
    """Statistics of one tensor: `parse(names)(tensor)`, for one-off use.

    In a loop or a hook, build the `StatsFn` once with `parse` instead.

    Args:
        tensor: any tensor.
        names: a stats spec (see `parse`); the `DEFAULT` names when omitted.

    Returns:
        The tensor's `Stats`, still on its device.

    Example:
        >>> compute(torch.arange(4), ["mean", "max"]).to_dict()
        {'mean': 1.5, 'max': 3.0}
    """
    check_type(tensor, Tensor, "compute(tensor)", "a torch.Tensor")
    return parse(names)(tensor)
