"""`report(cmp, path)`: the page of a comparison in headless Chromium, at desktop and phone
sizes: the counts and first divergences, the error chart, the module list and the graph
coloured by status, each series' error in the panel."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.browser import wait_for as _wait
from tests.export.test_report_pages import _hover, _touch


def _comparison() -> tuple[tensor_tracker.Comparison, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)
    )
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[2].weight.mul_(1 + 1e-3)
    x = torch.randn(4, 8)
    cmp = tensor_tracker.compare_models(model, other, x, loss_fn=lambda out: out.square().sum())
    return cmp, model, x


def _shots() -> Path | None:
    """Where to keep screenshots to look at (TT_SCREENSHOTS), else nowhere."""
    folder = os.environ.get("TT_SCREENSHOTS")
    return Path(folder) if folder else None


@pytest.mark.slow
@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_the_page_of_a_comparison(tmp_path: Path, browser: Any, size: tuple[int, int]) -> None:  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    cmp, model, x = _comparison()
    graph = tensor_tracker.module_graph(model, x)
    page = tensor_tracker.report(cmp, tmp_path / "compare.html", graph=graph)
    browser.set_window_size(*size)
    browser.get(page.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    assert console_errors(browser) == []
    counts = cmp.counts()
    head = browser.find_element(By.ID, "compare-summary").text
    assert f"{counts['equal']} bitwise equal" in head and f"{counts['beyond']} beyond" in head
    firsts = browser.find_elements(By.CSS_SELECTOR, "#compare-first .first-divergence")
    forward = cmp.first_divergence()
    assert forward is not None and forward.name == "2"
    assert firsts[0].text == f"first forward divergence: {forward}"
    # The chart (uPlot): one point per aligned output record, coloured by its status.
    points = browser.execute_script(
        "return comparePoints.map((p) => [p.name, p.grad, String(p.status)])"
    )
    frame = cmp.to_frame()
    assert len(points) == len(frame)
    status = {(name, grad): code for name, grad, code in points}
    codes = {"equal": "0", "within": "1", "beyond": "2"}
    for name, grad, s in zip(frame["name"], frame["grad"], frame["status"], strict=True):
        assert status[(name, bool(grad))] == codes[s]
    marks = browser.execute_script("return comparePlot.marks.map((m) => m.direction)")
    assert set(marks) == {"forward", "gradient"}
    assert browser.execute_script("return comparePlot.axes.map((a) => a.label)") == [
        "module (in the order they ran)",
        "log10 rel_rms_error",
    ]
    # Module "2"'s output point reads out its module, error and status on hover (a mouse)
    # or tap (a finger), and a click on it shows the module.
    over = browser.find_element(By.CSS_SELECTOR, "#compare-plot .u-over")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", over)
    x, y = browser.execute_script(
        "const i = DATA.modules.findIndex((m) => m.name === '2');"
        "const p = comparePoints.find((p) => p.module === i && !p.grad);"
        "const r = comparePlot.over.getBoundingClientRect();"
        "return [Math.round(comparePlot.valToPos(i, 'x') - r.width / 2),"
        "        Math.round(comparePlot.valToPos(p.y, 'y') - r.height / 2)];"
    )
    phone = size[0] < 600
    (_touch if phone else _hover)(browser, over, x, y)
    _wait(browser, "return document.getElementById('compare-readout').dataset.module === '2'")
    text = browser.find_element(By.ID, "compare-readout").text
    error = float(frame[(frame["name"] == "2") & ~frame["grad"]]["rel_rms_error"].iloc[0])
    shown = re.match(
        r"2 \(Linear\) \u00b7 step 0 \u00b7 output: rel_rms_error ([-0-9.e+]+) \(beyond\)", text
    )
    assert shown is not None, text
    assert float(shown.group(1)) == pytest.approx(error, rel=1e-3)
    if phone:
        _touch(browser, over, x, y)
    else:
        ActionChains(browser).move_to_element_with_offset(over, x, y).click().perform()
    _wait(browser, "return state.module === DATA.modules.findIndex((m) => m.name === '2')")
    assert browser.find_element(By.ID, "panel-title").text.startswith("2 (Linear)")
    # The module list: modules 0 and 1 ran before the change, equal both ways? No: their
    # gradients went through it; the list shows each module's worst status.
    items = {
        li.get_attribute("data-name"): li.get_attribute("data-status")
        for li in browser.find_elements(By.CSS_SELECTOR, "#modules li")
    }
    worst = frame.assign(code=frame["status"].map(codes)).groupby("name")["code"].max()
    assert items == worst.to_dict()
    # The graph's module nodes are coloured the same way.
    nodes = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node rect[data-status]")
    assert {n.get_attribute("data-status") for n in nodes} == set(worst[worst.index != ""])
    # The panel of module "2": its output and gradient errors against run b.
    browser.execute_script("document.querySelector('#modules li[data-name=\"2\"]').click()")
    cells = browser.find_elements(By.CSS_SELECTOR, "#panel table.compare-values td.error")
    expected = frame[frame["name"] == "2"]["rel_rms_error"]
    assert [float(c.get_attribute("textContent")) for c in cells] == pytest.approx(
        list(expected), rel=1e-3
    )
    # Nothing runs past the window's width.
    assert browser.execute_script(
        "return document.getElementById('compare-plot').getBoundingClientRect().right"
        " <= innerWidth && document.scrollingElement.scrollWidth <= innerWidth"
    )
    assert console_errors(browser) == []
    shots = _shots()
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(shots / f"report_compare_{size[0]}x{size[1]}.png"))
        browser.execute_script("document.getElementById('compare-section').scrollIntoView()")
        (_touch if phone else _hover)(browser, over, x, y)
        browser.save_screenshot(str(shots / f"report_compare_{size[0]}x{size[1]}_chart.png"))
