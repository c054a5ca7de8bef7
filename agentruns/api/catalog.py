"""CRUD for the catalog (staff only) and the configuration readout (CG-10)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.db import transaction
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.api import docs
from agentruns.api.governance import Governed
from agentruns.api.limits import MAX_ID
from agentruns.api.permissions import ModelPermission
from agentruns.models import Configuration, Provider, Skill, Snippet
from agentruns.selectors import configuration_readout, delegation_cycle
from agentruns.services.catalog import configuration_set_sources
from agentruns.words import DELEGATION_CYCLE


class ProviderSerializer(serializers.ModelSerializer):
    class Meta:
        model = Provider
        fields = [
            "slug",
            "name",
            "kind",
            "base_url",
            "api_key_env",
            "trust_zone",
            "timeout_seconds",
            "max_retries",
            "tool_choice",
            "max_output_tokens",
            "context_window_tokens",
            "extra_body",
            "active",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]


class SnippetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Snippet
        fields = ["id", "slug", "name", "text", "data_class", "active", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]


class SkillSerializer(serializers.ModelSerializer):
    class Meta:
        model = Skill
        fields = [
            "id",
            "slug",
            "name",
            "instructions",
            "data_class",
            "active",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]


def slugs_to_ids(model: Any, slugs: list[str]) -> list[int]:
    found = dict(model.objects.filter(slug__in=slugs).values_list("slug", "pk"))
    missing = [slug for slug in slugs if slug not in found]
    if missing:
        raise serializers.ValidationError(f"Unknown: {', '.join(missing)}.")
    return [found[slug] for slug in slugs]


MAX_LIST = 200


def name_list(**kw: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=100), max_length=MAX_LIST, **kw
    )


class OrderedSlugs(serializers.ListField):
    """Ordered slugs of a through table: written as a list, read back in its order."""

    def __init__(self, through: str, target: str, **kw: Any) -> None:
        self.through, self.target = through, target
        super().__init__(child=serializers.SlugField(), required=False, max_length=MAX_LIST, **kw)

    def get_attribute(self, instance: Any) -> list[str]:
        rows = getattr(instance, self.through).select_related(self.target)
        return [getattr(row, self.target).slug for row in rows]


class ModeSerializer(serializers.Serializer):
    tools = name_list(default=list)
    deferred = name_list(default=list)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "tools": {"type": "array", "items": {"type": "string"}},
                "deferred": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
)
class ModesField(serializers.Field):
    """§11 shows modes as an ordered object; they are stored as a list to keep the order."""

    def to_internal_value(self, data: Any) -> list[dict]:
        if not isinstance(data, dict) or len(data) > 50:
            raise serializers.ValidationError(
                'Expected at most 50 modes: {"mode": {"tools": [...], "deferred": [...]}}.'
            )
        modes = []
        for name, spec in data.items():
            if not 1 <= len(str(name)) <= 64:
                raise serializers.ValidationError(f"Mode names have 1 to 64 characters: {name!r}.")
            mode = ModeSerializer(data=spec)
            if not mode.is_valid():
                raise serializers.ValidationError({name: mode.errors})
            modes.append({"name": str(name), **mode.validated_data})
        return modes

    def to_representation(self, value: list[dict]) -> dict:
        return {
            mode["name"]: {"tools": mode.get("tools", []), "deferred": mode.get("deferred", [])}
            for mode in value or []
        }


@extend_schema_field({"type": "object"})
class ScriptField(serializers.JSONField):
    pass


class ConfigurationSerializer(serializers.ModelSerializer):
    provider = serializers.SlugRelatedField(
        slug_field="slug", queryset=Provider.objects.all(), allow_null=True, required=False
    )
    snippets = OrderedSlugs("configurationsnippet_set", "snippet")
    skills = OrderedSlugs("configurationskill_set", "skill")
    fallbacks = OrderedSlugs("fallback_links", "fallback")
    allowed_tools = name_list(required=False)
    approval_exempt_tools = name_list(required=False)
    modes = ModesField(required=False)
    script = ScriptField(required=False, help_text=Configuration.script.field.help_text)
    # HITL-14, HITL-15: groups by name, as the admin shows them.
    approver_groups = serializers.SlugRelatedField(
        slug_field="name", queryset=Group.objects.all(), many=True, required=False
    )
    # DEL-1: the configurations agent.delegate may name, by slug.
    delegates = serializers.SlugRelatedField(
        slug_field="slug", queryset=Configuration.objects.all(), many=True, required=False
    )
    escalation_group = serializers.SlugRelatedField(
        slug_field="name", queryset=Group.objects.all(), allow_null=True, required=False
    )

    class Meta:
        model = Configuration
        fields = [
            "slug",
            "name",
            "provider",
            "model",
            "example_task",
            "system_prompt",
            "system_prompt_data_class",
            "snippets",
            "skills",
            "fallbacks",
            "allowed_tools",
            "approval_exempt_tools",
            "delegates",
            "max_tool_calls",
            "tool_timeout_seconds",
            "approval_timeout_seconds",
            "context_budget_tokens",
            "require_second_approver",
            "approvals_required",
            "approver_groups",
            "remind_after_seconds",
            "escalation_group",
            "input_token_price",
            "output_token_price",
            "daily_token_limit",
            "modes",
            "script",
            "active",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]

    def validate_script(self, value: Any) -> dict:
        """SEC-3: a scripted provider's turns are an object; `null` (e.g. from a form) is not."""
        if not isinstance(value, dict):
            raise serializers.ValidationError('Give an object, e.g. {"turns": [...]}.')
        return value

    def validate_snippets(self, value: list[str]) -> list[int]:
        return slugs_to_ids(Snippet, value)

    def validate_skills(self, value: list[str]) -> list[int]:
        return slugs_to_ids(Skill, value)

    def validate_fallbacks(self, value: list[str]) -> list[int]:
        return slugs_to_ids(Configuration, value)

    def validate_delegates(self, value: list[Configuration]) -> list[Configuration]:
        """DEL-3: no configuration may reach itself through its delegates."""
        instance = self.instance if isinstance(self.instance, Configuration) else None
        if delegation_cycle(instance.pk if instance else None, [c.pk for c in value]):
            raise serializers.ValidationError(DELEGATION_CYCLE)
        return value

    def _save(self, instance: Configuration | None, data: dict) -> Configuration:
        lists = {
            "snippet_ids": data.pop("snippets", None),
            "skill_ids": data.pop("skills", None),
            "fallback_ids": data.pop("fallbacks", None),
        }
        groups = data.pop("approver_groups", None)
        delegates = data.pop("delegates", None)
        with transaction.atomic():
            if instance is None:
                instance = Configuration.objects.create(**data)
            else:
                for key, value in data.items():
                    setattr(instance, key, value)
                instance.save()
            configuration_set_sources(configuration=instance, **lists)
            if groups is not None:
                instance.approver_groups.set(groups)
            if delegates is not None:
                instance.delegates.set(delegates)
        return instance

    def create(self, validated_data: dict) -> Configuration:
        return self._save(None, validated_data)

    def update(self, instance: Configuration, validated_data: dict) -> Configuration:
        return self._save(instance, validated_data)


@extend_schema_view(**docs.PROVIDERS)
class ProviderViewSet(Governed):
    kind = "provider"
    queryset = Provider.objects.all()
    serializer_class = ProviderSerializer
    permission_classes = [ModelPermission]
    lookup_field = "slug"


@extend_schema_view(**docs.SNIPPETS)
class SnippetViewSet(Governed):
    kind = "snippet"
    queryset = Snippet.objects.all()
    serializer_class = SnippetSerializer
    permission_classes = [ModelPermission]


@extend_schema_view(**docs.SKILLS)
class SkillViewSet(Governed):
    kind = "skill"
    queryset = Skill.objects.all()
    serializer_class = SkillSerializer
    permission_classes = [ModelPermission]


def id_list_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), default=list, max_length=50
    )


class ForcedSetSerializer(serializers.Serializer):
    forced_snippets = id_list_field()
    forced_skills = id_list_field()


class CommaIds(serializers.ListField):
    """`?forced_snippets=1,2`: a comma-separated list in one query parameter."""

    def get_value(self, dictionary: Any) -> Any:
        raw = dictionary.get(self.field_name)
        if raw is None:
            return serializers.empty
        return [part.strip() for part in raw.split(",") if part.strip()]


ID_LIST = {"type": "string", "pattern": r"^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17}){0,49}$"}


class ForcedQuery(serializers.Serializer):
    forced_snippets = CommaIds(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        default=list,
        max_length=50,
        help_text="Comma-separated snippet ids",
    )
    forced_skills = CommaIds(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        default=list,
        max_length=50,
        help_text="Comma-separated skill ids",
    )


@extend_schema_view(**docs.CONFIGURATIONS)
class ConfigurationViewSet(Governed):
    kind = "configuration"
    queryset = Configuration.objects.select_related("provider")
    serializer_class = ConfigurationSerializer
    permission_classes = [ModelPermission]
    # The readout reads, by GET or by POST (a forced set in the body).
    action_permissions = {"readout": ["agentruns.view_configuration"]}
    lookup_field = "slug"

    @extend_schema(
        summary="What a configuration would send where (the readout)",
        examples=docs.READOUT_EXAMPLES,
        parameters=[
            OpenApiParameter("forced_snippets", ID_LIST, description="Comma-separated snippet ids"),
            OpenApiParameter("forced_skills", ID_LIST, description="Comma-separated skill ids"),
        ],
        request=ForcedSetSerializer,
        responses={200: dict},
    )
    @action(detail=True, methods=["get", "post"])
    def readout(self, request: Request, slug: str | None = None) -> Response:
        """What this configuration (plus a forced set) would send, and the gate's verdict."""
        post = request.method == "POST"
        body = (ForcedSetSerializer if post else ForcedQuery)(
            data=request.data if post else request.query_params
        )
        body.is_valid(raise_exception=True)
        snippets, skills = (
            body.validated_data["forced_snippets"],
            body.validated_data["forced_skills"],
        )
        data = configuration_readout(
            configuration=self.get_object(), forced_snippet_ids=snippets, forced_skill_ids=skills
        )
        return Response(data)
