"""Checkpoints that outlive a plan: save a DistributedModelParallel under one ShardingPlan, load
it under another, on another number of ranks.

torch.distributed.checkpoint (DCP) stores every ShardedTensor with its global shape and the
offsets of each shard; on load, each rank asks for the rows and columns its new plan gives it and
DCP reads them from whichever files hold them. The fused optimizer's state (row-wise Adagrad's
momentum) is a ShardedTensor of the same layout in ``dmp.fused_optimizer``, so one load moves
both. Nothing here shuffles tensors by hand::

    save_checkpoint(dmp_old, "ckpt/")          # under plan A, world 8
    dmp_new = DistributedModelParallel(model, plan=to_sharding_plan(plan_b, workload_b), ...)
    load_checkpoint(dmp_new, "ckpt/")          # under plan B, world 16
"""

from __future__ import annotations

from pathlib import Path


def checkpoint_state(dmp) -> dict:
    """What a checkpoint holds: the model's sharded weights and the fused optimizer's state."""
    return {"model": dmp.state_dict(), "optim": dmp.fused_optimizer.state_dict()}


def save_checkpoint(dmp, path: str | Path) -> None:
    """Every rank writes its shards (call on all ranks of the process group)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(checkpoint_state(dmp), checkpoint_id=str(path))


def load_checkpoint(dmp, path: str | Path) -> None:
    """Fill ``dmp``'s shards (under whatever plan built it) from a checkpoint saved under any plan
    of the same tables (call on all ranks)."""
    import torch.distributed.checkpoint as dcp

    state = checkpoint_state(dmp)
    dcp.load(state, checkpoint_id=str(path))
    dmp.load_state_dict(state["model"])
    dmp.fused_optimizer.load_state_dict(state["optim"])
