from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).parent.parent
DATA = ROOT / "tests" / "data"
CONFIGS = ROOT / "configs"
PACKAGED_PROFILE = ROOT / "shardopt" / "data" / "profiles" / "cpu-full"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run_cli(runner: CliRunner, *args: str):
    """Invoke the CLI; the result's output is shown when an assertion on it fails."""
    from shardopt.cli import main

    result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    print("stdout:", result.stdout)
    print("stderr:", result.stderr)
    return result
