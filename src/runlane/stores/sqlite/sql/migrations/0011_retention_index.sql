-- runlane schema for SQLite, version 11: the retention index again, for databases that applied
-- version 7 while it was still a placeholder (`SELECT 1`) on the development branch. A no-op
-- everywhere else (PostgreSQL's migration 0012 does the same).
CREATE INDEX IF NOT EXISTS runs_terminal ON runs (status, updated_at)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
