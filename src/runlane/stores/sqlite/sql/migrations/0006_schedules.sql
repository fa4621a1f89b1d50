-- runlane schema for SQLite, version 6: schedules (PostgreSQL's migration 0007 does the same).
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    next_window_at TEXT,
    next_fire_at TEXT,
    last_fire_at TEXT,
    last_run_id TEXT,
    last_error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- The firing pass: the due schedules, earliest first, in one indexed query.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused;
