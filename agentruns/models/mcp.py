"""MCP tool servers as catalog entries (MCP-1, MCP-2): a server staff registered, and the
tools of it they accepted (pinned). What a server lists is hostile input until pinned:
`agentruns.tools.mcp` checks it, this module only stores it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from agentruns.classes import DATA_CLASS_CHOICES, DataClass
from agentruns.models.catalog import key_env_problem
from agentruns.outbound import mcp_exemptions, url_problem

# Lower case, digits and hyphens: `<server>.<tool>` stays a readable registry name and
# its wire name (`.` becomes `_`) cannot collide with another server's.
SERVER_SLUG = RegexValidator(
    r"^[a-z][a-z0-9-]{0,23}\Z", "1 to 24 lower-case letters, digits or hyphens, from a letter."
)
# The effects of TOOL-1 (agentruns.tools.registry.Effect), as stored words.
EFFECT_CHOICES = [
    ("read_only", "read only"),
    ("idempotent", "idempotent"),
    ("write", "write (needs approval unless exempt)"),
]
MCP_KEY_VARS = "AGENTRUNS_MCP_KEY_VARS"


def mcp_key_problem(name: str) -> str | None:
    """SEC-11 with the MCP servers' own allow-list (never the providers')."""
    return key_env_problem(name, setting=MCP_KEY_VARS, what="MCP server tokens")


def validate_mcp_key_env(value: str) -> None:
    problem = mcp_key_problem(value) if value else None
    if problem:
        raise ValidationError(problem)


@dataclass(frozen=True)
class StdioCommand:
    """A command the deployer listed: its argv, the directory it starts in ("" for one
    of its own) and the variables it gets (INT-4)."""

    argv: tuple[str, ...]
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = ()


def _stdio_command(entry: Any) -> StdioCommand | None:
    """`["cmd", "arg"]` or `{"command": [...], "cwd": "...", "env": {...}}`; None for
    anything else (an entry that cannot be read is not listed)."""
    if isinstance(entry, list):
        entry = {"command": entry}
    if not isinstance(entry, dict):
        return None
    argv, cwd, env = entry.get("command"), entry.get("cwd") or "", entry.get("env") or {}
    if not isinstance(argv, list) or not argv or not isinstance(cwd, str):
        return None
    if not isinstance(env, dict):
        return None
    return StdioCommand(
        tuple(str(part) for part in argv),
        cwd,
        tuple(sorted((str(name), str(value)) for name, value in env.items())),
    )


def stdio_commands() -> dict[str, StdioCommand]:
    """The commands the deployer listed (AGENTRUNS_MCP_STDIO_COMMANDS), by name."""
    listed = settings.AGENTRUNS_MCP_STDIO_COMMANDS
    if not isinstance(listed, dict):
        return {}
    commands = {str(name): _stdio_command(entry) for name, entry in listed.items()}
    return {name: command for name, command in commands.items() if command is not None}


class McpServer(models.Model):
    class Transport(models.TextChoices):
        STREAMABLE_HTTP = "streamable_http", "Streamable HTTP (a URL)"
        STDIO = "stdio", "stdio (a command the deployer listed)"

    slug = models.CharField(max_length=24, unique=True, validators=[SERVER_SLUG])
    name = models.CharField(max_length=200)
    transport = models.CharField(
        max_length=20, choices=Transport.choices, default=Transport.STREAMABLE_HTTP
    )
    url = models.URLField(
        "URL",
        max_length=500,
        blank=True,
        help_text="The streamable HTTP endpoint (http or https, on an allowed host).",
    )
    command = models.CharField(
        max_length=64,
        blank=True,
        help_text="For stdio: the name of a command listed in AGENTRUNS_MCP_STDIO_COMMANDS.",
    )
    auth_env = models.CharField(
        "token environment variable",
        max_length=128,
        blank=True,
        validators=[validate_mcp_key_env],
        help_text="The NAME of the variable whose value is sent as `Authorization: Bearer "
        "<value>` (AGENTRUNS_MCP_KEY_VARS lists the allowed ones). Blank: no header.",
    )
    output_class = models.CharField(
        max_length=32,
        choices=DATA_CLASS_CHOICES,
        default=DataClass.CONFIDENTIAL.label,
        help_text="The data class of what its tools return, unless a tool says otherwise.",
    )
    effect = models.CharField(
        max_length=16,
        choices=EFFECT_CHOICES,
        default="write",
        help_text="What its tools do, unless a tool says otherwise (write needs approval).",
    )
    timeout_seconds = models.FloatField(
        default=10.0,
        validators=[MinValueValidator(0.5), MaxValueValidator(120)],
        help_text="How long listing its tools may take (a call has the configuration's "
        "tool timeout).",
    )
    active = models.BooleanField(default=True)
    # GOV-1: the number of the version in force; the creation is 1 (services.changes).
    version = models.PositiveIntegerField(default=1, editable=False)
    # The last tools/list, waiting for staff to accept it (MCP-2); never offered as is.
    discovered = models.JSONField(default=list, blank=True, editable=False)
    discovered_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        if self.transport == self.Transport.STREAMABLE_HTTP:
            self._clean_url()
        elif self.command not in stdio_commands():
            listed = ", ".join(sorted(stdio_commands())) or "none"
            raise ValidationError({"command": f"Choose a command the deployer listed ({listed})."})

    def _clean_url(self) -> None:
        if not self.url:
            raise ValidationError({"url": "A streamable HTTP server needs its URL."})
        problem = url_problem(self.url, mcp_exemptions())
        if problem:
            raise ValidationError({"url": problem})


class McpTool(models.Model):
    """A tool staff accepted: its schema and version as pinned, and optional overrides of
    the server's declared class and effect."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    version = models.CharField(max_length=64)
    output_class = models.CharField(
        max_length=32, choices=DATA_CLASS_CHOICES, blank=True, help_text="Blank: the server's."
    )
    effect = models.CharField(
        max_length=16, choices=EFFECT_CHOICES, blank=True, help_text="Blank: the server's."
    )
    pinned_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_once_per_server")
        ]

    def __str__(self) -> str:
        return f"{self.server.slug}.{self.name}"

    @property
    def declared_class(self) -> str:
        return self.output_class or self.server.output_class

    @property
    def declared_effect(self) -> str:
        return self.effect or self.server.effect
