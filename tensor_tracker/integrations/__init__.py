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

from .hf import hf_trainer_callback
from .lightning import lightning_callback

__all__ = ["hf_trainer_callback", "lightning_callback"]
