"""The approval inbox (UI-2, UI-3, UI-5, UI-6, HITL-9): one card per active ticket the
viewer may act on, each deciding through the resume service the API uses.

GET shows and never decides (OPS-6: mail scanners prefetch links); only the card's POST
decides. The card list is polled by htmx (`/inbox/cards/`, one card's page
`/inbox/<id>/live/`); an unchanged list answers 204 so nothing a person is typing is swapped
away. A changed list brings the navigation's count with it (an out-of-band swap), so the
count and the cards never disagree (HITL-9, UI-7).

A team's inbox (HITL-14, HITL-15) is filtered by GET parameters (`inbox_filters`), carried
into the poll's URL and the redirect after a decision; each card says why its viewer
sees it (`policy.with_access`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from agentruns.errors import AgentrunsError, InvalidArguments, InvalidInput
from agentruns.forms.decisions import ARGUMENTS, command_from_post, decision_context
from agentruns.forms.questions import typed_fields
from agentruns.models import Ticket
from agentruns.policy import answerable_tickets, visible_tickets, with_access
from agentruns.selectors import inbox_count, run_readout, run_readouts, uncertain_invocations
from agentruns.services.resume import run_resume
from agentruns.throttles import RESUME, throttle_check
from agentruns.words import decided_sentence, field_errors, sentence, ticket_outcome
from playground.changes import change_cards
from playground.inbox_filters import InboxFilter, filter_choices, filtered, inbox_filter
from playground.polls import poll, signature, unchanged

POLL = "every 2s"


def _inbox_url(chosen: InboxFilter | None = None) -> str:
    query = chosen.query() if chosen else ""
    return reverse("playground:inbox") + (f"?{query}" if query else "")


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    chosen = inbox_filter(request)
    context = _filtered_context(request, chosen, reverse("playground:inbox-cards"))
    context["count_in_cards"] = True  # the nav's count comes with the cards' poll
    context.update(
        chosen=chosen,
        choices=filter_choices(answerable_tickets(request.user), chosen, request.user),
        change_cards=change_cards(request.user),
    )
    return render(request, "playground/inbox.html", _with_cards(request, context))


@poll
def cards(request: HttpRequest) -> HttpResponse:
    """The polled list, under the page's filter (its query comes along); 204 while nothing
    changed (htmx then swaps nothing). A new list carries the nav's count (everything to
    decide, not only the filtered tickets) out of band: both come from this one answer."""
    context = _filtered_context(request, inbox_filter(request), request.path)
    context["oob_count"] = inbox_count(request.user)
    return _partial(request, context)


def _filtered_context(request: HttpRequest, chosen: InboxFilter, poll_url: str) -> dict[str, Any]:
    tickets = filtered(answerable_tickets(request.user), chosen, request.user)
    context = _list_context(request, tickets, poll_url, _inbox_url(chosen))
    context["poll_query"] = chosen.query()
    return context


@login_required
def card(request: HttpRequest, correlation_id: UUID) -> HttpResponse:
    """One card, for a link in a notification. Showing it decides nothing."""
    context = _card_context(request, correlation_id)
    return render(request, "playground/inbox_card.html", _with_cards(request, context))


@poll
def card_live(request: HttpRequest, correlation_id: UUID) -> HttpResponse:
    return _partial(request, _card_context(request, correlation_id))


def _card_context(request: HttpRequest, correlation_id: UUID) -> dict[str, Any]:
    ticket = _ticket(request, correlation_id)
    tickets = answerable_tickets(request.user).filter(pk=ticket.pk)
    here = reverse("playground:inbox-card", args=[correlation_id])
    live = reverse("playground:inbox-card-live", args=[correlation_id])
    context = _list_context(request, tickets, live, here)
    context.update(single=ticket, outcome=ticket_outcome(ticket, request.user))
    return context


@login_required
@require_http_methods(["GET", "POST"])
def resume(request: HttpRequest, correlation_id: UUID) -> HttpResponse:
    """UI-5: the posted identity and answer go to `run_resume` unchanged; a stale,
    repeated or edited post is refused there and the page says why. A refused answer's
    page stays at this address, so a reload or a bookmark of it (a GET) opens the card."""
    if request.method == "GET":
        return redirect("playground:inbox-card", correlation_id)
    ticket = _ticket(request, correlation_id)
    back = _back(request)
    try:
        throttle_check(request, RESUME)  # SEC-14: the API's rate, the same counter
        command = command_from_post(request.POST, ticket)
        run_resume(user=request.user, run_id=ticket.run_id, command=command)
    except (InvalidInput, InvalidArguments) as exc:
        return _refused_input(request, ticket, exc)
    except AgentrunsError as exc:
        messages.error(request, _refusal(exc, ticket, request.user))
        return redirect(back)
    ticket.refresh_from_db()
    messages.success(request, decided_sentence(command, ticket))
    return redirect(back)


def _refused_input(
    request: HttpRequest, ticket: Ticket, exc: InvalidInput | InvalidArguments
) -> HttpResponse:
    """HITL-6, HITL-12: the card again, each error beside its field, what was typed kept."""
    messages.error(request, sentence(exc))
    typed = typed_fields(request.POST) | typed_fields(request.POST, ARGUMENTS)
    errors = field_errors(exc)
    tickets = answerable_tickets(request.user).filter(pk=ticket.pk)
    live = reverse("playground:inbox-card-live", args=[ticket.correlation_id])
    context = _list_context(request, tickets, live, _back(request))
    context.update(
        cards=[
            _card(request, row, typed=typed, errors=errors)
            for row in with_access(tickets, request.user)
        ],
        single=ticket,
        outcome=None,
    )
    return render(request, "playground/inbox_card.html", context, status=422)


def _refusal(exc: AgentrunsError, ticket: Ticket, user: Any) -> str:
    """The error's words, and for a ticket already resolved, how it was."""
    words = sentence(exc)
    ticket.refresh_from_db()
    if ticket.status == Ticket.Status.ACTIVE:
        return words
    return f"{words} {ticket_outcome(ticket, user)}"


def _ticket(request: HttpRequest, correlation_id: UUID) -> Ticket:
    """Any ticket of a run the viewer may see; another's is a 404 (SEC-2)."""
    ticket = (
        visible_tickets(request.user)
        .filter(correlation_id=correlation_id)
        .select_related("run", "run__configuration", "run__created_by", "resolved_by")
        .first()
    )
    if ticket is None:
        raise Http404("No such ticket.")
    return ticket


def _back(request: HttpRequest) -> str:
    target = request.POST.get("next") or _inbox_url()
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if safe else _inbox_url()


def _list_context(request: HttpRequest, tickets: Any, poll_url: str, back: str) -> dict[str, Any]:
    user = request.user
    uncertain = uncertain_invocations(user)
    ids = [str(cid) for cid in tickets.values_list("correlation_id", flat=True)]
    count = len(ids)
    ids += [f"u{pk}" for pk in uncertain.values_list("pk", flat=True)]
    return {
        "tickets": tickets,
        "uncertain": uncertain,
        "count": count,
        "signature": signature(ids),
        "poll_url": poll_url,
        "poll": POLL,
        "back": back,
    }


def _partial(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    if unchanged(request, context["signature"]):
        return HttpResponse(status=204)
    return render(request, "playground/inbox_cards.html", _with_cards(request, context))


def _with_cards(request: HttpRequest, context: dict[str, Any]) -> dict[str, Any]:
    if "cards" not in context:
        tickets = list(with_access(context["tickets"], request.user))
        readouts = run_readouts(ticket.run for ticket in tickets)  # PERF-8: not one per card
        context["cards"] = [_card(request, t, readout=readouts[t.run_id]) for t in tickets]
    return context


def _card(
    request: HttpRequest,
    ticket: Ticket,
    *,
    typed: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
    readout: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a card shows (UI-3, UI-6). Text goes through the template's autoescape."""
    run, user = ticket.run, request.user
    form = decision_context(user, ticket, typed=typed, errors=errors)
    initiator = run.created_by
    return {
        **form,
        "ticket": ticket,
        "run": run,
        "initiator": initiator.get_username() if initiator else "",
        "readout": run_readout(run) if readout is None else readout,
        "own_run": run.created_by_id == user.pk,
        "access": getattr(ticket, "access", ""),  # why they see it (`policy.with_access`)
    }
