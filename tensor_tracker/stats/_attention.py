"""Attention logits per head of a `scaled_dot_product_attention` call, without storing them
(`spec.attention_logits`): the largest logit and the mean attention entropy, computed from
the query and the key in chunks of query rows.

Fused attention (SDPA, FlashAttention) never materialises the `[batch, heads, L, S]`
scores. Materialising them to watch them would cost as much memory as the unfused
attention does; here at most `chunk_rows` query rows are scored at a time, so the extra
memory stays under `CHUNK_BYTES` whatever the number of query rows (plus a float32 copy
of the key when it is in half precision, and at least one row for every batch item and
head: `lanes * keys * (2 * itemsize + 1)` bytes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..errors import ArgumentTypeError, ArgumentValueError
from ._kernels import F64

__all__ = ["CHUNK_BYTES", "SDPA_ARGUMENTS", "bind_sdpa", "chunk_rows", "logit_stats"]

CHUNK_BYTES = 32 << 20
"""The scores of one chunk of query rows take at most this many bytes (32 MiB): two
buffers of `chunk rows x keys` per batch item and head in the compute dtype, and one of
bools for the mask."""

SDPA_ARGUMENTS = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)
"""The parameters of `torch.nn.functional.scaled_dot_product_attention`, in order."""


def chunk_rows(lanes: int, keys: int, itemsize: int, budget: int = CHUNK_BYTES) -> int:
    """How many query rows to score at a time: as many as fit in `budget` bytes, at least 1.

    One row costs, for each of the `lanes` batch items and heads, `keys` scores twice in
    the compute dtype (the shifted scores and their exponentials, `itemsize` bytes each)
    and one mask bool.

    Example:
        >>> chunk_rows(lanes=4 * 8, keys=4096, itemsize=4)  # 32 MiB / (32 * 4096 * 9 B)
        28
    """
    per_row = lanes * keys * (2 * itemsize + 1)
    return max(1, budget // max(1, per_row))


def bind_sdpa(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a `scaled_dot_product_attention(*args, **kwargs)` call by name.

    Raises:
        ArgumentTypeError: more positional arguments than the function has, or an
            unknown or repeated keyword.

    Example:
        >>> q = torch.zeros(1, 2, 3, 4)
        >>> sorted(bind_sdpa((q, q, q), {"is_causal": True}))
        ['is_causal', 'key', 'query', 'value']
    """
    if len(args) > len(SDPA_ARGUMENTS):
        raise ArgumentTypeError(
            f"scaled_dot_product_attention takes at most {len(SDPA_ARGUMENTS)} positional "
            f"arguments ({', '.join(SDPA_ARGUMENTS)}); got {len(args)}"
        )
    bound = dict(zip(SDPA_ARGUMENTS, args, strict=False))
    for name, value in kwargs.items():
        if name not in SDPA_ARGUMENTS or name in bound:
            raise ArgumentTypeError(
                f"scaled_dot_product_attention: unexpected or repeated argument {name!r}; "
                f"its arguments are {', '.join(SDPA_ARGUMENTS)}"
            )
        bound[name] = value
    return bound


def _check(query: Any, key: Any, attn_mask: Any) -> None:
    for name, value in (("query", query), ("key", key)):
        if not isinstance(value, Tensor) or value.dim() < 2 or not value.is_floating_point():
            raise ArgumentTypeError(
                f"attention_logits: {name} must be a floating-point tensor of shape "
                f"[..., heads, rows, features], got {value!r}"[:300]
            )
    if query.shape[-1] != key.shape[-1]:
        raise ArgumentValueError(
            f"attention_logits: query and key must have the same last dimension, got "
            f"shapes {tuple(query.shape)} and {tuple(key.shape)}"
        )
    heads = query.shape[-3] if query.dim() >= 3 else 1
    kv_heads = key.shape[-3] if key.dim() >= 3 else 1
    if heads % kv_heads:
        raise ArgumentValueError(
            f"attention_logits: {heads} query heads cannot share {kv_heads} key heads "
            "(grouped-query attention needs a multiple)"
        )
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise ArgumentTypeError(
            f"attention_logits: attn_mask must be a tensor or None, got {attn_mask!r}"[:300]
        )


def _split_heads(t: Tensor, kv_heads: int, group: int) -> Tensor:
    """`t` with dimension -3 (heads) split into `(kv_heads, group)`: a view, always."""
    return t.view(*t.shape[:-3], kv_heads, group, *t.shape[-2:])


def _select(t: Tensor, rows: slice | Tensor) -> Tensor:
    """Rows `rows` (dimension -2) of `t`, unless `t` broadcasts along them."""
    if t.shape[-2] == 1:
        return t
    return t[..., rows, :] if isinstance(rows, slice) else t.index_select(-2, rows)


def logit_stats(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    rows: int | None = None,
    budget: int = CHUNK_BYTES,
) -> tuple[Tensor, Tensor]:
    """The largest attention logit and the mean attention entropy (nats) of each head.

    The logits are those `scaled_dot_product_attention` takes the softmax of: `query @
    key.T * scale` (`scale` by default `1 / sqrt(features)`), plus `attn_mask` when it is
    a float tensor, `-inf` where a bool `attn_mask` is False or, with `is_causal`, above
    the top-left aligned diagonal (key `j` > query row `i`, as torch defines it when the
    query and key lengths differ). Both statistics are over the batch and the query rows;
    the entropy `-sum(p * log p)` of each row's softmax `p` is averaged over them.

    Rows whose every logit is `-inf` (fully masked) have no softmax: they are left out of
    both statistics, and a head whose rows are all fully masked gets NaN for both. A NaN
    in the inputs propagates into its head's statistics.

    Computed on the inputs' device, in float32 (float64 for float64 inputs), without host
    synchronisation, `chunk_rows` query rows at a time (see the module docstring).

    Args:
        query: `[..., heads, L, features]` (a tensor of fewer than 3 dimensions is one
            head).
        key: `[..., kv_heads, S, features]`; `heads` must be a multiple of `kv_heads`
            (grouped-query attention: query head `h` uses key head `h // (heads //
            kv_heads)`).
        attn_mask: None, a bool tensor (True: takes part) or a float tensor added to the
            logits, broadcastable to `[..., heads, L, S]`.
        is_causal: mask the keys after each query row.
        scale: the logits' scale; `None`: `1 / sqrt(features)`.
        enable_gqa: accepted for `scaled_dot_product_attention`'s signature; the heads are
            grouped whenever `kv_heads < heads`.
        rows: score only this many query rows, evenly spaced (rows `(2k + 1) * L // (2 *
            rows)`), an estimate of both statistics at `rows / L` of the cost; `None` or
            `rows >= L`: every row, exact.
        budget: bytes of scores per chunk (see `chunk_rows`).

    Returns:
        `(max_logit, entropy)`, two float64 tensors of `heads` values on the inputs'
        device.

    Example:
        >>> q = torch.tensor([[[[1.0, 0.0]]]])  # one batch item, head and query row
        >>> k = torch.tensor([[[[2.0, 0.0], [0.0, 0.0]]]])  # two keys
        >>> top, entropy = logit_stats(q, k, scale=1.0)
        >>> top.tolist(), round(entropy.item(), 4)  # logits (2, 0): p = (0.881, 0.119)
        ([2.0], 0.3653)
    """
    del enable_gqa  # grouping follows the shapes, which sdpa has checked
    _check(query, key, attn_mask)
    features = query.shape[-1]
    scale = 1.0 / math.sqrt(features) if scale is None else float(scale)
    dtype = F64 if query.dtype == F64 else torch.float32
    mask = None if attn_mask is None else attn_mask.detach()  # a learned bias's too
    if mask is not None and mask.dim() < query.dim():
        mask = mask.reshape((1,) * (query.dim() - mask.dim()) + tuple(mask.shape))
    q, k = query.detach(), key.detach()
    if q.dim() < 3:
        q, k = q.unsqueeze(-3), k.unsqueeze(-3)
        mask = None if mask is None else mask.unsqueeze(-3)
    heads, kv_heads = q.shape[-3], k.shape[-3]
    group = heads // kv_heads
    # Grouped heads as views: [..., kv_heads, group, L, E] against [..., kv_heads, 1, S, E],
    # so that no key is copied per query head.
    q = _split_heads(q, kv_heads, group)
    kt = k.to(dtype).unsqueeze(-3).transpose(-1, -2)
    if mask is not None:
        mask = _split_heads(mask, kv_heads, group) if mask.shape[-3] > 1 else mask.unsqueeze(-3)
    length, keys = q.shape[-2], k.shape[-2]
    device = q.device
    picked: Tensor | None = None
    n = length
    if rows is not None and rows < length:
        n = rows
        picked = (torch.arange(n, device=device) * 2 + 1) * length // (2 * n)
    lanes = math.prod(q.shape[:-2])
    step = chunk_rows(lanes, keys, torch.finfo(dtype).bits // 8, budget)
    top = torch.full((heads,), -math.inf, dtype=F64, device=device)
    total = torch.zeros(heads, dtype=F64, device=device)
    counted = torch.zeros(heads, dtype=F64, device=device)
    lowest = torch.finfo(dtype).min
    for start in range(0, n, step):
        stop = min(start + step, n)
        where: slice | Tensor = slice(start, stop) if picked is None else picked[start:stop]
        qc = _select(q, where).to(dtype)
        s = torch.matmul(qc * scale, kt)  # [..., kv_heads, group, chunk, S]
        if mask is not None:
            mc = _select(mask, where)
            if mc.dtype == torch.bool:
                s.masked_fill_(mc.logical_not(), -math.inf)
            else:
                s.add_(mc)
        if is_causal:
            at = torch.arange(start, stop, device=device) if picked is None else picked[start:stop]
            s.masked_fill_(torch.arange(keys, device=device) > at[:, None], -math.inf)
        m = s.amax(-1, keepdim=True)
        valid = m != -math.inf  # NaN rows count, and carry their NaN into the statistics
        # Fully masked rows: shifted by 0 instead of -inf, their entropy is NaN, dropped below.
        s.sub_(m.masked_fill(valid.logical_not(), 0.0)).clamp_(min=lowest)  # -inf -> finite
        e = s.exp()
        sums = e.sum(-1)
        entropy = sums.log() - e.mul_(s).sum(-1) / sums  # log Z - sum(p * z)
        valid = valid.squeeze(-1)
        batch = (*range(m.dim() - 4), -1)
        top = torch.maximum(top, m.squeeze(-1).amax(batch).reshape(heads).to(F64))
        kept = entropy.masked_fill(valid.logical_not(), 0.0)
        total = total + kept.sum(batch, dtype=F64).reshape(heads)
        counted = counted + valid.sum(batch, dtype=F64).reshape(heads)
    none = counted == 0
    return top.masked_fill(none, math.nan), total / counted
