"""The example scripts run and report what they recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")


def test_stream_run_trains_streams_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.stream_run import main

    main([str(tmp_path / "run"), "--steps", "12", "--every", "3"])
    out = capsys.readouterr().out
    assert "records of 4 steps" in out  # steps 0, 3, 6, 9
    assert "notes: ['learning rate halved']" in out
    assert "No findings." in out
    assert (tmp_path / "run" / "records.arrows").exists()
    assert "report: " in out and (tmp_path / "run" / "report.html").exists()
