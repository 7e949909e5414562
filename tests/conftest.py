from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).parent.parent
DATA = ROOT / "tests" / "data"
CONFIGS = ROOT / "configs"
PACKAGED_PROFILE = ROOT / "shardopt" / "data" / "profiles" / "cpu-full"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run_cli(runner: CliRunner, *args: str):
    """Invoke the CLI; the result's output is shown when an assertion on it fails."""
    from shardopt.cli import main

    result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    print("stdout:", result.stdout)
    print("stderr:", result.stderr)
    return result


class FakeMachine:
    """A stand-in for replay: each table's lookups cost the model's price times its own hidden
    factor (stable per name), so the truth of any plan is known."""

    def __init__(self, model, sigma: float = 0.35) -> None:
        self.model, self.sigma, self.calls = model, sigma, 0

    def factor(self, name: str) -> float:
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        return float(np.exp(self.sigma * rng.standard_normal()))

    def ranks(self, workload, plan):
        from shardopt.costmodel.table_factors import rank_samples

        samples = rank_samples(self.model, workload, plan.tables, [(0.0, 0.0)] * workload.topology.world_size)
        return [tuple(s.overhead_ms[p] + sum(c[p] * self.factor(n) for n, c in s.tables.items()) for p in (0, 1))
                for s in samples]

    def replicas(self, model, workload, **kwargs):
        """Stands in for ``alone.replica_factors``: each replicable table's hidden factor as a replica."""
        from shardopt.costmodel.table_factors import TableFactor
        from shardopt.measure.alone import replicable

        return tuple(TableFactor(t.name, t.num_embeddings, t.embedding_dim, float(t.pooling_factor),
                                 round(self.factor(t.name + "/replica"), 6), round(self.factor(t.name + "/replica"), 6),
                                 "dense") for t in replicable(model, workload))

    def replay(self, workload, plans, rounds, **kwargs):
        from shardopt.core.plan import RankBreakdown

        self.calls += 1
        per_rank = {}
        for name, plan in plans.items():
            per_rank[name] = tuple(RankBreakdown(rank=r, fwd_compute_ms=f, bwd_compute_ms=b, fwd_comm_ms=0.0,
                                                 bwd_comm_ms=0.0, total_ms=f + b, hbm_bytes=0)
                                   for r, (f, b) in enumerate(self.ranks(workload, plan)))
        return type("SideBySide", (), {"per_rank": per_rank})()
