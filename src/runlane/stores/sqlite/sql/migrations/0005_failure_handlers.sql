-- runlane schema for SQLite, version 5: a run's terminal failures (failed or dead) so far,
-- kept across requeues; the n-th one starts the failure handler run "<run id>.failure.<n>".
-- (PostgreSQL's migration 0006 does the same.)
ALTER TABLE runs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
