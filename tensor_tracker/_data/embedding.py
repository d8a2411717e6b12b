"""Rows for embedding plots: which layers, which tokens, and their 2-D embedding (UMAP or PCA)."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.records import Stash
from .._optional import require
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import Stats
from .select import (
    CHILD_KINDS,
    ROOT_LABEL,
    as_stashes,
    display_name,
    module_order,
    name_filter,
    select,
    shown_value,
    stash_tensor,
)
from .series import tensor_label

if TYPE_CHECKING:
    pass
__all__ = [
    "MAX_TOKENS",
    "NUMBERED",
    "Names",
    "default_layers",
    "embed",
    "label_tokens",
    "layer_names",
    "layer_rows",
    "token_index",
    "with_children",
]


MAX_TOKENS = 64
"""How many tokens (rows) `umap_plot` embeds when `tokens=` is not given: the first 64."""


Names = str | Sequence[str] | None


NUMBERED = re.compile(r"(^|\.)\d+$")


def with_children(stashes: Sequence[Stash]) -> list[Stash]:
    """The module outputs among `stashes`, with the op and tap records made inside them
    (`track(..., ops=...)`, `tap`) as outputs of their own, named as children of their
    module (`"blocks.0.add#0"`, as `history` and `scale_plot` name them): layers to embed
    like any module's output (the residual stream after each add, say)."""
    return [
        dataclasses.replace(s, name=tensor_label(s.name, s.attr), kind="output", attr="")
        if s.kind in CHILD_KINDS
        else s
        for s in select(stashes, kind=("output", *CHILD_KINDS))
    ]


def default_layers(stashes: Sequence[Stash]) -> list[str]:
    """The layers `umap_plot` uses when `layers=None`.

    Among modules whose forward output is a float tensor with at least 2 dimensions: the
    numbered ones (names ending in a number, like `blocks.0`, `blocks.1` of a
    `ModuleList`, or `0`, `1` of a `Sequential`) whose outputs share the most common shape;
    when fewer than 2 are numbered, all modules with the most common output shape. In
    execution order.

    Example:
        >>> with tensor_tracker.track(lm) as t:
        ...     _ = lm(tokens)
        >>> plot.default_layers(list(t))
        ['blocks.0', 'blocks.1']
    """
    stashes = as_stashes(stashes, "default_layers(stashes)")
    shapes: dict[str, tuple[int, ...]] = {}
    for s in stashes:
        if s.grad or s.kind != "output" or s.name in shapes:
            continue
        tensor = stash_tensor(s)
        if tensor is not None and tensor.dim() >= 2 and not tensor.is_complex():
            shapes[s.name] = tuple(tensor.shape)

    def largest_group(names: list[str]) -> list[str]:
        groups: dict[tuple[int, ...], list[str]] = {}
        for n in names:
            groups.setdefault(shapes[n], []).append(n)
        return max(groups.values(), key=len, default=[])

    numbered = largest_group([n for n in shapes if NUMBERED.search(n)])
    return numbered if len(numbered) >= 2 else largest_group(list(shapes))


def layer_names(stashes: Sequence[Stash], layers: Names) -> list[str]:
    """The layers to embed: `layers` resolved to module names (a regex or list), or `default_layers`."""
    if layers is None:
        names = default_layers(stashes)
        if len(names) < 2:
            raise ArgumentValueError(
                "umap_plot: could not find 2 or more layers with outputs of the same shape; "
                "pass layers=[...] (module names) or a regex such as layers=r'blocks\\.\\d+$'"
            )
        return names
    if isinstance(layers, (str, re.Pattern)):
        keep = name_filter(layers, "layers")
        assert keep is not None
        return [n for n in module_order(stashes) if keep(n)]
    names = list(layers)
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise ArgumentTypeError(
            f"layers must be module names (str) or a regex string, found {bad!r}"
        )
    return ["" if n == ROOT_LABEL else n for n in names]


def layer_rows(
    stashes: Sequence[Stash], names: list[str], grad: bool, step: int, call: int
) -> list[Tensor]:
    """Each layer's tensor as rows `[tokens, features]` (all leading dims flattened)."""
    rows = []
    what = "gradient" if grad else "forward"
    for name in names:
        found = select(stashes, names=[name], grad=grad, step=step, call=call)
        tensor = next((t for t in map(stash_tensor, found) if t is not None), None)
        if tensor is None and any(isinstance(shown_value(s), Stats) for s in found):
            raise ArgumentValueError(
                f"umap_plot: layer {display_name(name)!r} holds statistics (stats=), not the "
                "tensor; track without stats= to keep the full tensors"
            )
        if tensor is None:
            raise ArgumentValueError(
                f"umap_plot: no {what} tensor for layer {display_name(name)!r} at step {step}, "
                f"call {call}"
                + (" (was it tracked with grad=True?)" if grad else "")
                + "; choose layers among the recorded modules, e.g. "
                f"{[display_name(n) for n in module_order(stashes)[:6]]}"
            )
        if tensor.is_complex():
            raise ArgumentTypeError(
                f"umap_plot: layer {display_name(name)!r} holds a complex tensor"
            )
        if tensor.dim() == 0:
            raise ArgumentValueError(
                f"umap_plot: layer {display_name(name)!r} holds a single number; choose layers "
                "whose outputs have a feature dimension, e.g. [batch, seq, features]"
            )
        x = tensor.detach().to("cpu", torch.float64)
        rows.append(x.reshape(-1, x.shape[-1]))
    sizes = {display_name(n): r.shape[1] for n, r in zip(names, rows, strict=True)}
    if len(set(sizes.values())) > 1:
        raise ArgumentValueError(
            f"umap_plot: the layers' feature sizes differ ({sizes}); choose layers whose "
            "outputs share the last dimension, e.g. the hidden states of every block"
        )
    counts = {display_name(n): r.shape[0] for n, r in zip(names, rows, strict=True)}
    if len(set(counts.values())) > 1:
        raise ArgumentValueError(
            f"umap_plot: the layers have different numbers of tokens (rows) ({counts}); "
            "choose layers that see the same tokens"
        )
    return rows


def token_index(tokens: Any, n_rows: int, max_tokens: int) -> Tensor:
    """Which rows (tokens) to embed: `tokens` as an index tensor, or the first `max_tokens` rows."""
    if tokens is None:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ArgumentValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        return torch.arange(min(n_rows, max_tokens))
    if isinstance(tokens, slice):
        tokens = range(n_rows)[tokens]
    if isinstance(tokens, int):
        tokens = [tokens]
    index = torch.as_tensor(list(tokens) if not isinstance(tokens, Tensor) else tokens)
    if index.dtype == torch.bool or index.is_floating_point() or index.dim() != 1:
        raise ArgumentTypeError(
            f"tokens must be row indices (ints), a range or a slice, got {tokens!r}"
        )
    if index.numel() == 0:
        raise ArgumentValueError("tokens selects no token; give at least one row index")
    bad = index[(index < -n_rows) | (index >= n_rows)]
    if bad.numel():
        raise ArgumentValueError(
            f"tokens: index {int(bad[0])} is out of range; the layers have {n_rows} tokens "
            "(rows after flattening all dims but the last)"
        )
    return index % n_rows


def label_tokens(token_labels: Any, index: Tensor, n_rows: int) -> list[str] | None:
    """The text to show next to each chosen token, or None when no labels were given."""
    if token_labels is None:
        return None
    labels = [str(label) for label in token_labels]
    if len(labels) == n_rows:
        return [labels[i] for i in index.tolist()]
    if len(labels) == index.numel():
        return labels
    raise ArgumentValueError(
        f"token_labels has {len(labels)} entries; give one per chosen token ({index.numel()}) "
        f"or one per row of the layers ({n_rows})"
    )


def embed(x: Tensor, method: str, seed: int) -> Tensor:
    """Rows of `x` `[N, d]` in 2-D: `[N, 2]`."""
    n = x.shape[0]
    if method == "pca":
        centered = x - x.mean(0)
        _, _, vh = torch.linalg.svd(centered, full_matrices=False)
        components = vh[:2]
        # Fix each component's sign (SVD's is arbitrary): largest loading positive.
        signs = torch.sign(components.gather(1, components.abs().argmax(1, keepdim=True)))
        components = components * torch.where(signs == 0, 1.0, signs)
        y: Tensor = centered @ components.T
        if y.shape[1] < 2:
            y = torch.cat([y, torch.zeros(n, 2 - y.shape[1], dtype=y.dtype)], dim=1)
        return y
    if n < 5:
        raise ArgumentValueError(
            f"umap_plot: method='umap' needs at least 5 points (layers x tokens), got {n}; "
            "use more tokens or method='pca'"
        )
    umap = require("umap", "umap")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs overridden by random_state, small data, ...
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=min(15, n - 1),
            random_state=seed,
            init="spectral" if n > 20 else "random",
        )
        out = reducer.fit_transform(x.to(torch.float32).numpy())
    return torch.as_tensor(out, dtype=torch.float64)
