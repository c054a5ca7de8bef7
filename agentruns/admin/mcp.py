"""MCP tool servers in the admin (MCP-1, MCP-2): register a server; "Refresh tools" lists
what it offers now and shows the difference against what is pinned; "Accept" pins exactly
the listing that was shown; each pinned tool's class and effect can be declared. Every
change goes through agentruns.services.mcp, as the API's do."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from agentruns.admin.governance import HELD, GovernedAdmin, HeldAdmin
from agentruns.errors import AgentrunsError
from agentruns.models import McpServer, McpTool
from agentruns.models.mcp import stdio_commands
from agentruns.services.mcp import (
    mcp_listing_digest,
    mcp_server_accept,
    mcp_server_changes,
    mcp_server_refresh,
    mcp_slug_problem,
    mcp_tool_declare,
)
from agentruns.words import sentence


class McpServerForm(forms.ModelForm):
    """stdio commands are chosen from the deployer's list, never typed (MCP-1)."""

    command = forms.ChoiceField(required=False)

    class Meta:
        model = McpServer
        fields = [
            "slug",
            "name",
            "active",
            "transport",
            "url",
            "command",
            "auth_env",
            "timeout_seconds",
            "output_class",
            "effect",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        listed = sorted(stdio_commands())
        current = self.instance.command
        choices = [("", "—"), *((name, name) for name in listed)]
        if current and current not in listed:
            choices.append((current, f"{current} (no longer listed by the deployer)"))
        field = self.fields["command"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices
        field.help_text = McpServer._meta.get_field("command").help_text

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        problem = mcp_slug_problem(slug)
        if problem:
            raise forms.ValidationError(problem)
        return slug


class McpToolInline(admin.TabularInline):
    """The pinned tools; only their declared class and effect are edited here."""

    model = McpTool
    extra = 0
    can_delete = False
    fields = ["name", "version_short", "description", "output_class", "effect"]
    readonly_fields = ["name", "version_short", "description"]
    verbose_name_plural = "pinned tools (class and effect blank: the server's)"

    @admin.display(description="version")
    def version_short(self, tool: McpTool) -> str:
        return tool.version[:12]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(McpServer)
class McpServerAdmin(GovernedAdmin):
    kind = "mcp_server"
    form = McpServerForm
    change_form_template = "admin/agentruns/mcpserver/change_form.html"
    # UI-7: the transport is the filter's (the target says which: a URL or a command).
    list_display = [
        "slug",
        "name",
        "target",
        "output_class",
        "effect",
        "tools_pinned",
        "active",
    ]
    list_filter = ["transport", "active"]
    search_fields = ["slug", "name", "url"]
    inlines = [McpToolInline]
    actions = ["refresh_tools"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "active"]}),
        ("Connection", {"fields": ["transport", "url", "command", "auth_env", "timeout_seconds"]}),
        ("What its tools return and do", {"fields": ["output_class", "effect"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpServer]:
        return super().get_queryset(request).annotate(pinned=Count("tools"))

    @admin.display(description="URL or command")
    def target(self, server: McpServer) -> str:
        return (
            server.url
            if server.transport == McpServer.Transport.STREAMABLE_HTTP
            else server.command
        )

    @admin.display(description="pinned tools", ordering="pinned")
    def tools_pinned(self, server: McpServer) -> int:
        return getattr(server, "pinned", 0)

    def get_urls(self) -> list[URLPattern]:
        review = path(
            "<int:object_id>/tools/",
            self.admin_site.admin_view(self.review_view),
            name="agentruns_mcpserver_tools",
        )
        return [review, *super().get_urls()]

    @admin.action(description="Refresh tools (list them and review the difference)")
    def refresh_tools(
        self, request: HttpRequest, queryset: QuerySet[McpServer]
    ) -> HttpResponse | None:
        servers = list(queryset)
        for server in servers:
            try:
                mcp_server_refresh(server=server)
            except AgentrunsError as exc:
                self.message_user(
                    request, f"{server.slug}: {sentence(exc)} {exc.detail}", messages.ERROR
                )
        if len(servers) == 1:
            return redirect(reverse("admin:agentruns_mcpserver_tools", args=[servers[0].pk]))
        self.message_user(request, "Listed; open a server's tools to review and accept them.")
        return None

    def review_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """GET shows the last listing's difference; POST `refresh` lists anew, POST
        `accept` pins the listing whose digest the page showed."""
        server = get_object_or_404(McpServer, pk=object_id)
        if not self.has_change_permission(request, server):
            return HttpResponseRedirect(reverse("admin:index"))
        if request.method == "POST":
            done = self._act(request, server)
            if done is not None:
                return done
            server.refresh_from_db()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": server,
            "title": f"Tools of {server.slug}",
            "changes": mcp_server_changes(server=server) if server.discovered_at else [],
            "listing": mcp_listing_digest(server),
        }
        return TemplateResponse(request, "admin/agentruns/mcpserver/review.html", context)

    def _act(self, request: HttpRequest, server: McpServer) -> HttpResponse | None:
        try:
            if request.POST.get("action") == "accept":
                changes = mcp_server_accept(
                    server_id=server.pk, listing=request.POST.get("listing", ""), user=request.user
                )
                pinned = sum(1 for change in changes if change.kind in ("added", "changed"))
                self.message_user(request, f"Accepted: {pinned} tool(s) pinned anew or again.")
                return redirect(reverse("admin:agentruns_mcpserver_change", args=[server.pk]))
            mcp_server_refresh(server=server)
        except AgentrunsError as exc:
            self.message_user(request, f"{sentence(exc)} {exc.detail}", messages.ERROR)
        return None


@admin.register(McpTool)
class McpToolAdmin(HeldAdmin):
    """Every pinned tool; its class and effect are declared here or on its server's page
    (through the same service); schemas and versions change only by accepting a listing."""

    list_display = ["__str__", "version_short", "declared_class", "declared_effect", "pinned_at"]
    list_filter = ["server", "output_class", "effect"]
    search_fields = ["name", "description"]
    fields = ["server", "name", "version", "description", "input_schema", "output_class", "effect"]
    readonly_fields = ["server", "name", "version", "description", "input_schema"]

    @admin.display(description="version")
    def version_short(self, tool: McpTool) -> str:
        return tool.version[:12]

    def save_model(self, request: HttpRequest, obj: McpTool, form: Any, change: bool) -> None:
        saved = mcp_tool_declare(
            tool=obj, output_class=obj.output_class, effect=obj.effect, user=request.user
        )
        if saved.change_request is not None:
            setattr(request, HELD, saved.change_request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
