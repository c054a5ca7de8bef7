"""Change governance (GOV-1, GOV-3): every door that writes a provider, configuration,
snippet, skill, MCP server or webhook (the API, the admin, rollback, an approval) goes
through `catalog_save` (every door that deletes one, through `catalog_delete`). It
applies the door's write in a savepoint, compares the record before and after in the
API's words, and then either keeps it as a new version (recorded by django-reversion) or,
when it widens and change approval is on, takes it back and holds it as a change request."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import reversion
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models, transaction
from django.utils import timezone
from reversion.models import Version

from agentruns.errors import Conflict, NotFound, NotPermitted, OwnChangeRequest
from agentruns.models import (
    ChangeRequest,
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    McpServer,
    McpTool,
    Provider,
    Skill,
    Snippet,
    Webhook,
)
from agentruns.services.catalog import configuration_set_sources
from agentruns.widening import widening_fields

KINDS: dict[str, type[models.Model]] = {
    "provider": Provider,
    "configuration": Configuration,
    "snippet": Snippet,
    "skill": Skill,
    "mcp_server": McpServer,
    "webhook": Webhook,
}
# Bookkeeping, the listing under review, and the webhook's secret are not what a change is.
UNVERSIONED = {
    "id",
    "version",
    "created_at",
    "updated_at",
    "discovered",
    "discovered_at",
    "secret",
    "created_by",
}
# A configuration's ordered lists: their link rows and what they point at.
LISTS: dict[str, tuple[type[models.Model], type[models.Model]]] = {
    "snippets": (ConfigurationSnippet, Snippet),
    "skills": (ConfigurationSkill, Skill),
    "fallbacks": (ConfigurationFallback, Configuration),
}
# GOV-1: text fields longer than this also get a unified diff.
DIFF_OVER = 200
# A deletion's version says so in its comment (which `catalog_history` reads it by) and,
# in its `changes`, under this name beside each field's final value.
DELETED = "deleted"
DELETED_BY = "Deleted by "


def kind_of(obj: models.Model) -> str:
    return next(kind for kind, model in KINDS.items() if isinstance(obj, model))


def key_of(obj: models.Model) -> str:
    return str(getattr(obj, "slug", None) or obj.pk)


@dataclass
class Rows:
    """A configuration's ordered links and an MCP server's pinned tools, as stored now or
    as a version kept them (`through`: the unsaved rows of that version's revision)."""

    through: list[models.Model] | None = None

    def of(self, obj: models.Model, model: type[models.Model]) -> list[Any]:
        if self.through is None:
            owner = "server" if model is McpTool else "configuration"
            return list(model.objects.filter(**{owner: obj.pk}))  # type: ignore[attr-defined]
        return [row for row in self.through if isinstance(row, model)]


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Decimal) else value


def _slugs(model: type[models.Model], ids: Iterable[int]) -> list[str]:
    """Slugs in order; a deleted record by the slug its last version kept (GOV-1)."""
    ids = list(ids)
    found = dict(model.objects.filter(pk__in=ids).values_list("pk", "slug"))  # type: ignore[attr-defined]
    gone = [str(pk) for pk in ids if pk not in found]
    if gone:  # each one's last version only: one row and one deserialisation an id
        kept = Version.objects.get_deleted(model).filter(object_id__in=gone)
        found |= {int(v.object_id): v.field_dict.get("slug") for v in kept}
    return [found.get(pk, f"#{pk}") for pk in ids]


def snapshot(
    obj: models.Model, *, rows: Rows | None = None, m2m: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    """The record in the API's words: related records by slug or name, lists in order."""
    rows = rows or Rows()
    data: dict[str, Any] = {}
    for f in obj._meta.concrete_fields:
        if f.name in UNVERSIONED:
            continue
        value = f.value_from_object(obj)
        if f.is_relation and value is not None:
            related = f.related_model
            if related is Group:
                value = Group.objects.filter(pk=value).values_list("name", flat=True).first()
            else:
                value = _slugs(related, [value])[0]  # type: ignore[arg-type]
        data[f.name] = _plain(value)
    if isinstance(obj, Configuration):
        groups = m2m["approver_groups"] if m2m is not None else None
        if groups is None:
            groups = list(obj.approver_groups.values_list("pk", flat=True))
        data["approver_groups"] = sorted(
            Group.objects.filter(pk__in=groups).values_list("name", flat=True)
        )
        delegates = m2m.get("delegates") if m2m is not None else None
        if delegates is None:
            delegates = list(obj.delegates.values_list("pk", flat=True))
        data["delegates"] = sorted(_slugs(Configuration, [int(pk) for pk in delegates]))
        for name, (model, target) in LISTS.items():
            links = sorted(rows.of(obj, model), key=lambda r: (r.position, r.pk))
            data[name] = _slugs(target, [getattr(r, f"{name[:-1]}_id") for r in links])
    if isinstance(obj, McpServer):
        data["tools"] = {
            tool.name: {
                "output_class": tool.output_class,
                "effect": tool.effect,
                "version": tool.version,
            }
            for tool in sorted(rows.of(obj, McpTool), key=lambda t: t.name)
        }
    return data


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} of what differs; against nothing (a creation) every field."""
    return {
        name: [before.get(name), value]
        for name, value in after.items()
        if name not in before or before[name] != value
    }


@dataclass
class Saved:
    obj: models.Model
    changes: dict[str, list[Any]] = field(default_factory=dict)
    change_request: ChangeRequest | None = None


def catalog_save(
    *,
    kind: str,
    pk: int | None,
    user: Any,
    save: Callable[[], models.Model],
    comment: str = "",
    approved: bool = False,
) -> Saved:
    """`save` is the door's own write of the record `pk` (None: a creation). A change is
    a new version numbered one past the last; a widening one is held (GOV-3) unless
    `approved`; a write that changes nothing a version holds records no version."""
    model = KINDS[kind]
    with transaction.atomic():
        current = model.objects.select_for_update().get(pk=pk) if pk else None  # type: ignore[attr-defined]
        before = snapshot(current) if current else {}
        with transaction.atomic():
            obj = save()
            fresh = model.objects.get(pk=obj.pk)  # type: ignore[attr-defined]
            changes = difference(before, snapshot(fresh))
            # The system's own writes (demo data, commands: no user) are never held.
            held = current is not None and user is not None and _held(kind, changes, approved)
            if held:
                # Taken back whole: the record, its lists, the catalog generation.
                transaction.set_rollback(True)
        if current is not None and held:
            request = ChangeRequest.objects.create(
                kind=kind,
                key=key_of(current),
                object_id=current.pk,
                changes=changes,
                base_version=current.version,
                requested_by=user,
            )
            return Saved(current, changes, request)
        if current is not None and not changes:
            return Saved(fresh)  # nothing a version holds changed: no new version
        if current is not None:
            _next_version(fresh, current.version)
        _keep(fresh, user, comment)
    return Saved(fresh, changes)


def _next_version(obj: models.Model, last: int) -> None:
    obj.version = last + 1  # type: ignore[attr-defined]
    type(obj).objects.filter(pk=obj.pk).update(version=obj.version)  # type: ignore[attr-defined]


def _keep(obj: models.Model, user: Any, comment: str) -> None:
    """One revision of `obj` (with what its registration follows), as it is stored now."""
    with reversion.create_revision(atomic=False):
        reversion.set_user(user if getattr(user, "is_authenticated", False) else None)
        reversion.set_comment(comment)
        reversion.add_to_revision(obj)


def catalog_delete(*, kind: str, pk: int, user: Any) -> None:
    """GOV-1: deleting a record is its last version: who, when and its final values (a
    configuration's lists, an MCP server's tools), commented "Deleted by <user>.", kept
    before the row goes (django-reversion keeps a version only of a row that exists; it
    outlives it by `object_id`). Each configuration that loses the record (from its
    snippets, skills, fallbacks or delegates, or as its provider) gets a version too.

    Never held (GOV-3): a deletion only takes away (a source no longer sent, a provider or
    fallback no longer sent to, a delegate, a tool or a webhook no longer there), so it
    neither widens what may leave nor weakens who decides; the same holds for the
    configurations that lose it, whose versions it records with it. A record still in use
    (a configuration with runs, schedules or triggers: PROTECT) raises Django's
    ProtectedError, 409 `conflict` over the API, and nothing is recorded."""
    model = KINDS[kind]
    with transaction.atomic():
        obj = model.objects.select_for_update().filter(pk=pk).first()  # type: ignore[attr-defined]
        if obj is None:
            raise NotFound(f"No {kind} {pk}.")
        # Locked as catalog_save locks the record it versions.
        losing = list(
            Configuration.objects.select_for_update()
            .filter(pk__in=_losing(obj).values("pk"))
            .order_by("pk")
        )
        before = {c.pk: snapshot(c) for c in losing}
        obj.version += 1  # the row goes: only the version kept carries the number
        name = user.get_username() if getattr(user, "is_authenticated", False) else "the system"
        _keep(obj, user, f"{DELETED_BY}{name}.")
        obj.delete()
        for configuration in losing:
            fresh = Configuration.objects.get(pk=configuration.pk)
            if difference(before[fresh.pk], snapshot(fresh)):
                _next_version(fresh, configuration.version)
                _keep(fresh, user, f"{kind.capitalize()} {key_of(obj)} was deleted.")


def _losing(obj: models.Model) -> models.QuerySet[Configuration]:
    """The configurations whose own fields or lists name `obj` (Django unlinks them)."""
    rows = Configuration.objects.all()
    if isinstance(obj, Provider):
        return rows.filter(provider=obj)
    if isinstance(obj, Snippet):
        return rows.filter(configurationsnippet__snippet=obj)
    if isinstance(obj, Skill):
        return rows.filter(configurationskill__skill=obj)
    if isinstance(obj, Configuration):
        named = models.Q(fallback_links__fallback=obj) | models.Q(delegates=obj)
        return rows.filter(named).exclude(pk=obj.pk)
    return rows.none()


def _held(kind: str, changes: dict[str, list[Any]], approved: bool) -> bool:
    return (
        settings.AGENTRUNS_CHANGE_APPROVAL and not approved and bool(widening_fields(kind, changes))
    )


def catalog_history(obj: models.Model) -> list[dict[str, Any]]:
    """GOV-1: newest first, each with what it changed against the one before."""
    return _history(catalog_versions(obj))


def deleted_history(*, kind: str, by: str, key: str) -> list[dict[str, Any]]:
    """GOV-1: the versions of a deleted record, by the key it was addressed by (`by`:
    "slug", or "pk") when it was deleted; by slug, the one deleted last. Empty when no
    such record was deleted."""
    model = KINDS[kind]
    gone = Version.objects.get_deleted(model).order_by("-pk")
    if by == "slug":
        # The serialised field narrows the rows to read; each one's slug then decides.
        named = gone.filter(serialized_data__contains=f'"slug": {json.dumps(key)}')
        last = next((v for v in named if v.field_dict.get("slug") == key), None)
    else:
        last = gone.filter(object_id=key).first()
    if last is None:
        return []
    versions = Version.objects.get_for_object_reference(model, last.object_id)
    return _history(list(versions.select_related("revision__user")))


# The admin's list of deleted records shows at most this many, newest deletion first.
DELETED_LISTED = 200


def deleted_records(*, kind: str) -> list[dict[str, Any]]:
    """GOV-1: the records of a kind that are gone, newest first, each with its id, the key
    its last version kept, and who deleted it when. A row removed without a door (the
    shell, SQL) has no deletion version: its "when" and "by" are None."""
    gone = (
        Version.objects.get_deleted(KINDS[kind])
        .select_related("revision__user")
        .order_by("-pk")[:DELETED_LISTED]
    )
    rows = []
    for version in gone:
        recorded = version.revision.comment.startswith(DELETED_BY)
        user = version.revision.user
        rows.append(
            {
                "id": int(version.object_id),
                "key": str(version.field_dict.get("slug") or version.object_id),
                "deleted_at": version.revision.date_created if recorded else None,
                "deleted_by": (user.get_username() if user else None) if recorded else None,
            }
        )
    return rows


def _history(versions: list[Version]) -> list[dict[str, Any]]:
    snapshots = [version_snapshot(v) for v in versions]
    rows = []
    for i, version in enumerate(versions):
        before = snapshots[i + 1] if i + 1 < len(snapshots) else {}
        if version.revision.comment.startswith(DELETED_BY):
            # Each field's final value, gone; no diff (nothing is left to compare to).
            changes = {name: [value, None] for name, value in snapshots[i].items()}
            changes[DELETED] = [False, True]
        else:
            changes = difference(before, snapshots[i])
        user = version.revision.user
        rows.append(
            {
                "version": version.field_dict.get("version"),
                "changed_by": user.get_username() if user else None,
                "changed_at": version.revision.date_created,
                "comment": version.revision.comment,
                "changes": changes,
                "diffs": text_diffs(changes),
            }
        )
    return rows


def text_diffs(changes: dict[str, list[Any]]) -> dict[str, str]:
    """A unified diff of each text field longer than DIFF_OVER characters on either side."""
    diffs = {}
    for name, (old, new) in changes.items():
        if isinstance(new, str) and max(len(old or ""), len(new)) > DIFF_OVER:
            lines = difflib.unified_diff(
                (old or "").splitlines(), new.splitlines(), "before", "after", lineterm=""
            )
            diffs[name] = "\n".join(lines)
    return diffs


# Rollback (GOV-1): a version's rows written back, as a new version.


def catalog_versions(obj: models.Model) -> list[Version]:
    """The record's versions, newest first."""
    return list(Version.objects.get_for_object(obj).select_related("revision__user"))


def version_snapshot(version: Version) -> dict[str, Any]:
    kept = version._object_version  # the deserialized record and its many-to-many ids
    through = [v._object_version.object for v in version.revision.version_set.all()]
    return snapshot(kept.object, rows=Rows(through), m2m=kept.m2m_data)


def catalog_rollback(*, obj: models.Model, number: int, user: Any) -> Saved:
    """Write version `number` back (with a configuration's lists, an MCP server's pinned
    tools), removing rows added since; it becomes a new version, held like any change."""
    version = next(
        (v for v in catalog_versions(obj) if v.field_dict.get("version") == number), None
    )
    if version is None:
        raise NotFound(f"{key_of(obj)} has no version {number}.")

    def revert() -> models.Model:
        version.revision.revert(delete=True)
        return obj

    return catalog_save(
        kind=kind_of(obj),
        pk=obj.pk,
        user=user,
        save=revert,
        comment=f"Rolled back to version {number}.",
    )


# Change requests (GOV-3).


def _apply(obj: models.Model, values: dict[str, Any]) -> models.Model:
    """Write `values` (the API's words, as `snapshot` gives them) onto the record."""
    lists: dict[str, list[int]] = {}
    groups = values.get("approver_groups")
    tools = values.get("tools")
    delegates = values.get("delegates")
    for name, value in values.items():
        if name in LISTS:
            target = LISTS[name][1]
            found = dict(target.objects.filter(slug__in=value).values_list("slug", "pk"))  # type: ignore[attr-defined]
            lists[f"{name[:-1]}_ids"] = [found[slug] for slug in value if slug in found]
        elif name not in ("approver_groups", "tools", "delegates"):
            f = obj._meta.get_field(name)
            assert isinstance(f, models.Field)
            if f.is_relation:
                attr = "name" if f.related_model is Group else "slug"
                related = f.related_model.objects.filter(**{attr: value}).first() if value else None  # type: ignore[union-attr]
                setattr(obj, name, related)
            else:
                setattr(obj, f.attname, f.to_python(value))
    obj.save()
    if isinstance(obj, Configuration):
        if lists:
            configuration_set_sources(configuration=obj, **lists)
        if groups is not None:
            obj.approver_groups.set(Group.objects.filter(name__in=groups))
        if delegates is not None:
            obj.delegates.set(Configuration.objects.filter(slug__in=delegates))
    if isinstance(obj, McpServer) and tools is not None:
        for name, declared in tools.items():
            McpTool.objects.filter(server=obj, name=name).update(
                output_class=declared.get("output_class", ""), effect=declared.get("effect", "")
            )
    return obj


def change_request_approve(*, request_id: int, user: Any) -> ChangeRequest:
    """Another holder of approve_change puts the held change in force, as its requester's
    new version (the approver named in its comment)."""
    with transaction.atomic():
        request = _pending(request_id, user)
        model = KINDS[request.kind]
        obj = model.objects.select_for_update().filter(pk=request.object_id).first()  # type: ignore[attr-defined]
        if obj is None:
            raise Conflict("The record was deleted since the change was requested.")
        if obj.version != request.base_version:
            raise Conflict(
                f"{request.key} changed since (now version {obj.version}, the request was "
                f"made against version {request.base_version}); request it again."
            )
        values = {name: pair[1] for name, pair in request.changes.items()}
        catalog_save(
            kind=request.kind,
            pk=obj.pk,
            user=request.requested_by,
            save=lambda: _apply(obj, values),
            comment=f"Change request #{request.pk}, approved by {user.get_username()}.",
            approved=True,
        )
        return _decide(request, user, ChangeRequest.Status.APPROVED)


def change_request_reject(*, request_id: int, user: Any) -> ChangeRequest:
    with transaction.atomic():
        return _decide(_pending(request_id, user), user, ChangeRequest.Status.REJECTED)


def _pending(request_id: int, user: Any) -> ChangeRequest:
    if not user.has_perm("agentruns.approve_change"):
        raise NotPermitted("Deciding a change request needs agentruns.approve_change.")
    request = ChangeRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise NotFound("No such change request.")
    if request.status != ChangeRequest.Status.PENDING:
        raise Conflict(f"The change request is already {request.status}.")
    if request.requested_by_id == user.pk:
        raise OwnChangeRequest("A change is approved by someone other than its requester.")
    return request


def _decide(request: ChangeRequest, user: Any, status: str) -> ChangeRequest:
    updated = ChangeRequest.objects.filter(
        pk=request.pk, status=ChangeRequest.Status.PENDING
    ).update(status=status, decided_by=user, decided_at=timezone.now())
    if not updated:
        raise Conflict("The change request was decided meanwhile.")
    request.refresh_from_db()
    return request
