"""The viewers of doc/Usage.ipynb in JupyterLab, in headless Chromium: every viewer renders
(no "Loading widget", no text repr, no error output), every control that offers a choice
changes the figure, and the console stays free of errors. Screenshots of each viewer go to
the test's folder, or to `$TT_SCREENSHOTS` when set (the README's come from there)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ipywidgets")

from tests.browser import browser, console_errors  # noqa: F401 (a fixture)
from tests.jupyterlab import Lab, lab, wait_for  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow  # starts JupyterLab and Chromium

VIEWERS = ["live_viewer", "histogram_viewer", "scale_viewer", "umap_viewer", "history_viewer"]

# The viewers' outputs in the page, in notebook order: an output holding a widget box.
_VIEWERS = """
return [...document.querySelectorAll('.jp-OutputArea-output')]
  .filter(o => o.querySelector('.widget-vbox'));
"""

_IMAGES = "return [...arguments[0].querySelectorAll('img')].map(i => i.src);"


@pytest.fixture(scope="module")
def usage(browser: Any, lab: Lab) -> Any:  # noqa: F811
    browser.set_window_size(1280, 1600)  # whole viewers in the screenshots
    console_errors(browser)  # start from a clean log
    lab.open(browser, "Usage.ipynb")
    lab.run_all(browser)
    wait_for(
        browser,
        _VIEWERS.strip()[:-1] + ".filter(o => o.querySelector('img')).length >= 5;",
        60,
        "five viewers with a figure",
    )
    return browser


def viewers(page: Any) -> list[Any]:
    return list(page.execute_script(_VIEWERS))


def test_every_viewer_renders(usage: Any, tmp_path: Path) -> None:
    shown = viewers(usage)
    assert len(shown) == len(VIEWERS)
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    for name, output in zip(VIEWERS, shown, strict=True):
        text = output.text
        assert "Loading widget" not in text and "VBox(" not in text, name
        images = usage.execute_script(
            "return [...arguments[0].querySelectorAll('img')]"
            ".map(i => [i.complete && i.naturalWidth > 0, i.getBoundingClientRect().width]);",
            output,
        )
        assert images and all(ok for ok, _ in images), (name, images)
        # Nothing wider than the output area (no horizontal scroll bar inside a viewer).
        overflow = usage.execute_script(
            "return [...arguments[0].querySelectorAll('*')]"
            ".filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')"
            ".map(e => [e.className, e.scrollWidth, e.clientWidth,"
            " [...e.children].map(c => [c.className, c.offsetWidth, c.scrollWidth])]);",
            output,
        )
        assert not overflow, (name, overflow)
        usage.execute_script("arguments[0].scrollIntoView()", output)
        output.screenshot(str(folder / f"{name}.png"))
    errors = usage.find_elements(
        "css selector",
        "[data-mime-type*='stderr'], .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']",
    )
    assert not errors, [e.text[:200] for e in errors]


def changes_figure(page: Any, output: Any, act: Any, what: str) -> None:
    """Do `act` and wait until the figure of the viewer in `output` is replaced."""
    before = page.execute_script(_IMAGES, output)
    act()
    try:
        wait_for(
            page,
            "const now = [...arguments[0].querySelectorAll('img')].map(i => i.src);"
            "return now.length > 0 && JSON.stringify(now) !== JSON.stringify(arguments[1]);",
            30,
            f"{what} did not change the figure",
            output,
            before,
        )
    except pytest.fail.Exception:
        pytest.fail(f"{what} did not change the figure; the viewer shows:\n{output.text[-600:]}")


def test_every_control_changes_the_figure(usage: Any) -> None:
    from selenium.webdriver.support.select import Select

    changed = []
    for name, output in zip(VIEWERS, viewers(usage), strict=True):
        usage.execute_script("arguments[0].scrollIntoView()", output)
        for select in output.find_elements("css selector", "select:not([multiple])"):
            options = select.find_elements("tag name", "option")
            if not select.is_displayed() or len(options) < 2:
                continue  # nothing to choose
            choice = Select(select)
            current = choice.first_selected_option.get_attribute("value")
            other = next(o for o in options if o.get_attribute("value") != current)
            label = f"{name}: {select.find_element('xpath', '../label').text}"
            changes_figure(usage, output, partial(choice.select_by_visible_text, other.text), label)
            changed.append(label)
        for group in output.find_elements("css selector", ".widget-toggle-buttons"):
            buttons = [b for b in group.find_elements("tag name", "button") if b.is_displayed()]
            other = next((b for b in buttons if "mod-active" not in b.get_attribute("class")), None)
            if other is None or other.text == "umap":  # UMAP compiles for ~a minute: PCA only
                continue
            label = f"{name}: {other.text}"
            changes_figure(usage, output, other.click, label)
            changed.append(label)
    # What the notebook offers a choice of, at least: the histogram's module, direction,
    # scale and bins, the scale plot's statistic and step, the token paths' direction,
    # and the history's direction.
    assert len(changed) >= 8, changed


def test_the_graph_view_works_inside_the_notebook(usage: Any, tmp_path: Path) -> None:
    """`tensor_tracker.graph_view(graph, run)`: the page in its frame draws the graph, and a click
    on a block shows its facts and the training run's statistics beside it."""
    frame = usage.find_element("css selector", "iframe.tensor-tracker-graph")
    usage.execute_script("arguments[0].scrollIntoView()", frame)
    usage.switch_to.frame(frame)
    try:
        wait_for(usage, "return document.body.dataset.ready === 'true'", 30, "the graph view")
        nodes = usage.find_elements("css selector", "#graph-svg g.node")
        ids = [n.get_attribute("data-id") for n in nodes]
        assert ids[0] == "<model>#0/input" and ids[-1] == "<model>#0/output"
        assert "blocks.0#0" in ids and "head#0" in ids
        usage.find_element("css selector", '#graph-svg g.node[data-id="blocks.0#0"]').click()
        facts = usage.find_element("id", "node-facts").text
        assert "parameters" in facts and "float32" in facts, facts
        rows = usage.find_elements("css selector", "#panel tr.series-row")
        assert {r.get_attribute("data-series") for r in rows} >= {"output/value", "output/grad"}
        assert usage.find_elements("css selector", "#panel .series-chart .u-over")
    finally:
        usage.switch_to.default_content()
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    frame.screenshot(str(folder / "graph_view.png"))


def test_no_console_errors(usage: Any) -> None:
    assert console_errors(usage) == []
