-- runlane schema for SQLite, version 2: remote steps.
-- How many times the current attempt of a remote step was sent (re-sends of a lost dispatch).
ALTER TABLE steps ADD COLUMN dispatches INTEGER NOT NULL DEFAULT 0;
