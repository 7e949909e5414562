"""Turn pydantic's validation errors into shardopt's one-line messages.

Both user files (workload YAML, plan JSON) are declared as pydantic dataclasses; this module walks an
error's location back to a ``tables[3].embedding_dim`` style path and offers a did-you-mean for
unknown keys, so every bad field reads ``FILE: PATH: reason, got VALUE``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Sequence

from pydantic import ConfigDict, ValidationError

from shardopt.core.errors import FieldError

# Every file-facing dataclass forbids unknown keys and is immutable once loaded.
STRICT = ConfigDict(extra="forbid")


def format_path(loc: Sequence[Any]) -> str:
    """('tables', 3, 'embedding_dim') -> 'tables[3].embedding_dim'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _walk(root: type, loc: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """Follow ``loc`` through the declared types.

    Returns the location without pydantic's union tags (users never write those) and the field
    names of the dataclass that holds the last element ([] where the walk loses the type).
    """
    current: Any = root
    shown: list[Any] = []
    for part in loc[:-1]:
        current = _unwrap(current)
        origin = typing.get_origin(current)
        if isinstance(part, int) and origin in (tuple, list):
            current = typing.get_args(current)[0]
            shown.append(part)
        elif origin in (typing.Union, types.UnionType):
            # A tagged union: pydantic puts the tag into the location; pick the member it names.
            match = [m for m in typing.get_args(current) if part in _tags_of(m)]
            if not match:
                return shown + list(loc[len(shown) :]), []
            current = match[0]
        elif dataclasses.is_dataclass(current) and part in _hints(current):
            current = _hints(current)[part]
            shown.append(part)
        else:
            return shown + list(loc[len(shown) :]), []
    shown.extend(loc[-1:])
    current = _unwrap(current)
    if dataclasses.is_dataclass(current):
        return shown, [f.name for f in dataclasses.fields(current)]
    return shown, []


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and Optional[...] down to the type that holds the fields."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        stripped = _strip_optional(tp)
        if stripped is tp:
            return tp
        tp = stripped


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None))
    return tp


def _tags_of(cls: Any) -> set:
    """The values a tagged-union member's Literal fields take (its ``distribution`` or ``kind``)."""
    if not dataclasses.is_dataclass(cls):
        return set()
    tags = set()
    for hint in typing.get_type_hints(cls).values():
        if typing.get_origin(hint) is typing.Literal and len(typing.get_args(hint)) == 1:
            tags.add(typing.get_args(hint)[0])
    return tags


def _clean_message(error: dict[str, Any]) -> str:
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg[:1].lower() + msg[1:]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")


def first_error_message(source: str, root: type, exc: ValidationError) -> str:
    """The first validation error as ``SOURCE: PATH: reason``, one line."""
    path, reason = first_error(root, exc)
    return f"{source}: {path}: {reason}"


def first_error(root: type, exc: ValidationError) -> tuple[str, str]:
    """The first validation error as (``tables[3].embedding_dim``, reason)."""
    errors = exc.errors()
    # An unknown key explains the "missing" error its typo causes, so report it first.
    errors.sort(key=lambda e: e["type"] not in _UNKNOWN_KEY)
    error = errors[0]
    kind = error["type"]
    loc, known = _walk(root, list(error["loc"]))
    if kind in _UNKNOWN_KEY:
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        allowed = f" (known: {', '.join(known)})" if known and not hint else ""
        return format_path(loc), f"unknown field{suggestion}{allowed}"
    if kind == "union_tag_invalid":
        ctx = error.get("ctx", {})
        tag = str(ctx.get("discriminator", "'distribution'")).strip("'")
        return (
            f"{format_path(loc)}.{tag}" if loc else tag,
            f"must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}",
        )
    if kind == "too_short":
        ctx = error.get("ctx", {})
        return (
            format_path(loc),
            f"must list at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}",
        )
    if kind == "missing":
        return format_path(loc), "required field is missing"
    msg = _clean_message(error)
    if "got " in msg:
        return format_path(loc), msg
    return format_path(loc), f"{msg}, got {_short(error.get('input'))}"


def validate_as(root: type, data: Any, source: str) -> Any:
    """Build ``root`` from plain data or raise ShardoptError naming the first bad field."""
    from pydantic import TypeAdapter

    if not isinstance(data, dict):
        raise FieldError(source, "(top level)", f"must be a mapping, got {type(data).__name__}")
    try:
        return TypeAdapter(root).validate_python(data)
    except ValidationError as exc:
        raise FieldError(source, *first_error(root, exc)) from None
