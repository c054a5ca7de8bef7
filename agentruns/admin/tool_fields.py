"""The configuration admin's tool fields (UI-1, UI-7): allowed tools and exempt tools as
checkboxes of the registered tools and groups, and modes as one row per mode (name, core
tools, deferred tools). Plain form fields: they work without JavaScript, and what they
store is exactly the JSON the API stores (§11), so a value the registry does not know (an
API write, a tool module no longer loaded) is shown, kept while ticked, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django import forms
from django.http import QueryDict

from agentruns.models import Configuration
from agentruns.selectors import delegation_cycle
from agentruns.tools.policy import SEARCH_TOOL
from agentruns.tools.registry import REGISTRY, Effect, Human, Tool
from agentruns.words import DELEGATION_CYCLE

Choice = tuple[str, str]

# Blank rows under the configured modes: room to add modes without JavaScript.
SPARE_MODE_ROWS = 2
MAX_MODES = 50  # the API's limit
MODE_NAME_MAX = 64


def tool_label(tool: Tool) -> str:
    if tool.human is Human.INPUT:
        what = "asks a person"
    elif tool.effect is Effect.WRITE:
        what = "write: needs approval unless exempt"
    else:
        what = tool.effect.replace("_", " ")
    return f"{tool.name} ({what}{', deferred' if tool.deferred else ''})"


def _unknown(values: Iterable[str], known: set[str]) -> list[Choice]:
    return [(v, f"{v} (not a registered tool or group)") for v in values if v not in known]


def grant_choices(current: Iterable[str] = ()) -> list[tuple[str, list[Choice]]]:
    """Groups (which grant every tool in them, now and later), then single tools."""
    tools = REGISTRY.all()
    names = {tool.name for tool in tools}
    members = {group: [t.name for t in tools if t.group == group] for group in REGISTRY.groups()}
    groups = [
        (group, f"{group} — every tool in it: {', '.join(members[group])}")
        for group in sorted(set(members) - names)
    ]
    choices = [("Groups", groups), ("Tools", [(t.name, tool_label(t)) for t in tools])]
    extra = _unknown(current, names | REGISTRY.groups())
    return [*choices, ("Not registered", extra)] if extra else choices


def exempt_choices(current: Iterable[str] = ()) -> list[Choice]:
    """TOOL-5: only write tools wait for approval, so only they can be exempted."""
    writes = [t for t in REGISTRY.all() if t.effect is Effect.WRITE and t.human is Human.NONE]
    return [(t.name, tool_label(t)) for t in writes] + _unknown(current, {t.name for t in writes})


def mode_tool_choices(current: Iterable[str] = ()) -> list[Choice]:
    """Tools a mode may list; tool_search is offered by itself when a mode defers tools."""
    tools = [t for t in REGISTRY.all() if t.name != SEARCH_TOOL]
    return [(t.name, t.name) for t in tools] + _unknown(current, {t.name for t in tools})


class ToolCheckboxes(forms.CheckboxSelectMultiple):
    """Styled by agentruns/admin.css, which every admin page loads."""

    def __init__(self, attrs: dict[str, Any] | None = None, choices: Any = ()) -> None:
        super().__init__({"class": "tool-checklist", **(attrs or {})}, choices)


class ToolChecklist(forms.MultipleChoiceField):
    """A JSON list of names, edited as checkboxes; choices are set per form (the value's
    unknown names join them)."""

    widget = ToolCheckboxes

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        return list(value or [])


class ModesWidget(forms.Widget):
    template_name = "admin/agentruns/widgets/modes.html"

    def __init__(self, choices: Sequence[Choice] = (), attrs: dict[str, Any] | None = None):
        super().__init__(attrs)
        self.choices = list(choices)

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        rows = [dict(row) for row in (value or [])][:MAX_MODES]
        rows += [{"name": "", "tools": [], "deferred": []}] * SPARE_MODE_ROWS
        context["widget"].update(
            rows=[
                {
                    "index": i,
                    "name": row.get("name", ""),
                    "tools": set(row.get("tools") or ()),
                    "deferred": set(row.get("deferred") or ()),
                }
                for i, row in enumerate(rows)
            ],
            choices=self.choices,
            row_count=len(rows),
        )
        return context

    def value_from_datadict(self, data: Mapping[str, Any], files: Any, name: str) -> list[dict]:
        try:
            count = min(int(data.get(f"{name}-rows", 0)), MAX_MODES + SPARE_MODE_ROWS)
        except (TypeError, ValueError):
            count = 0
        getlist = getattr(data, "getlist", lambda key: data.get(key) or [])
        return [
            {
                "name": str(data.get(f"{name}-{i}-name", "")).strip(),
                "tools": [str(v) for v in getlist(f"{name}-{i}-tools")],
                "deferred": [str(v) for v in getlist(f"{name}-{i}-deferred")],
            }
            for i in range(max(count, 0))
        ]

    def value_omitted_from_data(self, data: Mapping[str, Any], files: Any, name: str) -> bool:
        return f"{name}-rows" not in data


class ModesField(forms.Field):
    """DEF-1: an ordered list of {name, tools, deferred}; the first row is the default mode.
    A row left without a name and without tools is no mode (that is how one is removed)."""

    widget = ModesWidget

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_python(self, value: Any) -> list[dict]:
        rows = [row for row in (value or []) if row["name"] or row["tools"] or row["deferred"]]
        problems, seen = [], set()
        for number, row in enumerate(rows, start=1):
            name = row["name"]
            if not name:
                problems.append(f"Row {number} lists tools but has no name.")
            elif len(name) > MODE_NAME_MAX:
                problems.append(f"Mode names have at most {MODE_NAME_MAX} characters: {name!r}.")
            elif name in seen:
                problems.append(f"Two modes are called {name!r}; names must differ.")
            seen.add(name)
            both = sorted(set(row["tools"]) & set(row["deferred"]))
            if both:
                problems.append(f"Mode {name!r}: {', '.join(both)} cannot be core and deferred.")
        if len(rows) > MAX_MODES:
            problems.append(f"At most {MAX_MODES} modes.")
        if problems:
            raise forms.ValidationError(problems)
        return rows


class ConfigurationAdminForm(forms.ModelForm):
    allowed_tools = ToolChecklist(
        help_text="Whole groups (including tools added to them later) or single tools."
    )
    approval_exempt_tools = ToolChecklist(
        label="Approval-exempt tools",
        help_text="Write tools that run without a person's approval. None ticked: "
        "every write waits for approval.",
    )
    modes = ModesField(
        help_text="One row per mode; the first is the default. Core tools are offered every "
        "turn, deferred ones behind tool_search. No rows: one mode offering the "
        "allowed tools. Clear a row's name and boxes to remove it.",
    )

    class Meta:
        model = Configuration
        # The admin's fieldsets name the rest; these are the fields this form shapes.
        fields = ["allowed_tools", "approval_exempt_tools", "modes", "approver_groups", "delegates"]
        # HITL-14, DEL-1: ticked like the tool lists above them, and usable without JavaScript.
        widgets = {
            "approver_groups": forms.CheckboxSelectMultiple,
            "delegates": forms.CheckboxSelectMultiple,
        }

    def clean_delegates(self) -> Any:
        """DEL-3: no configuration may reach itself through its delegates."""
        delegates = self.cleaned_data.get("delegates") or []
        if delegation_cycle(self.instance.pk, [c.pk for c in delegates]):
            raise forms.ValidationError(DELEGATION_CYCLE)
        return delegates

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance

        def current(name: str) -> list[str]:
            data = self.data
            raw = data.getlist(name) if isinstance(data, QueryDict) else getattr(stored, name)
            return [str(v) for v in raw or []]

        allowed = self.fields["allowed_tools"]
        exempt = self.fields["approval_exempt_tools"]
        assert isinstance(allowed, ToolChecklist) and isinstance(exempt, ToolChecklist)
        allowed.choices = grant_choices(current("allowed_tools"))
        exempt.choices = exempt_choices(current("approval_exempt_tools"))
        listed = [
            name
            for mode in stored.modes or []
            for key in ("tools", "deferred")
            for name in mode.get(key) or []
        ]
        widget = self.fields["modes"].widget
        assert isinstance(widget, ModesWidget)
        widget.choices = mode_tool_choices(listed)
        # DEL-3: a configuration never delegates to itself; the list does not offer it.
        delegates = self.fields["delegates"]
        assert isinstance(delegates, forms.ModelMultipleChoiceField)
        if stored.pk is not None and delegates.queryset is not None:
            delegates.queryset = delegates.queryset.exclude(pk=stored.pk)
