"""The public surface, listed: every public module and the names its `__all__` exports.

A public module is one whose dotted path has no `_`-prefixed part. Adding or removing a
public name fails `test_the_public_names_are_the_listed_ones` until `PUBLIC` is edited, so
that a new public name is a decision, not a side effect. Each public function and class
carries a docstring with an example that runs (the doctests run with the suite); a constant
or a typing alias, which cannot carry a docstring, is described in its module's docstring.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import tensor_tracker

MAX_PUBLIC_NAMES = 150

PUBLIC: dict[str, list[str]] = {
    "tensor_tracker": [
        "AutogradGraph",
        "Cause",
        "Comparison",
        "CopyValue",
        "Diagnosis",
        "Divergence",
        "Event",
        "Explanation",
        "Finding",
        "GraphView",
        "Kind",
        "LogEntry",
        "MemoryBudgetError",
        "ModuleCall",
        "ModuleGraph",
        "NonFinite",
        "SampleStats",
        "SampleValues",
        "Stash",
        "StashFn",
        "StashValueFn",
        "Stats",
        "Summary",
        "Tracker",
        "Unrecorded",
        "autograd_graph",
        "channel_table",
        "compare",
        "compare_models",
        "default_stash",
        "default_stash_value",
        "diagnose",
        "diagnosis_stats",
        "errors",
        "explain_spike",
        "export",
        "first_nonfinite",
        "formats",
        "get_stash_fn",
        "graph_view",
        "integrations",
        "load",
        "module_graph",
        "outlier_channels",
        "plot",
        "report",
        "rmap_tensor",
        "sample_stats",
        "sample_values",
        "stash",
        "stats",
        "summary",
        "tap",
        "to_frame",
        "track",
        "widgets",
    ],
    "tensor_tracker.errors": [
        "ArgumentTypeError",
        "ArgumentValueError",
        "FileWriteError",
        "MemoryBudgetError",
        "MissingExtraError",
        "NonFiniteError",
        "NotRecordedError",
        "RecordingError",
        "TensorTrackerError",
        "TrackerStateError",
    ],
    "tensor_tracker.export": [
        "GraphView",
        "graph_view",
        "report",
        "tensorboard_tag",
        "to_tensorboard",
        "to_wandb",
    ],
    "tensor_tracker.integrations": ["hf_trainer_callback", "lightning_callback"],
    "tensor_tracker.integrations.hf": ["hf_trainer_callback"],
    "tensor_tracker.integrations.lightning": ["lightning_callback"],
    "tensor_tracker.plot": [
        "DEFAULT_FORMATS",
        "MAX_HEIGHT",
        "MAX_TOKENS",
        "autograd_graph",
        "channel_map",
        "compare",
        "default_layers",
        "histogram",
        "histogram_heatmap",
        "history",
        "module_graph",
        "sample_plot",
        "scale_plot",
        "spike_plot",
        "umap_plot",
    ],
    "tensor_tracker.stats": [
        "ATTENTION_NAMES",
        "AttentionLogits",
        "BLOCK_NAMES",
        "Blocks",
        "DEFAULT",
        "EXP_HIST",
        "Histogram",
        "Layout",
        "NAMES",
        "PerAxis",
        "Spec",
        "Statistic",
        "Stats",
        "StatsFn",
        "attention_logits",
        "blocks",
        "channel_dim",
        "combine",
        "compute",
        "formats",
        "health",
        "histogram",
        "inexact_names",
        "parse",
        "per_channel",
        "per_sample",
        "stats_table",
    ],
    "tensor_tracker.stats.formats": ["BLOCK_FORMATS", "BlockFormat", "FORMATS", "Format"],
    "tensor_tracker.widgets": [
        "histogram_viewer",
        "history_viewer",
        "live_view",
        "scale_viewer",
        "umap_viewer",
    ],
}


def public_modules() -> dict[str, ModuleType]:
    """Every module of the package whose dotted path has no `_`-prefixed part, by name."""
    names = [tensor_tracker.__name__] + [
        info.name
        for info in pkgutil.walk_packages(tensor_tracker.__path__, tensor_tracker.__name__ + ".")
    ]
    return {
        name: importlib.import_module(name)
        for name in names
        if not any(part.startswith("_") for part in name.split("."))
    }


def exported(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} is public but has no __all__: give it one"
    return sorted(names)


def executed_examples(doc: str) -> list[doctest.Example]:
    """The `>>>` examples of `doc` that the doctest run executes (not `+SKIP`ped)."""
    examples = doctest.DocTestParser().get_examples(doc)
    return [example for example in examples if not example.options.get(doctest.SKIP)]


def test_the_public_names_are_the_listed_ones() -> None:
    found = {name: exported(module) for name, module in public_modules().items()}
    listed = {name: sorted(names) for name, names in PUBLIC.items()}
    found_names = {f"{m}.{n}" for m, names in found.items() for n in names}
    listed_names = {f"{m}.{n}" for m, names in listed.items() for n in names}
    added, removed = sorted(found_names - listed_names), sorted(listed_names - found_names)
    assert found == listed, (
        f"public names added: {added}, removed: {removed}; a new public name is a decision: "
        "add it to PUBLIC in tests/test_public_api.py (and drop the names that are gone)"
    )


def test_the_public_surface_is_small() -> None:
    total = sum(len(exported(module)) for module in public_modules().values())
    assert total <= MAX_PUBLIC_NAMES, f"{total} public names, more than {MAX_PUBLIC_NAMES}"


def test_every_public_name_is_documented_with_an_example() -> None:
    missing = []
    for name, module in public_modules().items():
        if not (module.__doc__ or "").strip():
            missing.append(f"{name}: no module docstring")
        for attr in exported(module):
            obj = getattr(module, attr)
            where = f"{name}.{attr}"
            if inspect.ismodule(obj):
                continue  # a public module itself, checked as one
            if inspect.isclass(obj) or inspect.isroutine(obj):
                # A class's own docstring, not one inherited from its base (the error classes).
                doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
                if not doc:
                    missing.append(f"{where}: no docstring")
                elif not executed_examples(doc):
                    missing.append(f"{where}: no `>>>` example that runs (not +SKIP)")
            elif not re.search(rf"\b{re.escape(attr)}\b", module.__doc__ or ""):
                # Constants and typing aliases cannot carry a docstring of their own.
                missing.append(f"{where}: a constant or alias not described in {name}'s docstring")
    assert not missing, "\n".join(missing)
