"""Measuring plans on this machine's kernels: replay and its report."""
