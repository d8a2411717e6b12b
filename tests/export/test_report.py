"""`report`: the self-contained HTML page, opened from disk in headless Chromium; assertions
on what the page shows against what was recorded; no network request."""

from __future__ import annotations

import json
import math
import os
import re
import signal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import track
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.browser import wait_for as _wait


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


def _f32(value: float) -> float:
    return float(torch.tensor(value, dtype=torch.float32))


def _table_fmt(values: list[float]) -> Any:
    """The page's number format for a table of `values` (float32, as the page holds them):
    4 significant digits, scientific for every cell when one needs it."""
    sizes = [abs(_f32(v)) for v in values if math.isfinite(v) and v != 0]
    sci = any(v < 1e-3 or v >= 1e5 for v in sizes)

    def fmt(value: float) -> str:
        value = _f32(value)
        if not sci or not math.isfinite(value) or value == 0:
            return _fmt(value) if value != 0 else "0"
        mantissa, exponent = f"{value:.3e}".split("e")
        return f"{mantissa}e{'+' if int(exponent) >= 0 else '-'}{abs(int(exponent))}"

    return fmt


@pytest.mark.slow
def test_the_report_shows_what_was_recorded(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    t = _run()
    page = tensor_tracker.report(t, tmp_path / "run.html")
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # nothing to fetch
    browser.get(page.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    frame = t.to_frame()
    modules = list(dict.fromkeys(frame["name"]))
    items = browser.find_elements(By.CSS_SELECTOR, "#modules li")
    assert [i.get_attribute("data-name") for i in items] == ["", "0", "1", "2", "3", "4"]
    assert set(modules) == {"", "0", "1", "2", "3", "4"}  # the model first, then in order

    # Open the panel of one module: a row per recorded series, a line for each in the
    # chart over the steps, and a histogram strip each.
    browser.find_element(By.CSS_SELECTOR, '#modules li[data-name="2"]').click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#panel tr.series-row")
    expected = {
        "output/value",
        "output/grad",
        "param.weight/value",
        "param.bias/value",
        "param.weight/grad",
        "param.bias/grad",
    }
    assert {r.get_attribute("data-series") for r in rows} == expected
    chart = browser.find_element(By.CSS_SELECTOR, "#panel .series-chart")
    assert chart.get_attribute("data-lines") == "6"
    strips = browser.find_elements(By.CSS_SELECTOR, "#panel .strip")
    assert {s.get_attribute("data-series") for s in strips} == expected
    assert len(browser.find_elements(By.CSS_SELECTOR, "#panel canvas.histogram")) == 6

    # The slider picks the step; the table shows the recorded values of that step.
    for step in (0, 13, 19):
        browser.execute_script(
            "const s = document.getElementById('step'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('input'));",
            step,
        )
        # The slider redraws on the next animation frame (coalescing fast drags), and
        # drawStep sets the label and the table in one task: once the label shows the
        # step, the table does too.
        _wait(browser, f"return document.getElementById('step-value').textContent === '{step}'")
        rows = frame[(frame["name"] == "2") & (frame["step"] == step)]
        shown = ["rms", "abs_max", "std", "mean", "min", "max"]
        means = rows.groupby(["kind", "attr", "grad"])[shown].mean()
        fmt = _table_fmt(means.to_numpy().ravel().tolist())
        for key, grad in (("output/value", False), ("output/grad", True)):
            want = means.loc[("output", "", grad), "rms"]
            cell = browser.find_element(
                By.CSS_SELECTOR, f'tr[data-series="{key}"] td[data-stat="rms"]'
            )
            assert cell.text == fmt(want), key
        # Every module's output and gradient is a point of the scale chart.
        points = browser.execute_script(
            "return scalePlot.data[1].concat(scalePlot.data[2]).filter((v) => v !== null).length"
        )
        assert points == 2 * len(modules)

    notes = [n.text for n in browser.find_elements(By.CSS_SELECTOR, "#notes li")]
    assert notes == ["step 10: half way"]
    kpi = browser.find_element(By.CSS_SELECTOR, '.kpi[data-name="loss"]')
    assert kpi.get_attribute("data-points") == "20"
    assert browser.execute_script(
        "return [...charts].filter((u) => u.root.closest('.kpi')).map((u) => u.data[0].length)"
    ) == [20]
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], (
        "errors in the page's console"
    )
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_the_page_holds_each_histogram_from_its_first_filled_bin_to_its_last(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    """The page keeps a series' histograms over the bins it filled only (the rest are
    empty at every step); spread back over every bin, they are the recorded counts scaled
    to the step's largest bin."""
    import base64

    from tensor_tracker.export._report import page

    t = _run()
    text = page(t, None, "t")
    data = json.loads(re.search(r'<script id="data" [^>]*>(.*?)</script>', text, re.S)[1])
    bins = data["hist"]["bins"]
    frame = t.to_frame()
    trimmed = 0
    for s in data["series"]:
        name = data["modules"][s["module"]]["name"]
        rows = frame[(frame["name"] == name) & (frame["kind"] == s["kind"])]
        rows = rows[(rows["attr"] == s["attr"]) & (rows["grad"] == s["grad"])]
        recorded = torch.tensor([list(c) for c in rows["hist"]], dtype=torch.float64)
        expected = (255 * recorded / recorded.amax(dim=1, keepdim=True)).round()
        kept = torch.tensor(list(base64.b64decode(s["hist"]["counts"])), dtype=torch.float64)
        kept = kept.reshape(len(s["hist"]["steps"]), -1)
        first, width = s["hist"]["first"], kept.shape[1]
        assert torch.equal(kept, expected[:, first : first + width])
        assert not expected[:, :first].any() and not expected[:, first + width :].any()
        trimmed += width < bins
    assert trimmed > 0
    # The page spreads them back over every bin.
    path = tmp_path / "report.html"
    path.write_text(text)
    browser.get(path.as_uri())
    _wait(browser, "return document.body.dataset.ready === 'true'")
    s = data["series"][0]
    spread = browser.execute_script(f"return Array.from(histCounts(DATA.series[0].hist, {bins}))")
    kept = list(base64.b64decode(s["hist"]["counts"]))
    width = len(kept) // len(s["hist"]["steps"])
    assert spread[:bins] == [0] * s["hist"]["first"] + kept[:width] + [0] * (
        bins - s["hist"]["first"] - width
    )


def test_view_command_writes_the_report_of_a_recording(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from tensor_tracker.__main__ import main

    t = _run()
    t.save(tmp_path / "run")
    assert main(["view", str(tmp_path / "run"), "--no-open"]) == 0
    page = (tmp_path / "run" / "report.html").read_text()
    assert '"title":"run"' in page and "half way" in page


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_view_refuses_a_report_html_planted_in_the_recording(
    tmp_path: Path, planted: str, capsys: Any
) -> None:
    # Issue 35, items 8 and 15: no write through a planted link, no wait on a FIFO, the
    # message alone (no traceback) and a non-zero exit; --debug shows the traceback.
    pytest.importorskip("pyarrow")
    from tensor_tracker.__main__ import main

    _run().save(tmp_path / "run")
    victim = tmp_path / "bashrc"
    victim.write_text("precious")
    if planted == "symlink":
        (tmp_path / "run" / "report.html").symlink_to(victim)
    else:
        os.mkfifo(tmp_path / "run" / "report.html")

    def blocked(signum: int, frame: object) -> None:
        raise TimeoutError("view blocked on the FIFO")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(30)
    try:
        assert main(["view", str(tmp_path / "run"), "--no-open"]) == 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out = capsys.readouterr()
    assert out.err.startswith("error: report(recording, path): ") and "remove it" in out.err
    assert "Traceback" not in out.err and out.out == ""
    assert victim.read_text() == "precious"
    with pytest.raises(tensor_tracker.errors.FileWriteError):
        main(["view", str(tmp_path / "run"), "--no-open", "--debug"])


def test_view_prints_a_load_error_as_its_message(tmp_path: Path, capsys: Any) -> None:
    from tensor_tracker.__main__ import main

    assert main(["view", str(tmp_path / "nothing"), "--no-open"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a recording directory" in err
    assert "Traceback" not in err


def test_names_with_lone_surrogates_reach_the_report(tmp_path: Path) -> None:
    # Issue 35, item 15: a module, a scalar and a note named with a lone surrogate.
    model = nn.Sequential()
    model.add_module("layer\udcff", nn.Linear(2, 2))
    with track(model, stats=True) as t:
        model(torch.randn(3, 2)).sum().backward()
        t.log("loss\udcff", 1.0)
        t.note("note \ud800")
        t.step()
    assert t.to_frame()["name"].tolist()[0] == "layer\\udcff"
    assert t.log_frame()["name"].tolist()[0] == "loss\\udcff"
    page = tensor_tracker.report(t, tmp_path / "r.html").read_text()
    # The module as the frame has it; the scalar and the note as JSON escapes, exactly.
    for text in ("layer\\udcff", "loss\udcff", "note \ud800"):
        assert json.dumps(text)[1:-1] in page


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
    node = browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="0#0"]')
    text = node.get_attribute("data-tooltip")
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
    assert {"node", "group"} <= set(box.get_attribute("class").split())
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


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_statistic_picker_holds_block_formats(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: tuple[int, int],
) -> None:
    """Issue #30: recorded block-format statistics are in the picker; under an error the
    scale chart's y range holds the format's floor (its error on Gaussian data) and twice
    that, drawn instead of the range limits, whose legend is hidden."""
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
        assert sorted(options) == sorted(names)

        def pick(stat: str) -> None:
            browser.execute_script(
                "const s = document.getElementById('stat'); s.value = arguments[0];"
                "s.dispatchEvent(new Event('change'));",
                stat,
            )

        pick("nvfp4_error")
        floor = tensor_tracker.stats.formats.BLOCK_FORMATS["nvfp4"].gaussian_error
        low, high = browser.execute_script(
            "return [scalePlot.scales.y.min, scalePlot.scales.y.max]"
        )
        assert low <= math.log2(floor) and math.log2(2 * floor) <= high
        assert not browser.find_element(By.ID, "scale-legend").is_displayed()
        folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
        folder.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(folder / f"report_block_formats_{size[0]}.png"))
        pick("rms")
        assert browser.find_element(By.ID, "scale-legend").is_displayed()  # the range formats
        assert not console_errors(browser)
    finally:
        browser.set_window_size(1280, 900)


# Issue #26 item 10: recorded strings and titles that look like HTML or like the page's
# own placeholders are shown as they are, and the page still runs.
_HOSTILE = "<!--<script> </script><b>x</b> __DATA__ __TITLE__ & \u2028 end"


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_a_page_shows_html_like_notes_and_titles_as_text(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: tuple[int, int],
) -> None:
    from selenium.webdriver.common.by import By

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with track(model, stats=True) as t:
        model(torch.randn(2, 4)).sum().backward()
        t.note(_HOSTILE)
        t.log(_HOSTILE, 1.0)
        t.step()
    graph = tensor_tracker.module_graph(model, torch.randn(2, 4))
    pages = {
        "report": tensor_tracker.report(t, tmp_path / "report.html", title=_HOSTILE),
        "graph": tensor_tracker.graph_view(graph, t, title=_HOSTILE).save(tmp_path / "g.html"),
    }
    browser.set_window_size(*size)
    for kind, path in pages.items():
        console_errors(browser)  # forget earlier pages' messages
        browser.get(path.as_uri())
        _wait(browser, "return document.body.dataset.ready === 'true'")
        assert browser.title == _HOSTILE, kind
        assert browser.find_element(By.ID, "title").get_attribute("textContent") == _HOSTILE
        assert browser.execute_script("return DATA.title") == _HOSTILE
        if kind == "report":
            notes = browser.find_elements(By.CSS_SELECTOR, "#notes li")
            assert [n.get_attribute("textContent") for n in notes] == [f"step 0: {_HOSTILE}"]
        assert console_errors(browser) == [], kind
        text = path.read_text()
        assert "<!--<script>" not in text and '"__DATA__' not in text
        browser.save_screenshot(str(tmp_path / f"{kind}-{size[0]}.png"))
    browser.set_window_size(1280, 900)
