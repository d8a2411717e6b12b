"""`report`: the self-contained HTML page, opened from disk in headless Chromium; assertions
on what the page shows against what was recorded; no network request."""

from __future__ import annotations

import math
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import track
from tests.browser import browser  # noqa: F401  (the fixture)


def _run() -> Any:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    spec = [*tensor_tracker.stats.DEFAULT, tensor_tracker.stats.histogram(bins=16)]
    with track(model, stats=spec, capture=("outputs", "params")) as t:
        for step in range(20):
            loss = model(torch.randn(32, 8)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            t.log("loss", loss)
            if step == 10:
                t.note("half way")
            t.step()
    return t


def _fmt(value: float) -> str:
    """The page's number format: 4 significant digits, as JavaScript prints them."""
    if math.isnan(value):
        return "nan"
    text = f"{float(f'{value:.4g}'):.15g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{'+' if int(exponent) > 0 else '-'}{abs(int(exponent))}"
    return text


def _wait(browser: Any, script: str, timeout: float = 20.0) -> Any:  # noqa: F811
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = browser.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")


@pytest.mark.slow
def test_the_report_shows_what_was_recorded(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    t = _run()
    page = tensor_tracker.report(t, tmp_path / "run.html")
    text = page.read_text()
    assert "https://" not in text and "src=" not in text  # nothing to fetch
    browser.get(page.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    frame = t.to_frame()
    modules = list(dict.fromkeys(frame["name"]))
    items = browser.find_elements(By.CSS_SELECTOR, "#modules li")
    assert [i.get_attribute("data-name") for i in items] == ["", "0", "1", "2", "3", "4"]
    assert set(modules) == {"", "0", "1", "2", "3", "4"}  # the model first, then in order

    # Open the panel of one module: one chart per recorded series, 20 steps each.
    browser.find_element(By.CSS_SELECTOR, '#modules li[data-name="2"]').click()
    series = browser.find_elements(By.CSS_SELECTOR, "#panel .series")
    keys = {s.get_attribute("data-series"): s.get_attribute("data-steps") for s in series}
    assert keys == {
        "output/value": "20",
        "output/grad": "20",
        "param.weight/value": "20",
        "param.bias/value": "20",
        "param.weight/grad": "20",
        "param.bias/grad": "20",
    }
    assert len(browser.find_elements(By.CSS_SELECTOR, "#panel svg.histogram")) == 6

    # The slider picks the step; the table shows the recorded values of that step.
    for step in (0, 13, 19):
        browser.execute_script(
            "const s = document.getElementById('step'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('input'));",
            step,
        )
        assert browser.find_element(By.ID, "step-value").text == str(step)
        for key, grad in (("output/value", False), ("output/grad", True)):
            row = frame[(frame["name"] == "2") & (frame["kind"] == "output")]
            want = row[(row["grad"] == grad) & (row["step"] == step)]["rms"].mean()
            cell = browser.find_element(
                By.CSS_SELECTOR, f'tr[data-series="{key}"] td[data-stat="rms"]'
            )
            assert cell.text == _fmt(float(torch.tensor(want, dtype=torch.float32))), key
        points = browser.find_elements(By.CSS_SELECTOR, "#scale-svg .point")
        assert len(points) == 2 * len(modules)  # every module's output and gradient

    notes = [n.text for n in browser.find_elements(By.CSS_SELECTOR, "#notes li")]
    assert notes == ["step 10: half way"]
    kpi = browser.find_element(By.CSS_SELECTOR, 'svg.kpi[data-name="loss"] polyline')
    assert len(kpi.get_attribute("points").split()) == 20
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], (
        "errors in the page's console"
    )
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_view_command_writes_the_report_of_a_recording(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from tensor_tracker.__main__ import main

    t = _run()
    t.save(tmp_path / "run")
    assert main(["view", str(tmp_path / "run"), "--no-open"]) == 0
    page = (tmp_path / "run" / "report.html").read_text()
    assert '"title":"run"' in page and "half way" in page


def test_report_checks_its_recording(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass a Tracker"):
        tensor_tracker.report([1], tmp_path / "x.html")


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return x + self.act(self.linear(x))


def _open_graph_report(browser: Any, path: Path, model: nn.Module, x: Tensor) -> None:  # noqa: F811
    """Track one step of `model`, write its report with the module graph, open it."""
    with track(model, stats=True) as t:
        model(x).sum().backward()
    tensor_tracker.report(t, path, graph=tensor_tracker.module_graph(model, x))
    browser.get(path.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")


def node_ids(browser: Any) -> list[str]:  # noqa: F811
    """The ids of the graph's nodes on the page, in drawing order."""
    found = browser.find_elements("css selector", "#graph-svg g.node")
    return [n.get_attribute("data-id") for n in found]


def highlighted(browser: Any) -> dict[str, set[str]]:  # noqa: F811
    """The selected node and its highlighted ancestors and descendants."""
    return {
        kind: {
            n.get_attribute("data-id")
            for n in browser.find_elements("css selector", f"#graph-svg g.node.{kind}")
        }
        for kind in ("selected", "ancestor", "descendant")
    }


@pytest.mark.slow
def test_the_module_graph_expands_and_highlights(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), _Block(), _Block(), nn.Linear(16, 1))
    _open_graph_report(browser, tmp_path / "graph.html", model, torch.randn(4, 8))
    nodes = partial(node_ids, browser)
    assert nodes() == ["<model>#0/input", "0#0", "1#0", "2#0", "3#0", "<model>#0/output"]
    tooltip = browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="0#0"] title')
    text = tooltip.get_attribute("textContent")
    assert "out: [4, 16] float32" in text and "in_features=8" in text

    # Selecting a node highlights exactly what it depends on and what depends on it.
    browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="1#0"]').click()
    assert highlighted(browser) == {
        "selected": {"1#0"},
        "ancestor": {"<model>#0/input", "0#0"},
        "descendant": {"2#0", "3#0", "<model>#0/output"},
    }
    assert browser.find_element(By.ID, "panel-title").text.startswith("1 (_Block)")

    # "+" opens the block: its children between its own input and output; the breadcrumb
    # goes back up.
    browser.find_element(By.CSS_SELECTOR, '#graph-svg text[data-expand="2#0"]').click()
    assert nodes() == ["2#0/input", "2.linear#0", "2.act#0", "2#0/output"]
    edges = browser.find_elements(By.CSS_SELECTOR, "#graph-svg .edge")
    pairs = {(e.get_attribute("data-source"), e.get_attribute("data-target")) for e in edges}
    assert ("2#0/input", "2#0/output") in pairs  # the skip connection
    crumbs = browser.find_elements(By.CSS_SELECTOR, "#graph-crumbs a")
    assert [c.text for c in crumbs] == ["<model>", "2"]
    crumbs[0].click()
    assert len(nodes()) == 6
    browser.save_screenshot(str(tmp_path / "graph.png"))


@pytest.mark.slow
def test_a_level_of_500_calls_opens_as_groups(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(500)])
    _open_graph_report(browser, tmp_path / "groups.html", model, torch.randn(2, 4))
    nodes = partial(node_ids, browser)
    groups = [f"<model>#0/group{k}" for k in range(5)]
    assert nodes() == ["<model>#0/input", *groups, "<model>#0/output"]
    box = browser.find_element(By.CSS_SELECTOR, f'#graph-svg g.node[data-id="{groups[1]}"]')
    assert box.get_attribute("class") == "node group"
    assert box.find_element(By.CSS_SELECTOR, "text").text == "100 … 199 (Linear \u00d7100)"
    # "+" opens a group as it opens a module: its 100 calls, chained input to output.
    browser.find_element(By.CSS_SELECTOR, f'#graph-svg text[data-expand="{groups[1]}"]').click()
    calls = [f"{i}#0" for i in range(100, 200)]
    assert nodes() == [f"{groups[1]}/input", *calls, f"{groups[1]}/output"]
    edges = browser.find_elements(By.CSS_SELECTOR, "#graph-svg .edge")
    pairs = [(e.get_attribute("data-source"), e.get_attribute("data-target")) for e in edges]
    assert len(pairs) == 101 and (f"{groups[1]}/input", "100#0") in pairs
    crumbs = browser.find_elements(By.CSS_SELECTOR, "#graph-crumbs a")
    assert [c.text for c in crumbs] == ["<model>", "100 … 199"]
    crumbs[0].click()
    assert len(nodes()) == 7
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


class _Attention(nn.Module):
    """A block whose modules have long names: `query_key_value` inside `attention`."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.Sequential()
        self.attention.query_key_value = nn.Linear(8, 8)
        self.mlp_projection = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp_projection(self.attention.query_key_value(x))


@pytest.mark.slow
def test_the_scale_chart_names_every_module_in_full_view(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """Module names under the scale chart lie inside the chart, and different modules read
    differently: long names are shortened by whole components, never the block index.
    The screenshot goes to the test's folder, or to `$TT_SCREENSHOTS`."""
    from selenium.webdriver.common.by import By

    model = nn.Sequential()
    model.transformer = nn.Sequential()
    model.transformer.encoder = nn.Sequential(_Attention(), _Attention())
    with track(model, stats=True) as t:
        model(torch.randn(2, 8)).sum().backward()
    page = tensor_tracker.report(t, tmp_path / "names.html")
    browser.get(page.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    labels = browser.find_elements(By.CSS_SELECTOR, "#scale-svg text.module-label")
    names = [label.get_attribute("data-module") for label in labels]
    assert sorted(names) == sorted(set(t.to_frame()["name"]))  # every module is named
    texts = browser.execute_script(
        "return Array.from(document.querySelectorAll('#scale-svg text.module-label'),"
        " (t) => t.firstChild.nodeValue)"
    )
    shown = dict(zip(names, texts, strict=True))
    assert len(set(texts)) == len(texts)  # different modules read differently
    assert shown["transformer"] == "transformer"
    assert shown["transformer.encoder.1.attention.query_key_value"] == (
        "\u2026encoder.1.attention.query_key_value"  # 47 characters: shortened, index kept
    )
    assert shown["transformer.encoder.0.mlp_projection"] == "transformer.encoder.0.mlp_projection"
    # Every label lies inside the chart (nothing cut by its edges).
    inside = browser.execute_script(
        "const svg = document.getElementById('scale-svg').getBoundingClientRect();"
        "return Array.from(document.querySelectorAll('#scale-svg text.module-label'), (t) => {"
        "  const r = t.getBoundingClientRect();"
        "  return [r.width > 20, r.left >= svg.left, r.right <= svg.right,"
        "          r.top >= svg.top, r.bottom <= svg.bottom]; });"
    )
    assert inside == [[True] * 5] * len(labels)
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    browser.find_element(By.ID, "scale-svg").screenshot(str(folder / "scale_names.png"))
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_statistic_picker_holds_block_formats(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: tuple[int, int],
) -> None:
    """Issue #30: recorded block-format statistics are in the picker; under an error the
    chart draws the format's floor instead of the range limits."""
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    names = ["rms", "nvfp4_error", "nvfp4_underflow", "mxfp8_e4m3_error"]
    with track(model, stats=names) as t:
        model(torch.randn(8, 64)).sum().backward()
    page = tensor_tracker.report(t, tmp_path / "blocks.html")
    browser.set_window_size(*size)
    try:
        browser.get(page.as_uri())
        _wait(browser, "return document.body.dataset.ready === 'true'")
        options = [
            o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "#stat option")
        ]
        assert options == ["rms", "mxfp8_e4m3_error", "nvfp4_error", "nvfp4_underflow"]

        def pick(stat: str) -> None:
            browser.execute_script(
                "const s = document.getElementById('stat'); s.value = arguments[0];"
                "s.dispatchEvent(new Event('change'));",
                stat,
            )

        pick("nvfp4_error")
        floors = browser.find_elements(By.CSS_SELECTOR, "#scale-svg line.floor")
        assert len(floors) == 2
        texts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#scale-svg text")]
        assert "NVFP4 error of Gaussian data" in texts
        assert not [x for x in texts if x.endswith(" max")]  # no range limits
        assert not browser.find_element(By.ID, "scale-legend").is_displayed()
        browser.execute_script("document.querySelector('#modules li[data-name=\"1\"]').click()")
        frame = t.to_frame()
        want = frame[(frame["name"] == "1") & ~frame["grad"]]["nvfp4_error"].item()
        cell = browser.find_element(
            By.CSS_SELECTOR, 'tr[data-series="output/value"] td[data-stat="nvfp4_error"]'
        )
        assert cell.text == _fmt(float(torch.tensor(want, dtype=torch.float32)))
        browser.find_element(By.ID, "scale-svg").screenshot(str(tmp_path / "floor.png"))
        folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
        folder.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(folder / f"report_block_formats_{size[0]}.png"))
        pick("rms")
        assert not browser.find_elements(By.CSS_SELECTOR, "#scale-svg line.floor")
        assert browser.find_element(By.ID, "scale-legend").is_displayed()  # the range formats
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        browser.set_window_size(1280, 900)
