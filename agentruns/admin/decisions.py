"""The admin decides and cancels too (issue 12, UI-5): the ticket's change page offers
Approve / Deny with a Note, or the question's generated form, posted with the ticket's
identity as shown and sent through `run_resume`; the run's change page offers Cancel
through `run_cancel`. The checks (HITL-3, four-eyes, permissions) are the services'; a
refusal is an admin message in the words of `agentruns/words.py`."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.urls import URLPattern, path, reverse

from agentruns.errors import AgentrunsError, InvalidArguments
from agentruns.forms.decisions import ARGUMENTS, command_from_post, decision_context
from agentruns.forms.questions import typed_fields
from agentruns.models import Run, Ticket
from agentruns.services.resume import run_resume
from agentruns.services.runs import run_cancel
from agentruns.throttles import RESUME, throttle_check
from agentruns.words import decided_sentence, field_errors, sentence

REFUSED_EDIT = "agentruns_refused_edit"  # session key: a refused edit, shown once


class TicketDecisionAdminMixin(admin.ModelAdmin):
    change_form_template = "admin/agentruns/ticket/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        decide = self.admin_site.admin_view(self.decide_view)
        own = [path("<int:ticket_id>/decide/", decide, name="agentruns_ticket_decide")]
        return [*own, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        ticket = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if isinstance(ticket, Ticket) and ticket.status == Ticket.Status.ACTIVE:
            refused = request.session.pop(REFUSED_EDIT, None)
            typed, errors = None, None
            if refused and refused[0] == ticket.pk:
                typed, errors = refused[1], refused[2]
            extra["decision"] = decision_form(request, ticket, typed, errors)
        return super().change_view(request, object_id, form_url, extra)

    def decide_view(self, request: HttpRequest, ticket_id: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        ticket = get_object_or_404(self.get_queryset(request), pk=ticket_id)
        try:
            throttle_check(request, RESUME)  # SEC-14: the API's rate, the same counter
            command = command_from_post(request.POST, ticket)
            run_resume(user=request.user, run_id=ticket.run_id, command=command)
        except InvalidArguments as exc:
            # HITL-12: the page again (after the redirect), each error beside its field,
            # what was typed kept; the admin's change view itself only shows.
            self.message_user(request, sentence(exc), level="error")
            typed = typed_fields(request.POST, ARGUMENTS)
            request.session[REFUSED_EDIT] = [ticket.pk, typed, field_errors(exc)]
        except AgentrunsError as exc:
            self.message_user(request, sentence(exc), level="error")
            for field, errors in field_errors(exc).items():
                self.message_user(request, f"{field or 'answer'}: {'; '.join(errors)}", "error")
        else:
            ticket.refresh_from_db()
            self.message_user(request, decided_sentence(command, ticket))
        return redirect("admin:agentruns_ticket_change", ticket_id)


def decision_form(
    request: HttpRequest,
    ticket: Ticket,
    typed: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    return {
        **decision_context(request.user, ticket, typed=typed, errors=errors),
        "action": reverse("admin:agentruns_ticket_decide", args=[ticket.pk]),
        "cid": ticket.correlation_id,
    }


class RunCancelAdminMixin(admin.ModelAdmin):
    change_form_template = "admin/agentruns/run/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        cancel = self.admin_site.admin_view(self.cancel_view)
        own = [path("<int:run_id>/cancel/", cancel, name="agentruns_run_cancel")]
        return [*own, *super().get_urls()]

    def cancel_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        """HITL-11 from the run's page: the same `run_cancel` as the API and the action."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            throttle_check(request, RESUME)
            run = run_cancel(user=request.user, run_id=run_id)
        except AgentrunsError as exc:
            self.message_user(request, sentence(exc), level="error")
        else:
            stopping = "stops at its next step" if run.status == Run.Status.RUNNING else "ended"
            self.message_user(request, f"Run {run_id} cancelled: it {stopping}.")
        return redirect("admin:agentruns_run_change", run_id)
