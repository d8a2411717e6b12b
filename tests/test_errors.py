"""One error vocabulary: every exception the library raises on purpose is a
`TensorTrackerError`, and also the built-in type that names its condition."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

import tensor_tracker
from tensor_tracker import errors, plot, stats
from tests.helpers import mlp

PACKAGE = Path(tensor_tracker.__file__).parent


def test_the_package_raises_no_bare_builtin_errors() -> None:
    bare = re.compile(r"raise (TypeError|ValueError|KeyError|ImportError|RuntimeError)\(")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda: stats.parse("nope"), errors.ArgumentValueError),
        (lambda: stats.parse(3), errors.ArgumentTypeError),
        (lambda: stats.histogram(bins=0), errors.ArgumentValueError),
        (lambda: stats.compute(torch.ones(2), ["mean"])["rms"], errors.NotRecordedError),
        (lambda: plot.histogram(None), errors.ArgumentTypeError),
        (lambda: plot.scale_plot([]), errors.ArgumentValueError),
        (lambda: tensor_tracker.track(mlp(), every=0), errors.ArgumentValueError),
        (lambda: tensor_tracker.track(mlp(), stats=True).to_frame("nope"), errors.NotRecordedError),
    ],
)
def test_errors_carry_the_base_and_the_builtin(call: Any, kind: type) -> None:
    with pytest.raises(kind) as info:
        call()
    assert isinstance(info.value, errors.TensorTrackerError)
    builtin = next(b for b in (TypeError, ValueError, KeyError) if issubclass(kind, b))
    assert isinstance(info.value, builtin)
    assert str(info.value)  # a message, not a bare exception
