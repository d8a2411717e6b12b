"""A headless Chromium for the tests that check pages in a real browser (Debian's chromium
and chromium-driver, driven by Selenium). Without them the tests skip and say what to
install; `./dev ci` installs them."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (Selenium WebDriver), 1280x900."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "browser tests need Chromium and ChromeDriver: apt-get install chromium "
            "chromium-driver (./dev ci installs them)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    options.add_argument("--disable-dev-shm-usage")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for console_errors
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
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
