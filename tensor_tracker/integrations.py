"""Callbacks that advance a tracker's step from the training loops of other libraries.

They are thin on purpose: you attach the tracker to the model yourself (so every option of
`track` is available) and the callback calls `tracker.step(global_step)` after each
optimizer step, so `every=N` and the `step` column follow the trainer's own step count.

Hugging Face `Trainer`::

    with tensor_tracker.track(model, stats=True, every=50) as t:
        trainer = Trainer(model, args, train_dataset=ds, callbacks=[hf_trainer_callback(t)])
        trainer.train()
    t.to_frame()

PyTorch Lightning::

    with tensor_tracker.track(module, stats=True, every=50) as t:
        Trainer(callbacks=[lightning_callback(t)]).fit(module, loader)
"""

from __future__ import annotations

from typing import Any

from ._optional import require
from .core.tracker import Recorder

__all__ = ["hf_trainer_callback", "lightning_callback"]


def hf_trainer_callback(tracker: Recorder) -> Any:
    """A `transformers.TrainerCallback` that calls `tracker.step(state.global_step)` at the
    end of every optimizer step (after gradient accumulation), so the stashes of training
    step k (counted from 0) carry `step == k`.

    Args:
        tracker: a tracker attached to the trainer's model, e.g. from `track(model, ...)`.

    Example:
        >>> with track(model, stats=True, every=10) as t:
        ...     Trainer(model, args, train_dataset=ds, callbacks=[hf_trainer_callback(t)]).train()
    """
    base: Any = require("transformers", "hf").TrainerCallback

    class TensorTrackerCallback(base):  # type: ignore[misc]
        """Advances a tensor_tracker `Tracker` with the trainer's global step."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            tracker.step(state.global_step)

    return TensorTrackerCallback()


def lightning_callback(tracker: Recorder) -> Any:
    """A PyTorch Lightning `Callback` that calls `tracker.step(trainer.global_step)` when an
    optimizer step has been taken (so gradient accumulation over several batches counts as
    one step).

    Args:
        tracker: a tracker attached to the LightningModule (or its inner model).

    Example:
        >>> with track(module, stats=True, every=10) as t:
        ...     Trainer(max_steps=100, callbacks=[lightning_callback(t)]).fit(module, loader)
    """
    try:
        base: Any = require("lightning.pytorch", "lightning").Callback
    except ImportError:
        base = require("pytorch_lightning", "lightning").Callback

    class TensorTrackerCallback(base):  # type: ignore[misc]
        """Advances a tensor_tracker `Tracker` with the trainer's global step."""

        def __init__(self) -> None:
            super().__init__()
            self.last_step = 0

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            if trainer.global_step != self.last_step:
                self.last_step = trainer.global_step
                tracker.step(trainer.global_step)

    return TensorTrackerCallback()
