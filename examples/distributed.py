"""Track a data-parallel or fully sharded (FSDP2) training run on every rank, then look at
all ranks together on rank 0. On CPU, from the repository root::

    torchrun --nproc_per_node=2 -m examples.distributed            # DDP
    torchrun --nproc_per_node=2 -m examples.distributed --fsdp     # FSDP2 (fully_shard)
    torchrun --nproc_per_node=2 -m examples.distributed --stream runs/ddp   # to disk

Each rank records its own statistics (hooks never talk to other ranks); after the loop,
`t.gather()` brings every rank's records to rank 0, where `to_frame()` has a `rank` column
and `combined()` gives each tensor's statistics over the whole global batch (for FSDP, over
the whole parameter), exactly. With `--stream`, each rank writes `<path>/rank-N` as it goes
and `tensor_tracker.load(<path>)` reads the run whole.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import tensor_tracker
from examples.tiny_transformer import TinyTransformer, copy_task_batch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2, not DDP")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--stream", type=Path, help="also stream each rank's records here")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    device = torch.device("cuda") if cuda else torch.device("cpu")

    torch.manual_seed(0)  # the same initial weights on every rank
    model = TinyTransformer(vocab=32, d_model=32, n_layers=2).to(device)
    wrapped: torch.nn.Module
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)  # shards in place: model is now an FSDPModule too
        wrapped = model
    else:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(rank)  # each rank its own share of the data

    with tensor_tracker.track(
        wrapped, stats=True, capture=("outputs", "params"), stream_to=args.stream
    ) as t:
        for _ in range(args.steps):
            tokens, targets = copy_task_batch(16, 32, 32, generator)
            logits = wrapped(tokens.to(device))
            loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten())
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            t.log("loss", loss)
            t.step()

    if args.stream is None:
        everything = t.gather()  # a collective: every rank calls it
        if everything is not None:
            report(everything, args.fsdp)
    else:
        dist.barrier()  # every rank has finished writing its part
        if rank == 0:
            report(tensor_tracker.load(args.stream), args.fsdp)
    dist.destroy_process_group()


def report(run: tensor_tracker.Tracker, sharded: bool) -> None:
    """What rank 0 sees of the whole run."""
    frame = run.to_frame()
    print(f"records per rank: {frame.groupby('rank').size().to_dict()}")
    combined = run.combined()
    last = combined[combined["step"] == combined["step"].max()]
    head = last[(last["kind"] == "output") & (last["name"] == "head") & ~last["grad"]]
    row = head.iloc[0]
    print(
        f"head output over the global batch ({row['ranks']} ranks, {int(row['numel'])} "
        f"values): mean {row['mean']:.3g}, std {row['std']:.3g}"
    )
    if sharded:
        # FSDP: each rank holds a shard of the reduced gradient; together, the whole.
        grads = last[(last["kind"] == "param") & last["grad"]]
        print("whole parameter gradients, last step:")
    else:
        # DDP: each rank's gradient before the all-reduce (its own batch's), per rank.
        grads = frame[(frame["kind"] == "param") & frame["grad"]]
        grads = grads[grads["step"] == grads["step"].max()].sort_values(["name", "rank"])
        print("each rank's own parameter gradients (before DDP's all-reduce), last step:")
    for r in grads.head(6).itertuples():
        where = f"rank {r.rank}" if not sharded else f"{r.ranks} shards"
        print(f"  {r.name}.{r.attr} ({where}): {int(r.numel)} values, rms {r.rms:.3g}")


if __name__ == "__main__":
    main()
