"""The data every stage shares: workload, plan, units, errors, safe files and bounded loaders."""
