"""The profiler joins a torchrun launch and measures all-to-all at the launcher's world size."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_profile_under_torchrun_measures_launcher_world(tmp_path):
    out = tmp_path / "p"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--standalone", "-m", "shardopt", "profile", "--preset", "unit", "-o", str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert records and all(r["kind"] == "a2a" and r["world_size"] == 2 for r in records)
    assert {r["pattern"] for r in records} == {"even", "pooled"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launcher"] == "torchrun" and manifest["backend"] == "gloo"
