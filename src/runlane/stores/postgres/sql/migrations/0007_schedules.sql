-- Schedules: each one's definition (runlane.schedules.Schedule as JSON), the next window to
-- fire and when (the window plus its jitter), and its last fire.
CREATE TABLE runlane_schedules (
    id text COLLATE "C" PRIMARY KEY,
    definition json NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    next_window_at timestamptz,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    last_run_id text,
    last_error json,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- The firing pass: the due schedules, earliest first, in one indexed query.
CREATE INDEX runlane_schedules_due ON runlane_schedules (next_fire_at) WHERE NOT paused;
