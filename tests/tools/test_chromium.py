"""Issue #35 item 19: the browser tests make no network attempt. The browser and its driver
are passed by path, Selenium Manager never runs, and a page's requests to anything but
this machine fail in the browser, never reaching the network."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from tests.browser import browser, wait_for  # noqa: F401 (a fixture)
from tools.chromium import BLOCKED, CHROMEDRIVER, CHROMIUM, offline_chromium

pytestmark = pytest.mark.slow

# Outside addresses by name and by number (a number needs no name resolution).
OUTSIDE = ("http://example.com/tt-probe.png", "http://93.184.215.14/tt-probe.png")
PAGE = """<!doctype html><html><body><img id="local" src="local.png">
<script>
window.results = {};
const outside = %s;
for (const url of outside) {
  const img = new Image();
  img.onload = () => { window.results[url] = "loaded"; };
  img.onerror = () => { window.results[url] = "failed"; };
  img.src = url;
}
fetch(outside[0] + "?fetch").then(() => { window.results.fetch = "loaded"; },
                                   () => { window.results.fetch = "failed"; });
</script></body></html>"""
# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@pytest.fixture(scope="module")
def local_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A page on 127.0.0.1 (a free port) that asks for one local and some outside images."""
    root = tmp_path_factory.mktemp("site")
    (root / "index.html").write_text(PAGE % repr(list(OUTSIDE)).replace("'", '"'))
    (root / "local.png").write_bytes(PNG)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()


def test_the_browser_and_driver_are_passed_by_path_and_selenium_manager_never_runs(
    browser: Any,  # noqa: F811
) -> None:
    assert os.environ.get("SE_AVOID_STATS") == "true"
    assert browser.service.path == str(CHROMEDRIVER)
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    # Starting one more while Selenium Manager would fail the test if it ran at all.
    with mock.patch.object(SeleniumManager, "binary_paths", side_effect=AssertionError) as run:
        offline_chromium(320, 240).quit()
    assert not run.called
    assert CHROMIUM.is_file()


def test_no_request_leaves_the_machine(browser: Any, local_site: str) -> None:  # noqa: F811
    browser.get_log("browser")  # drop earlier entries
    browser.get(local_site)
    results = wait_for(
        browser,
        f"return Object.keys(window.results).length === {len(OUTSIDE) + 1} && window.results",
    )
    assert results == {**dict.fromkeys(OUTSIDE, "failed"), "fetch": "failed"}
    assert browser.execute_script("return document.getElementById('local').naturalWidth") == 1
    # Each failed in the browser, at the proxy that does not exist: not at a network that
    # happened to be unreachable from here.
    log = " ".join(e["message"] for e in browser.get_log("browser"))
    assert log.count(BLOCKED) >= len(OUTSIDE), log
    # What the page fetched, as the browser counts it: only this machine, or blocked.
    names = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => [e.name, e.transferSize])"
    )
    outside = [n for n, size in names if not n.startswith("http://127.0.0.1:")]
    assert all(size == 0 for n, size in names if n in outside), names
