-- runlane schema for PostgreSQL, version 1.
-- Timestamps are timestamptz (the engine's clock, UTC). JSON values are `json`, not `jsonb`:
-- `json` keeps the text as written, so object key order and "\u0000" survive a round trip and a
-- replayed step result iterates exactly like the first execution's.

CREATE TABLE runlane_schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Ids sort by code point (COLLATE "C"), as everywhere else in runlane: FIFO ties between runs
-- created at the same instant break by id, identically on every store and every server locale.
CREATE TABLE runlane_runs (
    id text COLLATE "C" PRIMARY KEY,
    workflow text NOT NULL,
    version text NOT NULL,
    status text NOT NULL,
    input json,
    output json,
    error json,
    tags text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    wake_at timestamptz,
    parent_id text COLLATE "C",
    namespace text,
    priority integer NOT NULL DEFAULT 0,
    singleton_key text,
    singleton_limit integer,
    holds_slot boolean NOT NULL DEFAULT false,
    concurrency_key text,
    lease_owner text,
    lease_expires_at timestamptz,
    deadline_at timestamptz,
    recoveries integer NOT NULL DEFAULT 0,
    wake_requested_at timestamptz
);

-- The partial indexes below only hold the rows their query can return, so they stay small
-- however many finished runs the table keeps.

-- Pending pickup: highest priority first, then oldest (created_at, id).
CREATE INDEX runlane_runs_pickup ON runlane_runs (priority DESC, created_at, id)
    WHERE status = 'pending';
-- Due timers of suspended/blocked runs, most overdue first.
CREATE INDEX runlane_runs_due ON runlane_runs (wake_at, id)
    WHERE status IN ('suspended', 'blocked');
-- Expired leases of running/cancelling runs.
CREATE INDEX runlane_runs_leases ON runlane_runs (lease_expires_at, id)
    WHERE status IN ('running', 'cancelling');
-- Execution timeouts of active runs.
CREATE INDEX runlane_runs_deadlines ON runlane_runs (deadline_at, id)
    WHERE deadline_at IS NOT NULL
      AND status IN ('pending', 'running', 'suspended', 'blocked', 'cancelling');
-- Singleton admission: a key's active runs in FIFO order.
CREATE INDEX runlane_runs_singleton ON runlane_runs (singleton_key, created_at, id)
    WHERE singleton_key IS NOT NULL
      AND status IN ('pending', 'running', 'suspended', 'blocked', 'cancelling');
-- Quota counting: a key's runs by status (the counted statuses are per gate).
CREATE INDEX runlane_runs_quota ON runlane_runs (concurrency_key, status)
    WHERE concurrency_key IS NOT NULL;
-- Children of a run (cascading cancel, listing), newest first.
CREATE INDEX runlane_runs_children ON runlane_runs (parent_id, created_at DESC, id DESC)
    WHERE parent_id IS NOT NULL;
-- Listing, newest first.
CREATE INDEX runlane_runs_newest ON runlane_runs (created_at DESC, id DESC);
CREATE INDEX runlane_runs_workflow_newest ON runlane_runs (workflow, created_at DESC, id DESC);

CREATE TABLE runlane_steps (
    run_id text COLLATE "C" NOT NULL REFERENCES runlane_runs (id) ON DELETE CASCADE,
    seq integer NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    input json,
    output json,
    error json,
    attempts integer NOT NULL DEFAULT 0,
    started_at timestamptz,
    finished_at timestamptz,
    last_heartbeat_at timestamptz,
    wake_at timestamptz,
    PRIMARY KEY (run_id, seq)
);

-- Runs waiting for a signal or an event of a name.
CREATE INDEX runlane_steps_waiting ON runlane_steps (kind, name) WHERE status = 'pending';

CREATE TABLE runlane_signals (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL REFERENCES runlane_runs (id) ON DELETE CASCADE,
    name text NOT NULL,
    payload json,
    created_at timestamptz NOT NULL
);

CREATE INDEX runlane_signals_run ON runlane_signals (run_id, id);

CREATE TABLE runlane_events (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text UNIQUE,
    name text NOT NULL,
    payload json,
    created_at timestamptz NOT NULL
);

CREATE INDEX runlane_events_name ON runlane_events (name, seq);
