"""Data and text put into the pages the package writes, safely: JSON inside a `<script>`
element, and templates filled in one pass.

A JSON text inside `<script type="application/json">` ends at the first `</script` and
is cut short by `<!--` (the HTML parser's script-data escape states), whatever JSON says:
a module name or note holding `<!--<script>` would swallow the page's own script. So
`<`, `>` and `&` are written as JSON's `\\u003c`, `\\u003e`, `\\u0026` (the same string
once parsed), and U+2028/U+2029 as `\\u2028`/`\\u2029` (line terminators to older
JavaScript parsers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["fill", "script_json"]

_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")


def script_json(value: Any) -> str:
    """`value` as JSON text that can sit inside a `<script>` element of an HTML page
    (strict JSON: a NaN or infinity raises `ValueError`).

    Example:
        >>> script_json({"note": "<!--<script>"})
        '{"note":"\\\\u003c!--\\\\u003cscript\\\\u003e"}'
    """
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return _UNSAFE_RE.sub(lambda m: _UNSAFE[m.group()], text)


_PLACEHOLDER = re.compile(r"__([A-Z]+)__")


def fill(template: str, values: Mapping[str, str]) -> str:
    """`template` with each `__NAME__` whose `NAME` is a key of `values` replaced by that
    value, in one pass: a value holding `__OTHER__` is left as it is.

    Example:
        >>> fill("<title>__TITLE__</title>__DATA__", {"TITLE": "__DATA__", "DATA": "{}"})
        '<title>__DATA__</title>{}'
    """
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group()), template)
