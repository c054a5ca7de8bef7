"""The cluster in the admin: the task queue's changelist ("Task queue > Queued tasks")
opens with a summary of the cluster, and links to a read-only status page with
everything `manage.py cluster_status` shows. Imported from `agentruns.admin`."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django_q.admin import QueueAdmin
from django_q.models import OrmQ

from agentruns.cluster.status import Snapshot, snapshot, table

SUMMARY = """
<div class="module" style="margin-bottom: 1em">
  <h2>Execution cluster
    <a href="{{ status_url }}" style="float: right; color: inherit">details &rsaquo;</a></h2>
  <table style="width: 100%">
    <tr><th>Queue</th><td>{{ snap.queue_waiting }} waiting, {{ snap.queue_taken }} taken</td>
        <th>Running</th><td>{{ snap.running }}</td>
        <th>Stuck</th><td>{% if snap.stuck %}<strong style="color: #ba2121">{{ snap.stuck }}
        </strong>{% else %}0{% endif %}</td></tr>
  </table>
</div>
"""

CHANGELIST = (
    '{% extends "admin/change_list.html" %}{% block content %}' + SUMMARY + "{{ block.super }}"
    "{% endblock %}"
)

STATUS_PAGE = (
    '{% extends "admin/base_site.html" %}'
    '{% block breadcrumbs %}<div class="breadcrumbs"><a href="{% url \'admin:index\' %}">'
    'Home</a> &rsaquo; <a href="{{ queue_url }}">Queued tasks</a> &rsaquo; Cluster status'
    "</div>{% endblock %}"
    '{% block content %}<div id="content-main"><div class="module"><table '
    'style="width: 100%">{% for label, value in rows %}<tr><th style="width: 14em">{{ label }}'
    "</th><td>{{ value }}</td></tr>{% endfor %}</table></div>"
    "<p>Read-only. The same figures: <code>python manage.py cluster_status --json</code>.</p>"
    "</div>{% endblock %}"
)


class ClusterQueueAdmin(QueueAdmin):
    """django-q2's queue admin, with the cluster summary on top and a status page."""

    def get_urls(self) -> list[URLPattern]:
        status = path(
            "cluster-status/",
            self.admin_site.admin_view(self.status_view),
            name="agentruns_cluster_status",
        )
        return [status, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data["snap"] = _safe_snapshot()
            response.context_data["status_url"] = "cluster-status/"
            response.template_name = engines["django"].from_string(CHANGELIST)
        return response

    def status_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        snap = snapshot()
        context = {
            **self.admin_site.each_context(request),
            "title": "Execution cluster",
            "rows": table(snap),
            "queue_url": "../",
        }
        return TemplateResponse(
            request,
            engines["django"].from_string(STATUS_PAGE),
            context,
        )


def _safe_snapshot() -> Snapshot | None:
    try:
        return snapshot()
    except Exception:  # the queue page stays usable whatever the summary hits
        return None


if admin.site.is_registered(OrmQ):
    admin.site.unregister(OrmQ)
admin.site.register(OrmQ, ClusterQueueAdmin)
