"""Lazy imports of the optional extras, with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or raise `MissingExtraError` (an `ImportError`) naming the
    `tensor-tracker[extra]` to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{module} is needed for this; install it with "
            f"`pip install 'tensor-tracker[{extra}]'` (or `pip install {error.name or module}`)"
        ) from error
