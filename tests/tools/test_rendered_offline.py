"""Rendered notebooks show their viewers from disk with no network: the widget scripts are
pinned copies beside the page, and nothing is loaded from a CDN. Checked in Chromium."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nbconvert")
pytest.importorskip("ipywidgets")

from tests.browser import browser  # noqa: F401 (a fixture)
from tools import notebooks, widget_scripts

pytestmark = pytest.mark.slow  # executes a notebook and opens its page in Chromium

CELLS = [
    "import torch, tensor_tracker\n"
    "from tensor_tracker import widgets\n"
    "model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))\n"
    "with tensor_tracker.track(model, stats=['rms', tensor_tracker.stats.histogram()]) as t:\n"
    "    for _ in range(3):\n"
    "        model(torch.randn(16, 4)).sum().backward(); t.step()",
    "widgets.history_viewer(t)",
    "widgets.scale_viewer(t)",
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nbformat = pytest.importorskip("nbformat")
    folder = tmp_path_factory.mktemp("rendered")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    source = folder / "viewers.ipynb"
    nbformat.write(notebook, source)
    (page,) = notebooks.render([source], folder / "html")
    return page


def test_the_page_loads_nothing_from_the_network(rendered: Path) -> None:
    page = rendered.read_text()
    sources = re.findall(r"""<script[^>]*\bsrc=["']([^"']+)""", page)
    assert sources and not [s for s in sources if "//" in s], sources
    assert "html-manager@*" not in page and "unpkg.com" not in page
    assert widget_scripts.HTML_MANAGER.version in page
    assert (rendered.parent / "_static").is_dir()


def test_the_viewers_show_offline_in_chromium(browser: Any, rendered: Path) -> None:  # noqa: F811
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    try:
        browser.get(rendered.as_uri())
        images: list[Any] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            images = browser.execute_script(
                "return [...document.querySelectorAll('.jp-OutputArea img')]"
                ".filter(i => i.complete && i.naturalWidth > 0)"
                ".map(i => [i.naturalWidth, i.getBoundingClientRect().width, i.src])"
            )
            if len(images) >= 3:  # history, its heatmap, and the scale plot
                break
            time.sleep(0.5)
        browser.save_screenshot(str(rendered.parent / "offline.png"))
        assert len(images) >= 3, images
        assert all(src.startswith("blob:") for _, _, src in images)
        # Shown at the figure's own width (10 in at 100 px/in), not stretched.
        assert all(shown <= 1000.5 for _, shown, _ in images), images
        text = browser.find_element("tag name", "body").text
        assert "Loading widget" not in text and "Error" not in text
    finally:
        browser.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
