"""Bridges to TorchRec: its estimator on our plans (more with the planner plugin)."""
