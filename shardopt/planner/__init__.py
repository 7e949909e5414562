"""The one entry every caller uses: a workload and a configuration in, a plan out."""

from shardopt.planner.factory import build_search, plan_with, resolve_model
from shardopt.planner.pipeline import plan_workload

__all__ = ["build_search", "plan_with", "plan_workload", "resolve_model"]
