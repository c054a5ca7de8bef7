"""Change governance over the API (GOV-1, GOV-3): catalog writes through
`services.changes.catalog_save` (a held change answers 202 with its change request) and
deletions through `catalog_delete`, each record's versions (a deleted one's too), and
`/api/change-requests/`."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response

from agentruns.models import ChangeRequest
from agentruns.policy import visible_changes
from agentruns.services.changes import (
    Saved,
    catalog_delete,
    catalog_history,
    catalog_save,
    change_request_approve,
    change_request_reject,
    deleted_history,
)


class ChangeRequestSerializer(serializers.ModelSerializer):
    object = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = ChangeRequest
        fields = [
            "id",
            "object",
            "changes",
            "base_version",
            "requested_by",
            "status",
            "decided_by",
            "decided_at",
            "created_at",
        ]
        read_only_fields = fields

    def get_object(self, request: ChangeRequest) -> dict[str, str]:
        return {"kind": request.kind, "key": request.key}

    def to_representation(self, instance: ChangeRequest) -> dict[str, Any]:
        data = super().to_representation(instance)
        viewer = self.context.get("request")
        if viewer is not None:
            data["changes"] = visible_changes(viewer.user, instance.kind, instance.changes)
        return data


class VersionSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    changed_by = serializers.CharField(allow_null=True)
    changed_at = serializers.DateTimeField()
    comment = serializers.CharField()
    changes = serializers.DictField()
    diffs = serializers.DictField(child=serializers.CharField())


class Governed(viewsets.ModelViewSet):
    """A catalog viewset whose writes are versioned and, when they widen, held."""

    kind = ""

    def held(self, request: ChangeRequest) -> Response:
        """GOV-3: 202 with the change request; the record is as it was."""
        return Response(
            ChangeRequestSerializer(request, context={"request": self.request}).data,
            status=status.HTTP_202_ACCEPTED,
        )

    def _answer(self, saved: Saved, created: bool = False) -> Response:
        if saved.change_request is not None:
            return self.held(saved.change_request)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(self.get_serializer(saved.obj).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        saved = catalog_save(
            kind=self.kind, pk=None, user=request.user, save=lambda: self.saving(serializer)
        )
        return self._answer(saved, created=True)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        partial = kwargs.pop("partial", False)
        serializer = self.get_serializer(instance, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        saved = catalog_save(
            kind=self.kind, pk=instance.pk, user=request.user, save=lambda: self.saving(serializer)
        )
        return self._answer(saved)

    def saving(self, serializer: serializers.BaseSerializer) -> Any:
        return serializer.save()

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """GOV-1: the deletion is kept as the record's last version."""
        catalog_delete(kind=self.kind, pk=self.get_object().pk, user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="The record's versions, newest first (GOV-1)",
        description="A deleted record's versions stay readable at the address it had "
        "(by slug: the one deleted last), the newest marked `deleted`.",
        request=None,
        responses={200: VersionSerializer(many=True)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def versions(self, request: Request, **kwargs: Any) -> Response:
        try:
            return Response(catalog_history(self.get_object()))
        except Http404:
            key = str(kwargs[self.lookup_url_kwarg or self.lookup_field])
            rows = deleted_history(kind=self.kind, by=self.lookup_field, key=key)
            if not rows:
                raise
            return Response(rows)


@extend_schema_view(
    list=extend_schema(summary="List change requests, newest first (GOV-3)"),
    retrieve=extend_schema(summary="Get a change request"),
)
class ChangeRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """GOV-3: held changes, newest first; another holder of approve_change decides."""

    queryset = ChangeRequest.objects.select_related("requested_by", "decided_by")
    serializer_class = ChangeRequestSerializer
    permission_classes = [IsAdminUser]

    def get_queryset(self) -> Any:
        rows = super().get_queryset()
        wanted = self.request.query_params.get("status")
        return rows.filter(status=wanted) if wanted in ChangeRequest.Status.values else rows

    @extend_schema(summary="Approve a change request", request=None)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        decided = change_request_approve(request_id=self.get_object().pk, user=request.user)
        return Response(ChangeRequestSerializer(decided, context={"request": request}).data)

    @extend_schema(summary="Reject a change request", request=None)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        decided = change_request_reject(request_id=self.get_object().pk, user=request.user)
        return Response(ChangeRequestSerializer(decided, context={"request": request}).data)
