"""What the run endpoints answer, as serializers for the OpenAPI schema only (the views
build plain dicts); schemathesis checks every response against them (SEC-3)."""

from __future__ import annotations

from rest_framework import serializers

from agentruns.models import Run, Ticket

# Named in SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]: two models have a `status`.
RUN_STATUSES = Run.Status.choices
TICKET_STATUSES = Ticket.Status.choices


class TargetOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Ticket.Kind.choices)
    call_id = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField(allow_null=True)
    arguments_digest = serializers.CharField()
    question = serializers.CharField()
    schema = serializers.JSONField(allow_null=True)
    due = serializers.DateTimeField(required=False, help_text="SCHED-3: a timer's due time.")
    child = serializers.IntegerField(
        required=False, allow_null=True, help_text="DEL-1: the child run a delegation waits for."
    )


class ApprovalsOut(serializers.Serializer):
    """HITL-12, HITL-13: what an allow now approves and who has allowed it so far."""

    # DRF takes declared fields off the class; mypy only sees the name Field also uses.
    required = serializers.IntegerField()  # type: ignore[assignment]
    approvers = serializers.ListField(child=serializers.CharField())
    # SEC-17: who allowed but no longer counts (deactivated, or may no longer decide).
    dropped = serializers.ListField(child=serializers.CharField())
    arguments = serializers.JSONField(allow_null=True)
    arguments_digest = serializers.CharField()
    edited_by = serializers.CharField(allow_null=True)


class TicketOut(serializers.Serializer):
    correlation_id = serializers.UUIDField()
    run = serializers.IntegerField()
    thread = serializers.IntegerField()
    snapshot_id = serializers.CharField()
    catalog_fingerprint = serializers.CharField()
    deadline = serializers.DateTimeField(allow_null=True)
    status = serializers.ChoiceField(choices=TICKET_STATUSES)
    target = TargetOut()
    approvals = ApprovalsOut()


class UncertainOut(serializers.Serializer):
    run = serializers.IntegerField(required=False)
    call_id = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField()
    effect_sent_at = serializers.DateTimeField(allow_null=True, required=False)


class CountersOut(serializers.Serializer):
    events = serializers.IntegerField()
    model_turns = serializers.IntegerField()
    tool_results = serializers.IntegerField()
    tool_calls_used = serializers.IntegerField()
    attempts = serializers.IntegerField()


class UsageOut(serializers.Serializer):
    """OPS-1: the run's tokens and their cost at its configuration's prices."""

    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = serializers.CharField(help_text="The prices' currency (AGENTRUNS_CURRENCY).")
    priced = serializers.BooleanField(
        help_text="False when the configuration names no price: the cost is then unknown, "
        "not nothing (OPS-1's prices default to 0)."
    )


class ForkedFromOut(serializers.Serializer):
    """FORK-1: the run a fork was copied from (null once deleted) and where its copy ends."""

    run = serializers.IntegerField(allow_null=True)
    at = serializers.IntegerField()


class ReplayOfOut(serializers.Serializer):
    """GOV-4: the replay a run belongs to and the run it re-ran (null once deleted)."""

    id = serializers.IntegerField()
    of = serializers.IntegerField(allow_null=True)


class RunOut(serializers.Serializer):
    id = serializers.IntegerField()
    thread = serializers.IntegerField()
    status = serializers.ChoiceField(choices=RUN_STATUSES)
    configuration = serializers.CharField()
    input = serializers.CharField()
    final_reply = serializers.CharField()
    failure = serializers.JSONField(allow_null=True)
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    forced_snippets = serializers.ListField(child=serializers.IntegerField())
    forced_skills = serializers.ListField(child=serializers.IntegerField())
    usage = UsageOut()
    forked_from = ForkedFromOut(allow_null=True)
    replay = ReplayOfOut(allow_null=True)


class RunDetailOut(RunOut):
    ticket = TicketOut(allow_null=True)
    waiting_on = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="DEL-1: the child runs the run waits for, in its calls' order "
        "(`ticket` shows only the newest of their delegation tickets).",
    )
    readout = serializers.DictField()
    counters = CountersOut()
    uncertain_calls = UncertainOut(many=True)


class EventOut(serializers.Serializer):
    sequence = serializers.IntegerField()
    type = serializers.CharField()
    payload = serializers.DictField()
    created_at = serializers.DateTimeField()


class EventsOut(serializers.Serializer):
    run = serializers.IntegerField()
    events = EventOut(many=True)


class QueuedTicketOut(TicketOut):
    configuration = serializers.CharField()
    run_input = serializers.CharField()
    initiator = serializers.CharField(allow_null=True)


class TicketsOut(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = QueuedTicketOut(many=True)
    uncertain = UncertainOut(many=True)


class ThreadOut(serializers.Serializer):
    id = serializers.IntegerField()
    configuration = serializers.CharField()
    mode = serializers.CharField()
    runs = serializers.ListField(child=serializers.IntegerField())
    created_at = serializers.DateTimeField()
