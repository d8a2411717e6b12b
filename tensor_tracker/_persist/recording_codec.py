"""How a recording encodes what it holds (the format is described in
`tensor_tracker._persist.recording`): its file names, the statistics spec as JSON, values as
JSON with tensors in a side table, the Arrow schema of each blocks file, the bytes the
metadata's checksum covers, and module classes from their names.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import SUPPORTED_NODES

from .._core.records import Unrecorded
from .._core.stash_fns import IMMUTABLE
from .._core.structure import walks_attributes
from .._data.frame import type_name
from ..errors import ArgumentValueError, RecordingError, TensorTrackerError
from ..stats import Histogram, Stats, StatsFn
from ..stats._spec import AttentionLogits, Blocks, CustomName, PerAxis, Statistic

__all__ = [
    "JOURNAL",
    "LOG",
    "MAX_BINS",
    "META",
    "RECORDS",
    "RUN_KEY",
    "SITES",
    "TENSORS",
    "Encoder",
    "canonical",
    "decode",
    "module_class",
    "schemas",
    "spec_from_json",
    "spec_to_json",
]

META = "recording.json"
JOURNAL = "journal"
SITES = "sites.blocks"
RECORDS = "records.blocks"
LOG = "log.blocks"
TENSORS = "tensors"
RUN_KEY = b"tensor_tracker.run"
MAX_BINS = 1 << 20  # histogram bins a recording may declare, in all (8 MiB per raw vector)


# -- the statistics spec as JSON ---------------------------------------------------------


def spec_to_json(
    spec: Sequence[str | Histogram | Blocks | CustomName | PerAxis | AttentionLogits],
) -> list[Any]:
    out: list[Any] = []
    for item in spec:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, CustomName):
            out.append({"custom": item.name})
        elif isinstance(item, Blocks):
            out.append({"blocks": dataclasses.asdict(item)})
        elif isinstance(item, PerAxis):
            out.append({"per_axis": dataclasses.asdict(item)})
        elif isinstance(item, AttentionLogits):
            out.append({"attention_logits": dataclasses.asdict(item)})
        else:
            out.append({"histogram": dataclasses.asdict(item)})
    return out


def spec_from_json(items: Any) -> StatsFn:
    """The `StatsFn` of a spec read from JSON (checked: a `RecordingError` says what is
    wrong, before anything is sized by it)."""
    if not isinstance(items, list) or not items:
        raise RecordingError(f"the statistics spec is not a list of statistics: {items!r}"[:200])
    spec: list[Any] = []
    bins_left = MAX_BINS  # in all: each histogram's bins are allocated for every record
    try:
        for item in items:
            if isinstance(item, str):
                spec.append(item)
            elif isinstance(item, dict) and isinstance(item.get("custom"), str):
                spec.append(Statistic(item["custom"], _not_recomputable))
            elif isinstance(item, dict) and isinstance(item.get("histogram"), dict):
                fields = dict(item["histogram"])
                bins = fields.get("bins")
                if not isinstance(bins, int) or not 0 < bins <= bins_left:
                    raise RecordingError(
                        f"a histogram of {bins!r} bins ({MAX_BINS} in all at most)"
                    )
                bins_left -= bins
                if not isinstance(fields.get("range"), (list, tuple)):
                    raise RecordingError(f"a histogram range of {fields.get('range')!r}")
                fields["range"] = tuple(fields["range"])
                spec.append(Histogram(**fields))
            elif isinstance(item, dict) and isinstance(item.get("blocks"), dict):
                fields = dict(item["blocks"])
                if not isinstance(fields.get("stats"), (list, tuple)):
                    raise RecordingError(f"block statistics {fields.get('stats')!r}"[:200])
                fields["stats"] = tuple(fields["stats"])
                spec.append(Blocks(**fields))  # which checks every field as blocks() does
            elif isinstance(item, dict) and isinstance(item.get("per_axis"), dict):
                spec.append(PerAxis(**item["per_axis"]))  # which checks every field
            elif isinstance(item, dict) and isinstance(item.get("attention_logits"), dict):
                spec.append(AttentionLogits(**item["attention_logits"]))  # which checks rows
            else:
                raise RecordingError(f"an unknown statistic {item!r}"[:200])
        return StatsFn(spec)
    except RecordingError as error:
        raise RecordingError(f"the statistics spec holds {error}") from None
    except (TensorTrackerError, TypeError, ValueError) as error:
        raise RecordingError(f"the statistics spec cannot be used: {error}"[:300]) from None


def _not_recomputable(tensor: Tensor) -> Tensor:
    raise TensorTrackerError(
        "a custom statistic of a loaded recording has no function to compute it again"
    )


# -- values as JSON (tensors in a side table) --------------------------------------------


class Encoder:
    """Turns one batch's object values into JSON text, collecting tensors by key."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tensors: dict[str, Tensor] = {}

    def encode(self, value: Any, where: str) -> str:
        return json.dumps(self._plain(value, where), allow_nan=True, separators=(",", ":"))

    def _plain(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value
        if isinstance(value, Tensor):
            key = f"{self.prefix}{len(self.tensors)}"
            # safetensors needs dense, contiguous CPU tensors that own their memory.
            self.tensors[key] = value.detach().to("cpu", copy=True).contiguous()
            return {"$tensor": key}
        if isinstance(value, Stats):
            if value.vectors:
                return {
                    "$stats": value._host_values(),
                    "numel": value.numel,
                    "vectors": [v.tolist() for v in value.vectors],
                }
            return {"$stats": value._host_values(), "numel": value.numel}
        if isinstance(value, Unrecorded):
            return {"$unrecorded": [value.type, value.reason]}
        # The plain values a stash keeps (see `Unrecorded`): torch's own types by name,
        # the others as their repr (loaded as that text; nothing is evaluated).
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return {"$torch": str(value)}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        numpy = sys.modules.get("numpy")
        plain = IMMUTABLE if numpy is None else (*IMMUTABLE, numpy.generic, numpy.ndarray)
        if isinstance(value, plain) and not isinstance(value, (tuple, list)):
            return {"$repr": repr(value)}
        if isinstance(value, tuple):  # namedtuples too: first_value unwraps them alike
            return {"$tuple": [self._plain(v, where) for v in value]}
        if isinstance(value, list):
            return [self._plain(v, where) for v in value]
        # The other containers the tracker walks (see `rmap_tensor`), stored as the dict
        # or list they hold: mappings, dataclasses, Hugging Face caches, pytree nodes.
        items: Any = None
        if isinstance(value, Mapping):
            items = list(value.items())
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
        elif walks_attributes(value):
            items = list(vars(value).items())
        elif type(value) in SUPPORTED_NODES:
            children = SUPPORTED_NODES[type(value)].flatten_fn(value)[0]
            return [self._plain(v, where) for v in children]
        if items is not None:
            return {"$dict": [[self._plain(k, where), self._plain(v, where)] for k, v in items]}
        raise ArgumentValueError(
            f"save: {where} holds a {type(value).__module__}.{type(value).__qualname__}, which "
            "cannot be saved without pickle; recordings hold tensors, statistics, numbers, "
            "strings, None, and tuples/lists/dicts of them (make stash_value= return those)"
        )


def decode(plain: Any, tensors: dict[str, Tensor], layout_fn: StatsFn | None) -> Any:
    """A value from its JSON form. Malformed input raises `RecordingError` (or `KeyError`,
    `TypeError`, `RuntimeError` from what it meets), which the reader reports naming the
    file and record."""
    if isinstance(plain, list):
        return [decode(v, tensors, layout_fn) for v in plain]
    if not isinstance(plain, dict):
        return plain
    if len(plain) == 1 and "$tensor" in plain:
        return tensors[plain["$tensor"]]
    if len(plain) == 1 and isinstance(plain.get("$tuple"), list):
        return tuple(decode(v, tensors, layout_fn) for v in plain["$tuple"])
    if len(plain) == 1 and isinstance(plain.get("$dict"), list):
        out = {}
        for key, value in plain["$dict"]:
            key = decode(key, tensors, layout_fn)
            hash(key)  # TypeError for a list key
            out[key] = decode(value, tensors, layout_fn)
        return out
    if len(plain) == 1 and "$unrecorded" in plain:
        kind, reason = plain["$unrecorded"]
        if not isinstance(kind, str) or not isinstance(reason, str):
            raise RecordingError("an $unrecorded value is not two strings")
        return Unrecorded(kind, reason)
    if len(plain) == 1 and isinstance(plain.get("$torch"), str):
        found = vars(torch).get(plain["$torch"].removeprefix("torch."))  # getattr may import
        kinds = (torch.dtype, torch.layout, torch.memory_format)
        return found if isinstance(found, kinds) else plain["$torch"]
    if len(plain) == 1 and isinstance(plain.get("$device"), str):
        return torch.device(plain["$device"])
    if len(plain) == 1 and isinstance(plain.get("$repr"), str):
        return plain["$repr"]
    if len(plain) in (2, 3) and isinstance(plain.get("$stats"), list):
        if layout_fn is None:
            raise RecordingError("statistics in a recording whose metadata names none")
        values, numel = plain["$stats"], plain["numel"]
        layout = layout_fn.layout
        if len(values) != layout.width or not all(isinstance(v, (int, float)) for v in values):
            raise RecordingError(f"statistics of {len(values)} numbers, not {layout.width}")
        if not isinstance(numel, int) or numel < 0:
            raise RecordingError(f"statistics of numel {numel!r}")
        vectors = plain.get("vectors", []) if len(plain) == 3 else []
        if (
            not isinstance(vectors, list)
            or len(vectors) != len(layout.vectors)
            or not all(isinstance(v, list) and len(v) <= numel for v in vectors)
            or not all(isinstance(x, (int, float)) for v in vectors for x in v)
        ):
            raise RecordingError(
                f"statistics with {len(layout.vectors)} vectors of at most numel values each "
                "expected"
            )
        return Stats._of_floats(
            layout,
            [float(v) for v in values],
            numel,
            tuple(torch.tensor(v, dtype=torch.float64) for v in vectors),
        )
    raise RecordingError(f"unknown value {plain!r}"[:200])


def schemas(pa: Any, width: int, run: str, vectors: int = 0) -> dict[str, Any]:
    """The schema of each blocks file (its metadata holds the run id); records of a
    recording with `vectors` statistics per channel or per sample have a `vectors` column
    too (and only then: other recordings stay as they were)."""
    raw_type = pa.list_(pa.float64(), width) if width else pa.list_(pa.float64())
    extra = [("vectors", pa.list_(pa.list_(pa.float64())))] if vectors else []
    metadata = {RUN_KEY: run.encode()}
    string = pa.string()
    return {
        SITES: pa.schema(
            [
                ("site", pa.int32()),
                ("name", string),
                ("type", string),
                ("kind", string),
                ("attr", string),
            ],
            metadata=metadata,
        ),
        RECORDS: pa.schema(
            [
                ("step", pa.int64()),
                ("call", pa.int32()),
                ("site", pa.int32()),
                ("flags", pa.uint8()),
                ("numel", pa.int64()),
                ("raw", raw_type),
                ("value", string),
                ("tensors", string),
                *extra,
            ],
            metadata=metadata,
        ),
        LOG: pa.schema(
            [("step", pa.int64()), ("name", string), ("value", pa.float64()), ("text", string)],
            metadata=metadata,
        ),
    }


def canonical(meta: Mapping[str, Any]) -> bytes:
    """The bytes `recording.json`'s checksum is the CRC32 of: every field but it."""
    rest = {k: v for k, v in meta.items() if k != "checksum"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


_CLASSES: dict[str, type[nn.Module]] = {}


def _imported(name: str) -> Any:
    """What the dotted `name` names inside a module already imported (the longest such
    prefix; a nested class too), else `None`. Looked up in the namespaces themselves: a
    `getattr` on a module may import (torch's lazy submodules: `torch._dynamo`,
    `torch.onnx`, seconds each)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found: Any = sys.modules.get(".".join(parts[:cut]))
        if found is None:
            continue
        for part in parts[cut:]:
            found = getattr(found, "__dict__", {}).get(part)
        return found
    return None


def module_class(name: str) -> type[nn.Module]:
    """The class a `type` name stands for: the real class when its module is already
    imported (nothing is imported or executed to find it), else a stand-in subclass of
    `nn.Module` with that module and qualified name, so `type_name` gives `name` back."""
    cls = _CLASSES.get(name)
    if cls is not None:
        return cls
    module_name, _, qualname = name.rpartition(".")
    found = _imported(name)
    if isinstance(found, type) and issubclass(found, nn.Module) and type_name(found) == name:
        cls = found
    else:
        cls = type(qualname.rsplit(".", 1)[-1], (nn.Module,), {"__module__": module_name})
        cls.__qualname__ = qualname
    _CLASSES[name] = cls
    return cls
