"""Catalog rows for tests: providers, snippets, skills and configurations, scripted or
pointed at the fake provider's endpoints (one builder, `make_configuration`, under all)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from agentruns.gate.audit import AuditRow
from agentruns.models import CatalogGeneration, Configuration, GateAudit, Provider, Skill, Snippet
from agentruns.services.catalog import configuration_set_sources
from tests.support.fake_provider import FakeProvider

_UNSET = object()


def make_provider(slug: str, zone: str = "external_global", kind: str = "scripted", **kw):
    kw.setdefault("name", slug.replace("-", " ").title())
    return Provider.objects.create(slug=slug, kind=kind, trust_zone=zone, **kw)


def make_snippet(slug: str, data_class: str = "", active: bool = True, text: str | None = None):
    return Snippet.objects.create(
        slug=slug,
        name=f"Snippet {slug}",
        data_class=data_class,
        active=active,
        text=f"text of snippet {slug}" if text is None else text,
    )


def make_skill(
    slug: str, data_class: str = "", active: bool = True, instructions: str | None = None
):
    return Skill.objects.create(
        slug=slug,
        name=f"Skill {slug}",
        data_class=data_class,
        active=active,
        instructions=f"instructions of skill {slug}" if instructions is None else instructions,
    )


def make_configuration(
    slug: str,
    provider: Provider | object | None = _UNSET,
    snippets: Sequence[Snippet] = (),
    skills: Sequence[Skill] = (),
    fallbacks: Sequence[Configuration] = (),
    system_prompt: str = "",
    system_prompt_data_class: str = "",
    **kw,
) -> Configuration:
    """A configuration with ordered sources. Without `provider`, a fresh local-zone
    scripted provider is created; pass `provider=None` for a configuration without one."""
    if provider is _UNSET:
        provider = make_provider(f"{slug}-provider", zone="local")
    kw.setdefault("name", slug.replace("-", " ").title())
    configuration = Configuration.objects.create(
        slug=slug,
        provider=provider,  # type: ignore[misc]
        system_prompt=system_prompt,
        system_prompt_data_class=system_prompt_data_class,
        **kw,
    )
    configuration_set_sources(
        configuration=configuration,
        snippet_ids=[s.pk for s in snippets],
        skill_ids=[s.pk for s in skills],
        fallback_ids=[c.pk for c in fallbacks],
    )
    return configuration


def make_openai_configuration(
    slug: str, fake: FakeProvider, *, zone: str = "local", provider_kw: Any = None, **kw: Any
) -> Configuration:
    """A configuration whose provider is the fake server's Chat Completions endpoint."""
    kw.setdefault("model", "gpt-test")
    return _fake_configuration(slug, "openai", fake.openai_base_url, zone, provider_kw, kw)


def make_anthropic_configuration(
    slug: str, fake: FakeProvider, *, zone: str = "local", provider_kw: Any = None, **kw: Any
) -> Configuration:
    """A configuration whose provider is the fake server's Messages endpoint."""
    kw.setdefault("model", "claude-test")
    return _fake_configuration(slug, "anthropic", fake.anthropic_base_url, zone, provider_kw, kw)


def _fake_configuration(
    slug: str, kind: str, base_url: str, zone: str, provider_kw: Any, kw: dict[str, Any]
) -> Configuration:
    fields = {"base_url": base_url, "max_retries": 0, "timeout_seconds": 10}
    provider = make_provider(
        f"{slug}-{kind}", zone=zone, kind=kind, **{**fields, **(provider_kw or {})}
    )
    return make_configuration(slug, provider=provider, **kw)


# A credential the fake OpenAI server insists on: it reaches the wire and nowhere else.
KEY_ENV = "HITL_TEST_KEY"
KEY = "sk-hitl-7Q2w9ZrT4yKp1LmN8vXc3BdF"


def scripted_configuration(
    slug: str,
    turns: Sequence[dict[str, Any]],
    *,
    zone: str = "local",
    latency_ms: int = 0,
    **kw: Any,
) -> Configuration:
    """A scripted-provider configuration that grants the notes tools unless told otherwise;
    `latency_ms` is how long the scripted provider takes per reply."""
    kw.setdefault("allowed_tools", ["notes", "test", "ask_user"])
    kw.setdefault("model", "scripted-model")
    script: dict[str, Any] = {"turns": list(turns)}
    if latency_ms:
        script["latency_ms"] = latency_ms
    return make_configuration(
        slug, provider=make_provider(f"{slug}-provider", zone=zone), script=script, **kw
    )


def openai_configuration(
    slug: str, fake: FakeProvider, *, zone: str = "local", **kw: Any
) -> Configuration:
    """`make_openai_configuration` with the HITL tools and the key from KEY_ENV."""
    kw.setdefault("allowed_tools", ["notes", "test", "ask_user"])
    provider_kw = {"api_key_env": KEY_ENV}
    return make_openai_configuration(slug, fake, zone=zone, provider_kw=provider_kw, **kw)


def save_audits(rows: list[AuditRow]) -> int:
    """The gate's `save` outside any run: the rows as they are, and the live generation."""
    GateAudit.objects.bulk_create(GateAudit(**row, created_at=timezone.now()) for row in rows)
    return CatalogGeneration.objects.get(pk=1).value


def configuration_admin_post(slug: str, name: str, *, delegates: list[int]) -> dict[str, Any]:
    """The admin change form of a bare configuration as a browser posts it, with the
    given delegates and empty inlines."""
    data: dict[str, Any] = {
        "slug": slug,
        "name": name,
        "model": "",
        "system_prompt": "",
        "delegates": [str(pk) for pk in delegates],
        "max_tool_calls": 10,
        "tool_timeout_seconds": 30,
        "approval_timeout_seconds": 60,
        "context_budget_tokens": 32000,
        "approvals_required": 1,
        "input_token_price": 0,
        "output_token_price": 0,
        "script": "{}",
        "active": "on",
    }
    for prefix in ("configurationsnippet_set", "configurationskill_set", "fallback_links"):
        data.update({f"{prefix}-TOTAL_FORMS": 0, f"{prefix}-INITIAL_FORMS": 0})
    return data
