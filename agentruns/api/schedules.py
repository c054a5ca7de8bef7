"""`/api/schedules/` (SCHED-1) and `/api/triggers/` (SCHED-4): recurring and event-driven
runs. Writes need the Django model permission the admin needs (SEC-15); firing a trigger
needs no session or token, only the request's signature."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.api import docs
from agentruns.api.permissions import ModelPermission
from agentruns.models import Configuration, Schedule, ScheduleFiring, Trigger
from agentruns.models.schedules import MIN_INTERVAL_SECONDS, cron_problem, zone_problem
from agentruns.services.schedules import schedule_skips
from agentruns.services.triggers import trigger_fire
from agentruns.throttles import SUBMIT, throttle_check_owner


class OwnedSerializer(serializers.ModelSerializer):
    """The owner is the initiator of every run started (SCHED-2): the creator by default;
    naming another person is acting as them, which only a superuser may set up."""

    configuration = serializers.SlugRelatedField(
        slug_field="slug", queryset=Configuration.objects.all()
    )
    owner = serializers.SlugRelatedField(
        slug_field="username", queryset=get_user_model().objects.all(), required=False
    )

    def validate_owner(self, value: Any) -> Any:
        user = self.context["request"].user
        if value != user and not user.is_superuser:
            raise serializers.ValidationError(
                "Only a superuser may name another owner; runs start as the owner."
            )
        return value

    def create(self, validated_data: dict[str, Any]) -> Any:
        user = self.context["request"].user
        validated_data.setdefault("owner", user)
        return super().create({**validated_data, "created_by": user})


class ScheduleSerializer(OwnedSerializer):
    next_run_at = serializers.DateTimeField(read_only=True)
    last_run = serializers.SerializerMethodField()
    skips = serializers.SerializerMethodField()

    class Meta:
        model = Schedule
        fields = [
            "id",
            "name",
            "configuration",
            "input",
            "cron",
            "interval_seconds",
            "timezone",
            "owner",
            "active",
            "catch_up",
            "next_run_at",
            "last_run",
            "skips",
        ]

    def get_last_run(self, schedule: Schedule) -> int | None:
        started = schedule.firings.filter(outcome=ScheduleFiring.Outcome.STARTED)
        return started.values_list("run_id", flat=True).first()

    def get_skips(self, schedule: Schedule) -> list[dict[str, Any]]:
        return schedule_skips(schedule)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        current = self.instance if self.partial else None  # a replacement says it all
        cron = attrs.get("cron", current.cron if current else "")
        interval = attrs.get("interval_seconds", current.interval_seconds if current else None)
        if bool(cron) == bool(interval):
            raise serializers.ValidationError(
                {"cron": ["Give either a cron expression (five fields) or interval_seconds."]}
            )
        attrs.update(cron=cron, interval_seconds=interval)
        if cron and (problem := cron_problem(cron)):
            raise serializers.ValidationError({"cron": [problem]})
        if interval is not None and interval < MIN_INTERVAL_SECONDS:
            raise serializers.ValidationError(
                {"interval_seconds": [f"At least {MIN_INTERVAL_SECONDS} seconds."]}
            )
        zone = attrs.get("timezone", current.timezone if current else "UTC")
        if problem := zone_problem(zone):
            raise serializers.ValidationError({"timezone": [problem]})
        return attrs


class TriggerSerializer(OwnedSerializer):
    secret = serializers.CharField(
        write_only=True, min_length=16, max_length=200, trim_whitespace=False
    )

    class Meta:
        model = Trigger
        fields = ["slug", "configuration", "owner", "secret", "active", "created_at"]
        read_only_fields = ["created_at"]

    def get_fields(self) -> dict:
        fields = super().get_fields()
        if self.instance is not None:  # an update may keep the secret it has
            fields["secret"].required = False
        return fields


@extend_schema_view(**docs.SCHEDULES)
class ScheduleViewSet(viewsets.ModelViewSet):
    serializer_class = ScheduleSerializer
    permission_classes = [ModelPermission]
    queryset = Schedule.objects.select_related("configuration", "owner")


class FiredSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The run the request started (or started before).")
    status = serializers.CharField()


SIGNATURE_HEADERS = [
    OpenApiParameter(
        "X-Agentruns-Timestamp",
        str,
        OpenApiParameter.HEADER,
        required=True,
        description="Unix seconds; within 300 s of the server's clock.",
    ),
    OpenApiParameter(
        "X-Agentruns-Signature",
        str,
        OpenApiParameter.HEADER,
        required=True,
        description='sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>" under the secret>',
    ),
]


@extend_schema_view(**docs.TRIGGERS)
class TriggerViewSet(viewsets.ModelViewSet):
    serializer_class = TriggerSerializer
    permission_classes = [ModelPermission]
    queryset = Trigger.objects.select_related("configuration", "owner")
    lookup_field = "slug"

    @extend_schema(
        summary="Fire a trigger (signed; no session or token)",
        request={"application/json": {"type": "object"}},
        parameters=SIGNATURE_HEADERS,
        examples=[docs.TRIGGER_FIRE],
        responses={202: FiredSerializer, 200: FiredSerializer},
    )
    @action(
        detail=True,
        methods=["post"],
        permission_classes=[AllowAny],
        authentication_classes=[],
        throttle_classes=[],
    )
    def fire(self, request: Request, slug: str | None = None) -> Response:
        """SCHED-4: the JSON body becomes a new run's input (redacted); 202 with its id, or
        200 with the first run's id when the same signature comes again. The run counts
        against the owner's submissions (SEC-14)."""
        fired = trigger_fire(
            slug=slug or "",
            timestamp=request.headers.get("X-Agentruns-Timestamp", ""),
            signature=request.headers.get("X-Agentruns-Signature", ""),
            body=request.body,
            throttle=lambda owner_id: throttle_check_owner(request, SUBMIT, owner_id),
        )
        answer = {"id": fired.run.pk, "status": fired.run.status}
        return Response(answer, status=status.HTTP_202_ACCEPTED if fired.created else 200)
