"""The ``shardopt`` command: each command parses, calls one library function, prints.

Errors exit through one place (:mod:`shardopt.cli.app`); option groups live in
:mod:`shardopt.cli.options`; commands are grouped by what they do.
"""

from shardopt.cli import gating, measuring, planning, resharding, sweeping, tracing, workloads  # noqa: F401 - registers the commands
from shardopt.cli.app import main

__all__ = ["main"]
