"""The report with the keyboard alone (Selenium's key presses, no click): the module list
is one tab stop walked with the arrow keys, Enter opens a module and P pins it, a chart
reads its points out under the arrow keys, graph nodes are focusable with + / Backspace
to go down and up a level; at desktop (1440x900) and phone (390x844) sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import track
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.browser import wait_for as _wait
from tests.export.test_report import _Block
from tests.export.test_report_pages import SIZES, _folder, _no_sideways_scroll, _open

_FOCUSED = """
const a = document.activeElement;
return { tag: a.tagName, id: a.id, name: a.dataset.name ?? null, node: a.dataset.id ?? null,
         list: !!a.closest('#modules'), card: a.closest('#pins .card')?.dataset.module ?? null,
         chart: a.classList.contains('uplot') };
"""


def _page(folder: Path) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), _Block(), _Block(), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    spec = [*tensor_tracker.stats.DEFAULT, tensor_tracker.stats.histogram(bins=16)]
    with track(model, stats=spec) as t:
        for _ in range(3):
            model(x).sum().backward()
            t.step()
    graph = tensor_tracker.module_graph(model, x)
    return tensor_tracker.report(t, folder / "keyboard.html", graph=graph)


def _press(browser: Any, *keys: str, shift: bool = False) -> dict[str, Any]:  # noqa: F811
    """Press `keys` on the focused element (with Shift held); what has the focus afterwards."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    actions = ActionChains(browser)
    if shift:
        actions.key_down(Keys.SHIFT).send_keys(*keys).key_up(Keys.SHIFT).perform()
    else:
        actions.send_keys(*keys).perform()
    focused: dict[str, Any] = browser.execute_script(_FOCUSED)
    return focused


def _tab_until(browser: Any, reached: Any, most: int, menu: bool = True) -> int:  # noqa: F811
    """Tab until `reached(focused)`, opening the phone's module menu on the way if `menu`;
    how many presses it took (fails after `most`)."""
    from selenium.webdriver.common.keys import Keys

    for presses in range(1, most + 1):
        focused = _press(browser, Keys.TAB)
        if menu and focused["id"] == "menu":  # a phone: the list is behind the menu button
            focused = _press(browser, Keys.ENTER)
        if reached(focused):
            return presses
    raise AssertionError(f"not reached in {most} presses of Tab; focus on {focused}")


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_a_keyboard_walk_opens_pins_and_reads_a_module(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder = _folder(tmp_path)
    _open(browser, _page(tmp_path), SIZES[size])

    # Into the module list: a few stops (header, filter), then the list is a single one.
    _tab_until(browser, lambda f: f["list"] and f["tag"] == "LI", 6)
    assert not _press(browser, Keys.TAB)["list"]
    focused = _press(browser, Keys.TAB, shift=True)
    if size == "phone":  # leaving the list folded the menu away: back to its button
        for _ in range(3):
            if focused["id"] == "menu":
                break
            focused = _press(browser, Keys.TAB, shift=True)
        assert _press(browser, Keys.ENTER)["id"] == "filter"
        focused = _press(browser, Keys.TAB)
    assert focused["list"] and focused["tag"] == "LI", focused

    # Arrows walk the list; P pins the module, Enter opens it.
    for _ in range(len(browser.find_elements(By.CSS_SELECTOR, "#modules li"))):
        if focused["name"] == "2.linear":
            break
        focused = _press(browser, Keys.ARROW_DOWN)
    assert focused["name"] == "2.linear"
    _press(browser, "p")
    assert [
        c.get_attribute("data-module")
        for c in browser.find_elements(By.CSS_SELECTOR, "#pins .card")
    ] == ["2.linear"]
    _press(browser, Keys.ENTER)
    assert browser.find_element(By.ID, "panel-title").text.startswith("2.linear (Linear)")
    assert (
        browser.find_element(By.CSS_SELECTOR, "#modules li.selected").get_attribute("tabindex")
        == "0"
    )

    # Tab on to the pinned card's chart (the phone's menu folded away); the arrow keys read
    # its points.
    _tab_until(browser, lambda f: f["card"] == "2.linear" and f["chart"], 30)
    assert "menu-open" not in browser.find_element(By.TAG_NAME, "body").get_attribute("class")
    chart = browser.switch_to.active_element
    assert "chart of log2 rms by step" in chart.get_attribute("aria-label")
    _press(browser, Keys.HOME)
    card = browser.find_element(By.CSS_SELECTOR, '#pins .card[data-module="2.linear"]')
    readout = card.find_element(By.CSS_SELECTOR, ".chart-readout").text
    assert readout.startswith("2.linear \u00b7 step 0 \u00b7 output value: "), readout
    _press(browser, Keys.ARROW_RIGHT)
    assert " \u00b7 step 1 \u00b7 " in card.find_element(By.CSS_SELECTOR, ".chart-readout").text
    browser.save_screenshot(str(folder / f"keyboard-{size}.png"))
    assert console_errors(browser) == []
    _no_sideways_scroll(browser)


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_graph_with_the_keyboard(tmp_path: Path, browser: Any, size: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder = _folder(tmp_path)
    _open(browser, _page(tmp_path), SIZES[size])
    # The graph is one tab stop, whatever its number of nodes.
    presses = _tab_until(browser, lambda f: f["node"] is not None, 12, menu=False)
    assert len(browser.find_elements(By.CSS_SELECTOR, '#graph-svg g.node[tabindex="0"]')) == 1
    focused = _press(browser, Keys.TAB)
    assert focused["node"] is None, focused
    focused = _press(browser, Keys.TAB, shift=True)
    assert focused["node"] == "<model>#0/input", (presses, focused)

    for _ in range(6):
        if focused["node"] == "2#0":
            break
        focused = _press(browser, Keys.ARROW_DOWN)
    assert focused["node"] == "2#0"
    # + opens the block with the keyboard on its first node; Backspace comes back to it.
    focused = _press(browser, "+")
    assert browser.find_element(By.ID, "graph-svg").get_attribute("data-level") == "2#0"
    assert focused["node"] == "2#0/input"
    focused = _press(browser, Keys.BACKSPACE)
    assert focused["node"] == "2#0"
    # Enter picks the node (its module's panel), P pins it; the focus stays on it.
    focused = _press(browser, Keys.ENTER)
    assert focused["node"] == "2#0"
    assert browser.find_element(By.ID, "panel-title").text.startswith("2 (_Block)")
    assert "selected" in browser.find_element(
        By.CSS_SELECTOR, '#graph-svg g.node[data-id="2#0"]'
    ).get_attribute("class")
    focused = _press(browser, "p")
    assert [
        c.get_attribute("data-module")
        for c in browser.find_elements(By.CSS_SELECTOR, "#pins .card")
    ] == ["2"]
    _wait(browser, "return document.activeElement.dataset.id === '2#0'")
    browser.save_screenshot(str(folder / f"keyboard-graph-{size}.png"))
    assert console_errors(browser) == []
