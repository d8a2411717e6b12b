"""The package's layers import downwards only: recording (core) <- statistics (stats) <- data
<- persistence and probes (persist, probe) <- renderers (plot, widgets, export), with the
entry points (api, __init__) on top; and no two modules of one layer import each other,
directly or round a longer loop. Checked by parsing every import statement, including those
inside functions and TYPE_CHECKING blocks (direction), or those outside TYPE_CHECKING
blocks (cycles; see `runtime_imports`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tensor_tracker"

# The layers from the bottom up; a module may import its own layer and those below it.
LAYERS = (
    "util",
    "core",
    "stats",
    "data",
    "persist",
    "probe",
    "plot",
    "widgets",
    "export",
    "integrations",
    "top",
)
UTIL = {"errors", "_files", "_validate", "_optional", "_torch_compat"}
OPTIONAL_RENDERING = ("matplotlib", "ipywidgets", "IPython")

# Besides the layer order: what each layer may not import from outside the package.
FORBIDDEN_EXTERNAL = {
    "util": ("pandas", "numpy", "umap", *OPTIONAL_RENDERING),
    "core": ("pandas", "umap", *OPTIONAL_RENDERING),
    "stats": ("pandas", "umap", *OPTIONAL_RENDERING),
    "data": OPTIONAL_RENDERING,
    "persist": OPTIONAL_RENDERING,
    "probe": OPTIONAL_RENDERING,
    "plot": ("ipywidgets",),
}
# Sideways imports between layers of the same height are not allowed either.
SIBLINGS = {
    "persist": {"probe"},
    "probe": {"persist"},
    "plot": {"widgets", "export", "integrations"},
    "export": {"plot", "widgets", "integrations"},
    "integrations": {"plot", "widgets", "export"},
}


def layer_of(module: str) -> str:
    """The layer of a dotted module name inside the package ("tensor_tracker.x.y")."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in {"_api", "__init__", "__main__"}:
        return "top"
    if parts[0] in UTIL:
        return "util"
    return parts[0].removeprefix("_")  # the private packages: _core is the core layer


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.AST) -> bool:
    """Whether `node` is an `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`) block."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def walk(node: ast.AST, skip_type_checking: bool) -> Iterator[ast.AST]:
    """Every node under `node` in source order, leaving out the bodies of TYPE_CHECKING
    blocks if asked."""
    yield node
    if skip_type_checking and is_type_checking(node):
        assert isinstance(node, ast.If)
        children: list[ast.AST] = list(node.orelse)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        yield from walk(child, skip_type_checking)


def imports(path: Path, name: str | None = None, runtime_only: bool = False) -> list[str]:
    """Every module `path` (named `name`) imports, relative imports made absolute; with
    `runtime_only`, those inside `if TYPE_CHECKING:` blocks left out."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[str] = []
    for node in walk(ast.parse(path.read_text(), str(path)), runtime_only):
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
        "    from tensor_tracker._data.frame import to_frame\n"
    )
    wrong = upward_imports(probe, "tensor_tracker._core.probe")
    assert wrong == [
        "tensor_tracker.stats (stats)",
        "tensor_tracker.plot (plot)",
        "matplotlib.pyplot (optional rendering/data library)",
        "tensor_tracker._data.frame (data)",
    ]


# Cycles. An import inside `if TYPE_CHECKING:` never runs (annotations are strings under
# `from __future__ import annotations`), so it cannot meet a half-initialised module; it
# lets two modules name each other's types (a `Layout` holds the `Histogram`s that
# `spec` defines, while `spec` builds layouts) without one import order depending on the
# other. Those links are left out; every other import, at module level or inside a
# function, is a runtime link and may not close a loop inside a layer.
NAMES = {module_name(p): p for p in MODULES}


def resolve(target: str) -> str | None:
    """The package module an import of `target` runs (`a.b.name` -> `a.b` when `name` is
    not a module), or None outside the package."""
    while target and target not in NAMES:
        target = target.rpartition(".")[0]
    return target or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Runtime imports between the package's modules, each kept inside its own layer."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {resolve(t) for t in imports(path, name, runtime_only=True)}
        graph[name] = {t for t in targets if t and t != name and layer_of(t) == layer_of(name)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_inside_a_layer() -> None:
    # A package's `__init__` imports its modules to re-export them; a module importing its
    # own package (`from . import x`, `from ..stats import y` inside stats) would close a
    # loop through it, so those links count too.
    found = cycles(import_graph(NAMES))
    assert not found, f"import cycles inside a layer: {found}"


def test_the_check_sees_cycles(tmp_path: Path) -> None:
    package = tmp_path / "tensor_tracker" / "stats"
    package.mkdir(parents=True)
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .b import x\n"
        "if TYPE_CHECKING:\n"
        "    from .c import z\n"
    )
    (package / "b.py").write_text("def f():\n    from .a import y\n")
    (package / "c.py").write_text("from .a import y\n")
    modules = {f"tensor_tracker.stats.{p.stem}": p for p in sorted(package.glob("*.py"))}
    NAMES.update(modules)
    try:
        graph = import_graph(modules)
    finally:
        for name in modules:
            del NAMES[name]
    assert graph == {
        "tensor_tracker.stats.a": {"tensor_tracker.stats.b"},
        "tensor_tracker.stats.b": {"tensor_tracker.stats.a"},
        "tensor_tracker.stats.c": {"tensor_tracker.stats.a"},
    }
    assert cycles(graph) == [["tensor_tracker.stats.a", "tensor_tracker.stats.b"]]


def private_imports(path: Path) -> list[str]:
    """Names starting with `_` that `path` imports from a module of the package. A private
    module (`from . import _graph`) is its package's own business and counts too; a
    private name is its module's own business."""
    wrong = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").startswith("tensor_tracker")
        ):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    wrong.append(f"{'.' * node.level}{node.module or ''} {alias.name}")
    return wrong


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_imports_private_names(path: Path) -> None:
    wrong = private_imports(path)
    assert not wrong, f"{module_name(path)} imports private names: {wrong}"


def test_the_check_sees_private_names(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from ._graph import draw\nfrom .frame import _first, public\n")
    assert private_imports(probe) == [".frame _first"]
