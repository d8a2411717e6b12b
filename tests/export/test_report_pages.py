"""The report and the graph view of a 12-layer BERT-size run, in headless Chromium at desktop
(1440x900) and phone (390x844) sizes: nothing scrolls sideways, no text is cut off, every
chart point reads out on hover and on tap, modules pin side by side with their histograms
over steps, every recorded statistic is offered. Screenshots go to the test's folder, or to
`$TT_SCREENSHOTS`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import stats, track
from tensor_tracker.export._columns import columns_of
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report import _wait

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
LONG = "encoder.layer.11.attention.output.LayerNorm"
QUERY = "encoder.layer.0.attention.self.query"

pytestmark = pytest.mark.slow


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser: Any, path: Path, size: tuple[int, int]) -> None:  # noqa: F811
    browser.set_window_size(*size)
    console_errors(browser)  # forget earlier pages' messages
    browser.get(path.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    # The window's outer size holds the browser's frame: the page is told the inner one.
    assert browser.execute_script("return innerWidth") <= size[0]


def _no_sideways_scroll(browser: Any) -> None:  # noqa: F811
    width, inner = browser.execute_script(
        "return [document.scrollingElement.scrollWidth, innerWidth]"
    )
    assert width <= inner, f"the page is {width} px wide in a {inner} px window"


# Text that must be read whole: each element's box lies inside its container's, and the
# element itself shows all of its text (no overflow hidden).
_CUT = """
const out = [];
for (const node of document.querySelectorAll(arguments[0])) {
  const r = node.getBoundingClientRect();
  if (!r.width || !node.offsetParent || getComputedStyle(node).visibility === 'hidden') continue;
  const box = node.parentElement.getBoundingClientRect();
  if (r.left < box.left - 1 || r.right > box.right + 1 || r.left < -1 || r.right > innerWidth + 1
      || node.scrollWidth > node.clientWidth + 1 && getComputedStyle(node).overflowX !== 'visible')
    out.push([node.tagName, node.textContent.slice(0, 60), Math.round(r.left), Math.round(r.right),
              Math.round(box.left), Math.round(box.right)]);
}
return out;
"""
_TEXT = (
    "header h1, header label, #summary, h2, h3, .hint, .strip-label, .readout, "
    "#modules li .name, #modules li .type, #notes li, #node-facts td"
)


def _nothing_cut(browser: Any) -> None:  # noqa: F811
    assert browser.execute_script(_CUT, _TEXT) == []
    # Graph nodes: each label inside its box.
    outside = browser.execute_script(
        "return Array.from(document.querySelectorAll('#graph-svg g.node'), (g) => {"
        "  const r = g.querySelector('rect').getBoundingClientRect();"
        "  const t = g.querySelector('text').getBoundingClientRect();"
        "  return t.left >= r.left && t.right <= r.right ? null : g.dataset.id; })"
        ".filter((x) => x)"
    )
    assert outside == []


def _touch(browser: Any, element: Any, x: int, y: int) -> None:  # noqa: F811
    """A tap of a finger at (x, y) from the element's centre."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    actions = ActionBuilder(browser, mouse=PointerInput(interaction.POINTER_TOUCH, "finger"))
    actions.pointer_action.move_to(element, x, y).pointer_down().pointer_up()
    actions.perform()


def _click(browser: Any, element: Any) -> None:  # noqa: F811
    """Click `element` scrolled to the middle of the window (clear of the sticky header)."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def _hover(browser: Any, element: Any, x: int, y: int) -> None:  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element_with_offset(element, x, y).perform()


def _scale_point(browser: Any, name: str) -> tuple[Any, int, int]:  # noqa: F811
    """The scale chart's overlay and the offset of `name`'s output point from its centre."""
    over = browser.find_element("css selector", "#scale-plot .u-over")
    x, y, width, height = browser.execute_script(
        "const i = DATA.modules.findIndex((m) => m.name === arguments[0]);"
        "const r = scalePlot.over.getBoundingClientRect();"
        "return [scalePlot.valToPos(i, 'x'), scalePlot.valToPos(scalePlot.data[1][i], 'y'),"
        "        r.width, r.height];",
        name,
    )
    return over, round(x - width / 2), round(y - height / 2)


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_report_of_a_bert_run(
    bert: Any,
    bert_pages: dict[str, Path],
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    t, _ = bert
    phone = size == "phone"
    _open(browser, bert_pages["report"], SIZES[size])
    folder = _folder(tmp_path)
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    browser.save_screenshot(str(folder / f"report-{size}.png"))

    # Every statistic recorded is offered, read from the run; counts and fractions linear.
    options = browser.find_elements(By.CSS_SELECTOR, "#stat option")
    recorded = columns_of(t, "test").scalars
    assert sorted(o.get_attribute("value") for o in options) == sorted(recorded)
    assert browser.execute_script("return DATA.axes") == {
        s: "linear" if s in ("numel", "nonfinite") or s.endswith(("_frac", "flow")) else "log2"
        for s in recorded
    }

    # The module list: folded into a menu on a phone; long names keep their tail.
    aside = browser.find_element(By.TAG_NAME, "aside")
    assert aside.is_displayed() is not phone
    if phone:
        browser.find_element(By.ID, "menu").click()
        _wait(
            browser, "return getComputedStyle(document.querySelector('aside')).transform === 'none'"
        )
        assert aside.is_displayed()
        assert browser.execute_script(
            "const r = document.querySelector('aside').getBoundingClientRect();"
            "return r.left >= 0 && r.right <= innerWidth"
        )
        _nothing_cut(browser)
        browser.save_screenshot(str(folder / f"report-{size}-menu.png"))
    item = browser.find_element(By.CSS_SELECTOR, f'#modules li[data-name="{LONG}"] .name')
    assert item.text.startswith("\u2026") and item.text.endswith("attention.output.LayerNorm")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", item)
    if phone:  # a tap opens the module, whose heading is its full name; the menu folds
        _touch(browser, item, 0, 0)
        _wait(browser, "return !document.body.classList.contains('menu-open')")
        title = browser.find_element(By.ID, "panel-title").text
        assert title.startswith(f"{LONG} (LayerNorm)"), title
        browser.find_element(By.ID, "menu").click()
        _wait(
            browser, "return getComputedStyle(document.querySelector('aside')).transform === 'none'"
        )
    else:
        _hover(browser, item, 0, 0)
        _wait(browser, "return document.getElementById('tip').style.display === 'block'")
        assert browser.find_element(By.ID, "tip").text == f"{LONG} (LayerNorm)"

    # Pin two modules from the list: their cards show their histograms over the steps.
    for name in (QUERY, "encoder.layer.11.output.dense"):
        _click(
            browser,
            browser.find_element(By.CSS_SELECTOR, f'#modules li[data-name="{name}"] button.pin'),
        )
    if phone:
        browser.find_element(By.ID, "menu").click()
    cards = browser.find_elements(By.CSS_SELECTOR, "#pins .card")
    assert [c.get_attribute("data-module") for c in cards] == [
        QUERY,
        "encoder.layer.11.output.dense",
    ]
    for card in cards:
        strips = card.find_elements(By.CSS_SELECTOR, ".strip canvas.histogram")
        kinds = {s.get_attribute("data-series") for s in card.find_elements(By.CLASS_NAME, "strip")}
        assert kinds == {
            "output/value",
            "output/grad",
            "param.weight/value",
            "param.weight/grad",
            "param.bias/value",
            "param.bias/grad",
        }
        assert len(strips) == 6
        assert card.find_elements(By.CSS_SELECTOR, ".series-chart .u-over")
    # A strip reads out on hover (desktop) or tap (phone): module, step, share of values.
    strip = cards[0].find_element(By.CSS_SELECTOR, '.strip[data-series="output/value"]')
    canvas = strip.find_element(By.TAG_NAME, "canvas")
    (_touch if phone else _hover)(browser, canvas, 0, -20)
    readout = strip.find_element(By.CLASS_NAME, "readout").text
    assert readout.startswith(QUERY + " \u00b7 step ") and "values in all" in readout, readout
    browser.execute_script(  # the cards' tops just under the sticky header
        "scrollTo(0, arguments[0].getBoundingClientRect().top + scrollY"
        " - document.querySelector('header').offsetHeight - 8)",
        cards[0],
    )
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    browser.save_screenshot(str(folder / f"report-{size}-pins.png"))
    # Pins come off from the card; the scale chart pins too.
    _click(browser, cards[1].find_element(By.CSS_SELECTOR, "button.pin"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#pins .card")) == 1
    # From the graph: a node's details pin its module. (On a phone the module tapped in
    # the list opened its level in the graph: back to the model's.)
    if phone:
        _click(browser, browser.find_element(By.CSS_SELECTOR, "#graph-crumbs a"))
    _click(
        browser, browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="embeddings#0"]')
    )
    _click(browser, browser.find_element(By.CSS_SELECTOR, "#node-info button.pin"))
    cards = browser.find_elements(By.CSS_SELECTOR, "#pins .card")
    assert [c.get_attribute("data-module") for c in cards] == [QUERY, "embeddings"]

    # The scale chart: a point reads out its module and value, on hover or on tap, and a
    # click shows its module.
    name = "encoder.layer.3.intermediate.dense"
    over, x, y = _scale_point(browser, name)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", over)
    (_touch if phone else _hover)(browser, over, x, y)
    readout = browser.find_element(By.ID, "scale-readout")
    _wait(browser, f"return document.getElementById('scale-readout').dataset.module === '{name}'")
    step = t.to_frame().query("name == @name and kind == 'output' and not grad")
    rms = float(step[step["step"] == 29]["rms"].mean())
    assert readout.text.startswith(
        f"{name} (Linear) \u00b7 block encoder.layer.3, role intermediate.dense"
        " \u00b7 step 29 \u00b7 rms: value "
    )
    value = float(re.search(r"value ([-0-9.e+]+)", readout.text).group(1))  # type: ignore[union-attr]
    assert value == pytest.approx(rms, rel=1e-3)
    if phone:
        _touch(browser, over, x, y)
    else:
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(browser).move_to_element_with_offset(over, x, y).click().perform()
    _wait(browser, f"return state.module === DATA.modules.findIndex((m) => m.name === '{name}')")
    assert browser.find_element(By.ID, "panel-title").text.startswith(f"{name} (Linear)")
    _click(browser, readout.find_element(By.CSS_SELECTOR, "button.pin"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#pins .card")) == 3

    # A fraction is drawn on a linear axis, zeros included (not "0 recorded steps").
    select = browser.find_element(By.ID, "stat")
    browser.execute_script(
        "arguments[0].value = 'fp16_overflow'; arguments[0].dispatchEvent(new Event('change'))",
        select,
    )
    labels = browser.execute_script("return scalePlot.axes.map((a) => a.label)")
    assert labels == ["block (in the order they ran)", "fp16_overflow"]
    assert browser.execute_script("return scalePlot.data[1].filter((v) => v === 0).length") > 200
    # Every chart has labelled axes, steps on x; the notes are marked and labelled on them.
    axes = browser.execute_script(
        "return [...charts].filter((u) => u !== scalePlot).map((u) => u.axes.map((a) => a.label))"
    )
    assert axes and all(a[0] == "step" and a[1] for a in axes), axes
    marks = browser.find_elements(By.CSS_SELECTOR, ".kpi .note-mark span")
    assert [m.text for m in marks] == ["note: learning rate lowered"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#pins .note-mark")) == 3

    # The loss chart reads out its step and value.
    kpi = browser.find_element(By.CSS_SELECTOR, '.kpi[data-name="loss"] .u-over')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", kpi)
    (_touch if phone else _hover)(browser, kpi, 0, 0)
    text = kpi.find_element(By.XPATH, "../../../preceding-sibling::div[1]").text
    assert re.fullmatch(r"loss \u00b7 step \d+ \u00b7 [-0-9.e+]+", text), text
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    browser.save_screenshot(str(folder / f"report-{size}-loss.png"))
    assert console_errors(browser) == []


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_a_wide_values_table_scrolls_with_its_series_names_in_view(
    bert_pages: dict[str, Path],
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By

    # 13 statistics do not fit beside the graph (1440 px) or on a phone: the table scrolls
    # in its box, says so, and its first column stays put.
    _open(browser, bert_pages["report"], SIZES[size])
    browser.execute_script(
        "arguments[0].click()",
        browser.find_element(By.CSS_SELECTOR, f'#modules li[data-name="{QUERY}"] .name'),
    )
    _wait(browser, "return document.querySelector('#panel .table-wrap') !== null")
    hint = browser.find_element(By.CSS_SELECTOR, "#panel .table-more")
    assert hint.text.startswith(f"{len(browser.execute_script('return DATA.stats'))} statistics")
    left, right = browser.execute_script(
        "const w = document.querySelector('#panel .table-wrap');"
        "const cell = w.querySelector('td');"
        "const before = cell.getBoundingClientRect().left - w.getBoundingClientRect().left;"
        "w.scrollLeft = w.scrollWidth;"
        "return [before, cell.getBoundingClientRect().left - w.getBoundingClientRect().left];"
    )
    assert abs(left - right) < 1, (left, right)
    assert browser.find_element(By.CSS_SELECTOR, "#panel .table-wrap td").text == "output value"
    assert not console_errors(browser)


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_graph_view_of_a_bert_run(
    bert: Any,
    bert_pages: dict[str, Path],
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    t, _ = bert
    _open(browser, bert_pages["graph"], SIZES[size])
    browser.find_element(By.CSS_SELECTOR, '#graph-svg text[data-expand="encoder#0"]').click()
    node = browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="encoder.layer.0#0"]')
    node.click()
    assert browser.find_element(By.ID, "panel-title").text.startswith("encoder.layer.0 ")
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    # Nodes are as wide as their labels.
    widths = browser.execute_script(
        "return Array.from(document.querySelectorAll('#graph-svg g.node rect'),"
        " (r) => r.getBBox().width)"
    )
    assert len(set(widths)) > 1
    # The facts of a node on tap, not only on hover, and its output's value at the step.
    node = browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="encoder.layer.0#0"]')
    (_touch if size == "phone" else _hover)(browser, node, 0, 0)
    _wait(browser, "return document.getElementById('tip').style.display === 'block'")
    tip = browser.find_element(By.ID, "tip").text
    assert tip.startswith("encoder.layer.0\nBertLayer"), tip
    frame = t.to_frame().query("name == 'encoder.layer.0' and kind == 'output' and step == 29")
    value = float(frame[~frame["grad"]]["rms"].mean())
    shown = re.search(r"\nstep 29 \u00b7 rms: value ([-0-9.e+]+), gradient [-0-9.e+]+$", tip)
    assert shown is not None, tip
    assert float(shown.group(1)) == pytest.approx(value, rel=1e-3)
    browser.save_screenshot(str(_folder(tmp_path) / f"graph_view-{size}.png"))

    # Pin two modules from the graph: they sit side by side under the picked node, each
    # with its statistics over the steps and histogram strips; a pin comes off its card.
    for layer in ("encoder.layer.0", "encoder.layer.5"):
        _click(
            browser,
            browser.find_element(By.CSS_SELECTOR, f'#graph-svg g.node[data-id="{layer}#0"]'),
        )
        _wait(
            browser,
            f"return document.querySelector('#node-info h2').textContent.startsWith('{layer} ')",
        )
        _click(browser, browser.find_element(By.CSS_SELECTOR, "#node-info button.pin"))
    cards = browser.find_elements(By.CSS_SELECTOR, "#details #pins .card")
    assert [c.get_attribute("data-module") for c in cards] == ["encoder.layer.0", "encoder.layer.5"]
    for card in cards:
        kinds = {s.get_attribute("data-series") for s in card.find_elements(By.CLASS_NAME, "strip")}
        assert kinds == {"output/value", "output/grad"}
        assert len(card.find_elements(By.CSS_SELECTOR, ".strip canvas.histogram")) == 2
    tops = [c.rect["y"] for c in cards]
    assert (tops[0] == tops[1]) is (size == "desktop")  # side by side where there is room
    pinned = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node.pinned")
    assert {g.get_attribute("data-id") for g in pinned} == {
        "encoder.layer.0#0",
        "encoder.layer.5#0",
    }
    # A strip and a chart read out module, step and value on hover (desktop) or tap (phone).
    strip = cards[1].find_element(By.CSS_SELECTOR, '.strip[data-series="output/grad"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", strip)
    (_touch if size == "phone" else _hover)(
        browser, strip.find_element(By.TAG_NAME, "canvas"), 0, -10
    )
    readout = strip.find_element(By.CLASS_NAME, "readout").text
    assert readout.startswith("encoder.layer.5 \u00b7 step ") and "values in all" in readout, (
        readout
    )
    over = cards[0].find_element(By.CSS_SELECTOR, ".series-chart .u-over")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", over)
    (_touch if size == "phone" else _hover)(browser, over, 0, 0)
    _wait(
        browser,
        "return document.querySelector('#pins .card .chart-readout').textContent"
        ".startsWith('encoder.layer.0 \\u00b7 step ')",
    )
    assert "output value: " in cards[0].find_element(By.CLASS_NAME, "chart-readout").text
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    browser.save_screenshot(str(_folder(tmp_path) / f"graph_view-{size}-pins.png"))
    _click(browser, cards[0].find_element(By.CSS_SELECTOR, "button.pin"))
    cards = browser.find_elements(By.CSS_SELECTOR, "#pins .card")
    assert [c.get_attribute("data-module") for c in cards] == ["encoder.layer.5"]
    assert console_errors(browser) == []


def test_a_histogram_counts_every_value(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """32,768 values read "32,768 values", not "32770" (4 significant digits), and the
    count includes the values outside the bins (zeros)."""
    from selenium.webdriver.common.by import By

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    with track(model, stats=[*stats.DEFAULT, stats.histogram(bins=16)]) as t:
        model(torch.randn(512, 64)).sum().backward()
        t.step()
    path = tensor_tracker.report(t, tmp_path / "count.html")
    _open(browser, path, SIZES["desktop"])
    browser.find_element(By.CSS_SELECTOR, '#modules li[data-name="1"]').click()
    strip = browser.find_element(By.CSS_SELECTOR, '#panel .strip[data-series="output/value"]')
    assert strip.find_element(By.CLASS_NAME, "readout").text.startswith("32,768 values a step")


def test_a_run_without_histograms_says_how_to_record_them(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with track(model, stats=True) as t:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            t.step()
    path = tensor_tracker.report(t, tmp_path / "nohist.html")
    _open(browser, path, SIZES["phone"])
    howto = browser.find_elements(By.CSS_SELECTOR, "#panel .howto")
    assert len(howto) == 1 and "stats.histogram()" in howto[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, "canvas.histogram")
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    assert console_errors(browser) == []
