"""Replay before promoting over the API (GOV-4): `POST /api/replays/` starts one,
`GET /api/replays/{id}/` is its table of what changed, `GET /api/replays/` the caller's."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.api import docs
from agentruns.api.shapes import RUN_STATUSES, UsageOut
from agentruns.policy import visible_replays
from agentruns.services.replays import (
    MAX_RUNS,
    OBSERVED,
    REFUSED,
    SENT,
    replay_get,
    replay_start,
    replay_table,
)
from agentruns.throttles import SUBMIT

# Named in SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"].
REPLAY_STATUSES = [("running", "running"), ("done", "done")]
VERDICTS = [(SENT, SENT), (REFUSED, REFUSED), (OBSERVED, OBSERVED)]


class ReplayIn(serializers.Serializer):
    runs = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=MAX_RUNS,
        help_text="The runs whose recorded tasks are re-run: ids of ended runs you may see.",
    )
    configuration = serializers.CharField(
        max_length=100, help_text="The candidate configuration's slug."
    )


class ToolCallsOut(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())


class ReplayResultOut(serializers.Serializer):
    run = serializers.IntegerField(allow_null=True, help_text="The original (null once deleted).")
    replay_run = serializers.IntegerField(help_text="The run that re-ran its task.")
    status = serializers.ChoiceField(choices=RUN_STATUSES)
    original_status = serializers.ChoiceField(choices=RUN_STATUSES, allow_null=True)
    final_reply = serializers.CharField(allow_blank=True)
    final_reply_changed = serializers.BooleanField()
    tool_calls = ToolCallsOut(
        help_text="Tool names called more (added) or less (removed); empty until the replay "
        "run ended."
    )
    verdict = serializers.ChoiceField(choices=VERDICTS, allow_null=True)
    original_verdict = serializers.ChoiceField(choices=VERDICTS, allow_null=True)
    usage = UsageOut()
    original_usage = UsageOut(allow_null=True)


class ReplayOut(serializers.Serializer):
    id = serializers.IntegerField()
    configuration = serializers.CharField()
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=REPLAY_STATUSES)
    results = ReplayResultOut(many=True)


class ReplayStarted(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=REPLAY_STATUSES)


class ReplayViewSet(viewsets.GenericViewSet):
    """GOV-4: a replay's runs are driven by the workers like any run; poll the table
    until `status` is `done`."""

    serializer_class = ReplayIn
    throttle_scopes = {"create": SUBMIT}  # SEC-14

    def get_queryset(self) -> Any:
        return visible_replays(self.request.user)

    @extend_schema(
        summary="Replay runs on a candidate configuration (playground staff)",
        request=ReplayIn,
        examples=docs.REPLAY_EXAMPLES,
        responses={201: ReplayStarted},
    )
    def create(self, request: Request) -> Response:
        body = ReplayIn(data=request.data)
        body.is_valid(raise_exception=True)
        replay = replay_start(
            user=request.user,
            runs=body.validated_data["runs"],
            configuration=body.validated_data["configuration"],
        )
        return Response({"id": replay.pk, "status": "running"}, status=status.HTTP_201_CREATED)

    @extend_schema(summary="A replay's table of what changed", responses={200: ReplayOut})
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        replay = replay_get(user=request.user, replay_id=int(self.get_object().pk))
        return Response(replay_table(replay))

    @extend_schema(summary="List your replays, newest first", responses={200: ReplayOut(many=True)})
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset()) or []
        return self.get_paginated_response([replay_table(replay) for replay in page])
