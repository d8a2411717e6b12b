"""Reading d loss / d tensor for tensors a module returned, with tensor hooks only.

Tensor hooks add no autograd node, so tracked gradients stay bitwise identical. Two
autograd details make "the gradient of this tensor" harder than `tensor.register_hook`:

- **Views.** A hook on a view that is later modified in place (`h += x` on `nn.Linear`'s
  output for a 3-D input, which is a view of a 2-D matmul result) never fires: the in-place
  op routes the gradient around the view's node, through a `CopySlices` node into the
  base's node. `stand_in` decides what reads such a view's gradient instead, for eager
  mode (`Tap`) and compiled graphs (`CompiledHooks`) alike: its base's gradient, cut to
  the view, when the view's own hook did not fire. That is exact when the
  base has no use besides this view (as for `nn.Linear`'s internal matmul result).
- **Several tensors per call.** One gradient stash per module call holds every output
  tensor's gradient. `Gather` collects them per backward pass (autograd graph task) and
  records once: as soon as every tensor that will get a gradient has one, or, at the
  latest, when the backward pass ends (`queue_callback`). Unlike
  `torch.autograd.graph.register_multi_grad_hook`, it counts the tensor `backward()` was
  called on, which the engine reports as "not executed". A value holding one tensor
  (attention's `(output, None)`) needs none of this: it is hooked like a tensor.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._torch_compat import gradient_node, graph_task_id, queue_at_end_of_backward, will_execute
from .records import Unrecorded

__all__ = [
    "Gather",
    "Tap",
    "ViewSlice",
    "handle_is_dead",
    "hook_grad",
    "hook_grad_all",
    "stand_in",
    "traced_stand_in",
    "unrecordable",
    "view_replay",
]


_WARNED: set[str] = set()


def unrecordable(value: Any, error: BaseException | str) -> Unrecorded:
    """An `Unrecorded` for `value` that could not be handled, warning once per reason."""
    if isinstance(value, Tensor):
        what = f"Tensor(layout={value.layout}, dtype={value.dtype}, shape={tuple(value.shape)})"
    else:
        what = type(value).__qualname__
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    key = reason.split("\n", 1)[0][:200]
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(
            f"tensor_tracker could not record a {what} ({key}); it keeps an Unrecorded "
            "placeholder there and goes on. Please report this with the model.",
            RuntimeWarning,
            stacklevel=3,
        )
    return Unrecorded(what, reason)


GradCallback = Callable[[Any], None]


def hook_grad(tensor: Tensor, callback: GradCallback) -> Any:
    """Call `callback` with d loss / d `tensor` (for its value as it is now) whenever a
    backward pass computes it; returns the removable handle.

    For a tensor an autograd node produced, this is a pre-hook on that node, reading the
    node's gradient for `tensor`'s output slot: what `tensor.register_hook` sees, for about
    a third of its cost (that method is Python; this one is not), and it adds no node
    either. Leaves (no node) use `register_hook`.
    """
    return hook_grad_all(tensor, [callback])


def hook_grad_all(tensor: Tensor, callbacks: list[GradCallback]) -> Any:
    """`hook_grad` for each callback in `callbacks`, in order, including those added to
    the list later (one Python call per gradient fewer than a callback that loops)."""
    node = tensor.grad_fn
    if node is None:

        def hook(grad: Tensor) -> None:
            for callback in callbacks:
                callback(grad)

        return tensor.register_hook(hook)  # type: ignore[no-untyped-call]
    slot = tensor.output_nr

    def pre_hook(grad_outputs: tuple[Any, ...]) -> None:
        grad = grad_outputs[slot]
        if grad is not None:
            for callback in callbacks:
                callback(grad)

    return node.register_prehook(pre_hook)


def stand_in(tensor: Tensor) -> Tensor | None:
    """The tensor whose gradient stands in for `tensor`'s where `tensor`'s own hook does
    not fire: the one rule that both the eager path (`Tap`) and the compiled one
    (`CompiledHooks.forward_hook`) follow.

    None when `tensor` is not a view of a tensor that requires grad, or is a view of a leaf
    (autograd refuses to modify such a view in place, so its own hook always fires): then
    `tensor`'s own hook alone reads its gradient, exactly. Otherwise the view's base, hooked besides
    `tensor`: the view's part of the base's gradient is recorded in a backward pass where
    the view's own hook did not deliver first (the view was modified in place, so the
    gradient went around the view's node). Eager mode also reads the base's version
    counter, and records nothing when the storage was not modified (the view then got no
    gradient); a compiled graph cannot read it. The part is exact when the base has no use
    besides the view (as `nn.Linear`'s matmul result for a 3-D input).

    Example:
        >>> h = torch.ones(3, 4, requires_grad=True) * 2
        >>> stand_in(h[:, :2]) is h, stand_in(h)
        (True, None)
    """
    base = tensor._base  # None unless a view
    if base is None or not base.requires_grad or base.is_leaf:
        return None
    return base


def traced_stand_in(tensor: Tensor) -> Tensor | None:
    """`stand_in` as a compiled graph's hook applies it (`CompiledHooks`): the same, but
    for a view that looks like a batched matmul's result (a 3-D base viewed with more
    dimensions, the same last two and as many elements), whose base is not hooked.

    Dynamo traces `matmul` through torch's Python decomposition, whose result for 4-D
    operands (`q @ k.transpose(-2, -1)`) is a `view` of the `bmm` result where eager's
    `_unsafe_view` returns a new tensor: the graph would read that base at run time and,
    with the `eager` backend, find None. Such a view's own hook fires unless the view is
    modified in place; what is left out is the gradient of a real view of that shape that
    a parent modifies in place (`h.view(b, heads, t, d)` of a 3-D `h`, then `out += x`
    outside the module): under compile that record is lost. It cannot be told apart here:
    this rule sees a view and its base, of the same shapes in both cases (the op that made
    the view is in Dynamo's graph, not on the tensor), and it must decide at trace time
    whether a hook goes on a base that the `eager` backend's matmul never makes.

    Example:
        >>> h = torch.ones(4, 3, 5, requires_grad=True) * 2
        >>> traced_stand_in(h.view(2, 2, 3, 5)), traced_stand_in(h[:2]) is h
        (None, True)
        >>> traced_stand_in(h.view(2, 6, 5)) is h  # nn.Linear's 3-D output, a split
        True
    """
    base = tensor._base
    # Its shape first: under compile the graph reads what else is asked of it at run time.
    if base is None or (
        base.dim() == 3
        and tensor.dim() > 3
        and tensor.shape[-2:] == base.shape[-2:]
        and base.numel() == tensor.numel()
    ):
        return None
    return stand_in(tensor)


class ViewSlice:
    """Cuts a view's part out of its base's gradient, by the view's geometry (sizes,
    strides and offset in the base's storage, dtype), taken when the view is hooked: the
    view itself may be gone when the gradient comes."""

    __slots__ = ("_geometry",)

    def __init__(self, view: Tensor, base: Tensor) -> None:
        self._geometry = (
            view.size(),
            view.stride(),
            view.storage_offset(),
            view.dtype,
            base.stride(),
            base.storage_offset(),
        )

    def __call__(self, grad: Tensor) -> Tensor:
        """The part of `grad`, a gradient of the base, that belongs to the view."""
        size, stride, offset, dtype, base_stride, base_offset = self._geometry
        if grad.stride() != base_stride:  # rare: lay the gradient out like the base
            grad = torch.empty_strided(
                grad.size(), base_stride, dtype=grad.dtype, device=grad.device
            ).copy_(grad)
        if dtype != grad.dtype:
            # A view that reinterprets the base's dtype (torch.view_as_real,
            # Tensor.view(dtype)): offsets are counted in elements of each tensor's dtype.
            base_itemsize = grad.element_size()
            if grad.is_complex() and not dtype.is_complex:
                grad = torch.view_as_real(grad)
            elif dtype.is_complex and not grad.is_complex():
                grad = torch.view_as_complex(grad)
            else:
                grad = grad.view(dtype)
            base_offset = base_offset * base_itemsize // grad.element_size()
        return grad.as_strided(size, stride, grad.storage_offset() + offset - base_offset)


def view_replay(view: Tensor, base: Tensor) -> Callable[[Tensor], Tensor]:
    """What a compiled graph's hook cuts a view's part out of its base's gradient with,
    instead of `ViewSlice`: Dynamo cannot trace `storage_offset()`, but traces the view's own
    ops replayed on the gradient (`Tensor._view_func`). They replay only on a tensor of the
    base's geometry, so the gradient is laid out like the base first."""
    size, stride = base.size(), base.stride()

    def cut(grad: Tensor) -> Tensor:
        like_base = torch.empty_strided(size, stride, dtype=grad.dtype, device=grad.device)
        part: Tensor = view._view_func(like_base.copy_(grad))  # type: ignore[attr-defined]
        return part

    return cut


class Tap:
    """Delivers d loss / d `tensor` (as returned, before later in-place changes) to its
    callbacks, once per backward pass; see `stand_in` for views."""

    __slots__ = ("_base_ref", "_done_task", "_slice", "_version", "callbacks", "handles")

    def __init__(self, tensor: Tensor, callbacks: list[GradCallback]) -> None:
        self.callbacks = callbacks
        base = stand_in(tensor)
        if base is None:
            self._slice: ViewSlice | None = None
            self.handles: list[Any] = [hook_grad_all(tensor, callbacks)]
            return
        self._slice = ViewSlice(tensor, base)
        self._done_task = -1
        # Weak, so the storage is not kept alive: the base's Python object lives as long as
        # the base does (the view holds it), and its version counter, shared with every
        # view, tells whether the storage was modified in place.
        self._base_ref = weakref.ref(base)
        self._version = base._version
        self.handles = [hook_grad(tensor, self._from_view), hook_grad(base, self._from_base)]

    @property
    def exact(self) -> bool:
        """Whether the gradient comes from one hook whose node `will_execute` can judge."""
        return self._slice is None

    def _deliver(self, grad: Any) -> None:
        for callback in self.callbacks:
            callback(grad)

    def _from_view(self, grad: Tensor) -> None:
        self._done_task = graph_task_id()
        self._deliver(grad)

    def _modified(self) -> bool:
        """Whether the view's storage was modified in place since it was hooked (True when
        the base is gone and cannot tell)."""
        base = self._base_ref()
        return base is None or base._version != self._version

    def _from_base(self, grad: Tensor) -> None:
        if self._done_task == graph_task_id() or not self._modified():
            return  # the view's own hook fired, or the view got no gradient at all
        assert self._slice is not None
        try:
            value: Any = self._slice(grad)
        except Exception as error:  # never break the user's backward()
            value = unrecordable(grad, error)
        self._deliver(value)


class Gather:
    """Collects the gradients of several tensors of one module call into one record per
    backward pass: `record(tuple_of_gradients)` with `None` where none arrived."""

    __slots__ = ("_arrived", "_buffer", "_expected", "_task", "count", "nodes", "record")

    def __init__(self, count: int, record: Callable[[tuple[Any, ...]], None]) -> None:
        self.count = count
        self.record = record
        # (index, node) of each tensor whose Tap is exact; None once any Tap is not.
        self.nodes: list[tuple[int, Any]] | None = []
        self._task = -1
        self._buffer: list[Any] | None = None
        self._arrived = 0
        self._expected: float = 0

    def add(self, index: int, tensor: Tensor, tap: Tap) -> None:
        """Register `tensor` (number `index` of the call's tensors), read by `tap`."""
        if self.nodes is not None:
            if tap.exact:
                self.nodes.append((index, gradient_node(tensor)))
            else:
                self.nodes = None

    def callback(self, index: int) -> GradCallback:
        """The callback that puts the gradient of tensor number `index`."""
        return lambda grad: self._put(index, grad)

    def _put(self, index: int, grad: Any) -> None:
        task = graph_task_id()
        if task != self._task or self._buffer is None:
            if task == self._task:
                return  # a late fallback gradient after this pass was recorded
            self._task = task
            self._buffer = [None] * self.count
            self._arrived = 0
            self._expected = self._count_expected(index)
            queue_at_end_of_backward(self._flush)
        self._buffer[index] = grad
        self._arrived += 1
        if self._arrived >= self._expected:
            self._flush()

    def _count_expected(self, first: int) -> float:
        """How many gradients this backward pass will deliver (inf when it cannot tell,
        then the record waits for the end of the pass)."""
        if self.nodes is None:
            return math.inf
        # The tensor `backward()` starts from is reported as not executed, yet its hook
        # fires, and always first.
        return sum(1 for i, node in self.nodes if i == first or will_execute(node))

    def _flush(self) -> None:
        buffer = self._buffer
        if buffer is not None:
            self._buffer = None
            self.record(tuple(buffer))


def handle_is_dead(handle: Any) -> bool:
    """Whether a tensor hook's handle belongs to a freed autograd graph (and tensor)."""
    return handle.hooks_dict_ref() is None
