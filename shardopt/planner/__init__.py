"""The one entry every caller uses: a workload and a configuration in, a plan out."""

from shardopt.planner.pipeline import plan_workload

__all__ = ["plan_workload"]
