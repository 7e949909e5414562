"""Reading user files with limits: every input kind is parsed here before its schema sees it.

A hostile or broken file must end in one line naming the file and where in it, never in a
traceback, a hang or gigabytes of memory. So the readers below bound what they accept:

- ``MAX_FILE_BYTES`` per file (workloads, plans, cost models, profile manifests);
- ``MAX_DEPTH`` levels of nesting (YAML's composer and JSON's decoder recurse);
- ``MAX_NODES`` values after YAML aliases are expanded (a 491-byte alias bomb is billions);
- duplicate mapping keys in YAML are an error, not "last one wins";
- every number finite (no NaN, no Infinity) and every integer within ``MAX_INT`` (2**62).

Schemas then bound each field to its own range (see ``workload.py`` and ``plan.py``).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from shardopt.core.errors import ShardoptError
from shardopt.core.validation import format_path

MAX_FILE_BYTES = 64 * 2**20
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_INT = 2**62


def read_bytes(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes, or ShardoptError: missing, a folder, unreadable, or over ``limit``."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ShardoptError(f"{path}: is a folder, not a {what}")
        size = path.stat().st_size
        if size > limit:
            raise ShardoptError(f"{path}: {size} bytes, more than the {limit} a {what} may have")
        return path.read_bytes()
    except FileNotFoundError:
        raise ShardoptError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise ShardoptError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def decode_text(raw: bytes, path: str | Path, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShardoptError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None


def check_values(data: Any, source: str) -> Any:
    """Refuse non-finite floats, huge integers and deep nesting anywhere in parsed data."""
    stack = [(data, (), 0)]
    while stack:
        value, loc, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ShardoptError(f"{source}: {format_path(loc[:8])}...: nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ShardoptError(f"{source}: {format_path(loc)}: must be a finite number, got {value}")
        if isinstance(value, int) and abs(value) > MAX_INT:
            raise ShardoptError(f"{source}: {format_path(loc)}: must be at most 2**62, got a {len(str(abs(value)))}-digit number")
        if isinstance(value, dict):
            stack.extend((v, loc + (str(k),), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, loc + (i,), depth + 1) for i, v in enumerate(value))
    return data


# --- YAML -------------------------------------------------------------------------------------


_PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, where PyYAML was built with it
LIBYAML_NESTING = "maximum nesting depth"  # libyaml's own limit (1000 levels), reached before ours is checked


class _Limits:
    """No duplicate keys; nesting bounded as Python's composer recurses (libyaml's composes in C:
    there the composed nodes are measured, as alias expansion is)."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = key_node.value
                    if key in seen and key != "<<":
                        raise yaml.YAMLError(
                            f"line {key_node.start_mark.line + 1}: duplicate key {key!r}"
                            f" (also on line {seen[key] + 1})"
                        )
                    seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_EXPONENT_TAG = "tag:shardopt,2026:exponent"
_EXPONENT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _exponent(loader, node) -> int | float:
    text = loader.construct_scalar(node).replace("_", "")
    number = float(text)  # 1e999999999: inf, refused as any non-finite number is (never built digit by digit)
    if abs(number) > MAX_INT:
        return number
    value = Decimal(text)  # whole as written; the integer is the float's (what a float writes reads back equal)
    return int(number) if value == value.to_integral_value() else number


def _exponent_first(resolvers: dict, tag: str) -> dict:
    """PyYAML's implicit resolvers with the exponent form tried first, as ``tag``."""
    return {first: ([(tag, _EXPONENT)] if first in "-+0123456789" else []) + list(held)
            for first, held in resolvers.items()}


class _Numbers:
    """A number written with an exponent is a number, and a whole one an integer: PyYAML (YAML
    1.1) reads ``1e6`` as a string and ``2.0e+4`` as a float, so ``num_embeddings: 1e6`` failed as
    "not a valid integer" where whoever wrote it meant a million (YAML 1.2 reads it as a number)."""

    yaml_implicit_resolvers = _exponent_first(yaml.SafeLoader.yaml_implicit_resolvers, _EXPONENT_TAG)
    yaml_constructors = {**yaml.SafeLoader.yaml_constructors, _EXPONENT_TAG: _exponent}


# PyYAML's safe loader with libyaml's parser: 10x faster on a 1000-table workload.
_LimitedLoader = type("_LimitedLoader", (_Limits, _Numbers, _PARSER), {})


class _Dumper(yaml.SafeDumper):
    """Quotes a string that reads as a number with an exponent here (a table named ``1e6``), as
    PyYAML quotes one that reads as a number there; a float keeps its plain ``1.0e-05``."""

    yaml_implicit_resolvers = _exponent_first(yaml.SafeDumper.yaml_implicit_resolvers, "tag:yaml.org,2002:float")


def dump_yaml(data: Any, **options) -> str:
    """YAML text that :func:`load_yaml` reads back as ``data``."""
    return yaml.dump(data, Dumper=_Dumper, **options)


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _too_deep(node: yaml.Node, heights: dict[int, int]) -> str:
    """Where the nesting passes MAX_DEPTH: the line of the first node below it on a deepest path."""
    for _ in range(MAX_DEPTH):
        node = max(_children(node), key=lambda c: heights[id(c)])
    return f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep"


def _expanded_size(node: yaml.Node) -> int:
    """How many values the node graph holds once aliases are expanded (memoised, no recursion);
    ValueError where it nests more than MAX_DEPTH levels or an alias holds itself."""
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    visiting: set[int] = set()
    stack = [(node, False)]
    while stack:
        current, done = stack.pop()
        if id(current) in sizes:
            continue
        if not done:
            visiting.add(id(current))
        children = _children(current)
        if done or not children:
            total = 1 + sum(sizes.get(id(c), 0) for c in children)
            sizes[id(current)] = min(total, MAX_NODES + 1)
            heights[id(current)] = 1 + max((heights[id(c)] for c in children), default=0)
            visiting.discard(id(current))
            continue
        if any(id(c) in visiting and id(c) not in sizes for c in children):
            raise ValueError("an alias refers to the node that holds it")
        stack.append((current, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    if heights[id(node)] > MAX_DEPTH:
        raise ValueError(_too_deep(node, heights))
    return sizes[id(node)]


def load_yaml(path: str | Path, what: str) -> tuple[Any, bytes]:
    """Parsed YAML and its bytes; ShardoptError naming the file and line on anything unusable."""
    raw = read_bytes(path, what)
    text = decode_text(raw, path, what)
    loader = _LimitedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            data = None
        else:
            try:
                size = _expanded_size(node)
            except ValueError as exc:
                raise ShardoptError(f"{path}: malformed YAML: {exc}") from None
            if size > MAX_NODES:
                raise ShardoptError(f"{path}: malformed YAML: aliases expand to more than {MAX_NODES} values")
            data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if LIBYAML_NESTING in str(getattr(exc, "problem", "")):
            where = f"line {mark.line + 1}: " if mark else ""
            raise ShardoptError(f"{path}: malformed YAML: {where}nested more than {MAX_DEPTH} levels deep") from None
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ShardoptError(f"{path}: malformed YAML: {where}{problem}") from None
    except RecursionError:
        raise ShardoptError(f"{path}: malformed YAML: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()
    return check_values(data, str(path)), raw


# --- JSON -------------------------------------------------------------------------------------


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are unique: a key given twice would silently keep the last."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice in one object")
        out[key] = value
    return out


def parse_json(text: str, source: str) -> Any:
    """Parsed JSON text with the limits above; ``source`` names it in errors."""
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ShardoptError(f"{source}: malformed JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ShardoptError(f"{source}: malformed JSON: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # NaN/Infinity, or an integer past Python's digit limit
        raise ShardoptError(f"{source}: malformed JSON: {str(exc).splitlines()[0]}") from None
    return check_values(data, source)


def load_json(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> Any:
    raw = read_bytes(path, what, limit)
    return parse_json(decode_text(raw, path, what), str(path))
