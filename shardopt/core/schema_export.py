"""JSON Schema of the workload and plan files, exported from the pydantic models that read them,
for editors that complete and check YAML and JSON (``python -m shardopt.core.schema_export DIR``).

The schema says the shapes and bounds; checks across fields (a table that fits no rank, a plan
that covers a table twice) stay with ``shardopt validate``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import TypeAdapter

from shardopt.core.files import write_atomic
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload

SCHEMAS = {"workload": (Workload, "shardopt workload (YAML)"), "plan": (Plan, "shardopt plan (JSON)")}


def schema(name: str) -> dict:
    """The JSON Schema of one file kind, with a title and the draft it follows."""
    model, title = SCHEMAS[name]
    out = TypeAdapter(model).json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **out}


def schema_text(name: str) -> str:
    return json.dumps(schema(name), indent=1, sort_keys=True) + "\n"


def export(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMAS:
        path = folder / f"{name}.schema.json"
        write_atomic(path, schema_text(name))
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover
    for written in export(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schema")):
        print(f"wrote {written}")
