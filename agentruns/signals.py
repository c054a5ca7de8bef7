"""Every catalog write bumps one counter so executors notice live changes (CG-9)."""

from django.db.models.signals import m2m_changed, post_delete, post_save

from agentruns.models import (
    CatalogGeneration,
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    McpServer,
    McpTool,
    Provider,
    Skill,
    Snippet,
)

CATALOG_MODELS = (
    Provider,
    Configuration,
    Snippet,
    Skill,
    ConfigurationSnippet,
    ConfigurationSkill,
    ConfigurationFallback,
    # MCP-2: a pinned tool, its class or effect, or its server's, changed.
    McpServer,
    McpTool,
)


def bump_generation(**_: object) -> None:
    CatalogGeneration.bump()


for model in CATALOG_MODELS:
    post_save.connect(bump_generation, sender=model, dispatch_uid=f"gen-save-{model.__name__}")
    post_delete.connect(bump_generation, sender=model, dispatch_uid=f"gen-del-{model.__name__}")
# DEL-1: a configuration's delegates grant agent.delegate, so changing them is a catalog write.
for through in (
    ConfigurationSnippet,
    ConfigurationSkill,
    ConfigurationFallback,
    Configuration.delegates.through,
):
    m2m_changed.connect(bump_generation, sender=through, dispatch_uid=f"gen-m2m-{through.__name__}")
