"""Histogram statistics: fixed-bin counts on the tensor's device (see `spec.histogram`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._kernels import F64, INF, Thresholds, count_buckets, pow2
from ._layout import Derive, column
from ._spec import Histogram

__all__ = ["HistogramFn", "add_hist_derivers"]

_F32_BIAS = 127


class HistogramFn:
    """One histogram's raw counts; owns its per-device generators and thresholds."""

    __slots__ = ("_generators", "binade_offset", "bins", "config", "nb", "thresholds")

    def __init__(self, config: Histogram) -> None:
        self.config = config
        self.bins = config.bins
        # Bucket order: [zero | -inf, below, bins..., above, nonfinite | +inf&NaN, rejected]
        self.nb = config.bins + 5
        if config.log2:
            values = [pow2(e) for e in config.edges]
            keys = [(0.0, False), *((v, True) for v in values), (INF, True)]
        else:
            keys = [(-INF, False), *((e, True) for e in config.edges), (INF, True)]
        self.thresholds = Thresholds(keys)
        self._generators: dict[torch.device, torch.Generator] = {}
        lo, hi = config.range
        # One bin per binade with integer edges inside float32's normal range (up to 2**128,
        # past its largest finite value): see _binades.
        binades = (
            config.log2
            and config.reject_sigma is None
            and lo == int(lo)
            and config.bins == hi - lo
            and lo >= -126
            and hi <= 128
        )
        self.binade_offset = int(_F32_BIAS + lo - 1) if binades else None

    def _binades_host(self, x: Tensor, offset: int) -> list[float]:
        """`_binades` of a 1-D contiguous CPU tensor as floats: one bincount over the 256
        exponent values, then summed up on the host instead of by a dozen tiny tensor ops."""
        exponent = x.view(torch.int32).bitwise_right_shift(23).bitwise_and_(255)
        counts = torch.bincount(exponent, minlength=256).tolist()
        zero = x.numel() - int(torch.count_nonzero(x))
        top = offset + 1 + self.bins
        return [
            zero,
            sum(counts[: offset + 1]) - zero,
            *counts[offset + 1 : top],
            sum(counts[top:255]),
            counts[255],
            0,
        ]

    def _binades(self, x: Tensor, offset: int) -> Tensor:
        """Counts from float32 exponent fields: a value in [2**(e-127), 2**(e-126)) has the
        biased exponent e, so its bin is e - 127 - lo. Zeros and subnormals have e = 0 and
        land below (zeros are then moved to their own count); NaN and ±inf have e = 255,
        which gets a bucket of its own."""
        bins = self.bins
        exponent = x.view(torch.int32).bitwise_right_shift(23).bitwise_and_(255)
        # 0: below, 1..bins: the bins, then above, and last (e = 255): NaN and ±inf.
        counts = count_buckets(exponent.sub_(offset).clamp_(min=0), 256 - offset)
        zero = torch.count_nonzero(x).to(F64).neg_().add_(x.numel())
        # Bucket order of the general path: zero, below, bins..., above, nonfinite, rejected.
        return torch.cat(
            (
                zero[None],
                counts[:1] - zero,
                counts[1 : bins + 1],
                counts[bins + 1 : -1].sum()[None],
                counts[-1:],
                torch.zeros(1, dtype=F64, device=x.device),
            )
        )

    def _generator(self, device: torch.device) -> torch.Generator:
        gen = self._generators.get(device)
        if gen is None:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.config.seed)
            self._generators[device] = gen
        return gen

    def __call__(self, x: Tensor, numel: int) -> Tensor | list[float]:
        """The raw counts of 1-D `x`: host floats on the CPU's fast path, else a tensor."""
        config = self.config
        values = x
        if config.sample_n is not None and numel > config.sample_n:
            index = torch.randint(
                numel, (config.sample_n,), generator=self._generator(x.device), device=x.device
            )
            values = torch.take(x, index)
        if self.binade_offset is not None and values.dtype == torch.float32:
            if values.is_cpu:
                return self._binades_host(values.contiguous(), self.binade_offset)
            return self._binades(values.contiguous(), self.binade_offset)
        keyed = (values.abs() if config.log2 else values).contiguous()
        idx = torch.bucketize(keyed, self.thresholds.get(values), out_int32=True)
        if config.reject_sigma is not None:
            finite = torch.isfinite(values)
            count = finite.sum()
            mean = torch.where(finite, values, 0.0).sum() / count
            centred = torch.where(finite, values - mean, 0.0)
            std = torch.linalg.vector_norm(centred) / count.sqrt()
            # Non-finite values have centred == 0, so they are never rejected.
            reject = centred.abs() > config.reject_sigma * std
            idx = torch.where(reject, self.nb - 1, idx)
        return count_buckets(idx, self.nb)


def add_hist_derivers(derivers: dict[str, Derive], config: Histogram, offset: int) -> None:
    """Add the derivers of `config`'s counts, which sit at `offset` in the raw vector."""
    bins, name = config.bins, config.name
    first, below, above = offset, offset + 1, offset + bins + 2
    last, rejected = offset + bins + 3, offset + bins + 4
    derivers[name] = lambda r, n: r[:, below + 1 : above]
    derivers[f"{name}_below"] = column(below)
    derivers[f"{name}_above"] = column(above)
    derivers[f"{name}_rejected"] = column(rejected)
    if config.log2:
        derivers[f"{name}_zero"] = column(first)
        derivers[f"{name}_nonfinite"] = column(last)
    else:
        # Zero counts, NaN where the counts are (a merged rank that did not record them).
        derivers[f"{name}_zero"] = lambda r, n: r[:, first] * 0.0
        derivers[f"{name}_nonfinite"] = lambda r, n: r[:, first] + r[:, last]
