"""The module graph of a GPT-2 (built offline from `GPT2Config`, 4 layers) in the report and
the graph view, in headless Chromium at 1440x900 and 390x844: the blocks in a straight
column with no edge crossing another or passing over a node (the KV cache's edges, which
skip over blocks, behind a toggle), the graph following a module picked in the list, the
graph view's frame as tall as the graph; and the note on inputs with no autograd path
folded. Screenshots go to the test's folder, or to `$TT_SCREENSHOTS`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

import tensor_tracker as tt
from tests.browser import browser, console_errors, wait_for  # noqa: F401  (the fixture)
from tests.graph_models import DRAWN, measure

pytestmark = pytest.mark.slow

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
LEVEL = "transformer#0"
BLOCKS = [f"transformer.h.{i}#0" for i in range(4)]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_head=2, n_embd=32, vocab_size=100, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    graph = tt.module_graph(model, ids, attention_mask=mask)
    with tt.track(model, stats=True) as t:
        model(ids, attention_mask=mask)
        t.step()
    folder = tmp_path_factory.mktemp("gpt2")
    view = tt.graph_view(graph, t)
    # The notebook's output inside a page, as JupyterLab shows it (its script runs).
    host = folder / "notebook.html"
    host.write_text(
        f"<html><body><div style='width: 95vw'>{view._repr_html_()}</div></body></html>"
    )
    return {
        "report": tt.report(t, folder / "report.html", graph=graph),
        "graph": view.save(folder / "graph.html"),
        "notebook": host,
    }


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TT_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser: Any, path: Path, size: tuple[int, int]) -> None:  # noqa: F811
    browser.set_window_size(*size)
    console_errors(browser)
    browser.get(path.as_uri())
    wait_for(browser, "return document.body.dataset.ready === 'true'")


# The drawing as drawn: each edge its path sampled every 4 pixels, each node a box (its
# centre, width and height).
def _open_level(browser: Any) -> None:  # noqa: F811
    plus = browser.find_element("css selector", f'#graph-svg text.expand[data-expand="{LEVEL}"]')
    browser.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", plus
    )
    wait_for(browser, f"return document.getElementById('graph-svg').dataset.level === '{LEVEL}'")


@pytest.mark.parametrize("size", list(SIZES))
def test_gpt2_blocks_in_a_column_with_the_cache_behind_a_toggle(
    size: str,
    gpt2: dict[str, Path],
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    _open(browser, gpt2["report"], SIZES[size])
    _open_level(browser)
    drawn = browser.execute_script(DRAWN)
    xs = {round(drawn["nodes"][b]["x"]) for b in BLOCKS}
    assert len(xs) == 1, f"blocks not in one column: {xs}"
    ys = [drawn["nodes"][b]["y"] for b in BLOCKS]
    assert ys == sorted(ys)
    counts = measure(drawn)
    assert counts["crossings"] == 0 and counts["over_boxes"] == 0, counts
    # Each box as wide as its label in this browser's font: no label cut.
    labels = browser.execute_script(
        "return [...document.querySelectorAll('#graph-svg g.node > text')].map((t) => t.textContent)"
    )
    assert len(labels) == 10 and not [t for t in labels if "\u2026" in t], labels
    # The cache's edges (every block reads the blocks before) behind the toggle.
    toggle = browser.find_element("id", "graph-reused")
    assert toggle.is_displayed() and "skip over repeated blocks" in toggle.text
    hidden = int(toggle.text.split("show the ")[1].split(" ")[0])
    assert hidden >= 3
    _folder(tmp_path).joinpath(f"gpt2-{size}.txt").write_text(f"{counts} hidden={hidden}\n")
    browser.save_screenshot(str(_folder(tmp_path) / f"gpt2-{size}.png"))
    browser.find_element("id", "graph-reused-box").click()
    wait_for(browser, "return document.querySelectorAll('#graph-svg path.edge.reused').length")
    shown = measure(browser.execute_script(DRAWN))
    assert shown["edges"] == counts["edges"] + hidden
    _folder(tmp_path).joinpath(f"gpt2-{size}.txt").write_text(f"hidden: {counts} shown: {shown}\n")
    browser.save_screenshot(str(_folder(tmp_path) / f"gpt2-{size}-all-edges.png"))
    assert browser.execute_script("return document.scrollingElement.scrollWidth <= innerWidth")
    assert console_errors(browser) == []


@pytest.mark.parametrize("size", list(SIZES))
def test_the_graph_follows_a_module_picked_in_the_list(
    size: str,
    gpt2: dict[str, Path],
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    _open(browser, gpt2["report"], SIZES[size])
    name = "transformer.h.3.mlp.c_proj"
    if size == "phone":
        browser.find_element("id", "menu").click()
    item = browser.find_element("css selector", f'#modules li[data-name="{name}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", item)
    label = item.find_element("css selector", ".name")
    # On a phone the list is a drawer that slides in: clicked mid-slide, the label is not
    # interactable yet (seen once in CI).
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(expected_conditions.element_to_be_clickable(label))
    label.click()
    wait_for(
        browser,
        f"return document.querySelector('#graph-svg g.node.selected')?.dataset.id === '{name}#0'",
    )
    assert browser.execute_script("return graphState.level") == "transformer.h.3.mlp#0"
    # Centred in the graph's box: the node's box lies inside the box's visible part.
    inside = browser.execute_script(
        "const g = document.querySelector('#graph-svg g.node.selected rect').getBoundingClientRect();"
        "const b = document.getElementById('graph').getBoundingClientRect();"
        "return g.left >= b.left && g.right <= b.right && g.top >= b.top && g.bottom <= b.bottom;"
    )
    assert inside
    browser.save_screenshot(str(_folder(tmp_path) / f"gpt2-follow-{size}.png"))
    assert console_errors(browser) == []


_FRAME = """
const f = document.querySelector('iframe.tensor-tracker-graph');
return f.getBoundingClientRect().height;
"""
# Inside the frame: the graph's box shows the whole drawing (nothing to scroll to).
_WHOLE = "const b = document.getElementById('graph'); return b.scrollHeight <= b.clientHeight + 1;"


@pytest.mark.parametrize("size", list(SIZES))
def test_the_graph_view_frame_is_as_tall_as_the_graph(
    size: str,
    gpt2: dict[str, Path],
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    browser.set_window_size(*SIZES[size])
    console_errors(browser)
    browser.get(gpt2["notebook"].as_uri())
    frame = browser.find_element("css selector", "iframe.tensor-tracker-graph")
    browser.switch_to.frame(frame)
    try:
        wait_for(browser, "return document.body.dataset.ready === 'true'")
        assert browser.execute_script(_WHOLE)
        _open_level(browser)  # 10 layers: taller than the frame it opened in
        wait_for(browser, _WHOLE)
        browser.switch_to.default_content()
        tall = browser.execute_script(_FRAME)
        assert tall > 560
        browser.save_screenshot(str(_folder(tmp_path) / f"gpt2-graph_view-{size}.png"))
        browser.switch_to.frame(frame)
        browser.find_element("css selector", "#graph-crumbs a").click()  # back up: shorter
        browser.switch_to.default_content()
        wait_for(
            browser,
            "return document.querySelector('iframe.tensor-tracker-graph')"
            f".getBoundingClientRect().height < {tall}",
        )
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


class _Gated(torch.nn.Module):
    """`b` reads a mask made from a comparison: an input with no autograd path."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) * self.b((x > 0).float())


@pytest.mark.parametrize("size", list(SIZES))
def test_the_note_on_inputs_with_no_autograd_path_is_folded(
    size: str,
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    graph = tt.module_graph(_Gated(), torch.randn(4, 8))
    assert graph.disconnected
    _open(browser, tt.report(None, tmp_path / "gated.html", graph=graph), SIZES[size])
    notes = browser.find_element("id", "graph-notes")
    details = notes.find_element("css selector", "details")
    assert details.get_attribute("open") is None
    assert notes.text == "1 input with no autograd path (not drawn)"
    details.find_element("css selector", "summary").click()
    assert "input 0 of b#0" in notes.text and "masks" in notes.text
    assert console_errors(browser) == []
