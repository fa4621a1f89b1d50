-- runlane schema for SQLite, version 15: run control (PostgreSQL's migration 0018 does the same).
--
-- A pause asked of a leased run takes effect at its turn's next write (``pause_requested_at``);
-- a paused run is ``paused``, an active status. A fork records the run and the position it was
-- forked from. A detached child is left running when its parent is cancelled.
ALTER TABLE runs ADD COLUMN pause_requested_at TEXT;
ALTER TABLE runs ADD COLUMN forked_from TEXT;  -- [run id, seq], JSON
ALTER TABLE runs ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
