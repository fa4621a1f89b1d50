-- runlane schema for PostgreSQL, version 12: the retention index again, for databases that
-- applied version 8 while it was still a placeholder (`SELECT 1`) on the development branch.
-- A no-op everywhere else (SQLite's migration 0011 does the same).
CREATE INDEX IF NOT EXISTS runlane_runs_terminal ON runlane_runs (status, updated_at)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
