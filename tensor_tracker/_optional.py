"""Lazy imports of the optional extras, with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

__all__ = ["require"]


# The distributions (what `pip install` takes) whose import name differs.
_DISTRIBUTIONS = {"umap": "umap-learn", "pytorch_lightning": "pytorch-lightning"}


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or raise `MissingExtraError` (an `ImportError`) naming the
    `tensor-tracker[extra]` to install, and the package itself (`matplotlib` for
    `matplotlib.figure`, `umap-learn` for `umap`)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        # The top-level package of what failed to import: a submodule is no pip name.
        top = (error.name or module).split(".")[0]
        package = _DISTRIBUTIONS.get(top, top)
        raise MissingExtraError(
            f"{top} is needed for this; install it with "
            f"`pip install 'tensor-tracker[{extra}]'` (or `pip install {package}`)"
        ) from error
