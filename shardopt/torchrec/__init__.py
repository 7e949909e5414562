"""shardopt for TorchRec users: ``from shardopt.torchrec import ShardoptPlanner, ShardoptEstimator``.

Imported lazily, so the rest of shardopt does not need TorchRec installed.
"""

__all__ = ["ShardoptPlanner", "ShardoptEstimator", "ShardoptPlannerError", "workload_from_module", "module_from_workload",
           "to_sharding_plan", "from_sharding_plan"]


def __getattr__(name):
    if name == "ShardoptPlanner":
        from shardopt.torchrec.planner import ShardoptPlanner

        return ShardoptPlanner
    if name == "ShardoptEstimator":
        from shardopt.torchrec.estimator import ShardoptEstimator

        return ShardoptEstimator
    if name == "ShardoptPlannerError":
        from shardopt.torchrec.planner_errors import ShardoptPlannerError

        return ShardoptPlannerError
    if name == "workload_from_module":
        from shardopt.torchrec.from_model import workload_from_module

        return workload_from_module
    if name == "module_from_workload":
        from shardopt.torchrec.to_model import module_from_workload

        return module_from_workload
    if name in ("to_sharding_plan", "from_sharding_plan"):
        from shardopt.torchrec import sharding_plan

        return getattr(sharding_plan, name)
    raise AttributeError(name)
