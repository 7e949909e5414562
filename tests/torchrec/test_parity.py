"""Parity with EmbeddingShardingPlanner on generated models: wherever TorchRec's planner finds a
plan, ShardoptPlanner finds one too, and the plan honours every constraint, the reservation and the
runtime fields. 50 models (EmbeddingBagCollection and EmbeddingCollection, 3-60 tables, mixed
data types, random constraints) on CPU and CUDA topologies; planning needs no GPU."""

import logging
import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore")
torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torch import nn  # noqa: E402
from torchrec.distributed.embedding import EmbeddingCollectionSharder  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints, PlannerError, PlannerErrorType, Topology  # noqa: E402
from torchrec.distributed.types import BoundsCheckMode, CacheParams  # noqa: E402
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402

from shardopt.torchrec import ShardoptPlanner  # noqa: E402

pytestmark = pytest.mark.slow
MODELS = 50
MB = 1024 * 1024
TYPES = {"cpu": ["table_wise", "column_wise", "table_column_wise", "data_parallel"],
         "cuda": ["table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise", "data_parallel"]}


class Model(nn.Module):
    def __init__(self, bags, sequences):
        super().__init__()
        self.sparse = nn.Module()
        self.sparse.ebc = EmbeddingBagCollection(tables=bags, device=torch.device("meta"))
        if sequences:
            self.seq = EmbeddingCollection(tables=sequences, device=torch.device("meta"))


def _case(seed: int):
    rng = np.random.default_rng(seed)
    device = "cuda" if seed % 2 else "cpu"
    n = int(rng.integers(3, 61))
    dtypes = [DataType.FP32, DataType.FP16] if device == "cuda" else [DataType.FP32]
    bags = [EmbeddingBagConfig(num_embeddings=int(rng.integers(100, 200_000)), embedding_dim=int(rng.choice([16, 32, 64, 128])),
                               name=f"t{i}", feature_names=[f"f{i}"], data_type=dtypes[int(rng.integers(len(dtypes)))])
            for i in range(n)]
    seq_dim = int(rng.choice([32, 64]))
    sequences = [EmbeddingConfig(num_embeddings=int(rng.integers(100, 50_000)), embedding_dim=seq_dim, name=f"s{i}",
                                 feature_names=[f"g{i}"]) for i in range(int(rng.integers(0, 4)))]
    constraints = {}
    for config in bags + sequences:
        if rng.random() < 0.3:
            kinds = list(rng.choice(TYPES[device], size=int(rng.integers(1, 4)), replace=False))
            extra = {}
            if "column_wise" in kinds and rng.random() < 0.5:
                extra["min_partition"] = int(rng.choice([16, 32]))
            if rng.random() < 0.3:
                extra["bounds_check_mode"] = BoundsCheckMode.WARNING
            if device == "cuda" and rng.random() < 0.3:
                extra["cache_params"] = CacheParams(load_factor=0.3)
                extra["stochastic_rounding"] = True
            constraints[config.name] = ParameterConstraints(sharding_types=kinds, **extra)
    world = int(rng.choice([2, 4, 8]))
    total = sum(c.num_embeddings * c.embedding_dim * 4 for c in bags + sequences)
    cap = int(total * float(rng.uniform(0.6, 3.0)) / world) + 4 * MB
    topology = Topology(world_size=world, local_world_size=min(world, 4), compute_device=device,
                        **({"hbm_cap": cap} if device == "cuda" else {"ddr_cap": cap}))
    return Model(bags, sequences), topology, constraints


def _check(plan, model, topology, constraints, planner):
    configs = {c.name: c for m in model.modules() if isinstance(m, (EmbeddingBagCollection, EmbeddingCollection))
               for c in (m.embedding_bag_configs() if isinstance(m, EmbeddingBagCollection) else m.embedding_configs())}
    seen = set()
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():
            seen.add(name)
            c = constraints.get(name)
            if c is not None:
                assert ps.sharding_type in c.sharding_types, (name, ps.sharding_type, c.sharding_types)
                if c.min_partition and ps.sharding_type in ("column_wise", "table_column_wise"):
                    assert min(m.shard_sizes[1] for m in ps.sharding_spec.shards) >= min(c.min_partition, configs[name].embedding_dim)
                assert ps.bounds_check_mode == c.bounds_check_mode
                assert ps.stochastic_rounding == c.stochastic_rounding
                if c.cache_params is not None:
                    assert ps.cache_params is not None and ps.cache_params.load_factor == 0.3
            if ps.sharding_type != "data_parallel":
                cells = sum(m.shard_sizes[0] * m.shard_sizes[1] for m in ps.sharding_spec.shards)
                assert cells == configs[name].num_embeddings * configs[name].embedding_dim
    assert seen == set(configs)
    cap = planner.last_workload.topology.hbm_cap
    full = topology.devices[0].storage.hbm if topology.compute_device == "cuda" else topology.devices[0].storage.ddr
    assert cap < full  # the reservation was taken off
    assert max(r.hbm_bytes for r in planner.last_plan.predicted.per_rank) <= cap


@pytest.mark.parametrize("seed", range(MODELS))
def test_shardopt_plans_wherever_torchrec_does_and_honours_every_constraint(seed):
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    model, topology, constraints = _case(seed)
    sharders = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
    try:
        EmbeddingShardingPlanner(topology=topology, constraints=constraints, debug=False).plan(model, sharders)
        torchrec_error = None
    except PlannerError as exc:
        torchrec_error = exc.error_type
    except RuntimeError:  # TorchRec's enumerator, for constraints that leave a table nothing
        torchrec_error = PlannerErrorType.STRICT_CONSTRAINTS
    planner = ShardoptPlanner(topology=topology, constraints=constraints, time_limit_s=0.5, debug=False)
    try:
        plan = planner.plan(model, sharders)
    except PlannerError as exc:
        assert torchrec_error is not None, "TorchRec planned this model and shardopt did not"
        assert exc.error_type == torchrec_error  # the type callers branch on (issue 36)
        return
    _check(plan, model, topology, constraints, planner)
