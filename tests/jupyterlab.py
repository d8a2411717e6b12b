"""JupyterLab for browser tests: a headless server on 127.0.0.1 over a copy of doc/, and
helpers to open a notebook in the `browser` fixture's Chromium and run all its cells.

The server gets its own settings folder (the notebook is not windowed, so every output is
in the page), `PYTHONPATH` at the repository root and the notebooks' offline environment.
It is stopped by its PID at the end of the module, also when a test fails. Without
JupyterLab installed the tests skip and say so (`./dev setup` installs it).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools.jupyterlab import start_lab, stop_lab
from tools.notebooks import KERNEL_ENV

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "tensor-tracker-tests"
START_TIMEOUT_S = 60


@dataclass
class Lab:
    """A running JupyterLab: `base` URL, the `root` folder it serves, its process."""

    base: str
    root: Path
    process: subprocess.Popen[bytes]

    def open(self, browser: Any, notebook: str, timeout: float = 90) -> None:
        """Open `notebook` (a path under `root`) and wait until its kernel has started."""
        browser.get(f"{self.base}/lab/tree/{notebook}?token={TOKEN}")
        wait_for(
            browser,
            "const w = window.jupyterapp?.shell.currentWidget;"
            "return !!(w?.content?.widgets && w.sessionContext?.session?.kernel"
            " && w.sessionContext.session.kernel.status === 'idle');",
            timeout,
            f"{notebook} did not open with an idle kernel",
        )

    def run_all(self, browser: Any, timeout: float = 300) -> None:
        """Run every cell of the open notebook; fail on the first error output."""
        browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        state = wait_for(browser, _RUN_STATE, timeout, "the notebook did not finish running")
        assert not state["errors"], f"cells raised: {state['errors']}"


# Whether the open notebook has finished (kernel idle, every code cell numbered) or a cell
# has an error output; the notebook's model is read, not the page.
_RUN_STATE = """
const nb = window.jupyterapp.shell.currentWidget;
const code = nb.content.widgets.filter(c => c.model.type === 'code');
const errors = [];
code.forEach((c, i) => {
  const outputs = c.model.outputs;
  for (let k = 0; k < outputs.length; k++) {
    const o = outputs.get(k);
    if (o.type === 'error') errors.push(`cell ${i}: ${o.toJSON().ename}: ${o.toJSON().evalue}`);
  }
});
const done = code.every(c => c.model.executionCount !== null);
const idle = nb.sessionContext.session.kernel.status === 'idle';
return (errors.length || (done && idle)) ? {errors} : null;
"""


def wait_for(browser: Any, script: str, timeout: float, what: str, *args: Any) -> Any:
    """Poll `script` (given `args` as `arguments`) in the page until it returns something
    truthy; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = browser.execute_script(script, *args)
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A JupyterLab server over a copy of doc/ (notebooks run there; the originals stay as
    they are, autosave included)."""
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("JupyterLab is not installed: ./dev setup installs requirements-dev.txt")
    folder = tmp_path_factory.mktemp("lab")
    root = folder / "doc"
    shutil.copytree(ROOT / "doc", root, ignore=shutil.ignore_patterns("api", "_build"))
    env = {
        **KERNEL_ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        process, base = start_lab(folder, root, TOKEN, env, timeout=START_TIMEOUT_S)
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield Lab(base, root, process)
    finally:
        stop_lab(process)
