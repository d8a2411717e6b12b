"""A headless JupyterLab server on 127.0.0.1, for the browser tests (tests/jupyterlab.py) and
for tools/screenshots.py: every cell in the page (no windowing, so every output can be
read and shot), no news pop-up over the outputs, its own settings and config folders.

This file imports only the standard library: tools/screenshots.py loads it by path while
another checkout's `tensor_tracker` (and `tools`) is on `PYTHONPATH`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

__all__ = ["start_lab", "stop_lab"]

_SETTINGS = (
    ("notebook-extension/tracker", '{"windowingMode": "none"}'),
    ("apputils-extension/notification", '{"fetchNews": "false", "checkForUpdates": false}'),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_lab(
    folder: Path, root: Path, token: str, env: Mapping[str, str], timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start JupyterLab serving `root`, its settings, config and log (`lab.log`) in
    `folder`, with `env` added to this process's environment; return the process and the
    base URL once it answers. Raises `RuntimeError` with the end of its log when it exits or
    does not answer within `timeout` seconds (the process is stopped first).

    Example:
        >>> process, base = start_lab(tmp, tmp / "nb", "secret", {})  # doctest: +SKIP
    """
    for plugin, value in _SETTINGS:
        settings = folder / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(value)
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root
    full_env = {
        **os.environ,
        **env,
        "JUPYTERLAB_SETTINGS_DIR": str(folder / "settings"),
        "JUPYTER_CONFIG_DIR": str(folder / "config"),
    }
    with (folder / "lab.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).close()
            return process, base
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                code = process.poll()
                stop_lab(process)
                tail = (folder / "lab.log").read_text()[-3000:]
                raise RuntimeError(
                    f"JupyterLab did not start (exit {code}); its log:\n{tail}"
                ) from None
            time.sleep(0.3)


def stop_lab(process: subprocess.Popen[bytes]) -> None:
    """Stop a server `start_lab` started: terminate, then kill after 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)
