-- runlane schema for PostgreSQL, version 14: when a release woke a singleton waiter (SQLite's
-- migration 0013 does the same).

-- The instant a settlement freed a slot of the run's key and woke the run for it; the claim
-- that admits the run reads it (runlane_handoff_seconds, on whichever engine that is) and
-- clears it.
ALTER TABLE runlane_runs ADD COLUMN handoff_at timestamptz;
