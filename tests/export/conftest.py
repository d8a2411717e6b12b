"""The BERT-size run the page tests open (built once per session: it takes a while)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tensor_tracker
from tests.export.bert import bert_run


@pytest.fixture(scope="session")
def bert() -> tuple[tensor_tracker.Tracker, tensor_tracker.ModuleGraph]:
    """30 steps of a 12-layer BERT with statistics and histograms, and its module graph."""
    return bert_run()


@pytest.fixture(scope="session")
def bert_pages(bert: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The BERT run's report (with its module graph) and graph view, written once."""
    t, graph = bert
    folder = tmp_path_factory.mktemp("bert_pages")
    return {
        "report": tensor_tracker.report(t, folder / "report.html", graph=graph),
        "graph": tensor_tracker.graph_view(graph, t).save(folder / "graph.html"),
    }
