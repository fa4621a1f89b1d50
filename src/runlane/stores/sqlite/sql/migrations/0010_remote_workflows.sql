-- runlane schema for SQLite, version 10: remote workflow turns (PostgreSQL's migration 0011 does
-- the same).

-- The task id of the remote workflow turn the run waits for a decision on (while suspended);
-- a decision for any other id is dropped.
ALTER TABLE runs ADD COLUMN awaiting_decision_task_id TEXT;
