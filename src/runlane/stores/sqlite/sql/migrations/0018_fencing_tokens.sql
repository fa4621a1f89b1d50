-- runlane schema for SQLite: fencing tokens (the PostgreSQL migration of the same name does the
-- same).
--
-- Every claim that leases a run takes its next fence; a step record keeps the fence of the
-- execution that made it, so a worker's result carrying an older fence than its record's is
-- dropped.
ALTER TABLE runs ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN fence INTEGER;
