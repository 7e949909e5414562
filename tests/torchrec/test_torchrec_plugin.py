"""The TorchRec plugin: planner, estimator, converters, and a real DistributedModelParallel run."""

import json
import logging
import warnings

import pytest

warnings.filterwarnings("ignore")
logging.getLogger("torchrec").setLevel(logging.ERROR)

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints, Topology  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402

from conftest import CONFIGS, run_cli  # noqa: E402
from shardopt.contracts import ShardSpec
from shardopt.core.errors import ShardoptError  # noqa: E402
from shardopt.core.plan import plan_from_dict, plan_to_json  # noqa: E402
from shardopt.arithmetic.checks import check_plan  # noqa: E402
from shardopt.planner import plan_workload  # noqa: E402
from shardopt.search.ilp import IlpSearch  # noqa: E402
from shardopt.torchrec import (  # noqa: E402
    ShardoptEstimator, ShardoptPlanner, from_sharding_plan, module_from_workload, to_sharding_plan,
    workload_from_module,
)
from shardopt.torchrec.dmp_check import run_check  # noqa: E402
from shardopt.core.workload import read_workload, workload_from_dict  # noqa: E402

SHARDERS = [EmbeddingBagCollectionSharder()]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.slow
def test_dmp_trained_with_shardopt_plan_matches_an_unsharded_model(world):
    results = run_check(world)
    kinds = {kind for kind, _ in results[0].sharding.values()}
    # Every sharding type TorchRec shards on CPU, each forced through ParameterConstraints.
    assert kinds == {"table_wise", "column_wise", "table_column_wise", "data_parallel"}
    assert {r.sharding["cw"][0] for r in results} == {"column_wise"}
    assert len(results[0].sharding["cw"][1]) == 2  # really cut in two
    assert len(results[0].sharding["cwmp"][1]) == 2  # 128 columns, min_partition 64: two shards, not four
    assert all(r.sharding == results[0].sharding for r in results)  # collective_plan broadcast
    for r in results:
        assert r.max_pooled_error < 1e-5, r
        assert r.max_weight_error < 1e-5, r


def _gpu_workload():
    """A cuda workload whose plan uses row-wise, table-row-wise, column-wise, data-parallel, tiers."""
    tables = [
        {"name": "rw", "num_embeddings": 100_000, "embedding_dim": 64, "sharding_types": ["row_wise"]},
        {"name": "twrw", "num_embeddings": 80_000, "embedding_dim": 32, "sharding_types": ["table_row_wise"]},
        {"name": "cw", "num_embeddings": 50_000, "embedding_dim": 128, "sharding_types": ["column_wise"]},
        {"name": "dp", "num_embeddings": 100, "embedding_dim": 16, "sharding_types": ["data_parallel"]},
        {"name": "tier", "num_embeddings": 3_000_000, "embedding_dim": 128, "pooling_factor": 5,
         "access": {"distribution": "zipf", "alpha": 1.2}, "sharding_types": ["table_wise"],
         "compute_kernels": ["fused_uvm_caching"]},
    ]
    return workload_from_dict({"version": 1, "name": "gpu", "batch_size": 256, "tables": tables,
                               "topology": {"world_size": 8, "local_world_size": 4, "hbm_cap": "40GB",
                                            "ddr_cap": "500GB", "compute_device": "cuda"}})


@pytest.mark.parametrize("source", ["dlrm-medium", "dlrm-large", "gpu"])
def test_plan_json_to_sharding_plan_and_back_is_identical(source):
    workload = _gpu_workload() if source == "gpu" else read_workload(CONFIGS / f"{source}.yaml")[0]
    plan = plan_workload(workload, search=IlpSearch(time_limit_s=2, candidates="torchrec"))
    if source == "gpu":
        kinds = {t.sharding_type for t in plan.tables}
        assert {"row_wise", "table_row_wise", "column_wise", "data_parallel"} <= kinds
        tier = next(t for t in plan.tables if t.name == "tier")
        assert tier.compute_kernel == "fused_uvm_caching" and tier.cache_load_factor
    bare = plan.__class__(**{**plan.__dict__, "predicted": None})
    back = from_sharding_plan(workload, to_sharding_plan(bare, workload), bare.workload.sha256)
    assert plan_to_json(back) == plan_to_json(bare)


def test_cuts_torchrec_cannot_run_are_refused_by_name():
    workload = _gpu_workload()
    plan = plan_workload(workload, search=IlpSearch(time_limit_s=2, candidates="torchrec"))
    data = json.loads(plan_to_json(plan))
    rw = next(t for t in data["tables"] if t["name"] == "rw")
    rw["shards"] = rw["shards"][:2]
    rw["shards"][1]["offsets"][0] = rw["shards"][0]["sizes"][0]
    rw["shards"][1]["sizes"][0] = 100_000 - rw["shards"][0]["sizes"][0]
    with pytest.raises(ShardoptError, match="table 'rw': TorchRec runs row_wise over every rank"):
        to_sharding_plan(plan_from_dict(data), workload)


class _Nested(torch.nn.Module):
    def __init__(self, ebc):
        super().__init__()
        self.arch = torch.nn.Module()
        self.arch.sparse = ebc


def _ebc(dims=(16, 64), names=("a", "b")):
    return EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=1000, feature_names=[f"f_{n}"])
                for n, d in zip(names, dims)],
        device=torch.device("meta"),
    )


def test_workload_from_a_nested_model_reads_constraints_and_topology():
    topology = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=2**34, ddr_cap=2**36)
    constraints = {"a": ParameterConstraints(pooling_factors=[7.5], sharding_types=["table_wise"]),
                   "b": ParameterConstraints(compute_kernels=["fused"])}
    workload, origins = workload_from_module(_Nested(_ebc()), topology, 128, constraints)
    a, b = workload.tables
    assert (a.pooling_factor, a.sharding_types) == (7.5, ("table_wise",))
    assert b.compute_kernels == ("fused",)
    assert workload.topology.hbm_cap == 2**34 and workload.topology.ddr_cap == 2 * 2**36
    assert origins["a"].module_path == "arch.sparse"
    # ...and back: the workload as TorchRec objects.
    ebc, cons, topo = module_from_workload(workload)
    assert [c.name for c in ebc.embedding_bag_configs()] == ["a", "b"]
    assert cons["a"].pooling_factors == [7.5] and topo.world_size == 4


@pytest.mark.parametrize("module, message", [
    (lambda: _Nested(_ebc(dims=(30, 64))), "embedding_dim 30 is not a multiple of 4"),
])
def test_unsupported_module_contents_are_clear_errors(module, message):
    with pytest.raises(ShardoptError, match=message):
        workload_from_module(module(), Topology(world_size=2, compute_device="cpu"), 8)


def test_an_embedding_collection_is_a_sequence_table_and_its_traffic_grows_with_lookups():
    ec = EmbeddingCollection(tables=[EmbeddingConfig(name="s", embedding_dim=16, num_embeddings=1000,
                                                     feature_names=["s"])], device=torch.device("meta"))
    workload, origins = workload_from_module(ec, Topology(world_size=2, compute_device="cpu"), 8,
                                             {"s": ParameterConstraints(pooling_factors=[20.0])})
    assert not workload.tables[0].pooled and origins["s"].module_path == ""
    from shardopt.arithmetic.traffic import comm_bytes

    pooled = comm_bytes(workload, "table_wise", 1000, 16, lookups=320.0, pooled=True)
    sequence = comm_bytes(workload, "table_wise", 1000, 16, lookups=320.0, pooled=False)
    assert sequence.pooled == pytest.approx(20 * pooled.pooled)  # a row per id, 20 ids per sample


def test_feature_processors_are_refused():
    from torchrec.modules.feature_processor_ import PositionWeightedModuleCollection
    from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="a", embedding_dim=16, num_embeddings=10, feature_names=["f"])],
        is_weighted=True, device=torch.device("meta"))
    fp = FeatureProcessedEmbeddingBagCollection(ebc, PositionWeightedModuleCollection({"f": 4}, device=torch.device("meta")))
    with pytest.raises(ShardoptError, match="feature processors"):
        workload_from_module(fp, Topology(world_size=2, compute_device="cpu"), 8)


def test_planner_honours_sharding_types_and_returns_valid_specs():
    constraints = {"a": ParameterConstraints(sharding_types=["column_wise"]),
                   "b": ParameterConstraints(sharding_types=["data_parallel"])}
    planner = ShardoptPlanner(topology=Topology(world_size=2, compute_device="cpu"), batch_size=64,
                              constraints=constraints, time_limit_s=1)
    plan = planner.collective_plan(_Nested(_ebc(dims=(64, 16))), SHARDERS)  # no process group: plans here
    module_plan = plan.plan["arch.sparse"]
    assert module_plan["a"].sharding_type == "column_wise"
    assert sum(m.shard_sizes[1] for m in module_plan["a"].sharding_spec.shards) == 64
    assert {m.placement.device().type for m in module_plan["a"].sharding_spec.shards} == {"cpu"}
    assert module_plan["b"].sharding_type == "data_parallel" and module_plan["b"].compute_kernel == "dense"
    assert check_plan(planner.last_workload, planner.last_plan).valid


def test_estimator_gives_torchrecs_planner_shardopts_costs():
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator

    from shardopt.costmodel.registry import resolve_cost_model

    topology = Topology(world_size=2, compute_device="cpu")
    estimator = ShardoptEstimator(topology, batch_size=64)
    planner = EmbeddingShardingPlanner(
        topology=topology, batch_size=64,
        enumerator=EmbeddingEnumerator(topology=topology, batch_size=64, estimator=estimator),
    )
    plan = planner.plan(_ebc(dims=(16, 64)), SHARDERS)
    assert set(plan.plan[""]) == {"a", "b"}
    # The estimates are shardopt's shard costs.
    options = EmbeddingEnumerator(topology=topology, batch_size=64, estimator=estimator).enumerate(
        _ebc(dims=(16, 64)), SHARDERS)
    option = next(o for o in options if o.name == "b" and o.sharding_type == "table_wise")
    workload = estimator._workload(options)
    model, _ = resolve_cost_model("analytic", workload)
    cost = model.shard_cost(workload, ShardSpec(workload.table("b"), "table_wise", 1000, 64, option.compute_kernel))
    assert option.shards[0].perf.total == pytest.approx(cost.total_ms)


def test_cli_from_torchrec_and_compare(runner, tmp_path):
    out = tmp_path / "m.yaml"
    result = run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "4",
                     "--device", "cpu", "--batch-size", "64", "--hbm-cap", "1GB", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert run_cli(runner, "plan", out, "-o", tmp_path / "p.json").exit_code == 0
    result = run_cli(runner, "compare", out, "--time-limit", "1")
    assert result.exit_code == 0, result.stderr
    assert "shardopt / torchrec: predicted" in result.stdout
    result = run_cli(runner, "compare", out, "--time-limit", "1", "--replay", "--rounds", "2")
    assert result.exit_code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    # planner, plan s, predicted step and bottleneck, replayed step and bottleneck
    replayed = [row[4:] for row in rows if len(row) == 6 and row[0] in ("shardopt", "torchrec")]
    assert len(replayed) == 2 and all(float(ms) > 0 for pair in replayed for ms in pair)
    assert all(float(step) >= float(bottleneck) - 1e-3 for step, bottleneck in replayed)
    assert "per-rank centres of 2 rounds side by side" in result.stdout


def test_the_planner_plans_for_the_gpus_named_or_the_local_one(monkeypatch):
    """TorchRec's Topology does not say which GPU the cluster has: ShardoptPlanner(hardware=...)
    does, else the GPU the planning process sees, else the cuda default."""
    topology = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=2**34)
    planner = ShardoptPlanner(topology=topology, batch_size=64, time_limit_s=1, hardware="h100")
    planner.collective_plan(_Nested(_ebc(dims=(64, 16))), SHARDERS)
    assert planner.last_workload.topology.hardware == "h100"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    workload, _ = workload_from_module(_Nested(_ebc()), topology, 64)
    assert workload.topology.hardware == "a100"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")  # no profile: the default
    workload, _ = workload_from_module(_Nested(_ebc()), topology, 64)
    assert workload.topology.hardware is None

    with pytest.raises(ShardoptError, match="ShardoptPlanner hardware: one of .*h100.*, got 'tpu'"):
        ShardoptPlanner(topology=topology, hardware="tpu")


def test_cli_from_torchrec_names_the_gpus(runner, tmp_path):
    import yaml

    out = tmp_path / "m.yaml"
    result = run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "16",
                     "--local-world-size", "8", "--batch-size", "64", "--hardware", "h100", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(out.read_text())["topology"]["hardware"] == "h100"
    for device, bad in (("cuda", "cpu"), ("cuda", "tpu"), ("cpu", "h100")):
        result = run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "2",
                         "--device", device, "--batch-size", "64", "--hardware", bad, "-o", tmp_path / "x.yaml")
        assert result.exit_code == 2 and "--hardware: for --device" in result.stderr, (device, bad)
        assert not (tmp_path / "x.yaml").exists()


def test_cli_from_torchrec_writes_what_the_default_sharders_run(runner, tmp_path):
    """The file is the workload ShardoptPlanner plans (TorchRec's default sharders): on CPU
    every table keeps the types DistributedModelParallel runs there (no row-wise), and a table
    narrowed to some types gets those types' kernels."""
    import yaml

    out = tmp_path / "m.yaml"
    assert run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "4", "--device",
                   "cpu", "--batch-size", "64", "-o", out).exit_code == 0
    tables = {t["name"]: t for t in yaml.safe_load(out.read_text())["tables"]}
    assert tables["user"]["sharding_types"] == ["data_parallel", "table_wise", "column_wise", "table_column_wise"]
    assert tables["item"]["compute_kernels"] == ["fused"] and tables["country"]["compute_kernels"] == ["dense"]
    module, constraints = __import__("examples.torchrec_planner", fromlist=["model"]).model()
    planner = ShardoptPlanner(topology=Topology(world_size=4, compute_device="cpu"), batch_size=64, time_limit_s=1)
    planner.constraints = constraints
    planner.plan(module)
    from shardopt.core.workload import read_workload

    written, _ = read_workload(out)
    assert [(t.name, t.sharding_types, t.compute_kernels) for t in planner.last_workload.tables] == \
        [(t.name, t.sharding_types, t.compute_kernels) for t in written.tables]


@pytest.mark.slow
def test_dmp_trained_with_a_plan_from_measured_statistics_matches_an_unsharded_model():
    """ShardoptPlanner(batches=...) measures the training batches themselves; the plan it makes
    trains to the unsharded reference as any other (CPU: no hot-row or UVM cuts run here)."""
    results = run_check(2, measured=True)
    assert results[0].measured_tables == 5  # every table's statistics measured (rank 0 planned)
    for r in results:
        assert r.max_pooled_error < 1e-5 and r.max_weight_error < 1e-5, r


def test_a_rank_that_dies_without_a_word_stops_the_wait_at_once():
    """A rank process that fails before it can report (here: its target takes the wrong arguments)
    is named within seconds; its peers' results were never coming, and the wait was 600 s."""
    import time

    from shardopt.torchrec.dmp_check import spawn_ranks

    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank \d: its process exited with 1 before it reported"):
        spawn_ranks(abs, 2, timeout=120)
    assert time.monotonic() - started < 60


def test_compare_refuses_a_sequence_table_as_input_naming_it(runner, tmp_path):
    """TorchRec's side is built as an EmbeddingBagCollection, which pools: a sequence table is
    input compare cannot use (exit 2, the file and field), not a plan TorchRec failed to find."""
    import yaml

    out = tmp_path / "m.yaml"
    assert run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "2", "--device",
                   "cpu", "--batch-size", "64", "--hbm-cap", "1GB", "-o", out).exit_code == 0
    data = yaml.safe_load(out.read_text())
    data["tables"][1]["pooled"] = False
    out.write_text(yaml.safe_dump(data))
    result = run_cli(runner, "compare", out, "--time-limit", "1")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert f"{out}: tables[1].pooled: false" in result.stderr


def test_compare_where_torchrec_finds_no_plan_prints_shardopts_side(runner, tmp_path, monkeypatch):
    """A plan shardopt found and TorchRec did not is the comparison's answer (exit 0), not a
    workload without a plan (exit 3, shardopt's side lost)."""
    import shardopt.torchrec.bounded as bounded
    from shardopt.core.errors import ErrorKind, ShardoptError

    out = tmp_path / "m.yaml"
    assert run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "2", "--device",
                   "cpu", "--batch-size", "64", "--hbm-cap", "1GB", "-o", out).exit_code == 0

    def no_plan(*args, **kwargs):
        raise ShardoptError("TorchRec's planner found no plan: strict constraints", kind=ErrorKind.INFEASIBLE)

    monkeypatch.setattr(bounded, "bounded_torchrec_plan", no_plan)
    result = run_cli(runner, "compare", out, "--time-limit", "1")
    assert result.exit_code == 0, result.stderr
    assert "no plan: TorchRec's planner found no plan: strict constraints" in result.stdout
    assert "no ratio, TorchRec's planner gave no plan" in result.stdout and "in time" not in result.stdout
    assert next(line for line in result.stdout.splitlines() if line.startswith("shardopt "))
    assert "TorchRec's planner: found no plan after" in result.stderr


def test_compare_bounds_torchrecs_planner_and_still_prints_shardopts_side(runner, tmp_path, monkeypatch):
    """TorchRec's planner runs in a child process; one stopped at the hard bound leaves its side
    empty with the reason, shardopt's side printed and replayed alone; progress goes to stderr."""
    import shardopt.torchrec.bounded as bounded

    out = tmp_path / "m.yaml"
    assert run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "2", "--device",
                   "cpu", "--batch-size", "64", "--hbm-cap", "1GB", "-o", out).exit_code == 0
    monkeypatch.setattr(bounded, "hard_limit", lambda timeout_s: 0.3)  # before the child has even imported torch
    result = run_cli(runner, "compare", out, "--time-limit", "1", "--torchrec-timeout", "1", "--replay", "--rounds", "1")
    assert result.exit_code == 0, result.stderr
    assert "TorchRec's planner did not finish in 0 s (its search was given 1 s; --torchrec-timeout)" in result.stdout
    shardopt_row = next(line.split() for line in result.stdout.splitlines() if line.startswith("shardopt "))
    assert len(shardopt_row) == 6 and float(shardopt_row[4]) > 0  # predicted and replayed
    assert "no ratio, TorchRec's planner gave no plan in time" in result.stdout
    assert "shardopt: planned in" in result.stderr and "TorchRec's planner: stopped after" in result.stderr


def test_a_torchrec_search_cut_at_its_timeout_keeps_its_best_plan_and_says_so(monkeypatch):
    """A search stopped by TorchRec's own timeout_seconds returns its best proposal: planned, with
    a note (h100-16's 300 tables take TorchRec minutes; given 1 s it stops); a finished one has none."""
    import shardopt.torchrec.bounded as bounded
    from shardopt.core.workload import read_workload

    wl, sha = read_workload("configs/h100-16.yaml")
    lines = []
    monkeypatch.setattr(bounded, "TICK_S", 0.5)
    cut = bounded.bounded_torchrec_plan(wl, sha, 1, lines.append)
    assert cut.plan is not None and "did not finish its search in 1 s" in cut.note and lines
    assert {t.name for t in cut.plan.tables} == {t.name for t in wl.tables}
    small, sha = read_workload("configs/dlrm-medium.yaml")
    done = bounded.bounded_torchrec_plan(small, sha, 600)
    assert done.plan is not None and done.note == ""
