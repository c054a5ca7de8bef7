"""The PostgreSQL SQL of the operating rows the loop's step statement and the services'
appends write beside the log (OPS-1 the day's token counters, OPS-4 the webhook outbox).
Their portable twins live on the models (`DailyUsage.add`, `Webhook.wants`,
`WebhookDelivery.rows_for`); a change to a rule changes both."""

from __future__ import annotations

from typing import Any

from agentruns.models.ops import DailyUsage, Webhook, WebhookDelivery

# OPS-1: the loop's upsert of its run's shard inside its step statement, behind the step's
# fence, and the day's new total: that shard as upserted plus the others as the statement's
# snapshot has them (never waiting on their locks).
USAGE_UPSERT = (
    f"INSERT INTO {DailyUsage._meta.db_table} "
    "(configuration_id, day, shard, input_tokens, output_tokens) "
    "SELECT %s, %s::date, %s, %s, %s WHERE EXISTS (SELECT 1 FROM fence) "
    "ON CONFLICT (configuration_id, day, shard) DO UPDATE SET "
    f"input_tokens = {DailyUsage._meta.db_table}.input_tokens + EXCLUDED.input_tokens, "
    f"output_tokens = {DailyUsage._meta.db_table}.output_tokens + EXCLUDED.output_tokens "
    "RETURNING input_tokens + output_tokens AS mine"
)
USAGE_USED = (
    "(SELECT mine FROM du) + (SELECT coalesce(sum(input_tokens + output_tokens), 0) "
    f"FROM {DailyUsage._meta.db_table} WHERE configuration_id = %s AND day = %s::date "
    "AND shard <> %s)"
)


def usage_params(
    configuration_id: int, run_id: int, input_tokens: int, output_tokens: int
) -> tuple[list[Any], list[Any]]:
    """(USAGE_UPSERT's parameters, USAGE_USED's)."""
    day, shard = DailyUsage.today(), run_id % DailyUsage.SHARDS
    return (
        [configuration_id, day, shard, input_tokens, output_tokens],
        [configuration_id, day, shard],
    )


# OPS-4: `Webhook.wants` as an SQL predicate, given the event type as `event_type`.
WEBHOOK_MATCH = "w.active AND (w.events = '[]'::jsonb OR w.events ? event_type)"

# The columns a source relation gives `delivery_insert`, in this order.
SOURCE_COLUMNS = ("event_type", "run_id", "thread_id", "sequence", "payload", "created_at")


def delivery_insert(source: str) -> str:
    """INSERT one delivery per (matching active webhook, event of `source`), a relation
    with SOURCE_COLUMNS: the one statement the services' appends and the loop's step write
    share. With no webhook it is a join against an empty table."""
    return (
        f"INSERT INTO {WebhookDelivery._meta.db_table} (webhook_id, delivery_id, event_type, "
        "run_id, thread_id, sequence, payload, event_created_at, status, attempts, "
        "next_attempt_at, last_error, created_at, withheld) "
        "SELECT w.id, gen_random_uuid(), e.event_type, e.run_id, e.thread_id, e.sequence, "
        f"e.payload, e.created_at, '{WebhookDelivery.Status.PENDING.value}', 0, now(), '', "
        f"now(), '[]'::jsonb FROM {source} JOIN {Webhook._meta.db_table} w ON {WEBHOOK_MATCH}"
    )
