"""Trackers of a small transformer that several test modules read (never modify).

Under pytest-xdist (`./dev test` runs `-n auto --dist loadfile`) each worker builds these
once; a file's tests stay on one worker, so that a module's fixture (a browser, a JupyterLab
server, spawned ranks, a real-size model) is built once."""

from __future__ import annotations

import os

import pytest
import torch

from tensor_tracker import Tracker, stats, track
from tests.helpers import tiny_model, train


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device of the device-capable tests (the statistics kernels, block formats, per
    channel, the tracker on small models): `TT_DEVICE`, "cpu" when unset. `./dev gpu`
    runs them with TT_DEVICE=cuda; their references stay on the CPU."""
    chosen = torch.device(os.environ.get("TT_DEVICE", "cpu"))
    if chosen.type == "cuda" and not torch.cuda.is_available():
        pytest.fail(f"TT_DEVICE={chosen} but CUDA is not available here; unset TT_DEVICE")
    return chosen


@pytest.fixture(scope="session")
def full() -> Tracker:
    """Full copies of one training step."""
    model = tiny_model()
    return train(model, track(model))


@pytest.fixture(scope="session")
def full_steps() -> Tracker:
    """Full copies of three training steps."""
    model = tiny_model()
    return train(model, track(model), steps=3)


@pytest.fixture(scope="session")
def with_stats() -> Tracker:
    """The default statistics of one training step."""
    model = tiny_model()
    return train(model, track(model, stats=True))


@pytest.fixture(scope="session")
def with_stats_steps() -> Tracker:
    """The default statistics of two training steps."""
    model = tiny_model()
    return train(model, track(model, stats=True), steps=2)


@pytest.fixture(scope="session")
def hist_steps() -> Tracker:
    """rms, abs_max and the default histogram over three training steps."""
    model = tiny_model()
    return train(model, track(model, stats=["rms", "abs_max", stats.histogram()]), steps=3)
