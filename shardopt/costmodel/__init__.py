"""Cost models: predict each rank's forward/backward compute and communication for a plan."""

from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.costmodel.analytic import AnalyticCostModel

__all__ = ["CostModel", "ShardCost", "AnalyticCostModel"]
