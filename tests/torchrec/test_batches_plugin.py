"""ShardoptPlanner(batches=...) measures the dataloader's batches as `stats --from-batches` does,
and reaches the plan the CLI reaches from the same statistics."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchrec")

from click.testing import CliRunner  # noqa: E402
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation  # noqa: E402
from torchrec.distributed.planner.types import Topology  # noqa: E402

from examples.synthetic_batches import loader  # noqa: E402
from examples.torchrec_planner import model  # noqa: E402
from shardopt.cli import main  # noqa: E402
from shardopt.core.errors import ShardoptError  # noqa: E402
from shardopt.torchrec import ShardoptPlanner  # noqa: E402


def test_the_plugin_measures_the_batches_and_plans_as_the_cli_does(tmp_path):
    runner = CliRunner()
    args = ["from-torchrec", "examples.torchrec_planner:model", "--world-size", "4", "--device", "cpu",
            "--batch-size", "64", "--hbm-cap", "1GB", "-o", str(tmp_path / "m.yaml")]
    assert runner.invoke(main, args).exit_code == 0
    assert runner.invoke(main, ["stats", "--from-batches", "examples.synthetic_batches:loader", "--workload",
                                str(tmp_path / "m.yaml"), "--batches", "40", "-o", str(tmp_path / "s.yaml")]).exit_code == 0
    result = runner.invoke(main, ["plan", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "p.json"), "--time-limit", "1"])
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "p.json").read_text())

    module, constraints = model()
    planner = ShardoptPlanner(topology=Topology(world_size=4, compute_device="cpu", ddr_cap=10**9), batch_size=64,
                              constraints=constraints, time_limit_s=1, batches=loader(), stats_batches=40,
                              storage_reservation=FixedPercentageStorageReservation(percentage=0.0))
    planner.plan(module)
    tables = {t.name: t for t in planner.last_workload.tables}
    assert all(t.access.distribution == "histogram" and t.access.batches == 40 for t in tables.values())
    assert [(t.name, t.sharding_type, [s.rank for s in t.shards]) for t in planner.last_plan.tables] == \
        [(t["name"], t["sharding_type"], [s["rank"] for s in t["shards"]]) for t in cli["tables"]]
    planner.plan(module)  # the batches were measured once: planning again needs no new ones
    assert planner.last_workload.tables == planner.last_workload.tables


def test_bad_batches_keywords_are_refused():
    with pytest.raises(ShardoptError, match="ShardoptPlanner batches: must be an iterable"):
        ShardoptPlanner(batches=5)
    with pytest.raises(ShardoptError, match="ShardoptPlanner stats_batches"):
        ShardoptPlanner(batches=[], stats_batches=0)
