"""Shared argument checks: each raises the `errors` type for its condition, naming the
argument, before anything is attached to a model."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from .errors import ArgumentTypeError, ArgumentValueError

__all__ = [
    "check_bool",
    "check_callable",
    "check_choice",
    "check_choices",
    "check_count",
    "check_int",
    "check_number",
    "check_path",
    "check_type",
]

T = TypeVar("T")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def check_type(value: Any, types: type | tuple[type, ...], argument: str, what: str) -> None:
    """`value` must be an instance of `types`, described to the user as `what`."""
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{argument} must be {what}, got {_show(value)}")


def check_bool(value: Any, argument: str) -> bool:
    """`value` must be `True` or `False` (not a string such as "no", not 0/1)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{argument} must be True or False, got {_show(value)}")
    return value


def check_int(value: Any, argument: str, what: str = "an int") -> int:
    """`value` must be an int; `True`/`False` are refused (they are ints to Python)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentTypeError(f"{argument} must be {what}, got {_show(value)}")
    return value


def check_count(
    value: Any, argument: str, what: str, *, minimum: int = 1, optional: bool = False
) -> int | None:
    """`value` must be an int >= `minimum` (or None when `optional`); `what` says what it
    counts, e.g. "elements to keep"."""
    if value is None and optional:
        return None
    kind = f"an int >= {minimum}" if minimum != 1 else "a positive int"
    expected = f"{kind} ({what}){' or None' if optional else ''}"
    check_int(value, argument, expected)
    if value < minimum:
        raise ArgumentValueError(f"{argument} must be {expected}, got {value!r}")
    return value  # type: ignore[no-any-return]


def check_callable(value: Any, argument: str, what: str) -> Callable[..., Any]:
    """`value` must be callable; `what` describes its signature, e.g. "Event -> Stash"."""
    if not callable(value):
        raise ArgumentTypeError(f"{argument} must be a function ({what}), got {_show(value)}")
    return value  # type: ignore[no-any-return]


def check_choices(values: Collection[T], argument: str, allowed: Collection[T]) -> None:
    """Every item of `values` must be in `allowed`, and there must be at least one."""
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise ArgumentValueError(
            f"{argument} takes one or more of {tuple(allowed)}, got {_show(values)}"
            + (f" (unknown: {unknown})" if unknown else "")
        )


def check_choice(value: Any, argument: str, choices: Collection[Any]) -> None:
    """`value` must be one of `choices`."""
    if value not in choices:
        raise ArgumentValueError(f"{argument} must be one of {list(choices)}, got {_show(value)}")


def check_number(
    value: Any,
    argument: str,
    what: str,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """`value` must be a finite real number (not a bool) within `[low, high]` (ends left
    out when `open_low`/`open_high`; `None`: unbounded); `what` says what it means, e.g.
    "a fraction of elements"."""
    bounds = ""
    if low is not None or high is not None:
        left = "(" if open_low or low is None else "["
        right = ")" if open_high or high is None else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        bounds = f" in {left}{lo}, {hi}{right}"
    expected = f"a number{bounds} ({what})"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ArgumentTypeError(f"{argument} must be {expected}, got {_show(value)}")
    number = float(value)
    if (
        not math.isfinite(number)
        or (low is not None and (number < low or (open_low and number == low)))
        or (high is not None and (number > high or (open_high and number == high)))
    ):
        raise ArgumentValueError(f"{argument} must be {expected}, got {value!r}")
    return number


def check_path(value: Any, argument: str, what: str = "a file path") -> str | os.PathLike[str]:
    """`value` must be a path: a `str` or an `os.PathLike` (e.g. `pathlib.Path`)."""
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"{argument} must be {what} (a str or pathlib.Path), got {_show(value)}"
        )
    return value
