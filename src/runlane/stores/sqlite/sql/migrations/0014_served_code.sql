-- runlane schema for SQLite, version 14: routing by code (PostgreSQL's migration 0017 does the
-- same), and the engines that announce themselves.
--
-- An engine claims only the runs whose (workflow, version) it can replay. Each claim queue is
-- now an index whose leading columns are the code: a poll walks each served code's own entries
-- in claim order and stops at its limit, so runs that no engine of the poll serves (a version
-- mid-deploy) cost it nothing, however many they are. They replace the claim queues' indexes.
DROP INDEX runs_pickup;
DROP INDEX runs_wake_at;
DROP INDEX runs_lease_expires_at;
DROP INDEX runs_deadline_at;
CREATE INDEX runs_pending_code ON runs (workflow, version, priority DESC, created_at, id)
    WHERE status = 'pending';
CREATE INDEX runs_due_code ON runs (workflow, version, wake_at, id)
    WHERE status IN ('blocked', 'suspended');
CREATE INDEX runs_leases_code ON runs (workflow, version, lease_expires_at, id)
    WHERE status IN ('cancelling', 'running');
CREATE INDEX runs_deadlines_code ON runs (workflow, version, deadline_at, id)
    WHERE deadline_at IS NOT NULL
      AND status IN ('blocked', 'cancelling', 'paused', 'pending', 'running', 'suspended');

-- Engines announce themselves: what each serves (JSON arrays), and its heartbeat.
CREATE TABLE engines (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    namespace TEXT,
    started_at TEXT NOT NULL,
    last_beat_at TEXT NOT NULL,
    lease REAL NOT NULL,
    serves TEXT NOT NULL,
    groups TEXT NOT NULL
);
