"""`/api/webhooks/` (OPS-4): staff register where events go. The secret is write-only."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.api import docs
from agentruns.api.governance import Governed
from agentruns.api.permissions import ModelPermission
from agentruns.events import EVENT_TYPES
from agentruns.models import Webhook, WebhookAttempt, WebhookDelivery
from agentruns.outbound import url_problem


class WebhookSerializer(serializers.ModelSerializer):
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES), required=False
    )
    secret = serializers.CharField(
        write_only=True, min_length=16, max_length=200, trim_whitespace=False
    )
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = Webhook
        fields = [
            "id",
            "url",
            "events",
            "secret",
            "description",
            "active",
            "trust_zone",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def validate_events(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    def validate_url(self, value: str) -> str:
        problem = url_problem(value)  # SEC-9, the rule the admin's form runs too
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def get_fields(self) -> dict:
        fields = super().get_fields()
        if self.instance is not None:  # an update may keep the secret it has
            fields["secret"].required = False
        return fields


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookAttempt
        fields = ["at", "status_code", "latency_ms", "error"]


class DeliverySerializer(serializers.ModelSerializer):
    attempt_log = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "delivery_id",
            "event_type",
            "run_id",
            "thread_id",
            "sequence",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "delivered_at",
            "created_at",
            "withheld",
            "attempt_log",
        ]


@extend_schema_view(**docs.WEBHOOKS)
class WebhookViewSet(Governed):
    kind = "webhook"
    serializer_class = WebhookSerializer
    permission_classes = [ModelPermission]
    queryset = Webhook.objects.select_related("created_by")

    def saving(self, serializer: serializers.BaseSerializer) -> Any:
        if serializer.instance is None:
            return serializer.save(created_by=self.request.user)
        return serializer.save()

    @extend_schema(
        summary="A webhook's deliveries, newest first",
        request=None,
        responses={200: DeliverySerializer(many=True)},
    )
    @action(detail=True, methods=["get"], serializer_class=DeliverySerializer)
    def deliveries(self, request: Request, pk: str | None = None) -> Response:
        """This webhook's deliveries, newest first, each with every attempt, a page at a
        time (SEC-14)."""
        rows: QuerySet[WebhookDelivery] = (
            self.get_object().deliveries.prefetch_related("attempt_log").order_by("-id")
        )
        page = self.paginate_queryset(rows) or []
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)
