"""Workloads from data: synthetic workloads, trace statistics, and a workload from a trace."""
