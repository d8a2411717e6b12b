"""Statistics per channel and per sample (`spec.per_channel`, `spec.per_sample`): one vector
per tensor, computed on its device, and `VectorRows`, where a `StatsStore` keeps them.

A vector's width is the size of the kept dimension in *that* tensor, so it can change
from record to record (a variable sequence length, a last smaller batch). The store
therefore keeps, for each vector statistic and each device, one flat float64 buffer that
vectors are appended to, and per row an offset and a length (two host integers, no Python
object per record): the same row number as the raw vector of the other statistics, so
one reference reads both.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import torch
from torch import Tensor

from ._kernels import F64, compute_dtype
from ._spec import PerAxis, channel_dim, check_dim

__all__ = ["VectorFn", "VectorRows", "vector_items"]

_CHUNK = 1 << 16  # float64 values per device buffer (512 KiB)


def vector_items(items: Sequence[object]) -> list[PerAxis]:
    """The `PerAxis` items of a parsed stats spec, in order."""
    return [i for i in items if isinstance(i, PerAxis)]


class VectorFn:
    """Computes one `PerAxis` statistic of a tensor: a 1-D float64 tensor on its device.

    Example:
        >>> VectorFn(per_channel("abs_mean"))(torch.tensor([[1.0, -2.0], [3.0, 0.0]]))
        tensor([2., 1.], dtype=torch.float64)
    """

    __slots__ = ("argument", "dim", "name", "stat")

    def __init__(self, item: PerAxis) -> None:
        self.stat = item.stat
        self.dim = item.dim
        self.name = item.name
        self.argument = f"per_{item.axis}(dim={item.dim})"

    def __call__(self, tensor: Tensor) -> Tensor:
        x = tensor.detach() if tensor.requires_grad else tensor
        if x.layout != torch.strided:
            x = x.to_dense()
        return self.strided(x)

    def strided(self, x: Tensor) -> Tensor:
        """The statistic of a strided tensor `x` that needs no gradient (what a compiled
        graph's hook has: Dynamo refuses to read a layout there)."""
        nd = x.dim()
        dim = channel_dim(nd) if self.dim is None else self.dim
        if not check_dim(dim, x.shape, self.argument) or x.numel() == 0:
            return torch.empty(0, dtype=F64, device=x.device)
        if x.is_complex():
            x = x.abs()
        dtype = compute_dtype(x.dtype)
        if dtype is not None:
            x = x.to(dtype)
        keep = dim % nd
        dims = tuple(d for d in range(nd) if d != keep)
        stat = self.stat
        if not dims:  # a 1-D tensor: each entry is its own channel
            out = x if stat == "mean" else x.abs()
            return out.to(F64)
        n = math.prod([x.shape[d] for d in dims])  # a list: Dynamo traces it, not a generator
        if stat == "mean":
            out = x.mean(dim=dims)
        elif not x.is_cpu:
            # Accelerators: one fused pass each, no |x| or x**2 temporary.
            order = {"abs_max": math.inf, "rms": 2.0, "abs_mean": 1.0}[stat]
            out = torch.linalg.vector_norm(x, order, dim=dims)
            if stat != "abs_max":
                out = out.div_(math.sqrt(n) if stat == "rms" else n)
        elif stat == "abs_max":
            # On the CPU `vector_norm` over leading dimensions is 4-12 times slower than an
            # elementwise pass and a plain reduction (measured in doc/benchmarks.md).
            out = x.abs().amax(dim=dims)  # NaN propagates
        elif stat == "rms":
            out = x.square().sum(dim=dims).div_(n).sqrt_()
        else:
            out = x.abs().sum(dim=dims).div_(n)
        return out.to(F64)


class _HostVectors:
    __slots__ = ("data", "length", "start")

    def __init__(self) -> None:
        self.data = array("d")
        self.start = array("q")
        self.length = array("q")

    def add(self, vector: Tensor) -> None:
        self.start.append(len(self.data))
        if not len(vector):
            self.length.append(0)
            return
        self.length.append(len(vector))
        self.data.frombytes(vector.numpy().tobytes())

    def truncate(self, first: int) -> None:
        if first < len(self.start):
            del self.data[self.start[first] :]
            del self.start[first:]
            del self.length[first:]

    def host_data(self) -> Tensor:
        if not len(self.data):
            return torch.empty(0, dtype=F64)
        return torch.frombuffer(self.data, dtype=F64)

    @property
    def nbytes(self) -> int:
        return len(self.data) * 8 + len(self.start) * 16


class _DeviceVectors:
    """Vectors on an accelerator: appended into preallocated chunks (a copy kernel each,
    no host sync: a vector's length is known from its shape); `start` is a position in
    the concatenation of the chunks, each `_CHUNK` long except a vector's own larger one."""

    __slots__ = ("chunks", "device", "filled", "length", "sizes", "start")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.chunks: list[Tensor] = []
        self.sizes = array("q")  # chunk lengths, for positions
        self.filled = 0  # values used in the last chunk
        self.start = array("q")
        self.length = array("q")

    def _base(self) -> int:
        return sum(self.sizes[:-1]) if self.sizes else 0

    def add(self, vector: Tensor) -> None:
        n = len(vector)
        if n and (not self.chunks or self.filled + n > self.sizes[-1]):
            size = max(_CHUNK, n)
            self.chunks.append(torch.empty(size, dtype=F64, device=self.device))
            self.sizes.append(size)
            self.filled = 0
        base = self._base()
        self.start.append(base + self.filled)
        self.length.append(n)
        if n:
            self.chunks[-1][self.filled : self.filled + n].copy_(vector)
            self.filled += n

    def truncate(self, first: int) -> None:
        if first >= len(self.start):
            return
        cut = self.start[first]
        del self.start[first:]
        del self.length[first:]
        total = 0
        for k, size in enumerate(self.sizes):
            if cut <= total + size:
                del self.chunks[k + 1 :]
                del self.sizes[k + 1 :]
                self.filled = cut - total
                return
            total += size

    def host_data(self) -> Tensor:
        if not self.chunks:
            return torch.empty(0, dtype=F64)
        return torch.cat(self.chunks).to("cpu")  # one transfer

    @property
    def nbytes(self) -> int:
        # The values kept, like the store's rows (not the chunks' unused room).
        return sum(self.length) * 8 + len(self.start) * 16


class VectorRows:
    """The vectors of one `PerAxis` statistic, one per row of a `StatsStore`, per device
    slot (the store's slot numbering); see the module docstring.

    Example:
        >>> rows = VectorRows()
        >>> rows.add(0, torch.tensor([1.0, 2.0], dtype=torch.float64))
        >>> rows.add(0, torch.empty(0, dtype=torch.float64))
        >>> [v.tolist() for v in rows.read([(0, 0), (0, 1)])]
        [[1.0, 2.0], []]
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[int, _HostVectors | _DeviceVectors] = {}

    def add(self, slot: int, vector: Tensor) -> None:
        """Append the vector (1-D float64, on the slot's device) of the next row of `slot`."""
        part = self._parts.get(slot)
        if part is None:
            device = vector.device
            part = self._parts[slot] = (
                _HostVectors() if device.type == "cpu" else _DeviceVectors(device)
            )
        part.add(vector)

    def add_host(self, slot: int, lengths: Sequence[int], data: bytes) -> None:
        """Append rows read back from a recording: their lengths and their values (float64
        bytes, the vectors one after the other, `sum(lengths)` of them)."""
        part = self._parts.get(slot)
        if part is None:
            part = self._parts[slot] = _HostVectors()
        assert isinstance(part, _HostVectors)
        start = len(part.data)
        for n in lengths:
            part.start.append(start)
            part.length.append(n)
            start += n
        part.data.frombytes(data)

    def rows(self, slot: int) -> int:
        """How many rows `slot` holds."""
        part = self._parts.get(slot)
        return 0 if part is None else len(part.start)

    def truncate(self, slot: int, first: int) -> None:
        """Drop the rows of `slot` from `first` on."""
        part = self._parts.get(slot)
        if part is not None:
            part.truncate(first)

    def read(self, where: Sequence[tuple[int, int]]) -> list[Tensor]:
        """The vectors at `(slot, row)` pairs, as float64 CPU tensors, with one transfer
        per device."""
        data = {slot: part.host_data() for slot, part in self._parts.items()}
        out = []
        for slot, row in where:
            part = self._parts.get(slot)
            if part is None or row >= len(part.start):
                out.append(torch.empty(0, dtype=F64))
                continue
            start, n = part.start[row], part.length[row]
            out.append(data[slot][start : start + n])
        return out

    def get(self, slot: int, row: int) -> Tensor:
        """The vector of one row, on its device (an empty one when none was kept)."""
        part = self._parts.get(slot)
        if part is None or row >= len(part.start):
            return torch.empty(0, dtype=F64)
        start, n = part.start[row], part.length[row]
        if isinstance(part, _HostVectors):
            return part.host_data()[start : start + n].clone()
        position = 0
        for chunk, size in zip(part.chunks, part.sizes, strict=True):
            if start < position + size or n == 0:
                return chunk[start - position : start - position + n]
            position += size
        return torch.empty(0, dtype=F64, device=part.device)

    @property
    def nbytes(self) -> int:
        """Bytes held (values, and two integers per row)."""
        return sum(p.nbytes for p in self._parts.values())

    def clear(self) -> None:
        """Forget every row."""
        self._parts.clear()
