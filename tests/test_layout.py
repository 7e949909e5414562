"""The house rules that keep the code readable, checked so that they stay true.

Layers and cycles are ``lint-imports``' (contracts in pyproject.toml); size limits, the module
map in docs/architecture.md, the README's size and the exported JSON Schemas are checked here.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "shardopt"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_or_function_is_too_long(path):
    text = path.read_text()
    assert text.count("\n") <= MAX_FILE_LINES, f"{path}: over {MAX_FILE_LINES} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            assert length <= MAX_FUNCTION_LINES, f"{path}:{node.lineno} {node.name}: {length} lines"


def test_the_architecture_page_maps_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in SOURCES
               if p.name not in ("__init__.py", "__main__.py") and p.name not in page]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_layers_hold_and_no_import_cycle():
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if linter is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([linter, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_bytes()) < 12 * 1024


@pytest.mark.parametrize("name", ["workload", "plan"])
def test_the_exported_json_schemas_are_current(name):
    from shardopt.core.schema_export import schema_text

    path = ROOT / "docs" / "schema" / f"{name}.schema.json"
    assert path.read_text() == schema_text(name), "run: python -m shardopt.core.schema_export docs/schema"


def test_the_shipped_files_satisfy_their_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    workload = json.loads((ROOT / "docs" / "schema" / "workload.schema.json").read_text())
    plan = json.loads((ROOT / "docs" / "schema" / "plan.schema.json").read_text())
    for config in sorted((ROOT / "configs").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(config.read_text()), workload)
    for golden in sorted((ROOT / "tests" / "data" / "golden").glob("*.json"))[:10]:
        jsonschema.validate(json.loads(golden.read_text()), plan)
