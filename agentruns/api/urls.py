from django.urls import include, path
from rest_framework.routers import DefaultRouter

from agentruns.api import (
    audit,
    catalog,
    governance,
    mcp,
    replays,
    runs,
    schedules,
    usage,
    webhooks,
)

router = DefaultRouter()
router.register("providers", catalog.ProviderViewSet)
router.register("configurations", catalog.ConfigurationViewSet)
router.register("snippets", catalog.SnippetViewSet)
router.register("skills", catalog.SkillViewSet)
router.register("runs", runs.RunViewSet, basename="run")
router.register("notes", runs.NoteViewSet, basename="note")
router.register("tickets", runs.TicketViewSet, basename="ticket")
router.register("threads", runs.ThreadViewSet, basename="thread")
router.register("webhooks", webhooks.WebhookViewSet)
router.register("mcp-servers", mcp.McpServerViewSet)
router.register("schedules", schedules.ScheduleViewSet)
router.register("triggers", schedules.TriggerViewSet)
router.register("change-requests", governance.ChangeRequestViewSet)
router.register("replays", replays.ReplayViewSet, basename="replay")

urlpatterns = [
    path("audit/", audit.AuditExportView.as_view(), name="audit-export"),
    path("usage/", usage.UsageView.as_view(), name="usage"),
    path("", include(router.urls)),
]
