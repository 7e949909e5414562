"""The plan-quality benchmark: tasks, baseline planners, the suite runner, its report, the CI gate."""
