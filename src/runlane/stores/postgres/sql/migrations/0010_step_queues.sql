-- runlane schema for PostgreSQL, version 10: step queues (SQLite's migration 0009 does the same).

-- The run has entered a step queue: its settlement releases its entries.
ALTER TABLE runlane_runs ADD COLUMN queued boolean NOT NULL DEFAULT false;

-- A registered queue: its settings (the last registration's), its fixed rate window and the
-- count of its admissions so far (``served``: fairness keys remember their last one). Its row
-- is locked by each admission, so the admissions of one queue are decided one at a time.
CREATE TABLE runlane_queues (
    name text COLLATE "C" PRIMARY KEY,
    concurrency integer,
    rate_limit integer,
    rate_period double precision,
    fairness text NOT NULL,
    arrival text NOT NULL,
    window_start timestamptz,
    window_count integer NOT NULL DEFAULT 0,
    served bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);

-- A step waiting for admission (admitted_at NULL) or holding a slot. The id is its arrival.
CREATE TABLE runlane_queue_entries (
    id bigserial PRIMARY KEY,
    queue text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL REFERENCES runlane_runs (id) ON DELETE CASCADE,
    seq integer NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    fairness_key text COLLATE "C" NOT NULL,
    admitted_at timestamptz,
    denials integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    UNIQUE (run_id, seq)
);
-- The waiters of a queue in order (priority first; fairness and arrival refine it).
CREATE INDEX runlane_queue_entries_waiting ON runlane_queue_entries (queue, priority DESC, id)
    WHERE admitted_at IS NULL;
-- The slots held in a queue.
CREATE INDEX runlane_queue_entries_holding ON runlane_queue_entries (queue)
    WHERE admitted_at IS NOT NULL;

-- When each fairness key of a queue was last served (the queue's ``served`` count then).
CREATE TABLE runlane_queue_keys (
    queue text COLLATE "C" NOT NULL,
    fairness_key text COLLATE "C" NOT NULL,
    served bigint NOT NULL,
    PRIMARY KEY (queue, fairness_key)
);
