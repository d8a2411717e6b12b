"""Every ```python block of README.md runs as written (issue 35 item 7), so the README
cannot drift from the library again.

Each block is one test, named by its index and first line, run in a fresh namespace (in a
temporary directory: the files the blocks write land there) holding what a reader's
notebook holds before it: `torch`, `tensor_tracker`, and the reader's own objects under
the README's names, built from small real models:

- `model`, `batch`, `loader`, `loss_fn`, `optimizer`: the two-block `TinyTransformer` of
  `tests.helpers`, a batch of its token ids, ten `(tokens, targets)` batches of the copy
  task, cross-entropy over the logits, SGD; `t`: a tracker of one forward and backward
  pass of `model(batch)` (for blocks that read "the tracker" of an earlier one).
- Blocks whose first line is in `MODELS` get another model, whose modules or outputs
  their text names (an `encoder`; a Hugging Face model's batch and `out.loss`), see there;
  those marked `slow` there import `transformers` (seconds).

A block that cannot run here (it needs a GPU, or several processes) is skipped, with the
reason shown, by a marker on the last non-blank line before its fence in README.md:
`<!-- readme-test: skip: REASON -->` (invisible on the rendered page).

Where the README states a fact about a block's result ("the same table", "the last three
steps"), `FACTS` (keyed by the block's first line) asserts it on the namespace the block
left.

Every name the README shows (`tensor_tracker.plot.scale_plot`, `stats.per_channel`,
`from tensor_tracker import X`, in its python blocks and its inline code) exists where it
says (issue 38 item 10).
"""

from __future__ import annotations

import copy
import importlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_tracker
from examples import zoo
from examples.tiny_transformer import copy_task_batch
from tests.helpers import batch as tiny_batch
from tests.helpers import tiny_model

matplotlib.use("Agg")

README = Path(__file__).resolve().parent.parent / "README.md"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(.+?)\s*-->")
STEPS = 10  # batches in `loader`


def blocks() -> list[tuple[str, str | None]]:
    """The README's ```python blocks in order: (code, the skip reason or None)."""
    found = []
    lines = README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            before = [line for line in lines[:i] if line.strip()]
            marker = SKIP.search(before[-1]) if before else None
            end = lines.index("```", i + 1)
            found.append(("\n".join(lines[i + 1 : end]) + "\n", marker and marker.group(1)))
            i = end
        i += 1
    return found


def tiny_namespace() -> dict[str, Any]:
    model = tiny_model()
    tokens = tiny_batch()
    generator = torch.Generator().manual_seed(1)
    loader = [copy_task_batch(2, 8, 16, generator) for _ in range(STEPS)]
    with tensor_tracker.track(model) as t:
        model(tokens).sum().backward()
    model.zero_grad()
    return {
        "model": model,
        "batch": tokens,
        "loader": loader,
        "loss_fn": lambda logits, target: F.cross_entropy(logits.flatten(0, 1), target.flatten()),
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "t": t,
    }


def encoder_namespace() -> dict[str, Any]:
    """Token embedding, a 3-layer `nn.TransformerEncoder` (the README's "encoder#0") and a
    head; `t` a statistics tracker of it."""
    torch.manual_seed(0)
    model = nn.Sequential(
        OrderedDict(embed=nn.Embedding(16, 16), encoder=zoo.encoder(), head=nn.Linear(16, 16))
    )
    tokens = tiny_batch()
    with tensor_tracker.track(model, stats=True) as t:
        model(tokens).pow(2).mean().backward()
    return {"model": model, "batch": tokens, "t": t}


def bert_config() -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )


def bert_compare_namespace() -> dict[str, Any]:
    """A `BertForMaskedLM` and a copy of it; `batch` is what a tokenizer gives, with
    `labels`, so the output has a `loss`: a 0-d record, compared bit for bit (issue 35
    item 1)."""
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(bert_config()).eval()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    return {"model": model, "model_b": copy.deepcopy(model), "batch": batch}


MODELS: dict[str, tuple[Callable[[], dict[str, Any]], bool]] = {  # first line: (build, slow)
    "graph = tensor_tracker.module_graph(model, batch)": (encoder_namespace, False),
    "cmp = tensor_tracker.compare_models(model, model_b, kwargs=batch": (
        bert_compare_namespace,
        True,
    ),
}


def model_of(code: str) -> tuple[Callable[[], dict[str, Any]], bool]:
    """How to build the names `code` uses, and whether that is slow."""
    return next((m for key, m in MODELS.items() if code.startswith(key)), (tiny_namespace, False))


def summary_table(summary: Any) -> list[tuple[str, Any, Any]]:
    return [(call.name, call.output_shapes, call.params) for call in summary]


def check_first_records(ns: dict[str, Any]) -> None:
    t = ns["t"]
    assert {"name", "type", "grad", "call", "step", "std"} <= set(t.to_frame().columns)
    last = t[-1]  # a gradient: its value is a tuple, `first_value` the tensor
    assert last.grad and isinstance(last.value, tuple)
    assert isinstance(last.first_value, torch.Tensor)
    forward = t[0]
    assert not forward.grad and forward.first_value is forward.value


def check_same_table(ns: dict[str, Any]) -> None:
    # "A tracker that keeps copies gives the same table for a step it recorded."
    assert summary_table(ns["t"].summary(step=0)) == summary_table(ns["s"])


def check_training_loop(ns: dict[str, Any]) -> None:
    assert tensor_tracker.first_nonfinite(ns["t"]) is None
    assert sorted(set(ns["df"]["step"])) == [0]  # every=10 of 10 steps: the first


def check_diagnose(ns: dict[str, Any]) -> None:
    assert len(ns["losses"]) == STEPS
    diagnosis = tensor_tracker.diagnose(ns["t"], loss=ns["losses"])
    assert "10 loss value(s)" in diagnosis.checked["loss"]


def check_flight_recorder(ns: dict[str, Any]) -> None:
    # "full copies of the last three steps only"
    assert sorted({s.step for s in ns["flight"]}) == [STEPS - 3, STEPS - 2, STEPS - 1]
    assert all(s.first_value.dtype == torch.bfloat16 for s in ns["flight"] if not s.grad)


def check_recording(ns: dict[str, Any]) -> None:
    run = ns["run"]
    assert sorted(set(run.to_frame()["step"])) == list(range(STEPS))
    assert len(run.log_frame()) == STEPS


def check_ops(ns: dict[str, Any]) -> None:
    # "each call is a record of that module ... `attr="<op>#<k>"`"; one logit per head
    ops = ns["ops"]
    attention = ops[ops["attr"] == "scaled_dot_product_attention#0"]
    assert list(attention["name"]) == ["blocks.0.attn", "blocks.1.attn"]
    assert all(len(v) == 4 for v in attention["max_logit_per_head"])  # 4 heads
    assert {"add#0", "add#1"} <= set(ops[ops["name"] == "blocks.0"]["attr"])


FACTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "import tensor_tracker\n\nwith tensor_tracker.track(model) as t:": check_first_records,
    "s = tensor_tracker.summary(model, batch)": check_same_table,
    "import tensor_tracker\n\nwith tensor_tracker.track(model, stats=True, every=10": (
        check_training_loop
    ),
    "losses = []": check_diagnose,
    'with (\n    tensor_tracker.track(model, stats=["sum"], on_nonfinite': check_flight_recorder,
    "with tensor_tracker.track(model, stats=True, stream_to=": check_recording,
    "from tensor_tracker import stats\n\nwith tensor_tracker.track(\n    model,\n    ops=": check_ops,
}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy machine they spin."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_readme_blocks_are_found_and_the_tables_name_blocks_it_has() -> None:
    found = blocks()
    assert len(found) >= 8
    for key in (*MODELS, *FACTS):  # a table entry whose block changed would not run
        assert sum(code.startswith(key) for code, _ in found) == 1, key


# A dotted name: the package's own, or a public submodule's as the prose shortens it.
DOTTED = re.compile(
    r"(?<![\w.])(tensor_tracker(?:\.\w+)+|(?:plot|widgets|export|stats|integrations|errors)"
    r"(?:\.\w+)+)"
)
FROM_IMPORT = re.compile(r"from (tensor_tracker(?:\.\w+)*) import (?:\(([\w\s,]+)\)|([\w ,]+))")
INLINE_CODE = re.compile(r"`([^`\n]+)`")


def shown_names() -> set[str]:
    """The dotted names of the package that the README's python blocks and inline code show,
    each as a full path (`tensor_tracker.stats.per_channel`)."""
    text = README.read_text(encoding="utf-8")
    code = [block for block, _ in blocks()] + INLINE_CODE.findall(text)
    names = set()
    for piece in code:
        for found in DOTTED.findall(piece):
            names.add(found if found.startswith("tensor_tracker.") else f"tensor_tracker.{found}")
        for module, *imported in FROM_IMPORT.findall(piece):
            listed = ",".join(imported).split(",")
            names |= {f"{module}.{n.strip()}" for n in listed if n.strip()}
    return names


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module of the package or a name in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_name_the_readme_shows_exists_where_it_says() -> None:
    names = shown_names()
    # The names the first screen shows, found by the parsing above.
    assert {"tensor_tracker.plot.scale_plot", "tensor_tracker.outlier_channels"} <= names
    assert {"tensor_tracker.stats.per_channel", "tensor_tracker.export.to_wandb"} <= names
    missing = sorted(name for name in names if not resolves(name))
    assert not missing, f"the README shows names that do not exist there: {missing}"


@pytest.mark.parametrize(
    ("code", "skip"),
    [
        pytest.param(
            code,
            skip,
            id=f"{index}: {code.splitlines()[0]}",
            marks=[pytest.mark.slow] if model_of(code)[1] else [],
        )
        for index, (code, skip) in enumerate(blocks())
    ],
)
def test_readme_block(
    code: str, skip: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(tmp_path)
    ns = {"torch": torch, "tensor_tracker": tensor_tracker, **model_of(code)[0]()}
    try:
        exec(compile(code, str(README), "exec"), ns)
        for key, check in FACTS.items():
            if code.startswith(key):
                check(ns)
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
