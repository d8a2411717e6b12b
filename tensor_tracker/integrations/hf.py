"""The Hugging Face `Trainer` callback (see `tensor_tracker.integrations`)."""

from __future__ import annotations

from typing import Any

from .._core.tracker import Recorder
from .._optional import require
from .._validate import check_type

__all__ = ["hf_trainer_callback"]


def hf_trainer_callback(tracker: Recorder) -> Any:
    """A `transformers.TrainerCallback` that calls `tracker.step(state.global_step)` at the
    end of every optimizer step (after gradient accumulation), so the stashes of training
    step k (counted from 0) carry `step == k`.

    Args:
        tracker: a tracker attached to the trainer's model, e.g. from `track(model, ...)`.

    Example::

        with track(model, stats=True, every=10) as t:
            Trainer(model, args, train_dataset=ds, callbacks=[hf_trainer_callback(t)]).train()

    What the trainer does with it, step by step (it calls `on_step_end` after each optimizer
    step):

        >>> from transformers import TrainerControl, TrainerState
        >>> with tensor_tracker.track(model, include="^0$", grad=False) as t:
        ...     callback = hf_trainer_callback(t)
        ...     for step, batch in enumerate(loader, start=1):
        ...         _ = model(batch)
        ...         callback.on_step_end(None, TrainerState(global_step=step), TrainerControl())
        >>> [s.step for s in t]
        [0, 1, 2]
    """
    check_type(
        tracker, Recorder, "hf_trainer_callback(tracker)", "a tracker (from track(model, ...))"
    )
    base: Any = require("transformers", "hf").TrainerCallback

    class TensorTrackerCallback(base):  # type: ignore[misc]
        """Advances a tensor_tracker `Tracker` with the trainer's global step."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            tracker.step(state.global_step)

    return TensorTrackerCallback()
