from agentruns.models.catalog import (
    CatalogGeneration,
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    GateAudit,
    Provider,
    Skill,
    Snippet,
)
from agentruns.models.runs import Checkpoint, Event, Note, Run, Thread, Ticket, ToolInvocation

__all__ = [
    "CatalogGeneration",
    "Checkpoint",
    "Configuration",
    "ConfigurationFallback",
    "ConfigurationSkill",
    "ConfigurationSnippet",
    "Event",
    "GateAudit",
    "Note",
    "Provider",
    "Run",
    "Skill",
    "Snippet",
    "Thread",
    "Ticket",
    "ToolInvocation",
]
