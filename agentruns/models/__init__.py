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
from agentruns.models.ops import (
    AuditRecord,
    DailyUsage,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from agentruns.models.runs import Checkpoint, Event, Note, Run, Thread, Ticket, ToolInvocation

__all__ = [
    "AuditRecord",
    "CatalogGeneration",
    "Checkpoint",
    "Configuration",
    "ConfigurationFallback",
    "ConfigurationSkill",
    "ConfigurationSnippet",
    "DailyUsage",
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
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]
