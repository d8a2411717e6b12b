"""Developer tool for the notebooks in `doc/` (used by `./dev`; not part of the API).

    python -m tools.notebooks strip doc/*.ipynb           # remove outputs, in place
    python -m tools.notebooks check doc/*.ipynb           # fail if any has outputs
    python -m tools.notebooks render --out DIR doc/*.ipynb  # execute, write HTML
    python -m tools.notebooks render --out DIR --executed RUN doc/*.ipynb  # HTML of copies

Committed notebooks carry no outputs, no execution counts and no volatile metadata (widget
state, execution timestamps, the Python version), so that diffs show only what people wrote.
`execute` runs a notebook top to bottom in a fresh `python3` kernel, as the tests and
`./dev doc` do. CI executes each notebook once: the notebook test keeps what it executed in
`$TT_EXECUTED_NOTEBOOKS` (`save_executed`) and `./dev ci` renders the pages from those copies
(`render --executed`). nbformat, nbclient and nbconvert are imported only when needed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tools import widget_scripts

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = [
    "EXECUTED_ENV",
    "NotebookError",
    "check",
    "execute",
    "load_executed",
    "main",
    "render",
    "save_executed",
    "strip",
    "strip_notebook",
]

KERNEL_NAME = "python3"
"""The Jupyter kernel that executes the notebooks (`./dev setup` installs it into `.venv`)."""

CELL_TIMEOUT_S = 600
"""Longest a single cell may run before `execute` gives up."""

KERNEL_ENV = {
    # The notebooks load models that ship inside packages: never reach for the network.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # Headless: figures become PNG outputs, no GUI window. (MPLBACKEND=Agg would also be
    # headless, but ipykernel then keeps it and figures no longer show up in the outputs.)
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}
"""Environment variables set for the kernel on top of the current environment."""

EXECUTED_ENV = "TT_EXECUTED_NOTEBOOKS"
"""When set, the notebook test keeps each notebook it executed in this folder (see
`save_executed`), for `render --executed` to turn into pages without executing it again."""

VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")
"""Cell metadata that records a run or the UI state rather than content."""

VOLATILE_NOTEBOOK_METADATA = ("widgets", "papermill", "vscode")
"""Notebook metadata that records a run (e.g. ipywidgets' state) rather than content."""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class NotebookError(RuntimeError):
    """A notebook could not be read, executed or rendered; the message says where and why."""


# -- reading and writing -----------------------------------------------------------------


def _read(path: Path) -> tuple[str, NotebookNode]:
    import nbformat

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise NotebookError(f"{path}: cannot read it: {error}") from error
    try:
        reads = cast("Callable[..., NotebookNode]", nbformat.reads)  # untyped in nbformat
        notebook = reads(text, as_version=4)
    except Exception as error:  # nbformat raises several kinds for malformed files
        raise NotebookError(f"{path}: not a valid notebook: {error}") from error
    return text, notebook


def _dumps(notebook: NotebookNode) -> str:
    import nbformat

    writes = cast("Callable[..., str]", nbformat.writes)  # untyped in nbformat
    text = writes(notebook, version=4)
    return text if text.endswith("\n") else text + "\n"


# -- strip / check -------------------------------------------------------------------------


def strip_notebook(notebook: NotebookNode) -> NotebookNode:
    """Remove outputs, execution counts and volatile metadata from `notebook`, in place.

    Returns:
        The same notebook, for chaining.
    """
    import nbformat

    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    for key in VOLATILE_NOTEBOOK_METADATA:
        notebook.metadata.pop(key, None)
    language_info = notebook.metadata.get("language_info")
    if isinstance(language_info, dict):
        language_info.pop("version", None)  # the Python that last ran it
    nbformat.validate(notebook)
    return notebook


def _problems(notebook: NotebookNode) -> list[str]:
    """What `strip_notebook` would remove, one line per cell (1-based, as Jupyter counts)."""
    problems = []
    for index, cell in enumerate(notebook.cells, start=1):
        found = []
        if cell.cell_type == "code":
            if cell.get("outputs"):
                found.append(f"{len(cell.outputs)} output(s)")
            if cell.get("execution_count") is not None:
                found.append(f"execution count {cell.execution_count}")
        volatile = [key for key in VOLATILE_CELL_METADATA if key in cell.metadata]
        if volatile:
            found.append(f"metadata {', '.join(volatile)}")
        if found:
            first_line = next(iter(cell.source.splitlines()), "").strip()
            found.append(f"starts {first_line[:60]!r}")
            problems.append(f"cell {index}: " + "; ".join(found))
    volatile = [key for key in VOLATILE_NOTEBOOK_METADATA if key in notebook.metadata]
    language_info = notebook.metadata.get("language_info")
    if isinstance(language_info, dict) and "version" in language_info:
        volatile.append("language_info.version")
    if volatile:
        problems.append(f"notebook metadata: {', '.join(volatile)}")
    return problems


def strip(paths: Sequence[str | Path]) -> list[Path]:
    """Strip each notebook in place (see `strip_notebook`); write only files that change.

    Returns:
        The notebooks that were rewritten.
    """
    changed = []
    for path in map(Path, paths):
        text, notebook = _read(path)
        new_text = _dumps(strip_notebook(notebook))
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")
            changed.append(path)
    return changed


def check(paths: Sequence[str | Path]) -> dict[Path, list[str]]:
    """Find notebooks that carry outputs, execution counts or volatile metadata.

    Returns:
        For each offending notebook, one line per offending cell; empty when all are clean.
    """
    report = {}
    for path in map(Path, paths):
        _, notebook = _read(path)
        problems = _problems(notebook)
        if problems:
            report[path] = problems
    return report


# -- execute / render ----------------------------------------------------------------------


def _check_kernel(kernel_name: str) -> None:
    """Fail early, and clearly, when the kernel is missing."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        raise NotebookError(
            f"no Jupyter kernel named {kernel_name!r}; install one for this Python with "
            f"`{sys.executable} -m ipykernel install --sys-prefix --name {kernel_name}` "
            "(./dev setup does this)"
        ) from None
    executable = spec.argv[0] if spec.argv else ""
    if os.path.isabs(executable) and Path(executable).resolve() != Path(sys.executable).resolve():
        print(
            f"note: kernel {kernel_name!r} runs {executable}, not this Python "
            f"({sys.executable}); the notebooks need tensor_tracker importable there",
            file=sys.stderr,
        )


def _failed_cell(notebook: NotebookNode) -> tuple[int, NotebookNode] | None:
    for index, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type == "code" and any(o.output_type == "error" for o in cell.outputs):
            return index, cell
    return None


def execute(
    path: str | Path,
    timeout: int = CELL_TIMEOUT_S,
    kernel_name: str = KERNEL_NAME,
) -> NotebookNode:
    """Execute the notebook at `path` top to bottom in a fresh kernel and return it with
    its outputs (the file is not modified).

    The kernel runs in the notebook's folder with `KERNEL_ENV` added to the environment.

    Args:
        path: the `.ipynb` file.
        timeout: seconds each cell may take.
        kernel_name: the Jupyter kernel to use.

    Raises:
        NotebookError: the notebook could not be read, or a cell raised or timed out; the
            message names the notebook and the cell, and includes the traceback.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    path = Path(path)
    _, notebook = _read(path)
    _check_kernel(kernel_name)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.resolve().parent)}},
    )
    try:
        client.execute(env={**os.environ, **KERNEL_ENV})
    except CellExecutionError as error:
        failed = _failed_cell(notebook)
        where = f"cell {failed[0]}" if failed else "a cell"
        raise NotebookError(
            f"{path}: {where} raised an error.\n{_ANSI.sub('', str(error))}"
        ) from None
    except CellTimeoutError as error:
        raise NotebookError(
            f"{path}: a cell ran longer than {timeout} s: {_ANSI.sub('', str(error))}"
        ) from None
    except DeadKernelError as error:
        raise NotebookError(f"{path}: the kernel died: {error}") from None
    return notebook


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise NotebookError(f"{path}: cannot read it: {error}") from error


def save_executed(notebook: NotebookNode, source: str | Path, folder: str | Path) -> Path:
    """Write `notebook`, executed from the file `source`, as `folder/<source's name>`, with
    the digest of `source` in its metadata, for `load_executed` to check.

    Returns:
        The file written.
    """
    source, folder = Path(source), Path(folder)
    notebook.metadata["tensor_tracker"] = {"source_sha256": _digest(source)}
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    target.write_text(_dumps(notebook), encoding="utf-8")
    return target


def load_executed(source: str | Path, folder: str | Path) -> NotebookNode:
    """The copy of `source` that `save_executed` wrote in `folder`.

    Raises:
        NotebookError: there is no copy, or it was executed from another version of
            `source` (the notebook changed since the tests ran it).
    """
    source, folder = Path(source), Path(folder)
    copy = folder / source.name
    if not copy.exists():
        raise NotebookError(
            f"{source}: no executed copy in {folder}; run tests/tools/test_notebooks.py with "
            f"{EXECUTED_ENV}={folder} first (./dev ci does), or render without --executed"
        )
    _, notebook = _read(copy)
    recorded = notebook.metadata.get("tensor_tracker", {}).get("source_sha256")
    if recorded != _digest(source):
        raise NotebookError(
            f"{copy} was executed from another version of {source}; run the notebook test "
            "again, or render without --executed"
        )
    return notebook


def render(
    paths: Sequence[str | Path],
    out: str | Path,
    timeout: int = CELL_TIMEOUT_S,
    executed: str | Path | None = None,
) -> list[Path]:
    """Execute each notebook (see `execute`) and write it as `out/<name>.html`.

    Args:
        paths: the `.ipynb` files.
        out: the folder for the pages.
        timeout: seconds each cell may take.
        executed: a folder where the tests kept the notebooks they executed (see
            `save_executed`): the pages show those outputs and nothing is executed again.

    Returns:
        The HTML files written.

    Raises:
        NotebookError: a notebook failed, or has no up-to-date executed copy; notebooks
            before it are already written.
    """
    from nbconvert import HTMLExporter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Pinned widget scripts beside the pages and a template without CDN scripts, so that
    # the pages show their viewers from disk with no network.
    require_js_url, widget_renderer_url = widget_scripts.install(out)
    exporter = cast("Callable[..., Any]", HTMLExporter)(  # untyped constructor
        template_name="offline_html",
        extra_template_basedirs=[str(Path(__file__).resolve().parent)],
        require_js_url=require_js_url,
        widget_renderer_url=widget_renderer_url,
    )
    written = []
    for path in map(Path, paths):
        start = time.perf_counter()
        if executed is None:
            notebook = execute(path, timeout)
            how = f"executed in {time.perf_counter() - start:.1f} s"
        else:
            notebook = load_executed(path, executed)
            how = f"as executed by the tests ({Path(executed) / path.name})"
        html, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"name": path.stem}})
        target = out / f"{path.stem}.html"
        target.write_text(html, encoding="utf-8")
        print(f"{path}: {how} -> {target}", flush=True)
        written.append(target)
    return written


# -- command line --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.notebooks",
        description="Strip, check, or execute and render the notebooks in doc/.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    commands.add_parser(
        "strip", help="remove outputs and volatile metadata, in place"
    ).add_argument("notebooks", nargs="*", type=Path)
    commands.add_parser("check", help="fail if a notebook carries outputs").add_argument(
        "notebooks", nargs="*", type=Path
    )
    render_parser = commands.add_parser("render", help="execute and write HTML to --out")
    render_parser.add_argument("--out", required=True, type=Path, help="folder for the HTML")
    render_parser.add_argument(
        "--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell (default %(default)s)"
    )
    render_parser.add_argument(
        "--executed",
        type=Path,
        help=f"render the copies the notebook test kept in this folder (${EXECUTED_ENV}) "
        "instead of executing the notebooks",
    )
    render_parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)

    try:
        if args.command == "strip":
            for path in strip(args.notebooks):
                print(f"stripped {path}")
        elif args.command == "check":
            report = check(args.notebooks)
            if report:
                lines = [
                    f"{path}:\n" + "\n".join(f"  {p}" for p in ps) for path, ps in report.items()
                ]
                print(
                    "Notebooks must be committed without outputs, execution counts or volatile "
                    "metadata; run ./dev format (or python -m tools.notebooks strip).\n"
                    + "\n".join(lines),
                    file=sys.stderr,
                )
                return 1
        else:
            render(args.notebooks, args.out, args.timeout, args.executed)
    except NotebookError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
