"""Why the hedge was taken out (kept to rerun): the default path with the all-row-wise hedge of
commit f016e3a beside it without, and the nominal search, replayed side by side with TorchRec's.

    git checkout f016e3a -- shardopt/search/hedge.py shardopt/costmodel/uncertainty.py shardopt/planner/pipeline.py
    SHARDOPT_CPU_ID="GenuineIntel/6/85/7 avx2" python benchmarks/hedge_ab.py 1000 4 7   # seed, per regime, rounds

Without the hedge's code (today's tree), ``default`` and ``no-hedge`` are the same plans: their
difference is the replay's noise.
"""
import sys, math, time, warnings, logging, numpy as np
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
import shardopt.planner.pipeline as pipeline
from shardopt.bench.regimes import REGIMES, regime_task
from shardopt.contracts import Breakdown, PlanConfig
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.measure.replay import comm_for, replay_side_by_side
from shardopt.planner.factory import plan_with
from shardopt.torchrec.to_model import torchrec_plan
seed0, per, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
real = getattr(pipeline, "hedged", lambda w, m, result, d: result)
ratios = {}; t0 = time.perf_counter()
for regime in REGIMES:
    for i in range(per):
        task = regime_task(regime, seed0 + i); w = task.workload
        packaged, _ = resolve_cost_model("analytic", w)
        try:
            plans = {"torchrec": torchrec_plan(w)}
        except Exception:
            print(task.name, "no TorchRec plan"); continue
        pipeline.hedged = real
        plans["default"] = plan_with(w, PlanConfig())
        pipeline.hedged = lambda w, m, result, d: result
        plans["no-hedge"] = plan_with(w, PlanConfig())
        pipeline.hedged = real
        plans["nominal"] = plan_with(w, PlanConfig(robust="off"))
        hedged = "hedge" in plans["default"].predicted.search.algorithm
        res = replay_side_by_side(w, plans, rounds, comm=comm_for(w, packaged))
        base = Breakdown.of(res.per_rank["torchrec"]).step_ms
        cells = []
        for k in plans:
            if k == "torchrec": continue
            m = np.array([r.fwd_compute_ms + r.bwd_compute_ms for r in res.per_rank[k]])
            r = Breakdown.of(res.per_rank[k]).step_ms / base
            ratios.setdefault(k, []).append((r, m.max() / m.mean()))
            cells.append(f"{k}={r:.3f}/{m.max()/m.mean():.2f}")
        print(task.name, "HEDGED" if hedged else "", " ".join(cells), f"({time.perf_counter()-t0:.0f} s)", flush=True)
for k, rows in ratios.items():
    r, imb = np.array(rows).T
    print(f"{k}: geomean {math.exp(float(np.mean(np.log(r)))):.3f} worst {r.max():.3f} imb median {np.median(imb):.3f} <=1.10 {np.mean(imb<=1.10):.0%}")
