-- runlane schema for SQLite, version 1.
-- Timestamps are ISO-8601 UTC text with microseconds ("2026-01-01T00:00:00.000000+00:00"):
-- fixed width, so text order is time order. JSON values are text.

CREATE TABLE schema_version (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT,
    output TEXT,
    error TEXT,
    tags TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    wake_at TEXT,
    parent_id TEXT,
    namespace TEXT,
    priority INTEGER NOT NULL DEFAULT 0,
    singleton_key TEXT,
    singleton_limit INTEGER,
    holds_slot INTEGER NOT NULL DEFAULT 0,
    concurrency_key TEXT,
    lease_owner TEXT,
    lease_expires_at TEXT,
    deadline_at TEXT,
    recoveries INTEGER NOT NULL DEFAULT 0,
    wake_requested_at TEXT
);

-- Pending pickup: highest priority first, then oldest (created_at, id).
CREATE INDEX runs_pickup ON runs (status, priority DESC, created_at, id);
-- Due timers of suspended/blocked runs.
CREATE INDEX runs_wake_at ON runs (wake_at) WHERE wake_at IS NOT NULL;
-- Expired leases of running/cancelling runs.
CREATE INDEX runs_lease_expires_at ON runs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
-- Execution timeouts.
CREATE INDEX runs_deadline_at ON runs (deadline_at) WHERE deadline_at IS NOT NULL;
-- Singleton admission: a key's runs in FIFO order.
CREATE INDEX runs_singleton ON runs (singleton_key, created_at, id) WHERE singleton_key IS NOT NULL;
-- Quota counting.
CREATE INDEX runs_concurrency ON runs (concurrency_key, status) WHERE concurrency_key IS NOT NULL;
-- Children of a run (cascading cancel, listing).
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
-- Listing, newest first.
CREATE INDEX runs_newest ON runs (created_at DESC, id DESC);
CREATE INDEX runs_workflow_newest ON runs (workflow, created_at DESC, id DESC);

CREATE TABLE steps (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT,
    output TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at TEXT,
    finished_at TEXT,
    last_heartbeat_at TEXT,
    wake_at TEXT,
    PRIMARY KEY (run_id, seq)
);

-- Runs waiting for a signal or an event of a name.
CREATE INDEX steps_waiting ON steps (kind, name) WHERE status = 'pending';

-- AUTOINCREMENT: consumed signals are deleted, and an id must never be handed out twice.
CREATE TABLE signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (id),
    name TEXT NOT NULL,
    payload TEXT,
    created_at TEXT NOT NULL
);

CREATE INDEX signals_run ON signals (run_id, id);

CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    name TEXT NOT NULL,
    payload TEXT,
    created_at TEXT NOT NULL
);

CREATE INDEX events_name ON events (name, seq);
