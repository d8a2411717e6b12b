"""Exporters: a recording as a self-contained HTML report, the module graph as an interactive
view in a notebook (`graph_view`), or a recording in other tools' formats (TensorBoard,
wandb)."""

from ._report import report
from ._tensorboard import tensorboard_tag, to_tensorboard
from ._view import GraphView, graph_view
from ._wandb import to_wandb

__all__ = ["GraphView", "graph_view", "report", "tensorboard_tag", "to_tensorboard", "to_wandb"]
