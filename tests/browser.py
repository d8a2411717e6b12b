"""A headless Chromium for the tests that check pages in a real browser (Debian's chromium
and chromium-driver, driven by Selenium), offline: passed by path, Selenium Manager never
run, no request leaving the machine (`tools/chromium.py`). Without them the tests skip and
say what to install; `./dev ci` installs them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tools.chromium import missing, offline_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (Selenium WebDriver), 1280x900, that cannot reach the network."""
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    reason = missing()
    if reason is not None:
        pytest.skip(f"browser tests {reason} (./dev ci installs them)")
    driver = offline_chromium(1280, 900)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(browser: Any) -> list[str]:
    """The console's errors since the last call (Chromium's SEVERE log entries)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(browser: Any, script: str, timeout: float = 20.0) -> Any:
    """The first truthy value `script` returns, polled every 50 ms; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = browser.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")
