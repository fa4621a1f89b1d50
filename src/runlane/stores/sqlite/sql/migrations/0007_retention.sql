-- runlane schema for SQLite, version 7: retention (PostgreSQL's migration 0008 does the same).

-- A prune walks the settled runs of each terminal status, least recently updated first; the
-- index holds those runs only, so the hot paths' writes to active runs never touch it.
CREATE INDEX runs_terminal ON runs (status, updated_at)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
