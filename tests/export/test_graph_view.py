"""`graph_view`: the module graph as a page in a sandboxed frame, checked as a
notebook shows it (the frame inside a host page) in headless Chromium."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker.export import GraphView, graph_view
from tests import graph_models
from tests.browser import browser, console_errors  # noqa: F401 (a fixture)
from tests.export.test_report import _run, _table_fmt, _wait, highlighted, node_ids


def _graph() -> tensor_tracker.ModuleGraph:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)
    )
    return tensor_tracker.module_graph(model, torch.randn(32, 8))


def _host(tmp_path: Path, view: GraphView) -> str:
    """A page that holds the view's notebook output, as JupyterLab does."""
    path = tmp_path / "notebook.html"
    path.write_text(
        f"<html><body><div style='width: 900px'>{view._repr_html_()}</div></body></html>"
    )
    return path.as_uri()


def test_the_notebook_output_is_the_page_in_a_sandboxed_frame(tmp_path: Path) -> None:
    view = graph_view(_graph(), height=420)
    output = view._repr_html_()
    frame = re.fullmatch(r'<iframe class="tensor-tracker-graph" ([^>]*)></iframe>', output)
    assert frame is not None, output[:200]
    attributes = dict(re.findall(r'(\w+)="([^"]*)"', frame.group(1)))
    assert attributes["sandbox"] == "allow-scripts"  # no access to the notebook's page
    assert "height: 420px" in attributes["style"]
    assert html.unescape(attributes["srcdoc"]) == view.html
    # Self-contained: nothing to fetch, every request forbidden.
    assert "default-src 'none'" in view.html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", view.html)
    assert view.save(tmp_path / "graph.html").read_text() == view.html


def test_the_graph_view_leaves_out_what_it_does_not_show() -> None:
    """Full copies: the report's sample panel (every sample's values) and its logged
    scalars' charts are not in the graph view, which shows neither; its notes stay (they
    mark the step charts)."""
    import json

    from tests.helpers import tiny_model

    model = tiny_model()
    tokens = torch.randint(0, 16, (8, 12), generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model) as t:
        for step in range(2):
            model(tokens).square().mean().backward()
            t.log("loss", float(step))
            t.note("a note")
            t.step()
    graph = tensor_tracker.module_graph(model, tokens)
    report = tensor_tracker.export._report.page(t, graph, "t")
    view = graph_view(graph, t).html

    def data(text: str) -> Any:
        return json.loads(re.search(r'<script id="data" [^>]*>(.*?)</script>', text, re.S)[1])

    assert data(report)["samples"] is not None and data(report)["log"]["scalars"]
    assert data(view)["samples"] is None and data(view)["log"]["scalars"] == {}
    assert data(view)["log"]["notes"] == data(report)["log"]["notes"]
    assert data(view)["series"] == data(report)["series"]
    assert len(view) < len(report) / 3  # the samples were most of the report


def test_graph_view_checks_its_arguments() -> None:
    graph = _graph()
    with pytest.raises(TypeError, match=r"graph must be a tensor_tracker\.module_graph"):
        graph_view("model")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="height= must be an int"):
        graph_view(graph, height=300.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="height= must be at least 200"):
        graph_view(graph, height=100)
    with pytest.raises(TypeError, match="pass a Tracker"):
        graph_view(graph, [1])
    with pytest.raises(TypeError, match="got neither"):
        tensor_tracker.report(None, "x.html")


@pytest.mark.slow
def test_the_graph_view_shows_a_nodes_facts_and_statistics(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    t = _run()  # the same model as _graph's, trained 20 steps with statistics
    view = graph_view(_graph(), t)
    console_errors(browser)
    browser.get(_host(tmp_path, view))
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe.tensor-tracker-graph"))
    _wait(browser, "return document.body.dataset.ready === 'true'")
    assert node_ids(browser) == [
        "<model>#0/input",
        "0#0",
        "1#0",
        "2#0",
        "3#0",
        "4#0",
        "<model>#0/output",
    ]
    # Only the graph and the details: no module list, scale plot or logged scalars.
    for hidden in ("aside", "#scale", "#kpis"):
        assert not browser.find_element(By.CSS_SELECTOR, hidden).is_displayed(), hidden
    assert browser.find_element(By.ID, "panel-title").text == "Pick a node in the graph"

    browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="2#0"]').click()
    facts = browser.find_element(By.ID, "node-facts").text
    assert "[32, 16] float32" in facts and "in_features 16" in facts and "272" in facts, facts
    assert highlighted(browser) == {
        "selected": {"2#0"},
        "ancestor": {"<model>#0/input", "0#0", "1#0"},
        "descendant": {"3#0", "4#0", "<model>#0/output"},
    }
    # Its statistics at the last step, as recorded (a column per series).
    frame = t.to_frame()
    last = frame[(frame["name"] == "2") & (frame["step"] == 19)]
    means = last.groupby(["kind", "attr", "grad"])[
        ["rms", "abs_max", "std", "mean", "min", "max"]
    ].mean()
    fmt = _table_fmt(means.to_numpy().ravel().tolist())
    for grad, series in ((False, "output/value"), (True, "output/grad")):
        expected = float(means.loc[("output", "", grad), "rms"])
        cell = browser.find_element(
            By.CSS_SELECTOR, f'#panel td[data-stat="rms"][data-series="{series}"]'
        )
        assert cell.text == fmt(expected), series
    assert browser.find_elements(By.CSS_SELECTOR, "#panel .series-chart .u-over")
    assert browser.find_elements(By.CSS_SELECTOR, "#panel canvas.histogram")

    # A placeholder has facts but no statistics.
    browser.find_element(By.CSS_SELECTOR, '#graph-svg g.node[data-id="<model>#0/input"]').click()
    assert "[32, 8] float32" in browser.find_element(By.ID, "node-facts").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#panel td")
    # The page fits its frame: nothing wider than the frame, no scroll bar on the page.
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= innerWidth"
        " && document.documentElement.scrollHeight <= innerHeight"
    )
    browser.switch_to.default_content()
    browser.save_screenshot(str(tmp_path / "graph_view.png"))
    assert console_errors(browser) == []


@pytest.mark.slow
def test_a_graph_alone_and_a_grouped_level(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(12)])
    graph = tensor_tracker.module_graph(model, torch.randn(2, 4), max_nodes=5)
    browser.get(_host(tmp_path, graph_view(graph)))
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe.tensor-tracker-graph"))
    _wait(browser, "return document.body.dataset.ready === 'true'")
    # Nothing recorded: no step slider or statistic picker, and the page says so.
    assert not browser.find_element(By.ID, "step").is_displayed()
    assert "nothing recorded" in browser.find_element(By.ID, "summary").text
    # The grouped level is explained above the graph.
    notes = browser.find_element(By.ID, "graph-notes").text
    assert notes and "group" in notes, notes
    groups = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node.group")
    assert len(groups) >= 2
    groups[0].click()
    heading = browser.find_element(By.CSS_SELECTOR, "#node-info h2").text
    assert "Linear \u00d7" in heading and "+ opens the group" in heading, heading
    assert "parameters" in browser.find_element(By.ID, "node-facts").text
    browser.switch_to.default_content()


@pytest.mark.parametrize(
    ("builder", "block", "residual"),
    [
        (graph_models.resnet, "1#0", ("1#0/input", "1.relu#1")),
        (graph_models.transformer, "layers.0#0", ("layers.0#0/input", "layers.0.norm1#0")),
    ],
)
@pytest.mark.slow
def test_screenshots_of_a_block_with_its_residual(
    builder: Any,
    block: str,
    residual: tuple[str, str],
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    """A ResNet block and a transformer layer opened in the view: the skip connection is
    drawn, bent beside the nodes it passes. The screenshots go to the test's folder, or to
    `$TT_SCREENSHOTS` (doc/images/graphs has them)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    model, args, kwargs = builder()
    graph = tensor_tracker.module_graph(model, *args, **kwargs)
    browser.get(_host(tmp_path, graph_view(graph, height=640)))
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe.tensor-tracker-graph"))
    _wait(browser, "return document.body.dataset.ready === 'true'")
    browser.find_element(By.CSS_SELECTOR, f'#graph-svg text[data-expand="{block}"]').click()
    source, target = residual
    edge = browser.find_element(
        By.CSS_SELECTOR, f'#graph-svg .edge[data-source="{source}"][data-target="{target}"]'
    )
    assert " C" in edge.get_attribute("d")  # bent: it skips layers
    children = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node")
    browser.find_element(
        By.CSS_SELECTOR, f'#graph-svg g.node[data-id="{children[2].get_attribute("data-id")}"]'
    ).click()
    browser.switch_to.default_content()
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    frame = browser.find_element(By.CSS_SELECTOR, "iframe.tensor-tracker-graph")
    # The mouse off the node (onto the frame's header), so that no tip hides the graph.
    corner = (4 - frame.size["width"] // 2, 4 - frame.size["height"] // 2)
    ActionChains(browser).move_to_element_with_offset(frame, *corner).perform()
    frame.screenshot(str(folder / f"{builder.__name__}_block.png"))
