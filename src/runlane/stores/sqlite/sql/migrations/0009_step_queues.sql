-- runlane schema for SQLite, version 9: step queues (PostgreSQL's migration 0010 does the same).

-- The run has entered a step queue: its settlement releases its entries.
ALTER TABLE runs ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;

-- A registered queue: its settings (the last registration's), its fixed rate window and the
-- count of its admissions so far (``served``: fairness keys remember their last one).
CREATE TABLE step_queues (
    name TEXT PRIMARY KEY,
    concurrency INTEGER,
    rate_limit INTEGER,
    rate_period REAL,
    fairness TEXT NOT NULL,
    arrival TEXT NOT NULL,
    window_start TEXT,
    window_count INTEGER NOT NULL DEFAULT 0,
    served INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);

-- A step waiting for admission (admitted_at NULL) or holding a slot. The id is its arrival.
CREATE TABLE queue_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    run_id TEXT NOT NULL,  -- a settled run's entries are deleted by its settlement
    seq INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    fairness_key TEXT NOT NULL,
    admitted_at TEXT,
    denials INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, seq)
);
-- The waiters of a queue in order (priority first; fairness and arrival refine it).
CREATE INDEX queue_entries_waiting ON queue_entries (queue, priority DESC, id)
    WHERE admitted_at IS NULL;
-- The slots held in a queue.
CREATE INDEX queue_entries_holding ON queue_entries (queue) WHERE admitted_at IS NOT NULL;

-- When each fairness key of a queue was last served (the queue's ``served`` count then).
CREATE TABLE queue_keys (
    queue TEXT NOT NULL,
    fairness_key TEXT NOT NULL,
    served INTEGER NOT NULL,
    PRIMARY KEY (queue, fairness_key)
);
