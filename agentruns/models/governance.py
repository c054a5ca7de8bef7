"""Change governance (GOV-1, GOV-3): which catalog records are versioned (django-reversion
keeps each version's rows), and a change held until a second person approves it."""

from __future__ import annotations

import reversion
from django.conf import settings
from django.db import models

from agentruns.models.catalog import (
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    Provider,
    Skill,
    Snippet,
)
from agentruns.models.mcp import McpServer, McpTool
from agentruns.models.ops import Webhook

# A configuration's version holds its ordered lists, an MCP server's its pinned tools, so
# a rollback restores them with it (and removes rows added since).
reversion.register(Provider)
reversion.register(Snippet)
reversion.register(Skill)
reversion.register(
    Configuration, follow=["configurationsnippet_set", "configurationskill_set", "fallback_links"]
)
reversion.register(ConfigurationSnippet)
reversion.register(ConfigurationSkill)
reversion.register(ConfigurationFallback)
# The listing under review is not in force; it is not part of a version.
reversion.register(
    McpServer,
    follow=["tools"],
    exclude=["discovered", "discovered_at"],
)
reversion.register(McpTool)
# A webhook's secret is never shown again (OPS-4), so no version keeps it: a rollback
# leaves the secret in force as it is.
reversion.register(Webhook, exclude=["secret"])


class ChangeRequest(models.Model):
    """GOV-3: a widening change to one record, not in force until approved."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"

    kind = models.CharField(max_length=20)  # services.changes.KINDS
    key = models.CharField(max_length=100)  # the slug, or the id where a record has none
    object_id = models.BigIntegerField()
    # {field: [old, new]} in the API's words (slugs, names); `new` is what approval applies.
    changes = models.JSONField(default=dict)
    # The version the change was made against: approving it over a newer one is refused.
    base_version = models.PositiveIntegerField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="change_requests"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="decided_change_requests",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("approve_change", "Can approve a held catalog change")]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=models.Q(status="pending"),
                name="change_request_pending",
            )
        ]

    def __str__(self) -> str:
        return f"change request #{self.pk}: {self.kind} {self.key} ({self.status})"


class Replay(models.Model):
    """GOV-4: recorded runs re-run on a candidate configuration before it is promoted.
    Its runs are `Run` rows with `replay` set (one per original, `replay_of`), driven by
    the loop like any run but with every tool call answered from the original's log."""

    configuration = models.ForeignKey(
        Configuration, on_delete=models.CASCADE, related_name="replays"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="replays"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"replay #{self.pk} on {self.configuration_id}"
