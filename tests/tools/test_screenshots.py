"""tools/screenshots.py: its command line (the pictures themselves take minutes: run it by
hand, see its docstring)."""

from __future__ import annotations

import pytest

from tools import screenshots


def test_help_names_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        screenshots.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--out" in text and "--figures-only" in text


def test_out_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        screenshots.main([])
    assert exit_.value.code == 2
    assert "--out" in capsys.readouterr().err
