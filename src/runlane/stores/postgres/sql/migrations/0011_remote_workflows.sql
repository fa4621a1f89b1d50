-- runlane schema for PostgreSQL, version 11: remote workflow turns (SQLite's migration 0010 does
-- the same).

-- The task id of the remote workflow turn the run waits for a decision on (while suspended);
-- a decision for any other id is dropped.
ALTER TABLE runlane_runs ADD COLUMN awaiting_decision_task_id text;

-- Whether the run is suspended waiting for a decision: a wake then leaves it alone (it stamps
-- ``wake_requested_at``). A column of its own keeps the wake fragment that every settlement
-- carries short (statements stay under psycopg's 4,096-character parse cache).
ALTER TABLE runlane_runs ADD COLUMN awaits_decision boolean
    GENERATED ALWAYS AS (status = 'suspended' AND awaiting_decision_task_id IS NOT NULL) STORED;
