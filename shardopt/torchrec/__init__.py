"""shardopt for TorchRec users: ``from shardopt.torchrec import ShardoptPlanner, ShardoptEstimator``.

Imported lazily, so the rest of shardopt does not need TorchRec installed.
"""

__all__ = ["ShardoptPlanner", "ShardoptEstimator", "workload_from_module", "module_from_workload",
           "to_sharding_plan", "from_sharding_plan"]


def __getattr__(name):
    if name in ("ShardoptPlanner", "ShardoptEstimator"):
        from shardopt.torchrec import planner

        return getattr(planner, name)
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
