"""End-to-end check: train a small DLRM-style embedding model sharded by ShardoptPlanner under
DistributedModelParallel, and compare it with the same model trained unsharded.

    python -m shardopt.torchrec.dmp_check --world-size 2      # gloo on CPU, spawned processes

Each table is forced to one sharding type through ``ParameterConstraints.sharding_types`` (every
type TorchRec shards on CPU: table-wise, column-wise, table-column-wise, data-parallel), so the
check also proves the planner honours constraints. Every rank feeds its own local batch; the
reference sees the global batch. Per step the pooled embeddings each rank gets back must equal the
reference's rows for that rank's samples, and after the steps every table's weights must equal the
reference's, updated with the same SGD by the gradient of the ranks' summed losses divided by the
world size (DDP averages data-parallel tables; TorchRec's all-to-all divides the sharded ones').
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass

TABLES = (  # name, rows, dim, forced sharding type
    ("tw", 400, 16, "table_wise"),
    ("cw", 300, 64, "column_wise"),
    ("twcw", 200, 64, "table_column_wise"),
    ("dp", 50, 8, "data_parallel"),
    ("cwmp", 300, 128, "column_wise"),  # with min_partition: column shards of at least 64
)
MIN_PARTITION = {"cwmp": 64}
LR = 0.5
BATCH = 8  # per rank
STEPS = 3


@dataclass(frozen=True)
class CheckResult:
    rank: int
    sharding: dict  # table -> (sharding type, ranks)
    max_pooled_error: float
    max_weight_error: float
    measured_tables: int = 0  # tables whose statistics the plan took from the training batches


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(device: str = "cpu"):
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    torch.manual_seed(0)
    configs = [EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[f"f_{n}"])
               for n, r, d, _ in TABLES]

    class Model(torch.nn.Module):  # nested, as in a DLRM: the planner must find it
        def __init__(self) -> None:
            super().__init__()
            self.sparse = torch.nn.Module()
            self.sparse.ebc = EmbeddingBagCollection(tables=configs, device=torch.device(device))

        def forward(self, kjt):
            return self.sparse.ebc(kjt)

    return Model()


def batch_for(step: int, rank: int, world: int):
    """The KJT of one rank's local batch at one step (deterministic)."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(1000 * step + rank)
    keys, lengths, values = [], [], []
    for name, rows, _, _ in TABLES:
        keys.append(f"f_{name}")
        n = torch.randint(0, 4, (BATCH,), generator=g)
        lengths.append(n)
        values.append(torch.randint(0, rows, (int(n.sum()),), generator=g))
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))


def loss_weights(step: int):
    import torch

    g = torch.Generator().manual_seed(7 + step)
    return {f"f_{n}": torch.randn(d, generator=g) for n, _, d, _ in TABLES}


def run_rank(body, rank: int, world: int, port: int, queue) -> None:
    """Join the gloo group, put ``body()`` (or the rank's error, as a string) on ``queue``, leave.

    On success every rank waits for the others before the group is torn down, and the process
    then exits without the interpreter's teardown: once in CI a rank aborted in that teardown
    (SIGABRT, "terminate called without an active exception") after every rank had sent its
    result, so a passed check read as a failed one."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        queue.put(body())
        dist.barrier()
    except BaseException as exc:  # the parent must hear of it, not wait for a result
        import traceback

        queue.put(f"rank {rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()
    queue.close()
    queue.join_thread()  # the result is in the pipe before the process goes
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker(rank: int, world: int, port: int, measured: bool, queue) -> None:
    run_rank(lambda: _check_rank(rank, world, measured), rank, world, port, queue)


def _check_rank(rank: int, world: int, measured: bool = False) -> CheckResult:
    import torch
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from shardopt.torchrec import ShardoptPlanner

    torch.set_num_threads(1)
    constraints = {n: ParameterConstraints(sharding_types=[kind], min_partition=MIN_PARTITION.get(n))
                   for n, _, _, kind in TABLES}
    # measured: the plan is made from the statistics of the very batches the ranks train on.
    batches = (batch_for(step, r, world) for step in range(STEPS) for r in range(world)) if measured else None
    planner = ShardoptPlanner(topology=Topology(world_size=world, compute_device="cpu"),
                              batch_size=BATCH, constraints=constraints, time_limit_s=2, batches=batches)
    model = build_model("meta")
    apply_optimizer_in_backward(torch.optim.SGD, model.sparse.ebc.parameters(), {"lr": LR})
    sharders = [EmbeddingBagCollectionSharder()]
    plan = planner.collective_plan(model, sharders, dist.group.WORLD)
    dmp = DistributedModelParallel(model, plan=plan, sharders=sharders, device=torch.device("cpu"),
                                   init_data_parallel=True)
    # Same initial weights as the reference: copy the unsharded model's into every shard.
    reference = build_model("cpu")
    ref_state = reference.state_dict()
    load_full_weights(dmp, ref_state)
    dense_opt = torch.optim.SGD([p for n, p in dmp.named_parameters() if "dp" in n and p.requires_grad]
                                or [torch.nn.Parameter(torch.zeros(1))], lr=LR)
    pooled_error = 0.0
    for step in range(STEPS):
        weights = loss_weights(step)
        out = dmp(batch_for(step, rank, world))
        if hasattr(out, "wait"):
            out = out.wait()
        got = out.to_dict()
        expected = _reference_pooled(reference, step, rank, world)
        pooled_error = max(pooled_error, max(float((got[k].detach() - expected[k]).abs().max()) for k in got))
        loss = sum((got[k] * weights[k]).sum() for k in got)
        dense_opt.zero_grad()
        loss.backward()
        dense_opt.step()
        _reference_step(reference, step, world)
    weight_error = max_weight_error(dmp, reference.state_dict())
    sharding = {}
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():
            sharding[name] = (ps.sharding_type, list(ps.ranks or []))
    measured_tables = sum(1 for t in planner.last_workload.tables if getattr(t.access, "batches", None)) \
        if planner.last_workload is not None else 0
    return CheckResult(rank, sharding, pooled_error, weight_error, measured_tables)


def _local_pieces(dmp, state):
    """(local tensor, the same rows and columns of the full weight) for every local shard."""
    for key, value in dmp.state_dict().items():
        full = state[key.replace("module.", "").replace("_dmp_wrapped_module.", "")]
        if hasattr(value, "to_local"):  # a DTensor (2D): its local part wraps the rank's shards
            local = value.to_local()
            for tensor, (r0, c0), (nr, nc) in zip(local.local_shards(), local.local_offsets(), local.local_sizes()):
                yield tensor, full[r0:r0 + nr, c0:c0 + nc]
            continue
        if not hasattr(value, "local_shards"):
            yield value, full
            continue
        for shard in value.local_shards():
            (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            yield shard.tensor, full[r0:r0 + nr, c0:c0 + nc]


def load_full_weights(dmp, state) -> None:
    """Copy full weights into the local shards (ShardedTensor or plain replicas)."""
    import torch

    with torch.no_grad():
        for local, full in _local_pieces(dmp, state):
            local.copy_(full)


def max_weight_error(dmp, state) -> float:
    """The largest difference between any local shard and the same rows of the full weights."""
    return max((float((local - full).abs().max()) for local, full in _local_pieces(dmp, state)), default=0.0)


def _reference_pooled(reference, step: int, rank: int, world: int) -> dict:
    import torch

    with torch.no_grad():
        return reference(batch_for(step, rank, world)).to_dict()


def _reference_step(reference, step: int, world: int) -> None:
    """One SGD step of the unsharded model on the global batch, with TorchRec's gradient rules."""
    import torch

    weights = loss_weights(step)
    reference.zero_grad()
    for r in range(world):
        out = reference(batch_for(step, r, world)).to_dict()
        sum((out[k] * weights[k]).sum() for k in out).backward()
    with torch.no_grad():
        for name, param in reference.named_parameters():
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            # Every table steps by the rank-averaged gradient: DDP averages the data-parallel ones,
            # and TorchRec's pooled all-to-all divides the sharded ones' gradient by world size.
            scale = 1.0 / world
            param -= LR * scale * grad


def spawn_ranks(target, world: int, extra: tuple = (), timeout: float = 600.0) -> list:
    """Run ``target(rank, world, port, *extra, queue)`` in ``world`` spawned processes (gloo on
    one port) and return what each put on the queue; a rank's error (a string) stops them all, and
    so does a rank that dies without a word (a crash, or an error before it could report): its
    peers would wait for it in gloo until the timeout."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *extra, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = []
    try:
        deadline = time.monotonic() + timeout
        while len(results) < world:
            item = _next_report(queue, procs, deadline, timeout)
            if isinstance(item, str):
                raise RuntimeError(item)
            results.append(item)
    except BaseException:
        for p in procs:
            p.terminate()
        raise
    for p in procs:
        p.join(timeout=60)
        if p.exitcode not in (0, None):
            raise RuntimeError(f"rank process exited with {p.exitcode}")
    return results


def _next_report(queue, procs, deadline: float, timeout: float):
    """The next item a rank put on ``queue``; raises once a rank has died without one, or past
    ``deadline``. A rank that reported its error and then exited is heard out first."""
    import queue as queues

    while True:
        try:
            return queue.get(timeout=0.5)
        except queues.Empty:
            pass
        dead = next(((r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (0, None)), None)
        if dead is not None:
            try:
                return queue.get(timeout=2)  # what it put just before it went
            except queues.Empty:
                raise RuntimeError(f"rank {dead[0]}: its process exited with {dead[1]} before it reported") from None
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ranks did not report within {timeout:.0f} s")


def run_check(world: int, measured: bool = False) -> list[CheckResult]:
    """Every rank's result; ``measured``: plan from the statistics of the training batches."""
    return sorted(spawn_ranks(_worker, world, (measured,)), key=lambda r: r.rank)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--measured", action="store_true", help="Plan from the training batches' statistics.")
    args = parser.parse_args(argv)
    results = run_check(args.world_size, args.measured)
    for name, (kind, ranks) in sorted(results[0].sharding.items()):
        print(f"{name:6} {kind:18} ranks {ranks}")
    pooled = max(r.max_pooled_error for r in results)
    weights = max(r.max_weight_error for r in results)
    print(f"max |pooled - reference| = {pooled:.2e}; max |weight - reference| = {weights:.2e}")
    return 0 if pooled < 1e-4 and weights < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
