"""Op and tap records (`track(..., ops=...)`, `tap`) on the report page and in graph_view:
rows of their own under their module in the module list, their charts and histogram
strips in the details panel and in pins, labelled by what they are ("softmax#0"), and
diagnose's findings that name an op open its row; in headless Chromium at desktop
(1440x900) and phone (390x844) sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import tensor_tracker
from examples.nanogpt import NanoGPT
from tensor_tracker import stats, track
from tensor_tracker.export._report import _owner, page
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report import highlighted
from tests.export.test_report_pages import (
    SIZES,
    _click,
    _folder,
    _no_sideways_scroll,
    _nothing_cut,
    _open,
)

ATTN = "blocks.0.attn"
SOFTMAX = "blocks.0.attn.softmax#0"


def _run(spec: Any) -> tensor_tracker.Tracker:
    """5 steps of a 2-layer GPT written op by op, its softmax, matmuls and adds recorded, and
    a tap on the first block's attention scores."""
    torch.manual_seed(0)
    model = NanoGPT(vocab=32, d_model=32, n_heads=4, n_layers=2, max_len=16)
    model.blocks[0].attn.taps = True  # taps "scores", "weights" and "mixed" in blocks.0.attn
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    kw: dict[str, Any] = {} if spec is None else {"stats": spec}
    with track(model, ops=["softmax", "matmul", "add"], **kw) as t:
        for _ in range(5):
            tokens = torch.randint(0, 32, (4, 16))
            model(tokens).logsumexp(-1).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            t.step()
    return t


@pytest.fixture(scope="module")
def statistics() -> tensor_tracker.Tracker:
    return _run(["rms", "abs_max", stats.histogram(bins=24)])


@pytest.fixture(scope="module")
def copies() -> tensor_tracker.Tracker:
    return _run(None)


def _payload(t: Any) -> dict[str, Any]:
    import json
    import re

    text = page(t, None, "ops")  # a Tracker or a Comparison
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


@pytest.mark.slow  # trains a GPT and builds its page: about 4 s alone, more beside other tests
@pytest.mark.parametrize("recorded", ["statistics", "copies"])
def test_op_and_tap_records_are_rows_under_their_module(
    recorded: str, request: pytest.FixtureRequest
) -> None:
    data = _payload(request.getfixturevalue(recorded))
    names = [m["name"] for m in data["modules"]]
    rows = {m["name"]: (i, m) for i, m in enumerate(data["modules"])}
    attn, module = rows[ATTN]
    # The attention's own children, where they ran: the qkv projection, the scores (the
    # matmul and its tap), the softmax (and its tap), the second matmul, its tap, then proj.
    inside = [n for n in names if n.startswith(ATTN + ".")]
    assert inside == [
        f"{ATTN}.qkv",
        f"{ATTN}.matmul#0",
        f"{ATTN}.scores",
        f"{ATTN}.softmax#0",
        f"{ATTN}.weights",
        f"{ATTN}.matmul#1",
        f"{ATTN}.mixed",
        f"{ATTN}.proj",
    ]
    assert names.index(ATTN) < names.index(SOFTMAX)
    at, softmax = rows[SOFTMAX]
    assert softmax == {
        "name": SOFTMAX,
        "type": "op",
        "depth": module["depth"] + 1,
        "of": attn,
        "attr": "softmax#0",
    }
    assert rows[f"{ATTN}.scores"][1]["type"] == "tap"
    assert rows["<model>.add#0"][1]["of"] == names.index("")
    # Its series: the softmax's value and gradient, with the values recorded.
    series = [s for s in data["series"] if s["module"] == at]
    assert sorted((s["kind"], s["attr"], s["grad"]) for s in series) == [
        ("op", "softmax#0", False),
        ("op", "softmax#0", True),
    ]
    assert all(s["module"] != attn or s["kind"] == "output" for s in data["series"])
    assert all("hist" in s for s in series)
    if recorded == "copies":  # the channel and sample panels have the op and tap rows too
        assert {names[r["module"]] for r in data["channels"]["rows"]} >= {SOFTMAX, f"{ATTN}.scores"}
        entries = data["samples"]["steps"]["4"]["modules"]
        assert {names[e["module"]] for e in entries} >= {SOFTMAX, f"{ATTN}.scores"}


def test_a_finding_that_names_an_op_opens_its_row() -> None:
    modules = ["", "0", "0.softmax#0", "<model>.add#0"]
    assert _owner("softmax#0 of 0", modules) == 2
    assert _owner("add#0 of <model>", modules) == 3
    assert _owner("matmul#0 of 0", modules) == 1  # not on the page: its module
    assert _owner("0 input x", modules) == 1


def _row(browser: Any, name: str) -> Any:  # noqa: F811
    return browser.find_element("css selector", f'#modules li[data-name="{name}"]')


@pytest.mark.slow
@pytest.mark.parametrize("recorded", ["statistics", "copies"])
@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_report_shows_op_rows_under_their_module(
    recorded: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By

    t = request.getfixturevalue(recorded)
    path = tensor_tracker.report(t, tmp_path / "ops.html")
    _open(browser, path, SIZES[size])
    folder = _folder(tmp_path)
    summary = browser.find_element(By.ID, "summary").text
    assert summary.startswith("25 modules, 14 ops and taps, 5 recorded steps"), summary
    # The softmax's row sits under its module's, one step further in, labelled as an op.
    names = browser.execute_script(
        "return [...document.querySelectorAll('#modules li')].map((li) => li.dataset.name)"
    )
    assert names.index(ATTN) < names.index(SOFTMAX) < names.index(f"{ATTN}.proj")
    indent = browser.execute_script(
        "return [arguments[0], arguments[1]].map((n) => parseFloat("
        'document.querySelector(`#modules li[data-name="${n}"]`).style.paddingLeft))',
        ATTN,
        SOFTMAX,
    )
    assert indent[1] > indent[0]
    if size == "phone":
        _click(browser, browser.find_element(By.ID, "menu"))
    _click(browser, _row(browser, SOFTMAX))
    title = browser.find_element(By.ID, "panel-title").text
    assert title.startswith(f"softmax#0 of {ATTN} (op)")
    # Its chart: the softmax's value and its gradient (dashed), at the values recorded.
    lines = browser.execute_script("return cardLines(state.module).map((l) => [l.label, !!l.dash])")
    assert lines == [["softmax#0 value", False], ["softmax#0 gradient", True]]
    # The softmax's rms at each step: recorded, or computed here from the copies.
    rms = [
        s.first_value["rms"] if recorded == "statistics" else s.first_value.square().mean().sqrt()
        for s in t
        if (s.name, s.kind, s.attr, s.grad) == (ATTN, "op", "softmax#0", False)
    ]
    shown = browser.execute_script("return [...floats(seriesOf[state.module][0].stats.rms)]")
    assert shown == pytest.approx([float(v) for v in rms], rel=1e-6)
    strips = browser.find_elements(By.CSS_SELECTOR, "#panel .strip .strip-label")
    assert [s.text.split(":")[0] for s in strips] == ["softmax#0 value", "softmax#0 gradient"]
    # From the op to its module and back: the panel links them.
    links = browser.find_elements(By.CSS_SELECTOR, "#panel .family a")
    assert [a.text for a in links] == [ATTN]
    if recorded == "copies":  # its samples, [batch, heads, rows, keys]: 4 heads
        label = browser.find_element(By.ID, "sample-values-label").get_attribute("textContent")
        assert label.endswith("4 channels"), label
        rows = browser.execute_script("return DATA.channels.rows.map((r) => r.module)")
        assert (
            browser.execute_script(
                "return DATA.modules.findIndex((m) => m.name === arguments[0])", SOFTMAX
            )
            in rows
        )
        # Its label in the channel map, shortened to the room a phone leaves, says "softmax".
        labels = browser.execute_script(
            "const at = DATA.modules.findIndex((m) => m.name === arguments[0]);"
            "return [400, 120].map((px) => shortModuleName(at, px, CH_FONT))",
            SOFTMAX,
        )
        assert labels[0] == f"softmax#0 of {ATTN}"
        assert labels[1].startswith("\u2026") and labels[1].endswith(".attn.softmax#0")
    _nothing_cut(browser)
    browser.save_screenshot(str(folder / f"ops-softmax-{recorded}-{size}.png"))
    _click(browser, links[0])
    children = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#panel .family a")]
    assert children[:3] == ["matmul#0 (op)", "scores (tap)", "softmax#0 (op)"]
    # A pin keeps the op's charts on the page.
    browser.execute_script(
        "togglePin(DATA.modules.findIndex((m) => m.name === arguments[0]))", SOFTMAX
    )
    card = browser.find_element(By.CSS_SELECTOR, f'#pins .card[data-module="{SOFTMAX}"]')
    assert card.find_element(By.TAG_NAME, "h3").text.startswith("softmax#0 of")
    assert len(card.find_elements(By.CSS_SELECTOR, ".strip")) == 2
    browser.execute_script("arguments[0].scrollIntoView()", card)
    browser.save_screenshot(str(folder / f"ops-pin-{recorded}-{size}.png"))
    assert console_errors(browser) == []
    _no_sideways_scroll(browser)


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_a_finding_on_a_softmax_opens_it_in_the_report_and_the_graph_view(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By

    from tests.data.test_op_records import _model, _x

    model = _model()
    model[0].masked = [2]  # a query row that sees no key: its softmax is NaN
    with track(model, ops=["softmax", "matmul"], stats=True) as t:
        for _ in range(3):
            model(_x()).sum().backward()
            t.step()
    graph = tensor_tracker.module_graph(model, _x())
    _open(browser, tensor_tracker.report(t, tmp_path / "nan.html", graph=graph), SIZES[size])
    finding = browser.find_element(By.CSS_SELECTOR, "#verdict li.finding")
    assert finding.get_attribute("data-module") == "0.softmax#0"
    _click(browser, finding.find_element(By.TAG_NAME, "a"))
    assert browser.find_element(By.ID, "panel-title").text.startswith("softmax#0 of 0 (op)")
    # The graph has no node for an op: its module's is picked, and marked when it is pinned.
    assert highlighted(browser)["selected"] == {"0#0"}
    browser.execute_script("togglePin(DATA.modules.findIndex((m) => m.name === '0.softmax#0'))")
    pinned = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node.pinned")
    assert [n.get_attribute("data-id") for n in pinned] == ["0#0"]
    browser.save_screenshot(str(_folder(tmp_path) / f"ops-pinned-graph-{size}.png"))
    assert console_errors(browser) == []

    # graph_view: the module's node opens the module, whose panel links to its ops.
    view = tensor_tracker.graph_view(graph, t).save(tmp_path / "graph.html")
    _open(browser, view, SIZES[size])
    _click(browser, browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="0#0"]'))
    links = browser.find_elements(By.CSS_SELECTOR, "#panel .family a")
    assert [a.text for a in links] == ["matmul#0 (op)", "softmax#0 (op)", "matmul#1 (op)"]
    _click(browser, links[1])
    assert browser.find_element(By.ID, "panel-title").text.startswith("softmax#0 of 0 (op)")
    assert highlighted(browser)["selected"] == {"0#0"}
    lines = browser.execute_script("return cardLines(state.module).map((l) => l.label)")
    assert lines == ["softmax#0 value", "softmax#0 gradient"]
    browser.save_screenshot(str(_folder(tmp_path) / f"ops-graph-view-{size}.png"))
    assert console_errors(browser) == []
    _no_sideways_scroll(browser)


def test_the_page_of_a_comparison_gives_op_rows_their_errors() -> None:
    from tests.data.test_op_records import _model, _x

    runs = []
    for temperature in (1.0, 1.5):
        model = _model()
        model[0].temperature = temperature
        with track(model, ops=["softmax", "matmul"], stats=True) as t:
            model(_x()).sum().backward()
        runs.append(t)
    comparison = tensor_tracker.compare(runs[0], runs[1])
    data = _payload(comparison)
    row = [m["name"] for m in data["modules"]].index("0.softmax#0")
    at = [k for k, s in enumerate(data["series"]) if s["module"] == row]
    forward = next(k for k in at if not data["series"][k]["grad"])
    errors = data["compare"]["series"][forward]
    want = next(
        r
        for r in comparison.to_frame().itertuples()
        if (r.name, r.attr, r.grad) == ("0", "softmax#0", False)
    )
    assert errors["status"] == [2]
    assert errors["error"] == [pytest.approx(getattr(want, comparison.error_column))]
    # Run b's values beside run a's: its softmax, not its module's output.
    b = data["compare"]["series"][forward]["b"]
    assert b is not None and b.keys() == data["series"][forward]["stats"].keys()
