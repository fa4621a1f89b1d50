-- runlane schema for SQLite, version 13: when a release woke a singleton waiter (PostgreSQL's
-- migration 0014 does the same).

-- The instant a settlement freed a slot of the run's key and woke the run for it; the claim
-- that admits the run reads it (runlane_handoff_seconds, on whichever engine that is) and
-- clears it.
ALTER TABLE runs ADD COLUMN handoff_at TEXT;
