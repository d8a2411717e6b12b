"""The PyTorch Lightning callback (see `tensor_tracker.integrations`)."""

from __future__ import annotations

from typing import Any

from .._core.tracker import Recorder
from .._optional import require
from .._validate import check_type

__all__ = ["lightning_callback"]


def lightning_callback(tracker: Recorder) -> Any:
    """A PyTorch Lightning `Callback` that calls `tracker.step(trainer.global_step)` when an
    optimizer step has been taken (so gradient accumulation over several batches counts as
    one step).

    Args:
        tracker: a tracker attached to the LightningModule (or its inner model).

    Example::

        with track(module, stats=True, every=10) as t:
            Trainer(max_steps=100, callbacks=[lightning_callback(t)]).fit(module, loader)

    What the trainer does with it (it calls `on_train_batch_end` after each batch): with
    gradient accumulation over two batches, both batches of an optimizer step share its step:

        >>> from types import SimpleNamespace
        >>> with tensor_tracker.track(model, include="^0$", grad=False) as t:
        ...     callback = lightning_callback(t)
        ...     for batch_idx, batch in enumerate(loader + loader[:1]):
        ...         _ = model(batch)
        ...         trainer = SimpleNamespace(global_step=(batch_idx + 1) // 2)  # after it
        ...         callback.on_train_batch_end(trainer, model, None, batch, batch_idx)
        >>> [(s.step, s.call) for s in t]
        [(0, 0), (0, 1), (1, 0), (1, 1)]
    """
    check_type(
        tracker, Recorder, "lightning_callback(tracker)", "a tracker (from track(model, ...))"
    )
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
