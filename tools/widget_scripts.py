"""The scripts a rendered notebook needs to show its widgets, fetched from the npm registry
at build time and put beside the HTML, so that the page works from disk with no network.

nbconvert's default page loads require.js from cdnjs and the widget renderer from unpkg
with an unpinned version (`@jupyter-widgets/html-manager@*`): offline every viewer is an
empty output, and the renderer can change under a page that once worked. Here both are
pinned, checked against their registry integrity, and cached in `.cache/npm/`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import tarfile
import urllib.request
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "npm"
REGISTRY = "https://registry.npmjs.org"


class Package(NamedTuple):
    name: str
    version: str
    integrity: str  # the registry's dist.integrity of the tarball
    folder: str  # the folder of the package whose files are shipped
    script: str  # the script's file name in it


HTML_MANAGER = Package(
    "@jupyter-widgets/html-manager",
    "1.0.15",  # the renderer of ipywidgets 8.1 (widget state version 2)
    "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
    "dist",
    "embed-amd.js",
)
REQUIRE_JS = Package(
    "requirejs",
    "2.3.8",
    "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
    "",
    "require.js",
)

# Of html-manager's dist/: the AMD renderer and the icon fonts its CSS refers to, not the
# other bundles and source maps (10 MB more); of requirejs, only require.js.
_LEFT_OUT = {"embed.js", "libembed-amd.js", "embed.js.map", "embed.js.LICENSE.txt"}


def tarball(package: Package) -> bytes:
    """The package's tarball, from the cache or the registry, checked against its integrity."""
    short = package.name.rsplit("/", 1)[-1]
    cached = CACHE / f"{short}-{package.version}.tgz"
    if cached.exists():
        data = cached.read_bytes()
    else:
        url = f"{REGISTRY}/{package.name}/-/{short}-{package.version}.tgz"
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != package.integrity:
        cached.unlink(missing_ok=True)
        raise RuntimeError(
            f"{package.name}@{package.version}: the tarball's integrity {digest} is not the "
            f"pinned {package.integrity}"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return data


def install(out: Path) -> tuple[str, str]:
    """Put the pinned scripts in `out/_static/` and return the URLs of require.js and of
    the widget renderer relative to `out` (nbconvert's `require_js_url` and
    `widget_renderer_url`)."""
    static = out / "_static"
    shutil.rmtree(static, ignore_errors=True)
    urls = []
    for package in (REQUIRE_JS, HTML_MANAGER):
        target = static / f"{package.name.rsplit('/', 1)[-1]}-{package.version}"
        target.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tarball(package)), mode="r:gz") as archive:
            for member in archive.getmembers():
                path = Path(member.name).relative_to("package")
                shipped = path.parent == Path(package.folder) and path.name not in _LEFT_OUT
                if member.isfile() and shipped and (package.folder or path.name == package.script):
                    source = archive.extractfile(member)
                    assert source is not None
                    (target / path.name).write_bytes(source.read())
        urls.append((target / package.script).relative_to(out).as_posix())
    return urls[0], urls[1]
