"""Runs, their events, tickets and notes over HTTP (§11). Views only translate; services
decide."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.db.models import Count
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns import events as ev
from agentruns.api import docs
from agentruns.api.limits import MAX_ID
from agentruns.api.shapes import EventsOut, RunDetailOut, RunOut, ThreadOut, TicketsOut
from agentruns.models import Event, Note, Run, Thread, Ticket, TicketIdentity
from agentruns.policy import (
    answerable_tickets,
    visible_notes,
    visible_runs,
    visible_threads,
    visible_tickets,
)
from agentruns.selectors import run_readout, uncertain_invocations, waiting_on
from agentruns.services.approvals import approval_count
from agentruns.services.fork import ForkRequest, run_fork
from agentruns.services.log import events_read
from agentruns.services.resume import ResumeCommand, run_resume
from agentruns.services.runs import (
    MAX_INPUT_CHARS,
    Submission,
    run_cancel,
    run_dry,
    run_submit,
    thread_mode_name,
    thread_switch_mode,
)
from agentruns.services.usage import Usage, run_usage, runs_usage
from agentruns.throttles import RESUME, SUBMIT


class SubmitSerializer(serializers.Serializer):
    configuration = serializers.SlugField()
    input = serializers.CharField(
        trim_whitespace=False,
        max_length=MAX_INPUT_CHARS,
        validators=[RegexValidator(r"\S", "Give the task to run.")],
    )
    thread = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    mode = serializers.CharField(required=False, allow_null=True, max_length=64)
    forced_snippets = serializers.ListField(
        child=serializers.IntegerField(min_value=1), default=list, max_length=50
    )
    forced_skills = serializers.ListField(
        child=serializers.IntegerField(min_value=1), default=list, max_length=50
    )
    dry_run = serializers.BooleanField(default=False)


class ForkSerializer(serializers.Serializer):
    """FORK-1: where to fork (a `message.assistant`'s sequence, or none for the run's end),
    onto which configuration (the original's when absent), with what new prompt (none:
    go on with the original's)."""

    at = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_ID)
    configuration = serializers.SlugField(required=False, allow_null=True)
    input = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=MAX_INPUT_CHARS
    )


class RunFilter(serializers.Serializer):
    """SEC-3: the list's query parameters, validated (a bad one is a 400, never a 500)."""

    status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
    thread = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ID)


class EventsQuery(serializers.Serializer):
    after = serializers.IntegerField(required=False, default=0, min_value=0, max_value=MAX_ID)
    limit = serializers.IntegerField(required=False, default=1000, min_value=1, max_value=5000)


class NoteFilter(serializers.Serializer):
    run = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ID)


def query(serializer: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    body = serializer(data=request.query_params)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


# §11: a result may name its kind as the answer (`permission`, `input`) or copy the
# ticket's `target.kind` (`tool_permission`, `remote_input`); both mean the same.
ANSWER_OF_TARGET = {
    Ticket.Kind.TOOL_PERMISSION: Ticket.Answer.PERMISSION,
    Ticket.Kind.REMOTE_INPUT: Ticket.Answer.INPUT,
}


class ResultSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=[*Ticket.Answer.values, *ANSWER_OF_TARGET],
        help_text="`permission` or `input`; the ticket's `target.kind` "
        "(`tool_permission`, `remote_input`) is accepted as well.",
    )
    decision = serializers.ChoiceField(choices=[ev.ALLOW, ev.DENY], required=False)
    note = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    value = serializers.JSONField(required=False, allow_null=True)
    # HITL-12: an allow with the arguments the approver edited; the tool never changes.
    arguments = serializers.JSONField(required=False, allow_null=True)
    tool = serializers.CharField(required=False, max_length=100)
    # HITL-13, SEC-16: the digest of the arguments the approver saw (the ticket's
    # `target.arguments_digest`), refused if they changed since; required once edited.
    arguments_digest = serializers.CharField(required=False, max_length=64)

    def validate(self, data: dict) -> dict:
        data["kind"] = ANSWER_OF_TARGET.get(data["kind"], data["kind"])
        if data["kind"] == Ticket.Answer.PERMISSION and "decision" not in data:
            raise serializers.ValidationError(
                {"decision": ["A permission answer needs a decision."]}
            )
        if data["kind"] == Ticket.Answer.INPUT and "value" not in data:
            raise serializers.ValidationError({"value": ["An input answer needs a value."]})
        return data


class ResumeSerializer(serializers.Serializer):
    """HITL-3: the ticket's identity fields (`TicketIdentity`), copied verbatim, and the
    answer."""

    correlation_id = serializers.CharField(max_length=64)
    run = serializers.IntegerField()
    snapshot_id = serializers.CharField(max_length=64)
    catalog_fingerprint = serializers.CharField(max_length=64)
    call_id = serializers.CharField(max_length=200, allow_blank=True)
    result = ResultSerializer()


def ticket_dict(ticket: Ticket | None) -> dict[str, Any] | None:
    if ticket is None:
        return None
    return {
        "correlation_id": str(ticket.correlation_id),
        "run": ticket.run_id,
        "thread": ticket.thread_id,
        "snapshot_id": ticket.snapshot_id,
        "catalog_fingerprint": ticket.catalog_fingerprint,
        "deadline": ticket.deadline,
        "status": ticket.status,
        "target": {
            "kind": ticket.kind,
            "call_id": ticket.call_id,
            "tool": ticket.tool,
            # SEC-16: the arguments an allow now approves (an approver's edit, else the
            # model's), and the digest an allow must carry once they were edited.
            "arguments": ticket.pending_arguments,
            "arguments_digest": ticket.pending_digest,
            "question": ticket.question,
            "schema": ticket.schema,
            # SCHED-3: a timer's deadline is when the run goes on by itself.
            **({"due": ticket.deadline} if ticket.kind == Ticket.Kind.TIMER else {}),
            # DEL-1, §11's ticket: the child run whose end answers a delegation.
            **({"child": ticket.child_id} if ticket.kind == Ticket.Kind.DELEGATION else {}),
        },
        "approvals": approvals_dict(ticket),
        "origin": origin_dict(ticket.run),
    }


def origin_dict(run: Run) -> dict[str, Any]:
    """DEL-4: the tree a ticket's run belongs to: its root, its parent, and the root's
    initiator (a child runs for its parent's initiator)."""
    return {
        "root": run.root_id or run.pk,
        "parent": run.parent_id,
        "initiator": run.created_by.get_username() if run.created_by else None,
    }


def approvals_dict(ticket: Ticket) -> dict[str, Any]:
    """HITL-12, HITL-13: what an allow now approves and who has allowed it so far."""
    required = ticket.run.configuration.approvals_required
    # With one approval needed the first allow answers the ticket: nobody to list.
    count = approval_count(ticket.run, ticket) if required > 1 else None
    editor = ticket.edited_by if ticket.edited_by_id else None
    return {
        "required": required,
        "approvers": count.approvers if count else [],
        "dropped": count.dropped if count else [],  # SEC-17: allows that no longer count
        "arguments": ticket.pending_arguments,
        "arguments_digest": ticket.pending_digest,
        "edited_by": editor.get_username() if editor else None,
    }


def run_dict(
    run: Run, viewer: Any, *, detail: bool = True, usage: Usage | None = None
) -> dict[str, Any]:
    """The run as `viewer` sees it: its active ticket only if routed to them or theirs
    (HITL-14, `policy.visible_tickets`)."""
    data: dict[str, Any] = {
        "id": run.pk,
        "thread": run.thread_id,
        "status": run.status,
        "configuration": run.configuration.slug,
        # GOV-2: the version it was started under; each turn's own is in its event.
        "configuration_version": run.configuration_version,
        "input": run.input,
        "final_reply": run.final_reply,
        "failure": run.failure,
        "created_by": run.created_by.get_username() if run.created_by else None,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "forced_snippets": run.forced_snippet_ids or [],
        "forced_skills": run.forced_skill_ids or [],
        "usage": (usage or run_usage(run)).as_dict(),  # OPS-1
        "forked_from": (  # FORK-1
            {"run": run.forked_from_id, "at": run.forked_at} if run.forked_at is not None else None
        ),
        "replay": (  # GOV-4: the replay it belongs to and the run it re-ran
            {"id": run.replay_id, "of": run.replay_of_id} if run.replay_id else None
        ),
        "trigger": run.trigger,  # SCHED-5: null for a run a person started
        "parent": (  # DEL-5
            {"run": run.parent_id, "call_id": run.parent_call_id} if run.parent_id else None
        ),
    }
    if detail:
        data["children"] = list(run.children.order_by("id").values_list("pk", flat=True))
        active = visible_tickets(viewer).filter(run=run, status=Ticket.Status.ACTIVE).first()
        data["ticket"] = ticket_dict(active)
        # DEL-1: `ticket` shows one ticket (the newest); a host sees every child here.
        data["waiting_on"] = waiting_on(run)
        data["readout"] = run_readout(run)
        counts = dict(Event.objects.filter(run=run).values_list("type").annotate(n=Count("id")))
        data["counters"] = {
            "events": sum(counts.values()),
            "model_turns": counts.get("message.assistant", 0),
            "tool_results": counts.get("tool.result", 0),
            "tool_calls_used": run.tool_calls_used,
            "attempts": run.attempts,
        }
        data["uncertain_calls"] = list(
            run.invocations.filter(status="uncertain").values("call_id", "tool", "arguments")
        )
    return data


def event_dict(event: Event) -> dict[str, Any]:
    return {
        "sequence": event.sequence,
        "type": event.type,
        "payload": event.payload,
        "created_at": event.created_at,
    }


class RunViewSet(viewsets.GenericViewSet):
    serializer_class = SubmitSerializer
    throttle_scopes = {
        "create": SUBMIT,
        "fork": SUBMIT,
        "resume": RESUME,
        "cancel": RESUME,
    }  # SEC-14

    def get_queryset(self) -> Any:
        return visible_runs(self.request.user)

    @extend_schema(
        summary="List the runs you may see",
        parameters=[RunFilter],
        responses={200: RunOut(many=True)},
    )
    def list(self, request: Request) -> Response:
        # GOV-4: a replay's runs are listed in its table, not among the caller's runs.
        runs = self.get_queryset().filter(replay__isnull=True, **query(RunFilter, request))
        page = self.paginate_queryset(runs) or []
        usage = runs_usage(page)  # one query for the page
        return self.get_paginated_response(
            [run_dict(run, request.user, detail=False, usage=usage[run.pk]) for run in page]
        )

    @extend_schema(
        summary="Start a run (or dry-run one)",
        examples=docs.RUN_EXAMPLES,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
        request=SubmitSerializer,
        responses={
            201: RunDetailOut,
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="The original run (replayed key) or a dry run (`would_be_refused`, "
                "`notice`: its text is shown to you, not sent)",
            ),
        },
    )
    def create(self, request: Request) -> Response:
        body = SubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        submission = Submission(
            configuration=data["configuration"],
            input=data["input"],
            thread=data.get("thread"),
            mode=data.get("mode"),
            forced_snippets=tuple(data["forced_snippets"]),
            forced_skills=tuple(data["forced_skills"]),
        )
        if data["dry_run"]:
            return Response(run_dry(user=request.user, submission=submission))
        run, created = run_submit(
            user=request.user,
            submission=submission,
            idempotency_key=request.headers.get("Idempotency-Key") or None,
        )
        return Response(
            run_dict(run, request.user),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        summary="Get a run: status, reply, failure, ticket, readout", responses={200: RunDetailOut}
    )
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(run_dict(self.get_object(), request.user))

    @extend_schema(
        summary="A run's events, in order", parameters=[EventsQuery], responses={200: EventsOut}
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The run's events after the `after` cursor; what is answered is durable."""
        run = self.get_object()
        rows = events_read(run=run, **query(EventsQuery, request))
        return Response({"run": run.pk, "events": [event_dict(e) for e in rows]})

    @extend_schema(
        summary="Answer a run's ticket (approve, deny or give typed input)",
        examples=docs.RESUME_EXAMPLES,
        request=ResumeSerializer,
        responses={200: RunDetailOut},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Answer the run's ticket: allow/deny a tool call, or give typed input."""
        body = ResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data, result = body.validated_data, body.validated_data["result"]
        command = ResumeCommand(
            identity=TicketIdentity.from_fields(data),
            answer=result["kind"],
            decision=result.get("decision"),
            note=result.get("note", ""),
            value=result.get("value"),
            arguments=result.get("arguments"),
            tool=result.get("tool"),
            arguments_digest=result.get("arguments_digest"),
        )
        run = run_resume(user=request.user, run_id=int(self.get_object().pk), command=command)
        return Response(run_dict(run, request.user))

    @extend_schema(
        summary="Fork a run at a model turn: a new run on a new thread from its context",
        examples=docs.FORK_EXAMPLES,
        request=ForkSerializer,
        responses={201: RunDetailOut},
    )
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str | None = None) -> Response:
        """FORK-1: the new run starts from a copy of this run's effective context up to
        `at`; copied tool results are reused, never run again."""
        body = ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        fork = run_fork(
            user=request.user,
            run_id=int(self.get_object().pk),
            request=ForkRequest(
                at=data.get("at"),
                configuration=data.get("configuration"),
                input=data.get("input", ""),
            ),
        )
        return Response(run_dict(fork, request.user), status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a run", request=None, responses={200: RunDetailOut})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = run_cancel(user=request.user, run_id=int(self.get_object().pk))
        return Response(run_dict(run, request.user))


class NoteSerializer(serializers.ModelSerializer):
    class Meta:
        model = Note
        fields = ["id", "title", "body", "run", "call_id", "created_at"]


@extend_schema_view(retrieve=extend_schema(summary="Get a note"))
class NoteViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = NoteSerializer

    def get_queryset(self) -> Any:
        """SEC-2: a note is visible iff its run is; being staff shows no more."""
        notes = visible_notes(self.request.user)
        if getattr(self, "action", None) == "list":
            notes = notes.filter(
                **{f"{k}_id": v for k, v in query(NoteFilter, self.request).items()}
            )
        return notes

    @extend_schema(summary="List the notes of runs you may see", parameters=[NoteFilter])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)


class TicketViewSet(viewsets.GenericViewSet):
    """Active tickets the caller may act on (HITL-9), a page at a time (SEC-14)."""

    def get_queryset(self) -> Any:
        return answerable_tickets(self.request.user)

    @extend_schema(summary="List the tickets you may answer", responses={200: TicketsOut})
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset()) or []
        rows = [
            {
                **(ticket_dict(ticket) or {}),
                "configuration": ticket.run.configuration.slug,
                "run_input": ticket.run.input[:500],
                "initiator": (
                    ticket.run.created_by.get_username() if ticket.run.created_by else None
                ),
            }
            for ticket in page
        ]
        response = self.get_paginated_response(rows)
        response.data["uncertain"] = uncertain_calls(request.user)  # at most 200, newest
        return response


def uncertain_calls(user: Any) -> list[dict[str, Any]]:
    """TOOL-4: a write whose outcome is unknown is shown to approvers, never re-run."""
    return [
        {
            "run": row.run_id,
            "call_id": row.call_id,
            "tool": row.tool,
            "arguments": row.arguments,
            "effect_sent_at": row.effect_sent_at,
        }
        for row in uncertain_invocations(user)
    ]


class ModeSerializer(serializers.Serializer):
    mode = serializers.CharField(max_length=64)


def thread_dict(thread: Thread) -> dict[str, Any]:
    return {
        "id": thread.pk,
        "configuration": thread.configuration.slug,
        "mode": thread_mode_name(thread),
        "runs": list(thread.runs.order_by("id").values_list("id", flat=True)),
        "created_at": thread.created_at,
    }


class ThreadViewSet(viewsets.GenericViewSet):
    serializer_class = ModeSerializer

    def get_queryset(self) -> Any:
        return visible_threads(self.request.user)

    @extend_schema(summary="Get a thread: its runs and mode", responses={200: ThreadOut})
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(thread_dict(self.get_object()))

    @extend_schema(
        summary="Switch a thread's mode",
        examples=docs.MODE_EXAMPLES,
        request=ModeSerializer,
        responses={200: ThreadOut},
    )
    @action(detail=True, methods=["post"])
    def mode(self, request: Request, pk: str | None = None) -> Response:
        """Switch the thread's mode between runs (DEF-1); recorded as `mode.switched`."""
        body = ModeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        thread = thread_switch_mode(
            user=request.user, thread_id=int(self.get_object().pk), mode=body.validated_data["mode"]
        )
        return Response(thread_dict(thread))
