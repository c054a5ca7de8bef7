"""What operators configure: providers, configurations, snippets and skills."""

from __future__ import annotations

import json
import re

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agentruns.classes import DATA_CLASS_CHOICES, ZONE_CHOICES, Enforcement, Zone

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
KEY_ENV_SUFFIXES = ("_KEY", "_TOKEN")
# The server's own secrets and settings, which a provider must never be pointed at (SEC-5):
# staff could otherwise send SECRET_KEY as a bearer token to a base_url of their own.
SERVER_ENV_PREFIXES = ("AGENTRUNS_", "DJANGO_", "Q_", "PG", "POSTGRES")
SERVER_ENV_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "TEST_DATABASE_NAME", "PG_URL"})


def key_env_problem(
    name: str, *, setting: str = "AGENTRUNS_PROVIDER_KEY_VARS", what: str = "provider keys"
) -> str | None:
    """SEC-1, SEC-5, SEC-11: why `name` may not hold a key, or None if it may. `setting`
    names the deployer's allow-list (providers and MCP servers each have their own).
    Checked when a row is saved and again whenever a key is read, so a row written
    before the deployer narrowed the list can never send an unlisted variable."""
    if not ENV_NAME.match(name):
        return (
            "Enter the name of an environment variable (letters, digits, underscores), "
            "never the key itself."
        )
    from django.conf import settings

    # SEC-11: the deployer's allow-list decides; a deny-list would let staff point a
    # provider of their own at any other secret of the worker (AWS_SECRET_ACCESS_KEY).
    allowed = getattr(settings, setting)
    if name not in allowed:
        return (
            f"{name} is not a variable the deployer allows for {what} "
            f"({setting}: {', '.join(allowed) or 'none'})."
        )
    # SEC-5 stays a floor under the list: not even the deployer can name a server secret.
    upper = name.upper()
    if not upper.endswith(KEY_ENV_SUFFIXES):
        return f"{name} does not end in _KEY or _TOKEN, as a key's variable must (OPENAI_API_KEY)."
    if upper in SERVER_ENV_NAMES or upper.startswith(SERVER_ENV_PREFIXES) or _is_setting(upper):
        return f"{name} is one of the server's own settings or secrets, never a key."
    return None


def _is_setting(name: str) -> bool:
    from django.conf import global_settings, settings

    return hasattr(global_settings, name) or hasattr(settings, name)


EXTRA_BODY_BYTES = 4096
# What each request's body is made of; extra_body may add to it, never replace it.
RESERVED_BODY_KEYS = frozenset({"model", "messages", "tools", "tool_choice", "stream"})


def validate_extra_body(value: object) -> None:
    """INT-1: server flags merged into each request, bounded so a row stays a setting."""
    if not isinstance(value, dict):
        raise ValidationError('Enter a JSON object, e.g. {"chat_template_kwargs": {}}.')
    size = len(json.dumps(value))
    if size > EXTRA_BODY_BYTES:
        raise ValidationError(f"At most {EXTRA_BODY_BYTES} bytes of JSON (this is {size}).")
    reserved = sorted(set(value) & RESERVED_BODY_KEYS)
    if reserved:
        raise ValidationError(f"{', '.join(reserved)} are set by agentruns, not here.")


def validate_env_name(value: str) -> None:
    problem = key_env_problem(value) if value else None
    if problem:
        raise ValidationError(problem)


class Provider(models.Model):
    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible"
        ANTHROPIC = "anthropic", "Anthropic"
        SCRIPTED = "scripted", "Scripted (deterministic)"

    class ToolChoice(models.TextChoices):
        AUTO = "auto", "auto (the model decides)"
        REQUIRED = "required", "required (every turn calls a tool)"
        OMIT = "omit", "omit (not sent: the server's default)"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.OPENAI)
    base_url = models.URLField(
        blank=True, help_text="Blank uses the SDK's default endpoint (OpenAI or Anthropic)."
    )
    api_key_env = models.CharField(
        "API key environment variable",
        max_length=128,
        blank=True,
        validators=[validate_env_name],
        help_text="The NAME of the environment variable holding the key, never the key itself.",
    )
    timeout_seconds = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)])
    max_retries = models.PositiveSmallIntegerField(
        default=2, help_text="Retries the SDK makes itself before a fallback is tried."
    )
    trust_zone = models.CharField(
        max_length=32,
        choices=ZONE_CHOICES,
        default=Zone.EXTERNAL_GLOBAL.label,
        blank=True,
        help_text="Where this provider may take data. Empty means external global.",
    )
    # INT-1: what OpenAI-compatible servers need said differently; OpenAI's defaults.
    tool_choice = models.CharField(
        max_length=16,
        choices=ToolChoice.choices,
        default=ToolChoice.AUTO,
        help_text="How tools are asked for (OpenAI-compatible): auto suits OpenAI, llama.cpp "
        "and Ollama; vLLM needs --enable-auto-tool-choice for auto, else choose omit.",
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="The bound on each reply's tokens. Blank: none sent (Anthropic: 4096).",
    )
    context_window_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(256)],
        help_text="The model's context window as the server runs it (llama.cpp: --n_ctx); "
        "compaction keeps each request within it. Blank: the configuration's budget alone.",
    )
    extra_body = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_extra_body],
        help_text="A JSON object (at most 4 KB) merged into each request's body, for a "
        "server's own flags.",
    )
    active = models.BooleanField(default=True)
    # GOV-1: the number of the version in force; the creation is 1 (services.changes).
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def requirement(self) -> str:
        """UI-7: what a run on this provider needs from outside this host, in words; ""
        for the scripted kind, which answers in-process (it works offline, without a key)."""
        if self.kind == self.Kind.SCRIPTED:
            return ""
        if self.api_key_env:
            return f"needs {self.api_key_env}"
        return f"needs the server at {self.base_url or 'the SDK default endpoint'}"


class Classified(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    data_class = models.CharField(
        max_length=32,
        choices=DATA_CLASS_CHOICES,
        blank=True,
        help_text="How sensitive the text is. Blank means undeclared: it constrains nothing.",
    )
    active = models.BooleanField(default=True)
    # GOV-1: the number of the version in force; the creation is 1 (services.changes).
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Snippet(Classified):
    text = models.TextField()


class Skill(Classified):
    instructions = models.TextField()


class Configuration(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    provider = models.ForeignKey(
        Provider, null=True, blank=True, on_delete=models.SET_NULL, related_name="configurations"
    )
    model = models.CharField(max_length=200, blank=True)
    # UI-7: a task that shows what this configuration is for, so a run of it started from
    # the playground does not read like every other configuration's.
    example_task = models.CharField(
        max_length=500,
        blank=True,
        help_text="The task the playground fills in for this configuration; "
        "empty: the site's example.",
    )
    system_prompt = models.TextField(blank=True)
    system_prompt_data_class = models.CharField(
        max_length=32, choices=DATA_CLASS_CHOICES, blank=True
    )
    snippets = models.ManyToManyField(Snippet, through="ConfigurationSnippet", blank=True)
    skills = models.ManyToManyField(Skill, through="ConfigurationSkill", blank=True)
    fallbacks = models.ManyToManyField(
        "self",
        through="ConfigurationFallback",
        through_fields=("configuration", "fallback"),
        symmetrical=False,
        blank=True,
        related_name="fallback_for",
    )
    # DEL-1: the configurations this one's runs may hand a task to (`agent.delegate`).
    delegates = models.ManyToManyField(
        "self",
        symmetrical=False,
        blank=True,
        related_name="delegated_by",
        help_text="Configurations this one may hand a task to with agent.delegate.",
    )
    allowed_tools = models.JSONField(
        default=list, blank=True, help_text="Tool names or groups this configuration grants."
    )
    approval_exempt_tools = models.JSONField(
        default=list,
        blank=True,
        help_text="Write tools that run without approval. Empty: all need approval.",
    )
    # A list, not an object: jsonb does not keep key order and the first mode is the default.
    modes = models.JSONField(
        default=list,
        blank=True,
        help_text='[{"name": "agent", "tools": [...], "deferred": [...]}, ...]; the first is '
        "the default. Empty: one mode offering the allowed tools.",
    )
    max_tool_calls = models.PositiveIntegerField(default=10)
    # MCP-3: how long one call to a tool outside this process (an MCP server) may take.
    tool_timeout_seconds = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text="Seconds one call to an MCP tool may take (1 to 600).",
    )
    approval_timeout_seconds = models.PositiveIntegerField(default=24 * 3600)
    context_budget_tokens = models.PositiveIntegerField(default=32000)
    # HITL-8: four-eyes, about who may approve; HITL-13's quorum is about how many.
    require_second_approver = models.BooleanField(
        default=False,
        help_text="Four-eyes: whoever started a run may not approve its tool calls (they may "
        "still deny them), so someone else must. How many people must approve is set "
        "by Approvals required.",
    )
    # HITL-13: how many distinct people must allow a call before it runs.
    approvals_required = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(5)],
        help_text="How many different people must approve a tool call before it runs (1 to "
        "5). With four-eyes on, the run's initiator never counts among them.",
    )
    # HITL-14, HITL-15: who decides this configuration's tickets (empty: every approver),
    # when they are reminded, and who is called in once 80 % of the deadline has passed.
    approver_groups = models.ManyToManyField(
        Group,
        blank=True,
        related_name="approved_configurations",
        help_text="Only members of these groups holding approve_run see and decide this "
        "configuration's tickets, and only they are mailed. Empty: every approver.",
    )
    remind_after_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Mail the approvers once more if a ticket is still open this many seconds "
        "after it opened. Empty: the site's reminder before the deadline.",
    )
    escalation_group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="escalated_configurations",
        help_text="Once 80 % of a ticket's deadline has passed, this group's members holding "
        "approve_run are mailed and may decide it too.",
    )
    script = models.JSONField(
        default=dict,
        blank=True,
        help_text='Turns a scripted provider plays back: {"turns": [...]}.',
    )
    # OPS-1, OPS-2: prices per million tokens; the limit bounds a UTC day's tokens.
    # Blank in a form means 0 (see clean), so forms written before prices existed still save.
    input_token_price = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=0,
        blank=True,
        help_text="Price per million input tokens, in the site's currency (AGENTRUNS_CURRENCY).",
    )
    output_token_price = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=0,
        blank=True,
        help_text="Price per million output tokens, in the site's currency (AGENTRUNS_CURRENCY).",
    )
    daily_token_limit = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens this configuration's runs may use per UTC day."
    )
    active = models.BooleanField(default=True)
    # GOV-1: the number of the version in force; the creation is 1 (services.changes).
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        for name in ("input_token_price", "output_token_price"):
            if getattr(self, name) is None:
                setattr(self, name, 0)


class Ordered(models.Model):
    position = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True
        ordering = ["position", "id"]


class ConfigurationSnippet(Ordered):
    configuration = models.ForeignKey(Configuration, on_delete=models.CASCADE)
    snippet = models.ForeignKey(Snippet, on_delete=models.CASCADE)

    class Meta(Ordered.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["configuration", "snippet"], name="configuration_snippet_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.configuration}: snippet {self.snippet}"


class ConfigurationSkill(Ordered):
    configuration = models.ForeignKey(Configuration, on_delete=models.CASCADE)
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE)

    class Meta(Ordered.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["configuration", "skill"], name="configuration_skill_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.configuration}: skill {self.skill}"


class ConfigurationFallback(Ordered):
    configuration = models.ForeignKey(
        Configuration, on_delete=models.CASCADE, related_name="fallback_links"
    )
    fallback = models.ForeignKey(
        Configuration, on_delete=models.CASCADE, related_name="fallback_of_links"
    )

    class Meta(Ordered.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["configuration", "fallback"], name="configuration_fallback_once"
            ),
            models.CheckConstraint(
                condition=~models.Q(configuration=models.F("fallback")),
                name="configuration_not_own_fallback",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.configuration}: fallback {self.fallback}"


class CatalogGeneration(models.Model):
    """One counter bumped by every catalog write, so the runtime can cache a configuration
    and still gate against the live one (CG-9) with a single-row read."""

    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"catalog generation {self.value}"

    @classmethod
    def current(cls) -> int:
        return int(cls.objects.values_list("value", flat=True).get(pk=1))

    @classmethod
    def bump(cls) -> None:
        if not cls.objects.filter(pk=1).update(value=models.F("value") + 1):
            cls.objects.get_or_create(pk=1)


class GateAudit(models.Model):
    """One row per asserted gate decision (CG-4). Holds names and classes, never text."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    verdict = models.CharField(max_length=16)
    enforcement = models.CharField(
        max_length=16, choices=[(e.recorded, e.recorded.capitalize()) for e in Enforcement]
    )
    configuration = models.CharField(max_length=50)
    run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    zone = models.CharField(max_length=32, blank=True)
    ceiling = models.CharField(max_length=32, blank=True)
    source_kind = models.CharField(max_length=32, blank=True)
    source_name = models.CharField(max_length=200, blank=True)
    data_class = models.CharField(max_length=32, blank=True)
    forced = models.BooleanField(default=False)

    class Meta:
        ordering = ["-id"]
        # Filtered by exact name only: `db_index=True` would add a pattern-ops index that
        # every model turn writes and no query reads (PERF-1).
        indexes = [models.Index(fields=["configuration"], name="gateaudit_configuration")]

    def __str__(self) -> str:
        return f"{self.configuration}: {self.verdict} ({self.enforcement})"
