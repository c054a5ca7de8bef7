"""`/api/mcp-servers/` (MCP-1, MCP-2), staff only: register a server, list its tools for
review (`refresh`), pin the reviewed listing (`accept`), declare a pinned tool's class and
effect. The same services as the admin's."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.api import docs
from agentruns.api.governance import Governed
from agentruns.api.permissions import ModelPermission
from agentruns.classes import DATA_CLASS_CHOICES
from agentruns.errors import NotFound
from agentruns.models import McpServer, McpTool
from agentruns.models.mcp import EFFECT_CHOICES
from agentruns.services.mcp import (
    mcp_listing_digest,
    mcp_server_accept,
    mcp_server_refresh,
    mcp_slug_problem,
    mcp_tool_declare,
)
from agentruns.tools.mcp.listing import Change, registry_name


class McpToolSerializer(serializers.ModelSerializer):
    registered_as = serializers.SerializerMethodField()
    declared_class = serializers.CharField(read_only=True)
    declared_effect = serializers.CharField(read_only=True)

    class Meta:
        model = McpTool
        fields = [
            "name",
            "registered_as",
            "description",
            "input_schema",
            "version",
            "output_class",
            "effect",
            "declared_class",
            "declared_effect",
            "pinned_at",
        ]
        read_only_fields = fields

    def get_registered_as(self, tool: McpTool) -> str:
        return registry_name(tool.server.slug, tool.name)


class McpServerSerializer(serializers.ModelSerializer):
    tools = McpToolSerializer(many=True, read_only=True)

    class Meta:
        model = McpServer
        fields = [
            "slug",
            "name",
            "transport",
            "url",
            "command",
            "auth_env",
            "output_class",
            "effect",
            "timeout_seconds",
            "active",
            "tools",
            "discovered_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["tools", "discovered_at", "created_at", "updated_at"]

    def validate_slug(self, value: str) -> str:
        problem = mcp_slug_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The model's own rules: SEC-9 on the URL, a listed stdio command (MCP-1)."""
        server = McpServer(**{**self._current(), **attrs})
        try:
            server.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return attrs

    def _current(self) -> dict[str, Any]:
        if self.instance is None:
            return {}
        names = ("transport", "url", "command")
        return {name: getattr(self.instance, name) for name in names}


class ListingSerializer(serializers.Serializer):
    listing = serializers.CharField(
        max_length=64, help_text="The `listing` digest a refresh returned, as reviewed."
    )


class DeclareSerializer(serializers.Serializer):
    output_class = serializers.ChoiceField(
        choices=[("", "the server's"), *DATA_CLASS_CHOICES],
        allow_blank=True,
        required=False,
    )
    effect = serializers.ChoiceField(
        choices=[("", "the server's"), *EFFECT_CHOICES], allow_blank=True, required=False
    )


def change_dict(change: Change) -> dict[str, Any]:
    listed = change.listed
    return {
        "name": change.name,
        "kind": change.kind,
        "problem": change.problem,
        "pinned_version": change.pinned_version,
        "version": listed.version if listed else "",
        "description": listed.description if listed else "",
        "input_schema": listed.input_schema if listed else None,
    }


CHANGES = {
    "type": "object",
    "properties": {
        "listing": {"type": "string"},
        "changes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kind": {
                        "type": "string",
                        "enum": ["added", "changed", "unchanged", "removed", "refused"],
                    },
                    "problem": {"type": "string"},
                    "pinned_version": {"type": "string"},
                    "version": {"type": "string"},
                    "description": {"type": "string"},
                    "input_schema": {"type": "object", "nullable": True},
                },
            },
        },
    },
}


@extend_schema_view(**docs.MCP_SERVERS)
class McpServerViewSet(Governed):
    kind = "mcp_server"
    queryset = McpServer.objects.prefetch_related("tools__server")
    serializer_class = McpServerSerializer
    permission_classes = [ModelPermission]
    # As in the admin: listing and pinning change the server; a declaration, the tool.
    action_permissions = {
        "refresh": ["agentruns.change_mcpserver"],
        "accept": ["agentruns.change_mcpserver"],
        "declare": ["agentruns.change_mcptool"],
    }
    lookup_field = "slug"

    @extend_schema(
        summary="List an MCP server's tools for review",
        request=None,
        responses={
            200: OpenApiResponse(CHANGES),
            424: OpenApiResponse(description="The server could not be listed."),
        },
    )
    @action(detail=True, methods=["post"])
    def refresh(self, request: Request, slug: str | None = None) -> Response:
        """tools/list now; the difference against what is pinned, and the listing's
        digest to accept it by. Nothing offered to a model changes yet."""
        server = self.get_object()
        changes = mcp_server_refresh(server=server)
        return Response(
            {"listing": mcp_listing_digest(server), "changes": [change_dict(c) for c in changes]}
        )

    @extend_schema(
        summary="Pin the reviewed listing of an MCP server",
        request=ListingSerializer,
        examples=docs.MCP_ACCEPT_EXAMPLES,
        responses={200: OpenApiResponse(CHANGES)},
    )
    @action(detail=True, methods=["post"])
    def accept(self, request: Request, slug: str | None = None) -> Response:
        """Pin the listing a refresh returned (refused with `conflict` if it changed)."""
        body = ListingSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        server = self.get_object()
        changes = mcp_server_accept(
            server_id=server.pk, listing=body.validated_data["listing"], user=request.user
        )
        return Response({"listing": "", "changes": [change_dict(c) for c in changes]})

    @extend_schema(
        summary="Declare a pinned MCP tool's class and effect",
        request=DeclareSerializer,
        examples=docs.MCP_DECLARE_EXAMPLES,
        responses={200: McpToolSerializer},
    )
    @action(detail=True, methods=["patch"], url_path=r"tools/(?P<tool>[A-Za-z0-9_.-]{1,64})")
    def declare(self, request: Request, slug: str | None = None, tool: str = "") -> Response:
        """Blank keeps the server's declaration. A class raised here withholds the tool's
        earlier results from sends that may not take them (MCP-4)."""
        body = DeclareSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pinned = self.get_object().tools.filter(name=tool).select_related("server").first()
        if pinned is None:
            raise NotFound("No such pinned tool.")
        data = body.validated_data
        saved = mcp_tool_declare(
            tool=pinned,
            output_class=data.get("output_class", pinned.output_class),
            effect=data.get("effect", pinned.effect),
            user=request.user,
        )
        if saved.change_request is not None:
            return self.held(saved.change_request)
        pinned.refresh_from_db()
        return Response(McpToolSerializer(pinned).data)
