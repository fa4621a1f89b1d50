-- runlane schema for PostgreSQL, version 8: retention (SQLite's migration 0007 does the same).

-- A prune walks the settled runs of each terminal status, least recently updated first; the
-- index holds those runs only, so the hot paths' writes to active runs never touch it (a run
-- enters it once, when it settles).
CREATE INDEX runlane_runs_terminal ON runlane_runs (status, updated_at)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed');
