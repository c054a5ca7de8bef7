"""Typed input as an HTML form (UI-2, UI-3, HITL-6): the controls an `ask_user` schema
asks for, and the posted fields read back into the value the schema describes.

Plain functions over plain values. Reading never judges: text that is not a number is
handed on as typed, so the one schema check (`answers.answer_errors`, run by the resume
service) is what says what is wrong, and the page puts its words next to the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "value"
_INTEGER = re.compile(r"^[+-]?\d+$")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
_BOUNDS = {
    "integer": ("minimum", "maximum"),
    "number": ("minimum", "maximum"),
    "string": ("minLength", "maxLength"),
}
# Strings that may be longer than this many characters get a multi-line box.
LONG_TEXT = 200


@dataclass(frozen=True)
class Control:
    """One control per schema property, labelled by the property's name (UI-3)."""

    name: str  # the posted field name: value.<property>[.<property>...]
    path: str  # the schema path as `answer_errors` names it: a/b
    label: str
    widget: str  # select | checkbox | number | text | lines | fieldset
    required: bool = False
    description: str = ""
    options: tuple[str, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    hint: str = ""
    children: tuple[Control, ...] = ()
    value: Any = ""
    errors: tuple[str, ...] = ()
    title: str = ""  # the schema's `title`, if it gives one

    @property
    def caption(self) -> str:
        """What the label says: the schema's title, else the property's name made readable
        ("due_date" → "Due date"). UI-3 finds a control by its property's name, so that
        stays in the label, in brackets, whenever these words do not already say it."""
        words = self.title or self.label.replace("_", " ").strip()
        words = words[:1].upper() + words[1:] if words else self.label
        return words if self.label.lower() in words.lower() else f"{words} ({self.label})"

    @property
    def dom_id(self) -> str:
        """The name as an HTML id: a property may be called anything, an id may not. It is
        also a plain CSS identifier (no dots): htmx finds a preserved control by `#id`."""
        return _UNSAFE_ID.sub("_", self.name.replace(".", "__"))


def controls(
    schema: Mapping[str, Any] | None,
    typed: Mapping[str, Any] | None = None,
    errors: Mapping[str, list[str]] | None = None,
    *,
    prefix: str = PREFIX,
    path: str = "",
) -> list[Control]:
    """The controls for an object schema, holding what was typed and its errors."""
    schema = schema or {}
    typed = typed or {}
    errors = errors or {}
    required = set(schema.get("required") or [])
    out = []
    # Stored as jsonb, a schema's properties come back in the database's key order, not
    # the author's: required questions first, then the rest, keeps the form predictable.
    properties = sorted(
        (schema.get("properties") or {}).items(), key=lambda p: p[0] not in required
    )
    for name, spec in properties:
        spec = spec if isinstance(spec, dict) else {}
        out.append(
            _control(
                name,
                spec,
                typed,
                errors,
                prefix=f"{prefix}.{name}",
                path=f"{path}/{name}" if path else name,
                required=name in required,
            )
        )
    return out


def _control(
    name: str,
    spec: dict[str, Any],
    typed: Mapping[str, Any],
    errors: Mapping[str, list[str]],
    *,
    prefix: str,
    path: str,
    required: bool,
) -> Control:
    kind = spec.get("type")
    common: dict[str, Any] = {
        "name": prefix,
        "path": path,
        "label": name,
        "required": required,
        "description": str(spec.get("description") or ""),
        "title": str(spec.get("title") or "").strip(),
        "errors": tuple(errors.get(path, ())),
    }
    if kind == "object":
        children = controls(spec, typed, errors, prefix=prefix, path=path)
        return Control(widget="fieldset", children=tuple(children), **common)
    raw = typed.get(prefix)
    if kind == "array":  # SEC-7 allows arrays of scalars only: one item per line
        choices = ", ".join(_option(item) for item in _items(spec).get("enum") or ())
        hint = f"one per line, each one of: {choices}" if choices else "one per line"
        return Control(widget="lines", hint=hint, value=raw or "", **common)
    if "enum" in spec:
        options = tuple(_option(item) for item in spec["enum"])
        return Control(widget="select", options=options, value=raw or "", **common)
    if kind == "boolean":
        return Control(widget="checkbox", value=raw is not None and raw != "", **common)
    attrs, hint = _bounds(kind, spec)
    widget = "number" if kind in ("integer", "number") else "text"
    if kind == "string" and int(spec.get("maxLength") or 0) > LONG_TEXT:
        widget = "longtext"  # a body of thousands of characters is not typed on one line
    if kind == "integer":
        attrs["step"] = 1
    elif kind == "number":
        attrs["step"] = "any"
    return Control(widget=widget, attrs=attrs, hint=hint, value=raw or "", **common)


def _bounds(kind: Any, spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    low_key, high_key = _BOUNDS.get(kind, ("", ""))
    low, high = spec.get(low_key), spec.get(high_key)
    html = ("min", "max") if kind in ("integer", "number") else ("minlength", "maxlength")
    attrs = {key: bound for key, bound in zip(html, (low, high), strict=True) if bound is not None}
    unit = " characters" if kind == "string" else ""
    if low is not None and high is not None:
        hint = f"{low} to {high}{unit}"
    elif low is not None:
        hint = f"at least {low}{unit}"
    elif high is not None:
        hint = f"at most {high}{unit}"
    else:
        hint = ""
    return attrs, hint


def _items(spec: Mapping[str, Any]) -> dict[str, Any]:
    items = spec.get("items")
    return items if isinstance(items, dict) else {}


def _option(item: Any) -> str:
    return item if isinstance(item, str) else str(item)


def typed_from_value(
    schema: Mapping[str, Any] | None, value: Any, *, prefix: str = PREFIX
) -> dict[str, str]:
    """The fields `value_from_post` would read back as `value`: how a form starts out
    holding a value it offers to edit (HITL-12's arguments)."""
    typed: dict[str, str] = {}
    value = value if isinstance(value, dict) else {}
    for name, spec in ((schema or {}).get("properties") or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        key, item = f"{prefix}.{name}", value.get(name)
        if item is None:
            continue
        if spec.get("type") == "object":
            typed.update(typed_from_value(spec, item, prefix=key))
        elif isinstance(item, list):
            typed[key] = "\n".join(_option(line) for line in item)
        elif isinstance(item, bool) and "enum" not in spec:
            if item:
                typed[key] = "on"
        else:
            typed[key] = _option(item)
    return typed


def typed_fields(post: Mapping[str, Any], prefix: str = PREFIX) -> dict[str, str]:
    """What the person typed, by field name, to show again beside the errors."""
    return {key: str(post.get(key)) for key in post if key.startswith(prefix + ".")}


def value_from_post(
    schema: Mapping[str, Any] | None, post: Mapping[str, Any], *, prefix: str = PREFIX
) -> dict[str, Any]:
    """The answer the posted fields spell. Blank optional fields are left out; a checkbox
    is true when ticked; a number that does not parse stays text for the schema to name."""
    schema = schema or {}
    value: dict[str, Any] = {}
    for name, spec in (schema.get("properties") or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        key = f"{prefix}.{name}"
        if spec.get("type") == "object":
            inner = value_from_post(spec, post, prefix=key)
            if inner or name in (schema.get("required") or []):
                value[name] = inner
            continue
        if spec.get("type") == "boolean" and "enum" not in spec:
            value[name] = key in post and post.get(key) not in ("", "false", "off")
            continue
        raw = post.get(key)
        if raw is None or str(raw).strip() == "":
            continue
        if spec.get("type") == "array":
            lines = [line for line in str(raw).splitlines() if line.strip()]
            value[name] = [_read(_items(spec), line) for line in lines]
            continue
        value[name] = _read(spec, str(raw))
    return value


def _read(spec: dict[str, Any], raw: str) -> Any:
    if "enum" in spec:
        return next((item for item in spec["enum"] if _option(item) == raw), raw)
    text = raw.strip()
    if spec.get("type") == "integer" and _INTEGER.match(text):
        return int(text)
    if spec.get("type") == "number":
        if _INTEGER.match(text):
            return int(text)
        try:
            number = float(text)
        except ValueError:
            return raw
        return number if number == number and abs(number) != float("inf") else raw
    return raw


def unplaced_errors(controls_: list[Control], errors: Mapping[str, list[str]]) -> list[str]:
    """Errors that name no control (the whole value, or an unknown key): shown on top."""
    placed = set(_paths(controls_))
    return [message for path, items in errors.items() if path not in placed for message in items]


def _paths(controls_: list[Control]) -> list[str]:
    out = []
    for control in controls_:
        out.append(control.path)
        out.extend(_paths(list(control.children)))
    return out
