"""The projection's PostgreSQL schema: column types, the versioned migrations, and applying
them.

Migrations are recorded in ``schema_migrations`` and run under a transaction-level advisory
lock, so applying them is safe twice and from several processes at once.
"""

from __future__ import annotations

import contextlib

import asyncpg

from projections.row import COLUMN_KINDS, STORED_COLUMNS, ColumnKind

__all__ = [
    "BODY_AS_JSON",
    "MIGRATIONS",
    "ROW_COLUMNS",
    "ROW_TYPES",
    "SCHEMA_VERSION",
    "create_schema",
    "migrate",
]

_TYPE_OF_KIND: dict[ColumnKind, str] = {
    "text": "text",
    "integer": "bigint",
    "timestamp": "timestamptz",
    "boolean": "boolean",
    "uuid": "uuid",
}
ROW_TYPES: dict[str, str] = {c: _TYPE_OF_KIND[kind] for c, kind in COLUMN_KINDS.items()}
ROW_COLUMNS: tuple[str, ...] = STORED_COLUMNS

# A migration is history: its SQL is never edited once released (a test checks that the
# migrated table has exactly ROW_TYPES).
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE audits (
    audit_id text COLLATE "C" PRIMARY KEY,
    project_id text, organization_id text, started_by_user_id text, start_url text,
    workflow_instance_id text, status text COLLATE "C" NOT NULL, current_phase text,
    pages_crawled bigint, pages_total bigint,
    started_at timestamptz, completed_at timestamptz,
    error_code text, error_detail text, failed_phase text, failed_by text, reconciled_by text,
    last_observed_status text, last_observed_at timestamptz, instance_ended_at timestamptz,
    overturned boolean NOT NULL DEFAULT false,
    version bigint NOT NULL,
    last_event_id uuid,
    updated_at timestamptz
) WITH (fillfactor = 80);  -- room on each page for HOT updates: a row changes many times
-- The watchdog: status = 'running' AND started_at < $1
--   ORDER BY last_observed_at NULLS FIRST, started_at, audit_id LIMIT $2
CREATE INDEX audits_watchdog ON audits (last_observed_at NULLS FIRST, started_at, audit_id)
    WHERE status = 'running';
CREATE INDEX audits_listing ON audits (status, started_at, audit_id);
CREATE INDEX audits_started ON audits (started_at, audit_id);
CREATE TABLE audit_events (
    seq bigserial PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    audit_id text COLLATE "C" NOT NULL,
    type text NOT NULL,
    occurred_at timestamptz NOT NULL,
    causation_id uuid,
    topic text, partition integer, "offset" bigint,
    body jsonb NOT NULL,
    recorded_at timestamptz NOT NULL
);
CREATE INDEX audit_events_audit ON audit_events (audit_id, seq);
CREATE INDEX audit_events_causation ON audit_events (causation_id)
    WHERE causation_id IS NOT NULL;
CREATE TABLE projector_offsets (
    consumer text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE processes (
    process text NOT NULL, component text NOT NULL, last_seen timestamptz NOT NULL,
    PRIMARY KEY (process, component)
);
CREATE TABLE telemetry_sent (event_id uuid PRIMARY KEY, sent_at timestamptz NOT NULL);
""",
    ),
    (
        2,
        """
-- Periodic jobs claimed once per interval slot across processes.
CREATE TABLE ticks (
    name text NOT NULL, slot bigint NOT NULL, owner text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, slot)
);
-- The Workflows API's request budget and 429 pause, shared by every probing process.
CREATE TABLE api_requests (account text NOT NULL, sent_at timestamptz NOT NULL);
CREATE INDEX api_requests_window ON api_requests (account, sent_at);
CREATE TABLE api_pauses (account text PRIMARY KEY, until timestamptz NOT NULL);
""",
    ),
    (
        3,
        """
-- The mass-failure brake: the decision an audit has held, sweeps awaiting a verdict, the brake.
ALTER TABLE audits ADD COLUMN held_decision_id text, ADD COLUMN held_at timestamptz;
CREATE INDEX audits_held ON audits (held_at, audit_id) WHERE held_decision_id IS NOT NULL;
CREATE TABLE sweeps (
    sweep_id text PRIMARY KEY, requests text[] NOT NULL, at timestamptz NOT NULL,
    deadline timestamptz NOT NULL, claimed_by text, claimed_until timestamptz, verdict text,
    lost integer, observations integer, judged_at timestamptz
);
CREATE INDEX sweeps_open ON sweeps (at) WHERE verdict IS NULL;
CREATE TABLE brake (
    name text PRIMARY KEY, engaged boolean NOT NULL, since timestamptz, sweep_id text,
    lost integer NOT NULL DEFAULT 0, observations integer NOT NULL DEFAULT 0,
    ended_at timestamptz, ended_by text, how text
);
-- Checkpoints of stateful consumers (reconciler, telemetry): a partition's state and offset.
CREATE TABLE checkpoints (
    consumer text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
    next_offset bigint NOT NULL, state bytea NOT NULL, saved_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
""",
    ),
    (
        4,
        """
-- The history's body as json: stored as written (PostgreSQL checks its syntax), where jsonb
-- parsed and rebuilt every body, a third of the server's work per event; nothing queries
-- inside it. A history already past a million events keeps jsonb (rewriting it would lock
-- audit_events for minutes): the store writes either; a rebuild, which empties it, converts it.
DO $$
BEGIN
    IF (SELECT count(*) FROM (SELECT FROM audit_events LIMIT 1000001) AS kept) <= 1000000 THEN
        ALTER TABLE audit_events ALTER COLUMN body TYPE json;
    END IF;
END $$;
""",
    ),
    (
        5,
        """
-- The history's key is event_id alone (unique, not null). Nothing looks an event up by seq,
-- which only orders an audit's history (audit_events_audit); its own unique index cost every
-- recorded event a second b-tree insert (about 13 % of the server's CPU per event projected,
-- bench/pipeline.py). Logical replication identifies a row by event_id.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_pkey;
ALTER TABLE audit_events REPLICA IDENTITY USING INDEX audit_events_event_id_key;
""",
    ),
    (
        6,
        """
-- Who spent each request of the Workflows API budget, so a spender's share (the status reads')
-- is capped in the same locked step that takes a slot.
ALTER TABLE api_requests ADD COLUMN spender text NOT NULL DEFAULT 'other';
""",
    ),
    (
        7,
        """
-- The history's key is the idempotency key (audit_id, event_id): an event id names one event
-- of its audit, and the same id under another audit is another event. The index leads with
-- event_id, so a look-up by id alone still uses it. Every existing row keeps its place (an
-- event_id unique alone is unique with its audit); the new index is built before the old
-- one goes, so the history is never without a key. The index is built first on its own
-- (reads go on meanwhile; writes wait), then made the constraint in a moment.
CREATE UNIQUE INDEX audit_events_event_audit_key ON audit_events (event_id, audit_id);
ALTER TABLE audit_events
    ADD CONSTRAINT audit_events_event_audit_key UNIQUE USING INDEX audit_events_event_audit_key;
ALTER TABLE audit_events REPLICA IDENTITY USING INDEX audit_events_event_audit_key;
ALTER TABLE audit_events DROP CONSTRAINT audit_events_event_id_key;
""",
    ),
    (
        8,
        """
-- The console's session generation per token name: a logout moves it on, and every replica
-- refuses the sessions of an older one.
CREATE TABLE console_sessions (
    name text PRIMARY KEY, generation bigint NOT NULL, ended_at timestamptz NOT NULL
);
""",
    ),
    (
        9,
        """
-- The event subscription finds the audit an instance's message is about by its instance id.
CREATE INDEX audits_instance ON audits (workflow_instance_id)
    WHERE workflow_instance_id IS NOT NULL;
""",
    ),
    (
        10,
        """
-- The outcome feed: the endpoints it delivers to, and the entries it could not deliver, parked
-- (in seq order, an audit's entries in its order) until an operator asks for their retry.
CREATE TABLE outcome_endpoints (
    endpoint text PRIMARY KEY, target text NOT NULL, registered_at timestamptz NOT NULL
);
CREATE TABLE outcome_parked (
    seq bigserial PRIMARY KEY,
    endpoint text NOT NULL, outcome_id text NOT NULL, audit_id text COLLATE "C" NOT NULL,
    partition integer NOT NULL, body text NOT NULL, attempts integer NOT NULL,
    error text NOT NULL, parked_at timestamptz NOT NULL,
    retry_requested_at timestamptz, retry_requested_by text,
    UNIQUE (endpoint, outcome_id)
);
CREATE INDEX outcome_parked_partition ON outcome_parked (endpoint, partition, seq);
CREATE INDEX outcome_parked_audit ON outcome_parked (endpoint, audit_id, seq);
""",
    ),
    (
        11,
        """
-- A failure's time is failed_at; completed_at is a completion's alone. A failed audit's
-- completed_at held its failure's time: it moves to failed_at, and completed_at is cleared.
ALTER TABLE audits ADD COLUMN failed_at timestamptz;
UPDATE audits SET failed_at = completed_at, completed_at = NULL WHERE status = 'failed';
""",
    ),
    (
        12,
        """
-- The audits list's search: a project id exactly, a start URL by its beginning (a range in
-- byte order, so the index is COLLATE "C"); audit ids and instance ids have theirs already.
CREATE INDEX audits_project ON audits (project_id) WHERE project_id IS NOT NULL;
CREATE INDEX audits_url ON audits (start_url COLLATE "C") WHERE start_url IS NOT NULL;
""",
    ),
    (
        13,
        """
-- An audit's workflow (NULL: the default one), its latest progress (a stall is judged on it),
-- a stall verdict's time and a termination asked for it.
ALTER TABLE audits ADD COLUMN workflow text, ADD COLUMN progress_event_id text,
    ADD COLUMN stalled_at timestamptz, ADD COLUMN termination_requested_at timestamptz,
    ADD COLUMN held_rule text;
CREATE INDEX audits_workflow ON audits (workflow) WHERE workflow IS NOT NULL;
CREATE INDEX audits_stalled ON audits (stalled_at) WHERE stalled_at IS NOT NULL;
""",
    ),
    (
        14,
        """
-- Orphans: the workflows watched (since when: older instances are never orphans), the
-- instances of them no audit holds, and each one's append-only history.
CREATE TABLE watched_workflows (workflow text PRIMARY KEY, since timestamptz NOT NULL);
CREATE TABLE orphans (
    seq bigserial PRIMARY KEY,
    workflow text NOT NULL, instance_id text NOT NULL,
    created_on timestamptz NOT NULL, status text NOT NULL,
    first_seen timestamptz NOT NULL, last_seen timestamptz NOT NULL,
    state text NOT NULL,
    terminated_at timestamptz, terminated_by text, on_behalf_of text, result text,
    UNIQUE (workflow, instance_id)
);
CREATE INDEX orphans_open ON orphans (workflow, seq) WHERE state = 'open';
CREATE TABLE orphan_history (
    seq bigserial PRIMARY KEY,
    workflow text NOT NULL, instance_id text NOT NULL, at timestamptz NOT NULL,
    kind text NOT NULL, actor text, on_behalf_of text, detail text
);
CREATE INDEX orphan_history_instance ON orphan_history (workflow, instance_id, seq);
""",
    ),
)
# What a rebuild runs once it has emptied audit_events (kept as jsonb by migration 4).
BODY_AS_JSON = (
    "DO $$ BEGIN IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'audit_events'::regclass "
    "AND attname = 'body') = 'jsonb'::regtype THEN "
    "ALTER TABLE audit_events ALTER COLUMN body TYPE json; END IF; END $$"
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


async def create_schema(conn: asyncpg.Connection, schema: str) -> None:
    """Outside the migration's transaction: a transaction that waited for the advisory
    lock may still see the catalog as before the lock (no invalidations are processed
    on taking an advisory lock), and with a missing schema that means a duplicate."""
    exists = await conn.fetchval("SELECT true FROM pg_namespace WHERE nspname = $1", schema)
    if exists:
        return  # no CREATE privilege on the database needed
    with contextlib.suppress(asyncpg.UniqueViolationError, asyncpg.DuplicateSchemaError):
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


async def migrate(conn: asyncpg.Connection, lock_key: int) -> int:
    """Apply the missing migrations, in a transaction the caller opened, under the advisory
    lock ``lock_key``; return the schema version."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key)
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version integer PRIMARY KEY, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
    for version, ddl in MIGRATIONS:
        if version > current:
            await conn.execute(ddl)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            current = version
    return int(current)
