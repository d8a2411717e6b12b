"""Depth of a model from its module names: repeated blocks, the role of a module inside
its block, and leaf modules.

A deep model repeats a block: `encoder.layer.0` … `encoder.layer.11` in BERT, `layer1.0`,
`layer1.1`, `layer2.0` … in a ResNet. Figures of such a model read best with one position
per block along the depth and one series per *role* inside the block
(`attention.self.query`, `intermediate.dense`, …) rather than one tick per module. The
modules outside every block (embeddings, a head) keep their own positions, at the ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .select import display_name

__all__ = ["BLOCK_ROLE", "Depth", "depth_layout", "informative_role", "leaf_names"]

BLOCK_ROLE = "(block)"
"""The role of a module that is a whole block by itself (e.g. each layer of an `nn.Sequential`)."""


@dataclass(frozen=True)
class Depth:
    """Module names laid out along the depth of a model.

    Attributes:
        slots: one label per position along the depth, in execution order: a block
            (`"encoder.layer.3"`) or a module outside every block (`"pooler.dense"`).
        is_block: for each slot, whether it is a repeated block.
        roles: the roles found inside blocks, in execution order (`"attention.self.query"`,
            …; `BLOCK_ROLE` for a block that is a single module).
        place: module name -> (slot index, role), the role `None` for a module outside
            every block.
    """

    slots: tuple[str, ...]
    is_block: tuple[bool, ...]
    roles: tuple[str, ...]
    place: dict[str, tuple[int, str | None]] = field(repr=False)

    @property
    def grouped(self) -> bool:
        """Whether any block was found (otherwise there is one slot per module)."""
        return any(self.is_block)

    def members(self, role: str) -> list[str]:
        """The modules of `role` in every block, in execution order."""
        return [name for name, (_, r) in self.place.items() if r == role]


def _containers(names: Sequence[str]) -> set[tuple[str, ...]]:
    """The name prefixes followed by at least two different integer components: the
    containers of repeated blocks (an `nn.ModuleList`/`nn.Sequential` of blocks)."""
    indices: dict[tuple[str, ...], set[str]] = {}
    for name in names:
        parts = name.split(".") if name else []
        for i, part in enumerate(parts):
            if part.isdigit():
                indices.setdefault(tuple(parts[:i]), set()).add(part)
    return {prefix for prefix, seen in indices.items() if len(seen) >= 2}


def depth_layout(names: Sequence[str]) -> Depth:
    """Group module names (in execution order) into repeated blocks and roles.

    A module belongs to the block named by its outermost integer component whose container
    holds at least two blocks: `encoder.layer.3.attention.self.query` is role
    `attention.self.query` of block `encoder.layer.3`; `layer2.0.downsample.1` is role
    `downsample.1` of block `layer2.0`. Other modules are slots of their own.

    Example:
        >>> d = depth_layout(["emb", "layers.0.fc", "layers.0.act", "layers.1.fc", "layers.1.act", "head"])
        >>> d.slots, d.roles
        (('emb', 'layers.0', 'layers.1', 'head'), ('fc', 'act'))
    """
    containers = _containers(names)
    slots: dict[str, tuple[int, bool]] = {}
    roles: dict[str, None] = {}
    place: dict[str, tuple[int, str | None]] = {}
    for name in names:
        parts = name.split(".") if name else []
        block = next(
            (i for i, p in enumerate(parts) if p.isdigit() and tuple(parts[:i]) in containers),
            None,
        )
        if block is None:
            label, role = display_name(name), None
        else:
            label = ".".join(parts[: block + 1])
            role = ".".join(parts[block + 1 :]) or BLOCK_ROLE
            roles.setdefault(role, None)
        index = slots.setdefault(label, (len(slots), block is not None))[0]
        place[name] = (index, role)
    return Depth(tuple(slots), tuple(b for _, b in slots.values()), tuple(roles), place)


def leaf_names(names: Iterable[str]) -> list[str]:
    """The names (order kept) that are not a prefix of another name: the modules recorded
    without any recorded submodule. The root `""` is a leaf only when it is alone."""
    names = list(dict.fromkeys(names))
    parents: set[str] = set()
    for name in names:
        parts = name.split(".") if name else []
        parents.update(".".join(parts[:i]) for i in range(len(parts)))
    return [n for n in names if n not in parents]


_LEARNED = ("Linear", "Conv", "Embedding")
"""Module types whose outputs differ from block to block (a norm's outputs look alike)."""


def informative_role(depth: Depth, types: dict[str, str]) -> str | None:
    """For a model of repeated blocks, the role a figure opens on (`types`: module name to
    type name): the first whose modules are learned projections (a Linear, a convolution),
    else the first role with a module in two blocks or more; None without blocks. Block
    outputs after a norm look alike from block to block; projections do not.

    Example:
        >>> d = depth_layout(["layers.0.fc", "layers.0.norm", "layers.1.fc", "layers.1.norm"])
        >>> informative_role(d, {"layers.0.fc": "Linear", "layers.0.norm": "LayerNorm"})
        'fc'
    """
    if not depth.grouped:
        return None
    members: dict[str, list[str]] = {}
    for name, (_, role) in depth.place.items():
        if role is not None:
            members.setdefault(role, []).append(name)
    repeated = [r for r in depth.roles if len(members.get(r, ())) >= 2]
    learned = [r for r in repeated if any(k in types.get(members[r][0], "") for k in _LEARNED)]
    chosen = learned or repeated
    return chosen[0] if chosen else None
