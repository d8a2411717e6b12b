"""The report's channel panel: for a recording with statistics per channel, every module's
channels against its median channel, each module's row as wide as the panel, the outlier
channel `diagnose` finds named and framed where it is; without them, one line that says how
to record them. In headless Chromium at 1440x900 and 390x844."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tensor_tracker as tt
from tensor_tracker._data.channels import channel_table
from tensor_tracker.export._report import page
from tests.browser import browser, console_errors, wait_for  # noqa: F401  (the fixture)
from tests.data.test_channels import CHANNEL, _model, _plant, _record

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
PLANTED = "2.fc2"


@pytest.fixture(scope="module")
def planted() -> tt.Tracker:
    model = _model()
    _plant(model)
    with torch.no_grad():  # the channel far above its module's median: 1,000x and more
        model[2].fc2.bias[CHANNEL] = 400.0
    return _record(model)


def _payload(recording: Any, view: str = "report") -> Any:
    import json
    import re

    text = page(recording, None, "run", view)
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_payload_holds_every_channel_and_diagnoses_outliers(planted: tt.Tracker) -> None:
    data = _payload(planted)["channels"]
    assert data["column"] == "abs_max_per_channel" and data["k"] == 10
    names = [m["name"] for m in _payload(planted)["modules"]]
    table = channel_table(planted)
    rows = {names[r["module"]]: r for r in data["rows"]}
    assert set(rows) == {m for m, w in zip(table.modules, table.widths, strict=True) if w >= 2}
    fc1 = rows["1.fc1"]
    assert fc1["width"] == 128
    values = np.frombuffer(base64.b64decode(fc1["values"]), dtype="<f4")
    m = table.modules.index("1.fc1")
    np.testing.assert_array_equal(values, table.over_steps()[m, :128].astype(np.float32))
    # The planted channel, as diagnose reports it (same table, same rule).
    finding = next(f for f in tt.diagnose(planted).findings if f.check == "outlier_channels")
    assert finding.modules == (PLANTED,)
    assert rows[PLANTED]["outliers"] == [CHANNEL]
    assert rows[PLANTED]["ratio"] == pytest.approx(finding.evidence["abs_max / median channel"])
    assert rows[PLANTED]["ratio"] > 1000
    # Listed in forward order: first where the channel appears (later modules carry it on).
    assert rows[PLANTED]["rank"] == 0 and rows["3.fc2"]["outliers"] == []
    # Not in the graph view, which has no channel panel.
    assert _payload(planted, "graph")["channels"] is None
    # Nothing per channel recorded: no data (the page says how to record it).
    assert _payload(_record(_model(), steps=1, stats=True))["channels"] is None


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser: Any, path: Path, size: tuple[int, int]) -> None:  # noqa: F811
    browser.set_window_size(*size)
    console_errors(browser)
    browser.get(path.as_uri())
    wait_for(browser, "return document.body.dataset.ready === 'true'")


_ROWS = """
const cells = document.querySelector('#channel-map canvas.cells');
const labels = document.querySelector('#channel-map canvas.labels');
const wrap = document.querySelector('#channel-map .channel-wrap');
const r = cells.getBoundingClientRect(), w = wrap.getBoundingClientRect();
return {cells: r.width, rows: r.height, labels: labels.getBoundingClientRect().width,
        wrap: w.width, scroll: wrap.scrollWidth > wrap.clientWidth,
        page: document.scrollingElement.scrollWidth, inner: innerWidth};
"""


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
def test_the_channel_panel_marks_the_planted_channel(
    size: str,
    planted: tt.Tracker,
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    path = tt.report(planted, tmp_path / "channels.html")
    _open(browser, path, SIZES[size])
    section = browser.find_element("id", "channel-section")
    browser.execute_script("arguments[0].scrollIntoView()", section)
    item = browser.find_element("css selector", f'#channel-outliers li[data-module="{PLANTED}"]')
    assert f"channel {CHANNEL} of 32 reach" in item.text and "the median channel" in item.text
    ratio = int(item.text.split(" reach ")[1].split("\u00d7")[0].replace(",", ""))
    assert ratio > 1000
    box = browser.execute_script(_ROWS)
    rows = len(_payload(planted)["channels"]["rows"])
    assert box["rows"] == rows * 14
    # Every row as wide as the panel: the 32-channel modules as wide as the 128-channel one,
    # and no sideways scroll, neither of the page nor of the panel (128 channels fit).
    assert box["labels"] + box["cells"] <= box["wrap"] + 1 and not box["scroll"]
    assert box["page"] <= box["inner"]
    # The planted channel's cell, read out where it is drawn: the middle of its 32nd.
    cells = browser.find_element("css selector", "#channel-map canvas.cells")
    names = [m["name"] for m in _payload(planted)["modules"]]
    row = [names[r["module"]] for r in _payload(planted)["channels"]["rows"]].index(PLANTED)
    width = box["cells"]
    x = (CHANNEL + 0.5) * width / 32 - width / 2
    y = row * 14 + 7 - box["rows"] / 2
    from selenium.webdriver.common.action_chains import ActionChains

    # In the middle of the window: clear of the sticky header (the first move settles the
    # page's scroll).
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cells)
    ActionChains(browser).move_to_element_with_offset(cells, 0, 0).perform()
    ActionChains(browser).move_to_element_with_offset(cells, round(x), round(y)).click().perform()
    readout = browser.find_element("id", "channel-readout")
    assert readout.get_attribute("data-module") == PLANTED
    assert readout.get_attribute("data-channel") == str(CHANNEL)
    assert "(outlier)" in readout.text
    # The click picks the module: its panel opens.
    wait_for(
        browser, f"return document.getElementById('panel-title').textContent.includes('{PLANTED}')"
    )
    # Framed: the cell's edge is the frame's black, its colour dark red inside.
    pixel = browser.execute_script(
        "const c = document.querySelector('#channel-map canvas.cells');"
        "const d = devicePixelRatio, x = Math.round(arguments[0] * d), y = Math.round(arguments[1] * d);"
        "return Array.from(c.getContext('2d').getImageData(x, y, 1, 1).data);",
        (CHANNEL + 0.5) * width / 32,
        row * 14 + 7,
    )
    assert pixel[0] > 100 and pixel[1] < 40  # dark red: over 1,000x its median channel
    browser.save_screenshot(str(_folder(tmp_path) / f"channels-{size}.png"))
    assert console_errors(browser) == []


@pytest.mark.slow
def test_without_statistics_per_channel_the_panel_says_how_to_record_them(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    path = tt.report(_record(_model(), steps=2, stats=True), tmp_path / "plain.html")
    for size in SIZES.values():
        _open(browser, path, size)
        hint = browser.find_element("id", "channel-hint").text
        assert "stats.per_channel" in hint and "Not recorded" in hint
        assert browser.find_elements("css selector", "#channel-map canvas") == []
        assert browser.execute_script("return document.scrollingElement.scrollWidth <= innerWidth")
        assert console_errors(browser) == []


def test_full_copies_get_the_panel_too() -> None:
    model = _model()
    _plant(model)
    with tt.track(model) as t:  # full copies: the statistic per channel computed from them
        model(torch.randn(4, 6, 8)).square().mean().backward()
        t.step()
    data = _payload(t)
    names = [m["name"] for m in data["modules"]]
    first = min((r for r in data["channels"]["rows"] if r["outliers"]), key=lambda r: r["rank"])
    assert names[first["module"]] == PLANTED and first["outliers"] == [CHANNEL]
