"""2D sparse parallelism on TorchRec's side: the group plan's ranks, DMPCollection's layout and
remapping, and a 2D training run with its sync against unsharded references."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
from torchrec.distributed.model_parallel import DMPCollection  # noqa: E402
from torchrec.distributed.planner.types import Topology  # noqa: E402

from shardopt.core.errors import ShardoptError  # noqa: E402
from shardopt.core.parallelism import GroupLayout  # noqa: E402
from shardopt.torchrec import ShardoptPlanner  # noqa: E402
from shardopt.torchrec.dmp_check import build_model  # noqa: E402


def _group_plan(world: int, local: int, group: int, inter: bool = False):
    planner = ShardoptPlanner(topology=Topology(world_size=world, local_world_size=local, compute_device="cuda",
                                                hbm_cap=2**30), batch_size=8, hardware="h100", time_limit_s=0.5,
                              sharding_group_size=group, use_inter_host_allreduce=inter)
    return planner, planner.plan(build_model("meta"))


@pytest.mark.parametrize("world,local,group,inter", [(4, 4, 2, False), (16, 8, 4, False), (16, 8, 8, True),
                                                      (32, 8, 16, False)])
def test_the_group_plan_lands_where_dmpcollection_puts_each_group(world, local, group, inter, monkeypatch):
    """Ranks of the plan are the group's (0..G-1); DMPCollection's own remap sends them to the
    global ranks shardopt's layout (and so its link pricing) says."""
    import torchrec.distributed.model_parallel as model_parallel

    monkeypatch.setattr(model_parallel, "get_local_size", lambda: local)  # it asks the process group
    planner, plan = _group_plan(world, local, group, inter)
    assert planner.last_plan.world_size == group and planner.last_plan.parallelism.world_size == world
    assert f"sharding group of {group} ranks over {world}" in planner.last_stats
    ranks = {name: list(ps.ranks) for mp in plan.plan.values() for name, ps in mp.items()}
    assert all(0 <= r < group for rs in ranks.values() for r in rs)
    layout = GroupLayout(world, local, group, inter)
    this = SimpleNamespace(_device=torch.device("cuda"))
    for rank in range(world):
        remapped = copy.deepcopy(plan)
        DMPCollection._remap_sharding_plan(this, plan=remapped, rank=rank, step=world // group,
                                           sharding_group_size=group, use_inter_host_allreduce=inter)
        g = next(g for g in range(layout.replicas) if rank in layout.group_ranks(g))
        for mp in remapped.plan.values():
            for name, ps in mp.items():
                assert list(ps.ranks) == [layout.global_rank(g, p) for p in ranks[name]]


def test_a_group_size_that_does_not_divide_the_world_is_refused_naming_the_keyword():
    with pytest.raises(ShardoptError, match="ShardoptPlanner sharding_group_size: must divide world_size 6"):
        _group_plan(6, 6, 4)
    with pytest.raises(ShardoptError, match="ShardoptPlanner sharding_group_size: must be a number of ranks"):
        ShardoptPlanner(sharding_group_size=0)
    with pytest.raises(ShardoptError, match="ShardoptPlanner sharding_strategy"):
        ShardoptPlanner(sharding_group_size=2, sharding_strategy="grid")


def test_torchrecs_sharding_strategy_enum_is_taken():
    from torchrec.distributed.types import ShardingStrategy

    planner = ShardoptPlanner(sharding_group_size=2, sharding_strategy=ShardingStrategy.FULLY_SHARDED)
    assert planner.parallelism.strategy == "fully_sharded"


@pytest.mark.slow
def test_a_2d_run_trains_syncs_and_matches_the_averaged_references():
    """World 4 in groups of 2 under gloo: DMPCollection itself refuses CPU (its error recorded),
    so TorchRec's 2D parts run without it (shardopt/torchrec/dmp2d_check.py)."""
    from shardopt.torchrec.dmp2d_check import run_check

    results = run_check(4, 2)
    assert "DMPCollection only supports CUDA" in results[0].collection_error
    assert results[0].mesh == [[0, 2], [1, 3]]  # DMPCollection's groups: strided, replicas side by side
    assert {r.group for r in results} == {0, 1}
    assert all(r.max_pooled_error < 1e-5 and r.unsynced_weight_error < 1e-5 for r in results)
    assert results[0].divergence > 1e-3  # the groups had drifted: the sync had work to do
    assert all(r.max_weight_error < 1e-5 for r in results)


def test_from_torchrec_records_the_group_and_the_cli_reaches_the_plugins_plan(tmp_path):
    """The same model and world: from-torchrec --sharding-group-size auto, then plan, gives the
    plan ShardoptPlanner(sharding_group_size="auto") gives."""
    import json

    import yaml
    from click.testing import CliRunner

    from shardopt.cli import main

    args = ["from-torchrec", "examples.torchrec_planner:model", "--world-size", "16", "--local-world-size", "8",
            "--batch-size", "64", "--hardware", "h100", "--hbm-cap", "64MiB", "--sharding-group-size", "auto",
            "--sync-every", "10", "-o", str(tmp_path / "m.yaml")]
    runner = CliRunner()
    assert runner.invoke(main, args).exit_code == 0
    data = yaml.safe_load((tmp_path / "m.yaml").read_text())
    assert data["parallelism"] == {"sharding_group_size": "auto", "sync_every": 10}
    result = runner.invoke(main, ["plan", str(tmp_path / "m.yaml"), "-o", str(tmp_path / "p.json"), "--time-limit", "1"])
    assert result.exit_code == 0, result.output
    cli_plan = json.loads((tmp_path / "p.json").read_text())

    from examples.torchrec_planner import model
    from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation

    planner = ShardoptPlanner(topology=Topology(world_size=16, local_world_size=8, compute_device="cuda",
                                                hbm_cap=64 * 2**20), batch_size=64, hardware="h100", time_limit_s=1,
                              sharding_group_size="auto", sync_every=10,
                              storage_reservation=FixedPercentageStorageReservation(percentage=0.0))
    module, constraints = model()
    planner.constraints = constraints
    planner.plan(module)
    ours = planner.last_plan
    assert ours.parallelism.sharding_group_size == cli_plan["parallelism"]["sharding_group_size"]
    assert [(t.name, t.sharding_type, [s.rank for s in t.shards]) for t in ours.tables] == \
        [(t["name"], t["sharding_type"], [s["rank"] for s in t["shards"]]) for t in cli_plan["tables"]]


def test_a_bad_sharding_group_size_option_is_one_line(tmp_path):
    from click.testing import CliRunner

    from shardopt.cli import main

    for bad, says in (("5", "must divide world_size 16"), ("x", "a number of ranks or 'auto'")):
        result = CliRunner().invoke(main, ["from-torchrec", "examples.torchrec_planner:model", "--world-size", "16",
                                           "--batch-size", "64", "--sharding-group-size", bad, "-o",
                                           str(tmp_path / "m.yaml")])
        assert result.exit_code == 2 and says in result.output and not (tmp_path / "m.yaml").exists()
