"""The package's layers import downwards only: recording (core) <- statistics (stats) <- data
<- renderers (plot, widgets), with the entry points (api, __init__) on top. Checked by
parsing every import statement, including those inside functions and TYPE_CHECKING blocks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tensor_tracker"

# The layers from the bottom up; a module may import its own layer and those below it.
LAYERS = ("util", "core", "stats", "data", "plot", "widgets", "export", "integrations", "top")
UTIL = {"errors", "_validate", "_optional", "_torch_compat"}
OPTIONAL_RENDERING = ("matplotlib", "ipywidgets", "IPython")

# Besides the layer order: what each layer may not import from outside the package.
FORBIDDEN_EXTERNAL = {
    "util": ("pandas", "numpy", "umap", *OPTIONAL_RENDERING),
    "core": ("pandas", "umap", *OPTIONAL_RENDERING),
    "stats": ("pandas", "umap", *OPTIONAL_RENDERING),
    "data": OPTIONAL_RENDERING,
    "plot": ("ipywidgets",),
}
# Sideways imports between layers of the same height are not allowed either.
SIBLINGS = {
    "plot": {"widgets", "export", "integrations"},
    "export": {"plot", "widgets", "integrations"},
    "integrations": {"plot", "widgets", "export"},
}


def layer_of(module: str) -> str:
    """The layer of a dotted module name inside the package ("tensor_tracker.x.y")."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in {"api", "__init__", "__main__"}:
        return "top"
    if parts[0] in UTIL:
        return "util"
    return parts[0]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str | None = None) -> list[str]:
    """Every module `path` (named `name`) imports, relative imports made absolute."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if node.module:
                found.append(target)
            else:  # `from .. import plot` imports the submodule plot
                found += [f"{target}.{alias.name}" for alias in node.names]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_layer() -> None:
    assert {layer_of(module_name(p)) for p in MODULES} <= set(LAYERS)


def upward_imports(path: Path, name: str) -> list[str]:
    layer = layer_of(name)
    height = LAYERS.index(layer)
    wrong = []
    for target in imports(path, name):
        root = target.split(".")[0]
        if root == "tensor_tracker":
            other = layer_of(target)
            if LAYERS.index(other) > height or other in SIBLINGS.get(layer, ()):
                wrong.append(f"{target} ({other})")
        elif root in FORBIDDEN_EXTERNAL.get(layer, ()):
            wrong.append(f"{target} (optional rendering/data library)")
    return wrong


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_point_down_only(path: Path) -> None:
    name = module_name(path)
    wrong = upward_imports(path, name)
    assert not wrong, f"{name} ({layer_of(name)}) imports upwards: {wrong}"


def test_the_check_sees_upward_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..stats import parse\n"
        "from .. import plot\n"
        "from .memo import RecentTensors\n"
        "def f():\n"
        "    import matplotlib.pyplot\n"
        "    from tensor_tracker.data.frame import to_frame\n"
    )
    wrong = upward_imports(probe, "tensor_tracker.core.probe")
    assert wrong == [
        "tensor_tracker.stats (stats)",
        "tensor_tracker.plot (plot)",
        "matplotlib.pyplot (optional rendering/data library)",
        "tensor_tracker.data.frame (data)",
    ]
