"""GOV-3: which changes widen what may leave or weaken who decides. One table, by record
kind and field; a field not in it never holds a change. Values are the API's words
(services.changes.snapshot): zones and classes by label, slugs, group names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentruns.classes import DataClass, parse_class, parse_zone
from agentruns.tools.mcp.pinned import sync_pinned
from agentruns.tools.registry import REGISTRY, Effect

Rule = Callable[[Any, Any], bool]

# TZ-1: an undeclared source is refused by the enforcing gate, so it counts as the
# strictest class: declaring it anything is lowering it.
UNDECLARED_RANK = max(DataClass) + 1
# TOOL-1's effects from the most to the least careful: write needs approval.
EFFECT_RANK = {"write": 3, "idempotent": 2, "read_only": 1, "": 3}


def _class_rank(label: Any) -> int:
    parsed = parse_class(label)
    return UNDECLARED_RANK if parsed is None else int(parsed)


def more_trusted(old: Any, new: Any) -> bool:
    """TZ-2: a lower zone value is more trusted, so it may take more."""
    return parse_zone(new) < parse_zone(old)


def class_lowered(old: Any, new: Any) -> bool:
    return _class_rank(new) < _class_rank(old)


def effect_lowered(old: Any, new: Any) -> bool:
    return EFFECT_RANK.get(new or "", 3) < EFFECT_RANK.get(old or "", 3)


def changed(old: Any, new: Any) -> bool:
    return bool(old != new)


def lowered(old: Any, new: Any) -> bool:
    return bool((new or 0) < (old or 0))


def turned_off(old: Any, new: Any) -> bool:
    return bool(old) and not new


def grants_more(old: Any, new: Any) -> bool:
    """A grant added that reaches a tool with a write effect, an MCP server's tool, or
    nothing known yet (a name staff may pin or register later is granted blind)."""
    sync_pinned(None)
    in_code = {tool.name for tool in REGISTRY.in_code()}
    for name in set(new or ()) - set(old or ()):
        tools = REGISTRY.expand([name])
        if not tools:
            return True
        for tool_name in tools:
            tool = REGISTRY.get(tool_name)
            if tool is None or tool_name not in in_code or tool.effect is Effect.WRITE:
                return True
    return False


def added(old: Any, new: Any) -> bool:
    """Something newly on a list: a write tool exempt from approval runs with nobody
    deciding (TOOL-5); a new delegate receives this configuration's tasks (DEL-2)."""
    return bool(set(new or ()) - set(old or ()))


def tools_declared_lower(old: Any, new: Any) -> bool:
    """MCP-2: a pinned tool whose declared class or effect was lowered."""
    old, new = old or {}, new or {}
    for name, declared in new.items():
        before = old.get(name)
        if before is None:
            continue  # pinned by accepting a listing: offered only where a grant reaches it
        if class_lowered(before.get("output_class"), declared.get("output_class")):
            return True
        if effect_lowered(before.get("effect"), declared.get("effect")):
            return True
    return False


WIDENS: dict[str, dict[str, Rule]] = {
    "provider": {"trust_zone": more_trusted},
    "snippet": {"data_class": class_lowered},
    "skill": {"data_class": class_lowered},
    "configuration": {
        "provider": changed,
        "fallbacks": changed,
        "system_prompt_data_class": class_lowered,
        "allowed_tools": grants_more,
        "approval_exempt_tools": added,
        "delegates": added,
        "approvals_required": lowered,
        "require_second_approver": turned_off,
        "approver_groups": changed,
    },
    "mcp_server": {
        "output_class": class_lowered,
        "effect": effect_lowered,
        "tools": tools_declared_lower,
    },
    # CG-14: a webhook declares the zone its deliveries go to, once it has one (#47).
    "webhook": {"trust_zone": more_trusted},
}


def widening_fields(kind: str, changes: dict[str, list[Any]]) -> list[str]:
    """The fields of `changes` ({field: [old, new]}) that widen, in the table's order."""
    rules = WIDENS.get(kind, {})
    return [name for name, rule in rules.items() if name in changes and rule(*changes[name])]
