"""`umap_plot`: each token's path through the layers, embedded in 2-D."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from .._data.select import (
    as_stashes,
    display_name,
)
from .._optional import require
from .._validate import check_choice, check_count, check_int
from ..errors import ArgumentValueError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from .._data.embedding import (
    MAX_TOKENS,
    Names,
    embed,
    label_tokens,
    layer_names,
    layer_rows,
    token_index,
    with_children,
)
from .._data.series import empty_error, last_step
from ._figure import new_figure, root_figure, themed

__all__ = ["draw_paths", "umap_plot"]


def draw_paths(
    ax: Axes,
    points: Tensor,
    labels: list[str] | None,
    cmap: Any,
    norm: Any,
    title: str,
    axis: str,
) -> None:
    """Draw each token's path through the layers on `ax`, points coloured by depth."""
    collections = require("matplotlib.collections", "plot")
    n_layers, n_tokens = points.shape[0], points.shape[1]
    if n_layers > 1:
        segments = torch.stack([points[:-1], points[1:]], dim=2).reshape(-1, 2, 2)
        depth = torch.arange(n_layers - 1, dtype=torch.float64).repeat_interleave(n_tokens)
        paths = collections.LineCollection(
            segments.numpy(), cmap=cmap, norm=norm, linewidths=0.8, alpha=0.6, zorder=2
        )
        paths.set_array((depth + 0.5).numpy())
        ax.add_collection(paths)
    flat = points.reshape(-1, 2)
    layer = torch.arange(n_layers).repeat_interleave(n_tokens)
    ax.scatter(
        flat[:, 0].numpy(),
        flat[:, 1].numpy(),
        c=layer.numpy(),
        cmap=cmap,
        norm=norm,
        s=14,
        zorder=3,
        edgecolors="none",
    )
    if labels is not None:
        for (x, y), text in zip(points[-1].tolist(), labels, strict=True):
            ax.annotate(
                text,
                (x, y),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize="x-small",
                zorder=4,
            )
    ax.autoscale_view()
    ax.set_xlabel(f"{axis} 1")
    ax.set_ylabel(f"{axis} 2")
    ax.set_title(title)


@themed
def umap_plot(
    tracker_or_stashes: Any,
    *,
    layers: Names = None,
    grad: bool | Literal["both"] = False,
    method: Literal["umap", "pca"] = "umap",
    tokens: Sequence[int] | range | slice | Tensor | None = None,
    token_labels: Sequence[Any] | None = None,
    max_tokens: int = MAX_TOKENS,
    step: int | None = None,
    call: int = 0,
    seed: int = 0,
    ax: Axes | Sequence[Axes] | None = None,
) -> Figure:
    """Each token's path through the layers, embedded in 2-D.

    Takes the output of each chosen layer (e.g. the hidden states `[batch, seq, d]` of every
    transformer block), flattens all leading dimensions so that each row is one token,
    embeds the rows of all layers jointly in 2-D, and draws each token as a line through
    its per-layer points, coloured by depth (the colorbar names the layers). With
    `grad="both"`, activations and gradients are embedded separately and drawn side by side.

    Args:
        tracker_or_stashes: a `Tracker` or a list of `Stash` (full tensors: track without
            `stats=`).
        layers: module names in the order to connect them (`"<model>"` is the root), or a
            regex/substring selecting modules in execution order; default: see
            `default_layers` (the numbered layers, e.g. `blocks.0`, `blocks.1`, ...).
            An op or tap record (`track(..., ops=...)`, `tap`) is a layer named as a child
            of its module: `"blocks.0.add#0"` (the residual stream after the add). Their outputs must share the feature size (last dimension) and token count.
        grad: `False` for activations, `True` for gradients, `"both"` for two panels.
        method: `"umap"` (umap-learn, seeded with `seed`; a few seconds, the first call
            also compiles numba code) or `"pca"` (first two principal components, instant).
        tokens: which rows (tokens, after flattening) to draw: indices, a `range` or a
            `slice`; default: the first `max_tokens` rows.
        token_labels: text shown next to each token's last point: one per chosen token, or
            one per row (indexed like `tokens`), e.g. the decoded input tokens.
        max_tokens: how many rows to take when `tokens` is not given (default 64).
        step: which step's stashes; default: the last recorded step.
        call: which call of each layer in that step (default the first, 0).
        seed: random seed for UMAP.
        ax: draw into this axes (two axes when `grad="both"`) instead of a new figure.

    Returns:
        The matplotlib `Figure`: per panel a `LineCollection` (tokens x (layers - 1)
        segments) and a scatter of layers x tokens points; plus a colorbar whose tick
        labels are the layer names.

    Raises:
        TypeError: wrong argument types (e.g. `tokens` not integers).
        ValueError: fewer than 2 layers, layers with different feature sizes or token
            counts, a layer without a tensor, non-finite values, an unknown `method`, or too
            few points for UMAP.

    Example:
        >>> with tensor_tracker.track(lm, include=r"blocks\\.\\d+$") as t:
        ...     lm(tokens).sum().backward()
        >>> fig = plot.umap_plot(t, method="pca", grad="both", tokens=range(16))
        >>> len(fig.axes)  # activations, gradients and the depth colour bar
        3
    """
    stashes = as_stashes(tracker_or_stashes, "tracker_or_stashes")
    if not stashes:
        raise empty_error("umap_plot", "tracker_or_stashes")
    check_choice(method, "method", ("umap", "pca"))
    check_choice(grad, "grad", (False, True, "both"))
    check_int(seed, "umap_plot(seed=...)")
    check_count(call, "umap_plot(call=...)", "the call's index", minimum=0)
    check_count(max_tokens, "umap_plot(max_tokens=...)", "rows to take")
    if step is not None:
        check_int(step, "umap_plot(step=...)", "a recorded step (int) or None")
    outputs = with_children(stashes)
    if not outputs:
        raise ArgumentValueError(
            "umap_plot: no module outputs recorded (track with capture='outputs')"
        )
    names = layer_names(outputs, layers)
    if len(names) < 2:
        raise ArgumentValueError(
            f"umap_plot: needs at least 2 layers to draw paths through, got {len(names)} "
            f"({[display_name(n) for n in names]}); choose more layers="
        )
    if step is None:
        step = last_step(outputs)
    panels = [False, True] if grad == "both" else [bool(grad)]
    data = [layer_rows(outputs, names, g, step, call) for g in panels]
    n_rows = data[0][0].shape[0]
    if any(rows[0].shape[0] != n_rows for rows in data):
        raise ArgumentValueError("umap_plot: activations and gradients have different token counts")
    index = token_index(tokens, n_rows, max_tokens)
    labels = label_tokens(token_labels, index, n_rows)
    embedded = []
    for g, rows in zip(panels, data, strict=True):
        x = torch.cat([r[index] for r in rows])
        if not torch.isfinite(x).all():
            bad = [
                display_name(n)
                for n, r in zip(names, rows, strict=True)
                if not torch.isfinite(r[index]).all()
            ]
            raise ArgumentValueError(
                f"umap_plot: the {'gradients' if g else 'activations'} of {bad} hold NaN or "
                "inf values, which cannot be embedded; choose other layers or tokens"
            )
        embedded.append(embed(x, method, seed).reshape(len(names), index.numel(), 2))

    if ax is None:
        fig = new_figure((6.5 * len(panels) + 1.0, 5.5))
        axes = list(fig.subplots(1, len(panels), squeeze=False)[0])
    else:
        axes = list(ax) if isinstance(ax, Sequence) else [ax]
        if len(axes) != len(panels):
            raise ArgumentValueError(
                f"ax: grad={grad!r} draws {len(panels)} panel(s); give as many axes"
            )
        fig = root_figure(axes[0])
    colors = require("matplotlib.colors", "plot")
    cm = require("matplotlib.cm", "plot")
    cmap = require("matplotlib", "plot").colormaps["viridis"]
    norm = colors.Normalize(0, max(len(names) - 1, 1))
    axis = "UMAP" if method == "umap" else "PC"
    for a, g, points in zip(axes, panels, embedded, strict=True):
        what = "gradients" if g else "activations"
        title = f"{axis} of {what}: {index.numel()} tokens x {len(names)} layers (step {step})"
        draw_paths(a, points, labels, cmap, norm, title, axis)
    bar = fig.colorbar(
        cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, ticks=list(range(len(names)))
    )
    bar.ax.set_yticklabels([display_name(n) for n in names], fontsize="small")
    bar.set_label("layer (depth)")
    return fig
