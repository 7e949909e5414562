"""ShardoptPlanner(plan_loader=...): TorchRec's stored plans loaded as EmbeddingShardingPlanner
loads them (issue 36): the same planner context hash, a mismatch refused with TorchRec's error
type, the stored options merged into the search space, the result checked against the model, and
``load()`` returning None planned afresh."""

import logging
import warnings

import pytest

warnings.filterwarnings("ignore")
torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torch import nn  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: E402
from torchrec.distributed.planner.types import (  # noqa: E402
    ParameterConstraints, PlanLoader, PlannerError, PlannerErrorType, Topology,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402

from shardopt.core.errors import ShardoptError  # noqa: E402
from shardopt.torchrec import ShardoptPlanner  # noqa: E402

MB = 1 << 20
SHARDERS = [EmbeddingBagCollectionSharder()]


class Model(nn.Module):
    def __init__(self, n=6, rows=4096, dim=64):
        super().__init__()
        self.sparse = nn.Module()
        self.sparse.ebc = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(num_embeddings=rows * (i + 1), embedding_dim=dim, name=f"t{i}",
                                       feature_names=[f"f{i}"]) for i in range(n)],
            device=torch.device("meta"))


class Stored(PlanLoader):
    """A store as production setups keep one: the options of a plan, keyed by storage hash, and
    the context hash they were planned in."""

    def __init__(self, options, context_hash, plan_id="stored-1"):
        self.options, self.context_hash, self.plan_id = options, context_hash, plan_id

    def load(self):
        return None if self.options is None else {so.storage_hash(): so for so in self.options}

    def plan_context_hash(self):
        return self.context_hash

    def get_plan_id(self):
        return self.plan_id


def _torchrec(topology, constraints=None, batch_size=512):
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=batch_size, constraints=constraints, debug=False)
    plan = planner.plan(Model(), SHARDERS)
    return planner, plan


def _layout(plan):
    return {name: (ps.sharding_type, ps.compute_kernel, ps.ranks,
                   [(m.shard_offsets, m.shard_sizes) for m in ps.sharding_spec.shards] if ps.sharding_spec else None)
            for name, ps in plan.plan["sparse.ebc"].items()}


CONSTRAINTS = {"t0": ParameterConstraints(sharding_types=["row_wise"]),
               "t3": ParameterConstraints(sharding_types=["table_wise", "column_wise"], min_partition=32)}


@pytest.mark.parametrize("constraints,batch_size", [(None, 512), (CONSTRAINTS, 256)])
def test_the_context_hash_is_torchrecs_for_the_same_inputs(constraints, batch_size):
    topology = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=256 * MB)
    theirs, _ = _torchrec(topology, constraints, batch_size)
    ours = ShardoptPlanner(topology=topology, batch_size=batch_size, constraints=constraints, time_limit_s=1, debug=False)
    ours.plan(Model(), SHARDERS)
    assert ours.hash_planner_context_inputs_str() == theirs.hash_planner_context_inputs_str()
    other = ShardoptPlanner(topology=topology, batch_size=batch_size * 2, constraints=constraints, time_limit_s=1)
    other.plan(Model(), SHARDERS)
    assert other.hash_planner_context_inputs_str() != theirs.hash_planner_context_inputs_str()


def test_a_stored_plan_loads_as_torchrec_loads_it_and_is_checked_and_scored():
    topology = Topology(world_size=4, compute_device="cuda", hbm_cap=256 * MB)
    theirs, their_plan = _torchrec(topology)
    store = Stored(theirs._best_plan, theirs.hash_planner_context_inputs_str())
    ours = ShardoptPlanner(topology=topology, plan_loader=store, time_limit_s=1, debug=False)
    loaded = ours.plan(Model(), SHARDERS)
    assert _layout(loaded) == _layout(their_plan)
    again = EmbeddingShardingPlanner(topology=topology, plan_loader=store, debug=False).plan(Model(), SHARDERS)
    assert _layout(loaded) == _layout(again)
    assert ours.last_plan.predicted.search.algorithm == "loaded" and ours.last_plan.predicted.max_ms > 0
    assert "no lower bound (no search ran)" in ours.last_stats


def test_a_stored_plan_of_another_context_is_refused_with_torchrecs_error_type():
    topology = Topology(world_size=4, compute_device="cuda", hbm_cap=256 * MB)
    theirs, _ = _torchrec(topology)
    stale = Stored(theirs._best_plan, "0" * 64, plan_id="old-7")
    for planner_type in (EmbeddingShardingPlanner, ShardoptPlanner):
        with pytest.raises(PlannerError) as info:
            planner_type(topology=topology, plan_loader=stale).plan(Model(), SHARDERS)
        assert info.value.error_type == PlannerErrorType.PLANNER_INPUT_CONTEXT_MISMATCH
    assert "old-7" in str(info.value) and "0" * 64 in str(info.value)


def test_no_stored_plan_plans_afresh_and_a_partial_one_fails_as_torchrecs_does():
    topology = Topology(world_size=4, compute_device="cuda", hbm_cap=256 * MB)
    theirs, _ = _torchrec(topology)
    ours = ShardoptPlanner(topology=topology, plan_loader=Stored(None, None), time_limit_s=1)
    ours.plan(Model(), SHARDERS)
    assert ours.last_plan.predicted.search.algorithm != "loaded"
    partial = Stored(theirs._best_plan[:3], None)
    with pytest.raises(PlannerError) as info:
        ShardoptPlanner(topology=topology, plan_loader=partial).plan(Model(), SHARDERS)
    assert info.value.error_type == PlannerErrorType.PLAN_LOADING_FAILED


def test_a_stored_plan_that_no_longer_fits_is_refused_not_run():
    """No context hash stored (the check skipped, as TorchRec skips it), a plan made for 256 MiB
    GPUs loaded on 2 MiB ones: TorchRec would run it; the memory check refuses it."""
    big = Topology(world_size=4, compute_device="cuda", hbm_cap=256 * MB)
    theirs, _ = _torchrec(big)
    small = Topology(world_size=4, compute_device="cuda", hbm_cap=2 * MB)
    with pytest.raises(PlannerError) as info:
        ShardoptPlanner(topology=small, plan_loader=Stored(theirs._best_plan, None)).plan(Model(), SHARDERS)
    assert info.value.error_type == PlannerErrorType.PLAN_LOADING_FAILED
    assert "stored-1 does not fit the model" in str(info.value)


def test_plan_loader_with_plan_file_or_2d_is_refused():
    with pytest.raises(ShardoptError, match="plan_loader and plan_file"):
        ShardoptPlanner(plan_loader=Stored(None, None), plan_file="p.json")
    with pytest.raises(ShardoptError, match="sharding_group_size"):
        ShardoptPlanner(plan_loader=Stored(None, None), sharding_group_size=2)
