"""A headless Chromium that cannot reach the network, for the browser tests and the
screenshots: Debian's chromium and chromedriver passed by path, Selenium Manager (which
would download a driver and send usage statistics) never run, and every request to
anything but this machine sent to a proxy that does not exist.

This file imports only the standard library (Selenium inside `offline_chromium`):
tools/screenshots.py loads it by path while another checkout's `tools` is on `PYTHONPATH`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn
from unittest import mock

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get install chromium chromium-driver"

# Port 9 (discard) on loopback: nothing listens, so a request through it fails at once
# (net::ERR_PROXY_CONNECTION_FAILED). Loopback itself bypasses the proxy (Chromium's
# default), so pages served on 127.0.0.1 load; names other than localhost do not resolve.
BLOCKED = "net::ERR_PROXY_CONNECTION_FAILED"
OFFLINE_ARGUMENTS = (
    "--proxy-server=http://127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    # Chromium's own traffic: updates, safe browsing, metrics, sync, translation...
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--no-pings",
    "--metrics-recording-only",
    "--disable-features=OptimizationHints,Translate,MediaRouter,AutofillServerCommunication",
)


def missing() -> str | None:
    """What is missing to start it (a sentence), or None."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        return f"needs {CHROMIUM} and {CHROMEDRIVER}: {INSTALL}"
    return None


def _no_selenium_manager(*_: Any, **__: Any) -> NoReturn:
    raise AssertionError(
        "Selenium Manager was about to run (it downloads drivers and sends usage statistics): "
        "pass the browser and the driver by path"
    )


def offline_chromium(width: int, height: int, *extra: str) -> Any:
    """A headless Chromium (Selenium WebDriver) of `width` x `height` with its console log
    kept (`goog:loggingPrefs`), offline as the module says; `extra` are more arguments."""
    from selenium import webdriver
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    os.environ["SE_AVOID_STATS"] = "true"  # were Selenium Manager ever run
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        *OFFLINE_ARGUMENTS,
        *extra,
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    with mock.patch.object(SeleniumManager, "binary_paths", _no_selenium_manager):
        return webdriver.Chrome(service=service, options=options)
